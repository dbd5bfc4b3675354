#pragma once
/// A trace file of any size in bounded memory: read once, its events kept in a compact form (in
/// memory while they fit, else in unlinked temporary files), then given back as Traces of a few consecutive
/// steps each, in time order, with the steps before and after around them (Trace::part says which events are
/// the part's own). A file whose events fit in the memory allowed is one part: all of it.
///
/// Why parts of steps with neighbours: Kineto writes a step's host events and its device events
/// in separate runs of the file (and events of one run are not in time order), so no step is
/// complete before the file ends; and a step's kernels run after its host code, up to a step or
/// more later when the host runs ahead. So the events are first sorted into small buckets of
/// whole steps by their start time; a part is a run of consecutive buckets with the buckets
/// before and after it that its events need (where its device work and its launches are).

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// The most of a trace's events held in memory at a time by default, in bytes of their compact
/// form (about a third of their JSON).
inline constexpr uint64_t kDefaultPartBytes = uint64_t{48} << 20;

/// The folder for the temporary file of a trace's events past what memory holds: TMPDIR where it
/// is set (only TMPDIR: TMP, TEMP and TEMPDIR are not read); else /tmp, or /var/tmp where /tmp is
/// held in memory (tmpfs) and /var/tmp is not (and can be written), so that the events of a large
/// trace do not fill the memory they were kept out of.
std::string events_folder();
/// The same choice from what it depends on: TMPDIR (null: not set), whether /tmp is held in
/// memory, whether /var/tmp is on disk and can be written.
std::string events_folder(const char* tmpdir, bool tmp_in_memory, bool var_tmp_on_disk);

/// One trace file, read, its events on disk.
class SpooledTrace {
 public:
  /// Reads `path` (scan_trace; throws as read_trace does). The events are kept in memory up to
  /// `in_memory` bytes of their compact form; past that they go to an unlinked file in the
  /// folder of events_folder(): throws DataError "'<path>': cannot write the trace's events to the
  /// temporary folder '<dir>': <why>; TMPDIR chooses another folder" when it cannot.
  SpooledTrace(const std::string& path, uint64_t in_memory);
  ~SpooledTrace();
  SpooledTrace(SpooledTrace&&) noexcept;
  SpooledTrace& operator=(SpooledTrace&&) noexcept;

  /// The file's metadata and facts; no events.
  const Trace& meta() const { return meta_; }

  /// Calls `f` with each part of the file in time order: one part, all of it, when its compact
  /// form is at most `part_bytes` or it has no ProfilerStep#N ranges; else parts of whole steps
  /// of about three quarters of `part_bytes` each (a single step larger than that is a part
  /// alone), each with the steps around it that it needs, in buckets of a sixteenth. Throws DataError when
  /// the temporary files cannot be read or written.
  void for_each_part(uint64_t part_bytes, const std::function<void(const Trace&)>& f) const;

 private:
  struct Files;
  Trace meta_;
  std::vector<double> step_starts_;  // the ProfilerStep#N ranges' starts, sorted
  std::unique_ptr<Files> files_;
  uint64_t bytes_ = 0;
};

}  // namespace ptune::analyze
