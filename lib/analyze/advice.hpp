#pragma once
/// `ptune analyze`: a trace's breakdown per rank and one verdict — the bottleneck, the numbers
/// behind it and the next move, phrased for the program that wrote the trace (PyTorch code for
/// Python's traces, config keys for ptune's). The rules and thresholds are measure/rules.hpp's,
/// shared with the sweep's diagnosis.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyze/breakdown.hpp"
#include "analyze/straggler.hpp"
#include "analyze/throughput.hpp"
#include "analyze/trace_parts.hpp"

namespace ptune::analyze {

/// The verdict.
struct Verdict {
  std::string rule;      // the rule's name (measure::Rule::name): "input-bound", ...
  std::string evidence;  // the numbers: "46% of the step in `enumerate(DataLoader)#...`"
  std::string move;      // the next move, for the trace's writer
  /// "<rule> (<evidence>): <move>"
  std::string text() const { return rule + " (" + evidence + "): " + move; }
};

/// Data-parallel figures of a multi-rank folder.
struct Distributed {
  int64_t world_size = 1;
  size_t slowest = 0;  // index into Analysis::ranks
  size_t fastest = 0;
  double comm_pct = 0;          // the slowest rank's communication, % of its step
  double comm_overlap_pct = 0;  // of that communication, the % overlapped with compute
};

/// What `ptune analyze PATH` finds.
struct Analysis {
  std::string path;                        // as given
  std::vector<Breakdown> ranks;            // one per rank (a single file: one)
  size_t primary = 0;                      // the rank the verdict is about: the straggler the
                                           // others wait for, else the slowest
  std::optional<Distributed> distributed;  // with traces of two or more ranks
  Verdict verdict;
  std::vector<std::string> notes;         // further findings and caveats, each one line
  std::vector<Throughput> throughput;     // per rank: FLOPs and bytes per operator class, the ceilings
  std::optional<Straggler> straggler;     // with two or more ranks: the rank the others wait for
  std::vector<std::string> folder_notes;  // what reading a folder of ranks found: ranks missing, or
                                          // not run at the same time (notes' last lines)

  /// The slowest rank: its mean step is the run's.
  const Breakdown& slowest() const { return ranks[distributed ? distributed->slowest : primary]; }
};

/// Which rank the figures shown are of: "the straggler" or "the slowest". Throws nothing.
inline const char* shown_rank(const Analysis& a) {
  return a.straggler && a.straggler->slow ? "the straggler" : "the slowest";
}

/// Options of `ptune analyze`.
struct AnalyzeOptions {
  bool require_gpu = false;  // --gpu: a trace without GPU activity is an error
  CpuCeilings cpu_ceilings;  // a CPU trace's ceilings (this machine's calibration); none: no CPU peak
  uint64_t part_bytes = kDefaultPartBytes;  // --events-mb: the most of a trace's events held at a
                                            // time (their compact form); a larger file is read in parts
};

/// Reads `path` (analyze::read_traces) and analyzes it. Files of one rank (distributedInfo), or
/// without it of one host process, are one process whose steps are concatenated; files of
/// several processes are compared as ranks are. Throws DataError as read_traces, and
/// "'<path>': a CPU-only trace (no kernels, copies or CUDA runtime calls); --gpu asks for GPU
/// figures: record on a GPU with ProfilerActivity.CUDA" when `require_gpu` and no GPU
/// activity was recorded; "'<path>': no ProfilerStep#N step ... " never (a trace without steps
/// is one window, said in a note).
Analysis analyze(const std::string& path, const AnalyzeOptions& opt = {});

/// The verdict and notes for one rank's breakdown (and the data-parallel figures when given).
/// Throws nothing.
void advise(Analysis& a);

}  // namespace ptune::analyze
