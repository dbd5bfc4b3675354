#pragma once
/// ptune's command line, parsed, shared by the executable (which parses it and runs the commands
/// that need no tensors: analyze, check, schema, report, --help, --version) and the training
/// engine (a module the executable loads only for sweep, train, eval, tune and launch, since
/// LibTorch's libraries alone take half a second and hundreds of megabytes to map).

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dist/launcher.hpp"
#include "report/terminal.hpp"
#include "tune/tuner.hpp"

namespace ptune::cli {

/// The config and its overrides, as every config-reading command takes them.
struct Common {
  std::string config_path;
  std::vector<std::string> sets;
};

/// What the engine's commands read from the command line.
struct CommandLine {
  std::string command;  // the subcommand's name
  bool verbose = false, quiet = false;
  bool rank0 = true;  // data parallel: only rank 0 prints

  Common sweep_c, train_c, eval_c, tune_c;
  std::string sweep_format = "table", sweep_out, sweep_rows, sweep_label;
  bool sweep_out_given = false, sweep_rows_given = false, sweep_profile = false, sweep_no_header = false;

  std::optional<std::string> resume, save_weights;

  std::string eval_format = "table", weights;

  tune::TuneOptions tune_opt;
  tune::BatchSearchOptions tune_batch_opt;
  bool tune_batch = false, tune_out_given = false;
  double tune_budget_min = 0;
  int64_t tune_repeats = 3;
  std::string tune_out, tune_format = "table";

  dist::LaunchOptions launch_opt;
  bool launch_no_prefix = false, launch_prefix_stdout = false;

  const std::atomic<bool>* interrupted = nullptr;  // set by the first SIGINT or SIGTERM
  const std::atomic<int>* signal = nullptr;        // which of the two came first (0: none)
};

/// 130 after SIGINT, 143 after SIGTERM (128 + the signal, as a shell reports it).
int stopped_code(const CommandLine& cl);

/// The config file with its --set overrides applied, validated.
config::ExperimentConfig load(const Common& c);

/// An output file given on the command line is checked before any work starts (a missing
/// folder, a folder given as the file, an empty name): a usage error, not a lost result.
void check_output(bool given, const std::string& path, const std::string& flag);

/// UsageError unless `f` is one of `allowed`, with a suggestion.
void check_format(const std::string& f, const std::vector<std::string>& allowed);

/// `s` as one shell word: as it is when it holds only safe characters, else in single quotes.
std::string shell_quote(const std::string& s);

/// The terminal style of a file descriptor, from TERM and NO_COLOR.
report::TerminalStyle style_of(int fd);

/// The engine module's entry points (extern "C", found with dlsym): run the command; and, after
/// the output is flushed, shut the data-parallel process group down (graceful after success,
/// aborted after a failure). Errors are thrown as ptune's error types or std::exception, with
/// LibTorch's backtrace removed unless --verbose.
using EngineRun = int (*)(const CommandLine&);
using EngineFinish = void (*)(bool graceful);
inline constexpr const char* kEngineRun = "ptune_engine_run";
inline constexpr const char* kEngineFinish = "ptune_engine_finish";
inline constexpr const char* kEngineFile = "libptune_engine.so";

}  // namespace ptune::cli
