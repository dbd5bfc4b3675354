#pragma once
/// The experiment configuration: the only way options reach ptune's core. Every default lives
/// here, next to its field; config.cpp's field table binds each field to its JSON path, type,
/// range and help.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptune::config {

struct ModelConfig {
  std::string arch = "resnet18";       // models::architectures(): torchvision's names (docs/models.md)
  int64_t num_classes = 10;            // size of the final fc layer
  std::optional<std::string> weights;  // torch.save(state_dict) file to start from, or null
  bool channels_last = false;          // NHWC memory format for the model and its inputs
};

struct DataConfig {
  std::string kind = "fake_cifar";     // fake_cifar | image_folder
  std::optional<std::string> root;     // image_folder: root/<class>/*.{jpg,jpeg,png}
  std::string transform = "train";     // image_folder: train (RandomResizedCrop+flip) | eval
  std::string on_bad_file = "error";   // image_folder: error | skip (count, warn once)
  int64_t max_image_pixels = 178956970;  // image_folder: larger images are bad files (Pillow's
                                         // decompression-bomb limit), checked from the header
  int64_t num_samples = 10000;         // number of images in the dataset
  int64_t image_size = 224;            // side of the square images the model sees
  std::vector<double> mean = {0.5, 0.5, 0.5};  // per-channel mean subtracted after /255
  std::vector<double> std = {0.5, 0.5, 0.5};   // per-channel std divided after the mean
};

struct LoaderConfig {
  int64_t batch_size = 32;     // samples per step (per process)
  int64_t num_workers = 0;     // worker threads building batches; 0 = in the training thread
  bool pin_memory = false;     // collate into page-locked host memory, copy non_blocking (CUDA)
  int64_t prefetch = 2;        // batches each worker may have ready ahead of the trainer
  bool shuffle = true;         // reshuffle the sample order every epoch (from seed and epoch)
  bool drop_last = true;       // drop the last partial batch of an epoch
  bool uint8_transfer = false; // ship uint8 images; convert and normalize on the device
  bool gpu_resize = false;     // fake_cifar: ship 32x32 originals, resize on the device
};

struct OptimConfig {
  std::string kind = "sgd";    // sgd | adamw
  double lr = 0.001;           // learning rate
  double momentum = 0.9;       // SGD momentum (ignored by adamw)
  double weight_decay = 0.0;   // L2 penalty (sgd) or decoupled decay (adamw)
  bool set_to_none = false;    // zero_grad(set_to_none=true): free gradients instead of zeroing
  std::string amp = "off";     // off | bf16 (autocast; CPU and CUDA) | fp16 (autocast + GradScaler; CUDA)
  bool cudnn_benchmark = false;  // let cuDNN pick the fastest convolution algorithms (CUDA)
  bool cuda_graphs = false;    // capture the whole train step in a CUDA graph and replay it (CUDA)
};

struct DistConfig {
  std::string backend = "auto";  // auto (NCCL on CUDA, Gloo on CPU) | nccl | gloo
  double bucket_mb = 25.0;       // gradient bucket size for the overlapped all-reduce
  int64_t accumulate = 1;        // micro-steps per optimizer step (all-reduce on the last only)
  double timeout_s = 300.0;      // collective and rendezvous timeout
  std::optional<std::string> master_addr;  // rendezvous host when the environment has none
  int64_t master_port = 29500;   // rendezvous port when the environment has none
};

struct MeasureConfig {
  std::string mode = "train";  // train | data (loader only) | synthetic (one batch, model only)
  int64_t warmup_steps = 10;   // untimed steps before measuring
  int64_t steps = 50;          // timed steps per window
  int64_t repeats = 3;         // timed windows of each configuration before any verdict (at least)
  double max_s = 0;            // seconds a row may take in all (warm-up included); 0 = auto
                               // (3x the time of its first windows, at most 30 s)
  double target_ci_pct = 3.0;  // within noise: inside 1.00x +- this (%); a row alone stops at this half-width
  double noise_pct = 1.0;      // differences below this (%) are never called faster or slower
  bool interleave = true;      // time each row against the previous one, windows alternating
  bool profile = false;        // write a Chrome trace of a few steps per row
  int64_t profile_steps = 3;   // steps recorded in each trace
  std::string out_dir = "runs";  // traces go to out_dir/<experiment>/<row>/
  int64_t convergence_steps = 0;  // train each row this many steps more and compare loss curves; 0 = off
};

struct TrainConfig {
  int64_t epochs = 1;            // passes over the dataset (`ptune train`)
  int64_t max_steps = 0;         // stop after this many steps in all; 0 = no limit
  int64_t checkpoint_every = 0;  // checkpoint every N steps; 0 = only at the end
  int64_t keep_checkpoints = 3;  // the newest this many checkpoints of a run are kept; 0 = all
  std::string checkpoint_dir = "checkpoints";  // where checkpoints are written
  int64_t log_every = 10;        // progress line every N steps
};

/// Settings a process gets when it starts (engine/process.hpp): the tuning guide's CPU section.
/// A sweep row whose settings differ from its neighbour's runs each side in a child process of
/// its own (docs/statistics.md); the defaults are what a plain `python train.py` gets.
struct ProcessConfig {
  std::string allocator = "glibc";  // glibc (its defaults) | glibc_tuned | jemalloc | tcmalloc
  std::string openmp = "gnu";       // gnu (LibTorch's libgomp) | intel (libiomp5, preloaded)
  bool bind_threads = false;        // each OpenMP thread pinned to its own core (OMP_PROC_BIND=close,
                                    // OMP_PLACES=cores)
  std::optional<std::string> cpus;  // the CPUs the process may run on ("0-3,8"); null = all allowed
  int64_t numa_node = -1;           // CPUs and memory bound to this NUMA node; -1 = no binding
};

/// One row of a sweep: a name and the overrides it adds to all rows before it.
struct SweepRow {
  std::string name;                // label in the table
  nlohmann::ordered_json set = nlohmann::ordered_json::object();  // "path": value, cumulative
};

struct ExperimentConfig {
  std::string name = "experiment";  // experiment name (results, checkpoints)
  int64_t seed = 0;                 // seeds data, shuffling and model initialization
  std::string device = "auto";      // auto | cpu | cuda | cuda:N
  int64_t cpu_threads = 0;          // intra-op threads on CPU; 0 = all cores
  ModelConfig model;
  DataConfig data;
  LoaderConfig loader;
  OptimConfig optim;
  DistConfig dist;
  MeasureConfig measure;
  TrainConfig train;
  ProcessConfig process;
  std::vector<SweepRow> sweep;      // rows of `ptune sweep`; empty = one row, the config itself
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
void apply_patch(ExperimentConfig& cfg, const nlohmann::ordered_json& patch,
                 const std::string& where);

/// The fully resolved config as JSON (every field, defaults filled in).
nlohmann::ordered_json to_json(const ExperimentConfig& cfg);

/// Checks the rules that tie keys together (each key alone is checked when it is read):
/// data.kind image_folder needs data.root; loader.gpu_resize needs fake_cifar;
/// optim.cuda_graphs needs optim.kind sgd and dist.accumulate 1; model.weights must exist. Throws ConfigError prefixed
/// with `where`.
void validate(const ExperimentConfig& cfg, const std::string& where);

/// The configs each sweep row runs with: row i = base + patches of rows 0..i; each is
/// validated (errors name the row: "sweep[2] 'name': ...").
std::vector<std::pair<SweepRow, ExperimentConfig>> expand_sweep(const ExperimentConfig& base);

/// The JSON Schema (draft 2020-12) describing every key, generated from the field table.
nlohmann::ordered_json schema();

/// Every leaf path of the config ("loader.batch_size", ...), in document order.
std::vector<std::string> field_paths();

}  // namespace ptune::config
