#pragma once
/// Factories of the c10d backends. Gloo (backend_gloo.cpp) needs gloo's headers at build time
/// (Debian's libgloo-dev; its code is inside libtorch_cpu); NCCL (backend_nccl_cuda.cpp) needs
/// a CUDA LibTorch. Without either, the factory throws ConfigError saying what is missing.

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ptune::dist {

/// A ProcessGroupGloo of `size` ranks over `store` on Gloo's TCP transport, bound to (in this
/// order) the interface GLOO_SOCKET_IFNAME names, as in PyTorch; `bind_host` (an address or
/// name of this machine) when not empty;
/// else this machine's hostname (loopback when it does not resolve). Blocks until all ranks
/// joined or `timeout`. Throws ConfigError when built without Gloo; c10::Error when joining
/// fails.
c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout, const std::string& bind_host);

/// A ProcessGroupNCCL of `size` ranks over `store`, bound to cuda:`device_index` (made the
/// current device). Throws ConfigError when built without CUDA; c10::Error when NCCL fails.
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            int device_index, std::chrono::milliseconds timeout);

}  // namespace ptune::dist
