#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/errors.hpp"

namespace ptune::files {
namespace fs = std::filesystem;

namespace {

/// Writes are gathered up to this size before they go to the file system.
constexpr size_t kChunk = 16u << 20;

/// The temporary files being written, for remove_temporaries(): fixed slots, so a signal
/// handler reads them without locks or allocation.
constexpr int kSlots = 32;
char g_temporaries[kSlots][4096];
std::atomic<bool> g_used[kSlots];   // the slot is taken
std::atomic<bool> g_ready[kSlots];  // its path is complete (a signal may come in between)

/// Records `path` in a free slot; returns the slot, or -1 when none is free.
int record(const std::string& path) {
  if (path.size() >= sizeof g_temporaries[0]) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_used[i].load() && g_used[i].compare_exchange_strong(expected, true)) {
      std::memcpy(g_temporaries[i], path.c_str(), path.size() + 1);
      g_ready[i].store(true);
      return i;
    }
  }
  return -1;
}

void forget(int slot) {
  if (slot < 0) return;
  g_ready[slot].store(false);
  g_used[slot].store(false);
}

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& reason) {
  throw WriteError("cannot write " + what + " '" + path + "': " + reason);
}

/// A temporary file ".<name>.XXXXXX" in `folder` (as mkstemp names it: six random letters or
/// digits), created with mode 0600 and recorded for remove_temporaries() before it exists, so
/// that the second Ctrl-C never misses it. Returns its descriptor and sets `tmp` and `slot`;
/// throws WriteError.
int create_temporary(const fs::path& folder, const std::string& name, const std::string& what,
                     const std::string& shown, std::string& tmp, int& slot) {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  if (injected_failure()) fail(what, shown, std::strerror(ENOSPC));
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string suffix(6, 'x');
    for (char& c : suffix) c = kLetters[random() % (sizeof kLetters - 1)];
    tmp = (folder / ("." + name + "." + suffix)).string();
    slot = record(tmp);
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    const int err = errno;
    forget(slot);
    slot = -1;
    if (err != EEXIST) fail(what, shown, std::strerror(err));
  }
  fail(what, shown, std::strerror(EEXIST));
}

/// Why a writer failed when it was not a WriteError: the first line of its message, without
/// LibTorch's "[enforce fail at ...]" prefix.
std::string reason_of(const std::exception& e) {
  std::string why = message_of(e);
  if (why.rfind("[enforce fail at ", 0) == 0) {
    const size_t end = why.find("] ");
    why = end == std::string::npos ? "the write failed" : why.substr(end + 2);
  }
  return why;
}

/// Opens a non-regular target (a FIFO, a device) for writing. A signal (SIGINT, SIGTERM) that
/// ends the wait in open(2) for a FIFO's reader is the stop the user asked for: Interrupted.
/// Throws WriteError.
int open_special(const std::string& target, const std::string& what, const std::string& shown) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 && errno == EINTR) throw Interrupted();
  if (fd < 0) fail(what, shown, std::strerror(errno));
  return fd;
}

}  // namespace

bool injected_failure() {
  static const long at = [] {
    const char* v = std::getenv("PTUNE_FAIL_WRITE_AT");
    return v != nullptr ? std::atol(v) : 0L;
  }();
  if (at <= 0) return false;
  static std::atomic<long> count{0};
  return ++count == at;
}

// --- Output ---

Output::Output(int fd, std::string what, std::string shown)
    : fd_(fd), what_(std::move(what)), shown_(std::move(shown)) {}

Output::~Output() {
  if (fd_ >= 0) ::close(fd_);
}

void Output::raise() const { fail(what_, shown_, std::strerror(error_)); }

void Output::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    if (injected_failure()) {
      error_ = ENOSPC;
      break;
    }
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = errno;
      break;
    }
    if (n == 0) {  // no progress and no reason: as write(2) reports a full device
      error_ = ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  if (error_ != 0) raise();
}

void Output::write(const void* data, size_t n) {
  if (error_ != 0) raise();
  const char* p = static_cast<const char*>(data);
  size_ += n;
  while (n > 0) {
    const size_t take = std::min(n, kChunk - buffer_.size());
    buffer_.append(p, take);
    p += take;
    n -= take;
    if (buffer_.size() == kChunk) flush();
  }
}

std::function<size_t(const void*, size_t)> Output::sink() {
  return [this](const void* data, size_t n) -> size_t {
    try {
      write(data, n);
    } catch (const WriteError&) {
      // Kept in error_, raised by write_atomically() once the serializer is done.
    } catch (...) {
      if (error_ == 0) error_ = ENOMEM;
    }
    return n;
  };
}

void Output::finish(bool sync) {
  if (error_ != 0) raise();
  flush();
  if (sync) {
    if (injected_failure())
      error_ = ENOSPC;
    else if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
      error_ = errno;
    if (error_ != 0) raise();
  }
  const int fd = fd_;
  fd_ = -1;
  if (injected_failure()) {
    ::close(fd);
    error_ = ENOSPC;
  } else if (::close(fd) != 0 && errno != EINTR) {
    error_ = errno;
  }
  if (error_ != 0) raise();
}

// --- write_atomically ---

void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(Output&)>& fill) {
  if (path.empty()) throw WriteError(what + ": an empty path");
  // Through a symlink to what it names; the link itself stays.
  std::error_code ec;
  std::string target = path;
  if (fs::is_symlink(path, ec)) {
    const fs::path resolved = fs::weakly_canonical(path, ec);
    if (!ec) target = resolved.string();
  }
  struct stat st {};
  const bool special = ::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (special && S_ISDIR(st.st_mode)) fail(what, path, "it is a folder");

  auto run_fill = [&](Output& out) {
    try {
      fill(out);
    } catch (const WriteError&) {
      throw;
    } catch (const std::exception& e) {
      if (out.error() != 0) fail(what, path, std::strerror(out.error()));
      fail(what, path, reason_of(e));
    }
  };

  if (special) {
    // A FIFO or a device: written into, as `cmd > /dev/stdout` would; opened once per document
    // (a writer that rewrites its file, as sweep --out after every row, writes such a target
    // once, at the end: a FIFO's second open would wait for a reader that has gone).
    Output out(open_special(target, what, path), what, path);
    run_fill(out);
    out.finish(/*sync=*/false);
    return;
  }

  // A temporary file next to the target: the same file system, so that rename is atomic.
  fs::path folder = fs::path(target).parent_path();
  if (folder.empty()) folder = ".";
  std::string tmp;
  int slot = -1;
  const int fd = create_temporary(folder, fs::path(target).filename().string(), what, path, tmp, slot);
  struct Cleanup {
    std::string file;
    int slot;
    ~Cleanup() {
      if (!file.empty()) ::unlink(file.c_str());
      forget(slot);
    }
  } cleanup{tmp, slot};

  Output out(fd, what, path);
  run_fill(out);
  // mkstemp creates 0600; give the file the permissions a plain create would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  out.finish(/*sync=*/true);
  if (injected_failure()) fail(what, path, std::strerror(ENOSPC));
  if (std::rename(tmp.c_str(), target.c_str()) != 0) fail(what, path, std::strerror(errno));
  cleanup.file.clear();
  // The rename made durable; a folder that cannot be synced (some file systems) is no error.
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_atomically(const std::string& path, const std::string& what, const std::string& text) {
  write_atomically(path, what, [&](Output& out) { out.write(text); });
}

// --- Scratch ---

Scratch::Scratch(const std::string& target, const std::string& what) {
  fs::path folder = fs::path(target).parent_path();
  if (folder.empty()) folder = ".";
  const int fd =
      create_temporary(folder, fs::path(target).filename().string(), what, target, path_, slots_[0]);
  ::close(fd);
  slots_[1] = record(path_ + ".tmp");
}

Scratch::~Scratch() {
  ::unlink(path_.c_str());
  ::unlink((path_ + ".tmp").c_str());
  forget(slots_[0]);
  forget(slots_[1]);
}

void remove_temporaries() noexcept {
  for (int i = 0; i < kSlots; ++i)
    if (g_ready[i].load()) ::unlink(g_temporaries[i]);
}

// --- checks before the work ---

void check_writable(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::runtime_error(what + ": an empty path; name a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error(what + ": '" + path + "' is a folder; name a file");
    if (!S_ISREG(st.st_mode)) {
      if (::access(path.c_str(), W_OK) != 0)
        throw std::runtime_error(what + ": cannot write '" + path + "': " + std::strerror(errno));
      return;  // a FIFO or a device: written into
    }
  }
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (::stat(folder.c_str(), &st) != 0)
    throw std::runtime_error(what + ": folder '" + folder.string() + "' does not exist");
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(what + ": '" + folder.string() + "' is not a folder");
  // Whether a file can be made there is asked by making one (access() says yes where creating a
  // file fails, as for root in /sys or /proc): the kind of temporary file the write will, removed.
  std::string probe = (folder / ".ptune-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw std::runtime_error(what + ": cannot write in folder '" + folder.string() +
                             "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_not_input(const std::string& path, const std::string& what,
                     const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (path.empty()) return;
  for (const auto& [name, input] : inputs) {
    std::error_code ec;
    if (input.empty() || !std::filesystem::equivalent(path, input, ec) || ec) continue;
    throw std::runtime_error(what + " '" + path + "' is the " + name + " '" + input +
                             "'; writing it would destroy it: name another file");
  }
}

void prepare_folder(const std::string& folder, const std::string& what) {
  if (folder.empty()) throw std::runtime_error(what + ": an empty path; name a folder");
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw std::runtime_error(what + ": cannot create folder '" + folder + "': " + ec.message());
  if (!fs::is_directory(folder, ec)) throw std::runtime_error(what + ": '" + folder + "' is not a folder");
  if (::access(folder.c_str(), W_OK) != 0)
    throw std::runtime_error(what + ": cannot write in folder '" + folder + "': " + std::strerror(errno));
}

namespace {

/// `path` when it exists, else its folder ("." for a bare name).
std::string existing(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return path;
  const fs::path folder = fs::path(path).parent_path();
  return folder.empty() ? "." : folder.string();
}

}  // namespace

std::optional<uint64_t> free_bytes(const std::string& path) {
  struct statvfs vfs {};
  if (::statvfs(existing(path).c_str(), &vfs) != 0) return std::nullopt;
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

std::optional<uint64_t> file_system_of(const std::string& path) {
  struct stat st {};
  if (::stat(existing(path).c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.st_dev);
}

std::string human_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes < 1000)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else if (bytes < 1000000)
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(bytes) / 1e3);
  else if (bytes < 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace ptune::files
