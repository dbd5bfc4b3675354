#pragma once
/// A process group on c10d: the ranks of a data-parallel run and the collectives between them
/// (Gloo on CPUs, NCCL on GPUs), joined through a c10d TCPStore at MASTER_ADDR:MASTER_PORT.
/// A default-constructed Group is a single process: rank 0 of 1, every collective a no-op.

#include <chrono>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "config/config.hpp"
#include "system/rendezvous.hpp"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ptune::dist {

/// A collective in flight. wait() blocks until it is done (on a GPU: until the current stream
/// waits for it) and rethrows its failure; an empty Pending (single process) is already done.
class Pending {
 public:
  /// Nothing in flight.
  Pending() = default;
  /// Takes a backend's work item; `timeout` bounds wait_host().
  explicit Pending(c10::intrusive_ptr<c10d::Work> work,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(0))
      : work_(std::move(work)), timeout_(timeout) {}
  /// Waits for the collective as DDP does: Gloo blocks the host until it is done; NCCL makes
  /// the current CUDA stream wait for it and returns at once (a failure or timeout there is
  /// caught by NCCL's watchdog, which ends the process with its message). Throws
  /// std::runtime_error (the backend's message) when it failed.
  void wait();
  /// Blocks the host until the collective is done, on every backend, and throws
  /// std::runtime_error when it failed or the timeout passed (a peer died, dist.timeout_s).
  void wait_host();

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_{0};  // 0: the backend's own
};

class Group {
 public:
  /// A single-process group: rank 0 of 1; collectives leave their tensors as they are.
  Group();

  /// Joins a group of `size` ranks over `store` with `backend` ("gloo" or "nccl"), as rank
  /// `rank`. NCCL runs on `device` (a CUDA device, made current); Gloo on the CPU (CUDA tensors
  /// are staged through the host; it binds to `gloo_host` when not empty, else as make_gloo).
  /// Blocks until every rank has joined or `timeout` passes, which is also the timeout of every
  /// later collective. Throws ConfigError for a backend the build or the device cannot use,
  /// std::runtime_error when joining fails.
  Group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, config::Backend backend,
        const c10::Device& device, std::chrono::milliseconds timeout, const std::string& gloo_host = "");

  /// This process's rank in the group.
  int rank() const { return rank_; }
  /// Number of ranks.
  int size() const { return size_; }
  /// True when there is more than one rank.
  bool distributed() const { return size_ > 1; }
  /// "gloo", "nccl", or "none" for a single process.
  const std::string& backend_name() const { return backend_name_; }

  /// Starts summing `tensor` over all ranks, in place (dense, contiguous). Returns the pending
  /// work; with a single process, an empty Pending and the tensor unchanged.
  Pending all_reduce_sum_async(at::Tensor& tensor);
  /// Sums `tensor` over all ranks, in place, and waits (host-blocking). Throws as
  /// Pending::wait_host; so do the collectives below.
  void all_reduce_sum(at::Tensor& tensor);
  /// Copies rank `root`'s tensors into every rank's (same shapes and dtypes on every rank) and
  /// waits. Throws as Pending::wait_host.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  /// The maximum over all ranks of each value (host numbers; one collective). Throws as
  /// Pending::wait_host.
  std::vector<double> max(const std::vector<double>& values);
  /// The sum over all ranks of each value (host numbers; one collective). Throws as
  /// Pending::wait_host.
  std::vector<double> sum(const std::vector<double>& values);
  /// Waits until every rank has reached this call. Throws as Pending::wait_host.
  void barrier();
  /// Shuts the backend down (NCCL: communicators finalized, watchdog threads joined) when
  /// `graceful`, else aborts it (after a failure, when a peer may be gone). Collectives after
  /// it do nothing. Never throws.
  void close(bool graceful);

 private:
  int rank_ = 0;
  int size_ = 1;
  std::string backend_name_ = "none";
  c10::Device device_{c10::kCPU};  // where host values travel: the CUDA device for NCCL
  /// Starts an in-place all-reduce with `op`; an empty Pending without a backend.
  Pending all_reduce_async(at::Tensor& tensor, c10d::ReduceOp::RedOpType op);
  /// Reduces host numbers over all ranks with `op` (one collective, host-blocking).
  std::vector<double> reduce_values(const std::vector<double>& values, c10d::ReduceOp::RedOpType op);

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::chrono::milliseconds timeout_{0};
};

/// The backend `dist.backend` names for a device: "auto" is NCCL on CUDA and Gloo on the CPU.
/// Throws ConfigError for nccl on a CPU device.
config::Backend resolve_backend(config::Backend backend, const c10::Device& device);

/// The device a rank of this process uses for the config's `device` spec: in a distributed run,
/// "auto" (with a GPU visible) and "cuda" become cuda:LOCAL_RANK; "cuda:N" is kept as written.
/// Throws ConfigError as runtime::resolve_device, or when LOCAL_RANK has no GPU.
c10::Device rank_device(const std::string& spec);

/// LibTorch intra-op threads for a rank: `configured` when > 0; else, in one process, what a default
/// PyTorch process uses (one per physical core), at most one per CPU it may run on; in a
/// data-parallel run, those CPUs shared among the ranks on this machine (at least 1).
int64_t rank_cpu_threads(int64_t configured);

/// This process's group: on the first call, joins the one the environment names (torchrun's or
/// Slurm's variables, completed by `cfg`: master address and port, backend, timeout) through a
/// TCPStore that rank 0 serves, listening on MASTER_ADDR only; Gloo binds GLOO_SOCKET_IFNAME's
/// interface, else the local address that routes to MASTER_ADDR. A single-process Group when
/// the environment names no world.
/// Later calls return the same group (ConfigError when a distributed one is asked for with
/// another backend, device or dist.timeout_s, as a sweep row changing them would). Throws
/// std::runtime_error when the rendezvous or the backend fails (e.g. no rank 0 listening
/// within dist.timeout_s), ConfigError for a backend the device cannot use.
std::shared_ptr<Group> process_group(const config::DistConfig& cfg, const c10::Device& device);

/// The process's stop flag (set by SIGINT or SIGTERM; null: none): a rendezvous in progress
/// gives up once it is set, and process_group throws InterruptedAtStart, rather than waiting
/// out dist.timeout_s for a rank that was stopped before it joined.
void set_rendezvous_stop(const std::atomic<bool>* stop);

/// Closes this process's group (Group::close), if one was joined; call once, at exit, after
/// the last collective. Never throws.
void close_process_group(bool graceful);

/// A TCP socket listening on `host`:`port` only (its first address that binds), for the
/// rendezvous store to take over. Throws std::runtime_error naming the address and the cause
/// (not an address of this machine, port in use, a name that does not resolve).
int listen_on(const std::string& host, int port);

/// The numeric local address this machine sends from to reach `host` (the kernel's route; no
/// packet is sent), e.g. "10.0.0.2", or "127.0.0.1" for a loopback host. "" when `host` does
/// not resolve or has no route. Never throws.
std::string local_address_towards(const std::string& host, int port);

/// Copies rank `root`'s parameters and buffers into every rank's module (one broadcast per
/// dtype, as DDP does at construction). No-op in a single process. Throws as Pending::wait_host.
void broadcast_module(torch::nn::Module& module, Group& group, int root = 0);

}  // namespace ptune::dist
