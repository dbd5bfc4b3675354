// Each command's options (cli.hpp): the one place an option is declared to CLI11, with its help,
// bound to its member of the command's type (define()), and the one place its value is checked
// beyond what CLI11 checks (check(), beside define()). The "given" members (an option given, even
// empty) are set as CLI11 reads the option: its value may be checked only when it was given.

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "analyze/render.hpp"
#include "analyze/trace_reader.hpp"
#include "cli.hpp"
#include "config/commands.hpp"
#include "core/stats.hpp"
#include "report/results.hpp"

namespace ptune::cli {
namespace {

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("config", c.config_path, "experiment JSON file")->required();
  cmd->add_option("--set", c.sets,
                  "override a config value: PATH=VALUE (repeatable), e.g. loader.batch_size=256")
      ->take_all();
}

/// Sets `given` when CLI11 reads `opt` from the command line (once or more, whatever its value, an
/// empty one included): CLI11 runs an each() validator on every result it parsed. It also runs
/// validators on a default_val() and under force_callback(): never combine those with given().
CLI::Option* given(CLI::Option* opt, bool& given) {
  return opt->each([&given](const std::string&) { given = true; });
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

/// A validator of finite numbers from `lo` to `hi` (CLI::Range lets NaN through: no comparison
/// with it is true); its error quotes the value as given and says "<what>".
CLI::Validator finite_number(double lo, double hi, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < lo || v > hi)
          return "'" + text + "' is not a finite number " + what;
        return "";
      },
      name);
}

/// A finite number of at least 0.
CLI::Validator non_negative_number() {
  return finite_number(0, std::numeric_limits<double>::infinity(), "of at least 0", "number >= 0");
}

/// A finite number in [lo, hi].
CLI::Validator number_in(double lo, double hi) {
  char range[64];
  std::snprintf(range, sizeof range, "%g to %g", lo, hi);
  return finite_number(lo, hi, std::string("from ") + range, std::string("number in [") + range + "]");
}

/// --html in a folder given as traces, named as a trace (*.json, *.json.gz): the next analyze of
/// that folder would read the page as a trace. Throws UsageError.
void check_not_in_trace_folder(const std::string& html, const std::vector<std::string>& paths) {
  if (html.empty() || !analyze::is_trace_file_name(html)) return;
  std::filesystem::path folder = std::filesystem::path(html).parent_path();
  if (folder.empty()) folder = ".";
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec) && std::filesystem::equivalent(folder, p, ec) && !ec)
      throw UsageError("--html '" + html + "' is in the trace folder '" + p +
                       "', named as a trace (it would be read as one): name another file");
  }
}

}  // namespace

void SweepArgs::define(CLI::App& sweep) {
  add_common(&sweep, common);
  define_output(sweep);
}

void SweepArgs::define_output(CLI::App& sweep) {
  auto& s = *this;
  sweep.add_option("--format", s.format, "stdout format: table | json | csv | md")->capture_default_str();
  sweep.add_flag(
      "--profile", s.profile,
      "record a Chrome trace of measure.profile_steps steps per row (same as --set measure.profile=true)");
  given(sweep.add_option("--rows", s.rows,
                         "run only these rows: 0-based indices and ranges, e.g. 7, 0,3 or 5-7 (the "
                         "rows before still apply their changes)"),
        s.rows_given);
  given(sweep.add_option("--out", s.out,
                         "also write results to FILE (.json, .csv, .md or .html by extension, any "
                         "case), rewritten after every row"),
        s.out_given);
  sweep.add_option("--label", s.label,
                   "name this run's rows: LABEL for a config without sweep rows, 'LABEL: <row>' otherwise "
                   "(e.g. in a shell loop over --set values)");
  sweep.add_flag("--no-header", s.no_header,
                 "--format csv: print the rows without the header line, to append to a file that has one");
}

void SweepArgs::check(CommandLine& cl) const {
  check_format(format, report::formats());
  cl.config = load(common);
  check_output(cl, {{"config", common.config_path}});
}

void SweepArgs::check_output(const CommandLine& cl,
                             const std::vector<std::pair<std::string, std::string>>& inputs) const {
  if (cl.rank0) {
    cli::check_output(out_given, out, "--out", inputs);
    // A CSV's companion (FILE.env.json) is written beside it: checked as well.
    if (out_given && report::format_of_path(out) == "csv")
      cli::check_output(true, report::csv_companion_path(out), "--out's CSV companion", inputs);
  }
  if (no_header && format != "csv")
    throw UsageError("--no-header: only with --format csv (got --format " + format + ")");
}

namespace {

/// A compare option of one row or of all: "ROW:VALUE" names row ROW (0-based), "VALUE" every row.
struct RowValue {
  std::optional<size_t> row;
  std::string value;
};

/// `text` of `flag` as a RowValue; throws UsageError for a row that is not one of the `rows`.
RowValue row_value(const std::string& flag, const std::string& text, size_t rows) {
  const size_t colon = text.find(':');
  const bool indexed =
      colon != std::string::npos && colon > 0 && text.find_first_not_of("0123456789") == colon;
  if (!indexed) return {std::nullopt, text};
  const std::string index = text.substr(0, colon);
  const size_t row = index.size() > 9 ? rows : std::stoul(index);
  if (row >= rows)
    throw UsageError(flag + " '" + text + "': there is no row " + index + "; " +
                     (rows == 1
                          ? std::string("the one command is row 0")
                          : "the rows are 0 to " + std::to_string(rows - 1) + ", one per command in order") +
                     " (" + flag + " VALUE applies to every row)");
  return {row, text.substr(colon + 1)};
}

using KeyValue = std::pair<std::string, nlohmann::ordered_json>;

/// --env [ROW:]NAME=VALUE: program.env.NAME.
KeyValue env_value(const std::string& text, const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--env '" + text +
                     "': expected NAME=VALUE for every row, or ROW:NAME=VALUE for row ROW");
  return {"program.env." + value.substr(0, eq), value.substr(eq + 1)};
}

/// --step-pattern [ROW:]PATTERN: program.step_pattern (checked as the config's).
KeyValue pattern_value(const std::string&, const std::string& value) {
  return {"program.step_pattern", value};
}

/// --samples-per-step [ROW:]N: program.samples_per_step (its range checked as the config's).
KeyValue samples_value(const std::string& text, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE)
    throw UsageError("--samples-per-step '" + text + "': '" + value +
                     "' is not a whole number (N for every row, ROW:N for row ROW)");
  return {"program.samples_per_step", n};
}

/// Each of `values` (of `flag`) into its row's keys or every row's.
void put_row_values(const std::string& flag, const std::vector<std::string>& values,
                    KeyValue (*parse)(const std::string& text, const std::string& value),
                    std::vector<config::CommandRow>& rows, nlohmann::ordered_json& every_row) {
  for (const auto& text : values) {
    const RowValue v = row_value(flag, text, rows.size());
    const auto [key, value] = parse(text, v.value);
    (v.row ? rows[*v.row].set : every_row)[key] = value;
  }
}

}  // namespace

void CompareArgs::define(CLI::App& compare) {
  // One value each time an option is given: a command after it is a command, not its value.
  auto one = [](CLI::Option* o) { return o->allow_extra_args(false); };
  compare.add_option("commands", commands,
                     "the commands, one argument each ('python3 train.py --workers 4'), the first the "
                     "baseline: each is a row, its words split as a shell splits a simple command "
                     "(quotes, backslashes, leading NAME=VALUE variables) and run without a shell");
  one(compare.add_option("--name", names,
                         "the rows' names, one per command in order (default: the command)"));
  one(compare.add_option("--env", envs,
                         "NAME=VALUE: a variable for every row's program (repeatable); ROW:NAME=VALUE for "
                         "row ROW alone (0-based: 0 is the first command)"));
  one(compare.add_option("--step-pattern", step_patterns,
                         "PATTERN: program.step_pattern of every row; ROW:PATTERN for row ROW alone"));
  one(compare.add_option("--samples-per-step", samples_per_step,
                         "N: the samples a step processes (program.samples_per_step), for samples/s; ROW:N "
                         "for row ROW alone"));
  one(compare.add_option("--set", sets,
                         "override a config value of every row: PATH=VALUE (repeatable), e.g. "
                         "measure.steps=20"));
  given(compare.add_option("--save-config", save_config,
                           "also write the sweep as a config (JSON) to FILE, before the rows run: ptune "
                           "sweep FILE runs the same rows"),
        save_given);
  sweep.define_output(compare);
}

void CompareArgs::check(CommandLine& cl) const {
  check_format(sweep.format, report::formats());
  if (commands.empty())
    throw UsageError(
        "compare: no commands; give each command as one argument, the baseline first: ptune compare "
        "'python3 train.py' 'python3 train.py --workers 4'");
  if (names.size() > commands.size())
    throw UsageError("--name '" + names[commands.size()] + "': more names (" + std::to_string(names.size()) +
                     ") than commands (" + std::to_string(commands.size()) +
                     "); --name names the commands in order");
  std::vector<config::CommandRow> rows;
  for (size_t i = 0; i < commands.size(); ++i) {
    if (i < names.size() && names[i].empty())
      throw UsageError("--name: an empty name (row " + std::to_string(i) + ")");
    rows.push_back({commands[i], i < names.size() ? names[i] : ""});
  }
  nlohmann::ordered_json every_row = nlohmann::ordered_json::object();
  put_row_values("--env", envs, env_value, rows, every_row);
  put_row_values("--step-pattern", step_patterns, pattern_value, rows, every_row);
  put_row_values("--samples-per-step", samples_per_step, samples_value, rows, every_row);
  cl.config = config::config_from_commands(rows, every_row, sets);
  check_config(*cl.config, "compare");
  sweep.check_output(cl, {});
  if (cl.rank0) check_output(save_given, save_config, "--save-config");
  if (save_given && sweep.out_given && save_config == sweep.out)
    throw UsageError("--save-config '" + save_config + "' is also --out; name two files");
}

void ReportArgs::define(CLI::App& report) {
  auto& r = *this;
  report.add_option("results", r.files, "results JSON files: ptune sweep --out, or scripts/bench's --json")
      ->required();
  given(report.add_option("-o,--out", r.out, "write the HTML report to FILE (.html)"), r.out_given);
  report.add_option(
      "--format", r.format,
      "print the results file's table again on stdout, as ptune sweep --format printed it: table | "
      "json | csv | md (with --against: the new file's)");
  auto* against = given(report.add_option("--against", r.against,
                                          "the old results JSON: print the comparison per row (old and new "
                                          "samples/s, ratio, beyond noise or not)"),
                        r.against_given);
  using stats::level_text;
  given(report
            .add_option("--fail-if-slower", r.fail_pct,
                        "PCT: exit 1 when a row's samples/s fell by more than PCT % beyond noise (the " +
                            level_text(stats::kSpeedupLevel) + " interval from both runs' windows, " +
                            level_text(stats::kSpeedupLevelUnderLoad) +
                            " for a row measured under load; files without windows: more than both spreads), "
                            "or a row is missing or failed")
            ->needs(against)
            ->check(number_in(0, 100)),
        r.fail_given);
}

/// The report's usage rules, checked before any file is read.
void ReportArgs::check(CommandLine&) const {
  if (against_given && against.empty())
    throw UsageError("report: --against: an empty path; name the older results file");
  if (out_given && out.empty()) throw UsageError("report: -o: an empty path; name a file");
  if (out.empty() && against.empty() && format.empty())
    throw UsageError(
        "report: nothing to do; give -o FILE.html for the HTML report, --against OLD.json for the "
        "comparison, --format FORMAT for the table again, or any of them");
  if (!format.empty()) {
    check_format(format, report::formats());
    if (files.size() != 1)
      throw UsageError("report: --format prints one results file's table; got " +
                       std::to_string(files.size()) + " files");
  }
  std::vector<std::pair<std::string, std::string>> inputs{{"results file", against}};
  for (const auto& f : files) inputs.emplace_back("results file", f);
  check_output(out_given, out, "-o", inputs);
  if (!out.empty() && report::format_of_path(out) != "html")
    throw UsageError("report: -o '" + out + "' is not an .html file; ptune report writes HTML");
  if (!against.empty() && files.size() != 1)
    throw UsageError("report: --against compares one new results file with the old one; got " +
                     std::to_string(files.size()) + " new files");
}

void TrainArgs::define(CLI::App& train) {
  add_common(&train, common);
  train.add_option("--resume", resume, "continue from a checkpoint written by ptune train");
  train.add_option("--save-weights", save_weights,
                   "write the final weights as a torch.save(state_dict) file");
}

void TrainArgs::check(CommandLine& cl) const { cl.config = load(common); }

void EvalArgs::define(CLI::App& eval) {
  add_common(&eval, common);
  eval.add_option("--weights", weights, "a torch.save(state_dict) file (torchvision's or ptune's)")
      ->required();
  eval.add_option("--format", format, "table | json")->capture_default_str();
}

void EvalArgs::check(CommandLine& cl) const {
  check_format(format, {"table", "json"});
  if (weights.empty()) throw UsageError("--weights: an empty path; name a weights file");
  cl.config = load(common);
}

void CheckArgs::define(CLI::App& check) { add_common(&check, common); }

void TuneArgs::define(CLI::App& tune) {
  auto& t = *this;
  add_common(&tune, t.common);
  auto* batch = tune.add_flag("--batch-size", t.batch,
                              "find the batch size: double from loader.batch_size, then binary-search the "
                              "largest that fits (memory margin on CUDA, --max-batch); the fastest wins");
  tune.add_option("--margin", t.margin_pct, "--batch-size: percent of the GPU's memory left free")
      ->needs(batch)
      ->check(number_in(0, 99))
      ->capture_default_str();
  tune.add_option("--max-batch", t.max_batch,
                  "--batch-size: largest batch tried (default " +
                      std::to_string(config::kDefaultMaxBatchCuda) + " on CUDA, " +
                      std::to_string(config::kDefaultMaxBatchCpu) + " on the CPU)")
      ->needs(batch)
      ->check(whole_number(1, int64_t{1} << 40));
  tune.add_option(
          "--threshold", t.threshold_pct,
          "percent a change must gain, at least, to be kept (and be faster beyond noise, as a sweep row)")
      ->excludes(batch)
      ->check(number_in(0, 1000))
      ->capture_default_str();
  tune.add_option("--budget", t.budget_min, "minutes; no new trial starts after them (0 = no limit)")
      ->check(non_negative_number());
  tune.add_option("--repeats", t.repeats, "measure.repeats is raised to at least this for every trial")
      ->check(whole_number(1, 1000))
      ->capture_default_str();
  given(tune.add_option("--out", t.out,
                        "write the winning config to FILE (JSON, accepted by train, check and sweep)"),
        t.out_given);
  tune.add_option("--format", t.format,
                  "stdout format: table (with the trials), json (results, trials and the winning config), "
                  "csv or md (the table)")
      ->capture_default_str();
}

void TuneArgs::check(CommandLine& cl) const {
  check_format(format, report::formats());
  cl.config = load(common);
  check_output(
      out_given, out, "--out",
      {{"config", common.config_path}, {"model.weights file", cl.config->model.weights.value_or("")}});
}

void LaunchArgs::define(CLI::App& launch) {
  auto& o = opt;
  launch
      .add_option("--nproc-per-node", o.nproc_per_node,
                  "ranks (processes) to start; one per GPU on a GPU machine")
      ->required()
      ->check(whole_number(1, 4096));
  launch.add_option("--nnodes", o.nnodes, "machines in the run; start one launch on each")
      ->capture_default_str()
      ->check(whole_number(1, 65536));
  launch
      .add_option("--node-rank", o.node_rank,
                  "this machine's place, 0 .. nnodes-1; node 0 runs rank 0 and serves the rendezvous")
      ->capture_default_str()
      ->check(whole_number(0, 65535));
  launch.add_option("--master-addr", o.master_addr,
                    "node 0's address, reachable from every node (default 127.0.0.1 on one node; required "
                    "with --nnodes > 1)");
  launch
      .add_option("--master-port", o.master_port,
                  "rendezvous port at --master-addr (0 = any free port, one node only)")
      ->capture_default_str()
      ->check(whole_number(0, 65535));
  launch
      .add_option("--grace", o.grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping the ranks after one failed")
      ->capture_default_str()
      ->check(number_in(0, 3600));
  launch.add_flag("--no-prefix", no_prefix,
                  "do not prefix the ranks' stderr lines (logs, errors) with [rank R]");
  launch.add_flag("--prefix-stdout", prefix_stdout,
                  "prefix the ranks' stdout lines with [rank R] too (by default stdout is exactly rank 0's "
                  "output, e.g. --format json for jq)");
  launch.add_option("command", o.args, "the ptune command every rank runs, after --")->required();
}

void AnalyzeArgs::define(CLI::App& analyze) {
  auto& z = *this;
  analyze
      .add_option("trace", z.paths,
                  "trace files, or folders of trace files (one per rank); several: compared in order, the "
                  "first the baseline")
      ->required();
  analyze.add_option("--format", z.format, "stdout format: table | json | md | csv")->capture_default_str();
  analyze.add_flag("--gpu", z.opt.require_gpu, "require GPU figures: a CPU-only trace is an error");
  analyze
      .add_option("--events-mb", z.events_mb,
                  "MB: the most of a trace's events held in memory at a time (in their compact form, about "
                  "a third of their JSON); a larger trace is read in parts of whole steps, with the same "
                  "figures (0: one step a part)")
      ->capture_default_str()
      ->check(number_in(0, 1e6));
  analyze.add_option(
      "--label", z.labels,
      "a trace's label in the table, once per trace in order (default: the file or folder name)");
  analyze
      .add_option("--batch-size", z.batch,
                  "samples per step per rank, for samples/s (default: read from the first step's input "
                  "shapes, recorded with record_shapes=True)")
      ->check(whole_number(1, int64_t{1} << 40));
  analyze
      .add_option("--noise-pct", z.noise_pct,
                  "PCT: how far two separate runs of the same code may differ, which their steps do not "
                  "measure: a speedup within 1.00x +-PCT% is never called faster or slower, and is within "
                  "noise when its whole interval lies inside +-PCT% (+-3% at least)")
      ->capture_default_str()
      ->check(number_in(0, 100));
  given(analyze.add_option("-o,--html", z.html,
                           "also write the overview as one self-contained HTML page to this file"),
        z.html_given);
}

void AnalyzeArgs::check(CommandLine&) const {
  check_format(format, analyze::formats());
  std::vector<std::pair<std::string, std::string>> traces;
  for (const auto& p : paths) traces.emplace_back("trace", p);
  check_output(html_given, html, "--html", traces);
  check_not_in_trace_folder(html, paths);
}

void RowSideArgs::define(CLI::App& side) { add_common(&side, common); }

void RowSideArgs::check(CommandLine& cl) const { cl.config = load(common); }

}  // namespace ptune::cli
