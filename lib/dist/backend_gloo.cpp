// Gloo process groups. ProcessGroupGloo.hpp includes gloo's own headers, which the torch wheel
// does not ship: the build takes them from Debian's libgloo-dev (PTUNE_HAS_GLOO). Only their
// declarations are used; the Gloo code that runs is the copy inside libtorch_cpu (Debian's
// libgloo.so is never linked). ptune touches no Gloo type by value: the device is handed over
// as a shared_ptr that libtorch itself creates, so a header snapshot older than the Gloo that
// libtorch was built with is harmless here.
#include "dist/backends.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/errors.hpp"

#if PTUNE_HAS_GLOO
#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace ptune::dist {

#if PTUNE_HAS_GLOO

c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout, const std::string& bind_host) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // As torch.distributed: GLOO_SOCKET_IFNAME names the interface; otherwise this host's name
  // (falling back to loopback when it does not resolve).
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname && *ifname) {
    try {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("GLOO_SOCKET_IFNAME=") + ifname +
                               ": no usable interface of that name (" + message_of(e) + ")");
    }
  } else if (!bind_host.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(bind_host));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#else

c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                            std::chrono::milliseconds, const std::string&) {
  throw ConfigError(
      "dist.backend: this ptune was built without Gloo's headers, so it cannot run data-parallel on CPUs; "
      "install libgloo-dev (scripts/setup does) and rebuild");
}

#endif

}  // namespace ptune::dist
