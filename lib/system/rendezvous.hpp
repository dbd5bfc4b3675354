#pragma once
/// Who this process is in a data-parallel run, read from the environment as torchrun sets it
/// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `ptune launch`
/// sets the same) or as Slurm's srun sets it (SLURM_PROCID, SLURM_STEP_NUM_TASKS or
/// SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST). No such variables: one process, rank 0 of
/// 1, and every distributed query answers as a single process would.

#include <functional>
#include <string>

#include "config/config.hpp"

namespace ptune::system {

/// One process's place in the run.
struct Environment {
  int rank = 0;                   // global rank, 0 .. world_size-1
  int world_size = 1;             // processes in all; 1 = not distributed
  int local_rank = 0;             // rank on this machine: selects cuda:local_rank
  int local_world_size = 1;       // processes on this machine (CPU threads are shared among them)
  std::string master_addr;        // rendezvous host (rank 0's TCPStore); "" when not distributed
  int master_port = 0;            // rendezvous port; 0 when not distributed
  std::string launcher = "none";  // torchrun (also ptune launch) | slurm | none
  bool agent_store = false;       // torchrun's agent serves the TCPStore (TORCHELASTIC_USE_AGENT_STORE=True):
                                  // every rank connects as a client; else rank 0 serves it
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT: store keys are scoped per attempt

  /// True when more than one process takes part.
  bool distributed() const { return world_size > 1; }
};

/// Reads one environment variable: its value, or nullptr when unset.
using Getenv = std::function<const char*(const char*)>;

/// Parses the rendezvous variables. torchrun's (RANK and WORLD_SIZE) win over Slurm's
/// (SLURM_PROCID with SLURM_STEP_NUM_TASKS, or SLURM_NTASKS). The master address is MASTER_ADDR,
/// else cfg.master_addr, else (Slurm) the first host of SLURM_STEP_NODELIST/SLURM_JOB_NODELIST;
/// the port is MASTER_PORT, else cfg.master_port. Returns a single-process Environment when
/// neither set of variables names a world. Throws std::runtime_error naming the variable for a
/// malformed or inconsistent value (RANK not below WORLD_SIZE, a non-number, no master address
/// when `need_address`; without it master_addr may stay "" — enough for rank queries).
Environment parse_environment(const Getenv& getenv, const config::DistConfig& cfg = {},
                              bool need_address = true);

/// The first host of a Slurm node list: "gpu[03-05,07],cpu1" -> "gpu03", "a,b" -> "a".
/// Returns "" for an empty list.
std::string first_slurm_host(const std::string& nodelist);

/// This process's Environment, parsed once from the real environment without a config and
/// without requiring a master address (enough for rank queries; the address, perhaps from
/// dist.master_addr, is resolved when the process group is joined). Throws as
/// parse_environment on the first call.
const Environment& environment();

/// This process's global rank: 0 when not distributed. Never throws (0 on a malformed env).
int world_rank();
/// Processes in the run: 1 when not distributed. Never throws (1 on a malformed env).
int world_size();
/// This process's rank on its machine: 0 when not distributed. Never throws.
int local_rank();
/// True when the environment names more than one process. Never throws.
bool is_distributed();

}  // namespace ptune::system
