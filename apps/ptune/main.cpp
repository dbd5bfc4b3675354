// ptune's command line: parses arguments with CLI11, runs the commands that need no tensors here
// and loads the training engine (engine.cpp, a module linked with LibTorch) for the rest, and
// turns every error into one line and a documented exit code:
// 0 ok, 1 runtime failure (also: a sweep row that failed, a write to stdout that failed), 2 usage
// or config error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "analyze/advice.hpp"
#include "analyze/compare.hpp"
#include "analyze/overview.hpp"
#include "analyze/render.hpp"
#include "cli.hpp"
#include "config/config.hpp"
#include "config/suggest.hpp"
#include "dist/env.hpp"
#include "engine/process.hpp"
#include "errors.hpp"
#include "files.hpp"
#include "log.hpp"
#include "measure/stats.hpp"
#include "ptune_build_id.hpp"
#include "report/compare.hpp"
#include "report/html.hpp"
#include "report/results.hpp"
#include "report/run_file.hpp"

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the first SIGINT or SIGTERM

/// SIGINT (Ctrl-C) and SIGTERM (Slurm, Kubernetes, timeout): the first stops the job at the
/// next step, which then ends as interrupted (train checkpoints; sweep keeps its rows); a
/// second leaves at once, removing the temporary files of writes under way.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  // SIGHUP (the terminal closed) is taken as SIGTERM, as `ptune launch` forwards it.
  if (!g_signal.compare_exchange_strong(none, sig == SIGHUP ? SIGTERM : sig)) {
    ptune::files::remove_temporaries();
    std::_Exit(128 + sig);
  }
  g_interrupted.store(true);
}

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

/// The one signal policy of every command (sweep, train, eval, tune, launch and the rest):
/// SIGINT, SIGTERM and SIGHUP (taken as SIGTERM) stop the job at its next step or batch
/// (on_stop_signal); SIGPIPE and
/// SIGXFSZ are ignored, so that a closed stdout (EPIPE) and a write past `ulimit -f` (EFBIG,
/// "File too large") are write errors, reported on one line with exit 1 and no temporary file
/// left, not a silent death.
void install_signal_policy() {
  handle_stop_signal(SIGINT);
  handle_stop_signal(SIGTERM);
  handle_stop_signal(SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
}

/// After the output is printed: a failed write to stdout (a full disk, `> /dev/full`, a closed
/// pipe) is an error too. Returns "" or the message.
std::string stdout_error() {
  std::cout.flush();
  const bool bad = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout);
  return bad ? std::string("cannot write to stdout: ") + std::strerror(errno ? errno : EIO) : "";
}

void add_common(CLI::App* cmd, ptune::cli::Common& c) {
  cmd->add_option("config", c.config_path, "experiment JSON file")->required();
  cmd->add_option("--set", c.sets, "override a config value: PATH=VALUE (repeatable), e.g. loader.batch_size=256")
      ->take_all();
}

/// "unknown command 'X'; ..." when the first word of the command line that is not an option
/// names no command (CLI11 would only say that a subcommand is required); "" otherwise. The
/// options before the command are flags (no values), so that first word is the command.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({}))
    if (!sub->get_group().empty()) names.push_back(sub->get_name());  // hidden ones are not offered
  names.push_back("row-side");  // ... but are known
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return "";
    if (!word.empty() && word[0] == '-') continue;
    if (std::find(names.begin(), names.end(), word) != names.end()) return "";
    names.pop_back();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string near = ptune::config::closest(word, names);
    return "unknown command '" + word + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
           "; the commands are " + list;
  }
  return "";
}

/// A whole number from `lo` to `hi`; the error quotes the value as given (CLI11's own range
/// checks print a double's limits in full: 309 digits).
CLI::Validator whole_number(int64_t lo, int64_t hi) {
  const std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return "'" + text + "' is not " + range;
        return "";
      },
      range.substr(2));
}

/// A finite number of at least 0; the error quotes the value as given.
CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0)
          return "'" + text + "' is not a finite number of at least 0";
        return "";
      },
      "number >= 0");
}

/// The training engine's entry points.
struct Engine {
  ptune::cli::EngineRun run = nullptr;
  ptune::cli::EngineFinish finish = nullptr;
  ptune::cli::EngineCpuCeilings cpu_ceilings = nullptr;
};

/// Loads the training engine from beside the executable (the build tree, a copied folder) or
/// from ../lib/ptune (an installed tree). Throws std::runtime_error naming the file and why.
Engine load_engine() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path dir = ec ? fs::path(".") : exe.parent_path();
  const fs::path places[] = {dir / ptune::cli::kEngineFile, dir / ".." / "lib" / "ptune" / ptune::cli::kEngineFile};
  for (const auto& path : places) {
    if (!fs::exists(path, ec)) continue;
    // RTLD_GLOBAL: LibTorch's libraries as if linked into the program (its CUDA libraries
    // load their parts by name); RTLD_NOW: a missing library or symbol is an error here.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) throw std::runtime_error(std::string("cannot load the training engine: ") + ::dlerror());
    Engine e;
    e.run = reinterpret_cast<ptune::cli::EngineRun>(::dlsym(handle, ptune::cli::kEngineRun));
    e.finish = reinterpret_cast<ptune::cli::EngineFinish>(::dlsym(handle, ptune::cli::kEngineFinish));
    e.cpu_ceilings = reinterpret_cast<ptune::cli::EngineCpuCeilings>(::dlsym(handle, ptune::cli::kEngineCpuCeilings));
    const auto build_id = reinterpret_cast<ptune::cli::EngineBuildId>(::dlsym(handle, ptune::cli::kEngineBuildId));
    if (!build_id)
      throw std::runtime_error("cannot load the training engine: " + path.string() + " is not ptune " +
                               ptune::kVersion + "'s engine");
    // The two pass each other ptune's own types: an engine of another build (an executable
    // copied over an older installation) would read them wrongly, and may lack entry points.
    if (const std::string id = build_id(); id != PTUNE_BUILD_ID)
      throw std::runtime_error("cannot load the training engine: " + path.string() + " is from another build of ptune (" +
                               id + ", this program is " + PTUNE_BUILD_ID +
                               "); install the program and its engine together (cmake --install BUILD --prefix PREFIX)");
    if (!e.run || !e.finish || !e.cpu_ceilings)
      throw std::runtime_error("cannot load the training engine: " + path.string() + " is not ptune " +
                               ptune::kVersion + "'s engine");
    return e;
  }
  throw std::runtime_error("cannot load the training engine: " + places[0].string() + " not found (nor " +
                           places[1].lexically_normal().string() + "); sweep, train, eval, tune and launch need it");
}

}  // namespace

/// train and eval run in this process: where the config's `process` section asks for settings that
/// take effect only when a process starts (a preloaded allocator or OpenMP runtime, glibc's
/// tunables, thread binding, CPUs, a NUMA node), ptune starts itself again with them, before
/// LibTorch is loaded, as a user would with LD_PRELOAD, taskset or numactl. (sweep and tune run
/// such rows in child processes of their own.) Returns where there is nothing to do; throws
/// ConfigError for settings this machine cannot give.
void start_with_process_settings(const ptune::cli::CommandLine& cl, char** argv) {
  if ((cl.command != "train" && cl.command != "eval") || !cl.config) return;
  if (std::getenv("PTUNE_PROCESS_SET") != nullptr || ptune::engine::default_process(cl.config->process)) return;
  const ptune::cli::Common& c = cl.command == "train" ? cl.train_c : cl.eval_c;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(c.config_path, ec))
    throw ptune::ConfigError("process: settings that take effect when a process starts need the config in a file, "
                             "not on a pipe (ptune starts itself again with them and reads it again)");
  const ptune::engine::ProcessPlan plan = ptune::engine::plan_process(cl.config->process);
  std::vector<std::string> env = ptune::engine::environment_with(plan);
  env.push_back("PTUNE_PROCESS_SET=1");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (const int err = ptune::engine::bind_process(plan); err != 0)
    throw std::runtime_error(std::string("process: cannot bind to the CPUs or NUMA node asked for: ") + std::strerror(err));
  ::execve("/proc/self/exe", argv, envp.data());
  throw std::runtime_error(std::string("process: cannot start ptune again with its process settings: ") +
                           std::strerror(errno));
}

int main(int argc, char** argv) {
  CLI::App app{"ptune: measure and explain deep-learning training speed, one optimization at a time"};
  app.set_version_flag("--version", std::string("ptune ") + ptune::kVersion);
  app.require_subcommand(1);
  // The process's CPUs, read before LibTorch's OpenMP runtime may bind this thread to one.
  ptune::engine::allowed_cpus();
  ptune::cli::CommandLine cl;
  bool& verbose = cl.verbose;
  bool& quiet = cl.quiet;
  app.add_flag("-v,--verbose", verbose, "more detail, and stack traces with errors");
  app.add_flag("-q,--quiet", quiet, "only errors on stderr; results still go to stdout");

  ptune::cli::Common check_c;

  auto* sweep = app.add_subcommand("sweep", "run the config's sweep rows cumulatively and print the speedup table");
  add_common(sweep, cl.sweep_c);
  sweep->add_option("--format", cl.sweep_format, "stdout format: table | json | csv | md")->capture_default_str();
  sweep->add_flag("--profile", cl.sweep_profile, "record a Chrome trace of measure.profile_steps steps per row "
                                              "(same as --set measure.profile=true)");
  auto* sweep_rows_opt = sweep->add_option("--rows", cl.sweep_rows, "run only these rows: 0-based indices and ranges, e.g. 7, 0,3 or 5-7 "
                                          "(the rows before still apply their changes)");
  auto* sweep_out_opt = sweep->add_option("--out", cl.sweep_out, "also write results to FILE (.json, .csv, .md or .html by extension, any case), "
                                       "rewritten after every row");
  sweep->add_option("--label", cl.sweep_label, "name this run's rows: LABEL for a config without sweep rows, 'LABEL: <row>' "
                                            "otherwise (e.g. in a shell loop over --set values)");
  sweep->add_flag("--no-header", cl.sweep_no_header, "--format csv: print the rows without the header line, to append to a "
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
  auto* fail_opt = report->add_option("--fail-if-slower", report_fail_pct, "PCT: exit 1 when a row's samples/s fell by more than PCT % beyond noise (the " +
                                                          ptune::measure::level_text(ptune::measure::kSpeedupLevel) + " interval from both runs' windows, " +
                                                          ptune::measure::level_text(ptune::measure::kSpeedupLevelUnderLoad) + " for a row measured under load; "
                                                          "files without windows: more than both spreads), or a row is missing or failed")
      ->needs(against_opt)
      ->check(CLI::Range(0.0, 100.0));

  auto* train = app.add_subcommand("train", "train with the config: epochs, progress, checkpoints, resume");
  add_common(train, cl.train_c);
  train->add_option("--resume", cl.resume, "continue from a checkpoint written by ptune train");
  train->add_option("--save-weights", cl.save_weights, "write the final weights as a torch.save(state_dict) file");

  auto* eval = app.add_subcommand("eval", "mean loss and top-1 accuracy of weights on the config's dataset");
  add_common(eval, cl.eval_c);
  eval->add_option("--weights", cl.weights, "a torch.save(state_dict) file (torchvision's or ptune's)")->required();
  eval->add_option("--format", cl.eval_format, "table | json")->capture_default_str();

  auto* check = app.add_subcommand("check", "validate the config and print it fully resolved (JSON)");
  add_common(check, check_c);

  // `ptune tune`: the greedy search, or the batch-size finder with --batch-size.
  auto* tune = app.add_subcommand("tune", "search for the fastest configuration and write it as a config: greedy over the optimizations, or the batch size (--batch-size)");
  add_common(tune, cl.tune_c);
  auto* tune_batch_flag = tune->add_flag("--batch-size", cl.tune_batch, "find the batch size: double from loader.batch_size, then binary-search the largest that fits (memory margin on CUDA, --max-batch); the fastest wins");
  tune->add_option("--margin", cl.tune_batch_opt.margin_pct, "--batch-size: percent of the GPU's memory left free")->needs(tune_batch_flag)->check(CLI::Range(0.0, 99.0))->capture_default_str();
  tune->add_option("--max-batch", cl.tune_batch_opt.max_batch, "--batch-size: largest batch tried (default 4096 on CUDA, 64 on the CPU)")->needs(tune_batch_flag)->check(whole_number(1, int64_t{1} << 40));
  tune->add_option("--threshold", cl.tune_opt.threshold_pct, "percent a change must gain, at least, to be kept (and be faster beyond noise, as a sweep row)")->excludes(tune_batch_flag)->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  tune->add_option("--budget", cl.tune_budget_min, "minutes; no new trial starts after them (0 = no limit)")->check(non_negative_number());
  tune->add_option("--repeats", cl.tune_repeats, "measure.repeats is raised to at least this for every trial")->check(CLI::Range(1, 1000))->capture_default_str();
  auto* tune_out_opt = tune->add_option("--out", cl.tune_out, "write the winning config to FILE (JSON, accepted by train, check and sweep)");
  tune->add_option("--format", cl.tune_format, "stdout format: table (with the trials), json (results, trials and the winning config), csv or md (the table)")->capture_default_str();

  // `ptune launch`: N data-parallel ranks of a ptune command on this machine (torchrun-style).
  auto* launch = app.add_subcommand("launch", "run a ptune command as N data-parallel ranks on this machine (one node of --nnodes): ptune launch --nproc-per-node N -- train exp.json");
  launch->add_option("--nproc-per-node", cl.launch_opt.nproc_per_node, "ranks (processes) to start; one per GPU on a GPU machine")->required()->check(CLI::Range(1, 4096));
  launch->add_option("--nnodes", cl.launch_opt.nnodes, "machines in the run; start one launch on each")->capture_default_str()->check(CLI::Range(1, 65536));
  launch->add_option("--node-rank", cl.launch_opt.node_rank, "this machine's place, 0 .. nnodes-1; node 0 runs rank 0 and serves the rendezvous")->capture_default_str()->check(CLI::Range(0, 65535));
  launch->add_option("--master-addr", cl.launch_opt.master_addr, "node 0's address, reachable from every node (default 127.0.0.1 on one node; required with --nnodes > 1)");
  launch->add_option("--master-port", cl.launch_opt.master_port, "rendezvous port at --master-addr (0 = any free port, one node only)")->capture_default_str()->check(CLI::Range(0, 65535));
  launch->add_option("--grace", cl.launch_opt.grace_s, "seconds between SIGTERM and SIGKILL when stopping the ranks after one failed")->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  launch->add_flag("--no-prefix", cl.launch_no_prefix, "do not prefix the ranks' stderr lines (logs, errors) with [rank R]");
  launch->add_flag("--prefix-stdout", cl.launch_prefix_stdout, "prefix the ranks' stdout lines with [rank R] too (by default stdout is "
                                                            "exactly rank 0's output, e.g. --format json for jq)");
  launch->add_option("command", cl.launch_opt.args, "the ptune command every rank runs, after --")->required();

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
  auto* analyze_html_opt =
      analyze->add_option("-o,--html", analyze_html, "also write the overview as one self-contained HTML page to this file");

  app.add_subcommand("schema", "print the JSON Schema of experiment configs");
  // A sweep row's side in a child process of its own (process settings): not for users, hidden.
  auto* side = app.add_subcommand("row-side", "");
  side->group("");
  add_common(side, cl.side_c);
  // --verbose/--quiet may also follow the subcommand: `ptune sweep exp.json --quiet`.
  for (auto* sub : app.get_subcommands({})) sub->fallthrough();

  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "ptune: error: %s (see ptune --help)\n", unknown.c_str());
    return 2;
  }
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

  // Data parallel (torchrun, Slurm, ptune launch): only rank 0 prints; every rank still
  // reports its own errors.
  cl.rank0 = ptune::dist::world_rank() == 0;
  if (!cl.rank0) quiet = true;
  ptune::log::set_level(quiet ? ptune::log::Level::kError
                              : verbose ? ptune::log::Level::kDebug : ptune::log::Level::kInfo);
  install_signal_policy();

  cl.interrupted = &g_interrupted;
  cl.signal = &g_signal;
  for (const auto* sub : app.get_subcommands()) cl.command = sub->get_name();
  cl.sweep_out_given = sweep_out_opt->count() > 0;
  cl.sweep_rows_given = sweep_rows_opt->count() > 0;
  cl.tune_out_given = tune_out_opt->count() > 0;

  // The command; then the engine shuts a data-parallel run's process group down.
  Engine engine;
  auto run = [&]() -> int {
    try {
      if (app.got_subcommand("schema")) {
        std::cout << ptune::config::schema().dump(2) << "\n";
        return 0;
      }
      if (app.got_subcommand("analyze")) {
        ptune::cli::check_format(analyze_format, ptune::analyze::formats());
        ptune::cli::check_output(analyze_html_opt->count() > 0, analyze_html, "--html");
        try {
          ptune::analyze::CompareOptions copt;
          copt.labels = analyze_labels;
          if (analyze_batch > 0) copt.batch_size = analyze_batch;
          // A CPU trace with FLOPs is read against this CPU's calibrated ceilings: the engine
          // (LibTorch) is loaded for them only then.
          analyze_opt.cpu_ceilings = [&](const std::string& precision) -> std::optional<ptune::analyze::Ceilings> {
            try {
              if (!engine.cpu_ceilings) engine = load_engine();
              return engine.cpu_ceilings(precision);
            } catch (const std::exception& e) {
              return ptune::analyze::Ceilings{{0, precision, std::string("no CPU calibration: ") + e.what()}, {}};
            }
          };
          const auto c = ptune::analyze::compare(analyze_paths, analyze_opt, copt);
          if (c.versions.size() == 1) {
            std::cout << ptune::analyze::render(c.versions[0].analysis, analyze_format, &c.versions[0]) << std::flush;
          } else {
            std::cout << ptune::analyze::render_comparison(c, analyze_format) << std::flush;
          }
          if (!analyze_html.empty()) {
            ptune::files::write_atomically(analyze_html, "--html", ptune::analyze::overview_html(c));
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
        auto cfg = ptune::cli::load(check_c);
        ptune::config::expand_sweep(cfg);
        std::cout << ptune::config::to_json(cfg).dump(2) << "\n";
        return 0;
      }
      if (app.got_subcommand("report")) {
        if (report_out.empty() && report_against.empty())
          throw ptune::UsageError("report: nothing to do; give -o FILE.html for the HTML report, --against OLD.json "
                                  "for the comparison, or both");
        ptune::cli::check_output(report_out_opt->count() > 0, report_out, "-o");
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
          ptune::files::write_atomically(report_out, "--out", ptune::report::to_html(runs));
          ptune::log::info("wrote " + report_out);
        }
        return code;
      }
      ptune::cli::check_before_engine(cl);
      start_with_process_settings(cl, argv);
      engine = load_engine();
      return engine.run(cl);
    } catch (const ptune::ConfigError& e) {
      std::fprintf(stderr, "ptune: error: %s\n", e.what());
      return 2;
    } catch (const ptune::UsageError& e) {
      std::fprintf(stderr, "ptune: error: %s\n", e.what());
      return 2;
    } catch (const ptune::Interrupted&) {
      std::fprintf(stderr, "ptune: %s\n", g_signal.load() == SIGTERM ? "terminated" : "interrupted");
      return ptune::cli::stopped_code(cl);
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
  if (engine.finish) engine.finish(/*graceful=*/code == 0);
  return code;
}
