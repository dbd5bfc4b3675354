// The trainer: each optimization does what it says, and CUDA-only options fail clearly on CPU.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <limits>

#include <torch/torch.h>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "engine/feeder.hpp"
#include "engine/run.hpp"
#include "engine/sgd.hpp"
#include "engine/trainer.hpp"
#include "core/errors.hpp"
#include "measure/diagnosis.hpp"
#include "bench/bench.hpp"
#include "bench/convergence.hpp"
#include "bench/profile.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/schedule.hpp"
#include "measure/side.hpp"
#include "tune/sides.hpp"
#include "test_util.hpp"
#include "runtime/torch_error.hpp"

using ptune::config::ExperimentConfig;
using ptune::engine::Trainer;

namespace {

ExperimentConfig tiny() {
  ExperimentConfig cfg;
  cfg.device = "cpu";
  cfg.cpu_threads = 2;
  cfg.data.num_samples = 32;
  cfg.data.image_size = 32;
  cfg.loader.batch_size = 4;
  cfg.optim.lr = 0.05;
  cfg.measure.warmup_steps = 1;
  cfg.measure.steps = 2;
  cfg.measure.max_s =
      3;  // a row's whole time, warm-up included: room for its first windows even on a busy machine
  return cfg;
}

ptune::data::Batch first_batch(const ExperimentConfig& cfg) {
  ptune::data::Loader loader(ptune::engine::make_dataset(cfg),
                             ptune::engine::loader_options(cfg, c10::Device(c10::kCPU)));
  loader.start_epoch(0);
  auto b = loader.next();
  return {b->images.clone(), b->labels.clone(), 0};
}

/// Trains `steps` steps on the first batch and returns the flattened parameters.
at::Tensor train_params(const ExperimentConfig& cfg, int steps, double* last_loss = nullptr) {
  Trainer t(cfg, c10::Device(c10::kCPU));
  auto batch = first_batch(cfg);
  at::Tensor loss;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = t.to_device(batch);
    loss = t.step(x, y);
  }
  if (last_loss) *last_loss = loss.item<double>();
  std::vector<at::Tensor> flat;
  for (auto& p : t.model()->parameters()) flat.push_back(p.detach().flatten());
  return torch::cat(flat);
}

}  // namespace

namespace {

/// cpuinfo's features of three CPUs: an AVX2-only EPYC (Zen 3), a Zen 4 EPYC (AVX-512 with
/// BF16, no AMX) and a Sapphire Rapids Xeon (AMX).
std::map<std::string, bool> cpu_flags(const std::string& which) {
  std::map<std::string, bool> f;
  for (const char* x : {"sse4_1", "avx", "avx2", "fma3"}) f[x] = true;
  if (which == "zen3") return f;
  for (const char* x : {"avx512_f", "avx512_bw", "avx512_vl", "avx512_dq", "avx512_vnni", "avx512_bf16"})
    f[x] = true;
  if (which == "zen4") return f;
  for (const char* x : {"avx_vnni", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"}) f[x] = true;
  return f;
}

}  // namespace

TEST_CASE("cpu_info: oneDNN's and ATen's instruction sets under their caps", "[engine][cpu]") {
  using ptune::system::aten_isa;
  using ptune::system::onednn_isa;
  CHECK(onednn_isa(cpu_flags("zen3"), "") == "avx2");
  CHECK(onednn_isa(cpu_flags("zen4"), "") == "avx512_core_bf16");
  CHECK(onednn_isa(cpu_flags("spr"), "") == "avx10_1_512_amx");
  CHECK(onednn_isa(cpu_flags("zen4"), "AVX2") == "avx2");
  CHECK(onednn_isa(cpu_flags("zen4"), "avx2") == "avx2");  // oneDNN reads the name in any case
  CHECK(onednn_isa(cpu_flags("zen4"), "AVX512_CORE") == "avx512_core");
  CHECK(onednn_isa(cpu_flags("zen4"), "AVX2_VNNI") == "avx2");  // the cap allows what Zen 4 lacks
  CHECK(onednn_isa(cpu_flags("spr"), "AVX512_CORE_AMX") == "avx10_1_512_amx");
  CHECK(onednn_isa(cpu_flags("spr"), "avx512_core_bf16") == "avx512_core_bf16");
  CHECK(onednn_isa(cpu_flags("zen4"), "ALL") == "avx512_core_bf16");
  CHECK(onednn_isa(cpu_flags("zen4"), "no_such_isa") == "avx512_core_bf16");  // ignored, as oneDNN does
  CHECK(onednn_isa({}, "") == "");
  CHECK(aten_isa(cpu_flags("zen3"), "") == "AVX2");
  CHECK(aten_isa(cpu_flags("zen4"), "") == "AVX512");
  CHECK(aten_isa(cpu_flags("zen4"), "avx2") == "AVX2");
  CHECK(aten_isa(cpu_flags("zen4"), "default") == "DEFAULT");
  CHECK(aten_isa(cpu_flags("zen4"), "AVX2") == "AVX512");  // ATen takes only its lowercase names
}

TEST_CASE("cpu_info: bf16 is native only where oneDNN may use it, and the verdict says so", "[engine][cpu]") {
  ptune::system::CpuFacts f;
  f.model = "AMD EPYC";
  f.arch = "x86_64";
  f.physical_cores = 2;
  f.logical_cores = 4;
  f.flags = cpu_flags("zen4");
  auto cpu = ptune::system::describe_cpu(f);
  CHECK(cpu.bf16_native);
  CHECK_FALSE(cpu.amx);
  CHECK(ptune::system::summary(cpu) ==
        "ATen AVX512, oneDNN avx512_core_bf16, bf16 native (avx512_bf16), 2 cores, 4 threads");
  f.aten_cap = "avx2";
  f.onednn_cap = "AVX2";
  cpu = ptune::system::describe_cpu(f);
  CHECK_FALSE(cpu.bf16_native);
  CHECK(cpu.caps == std::vector<std::string>{"ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2"});
  CHECK(ptune::system::summary(cpu) ==
        "ATen AVX2, oneDNN avx2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2), bf16 not native "
        "(capped), 2 cores, 4 threads");
  ptune::measure::Measurement m;
  m.split = ptune::measure::Measurement::StepSplit{0, 0, 94};
  auto cfg = tiny();
  CHECK(ptune::measure::diagnose(m, cfg, {}, {}, cpu) ==
        "compute-bound (94% in forward/backward/update) on fp32: ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN from "
        "this CPU's avx512_bf16, so optim.amp is not advised; try model.channels_last");
  // AVX-512 without BF16 instructions: oneDNN emulates bf16, which is not native.
  f.onednn_cap = "AVX512_CORE";
  CHECK_FALSE(ptune::system::describe_cpu(f).bf16_native);
  f.onednn_cap.clear();
  f.flags = cpu_flags("zen3");
  cpu = ptune::system::describe_cpu(f);
  CHECK_FALSE(cpu.bf16_native);
  CHECK(ptune::measure::diagnose(m, cfg, {}, {}, cpu) ==
        "compute-bound (94% in forward/backward/update) on fp32: this CPU has no native bf16 arithmetic (no "
        "AVX512-BF16 or AMX), so optim.amp is not advised; try model.channels_last");
  f.flags = cpu_flags("spr");
  cpu = ptune::system::describe_cpu(f);
  CHECK((cpu.bf16_native && cpu.amx && cpu.fp16_native));
  CHECK(
      ptune::measure::diagnose(m, cfg, {}, {}, cpu) ==
      "compute-bound (94% in forward/backward/update) on fp32: optim.amp bf16 with model.channels_last (this "
      "CPU's amx_bf16 pays off with channels_last tensors and enough work per call; at small images or "
      "batches "
      "bf16 can be slower than fp32 (this row: 32x32, batch 4): measure it)");
  // With channels_last on, bf16 alone; a bf16 row without channels_last is told to turn it on.
  cfg.model.channels_last = true;
  CHECK(
      ptune::measure::diagnose(m, cfg, {}, {}, cpu) ==
      "compute-bound (94% in forward/backward/update) on fp32: optim.amp bf16 (this CPU's amx_bf16 pays off "
      "with channels_last tensors and enough work per call; at small images or batches bf16 "
      "can be slower than fp32 (this row: 32x32, batch 4): measure it)");
  cfg.model.channels_last = false;
  cfg.optim.amp = ptune::config::Amp::kBf16;
  CHECK(ptune::measure::diagnose(m, cfg, {}, {}, cpu) ==
        "compute-bound (94% in forward/backward/update): try model.channels_last (oneDNN's bf16 kernels on "
        "this "
        "CPU's amx_bf16 want channels_last tensors; without it each convolution reorders them)");
  // bf16 measured slower by a row of the sweep: not advised again; what was measured instead.
  cfg.optim.amp = ptune::config::Amp::kOff;
  const std::vector<ptune::measure::Tried> slower = {
      {"optim.amp", "bf16", 7, "bf16 autocast", "slower", 0.92}};
  CHECK(ptune::measure::diagnose(m, cfg, slower, {}, cpu) ==
        "compute-bound (94% in forward/backward/update) on fp32: optim.amp measured slower here (row 7 'bf16 "
        "autocast', 0.92x); try model.channels_last");
  f.onednn_bf16 = false;  // oneDNN's own answer has the last word
  CHECK_FALSE(ptune::system::describe_cpu(f).bf16_native);
}

TEST_CASE("cpu_info: this machine as LibTorch sees it, under the caps in the environment", "[engine][cpu]") {
  // Depends on the CPU and on ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA (the suite runs twice,
  // the second time under the AVX2 cap): each figure is checked against LibTorch's own answer.
  const auto& cpu = ptune::runtime::cpu_info();
  INFO(ptune::system::summary(cpu));
  CHECK(cpu.aten_isa == at::get_cpu_capability());
  CHECK(cpu.logical_cores >= 1);
  CHECK(cpu.physical_cores >= 1);
  CHECK(cpu.physical_cores <= cpu.logical_cores);
  auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
  REQUIRE(op);
  const bool onednn_bf16 = op->typed<bool()>().call();
  if (cpu.arch == "x86_64") {
    // oneDNN has bf16 kernels (native or emulated) from avx512_core or avx2_vnni_2 up: the
    // instruction set worked out here predicts oneDNN's own answer, cap or no cap.
    const auto& isas = ptune::system::onednn_isas();
    const auto at = std::find(isas.begin(), isas.end(), cpu.onednn_isa) - isas.begin();
    const auto first = std::find(isas.begin(), isas.end(), "avx2_vnni_2") - isas.begin();
    CHECK((at >= first) == onednn_bf16);
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (cap && std::string(cap) == "AVX2") {
      CHECK(cpu.onednn_isa == "avx2");
      CHECK_FALSE(cpu.bf16_native);
    }
  }
  if (cpu.bf16_native) CHECK(onednn_bf16);
}

TEST_CASE("training steps lower the loss on a fixed batch", "[engine]") {
  auto cfg = tiny();
  Trainer t(cfg, c10::Device(c10::kCPU));
  auto batch = first_batch(cfg);
  auto [x, y] = t.to_device(batch);
  double first = t.step(x, y).item<double>(), last = first;
  for (int i = 0; i < 8; ++i) last = t.step(x, y).item<double>();
  CHECK(last < first * 0.5);
}

TEST_CASE("models start identical from the seed, set_to_none does not change training", "[engine]") {
  auto cfg = tiny();
  auto a = train_params(cfg, 3);
  cfg.optim.set_to_none = true;
  auto b = train_params(cfg, 3);
  CHECK(a.equal(b));
  cfg.optim.kind = ptune::config::OptimKind::kAdamW;
  auto c = train_params(cfg, 2);
  CHECK(!a.equal(c));
}

TEST_CASE("uint8 transfer and normalization on the device equal the host's float path", "[engine]") {
  auto cfg = tiny();
  Trainer t(cfg, c10::Device(c10::kCPU));
  auto f = t.to_device(first_batch(cfg)).first;
  cfg.loader.uint8_transfer = true;
  auto u8 = first_batch(cfg);
  CHECK(u8.images.scalar_type() == at::kByte);
  auto g = t.to_device(u8).first;
  CHECK(g.scalar_type() == at::kFloat);
  // On the CPU the loader's own normalization: the same floats, bit for bit.
  CHECK(f.equal(g));
  // In channels_last the same values, written straight in that layout; and the next batch
  // reuses the buffer of one that nothing refers to any more.
  cfg.model.channels_last = true;
  Trainer cl(cfg, c10::Device(c10::kCPU));
  const void* first = nullptr;
  {
    auto h = cl.to_device(u8).first;
    CHECK(h.is_contiguous(at::MemoryFormat::ChannelsLast));
    CHECK(h.equal(f));
    first = h.data_ptr();
  }
  auto again = cl.to_device(u8).first;
  CHECK(again.data_ptr() == first);
  auto held = cl.to_device(u8).first;  // `again` still holds the first buffer
  CHECK(held.data_ptr() != first);
}

TEST_CASE("gpu_resize ships 32x32 originals and resizes on the device like the host", "[engine]") {
  auto cfg = tiny();
  cfg.data.image_size = 64;
  Trainer t(cfg, c10::Device(c10::kCPU));
  auto host = t.to_device(first_batch(cfg)).first;
  cfg.loader.gpu_resize = true;
  auto raw = first_batch(cfg);
  CHECK(raw.images.sizes() == at::IntArrayRef({4, 3, 32, 32}));
  auto dev = t.to_device(raw).first;
  REQUIRE(dev.sizes() == host.sizes());
  // The host rounds the resized image to uint8; the device does not: <= half a level apart.
  CHECK((dev - host).abs().max().item<double>() <= 0.5 / (255 * 0.5) + 1e-5);
}

TEST_CASE("channels_last changes the layout of the weights and the batch", "[engine]") {
  // Its numerics, the first step's loss against PyTorch's channels_last run of the same weights
  // and batch on this CPU, are checked per arch in zoo_test.cpp ("zoo: resnet18 equals
  // torchvision"): the NHWC kernels sum in another order on each kind of CPU.
  auto cfg = tiny();
  cfg.model.channels_last = true;
  Trainer t(cfg, c10::Device(c10::kCPU));
  CHECK(t.model()->named_parameters()["conv1.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
  auto x = t.to_device(first_batch(cfg)).first;
  CHECK(x.is_contiguous(at::MemoryFormat::ChannelsLast));
  double cl = 0;
  train_params(cfg, 1, &cl);
  CHECK(std::isfinite(cl));
}

TEST_CASE("bf16 autocast on the CPU runs the step in bfloat16", "[engine]") {
  // How close its loss lies to fp32's depends on the CPU (AVX2 emulation, AVX512-BF16 and AMX
  // round and accumulate bf16 differently): zoo_test.cpp checks it against PyTorch's own bf16
  // autocast on the same weights and batch on this CPU ("zoo: resnet18 equals torchvision").
  auto cfg = tiny();
  double fp32 = 0, bf16 = 0;
  auto a = train_params(cfg, 1, &fp32);
  cfg.optim.amp = ptune::config::Amp::kBf16;
  auto b = train_params(cfg, 1, &bf16);
  CHECK(!a.equal(b));  // autocast really ran in bfloat16
  CHECK(bf16 != fp32);
  CHECK(std::isfinite(bf16));
}

TEST_CASE("LibTorch's errors become one line: the message without backtrace or advice lines", "[engine]") {
  // A real error from an operator: its message is one line; what() carries more (the place it
  // was raised, the backtrace).
  try {
    (void)torch::ones({2, 3}).view({7});
    FAIL("view did not throw");
  } catch (const c10::Error& e) {
    CHECK(std::string(e.what()).find('\n') != std::string::npos);
    CHECK(ptune::runtime::torch_error_line(e) == "shape '[7]' is invalid for input of size 6");
  }
  // A message of several lines (as CUDA's, with advice under it): the first, and where the rest is.
  try {
    TORCH_CHECK(false,
                "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                "asynchronously reported at some other API call.\n");
    FAIL("TORCH_CHECK did not throw");
  } catch (const c10::Error& e) {
    CHECK(ptune::runtime::torch_error_line(e) ==
          "CUDA error: an illegal memory access was encountered (--verbose for LibTorch's whole message)");
  }
  // Only blank lines after the first: nothing is left out, nothing is said.
  try {
    TORCH_CHECK(false, "bad value\n\n");
    FAIL("TORCH_CHECK did not throw");
  } catch (const c10::Error& e) {
    CHECK(ptune::runtime::torch_error_line(e) == "bad value");
  }
}

TEST_CASE("CUDA-only options are clear errors without a GPU", "[engine]") {
  auto cfg = tiny();
  cfg.loader.pin_memory = true;
  CHECK_THROWS_WITH(Trainer(cfg, c10::Device(c10::kCPU)),
                    Catch::StartsWith("loader.pin_memory needs a CUDA device; "));
  cfg.loader.pin_memory = false;
  cfg.optim.cudnn_benchmark = true;
  CHECK_THROWS_WITH(Trainer(cfg, c10::Device(c10::kCPU)),
                    Catch::StartsWith("optim.cudnn_benchmark needs a CUDA device; "));
  cfg.optim.cudnn_benchmark = false;
  cfg.optim.amp = ptune::config::Amp::kFp16;
  CHECK_THROWS_WITH(Trainer(cfg, c10::Device(c10::kCPU)),
                    Catch::StartsWith("optim.amp=fp16 needs a CUDA device; "));
  cfg.optim.amp = ptune::config::Amp::kOff;
  cfg.optim.cuda_graphs = true;
  CHECK_THROWS_WITH(Trainer(cfg, c10::Device(c10::kCPU)),
                    Catch::StartsWith("optim.cuda_graphs needs a CUDA device; "));
  if (!torch::cuda::is_available()) {
    CHECK_THROWS_WITH(ptune::runtime::resolve_device("cuda"),
                      "device: 'cuda' needs a CUDA device; none is visible (use \"cpu\" or \"auto\")");
    CHECK(ptune::runtime::resolve_device("auto").is_cpu());
  }
}

TEST_CASE("measure: modes, warm-up excluded, loss reported", "[engine][measure]") {
  auto cfg = tiny();
  cfg.measure.repeats = 3;
  std::vector<std::string> phases;
  auto m = ptune::tune::measure_row(cfg, [&](const std::string& p, int64_t s, int64_t of) {
    if (s == of) phases.push_back(p);
  });
  // Warm-up once, then timed windows: at least `repeats`, more while the interval is wide.
  REQUIRE(phases.size() >= 2);
  CHECK(phases.front() == "warmup");
  CHECK(std::count(phases.begin(), phases.end(), "measure") == static_cast<long>(phases.size() - 1));
  CHECK(m.repeat_ms.size() >= 3);
  // Progress is complete from the third window on; windows left out as the start-up transient
  // were timed (and reported progress) too.
  CHECK(m.repeat_ms.size() + static_cast<size_t>(m.transient_windows) == phases.size() + 1);
  CHECK(m.ms_per_step > 0);
  CHECK(m.samples_per_s == Approx(1000.0 * 4 / m.ms_per_step));
  REQUIRE(m.loss);
  REQUIRE(m.split);
  CHECK(m.split->data_wait_pct + m.split->h2d_pct + m.split->compute_pct == Approx(100.0));
  cfg.measure.mode = ptune::config::Mode::kData;
  auto d = ptune::tune::measure_row(cfg);
  CHECK(!d.loss);
  // No training step: the wait for the loader's batches is the largest share of the step (its
  // windows last microseconds, so one preempted conversion moves the shares by percents: no
  // fixed floor; 89.8% in one suite run on this 2-core machine, 97-100% alone).
  REQUIRE(d.split);
  CHECK(d.split->data_wait_pct + d.split->h2d_pct + d.split->compute_pct == Approx(100.0));
  CHECK(d.split->data_wait_pct > d.split->h2d_pct);
  CHECK(d.split->data_wait_pct > d.split->compute_pct);
  cfg.measure.mode = ptune::config::Mode::kSynthetic;
  auto s = ptune::tune::measure_row(cfg);
  REQUIRE(s.split);
  CHECK(s.split->data_wait_pct == 0);
  cfg.loader.batch_size = 64;
  cfg.measure.mode = ptune::config::Mode::kTrain;
  CHECK_THROWS_WITH(ptune::tune::measure_row(cfg),
                    "loader.batch_size: 64 is larger than the dataset's 32 samples with drop_last; lower it "
                    "or raise data.num_samples");
}

TEST_CASE("feeder: the batch is pulled, its copy queued, then the ready mark, then the device wait",
          "[engine]") {
  // A fake copier logs the order; the CUDA copier runs the same Feeder::next. Nothing may
  // block on the loader between the ready mark and the wait (that time would count as copy).
  std::vector<std::string> log;
  struct FakeCopy : ptune::engine::DeviceCopy {
    std::vector<std::string>* log;
    explicit FakeCopy(std::vector<std::string>* l) : log(l) {}
    ptune::data::Batch start(const ptune::data::Batch& host) override {
      log->push_back("copy " + std::to_string(host.index));
      return host;
    }
    void finish(ptune::data::Batch& b) override { log->push_back("wait " + std::to_string(b.index)); }
  };
  int64_t n = 0;
  ptune::engine::Feeder feeder(
      [&]() -> std::optional<ptune::data::Batch> {
        if (n == 2) return std::nullopt;
        log.push_back("pull " + std::to_string(n));
        return ptune::data::Batch{torch::zeros({1}), torch::zeros({1}), n++};
      },
      std::make_unique<FakeCopy>(&log));
  double waited = -1;
  while (auto b = feeder.next(&waited, [&] { log.push_back("ready"); })) {
    log.push_back("step " + std::to_string(b->index));
    CHECK(waited >= 0);
  }
  CHECK(log == std::vector<std::string>{"pull 0", "copy 0", "ready", "wait 0", "step 0", "pull 1", "copy 1",
                                        "ready", "wait 1", "step 1"});
}

TEST_CASE("warm-up: raised to what CUDA graphs and cuDNN autotuning need, with a note", "[engine][measure]") {
  auto cfg = tiny();
  cfg.measure.warmup_steps = 2;
  std::string note;
  CHECK(ptune::bench::warmup_steps(cfg, &note) == 2);
  CHECK(note.empty());
  cfg.optim.cuda_graphs = true;
  CHECK(ptune::bench::warmup_steps(cfg, &note) == 4);
  CHECK(note ==
        "measure.warmup_steps raised from 2 to 4: optim.cuda_graphs runs 3 eager steps and captures the "
        "graph in the next, which must not be timed");
  cfg.measure.warmup_steps = 4;
  note.clear();
  CHECK(ptune::bench::warmup_steps(cfg, &note) == 4);
  CHECK(note.empty());
  cfg.optim.cuda_graphs = false;
  cfg.optim.cudnn_benchmark = true;
  cfg.measure.warmup_steps = 0;
  CHECK(ptune::bench::warmup_steps(cfg, &note) == 1);
  CHECK(note ==
        "measure.warmup_steps raised from 0 to 1: optim.cudnn_benchmark autotunes in the first step, which "
        "must not be timed");
  cfg.measure.mode = ptune::config::Mode::kData;  // no model: nothing to warm up for
  CHECK(ptune::bench::warmup_steps(cfg) == 0);
}

TEST_CASE("fused SGD equals torch.optim.SGD's step, found_inf skips it bit for bit", "[engine]") {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case c =
      std::array<Case, 4>{Case{0.0, 0.0, 0.0, false}, Case{0.9, 0.0, 0.0, false}, Case{0.9, 0.0, 1e-4, false},
                          Case{0.9, 0.0, 5e-4, true}}[GENERATE(0, 1, 2, 3)];
  INFO("momentum " << c.momentum << " weight_decay " << c.weight_decay << " nesterov " << c.nesterov);
  torch::manual_seed(3);
  std::vector<at::Tensor> init = {torch::randn({64, 3, 3, 3}), torch::randn({64}), torch::randn({10, 64})};
  auto make = [&] {
    std::vector<at::Tensor> ps;
    for (auto& t : init) ps.push_back(t.clone().requires_grad_(true));
    return ps;
  };
  auto ref_params = make(), fused_params = make();
  const auto options = torch::optim::SGDOptions(0.05)
                           .momentum(c.momentum)
                           .dampening(c.dampening)
                           .weight_decay(c.weight_decay)
                           .nesterov(c.nesterov);
  torch::optim::SGD ref(ref_params, options), fused(fused_params, options);
  auto momentum = [](torch::optim::SGD& opt, const at::Tensor& p) {
    auto& st = opt.state();
    auto it = st.find(p.unsafeGetTensorImpl());
    return it == st.end() ? at::Tensor()
                          : static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
  };
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    const bool poisoned = step == 0 || step == 3;  // an inf first step, and one later
    std::vector<at::Tensor> grads;
    for (auto& t : init) grads.push_back(torch::randn_like(t));
    for (size_t i = 0; i < init.size(); ++i) {
      ref_params[i].mutable_grad() = grads[i].clone();
      fused_params[i].mutable_grad() = grads[i].clone();
    }
    if (poisoned) fused_params[1].mutable_grad()[5] = std::numeric_limits<float>::infinity();
    std::vector<at::Tensor> before, buf_before;
    for (auto& p : fused_params) {
      before.push_back(p.detach().clone());
      auto b = momentum(fused, p);
      buf_before.push_back(b.defined() ? b.clone() : b);
    }
    ptune::engine::fused_sgd_step(fused, torch::tensor(poisoned ? 1.0f : 0.0f));
    if (poisoned) {  // PyTorch's GradScaler skips the step: the reference does not step
      for (size_t i = 0; i < init.size(); ++i) {
        CHECK(torch::equal(fused_params[i].detach(), before[i]));
        auto b = momentum(fused, fused_params[i]);
        if (c.momentum != 0)
          CHECK(torch::equal(b, buf_before[i].defined() ? buf_before[i] : torch::zeros_like(b)));
      }
      continue;
    }
    ref.step();
    for (size_t i = 0; i < init.size(); ++i) {
      // The same arithmetic in one kernel: equal to rounding (the first clean step after the
      // inf one starts the buffer from zeros: 0 * momentum + grad, the same as PyTorch's copy).
      CHECK(torch::allclose(fused_params[i].detach(), ref_params[i].detach(), 1e-6, 1e-6));
      if (c.momentum != 0)
        CHECK(torch::allclose(momentum(fused, fused_params[i]), momentum(ref, ref_params[i]), 1e-6, 1e-6));
    }
  }
}

TEST_CASE("zero_grad: zeros in place or drops, as torch.optim's foreach path", "[engine]") {
  auto p = torch::ones({3}).requires_grad_(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  p.sum().backward();
  const void* storage = p.grad().data_ptr();
  ptune::engine::zero_grad(opt, /*set_to_none=*/false);
  CHECK(p.grad().data_ptr() == storage);
  CHECK(torch::equal(p.grad(), torch::zeros({3})));
  ptune::engine::zero_grad(opt, /*set_to_none=*/true);
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("a program row's diagnosis is its trace's verdict where it has one", "[measure]") {
  ptune::config::ExperimentConfig cfg;
  cfg.program.command = {"python3", "train.py"};
  ptune::measure::Measurement m;
  // Chosen by its kind, which the program names: the sweep and the search never ask which kind.
  const ptune::measure::SideKind& program = ptune::tune::side_kind(cfg);
  REQUIRE(program.name() == "program");
  const ptune::system::CpuInfo cpu;
  m.cpu_cores_busy = 0.5;
  m.system_time_pct = 3;
  const size_t cores = ptune::system::allowed_cpus().size();
  const std::string outside = program.diagnose(m, cfg, {}, cpu);
  const std::string seen = "(0.5 of " + std::to_string(cores) + " cores busy, system time 3% of the step)";
  CHECK(outside.rfind((cores >= 2 ? "the CPU mostly idle " : "CPU-bound ") + seen, 0) == 0);
  m.trace_verdict =
      "input-bound (46% of the step in `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`): "
      "DataLoader(num_workers=4)";
  CHECK(program.diagnose(m, cfg, {}, cpu) == m.trace_verdict + " (ptune analyze on its trace)");
  // What a trace cannot show (time in the kernel, page faults) is added from outside.
  m.system_time_pct = 27;
  m.page_faults_per_step = 13728;
  const std::string alloc =
      "allocator-bound (27% of the step in the kernel, 13728 page faults a step: glibc's malloc gives large "
      "blocks "
      "back and the next step faults them in again): process.allocator jemalloc, tcmalloc or glibc_tuned";
  CHECK(program.diagnose(m, cfg, {}, cpu) ==
        m.trace_verdict + " (ptune analyze on its trace); from outside, " + alloc);
  m.trace_verdict.clear();
  CHECK(program.diagnose(m, cfg, {}, cpu) == alloc);
  // On a GPU (NVML's view of its processes): below the launch-bound rule's threshold the GPU waits
  // on the host; at or above it the program is GPU-bound.
  m.system_time_pct = 3;
  m.gpu_busy_pct = 69.4;
  CHECK(program.diagnose(m, cfg, {}, cpu)
            .rfind("the GPU idle much of the step (GPU busy 69% for its processes, 0.5 CPU cores busy): ",
                   0) == 0);
  m.gpu_busy_pct = 70;
  CHECK(program.diagnose(m, cfg, {}, cpu)
            .rfind("GPU-bound (GPU busy 70% for its processes, 0.5 CPU cores busy): ", 0) == 0);
}

TEST_CASE("diagnosis verdicts follow the documented thresholds", "[measure]") {
  auto cfg = tiny();
  ptune::measure::Measurement m;
  m.split = ptune::measure::Measurement::StepSplit{62, 0, 38};
  CHECK(ptune::measure::diagnose(m, cfg) ==
        "input-bound (62% waiting for data): raise loader.num_workers (now 0)");
  m.split = ptune::measure::Measurement::StepSplit{5, 25, 70};
  CHECK(ptune::measure::diagnose(m, cfg) == "copy-bound (25% copying to the device): loader.pin_memory");
  m.split = ptune::measure::Measurement::StepSplit{5, 1, 94};
  CHECK(
      ptune::measure::diagnose(m, cfg, {}, {}, true) ==
      "compute-bound (94% in forward/backward/update) on fp32: optim.amp bf16 with model.channels_last (this "
      "CPU's native bf16 pays off with channels_last tensors and enough work per call; at small images or "
      "batches bf16 can be slower than fp32 (this row: 32x32, batch 4): measure it)");
  // A CPU step spending a tenth or more in the kernel on glibc's default malloc: the allocator row;
  // not once the allocator is set, nor below the rule's threshold.
  m.system_time_pct = 27;
  m.page_faults_per_step = 13728;
  CHECK(ptune::measure::diagnose(m, cfg, {}, {}, true) ==
        "allocator-bound (27% of the step in the kernel, 13728 page faults a step: glibc's malloc gives "
        "large blocks back and the next step faults them in again): process.allocator jemalloc, tcmalloc or "
        "glibc_tuned");
  auto tuned = cfg;
  tuned.process.allocator = ptune::config::Allocator::kTcmalloc;
  CHECK(ptune::measure::diagnose(m, tuned, {}, {}, true).rfind("compute-bound", 0) == 0);
  m.system_time_pct = 9.9;
  CHECK(ptune::measure::diagnose(m, cfg, {}, {}, true).rfind("compute-bound", 0) == 0);
  m.system_time_pct.reset();
  m.page_faults_per_step.reset();
  m.gpu_busy_pct = 55;
  m.peak_mem_bytes = 15;
  m.device_mem_bytes = 100;
  CHECK(ptune::measure::diagnose(m, cfg) ==
        "launch-bound (GPU busy 55%, the host cannot feed kernels fast enough): optim.cuda_graphs; memory "
        "15% used: raise loader.batch_size");
  m.gpu_busy_pct = 97;
  m.peak_mem_bytes = 80;
  cfg.optim.amp = ptune::config::Amp::kBf16;
  CHECK(ptune::measure::diagnose(m, cfg) ==
        "compute-bound (94% in forward/backward/update, GPU busy 97%): try model.channels_last");
}

TEST_CASE("train: checkpoints, resume equals an uninterrupted run, weights export", "[engine]") {
  ptune::test::TempDir dir;
  auto cfg = tiny();
  cfg.data.num_samples = 24;
  cfg.train.epochs = 2;  // 6 steps per epoch
  cfg.train.checkpoint_dir = dir.file("ck");
  cfg.train.checkpoint_every = 4;
  cfg.name = "t";
  ptune::engine::TrainOptions opt;
  auto full = ptune::engine::train(cfg, opt);
  CHECK(full.steps == 12);
  CHECK(std::filesystem::exists(dir.file("ck/t-step4.pt")));
  CHECK(std::filesystem::exists(dir.file("ck/t-step12.pt")));

  auto part_cfg = cfg;
  part_cfg.train.max_steps = 4;
  part_cfg.train.checkpoint_dir = dir.file("ck2");
  ptune::engine::train(part_cfg, opt);
  auto resumed_cfg = cfg;
  resumed_cfg.train.checkpoint_dir = dir.file("ck2");
  opt.resume = dir.file("ck2/t-step4.pt");
  opt.save_weights = dir.file("final.pt");
  auto resumed = ptune::engine::train(resumed_cfg, opt);
  CHECK(resumed.steps == 12);
  CHECK(resumed.final_loss == Approx(full.final_loss).epsilon(1e-5));

  auto ev = ptune::engine::evaluate(cfg, dir.file("final.pt"));
  CHECK(ev.samples == 24);
  // The same numbers by hand: the saved weights, BatchNorm in eval mode, every sample once.
  auto eval_cfg = cfg;
  eval_cfg.model.weights = dir.file("final.pt");
  eval_cfg.loader.shuffle = false;
  eval_cfg.loader.drop_last = false;
  Trainer t(eval_cfg, c10::Device(c10::kCPU));
  t.model()->eval();
  ptune::data::Loader loader(ptune::engine::make_dataset(eval_cfg),
                             ptune::engine::loader_options(eval_cfg, c10::Device(c10::kCPU)));
  loader.start_epoch(0);
  double loss_sum = 0, correct = 0;
  torch::NoGradGuard no_grad;
  while (auto b = loader.next()) {
    auto logits = t.model()->forward(b->images);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, b->labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(b->labels).sum().item<double>();
  }
  CHECK(ev.loss == Approx(loss_sum / 24).epsilon(1e-6));
  CHECK(ev.top1 == Approx(correct / 24));
}

TEST_CASE("convergence: loss curves compared over their last quarter", "[measure]") {
  std::vector<double> ref = {2.3, 2.2, 2.1, 2.0, 1.9, 1.8, 1.7, 1.6};
  auto same = ptune::bench::compare_convergence(ref, ref);
  CHECK(!same.altered);
  CHECK(same.text ==
        "convergence unchanged: mean loss 1.6500 over steps 7-8 vs 1.6500 in the first row (+0.0%, tolerance "
        "10%)");
  std::vector<double> slower = {2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.0, 2.0};
  auto v = ptune::bench::compare_convergence(slower, ref);
  CHECK(v.altered);
  CHECK(v.mean_loss == Approx(2.0));
  CHECK(v.text.rfind("convergence altered: mean loss 2.0000 over steps 7-8 vs 1.6500", 0) == 0);
}

TEST_CASE("loss curves are deterministic and follow the settings", "[measure]") {
  auto cfg = tiny();
  cfg.cpu_threads = 1;
  auto a = ptune::bench::loss_curve(cfg, 4);
  auto b = ptune::bench::loss_curve(cfg, 4);
  REQUIRE(a.size() == 4);
  CHECK(a == b);  // deterministic: same seed, same data order
  cfg.optim.lr = 0.001;
  auto c = ptune::bench::loss_curve(cfg, 4);
  CHECK(c.front() == a.front());  // the same first step (the same initial weights and batch)
  CHECK(c.back() != a.back());
}
