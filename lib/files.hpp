#pragma once
/// Output files that are never half-written and never destroy what they replace: every file
/// ptune writes (results, checkpoints, weights, traces) goes through write_atomically().

#include <functional>
#include <string>

namespace ptune::files {

/// Writes `path` so that a reader sees the old content or the new one, never a part:
/// `write(tmp)` fills a temporary file created with mkstemp in the target's folder (unique per
/// writer, so two processes writing one path never mix their bytes), which is flushed to disk
/// (fsync), renamed over the target, and the folder is fsynced. A symlink is written through
/// (its target is replaced, the link stays). A target that exists and is not a regular file (a
/// FIFO, a device such as /dev/null or /dev/stdout) is written into, never replaced. `what`
/// names the file's origin in errors (e.g. "--out", "--save-weights", "train.checkpoint_dir").
/// On any failure the temporary file is removed and std::runtime_error says
/// "cannot write <what> '<path>': <reason>" (e.g. "No space left on device").
void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp)>& write);

/// Removes the temporary files of writes under way (the second Ctrl-C, which ends the process at
/// once). Async-signal-safe: only unlink(2) on paths recorded beforehand.
void remove_temporaries() noexcept;

/// write_atomically() of `text`.
void write_text_atomically(const std::string& path, const std::string& what, const std::string& text);

/// Checks, before any work, that `path` can be written as an output file: not empty, not a
/// folder, its folder exists and is writable (or the path is an existing non-regular file
/// such as a FIFO or a device). Throws std::runtime_error "<what>: <why>", e.g.
/// "--out: folder '/x' does not exist".
void check_writable(const std::string& path, const std::string& what);

/// Checks that `folder` exists and is writable or can be created (creates it). Throws
/// std::runtime_error "<what>: <why>".
void prepare_folder(const std::string& folder, const std::string& what);

}  // namespace ptune::files
