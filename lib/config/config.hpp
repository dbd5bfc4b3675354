#pragma once
/// The experiment configuration: the only way options reach ptune's core. Every default lives
/// here, next to its field; what a field means is written once, as its help in config.cpp's
/// field table (fields()), which binds it to its JSON path, type and range, and from which
/// `ptune schema`, `--help` and docs/configuration.md are made.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptune::config {

// The values of the keys that take one of a few names. A config holds them as these types; their
// names exist in one place, EnumNames below, which JSON, --set, `ptune schema`, the help and
// every message read (name(), enum_from()): nothing else compares a key's value as text.

enum class DataKind { kFakeCifar, kImageFolder };                    // data.kind
enum class Transform { kTrain, kEval };                              // data.transform
enum class OnBadFile { kError, kSkip };                              // data.on_bad_file
enum class OptimKind { kSgd, kAdamW };                               // optim.kind
enum class Amp { kOff, kBf16, kFp16 };                               // optim.amp
enum class Backend { kAuto, kNccl, kGloo };                          // dist.backend
enum class Mode { kTrain, kData, kSynthetic };                       // measure.mode
enum class Allocator { kGlibc, kGlibcTuned, kJemalloc, kTcmalloc };  // process.allocator
enum class OpenMp { kGnu, kIntel };                                  // process.openmp

/// Each value of an enum-like key with its name in a config, in the order the help lists them.
template <class E>
struct EnumNames;
template <>
struct EnumNames<DataKind> {
  static constexpr std::pair<DataKind, const char*> kNames[] = {{DataKind::kFakeCifar, "fake_cifar"},
                                                                {DataKind::kImageFolder, "image_folder"}};
};
template <>
struct EnumNames<Transform> {
  static constexpr std::pair<Transform, const char*> kNames[] = {{Transform::kTrain, "train"},
                                                                 {Transform::kEval, "eval"}};
};
template <>
struct EnumNames<OnBadFile> {
  static constexpr std::pair<OnBadFile, const char*> kNames[] = {{OnBadFile::kError, "error"},
                                                                 {OnBadFile::kSkip, "skip"}};
};
template <>
struct EnumNames<OptimKind> {
  static constexpr std::pair<OptimKind, const char*> kNames[] = {{OptimKind::kSgd, "sgd"},
                                                                 {OptimKind::kAdamW, "adamw"}};
};
template <>
struct EnumNames<Amp> {
  static constexpr std::pair<Amp, const char*> kNames[] = {
      {Amp::kOff, "off"}, {Amp::kBf16, "bf16"}, {Amp::kFp16, "fp16"}};
};
template <>
struct EnumNames<Backend> {
  static constexpr std::pair<Backend, const char*> kNames[] = {
      {Backend::kAuto, "auto"}, {Backend::kNccl, "nccl"}, {Backend::kGloo, "gloo"}};
};
template <>
struct EnumNames<Mode> {
  static constexpr std::pair<Mode, const char*> kNames[] = {
      {Mode::kTrain, "train"}, {Mode::kData, "data"}, {Mode::kSynthetic, "synthetic"}};
};
template <>
struct EnumNames<Allocator> {
  static constexpr std::pair<Allocator, const char*> kNames[] = {{Allocator::kGlibc, "glibc"},
                                                                 {Allocator::kGlibcTuned, "glibc_tuned"},
                                                                 {Allocator::kJemalloc, "jemalloc"},
                                                                 {Allocator::kTcmalloc, "tcmalloc"}};
};
template <>
struct EnumNames<OpenMp> {
  static constexpr std::pair<OpenMp, const char*> kNames[] = {{OpenMp::kGnu, "gnu"},
                                                              {OpenMp::kIntel, "intel"}};
};

/// Whether E is one of the enum-like keys' types (it has EnumNames).
template <class E, class = void>
struct IsConfigEnum : std::false_type {};
template <class E>
struct IsConfigEnum<E, std::void_t<decltype(EnumNames<E>::kNames)>> : std::true_type {};

/// The name of `v` in a config ("bf16"). Throws nothing.
template <class E, std::enable_if_t<IsConfigEnum<E>::value, int> = 0>
const char* name(E v) {
  for (const auto& [value, text] : EnumNames<E>::kNames)
    if (value == v) return text;
  return "?";
}

/// The value named `text`, or none. Throws nothing.
template <class E>
std::optional<E> enum_from(const std::string& text) {
  for (const auto& [value, n] : EnumNames<E>::kNames)
    if (text == n) return value;
  return std::nullopt;
}

/// Every name of E, in order. Throws nothing.
template <class E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& entry : EnumNames<E>::kNames) out.push_back(entry.second);
  return out;
}

struct ModelConfig {
  std::string arch = "resnet18";
  int64_t num_classes = 10;
  std::optional<std::string> weights;
  bool channels_last = false;
};

struct DataConfig {
  DataKind kind = DataKind::kFakeCifar;
  std::optional<std::string> root;
  Transform transform = Transform::kTrain;
  OnBadFile on_bad_file = OnBadFile::kError;
  int64_t max_image_pixels = 178956970;
  int64_t num_samples = 10000;
  int64_t image_size = 224;
  std::vector<double> mean = {0.5, 0.5, 0.5};
  std::vector<double> std = {0.5, 0.5, 0.5};
};

struct LoaderConfig {
  int64_t batch_size = 32;
  int64_t num_workers = 0;
  bool pin_memory = false;
  int64_t prefetch = 2;
  bool shuffle = true;
  bool drop_last = true;
  bool uint8_transfer = false;
  bool gpu_resize = false;
};

struct OptimConfig {
  OptimKind kind = OptimKind::kSgd;
  double lr = 0.001;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool set_to_none = false;
  Amp amp = Amp::kOff;
  bool cudnn_benchmark = false;
  bool cuda_graphs = false;
};

struct DistConfig {
  Backend backend = Backend::kAuto;
  double bucket_mb = 25.0;
  int64_t accumulate = 1;
  double timeout_s = 300.0;
  std::optional<std::string> master_addr;
  int64_t master_port = 29500;
};

struct MeasureConfig {
  Mode mode = Mode::kTrain;
  int64_t warmup_steps = 10;
  int64_t steps = 50;
  int64_t repeats = 3;
  double max_s = 0;
  double auto_max_s = 120;
  double target_ci_pct = 3.0;
  double noise_pct = 1.0;
  bool interleave = true;
  int64_t processes = 3;
  int64_t max_processes = 12;
  bool profile = false;
  int64_t profile_steps = 3;
  std::string out_dir = "runs";
  int64_t convergence_steps = 0;
};

struct TrainConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  std::string checkpoint_dir = "checkpoints";
  int64_t log_every = 10;
};

/// Settings a process gets when it starts (system/process.hpp): the tuning guide's CPU section.
/// A sweep row whose settings differ from its neighbour's runs each side in a child process of
/// its own (docs/statistics.md); the defaults are what a plain `python train.py` gets.
struct ProcessConfig {
  Allocator allocator = Allocator::kGlibc;
  OpenMp openmp = OpenMp::kGnu;
  bool bind_threads = false;
  std::optional<std::string> cpus;
  int64_t numa_node = -1;
};

/// The user's own training program, timed as sweep rows instead of ptune's pipelines
/// (docs/programs.md): each row runs it in processes of its own and reads its step rate from the
/// lines it prints. Empty `command`: no program (ptune's own pipelines).
struct ProgramConfig {
  std::vector<std::string> command;        // argv; no shell unless it names one
  std::vector<std::string> args;           // appended to command (a row's own arguments)
  std::map<std::string, std::string> env;  // variables set for it, beside ptune's environment
  std::optional<std::string> cwd;          // its working folder; null: ptune's
  std::string step_pattern = "auto";       // marks a step's end: a regex, a logger's name, or auto
  int64_t steps_per_match = 1;             // steps a matching line stands for (no `step` group)
  int64_t samples_per_step = 0;            // 0: the table counts steps
  double startup_timeout_s = 300;          // to the first matching line (and between two)
  /// Whether a program is configured.
  bool enabled() const { return !command.empty(); }
  /// command + args.
  std::vector<std::string> argv() const {
    std::vector<std::string> a = command;
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
};

/// One row of a sweep: a name and the overrides it adds to all rows before it.
struct SweepRow {
  std::string name;                                               // label in the table
  nlohmann::ordered_json set = nlohmann::ordered_json::object();  // "path": value, cumulative
  /// Whether the row names a program (sets program.command, or the program section).
  bool names_program() const { return set.contains("program.command") || set.contains("program"); }
};

struct ExperimentConfig {
  std::string name = "experiment";
  int64_t seed = 0;
  std::string device = "auto";
  int64_t cpu_threads = 0;
  ModelConfig model;
  DataConfig data;
  LoaderConfig loader;
  OptimConfig optim;
  DistConfig dist;
  MeasureConfig measure;
  TrainConfig train;
  ProcessConfig process;
  ProgramConfig program;
  std::vector<SweepRow> sweep;
};

/// Parses and validates a config document (already parsed JSON). Missing keys keep their
/// defaults. Throws ConfigError naming `source`, the JSON path, the value and what is allowed.
ExperimentConfig from_json(const nlohmann::ordered_json& doc, const std::string& source);

/// Parses and validates config text (a JSON config file's contents) as load_file does; `source`
/// names it in errors. Throws ConfigError for malformed JSON (with line and column), nesting
/// deeper than 64 levels, a repeated key, an overflowing number or an invalid value.
ExperimentConfig parse_text(const std::string& text, const std::string& source);

/// Reads, parses and validates a JSON config file. Throws ConfigError for a missing or
/// unreadable file, malformed JSON (with line and column) or an invalid value.
ExperimentConfig load_file(const std::string& path);

/// Applies one "path=value" override (the --set syntax). The value is typed by the field:
/// numbers, true/false, null, JSON lists, and bare strings for string fields.
/// Throws ConfigError for a malformed override, an unknown path or an invalid value.
void apply_set(ExperimentConfig& cfg, const std::string& assignment);

/// Applies a JSON object of "path": value overrides (a sweep row's "set"), validating each.
/// `where` prefixes error messages (e.g. "exp.json: sweep[2].set").
void apply_patch(ExperimentConfig& cfg, const nlohmann::ordered_json& patch, const std::string& where);

/// The fully resolved config as JSON (every field, defaults filled in).
nlohmann::ordered_json to_json(const ExperimentConfig& cfg);

/// Checks the rules that tie keys together (each key alone is checked when it is read):
/// data.kind image_folder needs data.root; loader.gpu_resize needs fake_cifar;
/// optim.cuda_graphs needs optim.kind sgd and dist.accumulate 1; model.weights must exist. Throws ConfigError
/// prefixed with `where`.
void validate(const ExperimentConfig& cfg, const std::string& where);

/// The file program.command's first word runs (a name without '/' looked up on PATH, program.env's
/// PATH where it sets one, as the program's exec does); "" when there is none.
std::string resolve_program(const ProgramConfig& p);

/// The configs each sweep row runs with: row i = base + patches of rows 0..i; each is
/// validated (errors name the row: "sweep[2] 'name': ...").
std::vector<std::pair<SweepRow, ExperimentConfig>> expand_sweep(const ExperimentConfig& base);

/// The JSON Schema (draft 2020-12) describing every key, generated from the field table.
nlohmann::ordered_json schema();

/// Every leaf path of the config ("loader.batch_size", ...), in document order.
std::vector<std::string> field_paths();

}  // namespace ptune::config
