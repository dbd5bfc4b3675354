#pragma once
/// What the kernel says of a process (/proc/PID/stat), and a command line as a shell reads it:
/// the small pieces that ptune's process code (the load view, row processes, program instances)
/// and its messages share. Torch-free.

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
