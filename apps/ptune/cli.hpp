#pragma once
/// ptune's command line, parsed, shared by the executable (which parses it and runs the commands
/// that need no tensors: analyze, check, schema, report, --help, --version) and the training
/// engine (a module the executable loads only for sweep, compare, train, eval, tune and launch, since
/// LibTorch's libraries alone take half a second and hundreds of megabytes to map).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "analyze/advice.hpp"
#include "analyze/compare.hpp"
#include "config/config.hpp"
#include "config/tune_defaults.hpp"
#include "core/errors.hpp"
#include "report/terminal.hpp"
#include "system/launch_options.hpp"

namespace CLI {
class App;
}

/// The engine module's entry points (engine.cpp), found with dlsym: C functions that return codes
/// and fill plain structs, so that no C++ exception crosses them. The one C++ type that does is
/// the parsed command line (cli::CommandLine, ptune_engine_run's argument): the executable loads
/// only an engine compiled from the same headers (its build ID, a hash of them), so both see the
/// same type.
extern "C" {

/// How an engine call ended: the exit code and, when not 0, the line the executable prints
/// (print_outcome), cut to fit.
struct ptune_engine_outcome {
  int exit_code;
  char message[16384];
};

/// A CPU's ceilings for `ptune analyze` (bench::machine_peak and machine_bandwidth).
struct ptune_engine_ceilings {
  double flops_per_s;  // 0: none
  double bytes_per_s;  // 0: none
  char precision[16];
  char peak_source[1024];
  char bandwidth_source[1024];
};

/// Runs the command of `command_line` (a const ptune::cli::CommandLine*); returns its exit code,
/// also in `outcome` with its message. The engine catches everything.
typedef int (*ptune_engine_run_fn)(const void* command_line, struct ptune_engine_outcome* outcome);
/// Called from the executable's signal handler with the first stop signal (async-signal-safe):
/// the command stops at its next step.
typedef void (*ptune_engine_stop_fn)(int sig);
/// After the output is flushed: shuts a data-parallel process group down (graceful when
/// `graceful` is not 0, else aborted).
typedef void (*ptune_engine_finish_fn)(int graceful);
/// The engine's PTUNE_BUILD_ID (build_id.cmake), which must be the executable's: the engine
/// resolves ptune's own code in the executable.
typedef const char* (*ptune_engine_build_id_fn)(void);
/// This CPU's ceilings in `precision`, calibrated once and cached; 0, or 1 with `outcome` set.
typedef int (*ptune_engine_cpu_ceilings_fn)(const char* precision, struct ptune_engine_ceilings* out,
                                            struct ptune_engine_outcome* outcome);
}

namespace ptune::cli {

/// The config and its overrides, as every config-reading command takes them.
struct Common {
  std::string config_path;
  std::vector<std::string> sets;
};

struct CommandLine;

// Each command's options: one type per command. Its members are the options' values; its
// define() (options.cpp) declares each option once to CLI11, with its help, bound to its member;
// its check() (options.cpp, beside define()) makes the checks CLI11 cannot, and reads the
// command's config into CommandLine::config, before the command starts and before any engine
// loads (check_before_engine): a usage or config error is one line in milliseconds. The command's
// code reads the members. Adding an option is a member, its line in define(), its line in
// check() if it needs one, and the code that reads it (and its line in docs/commands.md).

/// `ptune sweep`'s options.
struct SweepArgs {
  Common common;
  std::string format = "table", out, rows, label;
  bool out_given = false, rows_given = false, profile = false, no_header = false;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
  /// The options of what the sweep prints and writes and which rows it runs (all but the config
  /// and --set), shared with `ptune compare`, and their checks after --format's, a file given
  /// not one of `inputs`.
  void define_output(CLI::App& cmd);
  void check_output(const CommandLine& cl,
                    const std::vector<std::pair<std::string, std::string>>& inputs) const;
};

/// `ptune compare`'s options: commands, each a row of a sweep that the executable builds
/// (config::config_from_commands), the first the baseline; options for one row are written
/// ROW:VALUE (0-based), the others apply to every row. The sweep then runs as `ptune sweep`
/// runs a config, with `sweep`'s options.
struct CompareArgs {
  std::vector<std::string> commands, names, envs, step_patterns, samples_per_step, sets;
  std::string save_config;
  bool save_given = false;
  SweepArgs sweep;  // its --format, --out, --rows, --label, --profile, --no-header; no config
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune train`'s options.
struct TrainArgs {
  Common common;
  std::optional<std::string> resume, save_weights;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune eval`'s options.
struct EvalArgs {
  Common common;
  std::string format = "table", weights;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune tune`'s options: the greedy search's, or the batch-size finder's with --batch-size.
struct TuneArgs {
  Common common;
  double threshold_pct = config::kDefaultThresholdPct;
  double margin_pct = config::kDefaultMarginPct;
  int64_t max_batch = 0;
  bool batch = false, out_given = false;
  double budget_min = 0;
  int64_t repeats = 3;
  std::string out, format = "table";
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune launch`'s options.
struct LaunchArgs {
  system::LaunchOptions opt;
  bool no_prefix = false, prefix_stdout = false;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const {}  // dist::launch checks the ranks' options as it starts them
};

/// `ptune row-side`'s (a sweep row's side in a child process: bench/child_side.hpp).
struct RowSideArgs {
  Common common;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune check`'s options.
struct CheckArgs {
  Common common;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const {}  // reading the config is the command itself (run_check)
};

/// `ptune schema` has none.
struct SchemaArgs {
  void define(CLI::App& cmd) {}
  void check(CommandLine& cl) const {}
};

/// `ptune report`'s options.
struct ReportArgs {
  std::vector<std::string> files;
  std::string out, against, format;
  double fail_pct = 0;
  bool out_given = false, against_given = false, fail_given = false;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// `ptune analyze`'s options.
struct AnalyzeArgs {
  std::vector<std::string> paths, labels;
  std::string format = "table", html;
  int64_t batch = 0;
  double noise_pct = analyze::kDefaultNoisePct;
  double events_mb = static_cast<double>(analyze::kDefaultPartBytes >> 20);
  bool html_given = false;
  analyze::AnalyzeOptions opt;
  void define(CLI::App& cmd);
  void check(CommandLine& cl) const;
};

/// The options of the command given: exactly one of the types above.
using CommandArgs = std::variant<SweepArgs, CompareArgs, TrainArgs, EvalArgs, TuneArgs, LaunchArgs,
                                 RowSideArgs, CheckArgs, SchemaArgs, ReportArgs, AnalyzeArgs>;

/// The parsed command line: the command's name, the global flags and the command's options.
struct CommandLine {
  std::string command;  // the subcommand's name
  bool verbose = false, quiet = false;
  bool rank0 = true;  // data parallel: only rank 0 prints
  CommandArgs args;

  // The config of sweep, compare (built from its commands), train, eval, tune and row-side, read and
  // validated by the executable before it loads the engine (check_before_engine): read once, as a pipe can be
  // read only once.
  std::optional<config::ExperimentConfig> config;

  const std::atomic<bool>* interrupted = nullptr;  // set by the first SIGINT or SIGTERM
  const std::atomic<int>* signal = nullptr;        // which of the two came first (0: none)

  /// The command's options as `T` (std::bad_variant_access for another command's: a bug).
  template <class T>
  const T& get() const {
    return std::get<T>(args);
  }
  template <class T>
  T& get() {
    return std::get<T>(args);
  }
};

/// stopped_exit_code() of the first stop signal: 130 after SIGINT, 143 after SIGTERM.
int stopped_code(const CommandLine& cl);

/// The Outcome of the exception in flight (call it in a catch block): ConfigError and
/// UsageError exit 2, Interrupted the stop signal's code (its message "interrupted" or
/// "terminated"), anything else 1, with `what()` as the message. Throws nothing.
Outcome outcome_of_current_exception(int stop_signal);

/// Prints an outcome's line on stderr, as every command ends: nothing for 0 (or an empty
/// message: a row-side child, whose parent speaks), "ptune: MESSAGE" after a stop signal,
/// "ptune: error: MESSAGE" otherwise. Returns its exit code.
int print_outcome(const Outcome& o);

/// The config file with its --set overrides applied, validated (check_config).
config::ExperimentConfig load(const Common& c);

/// Validates `cfg` and checks each of its rows' process settings against this machine (a
/// library that is not installed, a CPU or NUMA node that is not there); errors start with
/// `source`. Throws ConfigError.
void check_config(const config::ExperimentConfig& cfg, const std::string& source);

/// What the executable checks before a command starts, and so before it loads the engine: a
/// usage or config error is one line and exit 2 in milliseconds, without the engine at all.
/// The command's options by their type's check() (its --format, --out, ...; the config of
/// sweep, train, eval, tune and row-side, read into `cl.config`), then the config's program
/// against the command: only `ptune sweep` times one, and not under `ptune launch`.
void check_before_engine(CommandLine& cl);

/// An output file given on the command line is checked before any work starts (a missing
/// folder, a folder given as the file, an empty name): a usage error, not a lost result.
void check_output(bool given, const std::string& path, const std::string& flag,
                  const std::vector<std::pair<std::string, std::string>>& inputs = {});

/// UsageError unless `f` is one of `allowed`, with a suggestion.
void check_format(const std::string& f, const std::vector<std::string>& allowed);

/// The terminal style of a file descriptor, from TERM and NO_COLOR.
report::TerminalStyle style_of(int fd);

inline constexpr const char* kEngineRun = "ptune_engine_run";
inline constexpr const char* kEngineStop = "ptune_engine_stop";
inline constexpr const char* kEngineFinish = "ptune_engine_finish";
inline constexpr const char* kEngineBuildId = "ptune_engine_build_id";
inline constexpr const char* kEngineCpuCeilings = "ptune_engine_cpu_ceilings";
inline constexpr const char* kEngineFile = "libptune_engine.so";

/// `o` into the C record (the message cut to fit). Throws nothing.
void fill_outcome(const Outcome& o, ptune_engine_outcome* out);

}  // namespace ptune::cli
