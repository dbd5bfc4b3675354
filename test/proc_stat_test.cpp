// /proc/PID/stat and shell quoting (system/proc_stat.hpp): torch-free.
#include <algorithm>
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "system/proc_stat.hpp"

using namespace ptune::system;

TEST_CASE("read_proc_stat reads this process as the kernel has it", "[proc_stat]") {
  ProcStat st;
  REQUIRE(read_proc_stat("self", &st));
  CHECK(st.state == 'R');
  CHECK(st.ppid == ::getppid());
  CHECK(st.pgrp == ::getpgrp());
  CHECK(st.comm == std::string("ptune_base_test").substr(0, 15));
  CHECK(st.minflt > 0);
  CHECK(!read_proc_stat("999999999", &st));
}

TEST_CASE("shell_quote leaves safe words alone and single-quotes the rest", "[proc_stat]") {
  CHECK(shell_quote("train.py") == "train.py");
  CHECK(shell_quote("--lr=0.1") == "--lr=0.1");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_text({"python", "train.py", "--name", "my run"}) == "python train.py --name 'my run'");
}

namespace {

/// Walks /proc into `tree`.
void walk(ProcessTree& tree) {
  std::vector<ProcEntry> table(65536);
  tree.grow(table.data(), read_process_table(table.data(), table.size()));
}

/// The pid `fd` carries (a child's report).
int read_pid(int fd) {
  int pid = 0;
  REQUIRE(::read(fd, &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid));
  return pid;
}

}  // namespace

TEST_CASE("read_process_table reads this process with its parent and state", "[proc_stat]") {
  std::vector<ProcEntry> table(65536);
  const size_t n = read_process_table(table.data(), table.size());
  bool found = false;
  for (size_t i = 0; i < n; ++i)
    if (table[i].pid == ::getpid()) {
      found = true;
      CHECK(table[i].ppid == ::getppid());
      CHECK(table[i].state == 'R');
      CHECK(table[i].start > 0);
    }
  CHECK(found);
}

TEST_CASE("a process tree holds a grandchild in a session of its own, also once its parent has ended",
          "[proc_stat]") {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // forks a grandchild that enters a session of its own, then waits to be ended
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::setsid();
      ::pause();
      ::_exit(0);
    }
    (void)!::write(report[1], &grandchild, sizeof grandchild);
    ::pause();
    ::_exit(0);
  }
  const int grandchild = read_pid(report[0]);
  ProcessTree tree(child);
  walk(tree);
  REQUIRE(tree.count == 2);
  CHECK(tree.members[0].pid == child);
  CHECK(tree.members[1].pid == grandchild);
  CHECK(!tree.all_stopped());
  tree.signal(SIGSTOP);
  for (int i = 0; i < 100 && !tree.all_stopped(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    walk(tree);
  }
  CHECK(tree.all_stopped());
  tree.signal(SIGCONT);
  // The parent ends: the grandchild, re-parented outside the tree, stays a member.
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  walk(tree);
  REQUIRE(tree.count == 1);
  CHECK(tree.members[0].pid == grandchild);
  CHECK(tree.live() == 1);
  tree.signal(SIGKILL);
  for (int i = 0; i < 200 && tree.count > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    walk(tree);
  }
  CHECK(tree.count == 0);
  ::close(report[0]);
  ::close(report[1]);
}

TEST_CASE("a process tree takes in the children of its adopter, a child never walked included",
          "[proc_stat]") {
  // As a walk reads /proc: the adopter (7, a child subreaper), the root (10) and its child (11);
  // 12, re-parented to the adopter when its parent ended before any walk saw it; 13, another
  // process's child.
  const ProcEntry table[] = {
      {7, 1, 700, 'S'}, {10, 7, 1000, 'S'}, {11, 10, 1100, 'S'}, {12, 7, 1200, 'R'}, {13, 1, 1300, 'R'}};
  ProcessTree tree(10, 7);
  CHECK(tree.grow(table, 5) == 3);
  std::vector<int> pids;
  for (int m = 0; m < tree.count; ++m) pids.push_back(tree.members[m].pid);
  std::sort(pids.begin(), pids.end());
  CHECK(pids == std::vector<int>{10, 11, 12});
  ProcessTree alone(10);  // without the adopter, the orphan is not found
  CHECK(alone.grow(table, 5) == 2);
}
