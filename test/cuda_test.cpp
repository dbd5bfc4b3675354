// GPU behaviour: pinned memory and the copy stream, the device-side uint8 path, fp16 AMP with
// the GradScaler, whole-step CUDA graphs (equal to eager, skip-on-inf inside the graph),
// cuDNN autotune, GPU metrics, the driver's view of the GPU (the load view), a real
// out-of-memory in the batch-size search, and NCCL.
// These tests are hidden ([.cuda]): the CPU suite does not list them, and on a machine without
// a GPU they fail rather than pass vacuously. Run them with `ptune_tests "[cuda]"` (what
// scripts/gpu-check does).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "dist/grad_sync.hpp"
#include "dist/group.hpp"
#include "engine/cuda_graph.hpp"
#include "runtime/cuda_support.hpp"
#include "engine/feeder.hpp"
#include "engine/trainer.hpp"
#include "system/load.hpp"
#include "bench/bench.hpp"
#include "bench/convergence.hpp"
#include "bench/profile.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/schedule.hpp"
#include "measure/side.hpp"
#include "tune/sides.hpp"
#include "tune/tuner.hpp"

using ptune::config::ExperimentConfig;
using ptune::engine::Trainer;

namespace {

const c10::Device kCuda(c10::kCUDA, 0);
const c10::Device kCpu(c10::kCPU);

void require_gpu() {
  if (!torch::cuda::is_available()) FAIL("needs a CUDA device (run on a GPU machine: scripts/gpu-check)");
}

/// Deterministic cuDNN for the tests that compare two runs, restored after.
struct DeterministicCudnn {
  bool det = at::globalContext().deterministicCuDNN();
  bool bench = at::globalContext().benchmarkCuDNN();
  DeterministicCudnn() {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  ~DeterministicCudnn() {
    at::globalContext().setDeterministicCuDNN(det);
    at::globalContext().setBenchmarkCuDNN(bench);
  }
};

ExperimentConfig small() {
  ExperimentConfig cfg;
  cfg.device = "cuda";
  cfg.data.num_samples = 96;
  cfg.data.image_size = 32;
  cfg.loader.batch_size = 8;
  cfg.optim.lr = 0.05;
  cfg.optim.momentum = 0.9;
  cfg.measure.warmup_steps = 2;
  cfg.measure.steps = 3;
  return cfg;
}

/// The first `n` host batches of epoch 0, built on the CPU (pageable).
std::vector<ptune::data::Batch> host_batches(ExperimentConfig cfg, int n) {
  cfg.loader.pin_memory = false;
  ptune::data::Loader loader(ptune::engine::make_dataset(cfg), ptune::engine::loader_options(cfg, kCpu));
  loader.start_epoch(0);
  std::vector<ptune::data::Batch> out;
  for (int i = 0; i < n; ++i) {
    auto b = loader.next();
    REQUIRE(b);
    out.push_back({b->images.clone(), b->labels.clone(), b->index});
  }
  return out;
}

at::Tensor flat_params(Trainer& t) {
  std::vector<at::Tensor> flat;
  for (auto& p : t.model()->parameters()) flat.push_back(p.detach().flatten().to(kCpu));
  return torch::cat(flat);
}

/// Trains on `batches` in order and returns the losses read after each step.
std::vector<double> train_on(Trainer& t, const std::vector<ptune::data::Batch>& batches) {
  std::vector<double> losses;
  for (const auto& b : batches) {
    auto [x, y] = t.to_device(b);
    losses.push_back(t.step(x, y).item<double>());
  }
  return losses;
}

}  // namespace

TEST_CASE("cuda: pinned batches are page-locked, recycled, and arrive intact through the copy stream",
          "[.cuda]") {
  require_gpu();
  auto cfg = small();
  cfg.loader.num_workers = 2;
  cfg.loader.pin_memory = true;
  const int n = 10;
  auto expected = host_batches(cfg, n);

  // The loader collates straight into page-locked memory, and blocks come back to it.
  {
    ptune::data::Loader loader(ptune::engine::make_dataset(cfg), ptune::engine::loader_options(cfg, kCuda));
    loader.start_epoch(0);
    std::set<const void*> buffers;
    int batches = 0;
    while (auto b = loader.next()) {
      CHECK(b->images.is_pinned());
      CHECK(b->labels.is_pinned());
      buffers.insert(b->images.data_ptr());
      ++batches;
    }
    CHECK(batches == 12);
    CHECK(buffers.size() < static_cast<size_t>(batches));
  }

  // Through the feeder (copy stream + events), every batch reaches the device unchanged and in
  // order, while the next one is already being copied.
  ptune::data::Loader loader(ptune::engine::make_dataset(cfg), ptune::engine::loader_options(cfg, kCuda));
  loader.start_epoch(0);
  ptune::engine::Feeder feeder([&] { return loader.next(); }, kCuda);
  for (int i = 0; i < n; ++i) {
    auto b = feeder.next();
    REQUIRE(b);
    CHECK(b->images.device() == kCuda);
    // Work on the compute stream after next() sees the copied data.
    auto doubled = b->images * 2;
    CHECK(doubled.to(kCpu).equal(expected[static_cast<size_t>(i)].images * 2));
    CHECK(b->labels.to(kCpu).equal(expected[static_cast<size_t>(i)].labels));
  }
}

TEST_CASE("cuda: uint8 normalize and gpu_resize on the GPU equal the host's float path", "[.cuda]") {
  require_gpu();
  auto cfg = small();
  cfg.data.image_size = 64;
  Trainer t(cfg, kCuda);
  auto host = t.to_device(host_batches(cfg, 1)[0]).first.to(kCpu);
  cfg.loader.uint8_transfer = true;
  auto u8 = t.to_device(host_batches(cfg, 1)[0]).first;
  CHECK(u8.device() == kCuda);
  CHECK(torch::allclose(u8.to(kCpu), host, 1e-5, 1e-6));
  cfg.loader.uint8_transfer = false;
  cfg.loader.gpu_resize = true;
  auto raw = host_batches(cfg, 1)[0];
  CHECK(raw.images.size(2) == 32);
  auto resized = t.to_device(raw).first.to(kCpu);
  REQUIRE(resized.sizes() == host.sizes());
  CHECK((resized - host).abs().max().item<double>() <= 0.5 / (255 * 0.5) + 1e-5);
}

TEST_CASE("cuda: the GradScaler pattern on CUDA tensors equals PyTorch's", "[.cuda]") {
  require_gpu();
  // The CPU test's ten-step pattern, on the GPU: same scales, trackers and parameters.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> poison{0, 0, inf, 0, 0, 0, nan, inf, 0, 0};
  const std::vector<double> scales{65536, 131072, 65536, 65536, 131072, 131072, 65536, 32768, 32768, 65536};
  const bool masked = GENERATE(false, true);
  auto p = torch::tensor({1.0f, -2.0f}, torch::TensorOptions().device(kCuda)).requires_grad_(true);
  auto w = torch::tensor({3.0f, 0.25f}, torch::TensorOptions().device(kCuda));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.5).momentum(0.9));
  ptune::engine::GradScalerOptions o;
  o.growth_interval = 2;
  ptune::engine::GradScaler scaler(o);
  for (size_t i = 0; i < poison.size(); ++i) {
    opt.zero_grad();
    scaler.scale((p * w).sum()).backward();
    if (poison[i] != 0) p.grad()[i == 6 ? 1 : 0].fill_(poison[i]);
    if (masked)
      scaler.step_masked(opt);
    else
      scaler.step(opt);
    scaler.update();
    INFO("step " << i);
    CHECK(scaler.scale_tensor().device() == kCuda);
    CHECK(scaler.get_scale() == scales[i]);
  }
  CHECK(torch::allclose(p.detach().to(kCpu), torch::tensor({-33.5700798034668f, -4.880839824676514f}), 1e-6,
                        1e-6));
}

TEST_CASE("cuda: fp16 AMP trains with the scaler and stays close to fp32", "[.cuda]") {
  require_gpu();
  DeterministicCudnn det;
  auto cfg = small();
  auto batches = host_batches(cfg, 1);
  std::vector<ptune::data::Batch> same(8, batches[0]);
  Trainer fp32(cfg, kCuda);
  const auto losses32 = train_on(fp32, same);
  cfg.optim.amp = ptune::config::Amp::kFp16;
  Trainer fp16(cfg, kCuda);
  REQUIRE(fp16.scaler());
  const auto losses16 = train_on(fp16, same);
  CHECK(losses16[0] != losses32[0]);                        // the forward really ran in half precision...
  CHECK(losses16[0] == Approx(losses32[0]).epsilon(0.02));  // ...from the same weights
  // Each overflowing step was skipped and halved the scale (no growth within 2000 steps): the
  // fp16 run's last loss follows that many fewer updates, and matches fp32's at that point.
  const double scale = fp16.scaler()->get_scale();
  const int skipped = static_cast<int>(std::lround(std::log2(65536.0 / scale)));
  INFO("scale " << scale << ", skipped " << skipped);
  REQUIRE(skipped >= 0);
  REQUIRE(skipped <= 3);
  const size_t at = losses16.size() - 1 - static_cast<size_t>(skipped);
  CHECK(losses16.back() == Approx(losses32[at]).epsilon(0.05).margin(0.02));
  CHECK(losses32[at] < losses32[0]);  // the comparison is made after real learning
}

TEST_CASE("cuda: a CUDA-graph step gives the eager step's losses and parameters", "[.cuda]") {
  require_gpu();
  DeterministicCudnn det;
  auto cfg = small();
  cfg.optim.amp = GENERATE(ptune::config::Amp::kOff, ptune::config::Amp::kFp16);
  INFO("amp " << ptune::config::name(cfg.optim.amp));
  auto batches = host_batches(cfg, 8);
  Trainer eager(cfg, kCuda);
  auto eager_losses = train_on(eager, batches);
  cfg.optim.cuda_graphs = true;
  Trainer graph(cfg, kCuda);
  auto graph_losses = train_on(graph, batches);
  CHECK(graph.graph_note() == "");  // captured and replayed
  for (size_t i = 0; i < batches.size(); ++i) {
    INFO("step " << i);
    CHECK(graph_losses[i] == Approx(eager_losses[i]).epsilon(1e-4));
  }
  CHECK(torch::allclose(flat_params(graph), flat_params(eager), 1e-4, 1e-5));
}

TEST_CASE("cuda: inside the graph an inf/NaN step changes nothing and halves the scale", "[.cuda]") {
  require_gpu();
  auto cfg = small();
  cfg.optim.amp = ptune::config::Amp::kFp16;
  cfg.optim.cuda_graphs = GENERATE(false, true);
  INFO("cuda_graphs " << cfg.optim.cuda_graphs);
  auto batches = host_batches(cfg, 6);
  Trainer t(cfg, kCuda);
  train_on(t, batches);  // warm-up, capture, replays
  REQUIRE(t.graph_note() == "");
  const double scale = t.scaler()->get_scale();
  const auto before = flat_params(t);
  auto bad = batches[0];
  bad.images = bad.images.clone();
  bad.images[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  train_on(t, {bad});
  CHECK(t.scaler()->get_scale() == scale / 2);
  CHECK(flat_params(t).equal(before));
  train_on(t, {batches[1]});  // a clean step updates again
  CHECK_FALSE(flat_params(t).equal(before));
  CHECK(t.scaler()->get_scale() == scale / 2);
}

TEST_CASE("cuda: a capture that fails leaves the allocator and the device usable", "[.cuda]") {
  require_gpu();
  auto x = torch::ones({1024}, torch::TensorOptions().device(kCuda));
  ptune::engine::GraphStep broken(0);
  // A host synchronization inside the body cannot be captured.
  CHECK_FALSE(broken.capture([&] { (void)(x * 2).sum().item<float>(); }));
  CHECK(!broken.failure().empty());
  CHECK_FALSE(broken.captured());
  // The caching allocator is out of capture mode: a block used on another stream is freed
  // when that use is over (during a capture its free is deferred "until the capture ends",
  // which after a failed capture would be never), so its segment can be given back.
  auto reserved = [] {
    ptune::runtime::cuda::synchronize(0);
    c10::cuda::CUDACachingAllocator::emptyCache();
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  };
  const int64_t before = reserved();
  {
    auto other = c10::cuda::getStreamFromPool(false, 0);
    auto t = torch::empty({1 << 22}, torch::TensorOptions().device(kCuda));
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), other);
  }
  CHECK(reserved() == before);
  // A good capture still works afterwards.
  ptune::engine::GraphStep good(0);
  auto y = torch::zeros({1024}, torch::TensorOptions().device(kCuda));
  REQUIRE(good.capture([&] { y.add_(x); }));
  good.replay();
  good.replay();
  CHECK(y.sum().item<double>() == 2048.0);
}

TEST_CASE("cuda: a batch of another shape runs eagerly and the note says so", "[.cuda]") {
  require_gpu();
  auto cfg = small();
  cfg.optim.cuda_graphs = true;
  auto batches = host_batches(cfg, 5);
  Trainer t(cfg, kCuda);
  train_on(t, batches);
  CHECK(t.graph_note() == "");
  auto partial = batches[0];
  partial.images = partial.images.narrow(0, 0, 4).clone();
  partial.labels = partial.labels.narrow(0, 0, 4).clone();
  auto losses = train_on(t, {partial});
  CHECK(std::isfinite(losses[0]));
  CHECK(t.graph_note() == "optim.cuda_graphs: 1 batch of another shape (4 samples, not 8) ran eagerly");
}

TEST_CASE("cuda: channels_last and cudnn_benchmark change speed, not results", "[.cuda]") {
  require_gpu();
  auto cfg = small();
  auto batch = host_batches(cfg, 1);
  double plain = 0, cl = 0;
  {
    DeterministicCudnn det;
    Trainer t(cfg, kCuda);
    plain = train_on(t, batch)[0];
  }
  cfg.model.channels_last = true;
  cfg.optim.cudnn_benchmark = true;
  Trainer t(cfg, kCuda);
  CHECK(at::globalContext().benchmarkCuDNN());
  CHECK(t.model()->named_parameters()["conv1.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
  auto x = t.to_device(batch[0]).first;
  CHECK(x.is_contiguous(at::MemoryFormat::ChannelsLast));
  cl = train_on(t, batch)[0];
  CHECK(cl == Approx(plain).epsilon(1e-3));
  ptune::runtime::cuda::set_cudnn_benchmark(false);
}

TEST_CASE("cuda: a measured row reports GPU busy, peak memory and the step breakdown", "[.cuda]") {
  require_gpu();
  auto cfg = small();
  cfg.loader.pin_memory = true;
  cfg.loader.num_workers = 2;
  cfg.optim.amp = ptune::config::Amp::kFp16;
  auto m = ptune::tune::measure_row(cfg);
  CHECK_FALSE(m.gpu_busy_pct);  // measure_row() never profiles
  const auto p = ptune::bench::profile(cfg, m.ms_per_step);
  REQUIRE(p.gpu_busy_pct);
  CHECK(*p.gpu_busy_pct > 0);
  CHECK(*p.gpu_busy_pct <= 100);
  REQUIRE(m.peak_mem_bytes);
  CHECK(*m.peak_mem_bytes > 11'000'000 * 4);  // at least the fp32 weights of ResNet-18
  REQUIRE(m.device_mem_bytes);
  CHECK(*m.device_mem_bytes > *m.peak_mem_bytes);
  REQUIRE(m.split);
  CHECK(m.split->data_wait_pct + m.split->h2d_pct + m.split->compute_pct == Approx(100.0));
  CHECK(m.split->compute_pct > 0);
  REQUIRE(m.loss);
  CHECK(std::isfinite(*m.loss));
  // A data row of float batches launches no kernel: copies are not GPU busy.
  cfg.measure.mode = ptune::config::Mode::kData;
  auto d = ptune::tune::measure_row(cfg);
  const auto dp = ptune::bench::profile(cfg, d.ms_per_step);
  REQUIRE(dp.gpu_busy_pct);
  CHECK(*dp.gpu_busy_pct == 0);
  cfg.measure.mode = ptune::config::Mode::kTrain;
  cfg.optim.cuda_graphs = true;
  cfg.measure.warmup_steps = 2;  // raised to the graph's warm-up and capture, with a note
  auto g = ptune::tune::measure_row(cfg);
  CHECK(g.eager_fallback.empty());
  REQUIRE(g.notes.size() == 1);
  CHECK(g.notes[0].rfind("measure.warmup_steps raised from 2 to 4", 0) == 0);
  // The graph's private pool counts: at least the eager row's peak, not only the weights.
  REQUIRE(g.peak_mem_bytes);
  CHECK(*g.peak_mem_bytes >= *m.peak_mem_bytes * 0.8);
  const auto gp = ptune::bench::profile(cfg, g.ms_per_step);
  REQUIRE(gp.gpu_busy_pct);
  CHECK(*gp.gpu_busy_pct > 0);  // replayed kernels are seen by the profiler
}

TEST_CASE("cuda: the load view finds the row's GPU in the driver's management library by its UUID",
          "[.cuda]") {
  require_gpu();
  const auto t = torch::ones({1024}, torch::TensorOptions().device(kCuda));  // this process's context
  torch::cuda::synchronize();
  const std::string uuid = ptune::runtime::cuda::device_uuid(0);
  REQUIRE(uuid.size() == 36);  // 8-4-4-4-12 hex digits
  CHECK((uuid[8] == '-' && uuid[13] == '-' && uuid[18] == '-' && uuid[23] == '-'));
  CHECK(ptune::runtime::cuda::device_uuid(ptune::runtime::cuda::device_count()).empty());
  const char* library = std::getenv("PTUNE_NVML_LIBRARY");
  REQUIRE((library == nullptr || *library == '\0'));  // the driver's own libnvidia-ml.so.1
  ptune::system::LoadSampler s;
  s.start(0, uuid);
  const auto r = s.stop(0);
  WARN("GPU " << uuid << ": " << r.summary());  // what this machine's driver told, in the log
  CHECK(r.gpu_sampled);
  if (r.gpu_other_processes && *r.gpu_other_processes > 0) CHECK(r.under_load);
}

TEST_CASE("cuda: the batch-size search survives a real out-of-memory and keeps going", "[.cuda]") {
  require_gpu();
  // Cap the caching allocator at ~3 GiB so that the search hits the limit quickly.
  const double total = static_cast<double>(ptune::runtime::cuda::total_memory(0));
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::setMemoryFraction(3.0 * (1 << 30) / total, 0);
  struct Restore {
    ~Restore() {
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, 0);
    }
  } restore;
  auto cfg = small();
  cfg.data.image_size = 128;
  cfg.data.num_samples = 4096;
  cfg.loader.batch_size = 64;
  cfg.measure.mode = ptune::config::Mode::kSynthetic;
  cfg.measure.warmup_steps = 1;
  cfg.measure.steps = 1;
  ptune::tune::BatchSearchOptions o;
  o.min_repeats = 1;
  o.max_batch = 4096;
  auto r = ptune::tune::find_batch_size(cfg, o);
  bool oom = false, fit_after_oom = false;
  for (const auto& t : r.tries) {
    INFO(t.batch_size << ": " << t.status_text());
    if (t.state == ptune::tune::TryState::kOutOfMemory)
      oom = true;
    else if (oom && t.fits)
      fit_after_oom = true;
  }
  CHECK(oom);
  CHECK(fit_after_oom);  // the binary search went on after the failure
  CHECK(r.largest_fitting >= 64);
  CHECK(r.largest_fitting < 4096);
}

TEST_CASE("cuda: an NCCL group runs collectives and DDP-style gradient sync on the GPU", "[.cuda]") {
  require_gpu();
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto group = std::make_shared<ptune::dist::Group>(store, 0, 1, ptune::config::Backend::kNccl, kCuda,
                                                    std::chrono::seconds(60));
  CHECK(group->backend_name() == "nccl");
  auto t = torch::arange(6, torch::TensorOptions().dtype(torch::kFloat).device(kCuda));
  group->all_reduce_sum(t);
  CHECK(t.to(kCpu).equal(torch::arange(6, torch::kFloat)));
  CHECK(group->sum({1.5, 2.0}) == std::vector<double>{1.5, 2.0});
  CHECK(group->max({3.0}) == std::vector<double>{3.0});
  group->barrier();

  // An asynchronous all-reduce, as GradSync launches its buckets: wait() orders the current
  // stream after it, and work queued then sees the result. (The bucket hooks themselves need
  // two or more ranks, which NCCL will not put on one GPU: they are tested with Gloo.)
  auto big = torch::full({1 << 22}, 0.5f, torch::TensorOptions().device(kCuda));
  auto pending = group->all_reduce_sum_async(big);
  pending.wait();
  CHECK(big.sum().item<double>() == Approx(0.5 * (1 << 22)));
  // A group the trainer can use: one rank, so it trains locally and matches a plain trainer.
  auto cfg = small();
  auto batches = host_batches(cfg, 2);
  Trainer local(cfg, kCuda);
  Trainer grouped(cfg, kCuda, group);
  CHECK(grouped.grad_sync() == nullptr);
  DeterministicCudnn det;
  train_on(local, batches);
  train_on(grouped, batches);
  CHECK(torch::allclose(flat_params(local), flat_params(grouped), 1e-5, 1e-6));
}
