#include "system/proc_stat.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ptune::system {

bool read_proc_stat(const std::string& pid, ProcStat* out) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string text;
  std::getline(in, text);
  // The command name is in parentheses and may hold spaces: fields start after the last ')'.
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || open > close || close + 2 > text.size())
    return false;
  std::istringstream rest(text.substr(close + 2));
  std::vector<std::string> f;  // from field 3 (state) on
  for (std::string field; f.size() < 15 && rest >> field;) f.push_back(field);
  if (f.size() < 15) return false;
  auto num = [&f](size_t field) { return std::atol(f[field - 3].c_str()); };
  out->comm = text.substr(open + 1, close - open - 1);
  out->state = f[0].empty() ? '?' : f[0][0];
  out->ppid = num(4);
  out->pgrp = num(5);
  out->minflt = num(10);
  out->utime = num(14);
  out->stime = num(15);
  out->cutime = num(16);
  out->cstime = num(17);
  return true;
}

namespace {

/// `n` as decimal digits at `out`; returns the end. Only for positive numbers.
char* put_number(char* out, int n) {
  char digits[16];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + n % 10), n /= 10;
  while (n > 0);
  while (k > 0) *out++ = digits[--k];
  return out;
}

/// A directory name of /proc as a pid; 0 when it is none.
int pid_of_name(const char* name) {
  int pid = 0;
  for (; *name; ++name) {
    if (*name < '0' || *name > '9') return 0;
    pid = pid * 10 + (*name - '0');
  }
  return pid;
}

/// Reads /proc/`pid`/stat's state, parent and start time into `e` with system calls only;
/// false when it is gone or unreadable.
bool read_entry(int pid, ProcEntry* e) {
  char path[32] = "/proc/";
  char* end = put_number(path + 6, pid);
  const char tail[] = "/stat";
  for (const char* t = tail; *t; ++t) *end++ = *t;
  *end = 0;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // Fields start after the last ')' (the command name may hold one): 3 state, 4 ppid, 22 start.
  const char* p = nullptr;
  for (const char* c = buf; *c; ++c)
    if (*c == ')') p = c;
  if (!p || p[1] != ' ') return false;
  p += 2;
  e->pid = pid;
  e->state = *p;
  int field = 3;
  unsigned long long value = 0;
  for (++p; *p && field < 22; ++p) {
    if (*p == ' ') {
      if (field == 4) e->ppid = static_cast<int>(value);
      ++field, value = 0;
    } else {
      value = value * 10 + static_cast<unsigned long long>(*p - '0');
    }
  }
  if (field != 22) return false;
  for (value = 0; *p >= '0' && *p <= '9'; ++p) value = value * 10 + static_cast<unsigned long long>(*p - '0');
  e->start = value;
  return true;
}

struct Dirent64 {  // struct linux_dirent64 (getdents64(2))
  unsigned long long ino;
  long long off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

}  // namespace

size_t read_process_table(ProcEntry* table, size_t cap) {
  const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  size_t n = 0;
  alignas(8) char buf[8192];
  long got;
  while (n < cap && (got = ::syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
    for (long off = 0; off < got && n < cap;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->reclen;
      const int pid = pid_of_name(d->name);
      if (pid > 0 && read_entry(pid, &table[n])) ++n;
    }
  }
  ::close(dir);
  return n;
}

int ProcessTree::grow(const ProcEntry* table, size_t n) {
  // Keep the members that still run (the same process: its pid and start time), with their state.
  int kept = 0;
  for (int m = 0; m < count; ++m)
    for (size_t i = 0; i < n; ++i)
      if (table[i].pid == members[m].pid && table[i].start == members[m].start) {
        members[kept] = members[m];
        members[kept++].state = table[i].state;
        break;
      }
  count = kept;
  int added = 0;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < n && count < kMax; ++i) {
      const ProcEntry& e = table[i];
      bool member = false, parent = false;
      for (int m = 0; m < count && !member; ++m) {
        member = members[m].pid == e.pid;
        parent = parent || members[m].pid == e.ppid;
      }
      const bool root_now = e.pid == root && (root_start == 0 || e.start == root_start);
      if (member || !(root_now || parent || (adopter > 0 && e.ppid == adopter))) continue;
      if (e.pid == root) root_start = e.start;
      members[count++] = {e.pid, e.start, e.state};
      ++added, grew = true;
    }
  }
  return added;
}

bool ProcessTree::all_stopped() const {
  for (int m = 0; m < count; ++m) {
    const char s = members[m].state;
    if (s != 'T' && s != 't' && s != 'Z' && s != 'X') return false;
  }
  return count > 0;
}

int ProcessTree::live() const {
  int n = 0;
  for (int m = 0; m < count; ++m) n += members[m].state != 'Z' && members[m].state != 'X';
  return n;
}

void ProcessTree::signal(int sig, bool unstopped_only) const {
  for (int m = 0; m < count; ++m) {
    const char s = members[m].state;
    if (!unstopped_only || (s != 'T' && s != 't' && s != 'Z' && s != 'X')) ::kill(members[m].pid, sig);
  }
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() &&
      word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") ==
          std::string::npos)
    return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string shell_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + shell_quote(a);
  return s;
}

int enter_own_group(int parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return -1;
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  return 0;
}

}  // namespace ptune::system
