#pragma once
/// What the kernel says of a process (/proc/PID/stat), and a command line as a shell reads it:
/// the small pieces that ptune's process code (the load view, row processes, program instances)
/// and its messages share. Torch-free.

#include <cstddef>
#include <string>
#include <vector>

namespace ptune::system {

/// The fields of /proc/PID/stat that ptune reads (proc(5)); times in clock ticks.
struct ProcStat {
  std::string comm;  // the executable's name, at most 15 characters; kept by an ended process
  char state = '?';  // R, S, D, T (stopped), Z (ended, not yet waited for), ...
  long ppid = 0, pgrp = 0;
  long minflt = 0;              // minor page faults
  long utime = 0, stime = 0;    // its own CPU time, all its threads
  long cutime = 0, cstime = 0;  // its children's that it has waited for
  long ticks() const { return utime + stime; }
};

/// `pid` ("self" or a number)'s stat; false when it cannot be read (gone). Throws nothing.
bool read_proc_stat(const std::string& pid, ProcStat* out);

/// One process of the table that a walk of /proc reads: enough to follow parents and to tell a
/// process from a later one that got its pid.
struct ProcEntry {
  int pid = 0, ppid = 0;
  unsigned long long start = 0;  // its start time, clock ticks after boot
  char state = '?';
};

/// Reads every process's entry into `table` (at most `cap`); returns how many it read. Only
/// system calls, no allocation: safe in a child forked from a process with threads.
size_t read_process_table(ProcEntry* table, size_t cap);

/// A process tree: a root process and every process descended from it, whatever the session or
/// process group each has entered (a launcher's workers started with setsid). A member stays one
/// once its parent has ended (it is re-parented outside the tree) until it ends itself. Fixed in
/// size and free of allocation, so that the guard a program instance forks can keep one.
struct ProcessTree {
  static constexpr int kMax = 1024;  // members kept; more are not followed
  struct Member {
    int pid = 0;
    unsigned long long start = 0;
    char state = '?';  // at the last walk
  };
  int root = 0;
  int adopter = 0;  // the child subreaper above the root (not a member): its children are members
  unsigned long long root_start = 0;  // known from the first walk that found the root
  Member members[kMax];
  int count = 0;

  explicit ProcessTree(int root_pid = 0, int adopter_pid = 0) : root(root_pid), adopter(adopter_pid) {}
  /// Brings the members up to date with `table` (read_process_table): drops those that have
  /// ended (a pid that now names a later process included), then adds every process whose
  /// parent is the root, a member or the adopter (a member whose parent ended is re-parented to
  /// it), until no new one appears. Returns how many it added.
  int grow(const ProcEntry* table, size_t n);
  /// Whether every member is stopped (T) or has ended (Z), and there is one.
  bool all_stopped() const;
  /// The members that have not ended (Z: ended, not yet waited for).
  int live() const;
  /// Sends `sig` to every member; `unstopped_only`: only to those not stopped at the last walk.
  void signal(int sig, bool unstopped_only = false) const;
};

/// `word` as a POSIX shell reads it back: itself where it holds only safe characters, else in
/// single quotes. Throws nothing.
std::string shell_quote(const std::string& word);

/// The words of a command line, each shell_quote()d, joined by spaces.
std::string shell_text(const std::vector<std::string>& argv);

/// In a child between fork() and exec() (only system calls): puts it in a process group of its
/// own (a Ctrl-C at the terminal reaches ptune, which ends the child; SIGSTOP and SIGCONT sent to
/// the group reach all it starts), has the kernel kill it when its parent dies, and unblocks every
/// signal. Returns -1 when `parent` had already died before that took effect (the child must
/// exit), else 0.
int enter_own_group(int parent);

}  // namespace ptune::system
