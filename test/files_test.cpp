// Output files: atomic, unique per writer, through symlinks, into FIFOs, and clean failures.
#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

#include "core/files.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ptune::test::TempDir;

namespace {

/// The files in `dir` (names only).
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("two writers of one file: every read sees one whole version, no temporary file is left",
          "[files]") {
  TempDir dir;
  const std::string path = dir.file("results.json");
  const std::string a(200000, 'a'), b(300000, 'b');
  std::atomic<bool> bad{false};
  auto writer = [&](const std::string& text) {
    for (int i = 0; i < 40; ++i) ptune::files::write_atomically(path, "--out", text);
  };
  std::thread t1(writer, a), t2(writer, b);
  std::thread reader([&] {
    for (int i = 0; i < 200; ++i) {
      const std::string got = ptune::test::read_file(path);
      if (!got.empty() && got != a && got != b) bad = true;
    }
  });
  t1.join();
  t2.join();
  reader.join();
  CHECK_FALSE(bad.load());
  const std::string last = ptune::test::read_file(path);
  CHECK((last == a || last == b));
  CHECK(listing(dir.path) == std::vector<std::string>{"results.json"});
}

TEST_CASE("a symlink is written through, a FIFO is written into, not replaced", "[files]") {
  TempDir dir;
  ptune::files::write_atomically(dir.file("real.json"), "--out", "old");
  fs::create_symlink(dir.file("real.json"), dir.file("link.json"));
  ptune::files::write_atomically(dir.file("link.json"), "--out", "new");
  CHECK(fs::is_symlink(dir.file("link.json")));
  CHECK(ptune::test::read_file(dir.file("real.json")) == "new");

  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = ptune::test::read_file(fifo); });
  ptune::files::write_atomically(fifo, "--out", "through the pipe\n");
  reader.join();
  CHECK(got == "through the pipe\n");
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}

TEST_CASE("failed writes name the file and the key, and leave no temporary file", "[files]") {
  TempDir dir;
  ptune::test::TempDir::write_to(dir.file("a-file"), "x");
  CHECK(message_of([&] { ptune::files::write_atomically(dir.file("a-file/out.json"), "--out", "x"); }) ==
        "cannot write --out '" + dir.file("a-file/out.json") + "': Not a directory");
  CHECK(message_of([&] { ptune::files::write_atomically(dir.path.string(), "--out", "x"); }) ==
        "cannot write --out '" + dir.path.string() + "': it is a folder");
  CHECK(message_of([&] { ptune::files::check_writable("", "--out"); }) ==
        "--out: an empty path; name a file");
  CHECK(message_of([&] { ptune::files::check_writable(dir.file("none/r.json"), "--out"); }) ==
        "--out: folder '" + dir.file("none") + "' does not exist");
  CHECK(message_of([&] { ptune::files::check_writable(dir.file("a-file/r.json"), "--save-weights"); }) ==
        "--save-weights: '" + dir.file("a-file") + "' is not a folder");
  CHECK(message_of([&] { ptune::files::check_writable(dir.path.string(), "--out"); }) ==
        "--out: '" + dir.path.string() + "' is a folder; name a file");
  CHECK(message_of([&] {
          ptune::files::prepare_folder(dir.file("a-file/ck"), "train.checkpoint_dir");
        }).rfind("train.checkpoint_dir: cannot create folder '" + dir.file("a-file/ck") + "': ", 0) == 0);

  // A full disk: a 64 KiB tmpfs, where this test may mount one (root, a mount namespace).
  const std::string small = dir.file("small");
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("skipped the full-disk case: cannot mount a tmpfs here (" << std::strerror(errno) << ")");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount(at.c_str()); }
  } unmount{small};
  const std::string out = small + "/w.pt";
  CHECK(message_of([&] {
          ptune::files::write_atomically(out, "--save-weights", std::string(1 << 20, 'w'));
        }) == "cannot write --save-weights '" + out + "': No space left on device");
  CHECK(listing(small).empty());  // the temporary file is gone
}

TEST_CASE("the second Ctrl-C's clean-up removes the temporary file of a write under way, and only that",
          "[files]") {
  TempDir dir;
  const std::string out = dir.file("w.pt");
  ptune::files::write_atomically(out, "--save-weights", "old");
  std::vector<std::string> during, after_cleanup;
  const std::string message = message_of([&] {
    ptune::files::write_atomically(out, "--save-weights", [&](ptune::files::Output& o) {
      o.write("partial");
      during = listing(dir.path);
      ptune::files::remove_temporaries();  // what the signal handler calls before _Exit
      after_cleanup = listing(dir.path);
    });
  });
  REQUIRE(during.size() == 2);
  CHECK(during[0].rfind(".w.pt.", 0) == 0);  // the mkstemp name beside the target
  CHECK(after_cleanup == std::vector<std::string>{"w.pt"});
  CHECK(message.rfind("cannot write --save-weights '" + out + "': ", 0) == 0);
  CHECK(ptune::test::read_file(out) == "old");  // the old version is untouched
  // A finished write is no longer listed: the clean-up leaves the result alone.
  ptune::files::write_atomically(out, "--save-weights", "whole");
  ptune::files::remove_temporaries();
  CHECK(ptune::test::read_file(out) == "whole");
}

TEST_CASE("a device node such as /dev/null is written into, never replaced", "[files]") {
  TempDir dir;
  const std::string dev = dir.file("null");
  // The same device as /dev/null (char 1,3), in a folder of the test's own: if this check ever
  // failed, it would replace this node, not the machine's /dev/null.
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    WARN("skipped: cannot create a device node here (" << std::strerror(errno) << ")");
    return;
  }
  ptune::files::write_atomically(dev, "--out", std::string(100000, 'x'));
  struct stat st {};
  REQUIRE(::stat(dev.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(st.st_rdev == makedev(1, 3));
  CHECK(listing(dir.path) == std::vector<std::string>{"null"});
}
