#pragma once
/// The results of a sweep (DESIGN §5) and the writers that render them: an aligned terminal
/// table, JSON (the contract scripts rely on), CSV and Markdown; files by their extension
/// (HTML through report/html.hpp).

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "system/cpu_info.hpp"
#include "config/config.hpp"
#include "measure/measurement.hpp"
#include "report/status.hpp"

namespace ptune::report {

/// The machine and software a result came from.
struct Environment {
  std::string torch;                   // LibTorch version
  std::string device;                  // device name
  std::string device_kind;             // "cpu" | "cuda"
  std::string cuda;                    // CUDA version, "" on CPU builds
  int64_t cpu_threads = 0;             // 0: a file that does not say
  int64_t world_size = 1;              // processes; 0: a file that does not say
  std::optional<system::CpuInfo> cpu;  // the CPU as LibTorch uses it (ISAs, bf16, cores); absent in tests
};

/// One row of the table.
struct Row {
  std::optional<size_t> index;         // its place in the config's sweep (--rows runs some); none: a
                                       // row not of a sweep (its place in the results then)
  std::string name;                    // the sweep row's name
  nlohmann::ordered_json changes;      // the row's own overrides
  std::optional<int64_t> num_workers;  // loader.num_workers; none: a file that does not say
  config::Mode mode = config::Mode::kTrain;
  std::string arch;                       // model.arch: speedups compare rows of the same mode and arch
  RowStatus status;                       // ok, or eager fallback, skipped or failed with why
  std::optional<measure::Measurement> m;  // absent when not ok
  double speedup_vs_prev = 0;             // vs the previous ok row of the same mode
  double speedup_vs_base = 0;             // vs the first ok row of the same mode
  stats::Interval rate;                   // samples/s as printed: the base row's own rate times vs base,
                                          // with its 95% interval (report/figures.hpp); unset: m's own
  stats::Interval prev_ci;                // speedup_vs_prev with its interval (stats::kSpeedupLevel)
  stats::Interval base_ci;                // speedup_vs_base with its interval
  std::string verdict_prev;  // faster | slower | within noise | undecided; "" for the first row of a mode
  std::string verdict_base;  // the same for the cumulative speedup
  std::optional<size_t> compared_with;  // index (in Results::rows) of the row speedup_vs_prev is against
  std::vector<double> prev_ms;    // interleaved: that row's windows, paired with this row's m->repeat_ms
  std::vector<int> prev_process;  // the process each of prev_ms ran in (several: ProcessGroup); else empty
  bool rebuilt = false;           // interleaved by rebuilding both pipelines for every window
  stats::NoiseRule rule;          // the thresholds its verdicts used (measure.target_ci_pct, noise_pct)
  std::string diagnosis;
  std::vector<std::string> notes;  // warnings (changed training semantics, ...)
  std::vector<double> loss_curve;  // measure.convergence_steps: loss of each step
};

struct Results {
  nlohmann::ordered_json config;  // the resolved config
  Environment environment;
  std::vector<Row> rows;
  RunStatus status = RunStatus::kRunning;
};

/// Adds to `row` a note "<key> changes training semantics; loss L vs B in the first row" for
/// each of its overrides that changes what is trained, not only how fast (batch size,
/// precision, lr, optimizer, model, image size, accumulation). No-op without a loss or base.
void note_semantics(Row& row, const std::optional<double>& base_loss);

/// Fills the last row's figures from the rows before it (report/figures.hpp): vs prev from its
/// link to the previous ok row of its mode and model (its interleaved pairs, prev_ms with
/// m->repeat_ms, when it has them, else the two rows' windows as independent samples); vs base
/// the chain of links from the first row of its mode and model (the link itself when that row
/// is the previous one); samples/s (`rate`) the first row's own rate times vs base. A row with no
/// earlier ok row of its mode gets 1.0, no verdict, and its own rate. Throws nothing.
void compute_speedups(std::vector<Row>& rows);

/// The samples/s a row prints, with its interval: `rate` when set, else m's own. Throws nothing.
stats::Interval printed_rate(const Row& row);

/// The ms/step a row prints: its samples per step over printed_rate (so the two agree). Throws
/// nothing; 0 without a measurement.
double printed_ms_per_step(const Row& row);

/// A row's achieved model FLOP/s: its model FLOPs per sample (forward + backward) times the
/// samples/s it prints (printed_rate), so that it agrees with every other figure of the row;
/// nullopt without a measurement or model FLOPs (a data row). Throws nothing.
std::optional<double> achieved_flops(const Row& row);

/// achieved_flops() over the machine's peak in the row's precision, in %; nullopt without
/// either, or above 100% (a calibrated peak that the row beat bounds nothing). Throws nothing.
std::optional<double> pct_of_peak(const Row& row);

/// FLOP/s with an SI prefix and three significant digits: "85.3G", "1.21T", "512M". Throws
/// nothing.
std::string flops_text(double flops_per_s);

/// What the "% peak against" line adds to a peak calibrated under competing load.
inline constexpr const char* kPeakUnderLoadNote =
    ": no ceiling, so % peak is left out ('?'); calibrated again when the cores are quiet";

/// The line under the table naming the peaks % of peak is read against, e.g. "peak: fp32
/// 118G FLOP/s (calibrated achievable peak (not a datasheet figure): 1024x1024 fp32 matmul on
/// ...)"; several precisions joined with "; "; "" when no row has a peak. Throws nothing.
std::string peak_line(const Results& r);

/// What a key of a results row holds, as readers check it (run_file's normalize).
enum class KeyKind {
  kText,     // a string, or null
  kNumber,   // a number, or null (a value of another type reads as null)
  kFigure,   // a figure a report stands on: a number from 0 to 1e15, or null; else an error
  kBound,    // an interval's bound: a finite number from 0, or null; else an error
  kFlag,     // true, false or null
  kNumbers,  // a list of numbers, or null
  kWindows,  // a list of window times, each from 0 to 1e15; else an error
  kTexts,    // a list of strings, or null
  kObject,   // an object (the row's changes), {} when absent
  kNotes,    // a list of strings (a single string or other values are turned into one)
};

struct RowKey {
  std::string name;
  KeyKind kind;
};

/// The keys of every row of the JSON document, in order, with what each holds: one table (in
/// results_json.cpp, each key's writer beside its reader) from which the document, its reader,
/// the CSV's columns and the check of files read are all made. Every row has every key, `null`
/// where it has no value (a skipped row's samples_per_s, a CPU row's gpu_busy_pct).
const std::vector<RowKey>& row_key_kinds();

/// The names of row_key_kinds(), in order.
const std::vector<std::string>& row_keys();

/// The results as the DESIGN §5 JSON document; every row has every key of row_keys().
nlohmann::ordered_json to_json(const Results& r);

/// A results document (to_json's, as load_run normalizes any version's) read back: rendered
/// again, it gives what the sweep that wrote it printed, up to the figures the document keeps
/// rounded (FLOP/s and % peak are computed again from the rounded rate). Keys absent or of
/// another type read as no value. Throws nothing.
Results results_from_json(const nlohmann::ordered_json& doc);

/// The columns of the CSV, the same whatever the rows hold: the row keys that are not lists
/// (the unit is in the name: _ms, _per_s, _pct, _bytes; speedups are ratios), after `index`;
/// `changes` is the row's overrides as a JSON object, `notes` joined with "; ".
const std::vector<std::string>& csv_columns();

/// Renders the results in `format` ("table" | "json" | "csv" | "md"). `color` (table only)
/// adds ANSI colours: speedups >= 1.05x green, < 0.95x red, skipped rows yellow, failed red.
/// CSV cells of numeric columns hold a number or nothing; Markdown cells are escaped so that
/// any name stays in its column, and the device line and each row's diagnosis follow the table.
std::string render_results(const Results& r, const std::string& format, bool color = false);

/// The format a results file's name asks for: "csv" (.csv), "md" (.md), "html" (.html, .htm),
/// any case; anything else "json". Throws nothing.
std::string format_of_path(const std::string& path);

/// The companion of a CSV results file: FILE.csv's environment, config and status go to
/// FILE.env.json (the CSV holds the rows only). Throws nothing.
std::string csv_companion_path(const std::string& csv_path);

/// The companion document of a CSV: the JSON document without its rows, plus "csv": the CSV's
/// file name.
nlohmann::ordered_json csv_companion(const Results& r, const std::string& csv_path);

/// Writes the results to `path` in the format its name asks for (format_of_path), atomically;
/// a CSV also gets its companion (csv_companion_path). Throws WriteError naming the path.
void write_results(const std::string& path, const Results& r);

/// The output formats render_results() knows.
const std::vector<std::string>& formats();

}  // namespace ptune::report
