#pragma once
/// Settings that take effect only when a process starts (the tuning guide's CPU section): the
/// memory allocator and the OpenMP runtime, preloaded with LD_PRELOAD; glibc's malloc tunables
/// (GLIBC_TUNABLES); OpenMP's thread binding (OMP_PROC_BIND, OMP_PLACES); the CPUs a process may
/// run on (sched_setaffinity) and the NUMA node its CPUs and memory are bound to (as numactl
/// --cpunodebind --membind). A process gets them the way a user's would: from its parent, before
/// it executes (start_with()). Plain system calls and files; no LibTorch.

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace ptune::system {

/// What starting a process with a config's `process` section means on this machine.
struct ProcessPlan {
  std::vector<std::pair<std::string, std::string>> env;  // variables set (an empty value: unset)
  std::vector<std::string> preload;                      // libraries, in LD_PRELOAD's order
  std::vector<int> cpus;                                 // the CPUs it may run on; empty: as its parent
  int numa_node = -1;                                    // memory bound to this node; -1: none
  std::vector<std::string> notes;                        // what does not apply here ("one NUMA node: ...")
};

/// The plan for `p`, checked against this machine. Throws ConfigError naming the key, the value
/// and what is allowed: a library that is not installed (with the package that has it), a CPU
/// this process may not use, a NUMA node that does not exist.
ProcessPlan plan_process(const config::ProcessConfig& p);

/// Whether two sections start the same process (a numa_node that does not apply counts as none).
bool same_process(const config::ProcessConfig& a, const config::ProcessConfig& b);

/// Whether `p` is a default process, as plan_process() sees it on this machine.
bool default_process(const config::ProcessConfig& p);

/// Where a preloaded library is looked for: PTUNE_LIBRARY_PATH's folders alone when it is set;
/// else LD_LIBRARY_PATH's, the active Python environment's lib/ (VIRTUAL_ENV, CONDA_PREFIX: where
/// `pip install intel-openmp` puts libiomp5.so), then the system's library folders.
std::vector<std::string> library_dirs();

/// The first of library_dirs() holding `file`, joined with it; "" when none does.
std::string find_library(const std::string& file);

/// This process's environment with the plan applied, as execve() takes it ("NAME=value"): the
/// plan's variables set (replacing the inherited ones), its libraries first in LD_PRELOAD, and
/// GLIBC_TUNABLES's entries appended to any inherited ones.
std::vector<std::string> environment_with(const ProcessPlan& plan);

/// Binds the calling process to the plan's CPUs and NUMA node's memory. Only system calls: safe
/// in a child between fork() and exec(). Returns 0 or the errno of the call that failed.
int bind_process(const ProcessPlan& plan);

/// CPUs this process may run on, ascending: the calling thread's affinity when first called. The
/// executable calls it before it loads LibTorch, whose OpenMP runtime binds the first thread to
/// one core under OMP_PROC_BIND (process.bind_threads): the process's CPUs, not that thread's.
const std::vector<int>& allowed_cpus();

/// Parses a CPU list ("0-3,8"). Throws ConfigError naming `key` and the text.
std::vector<int> parse_cpu_list(const std::string& text, const std::string& key);

/// "0-3,8": the inverse of parse_cpu_list for a sorted list.
std::string cpu_list_text(const std::vector<int>& cpus);

/// NUMA nodes with CPUs on this machine (/sys/devices/system/node), ascending; {0} when unknown.
std::vector<int> numa_nodes();

/// What a process that started with settings reports of itself: the allocator and OpenMP
/// libraries mapped into it, glibc's tunables, the CPUs it may run on and its memory policy.
/// One line for a row's notes.
std::string describe_this_process();

/// Hands the free part of the heap back to the kernel (glibc's malloc_trim; another malloc
/// preloaded keeps its own): called where a pipeline has been freed and another is about to be
/// built in the same process, so that the next one is built on pages no earlier pipeline used,
/// as a fresh process's is (docs/statistics.md, "The first pipeline of a process"). It sets
/// nothing: glibc's thresholds stay as they were. Throws nothing.
void return_free_memory();

/// `strings` as execve takes them: a pointer to each, then a null pointer (pointing into
/// `strings`, which must outlive them). Made before a fork: the child only reads them.
std::vector<char*> c_strings(std::vector<std::string>& strings);

}  // namespace ptune::system
