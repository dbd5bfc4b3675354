#pragma once
/// The process groups whose processes are the job's own for the load view (system/load.hpp,
/// job_processes): the instances of a user's program that a sweep row runs (proc/program.hpp),
/// with every process they start (DataLoader workers, a launcher's ranks).

#include <cstdint>

namespace ptune::system {

/// Counts every process of process group `pgid` as the job's own from now on (`own` true) or no
/// longer (false). A process of such a group that ends has its time in its parent's, as a
/// child's. Thread-safe; throws nothing.
void own_process_group(int64_t pgid, bool own);

}  // namespace ptune::system
