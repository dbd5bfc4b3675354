#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>

#include "config/suggest.hpp"
#include "engine/process.hpp"
#include "errors.hpp"
#include "files.hpp"
#include "report/results.hpp"

namespace ptune::cli {

int stopped_code(const CommandLine& cl) { return cl.signal && cl.signal->load() == SIGTERM ? 143 : 130; }

config::ExperimentConfig load(const Common& c) {
  auto cfg = config::load_file(c.config_path);
  for (const auto& s : c.sets) config::apply_set(cfg, s);
  config::validate(cfg, c.config_path);
  // Process settings are checked against this machine before any row runs: a library that is
  // not installed, a CPU or NUMA node that is not there.
  const auto rows = config::expand_sweep(cfg);
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      engine::plan_process(rows[i].second.process);
    } catch (const ConfigError& e) {
      if (cfg.sweep.empty()) throw ConfigError(c.config_path + ": " + e.what());
      throw ConfigError(c.config_path + ": sweep[" + std::to_string(i) + "] '" + rows[i].first.name + "': " + e.what());
    }
  }
  return cfg;
}

void check_output(bool given, const std::string& path, const std::string& flag) {
  if (!given) return;
  try {
    files::check_writable(path, flag);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
}

void check_format(const std::string& f, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string hint = config::did_you_mean(f, allowed);
    throw UsageError("--format: unknown format '" + f + "'" + (hint.empty() ? ";" : hint) + " allowed: " + list);
  }
}

void check_before_engine(CommandLine& cl) {
  const std::string& c = cl.command;
  if (c == "sweep") {
    check_format(cl.sweep_format, report::formats());
    cl.config = load(cl.sweep_c);
    if (cl.rank0) check_output(cl.sweep_out_given, cl.sweep_out, "--out");
    if (cl.sweep_no_header && cl.sweep_format != "csv")
      throw UsageError("--no-header: only with --format csv (got --format " + cl.sweep_format + ")");
  } else if (c == "tune") {
    check_format(cl.tune_format, report::formats());
    cl.config = load(cl.tune_c);
    check_output(cl.tune_out_given, cl.tune_out, "--out");
  } else if (c == "eval") {
    check_format(cl.eval_format, {"table", "json"});
    cl.config = load(cl.eval_c);
  } else if (c == "train") {
    cl.config = load(cl.train_c);
  } else if (c == "row-side") {
    cl.config = load(cl.side_c);
  }
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

report::TerminalStyle style_of(int fd) {
  return report::terminal_style(::isatty(fd) == 1, std::getenv("TERM"), std::getenv("NO_COLOR"));
}

}  // namespace ptune::cli
