#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "errors.hpp"

namespace ptune::files {
namespace fs = std::filesystem;

namespace {

/// The temporary files being written, for remove_temporaries(): fixed slots, so a signal
/// handler reads them without locks or allocation.
constexpr int kSlots = 16;
char g_temporaries[kSlots][4096];
std::atomic<bool> g_used[kSlots];   // the slot is taken
std::atomic<bool> g_ready[kSlots];  // its path is complete (a signal may come in between)

/// Records `path` in a free slot for as long as the object lives.
class Registered {
 public:
  explicit Registered(const std::string& path) {
    if (path.size() >= sizeof g_temporaries[0]) return;
    for (int i = 0; i < kSlots; ++i) {
      bool expected = false;
      if (!g_used[i].load() && g_used[i].compare_exchange_strong(expected, true)) {
        std::memcpy(g_temporaries[i], path.c_str(), path.size() + 1);
        g_ready[i].store(true);
        slot_ = i;
        return;
      }
    }
  }
  ~Registered() {
    if (slot_ < 0) return;
    g_ready[slot_].store(false);
    g_used[slot_].store(false);
  }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;

 private:
  int slot_ = -1;
};

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& reason) {
  throw std::runtime_error("cannot write " + what + " '" + path + "': " + reason);
}

/// fsync of a file or folder by path; false with errno set on failure.
bool sync_path(const std::string& path, bool folder) {
  const int fd = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0 || (folder && (errno == EINVAL || errno == EROFS));
  const int err = errno;
  ::close(fd);
  errno = err;
  return ok;
}

/// Why a writer failed, in the system's words where it can tell: LibTorch's archive writers
/// report a full disk as an internal error ("[enforce fail at inline_container.cc:...]").
std::string reason_of(const std::exception& e, const std::string& folder) {
  struct statvfs vfs {};
  if (::statvfs(folder.c_str(), &vfs) == 0 && vfs.f_bavail == 0) return std::strerror(ENOSPC);
  std::string why = message_of(e);
  if (why.rfind("[enforce fail at ", 0) == 0) {
    const size_t end = why.find("] ");
    why = end == std::string::npos ? "the write failed" : why.substr(end + 2);
  }
  return why;
}

/// Copies the file `from` into the existing non-regular file `to` (a FIFO or a device).
void copy_into(const std::string& from, const std::string& to, const std::string& what, const std::string& shown) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail(what, shown, std::strerror(errno));
  const int out = ::open(to.c_str(), O_WRONLY | O_CLOEXEC);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    fail(what, shown, std::strerror(err));
  }
  std::vector<char> buf(1 << 16);
  std::string error;
  while (error.empty()) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      break;
    }
    for (ssize_t done = 0; done < n && error.empty();) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) error = std::strerror(errno);
      else done += w;
    }
  }
  ::close(in);
  ::close(out);
  if (!error.empty()) fail(what, shown, error);
}

}  // namespace

void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp)>& write) {
  if (path.empty()) throw std::runtime_error(what + ": an empty path");
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

  // A temporary file next to the target (same file system, so rename is atomic); for a FIFO
  // or device, in the system's temporary folder, then copied into it.
  fs::path folder = special ? fs::temp_directory_path(ec) : fs::path(target).parent_path();
  if (folder.empty()) folder = ".";
  std::string tmpl = (folder / ("." + fs::path(target).filename().string() + ".XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) fail(what, path, std::strerror(errno));
  ::close(fd);
  const std::string tmp(name.data());
  Registered registered(tmp);
  struct Cleanup {
    std::string file;
    ~Cleanup() {
      if (!file.empty()) std::remove(file.c_str());
    }
  } cleanup{tmp};

  try {
    write(tmp);
  } catch (const std::exception& e) {
    fail(what, path, reason_of(e, folder.string()));
  }
  if (!sync_path(tmp, false)) fail(what, path, std::strerror(errno));
  if (special) {
    copy_into(tmp, target, what, path);
    return;  // cleanup removes the temporary file
  }
  // mkstemp creates 0600; give the file the permissions a plain create would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(tmp.c_str(), 0666 & ~mask);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) fail(what, path, std::strerror(errno));
  cleanup.file.clear();
  sync_path(folder.string(), true);
}

void remove_temporaries() noexcept {
  for (int i = 0; i < kSlots; ++i)
    if (g_ready[i].load()) ::unlink(g_temporaries[i]);
}

void write_text_atomically(const std::string& path, const std::string& what, const std::string& text) {
  write_atomically(path, what, [&](const std::string& tmp) {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw std::runtime_error(std::strerror(errno));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) {
      errno = ok ? errno : err;
      throw std::runtime_error(std::strerror(errno));
    }
  });
}

void check_writable(const std::string& path, const std::string& what) {
  if (path.empty()) throw std::runtime_error(what + ": an empty path; name a file");
  std::error_code ec;
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
  if (::access(folder.c_str(), W_OK) != 0)
    throw std::runtime_error(what + ": cannot write in folder '" + folder.string() + "': " + std::strerror(errno));
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

}  // namespace ptune::files
