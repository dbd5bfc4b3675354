// NCCL process groups (built when LibTorch has CUDA). Compiles and links on machines without a
// GPU; runs wherever one is visible.
#include "dist/backends.hpp"

#include <c10/cuda/CUDAFunctions.h>

#define USE_C10D_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace ptune::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            int device_index, std::chrono::milliseconds timeout) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // Binding the group to its device lets NCCL create the communicator now (eager init, as
  // init_process_group(device_id=...) does), so a missing peer shows at start-up rather than at
  // the first all-reduce.
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  group->setBoundDeviceId(device);
  group->eagerConnectSingleDevice(device);
  return group;
}

}  // namespace ptune::dist
