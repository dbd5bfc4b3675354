// ptune's command line: parses arguments with CLI11, runs the commands that need no tensors here
// and loads the training engine (engine.cpp, a module linked with LibTorch) for the rest, and
// turns every error into one line and a documented exit code:
// 0 ok, 1 runtime failure (also: a sweep row that failed, a write to stdout that failed), 2 usage
// or config error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <filesystem>
#include <limits>
#include <iostream>
#include <optional>
#include <tuple>
#include <variant>

#include <CLI/CLI.hpp>

#include "analyze/advice.hpp"
#include "analyze/compare.hpp"
#include "analyze/overview.hpp"
#include "analyze/render.hpp"
#include "cli.hpp"
#include "config/config.hpp"
#include "config/suggest.hpp"
#include "system/rendezvous.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "ptune_build_id.hpp"
#include "report/compare.hpp"
#include "report/html.hpp"
#include "report/results.hpp"
#include "report/run_file.hpp"

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the first SIGINT or SIGTERM
/// The engine's stop entry, once it is loaded: the first signal is passed on to it.
std::atomic<ptune_engine_stop_fn> g_engine_stop{nullptr};

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
  if (const auto stop = g_engine_stop.load()) stop(g_signal.load());
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
/// (on_stop_signal); SIGPIPE and SIGXFSZ are ignored, so that a write to a closed pipe (EPIPE)
/// and a write past `ulimit -f` (EFBIG, "File too large") are write errors, not a silent death:
/// a file's is reported on one line with exit 1 and no temporary file left; standard output's
/// reader that stopped reading is no error (stdout_error).
void install_signal_policy() {
  handle_stop_signal(SIGINT);
  handle_stop_signal(SIGTERM);
  handle_stop_signal(SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
}

/// Whether `fd` is a pipe or socket whose reading end is closed.
bool reader_gone(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return false;
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

/// After the output is printed: a failed write to stdout (a full disk, `> /dev/full`) is an error
/// too. Returns "" or the message. A pipe its reader closed (`| head -1`) is not: the reader took
/// what it wanted, and the exit status stays the command's (a CI gate's verdict).
std::string stdout_error() {
  errno = 0;
  std::cout.flush();
  const bool bad = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout);
  const int e = errno;
  if (!bad || e == EPIPE || reader_gone(STDOUT_FILENO)) return "";
  return std::string("cannot write to stdout: ") + std::strerror(e ? e : EIO);
}

/// "unknown command 'X'; ..." when the first word of the command line that is not an option
/// names no command (CLI11 would only say that a subcommand is required); "" otherwise. The
/// options before the command are flags (no values), so that first word is the command.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({}))
    if (!sub->get_group().empty()) names.push_back(sub->get_name());  // hidden ones are not offered
  names.push_back("row-side");                                        // ... but are known
  static const std::vector<std::string> kGlobal = {"-v", "--verbose", "-q",       "--quiet",
                                                   "-h", "--help",    "--version"};
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return "";
    if (!word.empty() && word[0] == '-') {
      // Before the command only ptune's own flags (a command's options follow its name).
      if (std::find(kGlobal.begin(), kGlobal.end(), word) != kGlobal.end() ||
          word.find_first_not_of("-vqh") == std::string::npos)
        continue;
      return "unknown option '" + word +
             "' before the command; ptune's own are -v, -q, --help and --version, a "
             "command's follow its name (ptune sweep exp.json --rows 0)";
    }
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

/// The training engine's entry points (cli.hpp): a plain C interface.
struct Engine {
  ptune_engine_run_fn run = nullptr;
  ptune_engine_finish_fn finish = nullptr;
  ptune_engine_cpu_ceilings_fn cpu_ceilings = nullptr;
};

/// dlsym of `name` in `handle` as a function of type F.
template <typename F>
F entry(void* handle, const char* name) {
  return reinterpret_cast<F>(::dlsym(handle, name));
}

/// The engine at `path`, checked to be this build's. Throws std::runtime_error naming the file
/// and why not.
Engine open_engine(const std::filesystem::path& path) {
  using namespace ptune::cli;
  // RTLD_GLOBAL: LibTorch's libraries as if linked into the program (its CUDA libraries
  // load their parts by name); RTLD_NOW: a missing library or symbol is an error here.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) throw std::runtime_error(std::string("cannot load the training engine: ") + ::dlerror());
  const std::string not_ours =
      "cannot load the training engine: " + path.string() + " is not ptune " + ptune::kVersion + "'s engine";
  const auto build_id = entry<ptune_engine_build_id_fn>(handle, kEngineBuildId);
  if (!build_id) throw std::runtime_error(not_ours);
  // The engine resolves ptune's own code in this program: an engine of another build (an
  // executable copied over an older installation) would not match it, and may lack entry points.
  if (const std::string id = build_id(); id != PTUNE_BUILD_ID)
    throw std::runtime_error(
        "cannot load the training engine: " + path.string() + " is from another build of ptune (" + id +
        ", this program is " + PTUNE_BUILD_ID +
        "); install the program and its engine together (cmake --install BUILD --prefix PREFIX)");
  Engine e;
  e.run = entry<ptune_engine_run_fn>(handle, kEngineRun);
  e.finish = entry<ptune_engine_finish_fn>(handle, kEngineFinish);
  e.cpu_ceilings = entry<ptune_engine_cpu_ceilings_fn>(handle, kEngineCpuCeilings);
  const auto stop = entry<ptune_engine_stop_fn>(handle, kEngineStop);
  if (!e.run || !e.finish || !e.cpu_ceilings || !stop) throw std::runtime_error(not_ours);
  // A signal that came while the engine was loading is passed on now; later ones by the handler.
  g_engine_stop.store(stop);
  if (const int sig = g_signal.load()) stop(sig);
  return e;
}

/// Loads the training engine from beside the executable (the build tree, a copied folder) or
/// from ../lib/ptune (an installed tree). Throws std::runtime_error naming the file and why.
Engine load_engine() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path dir = ec ? fs::path(".") : exe.parent_path();
  const fs::path places[] = {dir / ptune::cli::kEngineFile,
                             dir / ".." / "lib" / "ptune" / ptune::cli::kEngineFile};
  for (const auto& path : places)
    if (fs::exists(path, ec)) return open_engine(path);
  throw std::runtime_error("cannot load the training engine: " + places[0].string() + " not found (nor " +
                           places[1].lexically_normal().string() +
                           "); sweep, compare, train, eval, tune and launch need it");
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
  if (std::getenv("PTUNE_PROCESS_SET") != nullptr || ptune::system::default_process(cl.config->process))
    return;
  const ptune::cli::Common& c =
      cl.command == "train" ? cl.get<ptune::cli::TrainArgs>().common : cl.get<ptune::cli::EvalArgs>().common;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(c.config_path, ec))
    throw ptune::ConfigError(
        "process: settings that take effect when a process starts need the config in a file, not on a pipe "
        "(ptune starts itself again with them and reads it again)");
  const ptune::system::ProcessPlan plan = ptune::system::plan_process(cl.config->process);
  std::vector<std::string> env = ptune::system::environment_with(plan);
  env.push_back("PTUNE_PROCESS_SET=1");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (const int err = ptune::system::bind_process(plan); err != 0)
    throw std::runtime_error(std::string("process: cannot bind to the CPUs or NUMA node asked for: ") +
                             std::strerror(err));
  ::execve("/proc/self/exe", argv, envp.data());
  throw std::runtime_error(std::string("process: cannot start ptune again with its process settings: ") +
                           std::strerror(errno));
}

namespace {

using ptune::cli::AnalyzeArgs;
using ptune::cli::CheckArgs;
using ptune::cli::CompareArgs;
using ptune::cli::EvalArgs;
using ptune::cli::LaunchArgs;
using ptune::cli::ReportArgs;
using ptune::cli::RowSideArgs;
using ptune::cli::SchemaArgs;
using ptune::cli::SweepArgs;
using ptune::cli::TrainArgs;
using ptune::cli::TuneArgs;

/// The command line as parsed, and the engine once loaded. CLI11 binds every command's options
/// before it knows which command is given: each command's type is in `all` (one of each), and
/// the one given becomes `cl.args`.
struct Args {
  ptune::cli::CommandLine cl;
  std::tuple<SweepArgs, CompareArgs, TrainArgs, EvalArgs, TuneArgs, LaunchArgs, RowSideArgs, CheckArgs,
             SchemaArgs, ReportArgs, AnalyzeArgs>
      all;
  char** argv = nullptr;
  Engine engine;
};

// ---------------------------------------------------------------- each command's code

ptune::Outcome run_schema(Args&) {
  std::cout << ptune::config::schema().dump(2) << "\n";
  return {};
}

/// This CPU's ceilings from the engine (LibTorch), loaded for them only when a CPU trace has
/// FLOPs to read against them.
std::optional<ptune::analyze::Ceilings> cpu_ceilings(Args& a, const std::string& precision) {
  ptune_engine_ceilings c{};
  ptune_engine_outcome o{};
  try {
    if (!a.engine.cpu_ceilings) a.engine = load_engine();
  } catch (const std::exception& e) {
    return ptune::analyze::Ceilings{{0, precision, std::string("no CPU calibration: ") + e.what()}, {}};
  }
  if (a.engine.cpu_ceilings(precision.c_str(), &c, &o) != 0)
    return ptune::analyze::Ceilings{{0, precision, std::string("no CPU calibration: ") + o.message}, {}};
  return ptune::analyze::Ceilings{{c.flops_per_s, c.precision, c.peak_source},
                                  {c.bytes_per_s, c.bandwidth_source}};
}

ptune::Outcome run_analyze(Args& a) {
  auto& z = a.cl.get<AnalyzeArgs>();  // checked (AnalyzeArgs::check)
  try {
    ptune::analyze::CompareOptions copt;
    copt.labels = z.labels;
    if (z.batch > 0) copt.batch_size = z.batch;
    copt.noise_pct = z.noise_pct;
    z.opt.part_bytes = static_cast<uint64_t>(z.events_mb * 1024 * 1024);
    // A large trace is taken apart part by part, each allocating and freeing a few MB: keep that
    // memory for the next part rather than give it back to the system and fault it in again
    // (about a tenth of the time on a 100 MB trace).
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    z.opt.cpu_ceilings = [&a](const std::string& precision) { return cpu_ceilings(a, precision); };
    const auto c = ptune::analyze::compare_versions(z.paths, z.opt, copt);
    if (c.versions.size() == 1)
      std::cout << ptune::analyze::render_analysis(c.versions[0].analysis, z.format, &c.versions[0])
                << std::flush;
    else
      std::cout << ptune::analyze::render_versions(c, z.format) << std::flush;
    if (!z.html.empty() && a.cl.rank0) {  // under launch, rank 0 writes
      ptune::files::write_atomically(z.html, "--html", ptune::analyze::overview_html(c));
      if (!a.cl.quiet) std::fprintf(stderr, "ptune: analyze: overview written to %s\n", z.html.c_str());
    }
  } catch (const ptune::DataError& e) {
    // The trace is the command's argument: a bad one is a usage error (exit 2).
    return {ptune::kExitUsage, std::string("analyze: ") + e.what()};
  }
  return {};
}

ptune::Outcome run_check(Args& a) {
  auto cfg = ptune::cli::load(a.cl.get<CheckArgs>().common);
  ptune::config::expand_sweep(cfg);
  std::cout << ptune::config::to_json(cfg).dump(2) << "\n";
  return {};
}

ptune::Outcome run_report(Args& a) {
  const ReportArgs& r = a.cl.get<ReportArgs>();  // checked (ReportArgs::check)
  std::vector<ptune::report::RunFile> runs;
  if (!r.against.empty()) runs.push_back(ptune::report::load_run(r.against));
  for (const auto& f : r.files) runs.push_back(ptune::report::load_run(f));
  ptune::report::label_runs(runs);
  ptune::Outcome outcome;
  if (!r.format.empty())
    std::cout << ptune::report::render_results(runs.back().results, r.format) << std::flush;
  if (!r.against.empty()) {
    const auto cmp = ptune::report::compare_runs(runs[0], runs[1], r.fail_pct);
    std::cout << ptune::report::render_run_comparison(cmp) << std::flush;
    const auto regressions = cmp.regressions();
    if (r.fail_given && !regressions.empty()) {
      std::string names;
      for (const auto* row : regressions)
        names += (names.empty() ? "" : ", ") + row->name + " (" + row->verdict + ")";
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g%%", r.fail_pct);
      outcome = {ptune::kExitFailure, std::to_string(regressions.size()) + " row(s) regressed against " +
                                          r.against + " (--fail-if-slower " + limit + "): " + names};
    }
  }
  if (!r.out.empty() && a.cl.rank0) {  // under launch, rank 0 writes
    ptune::files::write_atomically(r.out, "--out", ptune::report::to_html(runs));
    ptune::log::info("wrote " + r.out);
  }
  return outcome;
}

/// sweep, compare, train, eval, tune, launch and row-side, checked (check_before_engine): run by the engine.
ptune::Outcome run_in_engine(Args& a) {
  ptune::cli::CommandLine& cl = a.cl;
  start_with_process_settings(cl, a.argv);
  a.engine = load_engine();
  ptune_engine_outcome o{};
  a.engine.run(&cl, &o);
  return {o.exit_code, o.message};
}

/// ptune's commands, in the order of --help: a command's code is the run function beside its
/// name (the engine's own table, in engine.cpp, for those run_in_engine hands over).
struct Command {
  const char* name;
  const char* summary;                     // "" for a hidden command
  void (*define)(CLI::App& sub, Args& a);  // define<T>: T's options
  void (*take)(Args& a);                   // take<T>: the command given; T's options become a.cl.args
  ptune::Outcome (*run)(Args& a);
};

template <class T>
void define(CLI::App& sub, Args& a) {
  std::get<T>(a.all).define(sub);
}

template <class T>
void take(Args& a) {
  a.cl.args = std::move(std::get<T>(a.all));
}

const Command kCommands[] = {
    {"sweep", "run the config's sweep rows cumulatively and print the speedup table", define<SweepArgs>,
     take<SweepArgs>, run_in_engine},
    {"compare",
     "time commands as sweep rows, the first the baseline, without a config: ptune compare 'python3 "
     "train.py' "
     "'python3 train.py --workers 4' (--save-config writes the equivalent config)",
     define<CompareArgs>, take<CompareArgs>, run_in_engine},
    {"report",
     "an HTML report of results files side by side (-o FILE.html), and/or the comparison with an older run "
     "(--against OLD.json) that gates CI",
     define<ReportArgs>, take<ReportArgs>, run_report},
    {"train", "train with the config: epochs, progress, checkpoints, resume", define<TrainArgs>,
     take<TrainArgs>, run_in_engine},
    {"eval", "mean loss and top-1 accuracy of weights on the config's dataset", define<EvalArgs>,
     take<EvalArgs>, run_in_engine},
    {"check", "validate the config and print it fully resolved (JSON)", define<CheckArgs>, take<CheckArgs>,
     run_check},
    {"tune",
     "search for the fastest configuration and write it as a config: greedy over the optimizations, or the "
     "batch size (--batch-size)",
     define<TuneArgs>, take<TuneArgs>, run_in_engine},
    {"launch",
     "run a ptune command as N data-parallel ranks on this machine (one node of --nnodes): ptune launch "
     "--nproc-per-node N -- train exp.json",
     define<LaunchArgs>, take<LaunchArgs>, run_in_engine},
    {"analyze",
     "where a profiled training step's time goes and what to change next: a torch.profiler or ptune trace "
     "(.json, .json.gz) or a folder of them (one per rank); several traces (versions of the same training "
     "code, in order): the table of what each change did",
     define<AnalyzeArgs>, take<AnalyzeArgs>, run_analyze},
    {"schema", "print the JSON Schema of experiment configs", define<SchemaArgs>, take<SchemaArgs>,
     run_schema},
    // A sweep row's side in a child process of its own (process settings): not for users.
    {"row-side", "", define<RowSideArgs>, take<RowSideArgs>, run_in_engine},
};

/// Parses the command line into `a`: the command to run, or an outcome to end with (--help,
/// --version, a usage error).
std::variant<const Command*, int> parse(CLI::App& app, Args& a, int argc, char** argv) {
  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty())
    return ptune::cli::print_outcome({ptune::kExitUsage, unknown + " (see ptune --help)"});
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The help of the command whose options were being read, where one was.
    std::string help = "ptune --help";
    for (const auto* sub : app.get_subcommands()) help = "ptune " + sub->get_name() + " --help";
    return ptune::cli::print_outcome({ptune::kExitUsage, std::string(e.what()) + " (see " + help + ")"});
  }
  for (const auto& c : kCommands)
    if (app.got_subcommand(c.name)) {
      a.cl.command = c.name;
      c.take(a);
      return &c;
    }
  // require_subcommand(1) made parse() throw when no command was given.
  throw std::logic_error("the command line parsed without a command");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptune: measure and explain deep-learning training speed, one optimization at a time"};
  app.set_version_flag("--version", std::string("ptune ") + ptune::kVersion);
  app.require_subcommand(1);
  // The process's CPUs, read before LibTorch's OpenMP runtime may bind this thread to one.
  ptune::system::allowed_cpus();
  Args a;
  a.argv = argv;
  app.add_flag("-v,--verbose", a.cl.verbose, "more detail, and stack traces with errors");
  app.add_flag("-q,--quiet", a.cl.quiet, "only errors on stderr; results still go to stdout");
  for (const auto& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    c.define(*sub, a);
    if (*c.summary == '\0') sub->group("");
    // --verbose/--quiet may also follow the subcommand: `ptune sweep exp.json --quiet`.
    sub->fallthrough();
  }
  const auto parsed = parse(app, a, argc, argv);
  if (std::holds_alternative<int>(parsed)) return std::get<int>(parsed);
  const Command& command = *std::get<const Command*>(parsed);
  if (a.cl.quiet && a.cl.verbose)
    return ptune::cli::print_outcome({ptune::kExitUsage, "-q and -v: only errors, or more detail; give one"});

  // Data parallel (torchrun, Slurm, ptune launch): only rank 0 prints; every rank still
  // reports its own errors.
  ptune::cli::CommandLine& cl = a.cl;
  cl.rank0 = ptune::system::world_rank() == 0;
  if (!cl.rank0) cl.quiet = true;
  // The commands that run no rank logic of their own (they read files and print) print on rank
  // 0 only as well: another rank's stdout goes nowhere.
  if (!cl.rank0 && command.run != run_in_engine && std::strcmp(command.name, "launch") != 0) {
    const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd >= 0) {
      std::fflush(stdout);
      ::dup2(null_fd, STDOUT_FILENO);
      ::close(null_fd);
    }
  }
  ptune::log::set_level(cl.quiet     ? ptune::log::Level::kError
                        : cl.verbose ? ptune::log::Level::kDebug
                                     : ptune::log::Level::kInfo);
  install_signal_policy();
  cl.interrupted = &g_interrupted;
  cl.signal = &g_signal;

  // The command, its options checked first; then the engine shuts a data-parallel run's process
  // group down.
  ptune::Outcome outcome;
  try {
    ptune::cli::check_before_engine(cl);
    outcome = command.run(a);
  } catch (...) {
    outcome = ptune::cli::outcome_of_current_exception(g_signal.load());
  }
  int code = ptune::cli::print_outcome(outcome);
  if (const std::string error = stdout_error(); !error.empty() && code == 0)
    code = ptune::cli::print_outcome({ptune::kExitFailure, error});
  if (a.engine.finish) a.engine.finish(/*graceful=*/code == 0);
  return code;
}
