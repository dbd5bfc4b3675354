#include "system/proc_stat.hpp"

#include <signal.h>
#include <sys/prctl.h>
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
