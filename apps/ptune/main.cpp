// ptune's command line: parses arguments with CLI11, copies them into the library's option
// structs, runs the job, and turns every error into one line and a documented exit code:
// 0 ok, 1 runtime failure, 2 usage or config error, 130 interrupted.

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "config/config.hpp"
#include "config/suggest.hpp"
#include "engine/run.hpp"
#include "errors.hpp"
#include "log.hpp"
#include "report/results.hpp"
#include "tune/sweep.hpp"

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) std::_Exit(130);  // a second Ctrl-C: leave at once
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
  return cfg;
}

std::string format_of_path(const std::string& path) {
  auto ends = [&](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".csv")) return "csv";
  if (ends(".md")) return "md";
  return "json";
}

void check_format(const std::string& f, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string hint = ptune::config::did_you_mean(f, allowed);
    throw ptune::UsageError("--format: unknown format '" + f + "'" + (hint.empty() ? ";" : hint) + " allowed: " + list);
  }
}

bool stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

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
  sweep->add_option("--out", sweep_out, "also write results to FILE (.json, .csv or .md by extension), rewritten after every row");

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

  ptune::log::set_level(quiet ? ptune::log::Level::kError
                              : verbose ? ptune::log::Level::kDebug : ptune::log::Level::kInfo);
  std::signal(SIGINT, on_sigint);

  try {
    if (app.got_subcommand("schema")) {
      std::cout << ptune::config::schema().dump(2) << "\n";
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
      ptune::report::Results results;
      ptune::tune::SweepOptions opt;
      opt.interrupted = &g_interrupted;
      const bool live = !quiet && stderr_is_tty();
      if (!sweep_out.empty()) {
        const std::string fmt = format_of_path(sweep_out);
        opt.on_row = [&, fmt](const ptune::report::Results& r) {
          ptune::report::write_atomic(sweep_out, ptune::report::render(r, fmt));
        };
      }
      const size_t n_rows = std::max<size_t>(1, cfg.sweep.size());
      opt.on_progress = [&](size_t i, const std::string& name, const std::string& phase, int64_t s, int64_t of) {
        if (live) {
          std::fprintf(stderr, "\r\033[K[%zu/%zu] %s: %s %lld/%lld", i + 1, n_rows, name.c_str(), phase.c_str(),
                       static_cast<long long>(s), static_cast<long long>(of));
          if (phase == "measure" && s == of) std::fprintf(stderr, "\r\033[K");
        } else if (verbose && s == of) {
          ptune::log::debug("row " + std::to_string(i) + " '" + name + "': " + phase + " done");
        }
      };
      int code = 0;
      try {
        ptune::tune::run_sweep(cfg, opt, results);
      } catch (const ptune::Interrupted&) {
        if (live) std::fprintf(stderr, "\r\033[K");
        ptune::log::warn("interrupted: " + std::to_string(results.rows.size()) + " finished row(s) kept");
        code = 130;
      }
      std::cout << ptune::report::render(results, sweep_format) << std::flush;
      return code;
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
        std::printf("trained %lld steps: final loss %.4f, %.1f samples/s, checkpoint %s\n",
                    static_cast<long long>(s.steps), s.final_loss, s.samples_per_s, s.last_checkpoint.c_str());
      } catch (const ptune::Interrupted&) {
        ptune::log::warn("interrupted; checkpoint written, continue with --resume");
        return 130;
      }
      return 0;
    }
    if (app.got_subcommand("eval")) {
      check_format(eval_format, {"table", "json"});
      auto cfg = load(eval_c);
      auto r = ptune::engine::evaluate(cfg, weights);
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
    std::fprintf(stderr, "ptune: interrupted\n");
    return 130;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ptune: error: %s\n", verbose ? e.what() : e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
