// /proc/PID/stat and shell quoting (system/proc_stat.hpp): torch-free.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <string>

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
