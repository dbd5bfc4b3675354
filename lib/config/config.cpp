#include "config/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include <unistd.h>

#include "config/suggest.hpp"
#include "core/errors.hpp"
#include "config/arch.hpp"
#include "config/step_pattern.hpp"

namespace ptune::config {
namespace {

using Json = nlohmann::ordered_json;

enum class Type {
  kInt,
  kNumber,
  kBool,
  kString,
  kEnum,
  kNumberList,
  kOptString,
  kDevice,
  kStringList,
  kStringMap
};

/// One leaf of the config: its path, type, allowed values, help, and how to read and write it.
struct Field {
  std::string path;
  Type type = Type::kString;
  std::string help;
  std::optional<double> min, max;  // inclusive bounds unless *_exclusive
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices;  // kEnum
  size_t list_len = 0;               // kNumberList
  std::function<Json(const ExperimentConfig&)> get;
  std::function<void(ExperimentConfig&, const Json&)> set;
};

template <class V>
void bind_value(Field& f, std::function<V&(ExperimentConfig&)> ref) {
  f.get = [ref](const ExperimentConfig& c) { return Json(ref(const_cast<ExperimentConfig&>(c))); };
  f.set = [ref](ExperimentConfig& c, const Json& j) { ref(c) = j.get<V>(); };
}

void bind_value_opt(Field& f, std::function<std::optional<std::string>&(ExperimentConfig&)> ref) {
  f.get = [ref](const ExperimentConfig& c) {
    const auto& v = ref(const_cast<ExperimentConfig&>(c));
    return v ? Json(*v) : Json(nullptr);
  };
  f.set = [ref](ExperimentConfig& c, const Json& j) {
    if (j.is_null())
      ref(c).reset();
    else
      ref(c) = j.get<std::string>();
  };
}

/// An enum-like key: its names in JSON, its choices from EnumNames.
template <class V>
void bind_enum(Field& f, std::function<V&(ExperimentConfig&)> ref) {
  f.choices = enum_names<V>();
  f.get = [ref](const ExperimentConfig& c) { return Json(name(ref(const_cast<ExperimentConfig&>(c)))); };
  f.set = [ref, path = f.path](ExperimentConfig& c, const Json& j) {
    const auto v = enum_from<V>(j.get<std::string>());
    if (!v)
      throw std::logic_error(path + ": '" + j.get<std::string>() + "' was not checked against its choices");
    ref(c) = *v;
  };
}

/// Builds a field bound to cfg.*section.*member (an enum-like member's choices are its names).
template <class S, class V>
Field field(const char* path, S ExperimentConfig::*section, V S::*member, Type type, const char* help) {
  Field f;
  f.path = path;
  f.type = type;
  f.help = help;
  std::function<V&(ExperimentConfig&)> ref = [section, member](ExperimentConfig& c) -> V& {
    return (c.*section).*member;
  };
  if constexpr (std::is_same_v<V, std::optional<std::string>>)
    bind_value_opt(f, ref);
  else if constexpr (IsConfigEnum<V>::value)
    bind_enum<V>(f, ref);
  else
    bind_value<V>(f, ref);
  return f;
}

/// Builds a top-level field bound to cfg.*member.
template <class V>
Field top(const char* path, V ExperimentConfig::*member, Type type, const char* help) {
  Field f;
  f.path = path;
  f.type = type;
  f.help = help;
  bind_value<V>(f, [member](ExperimentConfig& c) -> V& { return c.*member; });
  return f;
}

Field&& at_least(Field&& f, double lo, bool exclusive = false) {
  f.min = lo;
  f.min_exclusive = exclusive;
  return std::move(f);
}
Field&& between(Field&& f, double lo, double hi, bool hi_exclusive = false) {
  f.min = lo;
  f.max = hi;
  f.max_exclusive = hi_exclusive;
  return std::move(f);
}
Field&& at_most(Field&& f, double hi) {
  f.max = hi;
  return std::move(f);
}
Field&& one_of(Field&& f, std::vector<std::string> choices) {
  f.choices = std::move(choices);
  return std::move(f);
}
Field&& list_of(Field&& f, size_t n) {
  f.list_len = n;
  return std::move(f);
}

using E = ExperimentConfig;
using T = Type;

const std::vector<Field>& fields() {
  static const std::vector<Field> table = [] {
    std::vector<Field> t;
    t.push_back(top("name", &E::name, T::kString, "experiment name, used in results and checkpoints"));
    t.push_back(
        between(top("seed", &E::seed, T::kInt, "seeds the data, the shuffling and the model initialization"),
                0, 9007199254740991.0));
    t.push_back(
        top("device", &E::device, T::kDevice, "auto (CUDA if visible, else CPU) | cpu | cuda | cuda:N"));
    t.push_back(between(top("cpu_threads", &E::cpu_threads, T::kInt,
                            "intra-op threads on the CPU; 0 = what a default PyTorch process uses (one per "
                            "physical core), at most one per CPU the process may run on (process.cpus)"),
                        0, 1024));

    t.push_back(one_of(
        field("model.arch", &E::model, &ModelConfig::arch, T::kEnum, "network architecture (torchvision's)"),
        architectures()));
    t.push_back(between(field("model.num_classes", &E::model, &ModelConfig::num_classes, T::kInt,
                              "outputs of the final fc layer"),
                        1, 100000));
    t.push_back(field("model.weights", &E::model, &ModelConfig::weights, T::kOptString,
                      "a torch.save(model.state_dict()) file to start from, or null for torchvision's random "
                      "initialization"));
    t.push_back(field("model.channels_last", &E::model, &ModelConfig::channels_last, T::kBool,
                      "NHWC memory format for the model and its inputs"));

    t.push_back(field("data.kind", &E::data, &DataConfig::kind, T::kEnum,
                      "dataset: fake_cifar = seeded random 32x32 RGB images resized to image_size; "
                      "image_folder = JPEG/PNG files under data.root"));
    t.push_back(
        field("data.root", &E::data, &DataConfig::root, T::kOptString,
              "image_folder: folder with one sub-folder of images per class (sorted names = labels)"));
    t.push_back(
        field("data.transform", &E::data, &DataConfig::transform, T::kEnum,
              "image_folder: train = RandomResizedCrop + horizontal flip; eval = Resize + CenterCrop"));
    t.push_back(field("data.on_bad_file", &E::data, &DataConfig::on_bad_file, T::kEnum,
                      "image_folder: a corrupt or non-image file stops the run (error) or is left out "
                      "and counted (skip)"));
    t.push_back(
        between(field("data.max_image_pixels", &E::data, &DataConfig::max_image_pixels, T::kInt,
                      "image_folder: an image with more pixels is a bad file, refused from its header before "
                      "decoding (a guard against decompression bombs; Pillow's limit by default)"),
                1, 4294967296.0));
    t.push_back(between(
        field("data.num_samples", &E::data, &DataConfig::num_samples, T::kInt, "images in the dataset"), 1,
        100000000));
    t.push_back(between(field("data.image_size", &E::data, &DataConfig::image_size, T::kInt,
                              "side of the square images the model sees (bilinear resize)"),
                        8, 4096));
    t.push_back(list_of(between(field("data.mean", &E::data, &DataConfig::mean, T::kNumberList,
                                      "per-channel mean, subtracted after scaling pixels to [0, 1]"),
                                -10, 10),
                        3));
    t.push_back(list_of(between(field("data.std", &E::data, &DataConfig::std, T::kNumberList,
                                      "per-channel standard deviation, divided after subtracting the mean"),
                                1e-6, 100),
                        3));

    t.push_back(between(field("loader.batch_size", &E::loader, &LoaderConfig::batch_size, T::kInt,
                              "samples per step (per process)"),
                        1, 1 << 20));
    t.push_back(between(field("loader.num_workers", &E::loader, &LoaderConfig::num_workers, T::kInt,
                              "worker threads building batches; 0 = build them in the training thread"),
                        0, 256));
    t.push_back(field("loader.pin_memory", &E::loader, &LoaderConfig::pin_memory, T::kBool,
                      "collate into page-locked host memory and copy non_blocking (CUDA devices)"));
    t.push_back(between(field("loader.prefetch", &E::loader, &LoaderConfig::prefetch, T::kInt,
                              "batches each worker may have ready ahead of the trainer"),
                        1, 64));
    t.push_back(field("loader.shuffle", &E::loader, &LoaderConfig::shuffle, T::kBool,
                      "reshuffle the sample order every epoch (from seed and epoch)"));
    t.push_back(field("loader.drop_last", &E::loader, &LoaderConfig::drop_last, T::kBool,
                      "drop the last partial batch of an epoch"));
    t.push_back(field("loader.uint8_transfer", &E::loader, &LoaderConfig::uint8_transfer, T::kBool,
                      "ship uint8 images to the device; convert and normalize there"));

    t.push_back(
        field("loader.gpu_resize", &E::loader, &LoaderConfig::gpu_resize, T::kBool,
              "fake_cifar: ship the 32x32 originals and resize on the device (49x fewer bytes at 224)"));

    t.push_back(field("optim.kind", &E::optim, &OptimConfig::kind, T::kEnum, "optimizer"));
    t.push_back(at_most(
        at_least(field("optim.lr", &E::optim, &OptimConfig::lr, T::kNumber, "learning rate"), 0, true),
        1000));
    t.push_back(between(field("optim.momentum", &E::optim, &OptimConfig::momentum, T::kNumber,
                              "SGD momentum (adamw ignores it)"),
                        0, 1, true));
    t.push_back(between(field("optim.weight_decay", &E::optim, &OptimConfig::weight_decay, T::kNumber,
                              "L2 penalty (sgd) or decoupled weight decay (adamw)"),
                        0, 100));
    t.push_back(field("optim.set_to_none", &E::optim, &OptimConfig::set_to_none, T::kBool,
                      "zero_grad(set_to_none=true): drop gradients instead of writing zeros"));
    t.push_back(field("optim.amp", &E::optim, &OptimConfig::amp, T::kEnum,
                      "mixed precision: off | bf16 (autocast to bfloat16, CPU and CUDA) | fp16 "
                      "(autocast to float16 with dynamic loss scaling, CUDA only)"));
    t.push_back(field("optim.cudnn_benchmark", &E::optim, &OptimConfig::cudnn_benchmark, T::kBool,
                      "let cuDNN time and pick the fastest convolution algorithms (CUDA only)"));
    t.push_back(field("optim.cuda_graphs", &E::optim, &OptimConfig::cuda_graphs, T::kBool,
                      "capture the whole training step (forward, backward, update) in a CUDA graph after "
                      "warm-up and replay it (CUDA only)"));

    t.push_back(field("dist.backend", &E::dist, &DistConfig::backend, T::kEnum,
                      "collective backend: auto = NCCL on CUDA, Gloo on CPU"));
    t.push_back(
        between(field("dist.bucket_mb", &E::dist, &DistConfig::bucket_mb, T::kNumber,
                      "gradient bucket size in MiB; buckets are all-reduced during backward as they fill"),
                0.001, 4096));
    t.push_back(between(
        field("dist.accumulate", &E::dist, &DistConfig::accumulate, T::kInt,
              "micro-steps per optimizer step; gradients are all-reduced on the last one only (no_sync)"),
        1, 4096));
    t.push_back(between(field("dist.timeout_s", &E::dist, &DistConfig::timeout_s, T::kNumber,
                              "timeout of the rendezvous and of every collective, in seconds"),
                        1, 86400));
    t.push_back(field("dist.master_addr", &E::dist, &DistConfig::master_addr, T::kOptString,
                      "rendezvous host when MASTER_ADDR is not set (Slurm: the first node), or null"));
    t.push_back(between(field("dist.master_port", &E::dist, &DistConfig::master_port, T::kInt,
                              "rendezvous port when MASTER_PORT is not set"),
                        1, 65535));

    t.push_back(field("measure.mode", &E::measure, &MeasureConfig::mode, T::kEnum,
                      "train = full steps; data = the input pipeline alone; synthetic = one batch "
                      "already on the device, the model alone"));
    t.push_back(between(field("measure.warmup_steps", &E::measure, &MeasureConfig::warmup_steps, T::kInt,
                              "untimed steps before measuring; windows still running slower after them (the "
                              "start-up transient) are detected and left out (docs/statistics.md)"),
                        0, 1000000));
    t.push_back(
        between(field("measure.steps", &E::measure, &MeasureConfig::steps, T::kInt, "timed steps per window"),
                1, 100000000));
    t.push_back(between(
        field("measure.repeats", &E::measure, &MeasureConfig::repeats, T::kInt,
              "timed windows of each configuration before any verdict, counted after the start-up transient; "
              "more follow until the verdict is decided (docs/statistics.md; a row measured alone: until its "
              "interval is within measure.target_ci_pct) or measure.max_s is spent"),
        1, 1000));
    t.push_back(between(field("measure.max_s", &E::measure, &MeasureConfig::max_s, T::kNumber,
                              "seconds a row may take in all, building its pipeline and warming up included; "
                              "measuring stops between steps when the next would end past it (a step longer "
                              "than this ends the row after one step, noted); 0 = auto (at most 30 s, and at "
                              "most 4x the time the row took to reach its first measure.repeats windows; "
                              "longer where a verdict is in reach: measure.auto_max_s)"),
                        0, 86400));
    t.push_back(between(
        field(
            "measure.auto_max_s", &E::measure, &MeasureConfig::auto_max_s, T::kNumber,
            "measure.max_s 0 (auto): a compared row left undecided by its first budget runs on, up to this "
            "many seconds in all, where the spread it measured (or that spread's optimistic end) says a "
            "verdict is in reach by then (docs/statistics.md); a row whose verdict would need more stops at "
            "its first budget"),
        1, 86400));
    t.push_back(between(
        field("measure.target_ci_pct", &E::measure, &MeasureConfig::target_ci_pct, T::kNumber,
              "a speedup is within noise when its interval lies inside 1.00x plus or minus this percentage; "
              "a row measured alone stops once its interval's half-width is at most this"),
        0.1, 100));
    t.push_back(between(
        field(
            "measure.noise_pct", &E::measure, &MeasureConfig::noise_pct, T::kNumber,
            "a speedup is called faster or slower only when its whole interval lies beyond this percentage"),
        0, 50));
    t.push_back(field("measure.interleave", &E::measure, &MeasureConfig::interleave, T::kBool,
                      "time each sweep row against the previous row of its mode, windows alternating (A B B "
                      "A ...), both pipelines built and warm; false = each row alone"));
    t.push_back(between(
        field("measure.processes", &E::measure, &MeasureConfig::processes, T::kInt,
              "a sweep with process-level rows (process.* keys): child processes each row runs in, started "
              "for it, timed in turn and kept warm as the next row's other side (a tune trial starts both "
              "sides afresh); a process's speed is partly its own (where its memory landed), so intervals "
              "count the spread between them (docs/statistics.md)"),
        2, 8));
    t.push_back(between(
        field("measure.max_processes", &E::measure, &MeasureConfig::max_processes, T::kInt,
              "rows in processes of their own (process.* keys, a program): the most processes a side may "
              "grow to; a compared row starts with measure.processes (or as many as the previous row "
              "ended with) and adds one a side while its measured spread says another process narrows "
              "the interval more than more windows would (docs/statistics.md); at least measure.processes"),
        2, 64));
    t.push_back(
        field("measure.profile", &E::measure, &MeasureConfig::profile, T::kBool,
              "record a few steps of each row with LibTorch's profiler into a Chrome trace (a program row: "
              "its program gets PTUNE_PROFILE_DIR to write one, docs/programs.md)"));
    t.push_back(between(field("measure.profile_steps", &E::measure, &MeasureConfig::profile_steps, T::kInt,
                              "steps recorded in each trace"),
                        1, 1000));
    t.push_back(
        between(field("measure.convergence_steps", &E::measure, &MeasureConfig::convergence_steps, T::kInt,
                      "train rows: also train a fresh model this many steps and compare its loss curve with "
                      "the first row's; 0 = off"),
                0, 10000000));
    t.push_back(field(
        "measure.out_dir", &E::measure, &MeasureConfig::out_dir, T::kString,
        "folder for traces: out_dir/<experiment>/<NN-row>/, one <host>_<pid>.<ns>.pt.trace.json per rank"));

    t.push_back(
        field("process.allocator", &E::process, &ProcessConfig::allocator, T::kEnum,
              "the process's memory allocator: glibc = glibc's malloc as any process gets it; glibc_tuned = "
              "glibc's malloc keeping freed memory for reuse (GLIBC_TUNABLES mmap_threshold 32 MiB, mmap_max "
              "0, no trimming); jemalloc, tcmalloc = preloaded (LD_PRELOAD; Debian's libjemalloc2, "
              "libtcmalloc-minimal4). Set per process: a row that changes it runs in child processes"));
    t.push_back(field("process.openmp", &E::process, &ProcessConfig::openmp, T::kEnum,
                      "the OpenMP runtime of LibTorch's CPU kernels: gnu = the libgomp LibTorch ships "
                      "with; intel = Intel's libiomp5, preloaded (PyPI's intel-openmp, found in the "
                      "active Python environment, LD_LIBRARY_PATH or PTUNE_LIBRARY_PATH)"));
    t.push_back(field("process.bind_threads", &E::process, &ProcessConfig::bind_threads, T::kBool,
                      "pin each OpenMP thread to its own core, neighbours together (OMP_PROC_BIND=close, "
                      "OMP_PLACES=cores): no thread migrates between cores or caches"));
    t.push_back(field("process.cpus", &E::process, &ProcessConfig::cpus, T::kOptString,
                      "the CPUs the process may run on, as a list such as \"0-3,8\" (taskset -c); null = "
                      "every CPU ptune may use; cpu_threads 0 then means one thread per listed CPU"));
    t.push_back(between(field("process.numa_node", &E::process, &ProcessConfig::numa_node, T::kInt,
                              "bind the process's CPUs and memory to this NUMA node (numactl --cpunodebind N "
                              "--membind N); -1 = no binding. On a machine with one node it cannot help: a "
                              "sweep row or tune trial that changes only it is left out, saying so"),
                        -1, 4095));
    t.push_back(
        field("program.command", &E::program, &ProgramConfig::command, T::kStringList,
              "your own training program, as the list of its arguments (e.g. [\"python\", \"train.py\"]; "
              "no shell unless you name one): every row runs it in processes of its own and reads its "
              "step rate from what it prints (docs/programs.md); [] = no program, ptune's own pipelines (the "
              "other program keys are then an error)"));
    t.push_back(field(
        "program.args", &E::program, &ProgramConfig::args, T::kStringList,
        "arguments appended to program.command (a sweep row's own flags, e.g. [\"--workers\", \"4\"])"));
    t.push_back(
        field("program.env", &E::program, &ProgramConfig::env, T::kStringMap,
              "environment variables set for the program, beside ptune's own environment; a row sets "
              "one with \"program.env.NAME\" (null removes it). PYTHONUNBUFFERED=1 is added unless set"));
    t.push_back(field("program.cwd", &E::program, &ProgramConfig::cwd, T::kOptString,
                      "the program's working folder; null = the folder ptune runs in"));
    t.push_back(
        field("program.step_pattern", &E::program, &ProgramConfig::step_pattern, T::kString,
              "what marks the end of a step in the program's stdout or stderr (a line ends at \\n or "
              "\\r): exactly one of the names tqdm (tqdm's progress bar: Hugging Face's Trainer, "
              "Lightning), torchvision (its reference scripts: Epoch: [0]  [ 40/390]), timm (Train: 0 "
              "[  50/1251 (  4%)]) or step (step N); auto (default) = the first of these the program "
              "prints two lines of; any other text is a regular expression (Perl syntax) that each step "
              "line matches, where a named group (?<step>...) capturing the step number makes ptune "
              "count the steps between two lines (with (?<epoch>...) and (?<total>...), the steps of an "
              "epoch, the count goes on across epochs). A step number already seen is the same step"));
    t.push_back(
        between(field("program.steps_per_match", &E::program, &ProgramConfig::steps_per_match, T::kInt,
                      "steps each matching line stands for, for a program that prints every N steps and "
                      "a pattern without a step group"),
                1, 1000000000));
    t.push_back(
        between(field("program.samples_per_step", &E::program, &ProgramConfig::samples_per_step, T::kInt,
                      "samples one step of the program processes (its batch size, all ranks): the table "
                      "then prints samples/s; 0 = unknown, the table prints steps/s"),
                0, 1099511627776.0));
    t.push_back(
        between(field("program.startup_timeout_s", &E::program, &ProgramConfig::startup_timeout_s, T::kNumber,
                      "seconds the program may take to print its first matching line (and between any "
                      "two); past it the row fails, naming the pattern and the last lines printed"),
                1, 86400));
    t.push_back(between(field("train.epochs", &E::train, &TrainConfig::epochs, T::kInt,
                              "passes over the dataset (ptune train)"),
                        1, 1000000));
    t.push_back(between(field("train.max_steps", &E::train, &TrainConfig::max_steps, T::kInt,
                              "stop after this many steps in all; 0 = no limit"),
                        0, 1e12));
    t.push_back(between(field("train.checkpoint_every", &E::train, &TrainConfig::checkpoint_every, T::kInt,
                              "write a checkpoint every N steps; 0 = only at the end"),
                        0, 1e12));
    t.push_back(between(field("train.keep_checkpoints", &E::train, &TrainConfig::keep_checkpoints, T::kInt,
                              "keep the newest N checkpoints of a run and remove older ones (a checkpoint of "
                              "ResNet-50 is ~200 MB); 0 = keep all"),
                        0, 1e6));
    t.push_back(field("train.checkpoint_dir", &E::train, &TrainConfig::checkpoint_dir, T::kString,
                      "folder for checkpoints (created if missing)"));
    t.push_back(between(field("train.log_every", &E::train, &TrainConfig::log_every, T::kInt,
                              "print a progress line every N steps"),
                        1, 1e12));
    return t;
  }();
  return table;
}

const std::vector<std::string> kSections = {"model",   "data",  "loader",  "optim",  "dist",
                                            "measure", "train", "process", "program"};

const Field* find_field(const std::string& path) {
  for (const auto& f : fields())
    if (f.path == path) return &f;
  return nullptr;
}

/// The first key of `section` ("loader" -> "loader.batch_size"), for an example.
std::string field_paths_under(const std::string& section) {
  for (const auto& p : field_paths())
    if (p.rfind(section + ".", 0) == 0) return p;
  return section + ".KEY";
}

std::vector<std::string> all_paths_and_sections() {
  std::vector<std::string> out = field_paths();
  out.insert(out.end(), kSections.begin(), kSections.end());
  out.push_back("sweep");
  return out;
}

std::string config_fmt_num(double v) {
  std::ostringstream os;
  os << std::setprecision(12) << v;
  return os.str();
}

std::string show(const Json& j) {
  // A --set value need not be UTF-8 (it is the shell's bytes): show bad bytes as U+FFFD.
  std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string kind_of(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  return "an object";
}

std::string range_text(const Field& f, const std::string& what) {
  // An integer field's bounds written whole (9007199254740991, not 9.00719925474e+15).
  auto fmt_num = [&f](double v) {
    return f.type == Type::kInt ? std::to_string(static_cast<int64_t>(v)) : config_fmt_num(v);
  };
  std::string s = what;
  if (f.min && f.max) {
    s += " in " + std::string(f.min_exclusive ? "(" : "[") + fmt_num(*f.min) + ", " + fmt_num(*f.max) +
         (f.max_exclusive ? ")" : "]");
  } else if (f.min) {
    s += std::string(f.min_exclusive ? " > " : " >= ") + fmt_num(*f.min);
  }
  return s;
}

bool in_range(const Field& f, double v) {
  if (f.min && (f.min_exclusive ? v <= *f.min : v < *f.min)) return false;
  if (f.max && (f.max_exclusive ? v >= *f.max : v > *f.max)) return false;
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string or_semicolon(const std::string& suggestion) { return suggestion.empty() ? ";" : suggestion; }

bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5 || d.size() > 8) return false;
  for (size_t i = 5; i < d.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(d[i]))) return false;
  return true;
}

/// An environment variable's name as a program gets it: not empty, no '=' nor NUL. Throws
/// ConfigError prefixed with `at`.
void check_env_name(const std::string& name, const std::string& at) {
  if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos)
    throw ConfigError(at + "'" + name + "' cannot name an environment variable (not empty, no '=')");
}

/// The keys only ptune's own pipelines read, which a config with a program cannot use.
bool pipeline_only(const std::string& path) {
  for (const char* section : {"model", "data", "loader", "optim"}) {
    const std::string s = section;
    if (path == s || path.rfind(s + ".", 0) == 0) return true;
  }
  return path == "measure.mode";
}

std::string program_conflict(const std::string& where, const std::string& keys) {
  return where + ": " + keys +
         ": a config with a program (program.command) times that program, which these keys of ptune's own "
         "pipelines (model, data, loader, optim, measure.mode) do not reach; leave them out";
}

/// Throws ConfigError "<at>expected <expected>, got <v> (<its kind>)".
[[noreturn]] void type_error(const std::string& at, const Json& v, const std::string& expected) {
  throw ConfigError(at + "expected " + expected + ", got " + show(v) + " (" + kind_of(v) + ")");
}

// One checker per field type: each throws ConfigError prefixed with `at` ("<where>: <path>: ").

void check_int(const Field& f, const Json& v, const std::string& at) {
  // 32.0 is an integer, as JSON Schema (and `ptune schema`) has it; 32.5 is not.
  const bool integral_float =
      v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>();
  if (!v.is_number_integer() && !v.is_number_unsigned() && !integral_float) type_error(at, v, "an integer");
  if (!in_range(f, v.get<double>()))
    throw ConfigError(at + show(v) + " is out of range; allowed: " + range_text(f, "an integer"));
}

void check_number(const Field& f, const Json& v, const std::string& at) {
  if (!v.is_number()) type_error(at, v, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || !in_range(f, d))
    throw ConfigError(at + show(v) + " is out of range; allowed: " + range_text(f, "a number"));
}

void check_bool(const Field&, const Json& v, const std::string& at) {
  if (!v.is_boolean()) type_error(at, v, "true or false");
}

void check_string(const Field&, const Json& v, const std::string& at) {
  if (!v.is_string()) type_error(at, v, "a string");
  if (v.get<std::string>().empty()) throw ConfigError(at + "must not be empty");
}

void check_opt_string(const Field&, const Json& v, const std::string& at) {
  if (!v.is_string() && !v.is_null()) type_error(at, v, "a string or null");
  if (v.is_string() && v.get<std::string>().empty())
    throw ConfigError(at + "must not be empty (use null for none)");
}

void check_enum(const Field& f, const Json& v, const std::string& at) {
  if (!v.is_string()) type_error(at, v, "one of " + join(f.choices));
  const std::string s = v.get<std::string>();
  if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
    throw ConfigError(at + "unknown value '" + s + "'" + or_semicolon(did_you_mean(s, f.choices)) +
                      " allowed: " + join(f.choices));
}

void check_device(const Field&, const Json& v, const std::string& at) {
  if (!v.is_string()) type_error(at, v, "a device name");
  const std::string s = v.get<std::string>();
  if (!valid_device(s))
    throw ConfigError(at + "unknown device '" + s + "'" +
                      or_semicolon(did_you_mean(s, {"auto", "cpu", "cuda"})) +
                      " allowed: auto, cpu, cuda, cuda:N");
}

/// A list of strings (kStringList).
void check_string_list(const Field&, const Json& v, const std::string& at) {
  if (!v.is_array()) type_error(at, v, "a list of strings");
  for (const auto& x : v) {
    if (!x.is_string()) type_error(at, v, "a list of strings");
    if (x.get<std::string>().find('\0') != std::string::npos)
      throw ConfigError(at + show(x) + " holds a NUL byte, which no argument can");
  }
}

/// An object of strings (kStringMap, environment variables).
void check_string_map(const Field&, const Json& v, const std::string& at) {
  if (!v.is_object()) type_error(at, v, "an object of \"NAME\": \"value\" strings");
  for (auto it = v.begin(); it != v.end(); ++it) {
    check_env_name(it.key(), at);
    if (!it.value().is_string())
      throw ConfigError(at + it.key() + ": expected a string, got " + show(it.value()) + " (" +
                        kind_of(it.value()) + ")");
  }
}

void check_number_list(const Field& f, const Json& v, const std::string& at) {
  const std::string expected = "a list of " + std::to_string(f.list_len) + " numbers";
  if (!v.is_array() || v.size() != f.list_len) type_error(at, v, expected);
  for (const auto& x : v) {
    if (!x.is_number()) type_error(at, v, expected);
    if (!in_range(f, x.get<double>()))
      throw ConfigError(at + show(x) + " is out of range; allowed: " + range_text(f, "numbers"));
  }
}

/// Each field type's checker.
struct TypeCheck {
  Type type;
  void (*check)(const Field&, const Json&, const std::string&);
};
constexpr TypeCheck kTypeChecks[] = {
    {Type::kInt, check_int},
    {Type::kNumber, check_number},
    {Type::kBool, check_bool},
    {Type::kString, check_string},
    {Type::kOptString, check_opt_string},
    {Type::kEnum, check_enum},
    {Type::kDevice, check_device},
    {Type::kStringList, check_string_list},
    {Type::kStringMap, check_string_map},
    {Type::kNumberList, check_number_list},
};

/// Checks a value against its field; throws ConfigError "<where>: <path>: ...".
void check_value(const Field& f, const Json& v, const std::string& where) {
  for (const TypeCheck& c : kTypeChecks)
    if (c.type == f.type) return c.check(f, v, where + ": " + f.path + ": ");
  throw std::logic_error("check_value: no checker for the type of " + f.path + " (kTypeChecks)");
}

std::string unknown_key(const std::string& where, const std::string& path) {
  // "sweep" is a key of the config, not a setting a row (or --set) can change.
  if (path == "sweep") return where + ": 'sweep' cannot be set here; the sweep's rows are the config's own";
  return where + ": unknown key '" + path + "'" + did_you_mean(path, all_paths_and_sections());
}

/// "program.env.NAME": one variable of program.env set (a string) or removed (null).
void set_env_var(ExperimentConfig& cfg, const std::string& path, const Json& v, const std::string& where) {
  const std::string name = path.substr(std::string("program.env.").size());
  const std::string at = where + ": " + path + ": ";
  check_env_name(name, at);
  if (v.is_null()) {
    cfg.program.env.erase(name);
    return;
  }
  if (!v.is_string())
    throw ConfigError(at + "expected a string or null, got " + show(v) + " (" + kind_of(v) + ")");
  cfg.program.env[name] = v.get<std::string>();
}

void set_field(ExperimentConfig& cfg, const std::string& path, const Json& v, const std::string& where) {
  if (path.rfind("program.env.", 0) == 0) return set_env_var(cfg, path, v, where);
  if (cfg.program.enabled() && pipeline_only(path)) throw ConfigError(program_conflict(where, path));
  const Field* f = find_field(path);
  if (!f) throw ConfigError(unknown_key(where, path));
  check_value(*f, v, where);
  f->set(cfg, v);
}

void parse_sweep(ExperimentConfig& cfg, const Json& rows, const std::string& where) {
  if (!rows.is_array())
    throw ConfigError(where + ": sweep: expected a list of rows, got " + show(rows) + " (" + kind_of(rows) +
                      ")");
  cfg.sweep.clear();
  ExperimentConfig probe = cfg;  // rows are validated cumulatively, as they will run
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& r = rows[i];
    const std::string at = where + ": sweep[" + std::to_string(i) + "]";
    if (!r.is_object())
      throw ConfigError(at + ": expected an object {\"name\": ..., \"set\": {...}}, got " + show(r));
    SweepRow row;
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.key() == "name") {
        if (!it.value().is_string() || it.value().get<std::string>().empty())
          throw ConfigError(at + ".name: expected a non-empty string, got " + show(it.value()));
        row.name = it.value().get<std::string>();
        // A row's name is printed in tables and log lines: no control character (an escape
        // sequence would reach the terminal).
        if (has_control_characters(row.name))
          throw ConfigError(at + ".name: " + show(it.value()) +
                            " has a control character; a row's name is printed");
      } else if (it.key() == "set") {
        if (!it.value().is_object())
          throw ConfigError(at + ".set: expected an object of \"path\": value, got " + show(it.value()));
        row.set = it.value();
      } else {
        throw ConfigError(at + ": unknown key '" + it.key() + "'" +
                          or_semicolon(did_you_mean(it.key(), {"name", "set"})) + " allowed: name, set");
      }
    }
    if (row.name.empty()) throw ConfigError(at + ": missing \"name\"");
    apply_patch(probe, row.set, at + ".set");
    cfg.sweep.push_back(std::move(row));
  }
}

/// Walks a nested JSON object, setting each leaf; `prefix` is the dotted path so far.
void walk(ExperimentConfig& cfg, const Json& obj, const std::string& prefix, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (prefix.empty() && it.key() == "sweep") continue;  // parsed last, on the full base
    bool is_section =
        prefix.empty() && std::find(kSections.begin(), kSections.end(), it.key()) != kSections.end();
    if (is_section) {
      if (!it.value().is_object())
        throw ConfigError(where + ": " + path + ": expected an object, got " + show(it.value()) + " (" +
                          kind_of(it.value()) + ")");
      walk(cfg, it.value(), path, where);
    } else {
      set_field(cfg, path, it.value(), where);
    }
  }
}

/// The config file's text. Throws ConfigError for "-" (not read from stdin: a config is a
/// file, named again in the commands ptune prints), a folder, a file that cannot be read, and
/// a NUL byte (JSON text has none; the parser would stop there and ignore the rest);
/// Interrupted for a stop signal while a FIFO's open waits for its writer.
/// The largest config text read: far beyond any real config (a few KiB).
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

std::string read_text(const std::string& path) {
  if (path == "-")
    throw ConfigError(
        "config '-': a config is not read from stdin; name a JSON file (a pipe can be given as /dev/stdin)");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("config '" + path + "' is a folder; name a JSON file");
  std::ifstream in(path, std::ios::binary);
  // A FIFO waits for its writer; a stop signal then is the user's stop, not a bad file.
  if (!in && errno == EINTR) throw Interrupted();
  if (!in) throw ConfigError("cannot open config '" + path + "': " + std::strerror(errno));
  // Read up to the limit, not to the end: a device such as /dev/zero has none.
  std::string text;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    text.append(buf.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      throw ConfigError("config '" + path + "': larger than " + std::to_string(kMaxConfigBytes >> 20) +
                        " MiB; a config is a small JSON file");
  }
  if (in.bad()) throw ConfigError("cannot read config '" + path + "': " + std::strerror(errno));
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    const size_t line =
        1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(nul), '\n'));
    throw ConfigError(path + ": a NUL byte at offset " + std::to_string(nul) + " (line " +
                      std::to_string(line) + "); a config is JSON text, which has none");
  }
  return text;
}

}  // namespace

std::vector<std::string> field_paths() {
  std::vector<std::string> out;
  for (const auto& f : fields()) out.push_back(f.path);
  return out;
}

ExperimentConfig from_json(const Json& doc, const std::string& source) {
  if (!doc.is_object())
    throw ConfigError(source + ": expected a JSON object at the top level, got " + kind_of(doc));
  ExperimentConfig cfg;
  walk(cfg, doc, "", source);
  if (cfg.program.enabled()) {
    // Keys given before program.command in the file were read before it was.
    std::string keys;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (pipeline_only(it.key())) keys += (keys.empty() ? "" : ", ") + it.key();
      if (it.key() == "measure" && it.value().is_object() && it.value().contains("mode"))
        keys += (keys.empty() ? "" : ", ") + std::string("measure.mode");
    }
    if (!keys.empty()) throw ConfigError(program_conflict(source, keys));
  }
  if (doc.contains("sweep")) parse_sweep(cfg, doc["sweep"], source);
  return cfg;
}

namespace {

/// Deepest nesting a config may have (objects and lists): far beyond any real config, and
/// far from the recursion that a hostile file's depth would otherwise cause.
constexpr int kMaxDepth = 64;

/// Parses config JSON with the rules nlohmann's parser does not apply: nesting deeper than
/// kMaxDepth, a key given twice in one object ("last one wins" would hide a mistake) and a
/// number that overflows a double are ConfigErrors naming `source` and the key's path.
/// Malformed JSON throws nlohmann::json::parse_error as Json::parse does.
Json parse_strict(const std::string& text, const std::string& source) {
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;   // object: the key being read
    size_t index = 0;  // list: the element being read
  };
  std::vector<Frame> stack;
  auto path = [&] {
    std::string p;
    for (const Frame& f : stack) {
      if (f.object)
        p += (p.empty() ? "" : ".") + f.key;
      else
        p += "[" + std::to_string(f.index) + "]";
    }
    return p;
  };
  auto done_value = [&] {
    if (!stack.empty() && !stack.back().object) ++stack.back().index;
  };
  using Event = nlohmann::json::parse_event_t;
  auto at = [&] {  // "source: path: " or "source: "
    const std::string p = path();
    return source + ": " + (p.empty() ? "" : p + ": ");
  };
  auto callback = [&](int depth, Event event, Json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= kMaxDepth)
          throw ConfigError(at() + "nesting deeper than " + std::to_string(kMaxDepth) +
                            " levels; a config is a few levels deep");
        stack.push_back({event == Event::object_start, {}, {}, 0});
        break;
      case Event::key: {
        const std::string key = parsed.get<std::string>();
        if (!stack.back().keys.insert(key).second) {
          stack.back().key = key;
          throw ConfigError(at() + "the key appears twice in one object; keep one");
        }
        stack.back().key = key;
        break;
      }
      case Event::object_end:
      case Event::array_end:
        stack.pop_back();
        done_value();
        break;
      case Event::value:
        done_value();
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number that overflows a double, e.g. 1e309 (the message quotes it).
    std::string what = e.what();
    const size_t q = what.find('\'');
    const std::string number = q == std::string::npos ? "a number" : what.substr(q);
    throw ConfigError(at() + number + " overflows a double (largest about 1.8e308)");
  }
}
}  // namespace

ExperimentConfig load_file(const std::string& path) { return parse_text(read_text(path), path); }

ExperimentConfig parse_text(const std::string& text, const std::string& path) {
  Json doc;
  try {
    doc = parse_strict(text, path);
  } catch (const nlohmann::json::parse_error& e) {
    // Turn the byte offset into line:column for the message.
    size_t pos = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    auto p = what.find("parse error");
    auto colon = what.find(": ", p == std::string::npos ? 0 : p);
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    throw ConfigError(path + ":" + std::to_string(line) + ":" + std::to_string(col) +
                      ": malformed JSON: " + reason);
  }
  return from_json(doc, path);
}

void apply_patch(ExperimentConfig& cfg, const Json& patch, const std::string& where) {
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_object() &&
        std::find(kSections.begin(), kSections.end(), it.key()) != kSections.end()) {
      walk(cfg, Json{{it.key(), it.value()}}, "", where);  // nested form {"loader": {...}}
    } else {
      set_field(cfg, it.key(), it.value(), where);
    }
  }
}

namespace {

bool quoted(const std::string& text) { return text.size() >= 2 && text.front() == '"' && text.back() == '"'; }

/// --set program.env.NAME=TEXT: one variable, its value as the shell gives it ("null" removes
/// it, a quoted value is JSON text).
void set_env_from_shell(ExperimentConfig& cfg, const std::string& path, const std::string& text,
                        const std::string& where) {
  set_env_var(cfg, path,
              text == "null" ? Json(nullptr)
              : quoted(text) ? parse_strict(text, where)
                             : Json(text),
              "--set");
}

/// The field that --set PATH names; throws ConfigError for a path it cannot set.
const Field& settable_field(const ExperimentConfig& cfg, const std::string& path) {
  if (cfg.program.enabled() && pipeline_only(path)) throw ConfigError(program_conflict("--set", path));
  if (path == "sweep")
    throw ConfigError(
        "--set: sweep: the sweep's rows are not set from the command line; edit them in the "
        "config, or pick rows with --rows");
  if (std::find(kSections.begin(), kSections.end(), path) != kSections.end())
    throw ConfigError("--set: '" + path + "' is a section; set its keys one at a time, e.g. --set " +
                      field_paths_under(path) + "=...");
  const Field* f = find_field(path);
  if (!f) throw ConfigError("--set: unknown key '" + path + "'" + did_you_mean(path, field_paths()));
  return *f;
}

/// True when --set takes TEXT for field `f` as the string itself, not as JSON text.
bool bare_string(const Field& f, const std::string& text) {
  const bool stringy = f.type == Type::kString || f.type == Type::kEnum || f.type == Type::kDevice ||
                       f.type == Type::kOptString;
  return stringy && !(f.type == Type::kOptString && text == "null") && !quoted(text);
}

/// The value that --set PATH=TEXT gives field `f`, not yet checked against it.
Json set_value(const Field& f, const std::string& path, const std::string& text, const std::string& where) {
  if (bare_string(f, text)) {
    // JSON text is UTF-8; parsed values are, bare bytes need not be (results files hold them).
    try {
      (void)Json(text).dump();
    } catch (const nlohmann::json::type_error&) {
      throw ConfigError("--set: " + path + ": the value is not valid UTF-8 text");
    }
    return text;
  }
  try {
    return parse_strict(text, where);
  } catch (const nlohmann::json::parse_error&) {
    return text;  // the typed check reports "expected an integer, got "abc" (a string)"
  }
}

}  // namespace

void apply_set(ExperimentConfig& cfg, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + assignment + "': expected PATH=VALUE, e.g. loader.batch_size=256");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const std::string where = "--set " + assignment;
  if (path.rfind("program.env.", 0) == 0) return set_env_from_shell(cfg, path, text, where);
  const Field& f = settable_field(cfg, path);
  const Json v = set_value(f, path, text, where);
  check_value(f, v, "--set");
  f.set(cfg, v);
}

Json to_json(const ExperimentConfig& cfg) {
  Json out = Json::object();
  for (const auto& f : fields()) {
    if (cfg.program.enabled() && pipeline_only(f.path)) continue;  // keys the program's config cannot have
    auto dot = f.path.find('.');
    if (dot == std::string::npos) {
      out[f.path] = f.get(cfg);
    } else {
      out[f.path.substr(0, dot)][f.path.substr(dot + 1)] = f.get(cfg);
    }
  }
  Json rows = Json::array();
  for (const auto& r : cfg.sweep) rows.push_back(Json{{"name", r.name}, {"set", r.set}});
  out["sweep"] = rows;
  return out;
}

namespace {

/// Where `name` (program.command's first word) runs from: itself where it holds a '/' (from
/// `cwd`), else the first executable file of that name on `path` (PATH), as execvp finds it. ""
/// when there is none.
std::string find_program(const std::string& name, const std::string& cwd, const std::string& path) {
  namespace fs = std::filesystem;
  auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    const fs::path p = name.front() == '/' || cwd.empty() ? fs::path(name) : fs::path(cwd) / name;
    return runnable(p) ? p.string() : "";
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const fs::path p = fs::path(dir) / name;
    if (runnable(p)) return p.string();
    start = colon + 1;
  }
  return "";
}

/// The PATH the program's exec searches: program.env's, else ptune's own.
std::string search_path(const ProgramConfig& p) {
  const auto env_path = p.env.find("PATH");
  const char* own_path = std::getenv("PATH");
  return env_path != p.env.end() ? env_path->second : own_path ? own_path : "/usr/bin:/bin";
}

void validate_program(const ProgramConfig& p, const std::string& at) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (p.cwd && !fs::is_directory(*p.cwd, ec))
    throw ConfigError(at + "program.cwd: '" + *p.cwd + "' is not a folder");
  const std::string& name = p.command.front();
  if (name.empty()) throw ConfigError(at + "program.command: its first word (the program) is empty");
  const std::string path = search_path(p);
  if (find_program(name, p.cwd.value_or(""), path).empty())
    throw ConfigError(at + "program.command: '" + name + "' " +
                      (name.find('/') != std::string::npos ? "is not an executable file"
                                                           : "is not found on PATH (" + path + ")") +
                      (p.cwd ? " (program.cwd '" + *p.cwd + "')" : ""));
  if (p.step_pattern == kDetectStepLogger || find_step_logger(p.step_pattern)) return;
  try {
    StepPattern pattern(p.step_pattern);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(at + "program.step_pattern: '" + p.step_pattern + "' is neither a logger's name (" +
                      step_logger_names() + ") nor a regular expression: " + e.what());
  }
}

}  // namespace

std::string resolve_program(const ProgramConfig& p) {
  return find_program(p.command.at(0), p.cwd.value_or(""), search_path(p));
}

namespace {

/// The keys that need another key's value, or work only with some values of another.
void validate_combinations(const ExperimentConfig& cfg, const std::string& at) {
  if (cfg.data.kind == DataKind::kImageFolder && !cfg.data.root)
    throw ConfigError(at + "data.root: required when data.kind is image_folder");
  if (cfg.loader.gpu_resize && cfg.data.kind != DataKind::kFakeCifar)
    throw ConfigError(at + "loader.gpu_resize: works with data.kind fake_cifar only, not '" +
                      name(cfg.data.kind) + "'");
  if (cfg.optim.cuda_graphs && cfg.optim.kind != OptimKind::kSgd)
    throw ConfigError(at + "optim.cuda_graphs: works with optim.kind sgd, not '" + name(cfg.optim.kind) +
                      "' (LibTorch's AdamW counts its steps on the host, which a replayed graph cannot)");
  if (cfg.measure.max_processes < cfg.measure.processes)
    throw ConfigError(at + "measure.max_processes: " + std::to_string(cfg.measure.max_processes) +
                      " is fewer than measure.processes (" + std::to_string(cfg.measure.processes) +
                      "); allowed: at least measure.processes");
  if (cfg.optim.cuda_graphs && cfg.dist.accumulate > 1)
    throw ConfigError(at +
                      "optim.cuda_graphs: needs dist.accumulate 1 (the captured step updates every time)");
}

/// The name becomes file names (checkpoints, traces): it must stay inside their folders.
void validate_name(const std::string& name, const std::string& at) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      has_control_characters(name))
    throw ConfigError(
        at + "name: '" + name +
        "' cannot name files inside a folder; use letters, digits, '-', '_' or '.' (no '/', no control "
        "character, not '..')");
}

/// The program keys given besides program.command ("program.args, program.env"), "" for none.
std::string program_keys_set(const ProgramConfig& p) {
  const ProgramConfig none;
  std::string set;
  auto given = [&](bool differs, const char* key) {
    if (differs) set += (set.empty() ? "" : ", ") + std::string(key);
  };
  given(!p.args.empty(), "program.args");
  given(!p.env.empty(), "program.env");
  given(p.cwd.has_value(), "program.cwd");
  given(p.step_pattern != none.step_pattern, "program.step_pattern");
  given(p.steps_per_match != none.steps_per_match, "program.steps_per_match");
  given(p.samples_per_step != none.samples_per_step, "program.samples_per_step");
  given(p.startup_timeout_s != none.startup_timeout_s, "program.startup_timeout_s");
  return set;
}

/// With no program, neither in the config nor in a sweep row, the other program keys would be
/// ignored: say so.
void validate_no_program(const ExperimentConfig& cfg, const std::string& at) {
  // A sweep row that names the program: its rows are checked as resolved.
  const bool rows_name_one =
      std::any_of(cfg.sweep.begin(), cfg.sweep.end(), [](const SweepRow& r) { return r.names_program(); });
  if (cfg.program.enabled() || rows_name_one) return;
  const std::string set = program_keys_set(cfg.program);
  if (!set.empty())
    throw ConfigError(at + "program.command: empty (no program: ptune's own pipelines run), while " + set +
                      (set.find(',') == std::string::npos ? " is" : " are") +
                      " set; name the program's command, e.g. [\"python3\", \"train.py\"]");
}

}  // namespace

void validate(const ExperimentConfig& cfg, const std::string& where) {
  const std::string at = where.empty() ? "" : where + ": ";
  validate_combinations(cfg, at);
  validate_name(cfg.name, at);
  if (const std::string why = image_size_problem(cfg.model.arch, cfg.data.image_size); !why.empty())
    throw ConfigError(at + "data.image_size: " + std::to_string(cfg.data.image_size) +
                      " does not fit model.arch " + cfg.model.arch + ": " + why);
  if (cfg.program.enabled()) validate_program(cfg.program, at);
  validate_no_program(cfg, at);
  if (cfg.model.weights) {
    std::error_code ec;
    if (!std::filesystem::exists(*cfg.model.weights, ec))
      throw ConfigError(at + "model.weights: '" + *cfg.model.weights + "' does not exist");
  }
}

std::vector<std::pair<SweepRow, ExperimentConfig>> expand_sweep(const ExperimentConfig& base) {
  std::vector<std::pair<SweepRow, ExperimentConfig>> out;
  ExperimentConfig cur = base;
  cur.sweep.clear();
  if (base.sweep.empty()) {
    validate(cur, "");
    out.emplace_back(SweepRow{"config", Json::object()}, cur);
    return out;
  }
  for (size_t i = 0; i < base.sweep.size(); ++i) {
    apply_patch(cur, base.sweep[i].set, "sweep[" + std::to_string(i) + "].set");
    validate(cur, "sweep[" + std::to_string(i) + "] '" + base.sweep[i].name + "'");
    out.emplace_back(base.sweep[i], cur);
  }
  return out;
}

Json schema() {
  ExperimentConfig defaults;
  Json props = Json::object();
  for (const auto& f : fields()) {
    Json s = Json::object();
    switch (f.type) {
      case Type::kInt:
        s["type"] = "integer";
        break;
      case Type::kNumber:
        s["type"] = "number";
        break;
      case Type::kBool:
        s["type"] = "boolean";
        break;
      case Type::kString:
        s["type"] = "string";
        s["minLength"] = 1;
        break;
      case Type::kOptString:
        s["type"] = Json::array({"string", "null"});
        break;
      case Type::kEnum:
        s["type"] = "string";
        s["enum"] = f.choices;
        break;
      case Type::kDevice:
        s["type"] = "string";
        s["pattern"] = "^(auto|cpu|cuda|cuda:[0-9]{1,3})$";
        break;
      case Type::kStringList:
        s["type"] = "array";
        s["items"] = Json{{"type", "string"}};
        break;
      case Type::kStringMap:
        s["type"] = "object";
        s["additionalProperties"] = Json{{"type", "string"}};
        break;
      case Type::kNumberList:
        s["type"] = "array";
        s["minItems"] = f.list_len;
        s["maxItems"] = f.list_len;
        s["items"] = Json{{"type", "number"}};
        break;
    }
    Json& bounds = f.type == Type::kNumberList ? s["items"] : s;
    // An integer field's bounds as integers (JSON Schema compares either way; a reader sees 1, not 1.0).
    auto bound = [&](double b) { return f.type == Type::kInt ? Json(static_cast<int64_t>(b)) : Json(b); };
    if (f.min) bounds[f.min_exclusive ? "exclusiveMinimum" : "minimum"] = bound(*f.min);
    if (f.max) bounds[f.max_exclusive ? "exclusiveMaximum" : "maximum"] = bound(*f.max);
    s["default"] = f.get(defaults);
    s["description"] = f.help;
    auto dot = f.path.find('.');
    if (dot == std::string::npos) {
      props[f.path] = s;
    } else {
      Json& sec = props[f.path.substr(0, dot)];
      if (sec.is_null())
        sec = Json{{"type", "object"}, {"additionalProperties", false}, {"properties", Json::object()}};
      sec["properties"][f.path.substr(dot + 1)] = s;
    }
  }
  props["sweep"] = Json{
      {"type", "array"},
      {"description", "rows of `ptune sweep`; each row adds its overrides to all rows before it"},
      {"items",
       Json{{"type", "object"},
            {"additionalProperties", false},
            {"required", Json::array({"name"})},
            {"properties",
             Json{{"name", Json{{"type", "string"}, {"minLength", 1}, {"description", "label of the row"}}},
                  {"set", Json{{"type", "object"},
                               {"description", "overrides \"section.key\": value, cumulative"}}}}}}}};
  return Json{{"$schema", "https://json-schema.org/draft/2020-12/schema"},
              {"title", "ptune experiment"},
              {"type", "object"},
              {"additionalProperties", false},
              {"properties", props}};
}

}  // namespace ptune::config
