// The user's own training program (config's `program`) as a kind of side: each side an instance of
// it (proc::ProgramInstance), in its own processes whether in ptune's turn or in a group.

#include "analyze/advice.hpp"
#include "analyze/trace_reader.hpp"
#include "core/numbers.hpp"
#include "proc/program.hpp"
#include "tune/sides.hpp"

namespace ptune::tune {
namespace {

/// A program row's step split, unknown from outside, from its trace's steps (the rank the
/// verdict is about): the DataLoader ranges as its data wait, its copies (all directions) as its
/// copy, the rest compute; said in a note. None where the trace has no step time.
void set_split_from_trace(measure::Measurement& m, const analyze::Breakdown& b) {
  const analyze::StepBreakdown mean = b.mean();
  const double total = mean.end - mean.start;
  if (b.steps.empty() || total <= 0) return;
  const double wait_pct = 100.0 * mean.us[analyze::kDataLoader] / total;
  const double copy_pct = 100.0 * mean.us[analyze::kMemcpy] / total;
  m.split = measure::Measurement::StepSplit{wait_pct, copy_pct, 100.0 - wait_pct - copy_pct};
  m.notes.push_back("step split from its trace (" + b.who() + ", " + std::to_string(b.steps.size()) +
                    " steps): DataLoader ranges " + numbers::fixed(wait_pct, 1) +
                    "%, copies (all directions) " + numbers::fixed(copy_pct, 1) +
                    "% of the step; ptune's own windows do not split a program's step");
}

class ProgramKind : public measure::SideKind {
 public:
  std::string name() const override { return "program"; }
  bool matches(const config::ExperimentConfig& cfg) const override { return cfg.program.enabled(); }
  std::string arch(const config::ExperimentConfig&) const override { return "program"; }
  bool needs_processes(const config::ExperimentConfig&) const override { return true; }
  std::unique_ptr<measure::RowSide> start_here(const config::ExperimentConfig& cfg,
                                               const measure::Progress& progress,
                                               const measure::Deadline& deadline) const override {
    return std::make_unique<proc::ProgramInstance>(cfg, progress, deadline);
  }
  /// An instance is in processes of its own either way.
  std::unique_ptr<measure::RowSide> start_process(const config::ExperimentConfig& cfg,
                                                  const measure::Progress& progress,
                                                  const measure::Deadline& deadline) const override {
    return start_here(cfg, progress, deadline);
  }
  double samples_per_step(const config::ExperimentConfig& cfg) const override {
    return proc::samples_per_step(cfg.program);
  }
  /// Its step lines count the steps of the whole program, every rank's samples in
  /// program.samples_per_step.
  int64_t ranks(const config::ExperimentConfig&) const override { return 1; }
  std::string processes_name() const override { return "this row's program"; }
  bool startup_in_auto_budget() const override { return false; }
  /// Its instances hold their memory on the device until they end.
  bool restarts_processes_when_out_of_memory() const override { return true; }
  std::string restarted_note() const override {
    return "interleaved by starting each side's program afresh for every window, one instance at a time: "
           "instances of the two did not fit in memory at once (an instance's start-up and warm-up are "
           "in the row's budget, measure.max_s)";
  }
  std::string diagnose(const measure::Measurement& m, const config::ExperimentConfig& cfg,
                       const std::vector<measure::Tried>& tried, const system::CpuInfo&) const override {
    return measure::diagnose_program(m, cfg, tried);
  }
  /// Only when asked (measure.profile): its GPU busy came from NVML while it was timed, and a
  /// profile runs the program once more.
  bool wants_profile(const config::ExperimentConfig& cfg) const override { return cfg.measure.profile; }
  /// The program run once more with its profiler's output in the row's folder, read as
  /// `ptune analyze FOLDER` reads it (DataError: a trace it cannot read).
  void profile(measure::Measurement& m, const config::ExperimentConfig& cfg,
               const measure::TraceTarget& target, const measure::Progress& progress) const override {
    const proc::ProgramProfile p =
        proc::profile_program(cfg, target.folder, progress, analyze::is_trace_file_name);
    m.trace_path = p.files.front();
    const analyze::Analysis a = analyze::analyze(p.folder);
    m.trace_verdict = a.verdict.text();
    const analyze::Breakdown& b = a.ranks[a.primary];
    if (b.has_gpu && b.gpu_span_us > 0)
      m.gpu_busy_pct = 100.0 * b.gpu_busy_total_us / b.gpu_span_us;  // device work over its span
    set_split_from_trace(m, b);
  }
};

}  // namespace

const measure::SideKind& program_kind() {
  static const ProgramKind kind;
  return kind;
}

}  // namespace ptune::tune
