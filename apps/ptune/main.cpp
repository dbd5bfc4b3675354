// ptune's command line: parses arguments with CLI11, copies them into the library's option
// structs, runs the job, and turns every error into one line and a documented exit code:
// 0 ok, 1 runtime failure (also: a sweep row that failed, a write to stdout that failed), 2 usage
// or config error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include "analyze/advice.hpp"
#include "analyze/compare.hpp"
#include "analyze/overview.hpp"
#include "analyze/render.hpp"
#include "config/config.hpp"
#include "config/suggest.hpp"
#include "dist/env.hpp"
#include "dist/group.hpp"
#include "dist/launcher.hpp"
#include "files.hpp"
#include "engine/device.hpp"
#include "engine/run.hpp"
#include "errors.hpp"
#include "log.hpp"
#include "measure/stats.hpp"
#include "report/compare.hpp"
#include "report/html.hpp"
#include "report/results.hpp"
#include "report/run_file.hpp"
#include "report/terminal.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the first SIGINT or SIGTERM

/// SIGINT (Ctrl-C) and SIGTERM (Slurm, Kubernetes, timeout): the first stops the job at the
/// next step, which then ends as interrupted (train checkpoints; sweep keeps its rows); a
/// second leaves at once, removing the temporary files of writes under way.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    ptune::files::remove_temporaries();
    std::_Exit(128 + sig);
  }
  g_interrupted.store(true);
}

/// 130 after SIGINT, 143 after SIGTERM (128 + the signal, as a shell reports it).
int stopped_code() { return g_signal.load() == SIGTERM ? 143 : 130; }

/// Installs on_stop_signal for `sig`, unless the process inherited it ignored (a job started
/// with `&` from a script ignores SIGINT, and must keep doing so).
void handle_stop_signal(int sig) {
  struct sigaction old {};
  if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
}

/// After the output is printed: a failed write to stdout (a full disk, `> /dev/full`, a closed
/// pipe) is an error too. Returns "" or the message.
std::string stdout_error() {
  std::cout.flush();
  const bool bad = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout);
  return bad ? std::string("cannot write to stdout: ") + std::strerror(errno ? errno : EIO) : "";
}

struct Common {
  std::string config_path;
  std::vector<std::string> sets;
};

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("config", c.config_path, "experiment JSON file")->required();
  cmd->add_option("--set", c.sets, "override a config value: PATH=VALUE (repeatable), e.g. loader.batch_size=256")
      ->take_all();
}

ptune::config::ExperimentConfig load(const Common& c) {
  auto cfg = ptune::config::load_file(c.config_path);
  for (const auto& s : c.sets) ptune::config::apply_set(cfg, s);
  ptune::config::validate(cfg, c.config_path);
  return cfg;
}

/// An output file given on the command line is checked before any work starts (a missing
/// folder, a folder given as the file, an empty name): a usage error, not a lost result.
void check_output(const CLI::Option* option, const std::string& path, const std::string& flag) {
  if (option->count() == 0) return;
  try {
    ptune::files::check_writable(path, flag);
  } catch (const std::runtime_error& e) {
    throw ptune::UsageError(e.what());
  }
}

void check_format(const std::string& f, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string hint = ptune::config::did_you_mean(f, allowed);
    throw ptune::UsageError("--format: unknown format '" + f + "'" + (hint.empty() ? ";" : hint) + " allowed: " + list);
  }
}

/// `s` as one shell word: as it is when it holds only safe characters, else in single quotes.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// The terminal style of a file descriptor, from TERM and NO_COLOR.
ptune::report::TerminalStyle style_of(int fd) {
  return ptune::report::terminal_style(::isatty(fd) == 1, std::getenv("TERM"), std::getenv("NO_COLOR"));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptune: measure and explain deep-learning training speed, one optimization at a time"};
  app.set_version_flag("--version", std::string("ptune ") + ptune::kVersion);
  app.require_subcommand(1);
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "more detail, and stack traces with errors");
  app.add_flag("-q,--quiet", quiet, "only errors on stderr; results still go to stdout");

  Common sweep_c, train_c, eval_c, check_c;
  std::string sweep_format = "table", sweep_out, eval_format = "table", weights;
  std::optional<std::string> resume, save_weights;

  auto* sweep = app.add_subcommand("sweep", "run the config's sweep rows cumulatively and print the speedup table");
  add_common(sweep, sweep_c);
  sweep->add_option("--format", sweep_format, "stdout format: table | json | csv | md")->capture_default_str();
  bool sweep_profile = false;
  sweep->add_flag("--profile", sweep_profile, "record a Chrome trace of measure.profile_steps steps per row "
                                              "(same as --set measure.profile=true)");
  std::string sweep_rows;
  auto* sweep_rows_opt = sweep->add_option("--rows", sweep_rows, "run only these rows: 0-based indices and ranges, e.g. 7, 0,3 or 5-7 "
                                          "(the rows before still apply their changes)");
  auto* sweep_out_opt = sweep->add_option("--out", sweep_out, "also write results to FILE (.json, .csv, .md or .html by extension, any case), "
                                       "rewritten after every row");
  std::string sweep_label;
  sweep->add_option("--label", sweep_label, "name this run's rows: LABEL for a config without sweep rows, 'LABEL: <row>' "
                                            "otherwise (e.g. in a shell loop over --set values)");
  bool sweep_no_header = false;
  sweep->add_flag("--no-header", sweep_no_header, "--format csv: print the rows without the header line, to append to a "
                                                  "file that has one");

  // `ptune report`: the HTML report of results files, and the comparison that gates CI.
  std::vector<std::string> report_files;
  std::string report_out, report_against;
  double report_fail_pct = 0;
  auto* report = app.add_subcommand("report", "an HTML report of results files side by side (-o FILE.html), and/or the "
                                              "comparison with an older run (--against OLD.json) that gates CI");
  report->add_option("results", report_files, "results JSON files: ptune sweep --out, or scripts/bench's --json")->required();
  auto* report_out_opt = report->add_option("-o,--out", report_out, "write the HTML report to FILE (.html)");
  auto* against_opt = report->add_option("--against", report_against, "the old results JSON: print the comparison per row "
                                                                       "(old and new samples/s, ratio, beyond noise or not)");
  auto* fail_opt = report->add_option("--fail-if-slower", report_fail_pct, "PCT: exit 1 when a row's samples/s fell by more than PCT % beyond noise (the 99% interval from both runs' windows; "
                                                          "files without windows: more than both spreads), or a row is missing or failed")
      ->needs(against_opt)
      ->check(CLI::Range(0.0, 100.0));

  auto* train = app.add_subcommand("train", "train with the config: epochs, progress, checkpoints, resume");
  add_common(train, train_c);
  train->add_option("--resume", resume, "continue from a checkpoint written by ptune train");
  train->add_option("--save-weights", save_weights, "write the final weights as a torch.save(state_dict) file");

  auto* eval = app.add_subcommand("eval", "mean loss and top-1 accuracy of weights on the config's dataset");
  add_common(eval, eval_c);
  eval->add_option("--weights", weights, "a torch.save(state_dict) file (torchvision's or ptune's)")->required();
  eval->add_option("--format", eval_format, "table | json")->capture_default_str();

  auto* check = app.add_subcommand("check", "validate the config and print it fully resolved (JSON)");
  add_common(check, check_c);

  // `ptune tune`: the greedy search, or the batch-size finder with --batch-size.
  Common tune_c;
  ptune::tune::TuneOptions tune_opt;
  ptune::tune::BatchSearchOptions tune_batch_opt;
  bool tune_batch = false;
  double tune_budget_min = 0;
  int64_t tune_repeats = 3;
  std::string tune_out;
  auto* tune = app.add_subcommand("tune", "search for the fastest configuration and write it as a config: greedy over the optimizations, or the batch size (--batch-size)");
  add_common(tune, tune_c);
  auto* tune_batch_flag = tune->add_flag("--batch-size", tune_batch, "find the batch size: double from loader.batch_size, then binary-search the largest that fits (memory margin on CUDA, --max-batch); the fastest wins");
  tune->add_option("--margin", tune_batch_opt.margin_pct, "--batch-size: percent of the GPU's memory left free")->needs(tune_batch_flag)->check(CLI::Range(0.0, 99.0))->capture_default_str();
  tune->add_option("--max-batch", tune_batch_opt.max_batch, "--batch-size: largest batch tried (default 4096 on CUDA, 64 on the CPU)")->needs(tune_batch_flag)->check(CLI::PositiveNumber);
  tune->add_option("--threshold", tune_opt.threshold_pct, "percent a change must gain, at least, to be kept (and more than the measured spread)")->excludes(tune_batch_flag)->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  tune->add_option("--budget", tune_budget_min, "minutes; no new trial starts after them (0 = no limit)")->check(CLI::NonNegativeNumber);
  tune->add_option("--repeats", tune_repeats, "measure.repeats is raised to at least this for every trial")->check(CLI::Range(1, 1000))->capture_default_str();
  auto* tune_out_opt = tune->add_option("--out", tune_out, "write the winning config to FILE (JSON, accepted by train, check and sweep)");
  std::string tune_format = "table";
  tune->add_option("--format", tune_format, "stdout format: table (with the trials), json (results, trials and the winning config), csv or md (the table)")->capture_default_str();

  // `ptune launch`: N data-parallel ranks of a ptune command on this machine (torchrun-style).
  ptune::dist::LaunchOptions launch_opt;
  bool launch_no_prefix = false, launch_prefix_stdout = false;
  auto* launch = app.add_subcommand("launch", "run a ptune command as N data-parallel ranks on this machine (one node of --nnodes): ptune launch --nproc-per-node N -- train exp.json");
  launch->add_option("--nproc-per-node", launch_opt.nproc_per_node, "ranks (processes) to start; one per GPU on a GPU machine")->required()->check(CLI::Range(1, 4096));
  launch->add_option("--nnodes", launch_opt.nnodes, "machines in the run; start one launch on each")->capture_default_str()->check(CLI::Range(1, 65536));
  launch->add_option("--node-rank", launch_opt.node_rank, "this machine's place, 0 .. nnodes-1; node 0 runs rank 0 and serves the rendezvous")->capture_default_str()->check(CLI::Range(0, 65535));
  launch->add_option("--master-addr", launch_opt.master_addr, "node 0's address, reachable from every node (default 127.0.0.1 on one node; required with --nnodes > 1)");
  launch->add_option("--master-port", launch_opt.master_port, "rendezvous port at --master-addr (0 = any free port, one node only)")->capture_default_str()->check(CLI::Range(0, 65535));
  launch->add_option("--grace", launch_opt.grace_s, "seconds between SIGTERM and SIGKILL when stopping the ranks after one failed")->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  launch->add_flag("--no-prefix", launch_no_prefix, "do not prefix the ranks' stderr lines (logs, errors) with [rank R]");
  launch->add_flag("--prefix-stdout", launch_prefix_stdout, "prefix the ranks' stdout lines with [rank R] too (by default stdout is "
                                                            "exactly rank 0's output, e.g. --format json for jq)");
  launch->add_option("command", launch_opt.args, "the ptune command every rank runs, after --")->required();

  // `ptune analyze`: the verdict on a profiler trace, Python's torch.profiler's or ptune's.
  std::vector<std::string> analyze_paths, analyze_labels;
  std::string analyze_format = "table", analyze_html;
  int64_t analyze_batch = 0;
  ptune::analyze::AnalyzeOptions analyze_opt;
  auto* analyze = app.add_subcommand("analyze", "where a profiled training step's time goes and what to change next: "
                                                "a torch.profiler or ptune trace (.json, .json.gz) or a folder of them (one per rank); "
                                                "several traces (versions of the same training code, in order): the table of what each change did");
  analyze->add_option("trace", analyze_paths, "trace files, or folders of trace files (one per rank); several: compared in order, the first the baseline")->required();
  analyze->add_option("--format", analyze_format, "stdout format: table | json | md | csv")->capture_default_str();
  analyze->add_flag("--gpu", analyze_opt.require_gpu, "require GPU figures: a CPU-only trace is an error");
  analyze->add_option("--label", analyze_labels, "a trace's label in the table, once per trace in order (default: the file or folder name)");
  analyze->add_option("--batch-size", analyze_batch, "samples per step per rank, for samples/s (default: read from the first step's input shapes, recorded with record_shapes=True)")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  analyze->add_option("-o,--html", analyze_html, "also write the overview as one self-contained HTML page to this file");

  app.add_subcommand("schema", "print the JSON Schema of experiment configs");
  // --verbose/--quiet may also follow the subcommand: `ptune sweep exp.json --quiet`.
  for (auto* sub : app.get_subcommands({})) sub->fallthrough();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ptune: error: %s (see ptune --help)\n", e.what());
    return 2;
  }

  // Only the commands that train repeat the same allocations step after step; analyze's
  // buffers are freed for good, and its memory should fall back.
  const bool trains = sweep->parsed() || train->parsed() || eval->parsed() || tune->parsed();
  const bool host_memory_kept = trains && ptune::engine::keep_host_memory();

  // Data parallel (torchrun, Slurm, ptune launch): only rank 0 prints; every rank still
  // reports its own errors.
  const bool rank0 = ptune::dist::world_rank() == 0;
  if (!rank0) quiet = true;
  ptune::log::set_level(quiet ? ptune::log::Level::kError
                              : verbose ? ptune::log::Level::kDebug : ptune::log::Level::kInfo);
  if (trains)
    ptune::log::debug(host_memory_kept ? "host allocator: freed memory kept for reuse (glibc malloc: mmap threshold "
                                         "32 MiB, no trimming)"
                                       : "host allocator: left as the environment sets it");
  // LibTorch's own log (c10d's "[E... TCPStore.cpp]" lines with stack traces before ptune's
  // one-line error) only with --verbose, unless TORCH_CPP_LOG_LEVEL asks for it.
  if (!verbose && std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 3;  // FATAL only
  handle_stop_signal(SIGINT);
  handle_stop_signal(SIGTERM);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is a write error, reported, not a silent death

  // The command; then a data-parallel run's process group is shut down (NCCL's watchdog
  // threads joined) after success, or aborted after a failure, before the process exits.
  auto run = [&]() -> int {
    try {
      if (app.got_subcommand("schema")) {
        std::cout << ptune::config::schema().dump(2) << "\n";
        return 0;
      }
      if (app.got_subcommand("analyze")) {
        check_format(analyze_format, ptune::analyze::formats());
        try {
          ptune::analyze::CompareOptions copt;
          copt.labels = analyze_labels;
          if (analyze_batch > 0) copt.batch_size = analyze_batch;
          const auto c = ptune::analyze::compare(analyze_paths, analyze_opt, copt);
          if (c.versions.size() == 1) {
            std::cout << ptune::analyze::render(c.versions[0].analysis, analyze_format, &c.versions[0]) << std::flush;
          } else {
            std::cout << ptune::analyze::render_comparison(c, analyze_format) << std::flush;
          }
          if (!analyze_html.empty()) {
            ptune::report::write_atomic(analyze_html, ptune::analyze::overview_html(c), "--html");
            if (!quiet) std::fprintf(stderr, "ptune: analyze: overview written to %s\n", analyze_html.c_str());
          }
        } catch (const ptune::DataError& e) {
          // The trace is the command's argument: a bad one is a usage error (exit 2).
          std::fprintf(stderr, "ptune: error: analyze: %s\n", e.what());
          return 2;
        }
        return 0;
      }
      if (app.got_subcommand("check")) {
        auto cfg = load(check_c);
        ptune::config::expand_sweep(cfg);
        std::cout << ptune::config::to_json(cfg).dump(2) << "\n";
        return 0;
      }
      if (app.got_subcommand("sweep")) {
        check_format(sweep_format, ptune::report::formats());
        auto cfg = load(sweep_c);
        if (sweep_profile) cfg.measure.profile = true;
        ptune::report::Results results;
        ptune::tune::SweepOptions opt;
        opt.interrupted = &g_interrupted;
        if (rank0) check_output(sweep_out_opt, sweep_out, "--out");
        if (sweep_rows_opt->count() > 0) opt.rows = ptune::tune::parse_rows(sweep_rows, std::max<size_t>(1, cfg.sweep.size()));
        const ptune::report::TerminalStyle err_style = style_of(STDERR_FILENO);
        const bool live = !quiet && ::isatty(STDERR_FILENO) == 1;
        if (sweep_no_header && sweep_format != "csv")
          throw ptune::UsageError("--no-header: only with --format csv (got --format " + sweep_format + ")");
        // The command line's mark on every row: --label names the rows; --set overrides are noted.
        std::string sets_note;
        for (const auto& s : sweep_c.sets) sets_note += (sets_note.empty() ? "command line: --set " : " --set ") + s;
        const bool one_row = cfg.sweep.size() <= 1;
        auto marked = [&](ptune::report::Results r) {
          for (auto& row : r.rows) {
            if (!sweep_label.empty()) row.name = one_row ? sweep_label : sweep_label + ": " + row.name;
            if (!sets_note.empty()) row.notes.push_back(sets_note);
          }
          return r;
        };
        if (!sweep_out.empty()) {
          opt.on_row = [&](const ptune::report::Results& r) {
            if (!rank0) return;  // data parallel: rank 0 writes
            ptune::report::write_results(sweep_out, marked(r));
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
          } else if (verbose && s == of) {
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
          code = stopped_code();
        }
        // Colour on a terminal that has it (not TERM=dumb; not with NO_COLOR non-empty).
        const bool color = sweep_format == "table" && style_of(STDOUT_FILENO).color;
        if (rank0) {
          std::string text = ptune::report::render(marked(results), sweep_format, color);
          if (sweep_no_header) text.erase(0, text.find('\n') == std::string::npos ? text.size() : text.find('\n') + 1);
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
        }
        return code;
      }
      if (app.got_subcommand("report")) {
        if (report_out.empty() && report_against.empty())
          throw ptune::UsageError("report: nothing to do; give -o FILE.html for the HTML report, --against OLD.json "
                                  "for the comparison, or both");
        check_output(report_out_opt, report_out, "-o");
        if (!report_out.empty() && ptune::report::format_of_path(report_out) != "html")
          throw ptune::UsageError("report: -o '" + report_out + "' is not an .html file; ptune report writes HTML");
        if (!report_against.empty() && report_files.size() != 1)
          throw ptune::UsageError("report: --against compares one new results file with the old one; got " +
                                  std::to_string(report_files.size()) + " new files");
        std::vector<ptune::report::RunFile> runs;
        if (!report_against.empty()) runs.push_back(ptune::report::load_run(report_against));
        for (const auto& f : report_files) runs.push_back(ptune::report::load_run(f));
        ptune::report::label_runs(runs);
        int code = 0;
        if (!report_against.empty()) {
          const auto cmp = ptune::report::compare_runs(runs[0], runs[1], report_fail_pct);
          std::cout << ptune::report::render_comparison(cmp) << std::flush;
          const auto regressions = cmp.regressions();
          if (fail_opt->count() > 0 && !regressions.empty()) {
            std::string names;
            for (const auto* r : regressions) names += (names.empty() ? "" : ", ") + r->name + " (" + r->verdict + ")";
            char limit[32];
            std::snprintf(limit, sizeof limit, "%g%%", report_fail_pct);
            std::fprintf(stderr, "ptune: error: %zu row(s) regressed against %s (--fail-if-slower %s): %s\n",
                         regressions.size(), report_against.c_str(), limit, names.c_str());
            code = 1;
          }
        }
        if (!report_out.empty()) {
          ptune::report::write_atomic(report_out, ptune::report::to_html(runs));
          ptune::log::info("wrote " + report_out);
        }
        return code;
      }
      if (app.got_subcommand("tune")) {
        check_format(tune_format, ptune::report::formats());
        auto cfg = load(tune_c);
        check_output(tune_out_opt, tune_out, "--out");
        ptune::tune::MeasureFn measure_fn = [&](const ptune::config::ExperimentConfig& c) {
          return ptune::measure::measure(c, [&](const std::string&, int64_t, int64_t) {
            if (g_interrupted.load()) throw ptune::Interrupted();
          });
        };
        auto write_best = [&](const ptune::config::ExperimentConfig& best) {
          if (tune_out.empty()) return;
          ptune::report::write_atomic(tune_out, ptune::config::to_json(best).dump(2) + "\n");
          ptune::log::info("wrote the winning config to " + tune_out);
        };
        // Prints a search's outcome in --format: json (the whole document), csv/md (the table;
        // the summary line goes to the log), or the table with `extra` text and the summary.
        auto print_outcome = [&](const nlohmann::ordered_json& doc, const ptune::report::Results& table,
                                 const std::string& extra, const std::string& summary) {
          if (tune_format == "json") {
            std::cout << doc.dump(2) << "\n" << std::flush;
          } else if (tune_format != "table") {
            std::cout << ptune::report::render(table, tune_format) << std::flush;
            ptune::log::info(summary);
          } else {
            std::cout << ptune::report::render(table, "table") << extra << summary << "\n" << std::flush;
          }
        };
        char line[256];
        if (tune_batch) {
          tune_batch_opt.budget_s = 60.0 * tune_budget_min;
          tune_batch_opt.min_repeats = tune_repeats;
          tune_batch_opt.measure = measure_fn;
          tune_batch_opt.interrupted = &g_interrupted;
          tune_batch_opt.on_try = [&](const ptune::report::Results& r) {
            const auto& row = r.rows.back();
            std::snprintf(line, sizeof line, "%.1f samples/s", row.m ? row.m->samples_per_s : 0.0);
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
          if (res.stop_reason == "interrupted") return stopped_code();
          for (const auto& t : res.tries) {
            if (t.status.rfind("failed: ", 0) != 0) continue;  // out of memory is what the search looks for
            std::fprintf(stderr, "ptune: error: tune: batch %lld %s\n", static_cast<long long>(t.batch_size),
                         t.status.c_str());
            return 1;
          }
          return 0;
        }
        tune_opt.budget_s = 60.0 * tune_budget_min;
        tune_opt.min_repeats = tune_repeats;
        tune_opt.measure = measure_fn;
        tune_opt.interrupted = &g_interrupted;
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
        if (res.stop_reason == "interrupted") return stopped_code();
        for (const auto& t : res.trials) {
          // A larger batch or a precision running out of memory is what the search probes.
          if (t.verdict != "failed" || t.reason == "out of memory") continue;
          std::fprintf(stderr, "ptune: error: tune: trial '%s' %s%s\n", t.name.c_str(), t.verdict.c_str(),
                       t.reason.empty() ? "" : (": " + t.reason).c_str());
          return 1;
        }
        return 0;
      }
      if (app.got_subcommand("train")) {
        auto cfg = load(train_c);
        ptune::engine::TrainOptions opt;
        opt.resume = resume;
        opt.save_weights = save_weights;
        opt.interrupted = &g_interrupted;
        opt.on_note = [](const std::string& s) { ptune::log::info(s); };
        opt.on_progress = [&](const ptune::engine::TrainProgress& p) {
          if (quiet) return;
          std::fprintf(stderr, "step %lld/%lld  epoch %lld  loss %.4f  %.1f samples/s  ETA %.0fs\n",
                       static_cast<long long>(p.step), static_cast<long long>(p.total_steps),
                       static_cast<long long>(p.epoch), p.loss, p.samples_per_s, p.eta_s);
        };
        try {
          auto s = ptune::engine::train(cfg, opt);
          if (rank0) std::printf("trained %lld steps: final loss %.4f, %.1f samples/s, checkpoint %s\n",
                      static_cast<long long>(s.steps), s.final_loss, s.samples_per_s, s.last_checkpoint.c_str());
        } catch (const ptune::Interrupted&) {
          // No signal here: another rank (perhaps on a node whose launcher died) was stopped.
          ptune::log::warn(std::string(g_signal.load() == SIGTERM ? "terminated"
                                       : g_signal.load() == SIGINT ? "interrupted"
                                                                   : "stopped with another rank that was interrupted or terminated") +
                           "; checkpoint written, continue with --resume");
          return stopped_code();
        }
        return 0;
      }
      if (app.got_subcommand("launch")) {
        launch_opt.prefix = !launch_no_prefix;
        launch_opt.prefix_stdout = launch_prefix_stdout;
        const auto r = ptune::dist::launch(launch_opt);
        if (r.exit_code == 130 || r.exit_code == 143) std::fprintf(stderr, "ptune: %s\n", r.error.c_str());
        else if (r.exit_code != 0) std::fprintf(stderr, "ptune: error: %s\n", r.error.c_str());
        return r.exit_code;
      }
      if (app.got_subcommand("eval")) {
        check_format(eval_format, {"table", "json"});
        auto cfg = load(eval_c);
        ptune::engine::EvalResult r;
        try {
          r = ptune::engine::evaluate(cfg, weights);
        } catch (const ptune::DataError& e) {
          // A checkpoint given as weights: the exact command that exports its weights.
          const auto step = ptune::engine::checkpoint_step(weights);
          if (!step) throw;
          std::string out = weights;
          if (out.size() > 3 && out.compare(out.size() - 3, 3, ".pt") == 0) out.resize(out.size() - 3);
          out += "-weights.pt";
          std::string sets;
          for (const auto& s : eval_c.sets) sets += " --set " + shell_quote(s);
          // Its last checkpoint goes beside the given one (the same file when that is the run's).
          std::string folder = std::filesystem::path(weights).parent_path().string();
          if (folder.empty()) folder = ".";
          throw ptune::DataError(std::string(e.what()) + ", exactly: ptune train " +
                                 shell_quote(eval_c.config_path) + sets + " --resume " + shell_quote(weights) +
                                 " --set train.max_steps=" + std::to_string(*step) + " --set " +
                                 shell_quote("train.checkpoint_dir=" + folder) + " --save-weights " +
                                 shell_quote(out) + " (no further step is trained), then: ptune eval " +
                                 shell_quote(eval_c.config_path) + sets + " --weights " + shell_quote(out));
        }
        if (!rank0) return 0;
        if (eval_format == "json") {
          std::cout << nlohmann::ordered_json{{"loss", r.loss}, {"top1", r.top1}, {"samples", r.samples}}.dump() << "\n";
        } else {
          std::printf("loss %.4f  top-1 %.2f%%  samples %lld\n", r.loss, 100.0 * r.top1,
                      static_cast<long long>(r.samples));
        }
        return 0;
      }
    } catch (const ptune::ConfigError& e) {
      std::fprintf(stderr, "ptune: error: %s\n", e.what());
      return 2;
    } catch (const ptune::UsageError& e) {
      std::fprintf(stderr, "ptune: error: %s\n", e.what());
      return 2;
    } catch (const ptune::Interrupted&) {
      std::fprintf(stderr, "ptune: %s\n", g_signal.load() == SIGTERM ? "terminated" : "interrupted");
      return stopped_code();
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "ptune: error: %s\n", verbose ? e.what() : e.what_without_backtrace());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ptune: error: %s\n", e.what());
      return 1;
    }
    return 0;
  };
  int code = run();
  if (const std::string error = stdout_error(); !error.empty() && code == 0) {
    std::fprintf(stderr, "ptune: error: %s\n", error.c_str());
    code = 1;
  }
  ptune::dist::close_process_group(/*graceful=*/code == 0);
  return code;
}
