#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "config/suggest.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "report/results.hpp"

namespace ptune::cli {

int stopped_code(const CommandLine& cl) { return stopped_exit_code(cl.signal ? cl.signal->load() : 0); }

namespace {

nlohmann::ordered_json common_json(const Common& c) { return {{"config", c.config_path}, {"sets", c.sets}}; }

Common common_from(const nlohmann::ordered_json& j) {
  Common c;
  c.config_path = j.at("config").get<std::string>();
  c.sets = j.at("sets").get<std::vector<std::string>>();
  return c;
}

}  // namespace

nlohmann::ordered_json to_json(const CommandLine& cl) {
  const SweepArgs& s = cl.sweep;
  const TuneArgs& t = cl.tune;
  const dist::LaunchOptions& l = cl.launch.opt;
  nlohmann::ordered_json j = {
      {"command", cl.command},
      {"verbose", cl.verbose},
      {"quiet", cl.quiet},
      {"rank0", cl.rank0},
      {"sweep",
       {{"common", common_json(s.common)},
        {"format", s.format},
        {"out", s.out},
        {"rows", s.rows},
        {"label", s.label},
        {"out_given", s.out_given},
        {"rows_given", s.rows_given},
        {"profile", s.profile},
        {"no_header", s.no_header}}},
      {"train", {{"common", common_json(cl.train.common)}}},
      {"eval",
       {{"common", common_json(cl.eval.common)}, {"format", cl.eval.format}, {"weights", cl.eval.weights}}},
      {"tune",
       {{"common", common_json(t.common)},
        {"threshold_pct", t.threshold_pct},
        {"margin_pct", t.margin_pct},
        {"max_batch", t.max_batch},
        {"batch", t.batch},
        {"out_given", t.out_given},
        {"budget_min", t.budget_min},
        {"repeats", t.repeats},
        {"out", t.out},
        {"format", t.format}}},
      {"launch",
       {{"nproc_per_node", l.nproc_per_node},
        {"nnodes", l.nnodes},
        {"node_rank", l.node_rank},
        {"master_port", l.master_port},
        {"master_addr", l.master_addr},
        {"args", l.args},
        {"exe", l.exe},
        {"grace_s", l.grace_s},
        {"no_prefix", cl.launch.no_prefix},
        {"prefix_stdout", cl.launch.prefix_stdout}}},
      {"side", common_json(cl.side)},
  };
  if (cl.train.resume) j["train"]["resume"] = *cl.train.resume;
  if (cl.train.save_weights) j["train"]["save_weights"] = *cl.train.save_weights;
  if (cl.config) j["config"] = config::to_json(*cl.config);
  return j;
}

CommandLine command_line_from_json(const nlohmann::ordered_json& j) {
  CommandLine cl;
  cl.command = j.at("command").get<std::string>();
  cl.verbose = j.at("verbose").get<bool>();
  cl.quiet = j.at("quiet").get<bool>();
  cl.rank0 = j.at("rank0").get<bool>();
  const auto& s = j.at("sweep");
  cl.sweep.common = common_from(s.at("common"));
  cl.sweep.format = s.at("format").get<std::string>();
  cl.sweep.out = s.at("out").get<std::string>();
  cl.sweep.rows = s.at("rows").get<std::string>();
  cl.sweep.label = s.at("label").get<std::string>();
  cl.sweep.out_given = s.at("out_given").get<bool>();
  cl.sweep.rows_given = s.at("rows_given").get<bool>();
  cl.sweep.profile = s.at("profile").get<bool>();
  cl.sweep.no_header = s.at("no_header").get<bool>();
  const auto& tr = j.at("train");
  cl.train.common = common_from(tr.at("common"));
  if (tr.contains("resume")) cl.train.resume = tr.at("resume").get<std::string>();
  if (tr.contains("save_weights")) cl.train.save_weights = tr.at("save_weights").get<std::string>();
  const auto& e = j.at("eval");
  cl.eval.common = common_from(e.at("common"));
  cl.eval.format = e.at("format").get<std::string>();
  cl.eval.weights = e.at("weights").get<std::string>();
  const auto& t = j.at("tune");
  cl.tune.common = common_from(t.at("common"));
  cl.tune.threshold_pct = t.at("threshold_pct").get<double>();
  cl.tune.margin_pct = t.at("margin_pct").get<double>();
  cl.tune.max_batch = t.at("max_batch").get<int64_t>();
  cl.tune.batch = t.at("batch").get<bool>();
  cl.tune.out_given = t.at("out_given").get<bool>();
  cl.tune.budget_min = t.at("budget_min").get<double>();
  cl.tune.repeats = t.at("repeats").get<int64_t>();
  cl.tune.out = t.at("out").get<std::string>();
  cl.tune.format = t.at("format").get<std::string>();
  const auto& l = j.at("launch");
  cl.launch.opt.nproc_per_node = l.at("nproc_per_node").get<int>();
  cl.launch.opt.nnodes = l.at("nnodes").get<int>();
  cl.launch.opt.node_rank = l.at("node_rank").get<int>();
  cl.launch.opt.master_port = l.at("master_port").get<int>();
  cl.launch.opt.master_addr = l.at("master_addr").get<std::string>();
  cl.launch.opt.args = l.at("args").get<std::vector<std::string>>();
  cl.launch.opt.exe = l.at("exe").get<std::string>();
  cl.launch.opt.grace_s = l.at("grace_s").get<double>();
  cl.launch.no_prefix = l.at("no_prefix").get<bool>();
  cl.launch.prefix_stdout = l.at("prefix_stdout").get<bool>();
  cl.side = common_from(j.at("side"));
  if (j.contains("config")) cl.config = config::from_json(j.at("config"), "the command's config");
  return cl;
}

Outcome outcome_of_current_exception(int stop_signal) {
  try {
    throw;
  } catch (const ConfigError& e) {
    return {kExitUsage, e.what()};
  } catch (const UsageError& e) {
    return {kExitUsage, e.what()};
  } catch (const Interrupted&) {
    return {stopped_exit_code(stop_signal), stop_signal == SIGTERM ? "terminated" : "interrupted"};
  } catch (const std::exception& e) {
    return {kExitFailure, e.what()};
  } catch (...) {
    return {kExitFailure, "internal error: an exception of unknown type"};
  }
}

int print_outcome(const Outcome& o) {
  if (o.exit_code == kExitOk || o.message.empty()) return o.exit_code;
  const std::string& text = o.message;
  if (is_stopped_exit_code(o.exit_code))
    std::fprintf(stderr, "ptune: %s\n", text.c_str());
  else
    std::fprintf(stderr, "ptune: error: %s\n", text.c_str());
  return o.exit_code;
}

void fill_outcome(const Outcome& o, ptune_engine_outcome* out) {
  out->exit_code = o.exit_code;
  std::snprintf(out->message, sizeof out->message, "%s", o.message.c_str());
}

config::ExperimentConfig load(const Common& c) {
  auto cfg = config::load_file(c.config_path);
  for (const auto& s : c.sets) config::apply_set(cfg, s);
  config::validate(cfg, c.config_path);
  // Process settings are checked against this machine before any row runs: a library that is
  // not installed, a CPU or NUMA node that is not there.
  const auto rows = config::expand_sweep(cfg);
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      system::plan_process(rows[i].second.process);
    } catch (const ConfigError& e) {
      if (cfg.sweep.empty()) throw ConfigError(c.config_path + ": " + e.what());
      throw ConfigError(c.config_path + ": sweep[" + std::to_string(i) + "] '" + rows[i].first.name +
                        "': " + e.what());
    }
  }
  return cfg;
}

void check_output(bool given, const std::string& path, const std::string& flag,
                  const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (!given) return;
  try {
    files::check_writable(path, flag);
    files::check_not_input(path, flag, inputs);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
}

void check_format(const std::string& f, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string hint = config::did_you_mean(f, allowed);
    throw UsageError("--format: unknown format '" + f + "'" + (hint.empty() ? ";" : hint) +
                     " allowed: " + list);
  }
}

void check_before_engine(CommandLine& cl) {
  const std::string& c = cl.command;
  if (c == "sweep") {
    check_format(cl.sweep.format, report::formats());
    cl.config = load(cl.sweep.common);
    if (cl.rank0) {
      check_output(cl.sweep.out_given, cl.sweep.out, "--out", {{"config", cl.sweep.common.config_path}});
      // A CSV's companion (FILE.env.json) is written beside it: checked as well.
      if (cl.sweep.out_given && report::format_of_path(cl.sweep.out) == "csv")
        check_output(true, report::csv_companion_path(cl.sweep.out), "--out's CSV companion",
                     {{"config", cl.sweep.common.config_path}});
    }
    if (cl.sweep.no_header && cl.sweep.format != "csv")
      throw UsageError("--no-header: only with --format csv (got --format " + cl.sweep.format + ")");
  } else if (c == "tune") {
    check_format(cl.tune.format, report::formats());
    cl.config = load(cl.tune.common);
    check_output(cl.tune.out_given, cl.tune.out, "--out",
                 {{"config", cl.tune.common.config_path},
                  {"model.weights file", cl.config->model.weights.value_or("")}});
  } else if (c == "eval") {
    check_format(cl.eval.format, {"table", "json"});
    if (cl.eval.weights.empty()) throw UsageError("--weights: an empty path; name a weights file");
    cl.config = load(cl.eval.common);
  } else if (c == "train") {
    cl.config = load(cl.train.common);
  } else if (c == "row-side") {
    cl.config = load(cl.side);
  }
  // A program's rows are timed by sweep alone: the other commands run ptune's own pipelines.
  if (cl.config && cl.config->program.enabled() && c != "sweep")
    throw ConfigError("program.command: a config with a program is timed with ptune sweep; ptune " + c +
                      " runs ptune's own pipelines (model, data, loader, optim)");
}

report::TerminalStyle style_of(int fd) {
  return report::terminal_style(::isatty(fd) == 1, std::getenv("TERM"), std::getenv("NO_COLOR"));
}

}  // namespace ptune::cli
