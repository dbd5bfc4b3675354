#pragma once
/// Results files as reports and comparisons read them: ptune's own (`ptune sweep --out`, any
/// version) and the JSON of scripts/bench/case_study_vs_pytorch.py (its PyTorch side), each
/// brought to one shape, the results document of report::to_json (normalize), and read once into
/// the typed record every reader uses (report::Results, results_from_json).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/results.hpp"

namespace ptune::report {

/// One run, read: its results as the file holds them (figures rounded as written), typed.
struct RunFile {
  std::string label;             // how reports name the run (label_runs)
  std::string path;              // the file it came from; "" for a sweep of this process
  std::string source = "ptune";  // "ptune" | "PyTorch" (scripts/bench's comparison)
  std::string ptune_version;     // the version that wrote it; "" where the file does not say
  Results results;               // results_from_json of the normalized document
};

/// This process's results as a run, labelled with the experiment's name: read back from its
/// document, so that it renders as the file `sweep --out` writes does. Throws nothing.
RunFile from_results(const Results& r);

/// Reads a results file: any JSON object with a "rows" list whose rows have a "name" (and
/// "samples_per_s" where measured), or scripts/bench/case_study_vs_pytorch.py's --json, whose
/// rows become PyTorch's numbers (normalize). Throws UsageError naming the file: unreadable,
/// malformed JSON, not a results file, or a row without a name.
RunFile load_run(const std::string& path);

/// `doc` in the results shape: every row with every row_keys() key (null where absent or of
/// the wrong type), speedups computed where absent (against the previous and the first row of
/// the same mode with numbers). A comparison of scripts/bench (rows with a "pytorch" list of
/// variants) becomes PyTorch's side: per row the fastest variant that ran, named in the row's
/// notes; `source` (if given) is set to "PyTorch" then, else "ptune". `what` names the document
/// in errors. Throws UsageError when `doc` has no "rows" list or a row has no "name".
nlohmann::ordered_json normalize(const nlohmann::ordered_json& doc, const std::string& what,
                                 std::string* source = nullptr);

/// Names the runs: each file's name without its folder and extension ("results"), the whole
/// path where two names would be the same, PyTorch's side with " (PyTorch)". Throws nothing.
void label_runs(std::vector<RunFile>& runs);

/// What rows are matched by across runs: the name, trimmed, white space runs made one space,
/// lower case. Throws nothing.
std::string match_key(const std::string& name);

}  // namespace ptune::report
