#pragma once
/// The process groups whose processes are the job's own for the load view (system/load.hpp,
/// job_processes): the instances of a user's program that a sweep row runs (proc/program.hpp),
/// with every process they start (DataLoader workers, a launcher's ranks), in the group or not.

#include <cstdint>

namespace ptune::system {

/// Counts every process of process group `pgid`, and every process descended from its leader
/// (process `pgid`) whatever its session or group (a launcher's ranks started with setsid), as
/// the job's own from now on (`own` true) or no longer (false). A process of such a group that ends has its
/// time in its parent's, as a child's. Thread-safe; throws nothing.
void own_process_group(int64_t pgid, bool own);

}  // namespace ptune::system
