#pragma once
/// Output files that are never half-written, never destroy what they replace and never leave a
/// temporary file behind: every file ptune writes (results in every format, CSV companions, HTML
/// reports, `tune --out` configs, checkpoints, weights, profiler traces) goes through
/// write_atomically(). A write that fails is a ptune::WriteError (exit 1) whose one line names
/// what was written, the file and the system's reason: "cannot write --save-weights 'w.pt': No
/// space left on device".

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ptune::files {

/// The file write_atomically() fills. Writes are buffered and every system call is checked
/// (short writes and EINTR resumed); the first failure is kept: later writes do nothing.
class Output {
 public:
  Output(int fd, std::string what, std::string shown);
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  /// Appends `n` bytes. Throws WriteError on the first failure and on every call after it.
  void write(const void* data, size_t n);
  void write(const std::string& text) { write(text.data(), text.size()); }

  /// A writer callback for LibTorch's serializers (torch::serialize::OutputArchive::save_to,
  /// caffe2::serialize::PyTorchStreamWriter). It never throws and always reports `n` bytes as
  /// written, so that a serializer never sees a failure (LibTorch's zip writer raises a short
  /// write from its destructor, which ends the process); the first failure is kept, the bytes
  /// after it are dropped, and write_atomically() raises it once the serializer is done.
  std::function<size_t(const void*, size_t)> sink();

  /// Bytes accepted so far.
  uint64_t size() const { return size_; }
  /// The errno of the first failure; 0 when none.
  int error() const { return error_; }

  /// Writes out the buffer, then fsyncs (when `sync`) and closes the file. Throws WriteError.
  void finish(bool sync);

 private:
  [[noreturn]] void raise() const;
  void flush();

  int fd_;
  std::string what_, shown_;
  std::string buffer_;
  uint64_t size_ = 0;
  int error_ = 0;
};

/// Writes `path` so that a reader sees the old content or the new one, never a part: `fill`
/// writes into an Output on a temporary file created exclusively (O_EXCL) in the target's folder
/// (".<name>.XXXXXX": unique per writer, so two processes writing one path never mix their
/// bytes), which is flushed to disk (fsync), closed, renamed over the target, and the folder is
/// fsynced. Every step is checked. A symlink is written through (its target is replaced, the
/// link stays). A target that exists and is not a regular file (a FIFO, a device such as
/// /dev/null or /dev/stdout) is written into, never replaced (a writer that rewrites its file
/// writes such a target once, with its final content: a FIFO reopened would wait for a reader
/// that has gone); a stop signal while its open waits for a FIFO's reader throws Interrupted.
/// `what` names the file's origin in errors (e.g. "--out", "--save-weights",
/// "train.checkpoint_dir"). On any failure the temporary
/// file is removed (also by remove_temporaries() on a second Ctrl-C) and the target is left as
/// it was; throws WriteError "cannot write <what> '<path>': <reason>", the reason in the
/// system's words ("No space left on device", "Disk quota exceeded", "Read-only file system",
/// "File too large", "Permission denied").
void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(Output&)>& fill);

/// write_atomically() of `text`: the one way ptune writes a text output (results, reports,
/// configs, traces, caches).
void write_atomically(const std::string& path, const std::string& what, const std::string& text);

/// A scratch file for a library that writes a file by itself (Kineto's trace): a unique hidden
/// name beside `target` (created empty), removed when the object dies, together with
/// "<name>.tmp", the name such a library writes first and renames from. Both are removed by
/// remove_temporaries() too. Throws WriteError when the file cannot be created.
class Scratch {
 public:
  Scratch(const std::string& target, const std::string& what);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int slots_[2] = {-1, -1};
};

/// Removes the temporary files of writes under way (the second Ctrl-C, which ends the process at
/// once). Async-signal-safe: only unlink(2) on paths recorded beforehand.
void remove_temporaries() noexcept;

/// Checks, before any work, that `path` can be written as an output file: not empty, not a
/// folder, its folder exists and is writable (or the path is an existing non-regular file
/// such as a FIFO or a device). Throws std::runtime_error "<what>: <why>", e.g.
/// "--out: folder '/x' does not exist".
void check_writable(const std::string& path, const std::string& what);

/// Checks that the output `path` is none of `inputs` (the same file under any name: a link, a
/// relative path), which writing it would destroy. Paths that do not exist (yet) are not one.
/// Throws std::runtime_error "<what> '<path>' is the <input's name> '<input>'; writing it would
/// destroy it: name another file". `inputs`: (name, path) pairs, e.g. ("config", "exp.json").
void check_not_input(const std::string& path, const std::string& what,
                     const std::vector<std::pair<std::string, std::string>>& inputs);

/// Checks that `folder` exists and is writable or can be created (creates it). Throws
/// std::runtime_error "<what>: <why>".
void prepare_folder(const std::string& folder, const std::string& what);

/// Bytes an unprivileged writer may still use on the file system that holds `path` (a file or
/// folder; for a file that does not exist yet, its folder); nullopt when it cannot be told.
std::optional<uint64_t> free_bytes(const std::string& path);

/// The file system (device) that holds `path` or, for a file that does not exist yet, its
/// folder; nullopt when it cannot be told.
std::optional<uint64_t> file_system_of(const std::string& path);

/// `bytes` for people: "812 B", "3.4 MB", "1.2 GB" (powers of 1000).
std::string human_bytes(uint64_t bytes);

/// Test hook, not an interface: with PTUNE_FAIL_WRITE_AT=N in the environment, the N-th file
/// operation of the process (creating a temporary file, a write, an fsync, a close, a rename, a
/// check of a file another library wrote) fails as on a full disk. Returns true when this
/// operation is the one to fail. The test suite uses it to fail each write of a whole command
/// in turn.
bool injected_failure();

}  // namespace ptune::files
