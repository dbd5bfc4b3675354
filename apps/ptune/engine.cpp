// The training engine: the commands that need tensors (sweep, train, eval, tune, launch), in a
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
#include "dist/env.hpp"
#include "dist/group.hpp"
#include "dist/launcher.hpp"
#include "engine/device.hpp"
#include "engine/process.hpp"
#include "engine/run.hpp"
#include "errors.hpp"
#include "log.hpp"
#include "measure/child_side.hpp"
#include "measure/peak.hpp"
#include "measure/stats.hpp"
#include "files.hpp"
#include "report/results.hpp"
#include "report/terminal.hpp"
#include "torch_error.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

namespace ptune::cli {
namespace {

/// The command's config, as the executable read and validated it (check_before_engine).
config::ExperimentConfig config_of(const CommandLine& cl) {
  if (!cl.config) throw std::logic_error("internal error: the executable passed '" + cl.command + "' no config");
  return *cl.config;
}

/// After a sweep with no failed row: each skipped row (an option or size this device or
/// dataset cannot run) is named on stderr; when no row was measured at all, that is a config
/// error: the last one is "ptune: error:", exit 2. Returns the exit code (0 or 2).
int report_skipped(const report::Results& results) {
  size_t skipped = 0;
  for (const auto& row : results.rows) skipped += row.status.rfind("skipped: ", 0) == 0 ? 1 : 0;
  if (skipped == 0) return 0;
  const bool none_measured = skipped == results.rows.size();
  for (size_t i = 0, seen = 0; i < results.rows.size(); ++i) {
    const auto& row = results.rows[i];
    if (row.status.rfind("skipped: ", 0) != 0) continue;
    const std::string line = "sweep: row '" + row.name + "' " + row.status;
    if (none_measured && ++seen == skipped) {
      std::fprintf(stderr, "ptune: error: %s; no row of the sweep was measured\n", line.c_str());
      return 2;
    }
    log::warn(line);
  }
  return 0;
}

int run_command(const CommandLine& cl) {
  auto is = [&](const char* name) { return cl.command == name; };
  auto tune_opt = cl.tune_opt;
  auto tune_batch_opt = cl.tune_batch_opt;
  auto launch_opt = cl.launch_opt;
    if (is("sweep")) {
      auto cfg = config_of(cl);  // --format, --out and --no-header checked with it
      if (cl.sweep_profile) cfg.measure.profile = true;
      ptune::report::Results results;
      ptune::tune::SweepOptions opt;
      opt.interrupted = cl.interrupted;
      if (cl.sweep_rows_given) opt.rows = ptune::tune::parse_rows(cl.sweep_rows, std::max<size_t>(1, cfg.sweep.size()));
      const ptune::report::TerminalStyle err_style = cli::style_of(STDERR_FILENO);
      const bool live = !cl.quiet && ::isatty(STDERR_FILENO) == 1;
      // The command line's mark on every row: --label names the rows; --set overrides are noted.
      std::string sets_note;
      for (const auto& s : cl.sweep_c.sets) sets_note += (sets_note.empty() ? "command line: --set " : " --set ") + s;
      const bool one_row = cfg.sweep.size() <= 1;
      auto marked = [&](ptune::report::Results r) {
        for (auto& row : r.rows) {
          if (!cl.sweep_label.empty()) row.name = one_row ? cl.sweep_label : cl.sweep_label + ": " + row.name;
          if (!sets_note.empty()) row.notes.push_back(sets_note);
        }
        return r;
      };
      if (!cl.sweep_out.empty()) {
        // A FIFO or a device (/dev/stdout) is not rewritten after every row: it gets the final
        // document once (its reader would take the first document and go).
        struct stat st {};
        const bool stream = ::stat(cl.sweep_out.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
        opt.on_row = [&, stream](const ptune::report::Results& r) {
          if (!cl.rank0) return;  // data parallel: rank 0 writes
          if (stream && r.status == "running") return;
          ptune::report::write_results(cl.sweep_out, marked(r));
        };
      }
      const size_t n_rows = std::max<size_t>(1, cfg.sweep.size());
      ptune::report::ProgressLine progress(err_style.escapes);
      const ptune::measure::Stopwatch clock;
      opt.on_progress = [&](size_t i, const std::string& name, const std::string& phase, int64_t s, int64_t of,
                            int64_t samples_per_step) {
        if (live) {
          const std::string text = progress.tick(i, n_rows, name, phase, s, of, samples_per_step, clock.ms() / 1000.0);
          if (!text.empty()) std::fputs(text.c_str(), stderr), std::fflush(stderr);
        } else if (cl.verbose && s == of) {
          ptune::log::debug("row " + std::to_string(i) + " '" + name + "': " + phase + " done");
        }
      };
      int code = 0;
      try {
        ptune::tune::run_sweep(cfg, opt, results);
        if (live) std::fputs(progress.clear().c_str(), stderr);
      } catch (const ptune::Interrupted&) {
        if (live) std::fputs(progress.clear().c_str(), stderr);
        ptune::log::warn("interrupted: " + std::to_string(results.rows.size()) + " finished row(s) kept");
        code = cli::stopped_code(cl);
      }
      // Colour on a terminal that has it (not TERM=dumb; not with NO_COLOR non-empty).
      const bool color = cl.sweep_format == "table" && cli::style_of(STDOUT_FILENO).color;
      if (cl.rank0) {
        std::string text = ptune::report::render(marked(results), cl.sweep_format, color);
        if (cl.sweep_no_header) text.erase(0, text.find('\n') == std::string::npos ? text.size() : text.find('\n') + 1);
        std::cout << text << std::flush;
      }
      // Rows that failed (not skipped for an option the device cannot honour) fail the sweep,
      // after every finished row was printed and written.
      if (code == 0) {
        for (size_t i = 0; i < results.rows.size(); ++i) {
          const auto& row = results.rows[i];
          if (row.status.rfind("failed: ", 0) != 0) continue;
          std::fprintf(stderr, "ptune: error: sweep: row '%s' %s\n", row.name.c_str(), row.status.c_str());
          return 1;
        }
        code = report_skipped(results);
      }
      return code;
    }
    if (is("tune")) {
      auto cfg = config_of(cl);  // --format and --out checked with it
      ptune::tune::MeasureFn measure_fn = [&](const ptune::config::ExperimentConfig& c) {
        return ptune::measure::measure(c, [&](const std::string&, int64_t, int64_t) {
          if (cl.interrupted->load()) throw ptune::Interrupted();
        });
      };
      auto write_best = [&](const ptune::config::ExperimentConfig& best) {
        if (cl.tune_out.empty()) return;
        ptune::files::write_atomically(cl.tune_out, "--out", ptune::config::to_json(best).dump(2) + "\n");
        ptune::log::info("wrote the winning config to " + cl.tune_out);
      };
      // Prints a search's outcome in --format: json (the whole document), csv/md (the table;
      // the summary line goes to the log), or the table with `extra` text and the summary.
      auto print_outcome = [&](const nlohmann::ordered_json& doc, const ptune::report::Results& table,
                               const std::string& extra, const std::string& summary) {
        if (cl.tune_format == "json") {
          std::cout << doc.dump(2) << "\n" << std::flush;
        } else if (cl.tune_format != "table") {
          std::cout << ptune::report::render(table, cl.tune_format) << std::flush;
          ptune::log::info(summary);
        } else {
          std::cout << ptune::report::render(table, "table") << extra << summary << "\n" << std::flush;
        }
      };
      char line[256];
      if (cl.tune_batch) {
        tune_batch_opt.budget_s = 60.0 * cl.tune_budget_min;
        tune_batch_opt.min_repeats = cl.tune_repeats;
        tune_batch_opt.measure = measure_fn;
        tune_batch_opt.interrupted = cl.interrupted;
        tune_batch_opt.on_try = [&](const ptune::report::Results& r) {
          const auto& row = r.rows.back();
          std::snprintf(line, sizeof line, "%.1f samples/s", row.m ? ptune::report::printed_rate(row).point : 0.0);
          ptune::log::info("tune: " + row.name + ": " + (row.status == "ok" ? std::string(line) : row.status));
        };
        auto res = ptune::tune::find_batch_size(cfg, tune_batch_opt);
        std::snprintf(line, sizeof line, "fastest: batch %lld; largest that fits: batch %lld%s",
                      static_cast<long long>(res.fastest), static_cast<long long>(res.largest_fitting),
                      res.stop_reason == "searched" ? "" : (" (stopped: " + res.stop_reason + ")").c_str());
        std::string notes;
        for (const auto& n : res.notes) notes += "note: " + n + "\n";
        print_outcome(ptune::tune::to_json(res), res.table, notes, line);
        write_best(res.best);
        if (res.stop_reason == "interrupted") return cli::stopped_code(cl);
        for (const auto& t : res.tries) {
          if (t.status.rfind("failed: ", 0) != 0) continue;  // out of memory is what the search looks for
          std::fprintf(stderr, "ptune: error: tune: batch %lld %s\n", static_cast<long long>(t.batch_size),
                       t.status.c_str());
          return 1;
        }
        return 0;
      }
      tune_opt.budget_s = 60.0 * cl.tune_budget_min;
      tune_opt.min_repeats = cl.tune_repeats;
      tune_opt.measure = measure_fn;
      tune_opt.interrupted = cl.interrupted;
      tune_opt.on_trial = [&](const ptune::tune::Trial& t) {
        std::string s = "tune: " + (t.pass ? "pass " + std::to_string(t.pass) + ": " : std::string()) + t.name;
        if (t.m) {
          std::snprintf(line, sizeof line, ": %.1f samples/s", t.m->samples_per_s);
          s += line;
        }
        ptune::log::info(s + (t.pass ? ": " + t.verdict + (t.reason.empty() ? "" : " (" + t.reason + ")") : ""));
      };
      auto res = ptune::tune::greedy_tune(cfg, tune_opt);
      const auto& first = *res.path.rows.front().m;
      const auto& last = *res.path.rows.back().m;
      std::snprintf(line, sizeof line, "stopped: %s after %.0f s; best %.1f samples/s, %.2fx the baseline",
                    res.stop_reason.c_str(), res.elapsed_s, last.samples_per_s,
                    first.samples_per_s > 0 ? last.samples_per_s / first.samples_per_s : 1.0);
      print_outcome(ptune::tune::to_json(res), res.path, "\ntrials:\n" + ptune::tune::render_trials(res.trials), line);
      write_best(res.best);
      if (res.stop_reason == "interrupted") return cli::stopped_code(cl);
      for (const auto& t : res.trials) {
        // A larger batch or a precision running out of memory is what the search probes.
        if (t.verdict != "failed" || t.reason == "out of memory") continue;
        std::fprintf(stderr, "ptune: error: tune: trial '%s' %s%s\n", t.name.c_str(), t.verdict.c_str(),
                     t.reason.empty() ? "" : (": " + t.reason).c_str());
        return 1;
      }
      return 0;
    }
    if (is("train") || is("eval")) {
      // Started again with the config's process settings (main.cpp): what this process got.
      if (std::getenv("PTUNE_PROCESS_SET") != nullptr)
        ptune::log::info("process settings: " + ptune::engine::describe_this_process());
    }
    if (is("train")) {
      auto cfg = config_of(cl);
      ptune::engine::TrainOptions opt;
      opt.resume = cl.resume;
      opt.save_weights = cl.save_weights;
      opt.interrupted = cl.interrupted;
      opt.on_note = [](const std::string& s) { ptune::log::info(s); };
      opt.on_progress = [&](const ptune::engine::TrainProgress& p) {
        if (cl.quiet) return;
        std::fprintf(stderr, "step %lld/%lld  epoch %lld  loss %.4f  %.1f samples/s  ETA %.0fs\n",
                     static_cast<long long>(p.step), static_cast<long long>(p.total_steps),
                     static_cast<long long>(p.epoch), p.loss, p.samples_per_s, p.eta_s);
      };
      try {
        auto s = ptune::engine::train(cfg, opt);
        if (cl.rank0) std::printf("trained %lld steps: final loss %.4f, %.1f samples/s, checkpoint %s\n",
                    static_cast<long long>(s.steps), s.final_loss, s.samples_per_s, s.last_checkpoint.c_str());
      } catch (const ptune::Interrupted&) {
        // No signal here: another rank (perhaps on a node whose launcher died) was stopped.
        ptune::log::warn(std::string(cl.signal->load() == SIGTERM ? "terminated"
                                     : cl.signal->load() == SIGINT ? "interrupted"
                                                                 : "stopped with another rank that was interrupted or terminated") +
                         "; checkpoint written, continue with --resume");
        return cli::stopped_code(cl);
      }
      return 0;
    }
    if (is("row-side")) {
      // ptune's own: a sweep starts it with its command pipe on 3 and its replies on 4.
      if (::fcntl(3, F_GETFD) < 0 || ::fcntl(4, F_GETFD) < 0)
        throw ptune::UsageError("row-side is started by ptune sweep and ptune tune for a row's side, not by hand");
      return ptune::measure::serve_side(config_of(cl), 3, 4, cl.interrupted);
    }
    if (is("launch")) {
      launch_opt.prefix = !cl.launch_no_prefix;
      launch_opt.prefix_stdout = cl.launch_prefix_stdout;
      const auto r = ptune::dist::launch(launch_opt);
      if (r.exit_code == 130 || r.exit_code == 143) std::fprintf(stderr, "ptune: %s\n", r.error.c_str());
      else if (r.exit_code != 0) std::fprintf(stderr, "ptune: error: %s\n", r.error.c_str());
      return r.exit_code;
    }
    if (is("eval")) {
      auto cfg = config_of(cl);  // --format checked with it
      ptune::engine::EvalResult r;
      try {
        r = ptune::engine::evaluate(cfg, cl.weights, cl.interrupted);
      } catch (const ptune::DataError& e) {
        // A checkpoint given as cl.weights: the exact command that exports its cl.weights.
        const auto step = ptune::engine::checkpoint_step(cl.weights);
        if (!step) throw;
        std::string out = cl.weights;
        if (out.size() > 3 && out.compare(out.size() - 3, 3, ".pt") == 0) out.resize(out.size() - 3);
        out += "-weights.pt";
        std::string sets;
        for (const auto& s : cl.eval_c.sets) sets += " --set " + cli::shell_quote(s);
        // Its last checkpoint goes beside the given one (the same file when that is the run's).
        std::string folder = std::filesystem::path(cl.weights).parent_path().string();
        if (folder.empty()) folder = ".";
        throw ptune::DataError(std::string(e.what()) + ", exactly: ptune train " +
                               cli::shell_quote(cl.eval_c.config_path) + sets + " --resume " + cli::shell_quote(cl.weights) +
                               " --set train.max_steps=" + std::to_string(*step) + " --set " +
                               cli::shell_quote("train.checkpoint_dir=" + folder) + " --save-weights " +
                               cli::shell_quote(out) + " (no further step is trained), then: ptune eval " +
                               cli::shell_quote(cl.eval_c.config_path) + sets + " --weights " + cli::shell_quote(out));
      }
      if (!cl.rank0) return 0;
      if (cl.eval_format == "json") {
        std::cout << nlohmann::ordered_json{{"loss", r.loss}, {"top1", r.top1}, {"samples", r.samples}}.dump() << "\n";
      } else {
        std::printf("loss %.4f  top-1 %.2f%%  samples %lld\n", r.loss, 100.0 * r.top1,
                    static_cast<long long>(r.samples));
      }
      return 0;
    }
  throw UsageError("the training engine has no command '" + cl.command + "'");
}

}  // namespace
}  // namespace ptune::cli

extern "C" {

/// Runs the command. LibTorch's errors (c10::Error) leave as std::runtime_error with their
/// message's first line, or with the whole backtrace under --verbose; the rest as thrown.
__attribute__((visibility("default"))) int ptune_engine_run(const ptune::cli::CommandLine& cl) {
  // LibTorch's own log (c10d's "[E... TCPStore.cpp]" lines with stack traces before ptune's
  // one-line error) only with --verbose, unless TORCH_CPP_LOG_LEVEL asks for it.
  if (!cl.verbose && std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 3;  // FATAL only
  // A Ctrl-C while the engine was loading (LibTorch's libraries take a while to map).
  if (cl.interrupted && cl.interrupted->load()) throw ptune::Interrupted();
  try {
    return ptune::cli::run_command(cl);
  } catch (const c10::Error& e) {
    if (cl.verbose) throw std::runtime_error(e.what());
    throw std::runtime_error(ptune::torch_error_line(e));
  }
}

/// This CPU's ceilings for `ptune analyze`: the calibrated peak in `precision` and bandwidth.
__attribute__((visibility("default"))) ptune::analyze::Ceilings ptune_engine_cpu_ceilings(
    const std::string& precision) {
  const c10::Device cpu(c10::kCPU);
  return ptune::analyze::Ceilings{ptune::measure::machine_peak(cpu, precision), ptune::measure::machine_bandwidth(cpu)};
}

/// The build ID this engine was compiled with; the executable loads only its own build's.
__attribute__((visibility("default"))) const char* ptune_engine_build_id() { return PTUNE_BUILD_ID; }

/// A data-parallel run's process group is shut down (NCCL's watchdog threads joined) after
/// success, or aborted after a failure, before the process exits.
__attribute__((visibility("default"))) void ptune_engine_finish(bool graceful) {
  ptune::dist::close_process_group(graceful);
}

}  // extern "C"
