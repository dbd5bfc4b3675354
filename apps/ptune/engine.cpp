// The training engine: the commands that need tensors (sweep, compare, train, eval, tune, launch), in a
// module that the ptune executable loads only for them (apps/ptune/cli.hpp says why). The
// executable parses the command line and prints errors; this file runs the command.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include "cli.hpp"
#include "ptune_build_id.hpp"
#include "system/rendezvous.hpp"
#include "dist/group.hpp"
#include "dist/launcher.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "engine/run.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "bench/child_side.hpp"
#include "tune/sides.hpp"
#include "bench/peak.hpp"
#include "core/stats.hpp"
#include "system/proc_stat.hpp"
#include "core/files.hpp"
#include "report/results.hpp"
#include "report/terminal.hpp"
#include "runtime/torch_error.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

namespace ptune::cli {
namespace {

/// The command's config, as the executable read and validated it (check_before_engine).
config::ExperimentConfig config_of(const CommandLine& cl) {
  if (!cl.config)
    throw std::logic_error("internal error: the executable passed '" + cl.command + "' no config");
  return *cl.config;
}

/// After a sweep with no failed row: each skipped row (an option or size this device or
/// dataset cannot run) is named on stderr; when no row was measured at all, that is a config
/// error: the last one is the outcome's message, exit 2.
Outcome report_skipped(const report::Results& results) {
  size_t skipped = 0;
  for (const auto& row : results.rows) skipped += row.status.is(report::RowStatus::State::kSkipped) ? 1 : 0;
  if (skipped == 0) return {};
  const bool none_measured = skipped == results.rows.size();
  for (size_t i = 0, seen = 0; i < results.rows.size(); ++i) {
    const auto& row = results.rows[i];
    if (!row.status.is(report::RowStatus::State::kSkipped)) continue;
    const std::string line = "sweep: row '" + row.name + "' " + row.status.text();
    if (none_measured && ++seen == skipped) return {kExitUsage, line + "; no row of the sweep was measured"};
    log::warn(line);
  }
  return {};
}

/// The sweep's rows as printed and written: --label names them, --set overrides are noted.
report::Results marked(report::Results r, const CommandLine& cl, bool one_row) {
  const SweepArgs& args = cl.get<SweepArgs>();
  std::string sets_note;
  for (const auto& s : args.common.sets)
    sets_note += (sets_note.empty() ? "command line: --set " : " --set ") + s;
  for (auto& row : r.rows) {
    if (!args.label.empty()) row.name = one_row ? args.label : args.label + ": " + row.name;
    if (!sets_note.empty()) row.notes.push_back(sets_note);
  }
  return r;
}

/// The sweep's live progress line on a terminal (or, with --verbose, a log line per phase).
decltype(tune::SweepOptions::on_progress) sweep_progress(const CommandLine& cl, report::ProgressLine& line,
                                                         bool live, size_t n_rows,
                                                         const stats::Stopwatch& clock) {
  return [&cl, &line, live, n_rows, &clock](size_t i, const std::string& name, const std::string& phase,
                                            int64_t s, int64_t of, int64_t samples_per_step) {
    if (live) {
      const std::string text =
          line.tick(i, n_rows, name, phase, s, of, samples_per_step, clock.ms() / 1000.0);
      if (!text.empty()) std::fputs(text.c_str(), stderr), std::fflush(stderr);
    } else if (cl.verbose && s == of) {
      log::debug("row " + std::to_string(i) + " '" + name + "': " + phase + " done");
    }
  };
}

/// --out's writer (rank 0 writes), rewritten after every row; none without --out. A FIFO or a
/// device (/dev/stdout) is not rewritten after every row: it gets the final document once (its
/// reader would take the first document and go).
decltype(tune::SweepOptions::on_row) out_writer(const CommandLine& cl, bool one_row) {
  const SweepArgs& args = cl.get<SweepArgs>();
  if (args.out.empty()) return {};
  struct stat st {};
  const bool stream = ::stat(args.out.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  return [&cl, &args, one_row, stream](const report::Results& r) {
    if (!cl.rank0) return;  // data parallel: rank 0 writes
    if (stream && r.status == report::RunStatus::kRunning) return;
    report::write_results(args.out, marked(r, cl, one_row));
  };
}

/// The sweep's table on stdout (rank 0 prints), in --format, without its header with --no-header.
void print_sweep(const CommandLine& cl, const report::Results& results, bool one_row) {
  const SweepArgs& args = cl.get<SweepArgs>();
  // Colour on a terminal that has it (not TERM=dumb; not with NO_COLOR non-empty).
  const bool color = args.format == "table" && cli::style_of(STDOUT_FILENO).color;
  if (!cl.rank0) return;
  std::string text = report::render_results(marked(results, cl, one_row), args.format, color);
  if (args.no_header) text.erase(0, text.find('\n') == std::string::npos ? text.size() : text.find('\n') + 1);
  std::cout << text << std::flush;
}

/// `ptune sweep`: the rows, the table on stdout, --out rewritten after every row.
Outcome run_sweep_command(const CommandLine& cl) {
  const SweepArgs& args = cl.get<SweepArgs>();
  auto cfg = config_of(cl);  // --format, --out and --no-header checked with it
  if (args.profile) cfg.measure.profile = true;
  report::Results results;
  tune::SweepOptions opt;
  opt.interrupted = cl.interrupted;
  if (args.rows_given) opt.rows = tune::parse_rows(args.rows, std::max<size_t>(1, cfg.sweep.size()));
  const bool live = !cl.quiet && ::isatty(STDERR_FILENO) == 1;
  opt.live = live;
  const bool one_row = cfg.sweep.size() <= 1;
  opt.on_row = out_writer(cl, one_row);
  report::ProgressLine progress(cli::style_of(STDERR_FILENO).escapes);
  const stats::Stopwatch clock;
  opt.on_progress = sweep_progress(cl, progress, live, std::max<size_t>(1, cfg.sweep.size()), clock);
  Outcome outcome;
  try {
    tune::run_sweep(cfg, opt, results);
    if (live) std::fputs(progress.clear().c_str(), stderr);
  } catch (const Interrupted&) {
    if (live) std::fputs(progress.clear().c_str(), stderr);
    log::warn("interrupted: " + std::to_string(results.rows.size()) + " finished row(s) kept");
    outcome = {stopped_code(cl), ""};  // the warning above says it
  } catch (const WriteError& e) {
    // --out could not be written: the rows measured so far still reach stdout.
    if (live) std::fputs(progress.clear().c_str(), stderr);
    outcome = {kExitFailure, e.what()};
  }
  print_sweep(cl, results, one_row);
  if (outcome.exit_code != kExitOk) return outcome;
  // Rows that failed (not skipped for an option the device cannot honour) fail the sweep,
  // after every finished row was printed and written.
  for (const auto& row : results.rows)
    if (row.status.is(report::RowStatus::State::kFailed))
      return {kExitFailure, "sweep: row '" + row.name + "' " + row.status.text()};
  return report_skipped(results);
}

/// `ptune compare`: the sweep that the executable built from its commands (CompareArgs::check),
/// written with --save-config before its rows run, then run as `ptune sweep` runs a config.
Outcome run_compare_command(const CommandLine& cl) {
  const CompareArgs& args = cl.get<CompareArgs>();
  if (!args.save_config.empty() && cl.rank0) {
    files::write_atomically(args.save_config, "--save-config", config::to_json(config_of(cl)).dump(2) + "\n");
    log::info("wrote the comparison's config to " + args.save_config + " (ptune sweep " +
              system::shell_quote(args.save_config) + " runs it)");
  }
  CommandLine sweep = cl;
  sweep.command = "sweep";
  sweep.args = args.sweep;
  return run_sweep_command(sweep);
}

/// Prints a tune search's outcome in --format: json (the whole document), csv/md (the table;
/// the summary line goes to the log), or the table with `extra` text and the summary.
void print_tune(const CommandLine& cl, const nlohmann::ordered_json& doc, const report::Results& table,
                const std::string& extra, const std::string& summary) {
  const std::string& format = cl.get<TuneArgs>().format;
  if (format == "json") {
    std::cout << doc.dump(2) << "\n" << std::flush;
  } else if (format != "table") {
    std::cout << report::render_results(table, format) << std::flush;
    log::info(summary);
  } else {
    std::cout << report::render_results(table, "table") << extra << summary << "\n" << std::flush;
  }
}

/// tune --out: the winning config, written whole or not at all.
void write_best(const CommandLine& cl, const config::ExperimentConfig& best) {
  const TuneArgs& t = cl.get<TuneArgs>();
  if (t.out.empty()) return;
  files::write_atomically(t.out, "--out", config::to_json(best).dump(2) + "\n");
  log::info("wrote the winning config to " + t.out);
}

/// A tune trial's measurement (tune::default_measure), stopped by Ctrl-C.
tune::MeasureFn tune_measure(const CommandLine& cl) {
  return tune::default_measure([&cl](const std::string&, int64_t, int64_t) {
    if (cl.interrupted->load()) throw Interrupted();
  });
}

/// `ptune tune --batch-size`: the batch-size finder.
Outcome run_batch_search(const CommandLine& cl, const config::ExperimentConfig& cfg) {
  const TuneArgs& args = cl.get<TuneArgs>();
  tune::BatchSearchOptions opt;
  opt.margin_pct = args.margin_pct;
  opt.max_batch = args.max_batch;
  opt.budget_s = 60.0 * args.budget_min;
  opt.min_repeats = args.repeats;
  opt.measure = tune_measure(cl);
  opt.interrupted = cl.interrupted;
  char line[256];
  opt.on_try = [&](const report::Results& r) {
    const auto& row = r.rows.back();
    std::snprintf(line, sizeof line, "%.1f samples/s", row.m ? report::printed_rate(row).point : 0.0);
    log::info("tune: " + row.name + ": " + (row.status.ok_state() ? std::string(line) : row.status.text()));
  };
  auto res = tune::find_batch_size(cfg, opt);
  std::snprintf(
      line, sizeof line, "fastest: batch %lld; largest that fits: batch %lld%s",
      static_cast<long long>(res.fastest), static_cast<long long>(res.largest_fitting),
      res.stop.is(tune::StopReason::Kind::kSearched) ? "" : (" (stopped: " + res.stop.text() + ")").c_str());
  std::string notes;
  for (const auto& n : res.notes) notes += "note: " + n + "\n";
  print_tune(cl, tune::to_json(res), res.table, notes, line);
  write_best(cl, res.best);
  if (res.stop.is(tune::StopReason::Kind::kInterrupted)) return {stopped_code(cl), ""};  // its table says it
  for (const auto& t : res.tries)
    if (t.state == tune::TryState::kFailed)  // out of memory is what the search looks for
      return {kExitFailure, "tune: batch " + std::to_string(t.batch_size) + " " + t.status_text()};
  return {};
}

/// `ptune tune`: the greedy search over the optimizations.
Outcome run_greedy_tune(const CommandLine& cl, const config::ExperimentConfig& cfg) {
  const TuneArgs& args = cl.get<TuneArgs>();
  tune::TuneOptions opt;
  opt.threshold_pct = args.threshold_pct;
  opt.budget_s = 60.0 * args.budget_min;
  opt.min_repeats = args.repeats;
  opt.measure = tune_measure(cl);
  opt.interrupted = cl.interrupted;
  char line[256];
  opt.on_trial = [&](const tune::Trial& t) {
    std::string s = "tune: " + (t.pass ? "pass " + std::to_string(t.pass) + ": " : std::string()) + t.name;
    if (t.m) {
      std::snprintf(line, sizeof line, ": %.1f samples/s", t.m->samples_per_s);
      s += line;
    }
    const std::string verdict = tune::trial_verdict_text(t.verdict);
    log::info(s + (t.pass ? ": " + verdict + (t.reason.empty() ? "" : " (" + t.reason + ")") : ""));
  };
  auto res = tune::greedy_tune(cfg, opt);
  const auto& first = *res.path.rows.front().m;
  const auto& last = *res.path.rows.back().m;
  std::snprintf(line, sizeof line, "stopped: %s after %.0f s; best %.1f samples/s, %.2fx the baseline",
                res.stop.text().c_str(), res.elapsed_s, last.samples_per_s,
                first.samples_per_s > 0 ? last.samples_per_s / first.samples_per_s : 1.0);
  print_tune(cl, tune::to_json(res), res.path, "\ntrials:\n" + tune::render_trials(res.trials), line);
  write_best(cl, res.best);
  if (res.stop.is(tune::StopReason::Kind::kInterrupted)) return {stopped_code(cl), ""};  // its table says it
  for (const auto& t : res.trials) {
    // A larger batch or a precision running out of memory is what the search probes.
    if (t.verdict != tune::TrialVerdict::kFailed || t.out_of_memory) continue;
    return {kExitFailure, "tune: trial '" + t.name + "' failed" + (t.reason.empty() ? "" : ": " + t.reason)};
  }
  return {};
}

/// `ptune tune`: the batch-size finder with --batch-size, else the greedy search.
Outcome run_tune_command(const CommandLine& cl) {
  const TuneArgs& t = cl.get<TuneArgs>();
  const auto cfg = config_of(cl);  // --format and --out checked with it
  return t.batch ? run_batch_search(cl, cfg) : run_greedy_tune(cl, cfg);
}

/// train and eval, started again with the config's process settings (main.cpp): what this
/// process got.
void log_process_settings() {
  if (std::getenv("PTUNE_PROCESS_SET") != nullptr)
    log::info("process settings: " + system::describe_this_process());
}

/// `ptune train`: epochs, progress, checkpoints, resume.
Outcome run_train_command(const CommandLine& cl) {
  const TrainArgs& args = cl.get<TrainArgs>();
  log_process_settings();
  auto cfg = config_of(cl);
  engine::TrainOptions opt;
  opt.resume = args.resume;
  opt.save_weights = args.save_weights;
  opt.config_path = args.common.config_path;
  opt.interrupted = cl.interrupted;
  opt.on_note = [](const std::string& s) { log::info(s); };
  opt.on_progress = [&](const engine::TrainProgress& p) {
    if (cl.quiet) return;
    std::fprintf(stderr, "step %lld/%lld  epoch %lld  loss %.4f  %.1f samples/s  ETA %.0fs\n",
                 static_cast<long long>(p.step), static_cast<long long>(p.total_steps),
                 static_cast<long long>(p.epoch), p.loss, p.samples_per_s, p.eta_s);
  };
  try {
    auto s = engine::train(cfg, opt);
    if (cl.rank0 && s.trained == 0)
      std::printf(
          "no step trained: the checkpoint is at step %lld, and this run ends at step %lld "
          "(train.max_steps, train.epochs); checkpoint %s%s\n",
          static_cast<long long>(s.steps), static_cast<long long>(s.total), s.last_checkpoint.c_str(),
          opt.save_weights ? (", weights " + *opt.save_weights).c_str() : "");
    else if (cl.rank0)
      std::printf("trained %lld step%s: final loss %.4f, %.1f samples/s, checkpoint %s\n",
                  static_cast<long long>(s.steps), s.steps == 1 ? "" : "s", s.final_loss, s.samples_per_s,
                  s.last_checkpoint.c_str());
  } catch (const InterruptedAtStart&) {
    throw;  // before any step: no checkpoint
  } catch (const Interrupted&) {
    // No signal here: another rank (perhaps on a node whose launcher died) was stopped.
    const int sig = cl.signal->load();
    const std::string what = sig == SIGTERM  ? "terminated"
                             : sig == SIGINT ? "interrupted"
                                             : "stopped with another rank that was interrupted or terminated";
    log::warn(what + "; checkpoint written, continue with --resume");
    return {stopped_code(cl), ""};
  }
  return {};
}

/// The error of eval on a training checkpoint given as --weights: the exact commands that
/// export its weights and evaluate them.
DataError checkpoint_given(const CommandLine& cl, const DataError& e, int64_t step) {
  const EvalArgs& args = cl.get<EvalArgs>();
  std::string out = args.weights;
  if (out.size() > 3 && out.compare(out.size() - 3, 3, ".pt") == 0) out.resize(out.size() - 3);
  out += "-weights.pt";
  std::string sets;
  for (const auto& s : args.common.sets) sets += " --set " + system::shell_quote(s);
  // Its last checkpoint goes beside the given one (the same file when that is the run's).
  std::string folder = std::filesystem::path(args.weights).parent_path().string();
  if (folder.empty()) folder = ".";
  const std::string config = system::shell_quote(args.common.config_path);
  return DataError(std::string(e.what()) + ", exactly: ptune train " + config + sets + " --resume " +
                   system::shell_quote(args.weights) + " --set train.max_steps=" + std::to_string(step) +
                   " --set " + system::shell_quote("train.checkpoint_dir=" + folder) + " --save-weights " +
                   system::shell_quote(out) + " (no further step is trained), then: ptune eval " + config +
                   sets + " --weights " + system::shell_quote(out));
}

/// `ptune eval`: mean loss and top-1 accuracy of weights.
Outcome run_eval_command(const CommandLine& cl) {
  const EvalArgs& args = cl.get<EvalArgs>();
  log_process_settings();
  const auto cfg = config_of(cl);  // --format checked with it
  engine::EvalResult r;
  try {
    r = engine::evaluate(cfg, args.weights, cl.interrupted);
  } catch (const DataError& e) {
    const auto step = engine::checkpoint_step(args.weights);
    if (!step) throw;
    throw checkpoint_given(cl, e, *step);
  }
  if (!cl.rank0) return {};
  if (args.format == "json")
    std::cout << nlohmann::ordered_json{{"loss", r.loss}, {"top1", r.top1}, {"samples", r.samples}}.dump()
              << "\n";
  else
    std::printf("loss %.4f  top-1 %.2f%%  samples %lld\n", r.loss, 100.0 * r.top1,
                static_cast<long long>(r.samples));
  return {};
}

/// `ptune launch`: N data-parallel ranks of a ptune command.
Outcome run_launch_command(const CommandLine& cl) {
  const LaunchArgs& args = cl.get<LaunchArgs>();
  system::LaunchOptions opt = args.opt;
  opt.prefix = !args.no_prefix;
  opt.prefix_stdout = args.prefix_stdout;
  const auto r = dist::launch(opt);
  return {r.exit_code, r.error};
}

/// ptune's own `row-side`: a sweep or tune starts it with its command pipe on 3 and its replies
/// on 4 (bench/child_side.hpp).
Outcome run_row_side_command(const CommandLine& cl) {
  if (::fcntl(3, F_GETFD) < 0 || ::fcntl(4, F_GETFD) < 0)
    throw UsageError("row-side is started by ptune sweep and ptune tune for a row's side, not by hand");
  // Its parent reports what the child was asked; an interrupted child says nothing of its own.
  return {bench::serve_side(config_of(cl), 3, 4, cl.interrupted), ""};
}

/// The engine's commands: a command's code is the function beside its name.
struct EngineCommand {
  const char* name;
  Outcome (*run)(const CommandLine&);
};
constexpr EngineCommand kCommands[] = {
    {"sweep", run_sweep_command},       {"compare", run_compare_command}, {"tune", run_tune_command},
    {"train", run_train_command},       {"eval", run_eval_command},       {"launch", run_launch_command},
    {"row-side", run_row_side_command},
};

/// The first stop signal (SIGINT or SIGTERM), set by ptune_engine_stop from the executable's
/// signal handler, and the flag every step reads.
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

/// Runs `cl`'s command; every exception becomes its Outcome.
Outcome run_command(CommandLine& cl) {
  cl.interrupted = &g_interrupted;
  cl.signal = &g_signal;
  dist::set_rendezvous_stop(&g_interrupted);
  try {
    // A Ctrl-C while the engine was loading (LibTorch's libraries take a while to map).
    if (g_interrupted.load()) throw Interrupted();
    for (const auto& c : kCommands)
      if (cl.command == c.name) return c.run(cl);
    throw UsageError("the training engine has no command '" + cl.command + "'");
  } catch (const c10::Error& e) {
    // LibTorch's message's first line, or with the whole backtrace under --verbose.
    return {kExitFailure, cl.verbose ? std::string(e.what()) : runtime::torch_error_line(e)};
  } catch (...) {
    return outcome_of_current_exception(g_signal.load());
  }
}

}  // namespace
}  // namespace ptune::cli

extern "C" {

/// Runs the command of `command_line` (the executable's ptune::cli::CommandLine: the build IDs
/// agree). Nothing is thrown: every error is the returned exit code and `outcome`'s message.
__attribute__((visibility("default"))) int ptune_engine_run(const void* command_line,
                                                            ptune_engine_outcome* outcome) {
  ptune::Outcome o;
  try {
    ptune::cli::CommandLine cl = *static_cast<const ptune::cli::CommandLine*>(command_line);
    // LibTorch's own log (c10d's "[E... TCPStore.cpp]" lines with stack traces before ptune's
    // one-line error) only with --verbose, unless TORCH_CPP_LOG_LEVEL asks for it.
    if (!cl.verbose && std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr)
      FLAGS_caffe2_log_level = 3;  // FATAL only
    o = ptune::cli::run_command(cl);
  } catch (...) {
    o = ptune::cli::outcome_of_current_exception(ptune::cli::g_signal.load());
  }
  ptune::cli::fill_outcome(o, outcome);
  return o.exit_code;
}

/// The first stop signal, from the executable's signal handler (async-signal-safe: two
/// lock-free stores): the command stops at its next step.
__attribute__((visibility("default"))) void ptune_engine_stop(int sig) {
  int none = 0;
  ptune::cli::g_signal.compare_exchange_strong(none, sig);
  ptune::cli::g_interrupted.store(true);
}

/// This CPU's ceilings for `ptune analyze`: the calibrated peak in `precision` and bandwidth.
__attribute__((visibility("default"))) int ptune_engine_cpu_ceilings(const char* precision,
                                                                     ptune_engine_ceilings* out,
                                                                     ptune_engine_outcome* outcome) {
  try {
    const c10::Device cpu(c10::kCPU);
    const ptune::system::Peak peak = ptune::bench::machine_peak(cpu, precision);
    const ptune::system::Bandwidth bandwidth = ptune::bench::machine_bandwidth(cpu);
    out->flops_per_s = peak.flops_per_s;
    out->bytes_per_s = bandwidth.bytes_per_s;
    std::snprintf(out->precision, sizeof out->precision, "%s", peak.precision.c_str());
    std::snprintf(out->peak_source, sizeof out->peak_source, "%s", peak.source.c_str());
    std::snprintf(out->bandwidth_source, sizeof out->bandwidth_source, "%s", bandwidth.source.c_str());
    ptune::cli::fill_outcome({}, outcome);
    return 0;
  } catch (const c10::Error& e) {
    ptune::cli::fill_outcome({ptune::kExitFailure, ptune::runtime::torch_error_line(e)}, outcome);
  } catch (...) {
    ptune::cli::fill_outcome(ptune::cli::outcome_of_current_exception(0), outcome);
  }
  return 1;
}

/// The build ID this engine was compiled with; the executable loads only its own build's.
__attribute__((visibility("default"))) const char* ptune_engine_build_id() { return PTUNE_BUILD_ID; }

/// A data-parallel run's process group is shut down (NCCL's watchdog threads joined) after
/// success, or aborted after a failure, before the process exits. Throws nothing.
__attribute__((visibility("default"))) void ptune_engine_finish(int graceful) {
  try {
    ptune::dist::close_process_group(graceful != 0);
  } catch (...) {
  }
}

}  // extern "C"
