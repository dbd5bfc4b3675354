// NCCL stand-in for a LibTorch built without CUDA: every request is a clear error.
#include "dist/backends.hpp"

#include "core/errors.hpp"

namespace ptune::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>&, int, int, int,
                                            std::chrono::milliseconds) {
  throw ConfigError("dist.backend: nccl needs a CUDA build of LibTorch; this one has no CUDA (use gloo)");
}

}  // namespace ptune::dist
