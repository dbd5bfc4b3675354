#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "config/suggest.hpp"
#include "system/process.hpp"
#include "system/rendezvous.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "report/results.hpp"

namespace ptune::cli {

int stopped_code(const CommandLine& cl) { return stopped_exit_code(cl.signal ? cl.signal->load() : 0); }

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
  check_config(cfg, c.config_path);
  return cfg;
}

void check_config(const config::ExperimentConfig& cfg, const std::string& source) {
  config::validate(cfg, source);
  // Process settings are checked against this machine before any row runs: a library that is
  // not installed, a CPU or NUMA node that is not there.
  const auto rows = config::expand_sweep(cfg);
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      system::plan_process(rows[i].second.process);
    } catch (const ConfigError& e) {
      if (cfg.sweep.empty()) throw ConfigError(source + ": " + e.what());
      throw ConfigError(source + ": sweep[" + std::to_string(i) + "] '" + rows[i].first.name +
                        "': " + e.what());
    }
  }
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

namespace {

/// A config's program against the command: its rows are timed by ptune sweep (or compare, which
/// builds such a sweep) alone (the other commands run ptune's own pipelines), in one process
/// (under ptune launch every rank would start the program's instances of its own). Throws
/// ConfigError.
void check_program(const CommandLine& cl) {
  if (!cl.config) return;
  const std::string& c = cl.command;
  const bool sweeps = c == "sweep" || c == "compare";
  const bool program = cl.config->program.enabled();
  if (program && !sweeps)
    throw ConfigError("program.command: a config with a program is timed with ptune sweep; ptune " + c +
                      " runs ptune's own pipelines (model, data, loader, optim)");
  // A sweep's rows may name a program; the other commands run none of them.
  const auto& rows = cl.config->sweep;
  const bool rows_program =
      sweeps && std::any_of(rows.begin(), rows.end(), [](const auto& row) { return row.names_program(); });
  if ((program || rows_program) && system::world_size() > 1)
    throw ConfigError(
        "program.command: a program's rows are timed by one ptune sweep, not by ptune launch's " +
        std::to_string(system::world_size()) +
        " ranks (each would start the program): run ptune sweep alone, with the program's own "
        "launcher (torchrun ...) in program.command");
}

}  // namespace

void check_before_engine(CommandLine& cl) {
  std::visit([&cl](const auto& args) { args.check(cl); }, cl.args);
  check_program(cl);
}

report::TerminalStyle style_of(int fd) {
  return report::terminal_style(::isatty(fd) == 1, std::getenv("TERM"), std::getenv("NO_COLOR"));
}

}  // namespace ptune::cli
