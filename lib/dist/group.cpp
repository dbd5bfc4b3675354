#include "dist/group.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <mutex>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/module.h>
#include <torch/torch.h>

#include "dist/backends.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"

namespace ptune::dist {
namespace {

/// The addresses of `host`:`port` (numeric or a name), for `socktype`. Throws
/// std::runtime_error with the resolver's message.
struct AddrList {
  addrinfo* head = nullptr;
  AddrList(const std::string& host, int port, int socktype) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = socktype;
    hints.ai_flags = AI_NUMERICSERV;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &head);
    if (rc != 0) throw std::runtime_error("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  ~AddrList() {
    if (head) ::freeaddrinfo(head);
  }
  AddrList(const AddrList&) = delete;
  AddrList& operator=(const AddrList&) = delete;
};

std::string numeric(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* in = a->sa_family == AF_INET6
                       ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr)
                       : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr);
  return ::inet_ntop(a->sa_family, in, buf, sizeof buf) ? buf : "";
}

}  // namespace

int listen_on(const std::string& host, int port) {
  AddrList addrs(host, port, SOCK_STREAM);
  std::string why = "no address";
  for (addrinfo* a = addrs.head; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    const int err = errno;
    why = std::strerror(err);
    if (a->ai_next || a != addrs.head) why = numeric(a->ai_addr) + ": " + why;  // a name of several addresses
    if (err == EADDRNOTAVAIL) why += " (not an address of this machine)";
    if (err == EADDRINUSE) why += " (another run on this port? choose another MASTER_PORT)";
    ::close(fd);
  }
  throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
}

std::string local_address_towards(const std::string& host, int port) {
  try {
    AddrList addrs(host, port, SOCK_DGRAM);
    for (addrinfo* a = addrs.head; a; a = a->ai_next) {
      // Connecting a UDP socket only asks the kernel for a route: no packet leaves.
      const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
      ::close(fd);
      if (ok) return numeric(reinterpret_cast<sockaddr*>(&local));
    }
  } catch (const std::exception&) {
  }
  return "";
}

void Pending::wait() {
  if (!work_) return;
  try {
    work_->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error("collective failed (a rank died or dist.timeout_s passed?): " + message_of(e));
  }
}

void Pending::wait_host() {
  if (!work_) return;
  try {
    // With a timeout, NCCL's work blocks the host until done and throws when it runs out.
    const bool ok = timeout_.count() > 0 ? work_->wait(timeout_) : work_->wait();
    if (!ok) throw std::runtime_error("timed out after " + std::to_string(timeout_.count() / 1000) + " s");
  } catch (const std::exception& e) {
    throw std::runtime_error("collective failed (a rank died or dist.timeout_s passed?): " + message_of(e));
  }
}

Group::Group() = default;

Group::Group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, config::Backend backend,
             const c10::Device& device, std::chrono::milliseconds timeout, const std::string& gloo_host)
    : rank_(rank), size_(size), backend_name_(config::name(backend)), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("dist: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(size) + ")");
  if (backend == config::Backend::kNccl) {
    if (!device.is_cuda())
      throw ConfigError("dist.backend: nccl needs a CUDA device; use gloo (or auto) on the CPU");
    device_ = device;
    backend_ = make_nccl(store, rank, size, device.index(), timeout);
  } else if (backend == config::Backend::kGloo) {
    device_ = c10::Device(c10::kCPU);
    backend_ = make_gloo(store, rank, size, timeout, gloo_host);
  } else {
    throw std::invalid_argument("dist: a group's backend is nccl or gloo (resolve_backend), not auto");
  }
}

Pending Group::all_reduce_async(at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
  if (!backend_) return Pending();
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp(op);
  return Pending(backend_->allreduce(tensors, opts), timeout_);
}

Pending Group::all_reduce_sum_async(at::Tensor& tensor) {
  return all_reduce_async(tensor, c10d::ReduceOp::SUM);
}

void Group::all_reduce_sum(at::Tensor& tensor) { all_reduce_async(tensor, c10d::ReduceOp::SUM).wait_host(); }

void Group::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (!backend_) return;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    Pending(backend_->broadcast(one, opts), timeout_).wait_host();
  }
}

std::vector<double> Group::reduce_values(const std::vector<double>& values, c10d::ReduceOp::RedOpType op) {
  if (!backend_ || values.empty()) return values;
  at::Tensor t = torch::tensor(values, torch::kFloat64).to(device_);
  all_reduce_async(t, op).wait_host();
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<double> Group::max(const std::vector<double>& values) {
  return reduce_values(values, c10d::ReduceOp::MAX);
}

std::vector<double> Group::sum(const std::vector<double>& values) {
  return reduce_values(values, c10d::ReduceOp::SUM);
}

void Group::barrier() {
  // An all-reduce of one number: works the same on every backend and device.
  if (!backend_) return;
  sum({0.0});
}

config::Backend resolve_backend(config::Backend backend, const c10::Device& device) {
  if (backend == config::Backend::kAuto)
    return device.is_cuda() ? config::Backend::kNccl : config::Backend::kGloo;
  if (backend == config::Backend::kNccl && !device.is_cuda())
    throw ConfigError("dist.backend: nccl needs a CUDA device, the device is the CPU; use gloo or auto");
  return backend;
}

c10::Device rank_device(const std::string& spec) {
  if (!system::is_distributed()) return runtime::resolve_device(spec);
  const bool wants_cuda = spec == "cuda" || (spec == "auto" && runtime::cuda::available());
  if (!wants_cuda) return runtime::resolve_device(spec);
  runtime::resolve_device("cuda");  // the usual error when no GPU is visible
  const int n = runtime::cuda::device_count();
  int index = system::local_rank();
  if (index >= n) {
    // Slurm's --gpus-per-task (or a per-rank CUDA_VISIBLE_DEVICES) shows each rank its one GPU.
    if (n != 1)
      throw ConfigError("device: '" + spec + "': LOCAL_RANK " + std::to_string(index) +
                        " has no GPU of its own; " + std::to_string(n) +
                        " visible (run at most one rank per GPU)");
    index = 0;
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int64_t rank_cpu_threads(int64_t configured) {
  if (configured > 0) return configured;
  // The CPUs this process may run on (process.cpus, taskset, a container's limit).
  const int64_t cpus = std::max<int64_t>(1, static_cast<int64_t>(system::allowed_cpus().size()));
  // One process: what a default PyTorch process uses (one thread per physical core).
  if (!system::is_distributed())
    return std::max<int64_t>(1, std::min<int64_t>(at::intraop_default_num_threads(), cpus));
  return std::max<int64_t>(1, cpus / std::max(1, system::environment().local_world_size));
}

namespace {
std::mutex g_group_mu;
/// The process's group. Never destroyed by a static destructor: tearing a process group down
/// at exit (CUDA and the backend's threads already going) can hang or crash; close_process_group
/// shuts its backend down while the process is still whole.
std::shared_ptr<Group>& group_slot() {
  static auto* slot = new std::shared_ptr<Group>();
  return *slot;
}
}  // namespace

void Group::close(bool graceful) {
  if (!backend_) return;
  try {
    if (graceful)
      backend_->shutdown();
    else
      backend_->abort();
  } catch (const std::exception& e) {
    log::debug(std::string("dist: closing the process group: ") + message_of(e));
  }
  backend_.reset();
}

void close_process_group(bool graceful) {
  std::lock_guard<std::mutex> lock(g_group_mu);
  if (group_slot()) group_slot()->close(graceful);
}

namespace {

std::atomic<const std::atomic<bool>*> g_stop{nullptr};

bool stop_requested() {
  const std::atomic<bool>* stop = g_stop.load();
  return stop && stop->load();
}

using Clock = std::chrono::steady_clock;

/// The TCPStore's options for this rank. As torch.distributed's env:// rendezvous: rank 0
/// serves the store, unless torchrun's agent already does (then every rank is a client, keys
/// scoped by the restart attempt).
c10d::TCPStoreOptions store_options(const system::Environment& env) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.waitWorkers = false;  // counted in agree_to_start, where a stop signal is seen
  // LibTorch's TCPStore server listens on every interface (IPv6 "::" or 0.0.0.0) and has no
  // option to choose; it does take over a listening socket (masterListenFd), so rank 0
  // listens on MASTER_ADDR only.
  if (!o.isServer) return o;
  try {
    o.masterListenFd = listen_on(env.master_addr, env.master_port);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank 0 serves the rendezvous and " + std::string(e.what()) +
                             "; MASTER_ADDR must be an address of rank 0's machine");
  }
  return o;
}

/// The TCPStore served (rank 0) or reached (a client, in attempts of at most a second until
/// `deadline`). `secs` is dist.timeout_s as the messages write it.
c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const system::Environment& env, c10d::TCPStoreOptions o,
                                                  std::chrono::milliseconds timeout,
                                                  Clock::time_point deadline, const std::string& secs) {
  constexpr auto kAttempt = std::chrono::milliseconds(1000);
  for (;;) {
    if (stop_requested()) throw Interrupted();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    o.timeout = o.isServer ? timeout : std::max(std::chrono::milliseconds(1), std::min(left, kAttempt));
    try {
      return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    } catch (const std::exception& e) {
      if (stop_requested()) throw Interrupted();
      if (o.isServer) throw;
      if (Clock::now() >= deadline)
        throw std::runtime_error(std::string("rank 0's store did not answer within dist.timeout_s (") + secs +
                                 " s); the last attempt: " + message_of(e));
    }
  }
}

/// The store's keys: the count of ranks joined, and the outcome they follow.
constexpr const char* kJoined = "joined";
constexpr const char* kOutcome = "outcome";

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

/// This rank's look at the rendezvous: the outcome written ("go", "stop" or "late"), written by
/// this rank when it is the first to see every rank joined, its stop flag set or the deadline
/// passed; "" while none is.
std::string rendezvous_outcome(c10d::Store& store, int world_size, Clock::time_point deadline) {
  std::string proposal;
  if (stop_requested())
    proposal = "stop";
  else if (store.add(kJoined, 0) >= world_size)
    proposal = "go";
  else if (Clock::now() >= deadline)
    proposal = "late";
  if (!proposal.empty())
    return text_of(store.compareSet(kOutcome, {}, std::vector<uint8_t>(proposal.begin(), proposal.end())));
  return store.check({kOutcome}) ? text_of(store.get(kOutcome)) : "";
}

/// Leaves a rendezvous whose outcome is "stop" (throws Interrupted) or "late" (throws
/// std::runtime_error with the count of ranks joined).
[[noreturn]] void leave_rendezvous(c10d::Store& store, const std::string& outcome, bool server,
                                   int world_size, const std::string& secs) {
  const int64_t joined = store.add(kJoined, 0);
  // The store leaves with rank 0: it waits (up to 2 s) for the others to have read it.
  store.add("seen", 1);
  for (int i = 0; i < 100 && server && store.add("seen", 0) < joined; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (outcome == "stop") throw Interrupted();
  throw std::runtime_error("only " + std::to_string(joined) + " of " + std::to_string(world_size) +
                           " ranks joined within dist.timeout_s (" + secs + " s)");
}

/// Every rank counts itself in; then the first rank to see all joined, its stop flag set or
/// the deadline passed writes that outcome, and every rank follows it: either all go on to
/// the backend's own rendezvous (which cannot be interrupted, and needs every rank), or none.
void agree_to_start(c10d::Store& store, const system::Environment& env, bool server,
                    Clock::time_point deadline, const std::string& secs) {
  try {
    store.add(kJoined, 1);
    for (;;) {
      const std::string outcome = rendezvous_outcome(store, env.world_size, deadline);
      if (outcome == "go") return;
      if (!outcome.empty()) leave_rendezvous(store, outcome, server, env.world_size, secs);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception&) {
    if (stop_requested()) throw Interrupted();  // rank 0, stopped too, took the store with it
    throw;
  }
}

/// The rendezvous store, joined in steps short enough to notice a stop signal: LibTorch's own
/// waits (a client's connect until its timeout, the server's wait for every worker) cannot be
/// interrupted, and a rank stopped before it joined would keep the others waiting for all of
/// dist.timeout_s. Throws Interrupted when the stop flag is set, std::runtime_error on failure.
c10::intrusive_ptr<c10d::Store> join_store(const system::Environment& env,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const c10d::TCPStoreOptions o = store_options(env);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", static_cast<double>(timeout.count()) / 1000.0);
  auto tcp = open_tcp_store(env, o, timeout, deadline, secs);
  tcp->setTimeout(timeout);
  auto store = c10::make_intrusive<c10d::PrefixStore>("ptune/" + std::to_string(env.restart_count), tcp);
  agree_to_start(*store, env, o.isServer, deadline, secs);
  return store;
}

}  // namespace

void set_rendezvous_stop(const std::atomic<bool>* stop) { g_stop.store(stop); }

std::shared_ptr<Group> process_group(const config::DistConfig& cfg, const c10::Device& device) {
  auto& mu = g_group_mu;
  std::shared_ptr<Group>& group = group_slot();
  static std::string joined_as;  // the settings the group was joined with
  auto settings = [&] {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%g", cfg.timeout_s);
    return std::string(config::name(resolve_backend(cfg.backend, device))) + " on " + device.str() +
           ", dist.timeout_s " + timeout;
  };
  std::lock_guard<std::mutex> lock(mu);
  if (group) {
    // One group per process: a later sweep row cannot move it to another backend or device.
    if (group->distributed()) {
      const std::string asked = settings();
      if (asked != joined_as)
        throw ConfigError("dist: this data-parallel run joined its process group as " + joined_as +
                          "; a row cannot change that (asked for " + asked + ")");
    }
    return group;
  }
  const system::Environment env =
      system::parse_environment([](const char* name) { return std::getenv(name); }, cfg);
  if (!env.distributed()) {
    group = std::make_shared<Group>();
    return group;
  }
  const config::Backend backend = resolve_backend(cfg.backend, device);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeout_s * 1000.0));
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  log::debug("rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size) + ": rendezvous at " +
             where + " (" + env.launcher + "), backend " + config::name(backend));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = join_store(env, timeout);
  } catch (const Interrupted&) {
    throw InterruptedAtStart();
  } catch (const std::exception& e) {
    throw std::runtime_error("dist: rendezvous at " + where + " failed for rank " + std::to_string(env.rank) +
                             " of " + std::to_string(env.world_size) + ": " + message_of(e));
  }
  try {
    // Gloo binds the address through which this machine reaches the master (unless
    // GLOO_SOCKET_IFNAME names an interface): loopback for a rendezvous on loopback, else the
    // interface that routes to node 0 -- not whatever this host's name resolves to.
    const std::string bind = local_address_towards(env.master_addr, env.master_port);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (backend == config::Backend::kGloo)
      log::debug("rank " + std::to_string(env.rank) + ": Gloo binds " +
                 (ifname && *ifname ? std::string("interface ") + ifname + " (GLOO_SOCKET_IFNAME)"
                  : bind.empty()    ? std::string("this host's name")
                                    : bind + " (its route to " + where + ")"));
    group = std::make_shared<Group>(store, env.rank, env.world_size, backend, device, timeout, bind);
    joined_as = settings();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    if (stop_requested()) throw InterruptedAtStart();  // a rank stopped within the backend's rendezvous
    throw std::runtime_error("dist: rendezvous at " + where + ": rank " + std::to_string(env.rank) + " of " +
                             std::to_string(env.world_size) + " could not join the " + config::name(backend) +
                             " group (every rank must come within dist.timeout_s): " + message_of(e));
  }
  return group;
}

void broadcast_module(torch::nn::Module& module, Group& group, int root) {
  if (!group.distributed()) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> all = module.parameters();
  for (auto& b : module.buffers()) all.push_back(b);
  // One flat tensor per (dtype, device), in module order: few collectives, as DDP's
  // _sync_module_states does with its coalesced broadcasts.
  std::vector<std::vector<at::Tensor>> groups;
  for (auto& t : all) {
    bool placed = false;
    for (auto& g : groups) {
      if (g.front().scalar_type() == t.scalar_type() && g.front().device() == t.device()) {
        g.push_back(t);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({t});
  }
  for (auto& g : groups) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : g) flat_parts.push_back(t.contiguous().view(-1));
    std::vector<at::Tensor> flat{at::cat(flat_parts)};
    group.broadcast(flat, root);
    int64_t offset = 0;
    for (auto& t : g) {
      t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace ptune::dist
