#pragma once
/// The results of a sweep (DESIGN §5) and the writers that render them: an aligned terminal
/// table, JSON (the contract scripts rely on), CSV and Markdown.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "measure/probe.hpp"

namespace ptune::report {

/// The machine and software a result came from.
struct Environment {
  std::string torch;        // LibTorch version
  std::string device;       // device name
  std::string device_kind;  // "cpu" | "cuda"
  std::string cuda;         // CUDA version, "" on CPU builds
  int64_t cpu_threads = 0;
  int64_t world_size = 1;
};

/// One row of the table.
struct Row {
  std::string name;                       // the sweep row's name
  nlohmann::ordered_json changes;         // the row's own overrides
  int64_t num_workers = 0;
  std::string mode = "train";
  std::string status = "ok";              // ok | skipped: <why> | failed: <why>
  std::optional<measure::Measurement> m;  // absent when not ok
  double speedup_vs_prev = 0;             // vs the previous ok row of the same mode
  double speedup_vs_base = 0;             // vs the first ok row of the same mode
  std::string diagnosis;
  std::vector<std::string> notes;         // warnings (changed training semantics, ...)
  std::vector<double> loss_curve;         // measure.convergence_steps: loss of each step
};

struct Results {
  nlohmann::ordered_json config;  // the resolved config
  Environment environment;
  std::vector<Row> rows;
  std::string status = "running";  // running | complete | interrupted
};

/// Adds to `row` a note "<key> changes training semantics; loss L vs B in the first row" for
/// each of its overrides that changes what is trained, not only how fast (batch size,
/// precision, lr, optimizer, model, image size, accumulation). No-op without a loss or base.
void note_semantics(Row& row, const std::optional<double>& base_loss);

/// Fills speedup_vs_prev / speedup_vs_base of the last row from the rows before it.
void compute_speedups(std::vector<Row>& rows);

/// The results as the DESIGN §5 JSON document.
nlohmann::ordered_json to_json(const Results& r);

/// Renders the results in `format` ("table" | "json" | "csv" | "md"). `color` (table only)
/// adds ANSI colours: speedups >= 1.05x green, < 0.95x red, skipped rows yellow, failed red.
std::string render(const Results& r, const std::string& format, bool color = false);

/// Writes `text` to `path` atomically (files::write_atomically: a unique temporary file in the
/// same folder, flushed, then renamed; FIFOs and devices written into; symlinks followed).
/// Throws std::runtime_error "cannot write <what> '<path>': <reason>".
void write_atomic(const std::string& path, const std::string& text, const std::string& what = "--out");

/// The output formats render() knows.
const std::vector<std::string>& formats();

}  // namespace ptune::report
