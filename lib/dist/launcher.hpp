#pragma once
/// `ptune launch`: starts N ranks of a ptune command on this machine, as torchrun does for one
/// node of one or several (--nnodes, --node-rank: one launch per machine, all pointed at node
/// 0's --master-addr and --master-port). Each rank is this program (fork + exec) with RANK,
/// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT set; its
/// stderr lines come out prefixed "[rank R] " and its stdout lines as they are (only rank 0
/// prints results, so stdout stays machine-readable, as under torchrun); SIGINT and SIGTERM are
/// forwarded to every rank;
/// and when one rank fails, the others on this node get SIGTERM, then SIGKILL after a grace
/// period, so a launch never hangs (ranks on other nodes fail their next collective).

#include <string>

#include "system/launch_options.hpp"

namespace ptune::dist {

/// How a launch ended.
struct LaunchResult {
  int exit_code = 0;  // 0: every rank succeeded; 130: interrupted; else the failing rank's
                      // status (1 when it was killed by a signal)
  std::string error;  // "" on success, else e.g. "rank 1 exited with status 1; stopped the others";
                      // across nodes the node and host are named, and the rank's own last
                      // "ptune: error: " line follows after ": "
};

/// CPU ranks a machine may run per core (each rank is a whole ptune process with LibTorch).
inline constexpr int kRanksPerCore = 4;

/// The most ranks launch() starts on this machine: kRanksPerCore per core, or one per GPU
/// where there are more GPUs than that.
int max_ranks_per_node();

/// Runs the ranks to completion and returns how they ended; never waits on a stuck rank once
/// another has failed (grace_s, then SIGKILL). Throws UsageError for nproc_per_node < 1 or
/// above max_ranks_per_node(), an empty command, a nested `launch`, a port out of range,
/// node_rank outside [0, nnodes), or several nodes without master_addr or with port 0;
/// std::runtime_error when a pipe, fork or free port cannot be had.
LaunchResult launch(const system::LaunchOptions& options);

/// A TCP port that was free on 127.0.0.1 a moment ago (the OS's choice). Throws
/// std::runtime_error when no socket can be bound.
int free_port();

}  // namespace ptune::dist
