// Data parallel: rendezvous variables, Gloo collectives, DDP-style gradient averaging proven
// equal to one process on the global batch, no_sync accumulation, and `ptune launch` (output,
// rank 0 writing, failures and interrupts that never hang). Ranks are threads of this process
// (each with its own ProcessGroupGloo over a shared HashStore) or processes of the built ptune.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "config/config.hpp"
#include "system/rendezvous.hpp"
#include "dist/grad_sync.hpp"
#include "dist/group.hpp"
#include "dist/launcher.hpp"
#include "engine/trainer.hpp"
#include "core/stats.hpp"
#include "models/state_dict_io.hpp"
#include "test_util.hpp"

using ptune::test::TempDir;
namespace dist = ptune::dist;

namespace {

using Env = std::map<std::string, std::string>;

ptune::system::Getenv getenv_of(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

/// Runs `fn(rank, group)` on `n` threads, each a Gloo rank over one in-process store; returns
/// when all are done and rethrows the first failure.
template <class Fn>
void run_ranks(int n, Fn fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        // One intra-op thread per rank: two ranks with OpenMP pools of their own would
        // oversubscribe the cores (and spin), more so when ctest runs tests side by side.
        at::set_num_threads(1);
        auto group = std::make_shared<dist::Group>(c10::make_intrusive<c10d::PrefixStore>("test", store), r,
                                                   n, ptune::config::Backend::kGloo, c10::Device(c10::kCPU),
                                                   std::chrono::seconds(30), "127.0.0.1");
        fn(r, group);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// One LibTorch intra-op thread for a test's lifetime (restored after): OpenMP pools that spin
/// on oversubscribed cores (rank threads, ctest running tests side by side) crawl.
struct OneThread {
  int before = at::get_num_threads();
  OneThread() { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(before); }
};

/// A tiny training config: ResNet-18 on 16x16 fake CIFAR.
ptune::config::ExperimentConfig tiny_config(int64_t batch) {
  ptune::config::ExperimentConfig cfg;
  cfg.device = "cpu";
  cfg.data.num_samples = 64;
  cfg.data.image_size = 16;
  cfg.loader.batch_size = batch;
  cfg.loader.shuffle = true;
  cfg.optim.lr = 0.05;
  cfg.optim.momentum = 0.9;
  return cfg;
}

/// Weights for the tests: a seeded ResNet-18 whose BatchNorm running statistics were filled by
/// a few forward passes in train mode, so that BatchNorm in eval mode (frozen statistics)
/// normalizes sensibly. BatchNorm in train mode normalizes by each rank's own batch, which no
/// data-parallel scheme without SyncBatchNorm makes equal to the global batch.
std::string frozen_bn_weights(const TempDir& dir, const ptune::config::ExperimentConfig& cfg) {
  const std::string path = dir.file("init.pt");
  torch::manual_seed(1);
  auto model = ptune::models::make(cfg.model.arch, cfg.model.num_classes, cfg.data.image_size);
  model->train();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 8; ++i) model->forward(torch::randn({16, 3, cfg.data.image_size, cfg.data.image_size}));
  ptune::models::write_state_dict(path, ptune::models::state_dict(*model));
  return path;
}

/// Trains `steps` steps (each a micro-step) on the shard of `rank` of `world`; BatchNorm frozen.
std::vector<at::Tensor> train_shard(const ptune::config::ExperimentConfig& cfg, int rank, int world,
                                    std::shared_ptr<dist::Group> group, int steps,
                                    std::vector<at::Tensor>* first_grads = nullptr,
                                    dist::GradSyncStats* stats = nullptr) {
  const c10::Device cpu(c10::kCPU);
  ptune::engine::Trainer trainer(cfg, cpu, std::move(group));
  trainer.model()->eval();  // frozen BatchNorm statistics
  ptune::data::Loader loader(ptune::engine::make_dataset(cfg),
                             ptune::engine::loader_options(cfg, cpu, rank, world));
  loader.start_epoch(0);
  for (int s = 0; s < steps; ++s) {
    auto batch = loader.next();
    if (!batch)
      throw std::runtime_error("the loader ran out of batches");  // no Catch macros off the main thread
    auto [images, labels] = trainer.to_device(*batch);
    trainer.step(images, labels);
    if (s == 0 && first_grads)
      for (auto& p : trainer.model()->parameters()) first_grads->push_back(p.grad().clone());
  }
  if (stats && trainer.grad_sync()) *stats = trainer.grad_sync()->stats();
  std::vector<at::Tensor> out;
  for (auto& p : trainer.model()->parameters()) out.push_back(p.detach().clone());
  for (auto& b : trainer.model()->buffers()) out.push_back(b.detach().clone());
  return out;
}

/// What 2 ranks compute, in one process and without an all-reduce: `steps` optimizer steps of a
/// trainer that takes rank 0's and then rank 1's batch (of a 2-rank run of `cfg`) as the two
/// micro-batches of each step (dist.accumulate 2). Its parameters and buffers, as train_shard's.
std::vector<at::Tensor> train_halves(ptune::config::ExperimentConfig cfg, int steps) {
  cfg.dist.accumulate = 2;
  const c10::Device cpu(c10::kCPU);
  ptune::engine::Trainer trainer(cfg, cpu);
  trainer.model()->eval();  // frozen BatchNorm statistics
  std::vector<std::unique_ptr<ptune::data::Loader>> loaders;
  for (int r = 0; r < 2; ++r) {
    loaders.push_back(std::make_unique<ptune::data::Loader>(ptune::engine::make_dataset(cfg),
                                                            ptune::engine::loader_options(cfg, cpu, r, 2)));
    loaders.back()->start_epoch(0);
  }
  for (int s = 0; s < steps; ++s)
    for (auto& loader : loaders) {
      auto batch = loader->next();
      REQUIRE(batch);
      auto [images, labels] = trainer.to_device(*batch);
      trainer.step(images, labels);
    }
  std::vector<at::Tensor> out;
  for (auto& p : trainer.model()->parameters()) out.push_back(p.detach().clone());
  for (auto& b : trainer.model()->buffers()) out.push_back(b.detach().clone());
  return out;
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, (a[i].to(at::kDouble) - b[i].to(at::kDouble)).abs().max().item<double>());
  return m;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// ---- processes -------------------------------------------------------------------------------

/// Starts the built ptune with `args` in its own process group, stdout and stderr to files.
pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<std::string> argv = {PTUNE_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(null_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  ::close(null_fd);
  return pid;
}

/// Waits for `pid` up to `timeout_s`; its exit code (128 + signal when killed), or nullopt after
/// killing its whole process group on a timeout.
std::optional<int> wait_for(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

/// Waits until `path` contains `text` (up to `timeout_s`); whether it did.
bool wait_for_text(const std::string& path, const std::string& text, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (ptune::test::read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

/// The children of `parent` and the value of variable `var` in each one's environment.
std::map<pid_t, std::string> children_with(pid_t parent, const std::string& var) {
  std::map<pid_t, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream envf(entry.path() / "environ");
    std::string env((std::istreambuf_iterator<char>(envf)), {});
    std::string value;
    size_t pos = 0;
    while (pos < env.size()) {
      const size_t end = env.find('\0', pos);
      const std::string kv = env.substr(pos, end - pos);
      if (kv.rfind(var + "=", 0) == 0) value = kv.substr(var.size() + 1);
      if (end == std::string::npos) break;
      pos = end + 1;
    }
    out[static_cast<pid_t>(std::stoi(name))] = value;
  }
  return out;
}

/// A tiny config for the binary: ResNet-18 at 16x16, one CPU thread per rank.
std::string tiny_file(const TempDir& dir, int64_t max_steps) {
  return dir.write("tiny.json", R"({
  "name": "tiny", "device": "cpu", "cpu_threads": 1,
  "data": {"num_samples": 4096, "image_size": 16},
  "loader": {"batch_size": 4},
  "measure": {"warmup_steps": 1, "steps": 3},
  "train": {"epochs": 100, "max_steps": )" +
                                    std::to_string(max_steps) + R"(, "log_every": 1,
            "checkpoint_dir": ")" + dir.file("ckpt") +
                                    R"("}
})");
}

}  // namespace

TEST_CASE("dist: torchrun variables", "[dist]") {
  Env env = {{"RANK", "3"},
             {"WORLD_SIZE", "8"},
             {"LOCAL_RANK", "1"},
             {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "node7"},
             {"MASTER_PORT", "1234"},
             {"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "9"}};
  auto e = ptune::system::parse_environment(getenv_of(env));
  CHECK(e.launcher == "torchrun");  // torchrun's variables win over Slurm's
  CHECK(e.rank == 3);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.master_addr == "node7");
  CHECK(e.master_port == 1234);
  CHECK(e.distributed());
  CHECK_FALSE(e.agent_store);                    // ptune launch: rank 0 serves the store
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";  // torchrun: its agent serves it
  env["TORCHELASTIC_RESTART_COUNT"] = "2";
  e = ptune::system::parse_environment(getenv_of(env));
  CHECK(e.agent_store);
  CHECK(e.restart_count == 2);

  // The config fills what the environment leaves out.
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  ptune::config::DistConfig cfg;
  cfg.master_addr = "head";
  cfg.master_port = 4321;
  e = ptune::system::parse_environment(getenv_of(env), cfg);
  CHECK(e.master_addr == "head");
  CHECK(e.master_port == 4321);
  CHECK_THROWS_WITH(ptune::system::parse_environment(getenv_of(env)), Catch::Contains("MASTER_ADDR"));

  CHECK_THROWS_WITH(
      ptune::system::parse_environment(getenv_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})),
      Catch::Contains("RANK=2 must be in [0, 2)"));
  CHECK_THROWS_WITH(ptune::system::parse_environment(getenv_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("RANK='x' is not an integer"));
  CHECK_THROWS_WITH(ptune::system::parse_environment(getenv_of({{"WORLD_SIZE", "2"}})),
                    Catch::Contains("RANK is not"));
  // Without MASTER_ADDR the rank queries still see the world (the address may come from
  // dist.master_addr when the group is joined); only joining needs it.
  CHECK_THROWS_WITH(ptune::system::parse_environment(getenv_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("no rendezvous address"));
  e = ptune::system::parse_environment(getenv_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), {},
                                       /*need_address=*/false);
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
  CHECK(e.master_addr.empty());
  // A world of one is a single process.
  e = ptune::system::parse_environment(getenv_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  CHECK_FALSE(e.distributed());
  CHECK(e.master_addr.empty());
}

TEST_CASE("dist: Slurm variables", "[dist]") {
  Env env = {{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "16"},
             {"SLURM_STEP_NUM_TASKS", "8"},
             {"SLURM_LOCALID", "1"},
             {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
             {"SLURM_STEP_NODELIST", "gpu[03-04,07]"},
             {"SLURM_JOB_NODELIST", "gpu[01-09]"}};
  auto e = ptune::system::parse_environment(getenv_of(env));
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);  // the step's tasks, not the allocation's
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "gpu03");
  CHECK(e.master_port == 29500);

  env["MASTER_ADDR"] = "10.1.2.3";
  CHECK(ptune::system::parse_environment(getenv_of(env)).master_addr == "10.1.2.3");
  env.erase("MASTER_ADDR");
  ptune::config::DistConfig cfg;
  cfg.master_addr = "login2";
  CHECK(ptune::system::parse_environment(getenv_of(env), cfg).master_addr == "login2");

  CHECK(ptune::system::first_slurm_host("a,b") == "a");
  CHECK(ptune::system::first_slurm_host("rack[2-3]-n[08-12],x") == "rack2-n08");
  CHECK(ptune::system::first_slurm_host("node-[1,5]") == "node-1");
  CHECK(ptune::system::first_slurm_host("") == "");

  // An allocation without srun (no SLURM_PROCID) is not a world; neither is one task.
  CHECK_FALSE(ptune::system::parse_environment(getenv_of({{"SLURM_NTASKS", "4"}})).distributed());
  CHECK_FALSE(ptune::system::parse_environment(getenv_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}))
                  .distributed());
  CHECK_THROWS_WITH(
      ptune::system::parse_environment(getenv_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}})),
      Catch::Contains("SLURM_PROCID=4 must be in [0, 4)"));
}

TEST_CASE("dist: one process answers as rank 0 of 1", "[dist]") {
  auto e = ptune::system::parse_environment(getenv_of({}));
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK_FALSE(e.distributed());
  dist::Group single;
  CHECK(single.rank() == 0);
  CHECK(single.size() == 1);
  at::Tensor t = torch::tensor({1.0, 2.0});
  single.all_reduce_sum(t);
  CHECK(torch::equal(t, torch::tensor({1.0, 2.0})));
  CHECK(single.max({3.0}) == std::vector<double>{3.0});
  single.barrier();
  CHECK(dist::resolve_backend(ptune::config::Backend::kAuto, c10::Device(c10::kCPU)) ==
        ptune::config::Backend::kGloo);
  CHECK_THROWS_WITH(dist::resolve_backend(ptune::config::Backend::kNccl, c10::Device(c10::kCPU)),
                    Catch::Contains("needs a CUDA device"));
}

TEST_CASE("dist: Gloo collectives between 2 ranks", "[dist]") {
  std::vector<std::vector<double>> sums(2), maxes(2);
  std::vector<at::Tensor> broadcast(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::Group> g) {
    sums[rank] = g->sum({1.0 + rank, 10.0});
    maxes[rank] = g->max({static_cast<double>(rank), -static_cast<double>(rank)});
    std::vector<at::Tensor> ts{torch::full({3}, static_cast<float>(rank + 5))};
    g->broadcast(ts, 1);
    broadcast[rank] = ts[0];
    g->barrier();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(sums[r] == std::vector<double>{3.0, 20.0});
    CHECK(maxes[r] == std::vector<double>{1.0, 0.0});
    CHECK(torch::equal(broadcast[r], torch::full({3}, 6.0f)));
  }
}

TEST_CASE("dist: buckets in reverse parameter order with a small first one", "[dist]") {
  std::vector<at::Tensor> params;
  for (int i = 0; i < 5; ++i)
    params.push_back(torch::zeros({256, 1024}, torch::requires_grad()));  // 1 MiB each
  params.push_back(torch::zeros({4}));                                    // no grad: not synced
  dist::GradSync sync(params, std::make_shared<dist::Group>(), /*bucket_mb=*/2.0, /*first_bucket_mb=*/1.0);
  CHECK(sync.buckets() == std::vector<std::vector<size_t>>{{4}, {3, 2}, {1, 0}});
  CHECK_THROWS_AS(dist::GradSync(params, std::make_shared<dist::Group>(), 0.0), std::invalid_argument);
}

TEST_CASE("dist: 2 ranks train to the parameters of one process on the global batch", "[dist]") {
  // ResNet-18 with BatchNorm frozen (eval mode: running statistics from the weights file), so
  // that the per-rank batch statistics cannot make the runs differ. Rank 1 starts from other
  // weights: the broadcast from rank 0 must replace them.
  OneThread one_thread;
  TempDir dir;
  auto cfg = tiny_config(/*batch per rank=*/4);
  cfg.model.weights = frozen_bn_weights(dir, cfg);
  cfg.dist.bucket_mb = 2.0;  // several buckets, all-reduced during backward
  const int steps = 3;

  auto reference_cfg = cfg;
  reference_cfg.loader.batch_size = 8;  // the global batch
  const auto reference = train_shard(reference_cfg, 0, 1, nullptr, steps);

  std::vector<std::vector<at::Tensor>> ranks(2);
  std::vector<dist::GradSyncStats> stats(2);
  auto other_weights = ptune::models::read_state_dict(*cfg.model.weights);
  for (auto& [name, t] : other_weights) t = t + 0.5;
  ptune::models::write_state_dict(dir.file("other.pt"), other_weights);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::Group> g) {
    auto c = cfg;
    if (rank == 1) c.model.weights = dir.file("other.pt");
    ranks[rank] = train_shard(c, rank, 2, g, steps, nullptr, &stats[rank]);
  });

  CHECK(bitwise_equal(ranks[0], ranks[1]));  // every rank holds the same parameters
  // Exactly one process's result from the same halves as two micro-batches (train_halves: the
  // all-reduce adds the same halved gradients), and near the global batch's: rounding apart
  // (each half's reductions in another order, perhaps other oneDNN kernels for 4 than for 8),
  // far below the update, where a fault (a sum not averaged, the wrong shard, weights not
  // broadcast) is of the update's own size.
  CHECK(bitwise_equal(ranks[0], train_halves(cfg, steps)));
  const auto init = train_shard(reference_cfg, 0, 1, nullptr, 0);
  const double update = max_abs_diff(init, reference);
  const double diff = max_abs_diff(ranks[0], reference);
  INFO("max |data parallel - one process| = " << diff << ", largest update " << update);
  CHECK(update > 1e-3);
  CHECK(diff < 1e-2 * update);
  // Every bucket started its all-reduce during backward (overlap), none waited for finish().
  for (const auto& s : stats) {
    CHECK(s.syncs == steps);
    CHECK(s.buckets_in_backward > 2 * steps);
    CHECK(s.buckets_in_finish == 0);
  }
}

TEST_CASE("dist: accumulation with no_sync equals the large-batch gradient", "[dist]") {
  OneThread one_thread;
  TempDir dir;
  auto cfg = tiny_config(/*micro-batch per rank=*/4);
  cfg.model.weights = frozen_bn_weights(dir, cfg);
  cfg.optim.momentum = 0.0;  // one SGD step: parameters move by exactly lr * gradient
  cfg.dist.accumulate = 2;

  auto reference_cfg = cfg;
  reference_cfg.loader.batch_size = 16;  // 2 ranks x 2 micro-steps x 4
  reference_cfg.dist.accumulate = 1;
  const auto init = train_shard(reference_cfg, 0, 1, nullptr, 0);
  const auto reference = train_shard(reference_cfg, 0, 1, nullptr, 2);

  std::vector<std::vector<at::Tensor>> ranks(2), first_grads(2);
  std::vector<dist::GradSyncStats> stats(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::Group> g) {
    ranks[rank] = train_shard(cfg, rank, 2, g, /*micro-steps=*/4, &first_grads[rank], &stats[rank]);
  });
  // After the first micro-step (no_sync) each rank holds its own local gradient.
  CHECK_FALSE(bitwise_equal(first_grads[0], first_grads[1]));
  for (const auto& s : stats) CHECK(s.syncs == 2);  // one all-reduce per optimizer step
  CHECK(bitwise_equal(ranks[0], ranks[1]));
  // The gradient step (params - init) of the accumulated run equals the large batch's.
  std::vector<at::Tensor> step_dp, step_ref;
  for (size_t i = 0; i < init.size(); ++i) {
    step_dp.push_back(ranks[0][i] - init[i]);
    step_ref.push_back(reference[i] - init[i]);
  }
  const double diff = max_abs_diff(step_dp, step_ref);
  const double update = max_abs_diff(init, reference);
  INFO("max |accumulated step - large-batch step| = " << diff << ", largest update " << update);
  CHECK(update > 1e-3);
  // Rounding apart (micro-batch sums added in another order; batches of 4 against 16 may take
  // other oneDNN kernels), far below the update; a fault (no_sync's gradients dropped or
  // all-reduced twice, the mean not taken over the micro-steps) is of the update's own size.
  CHECK(diff < 1e-2 * update);
}

namespace {

/// Two Gloo ranks against one process on the doubled batch for `arch` (eval mode: BatchNorm
/// frozen, dropout and stochastic depth off): 2 steps; the update each made, compared
/// relative to the update's largest entry.
void check_arch_data_parallel(const std::string& arch, int64_t image_size) {
  OneThread one_thread;
  TempDir dir;
  auto cfg = tiny_config(/*batch per rank=*/2);
  cfg.model.arch = arch;
  cfg.data.image_size = image_size;
  cfg.data.num_samples = 16;
  cfg.model.weights = frozen_bn_weights(dir, cfg);
  const int steps = 2;
  auto reference_cfg = cfg;
  reference_cfg.loader.batch_size = 4;
  const auto init = train_shard(reference_cfg, 0, 1, nullptr, 0);
  const auto reference = train_shard(reference_cfg, 0, 1, nullptr, steps);
  std::vector<std::vector<at::Tensor>> ranks(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::Group> g) {
    ranks[rank] = train_shard(cfg, rank, 2, g, steps);
  });
  CHECK(bitwise_equal(ranks[0], ranks[1]));
  std::vector<at::Tensor> step_dp, step_ref;
  for (size_t i = 0; i < init.size(); ++i) {
    step_dp.push_back(ranks[0][i] - init[i]);
    step_ref.push_back(reference[i] - init[i]);
  }
  const double update = max_abs_diff(step_ref, std::vector<at::Tensor>(init.size(), at::zeros({})));
  const double diff = max_abs_diff(step_dp, step_ref);
  INFO(arch << ": max |data-parallel update - one-process update| = " << diff << ", largest update "
            << update);
  CHECK(update > 1e-4);
  // Exactly what one process computes from the same halves as two micro-batches: each half's
  // gradient from the same kernels on the same batch size, halved (a power of two: exact) and
  // summed, as the all-reduce sums the ranks' halved gradients (a + b == b + a in IEEE float).
  CHECK(bitwise_equal(ranks[0], train_halves(cfg, steps)));
  // Against the doubled batch only rounding differs: each half's reductions run in another order,
  // and oneDNN may take other kernels for a batch of 2 than for 4 (other blocking, another
  // accumulation order), which no fixed fraction of ulps bounds on every CPU. A fault in the data
  // parallelism is of the update's own size (a sum not averaged doubles it; a rank on the wrong
  // shard trains on other samples), so the bound is a fraction of the update far above rounding's
  // and far below a fault's.
  CHECK(diff < 1e-2 * update);
}

}  // namespace

TEST_CASE("dist: 2 ranks equal one process on the doubled batch: resnet34, resnext50_32x4d, wide_resnet50_2",
          "[dist][zoo]") {
  for (const char* arch : {"resnet34", "resnext50_32x4d", "wide_resnet50_2"})
    check_arch_data_parallel(arch, 16);
}
TEST_CASE("dist: 2 ranks equal one process on the doubled batch: resnet101, resnet152", "[dist][zoo]") {
  for (const char* arch : {"resnet101", "resnet152"}) check_arch_data_parallel(arch, 16);
}
TEST_CASE("dist: 2 ranks equal one process on the doubled batch: mobilenet_v3_large", "[dist][zoo]") {
  check_arch_data_parallel("mobilenet_v3_large", 32);
}
TEST_CASE("dist: 2 ranks equal one process on the doubled batch: convnext_tiny", "[dist][zoo]") {
  check_arch_data_parallel("convnext_tiny", 32);
}
TEST_CASE("dist: 2 ranks equal one process on the doubled batch: vit_b_16", "[dist][zoo]") {
  check_arch_data_parallel("vit_b_16", 16);
}

TEST_CASE("dist: ptune launch trains on 2 ranks and only rank 0 prints and writes", "[dist]") {
  TempDir dir;
  const auto cfg = tiny_file(dir, 2);
  auto r = ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- train " +
                            cfg + " --save-weights " + dir.file("w.pt"));
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  // stdout is rank 0's output as one process prints it; stderr lines name their rank.
  CHECK(r.out.rfind("trained 2 steps", 0) == 0);
  CHECK(r.out.find("[rank") == std::string::npos);
  CHECK(r.err.find("[rank 0] step 2/2") != std::string::npos);
  CHECK(r.err.find("[rank 1] step") == std::string::npos);  // only rank 0 prints progress
  CHECK(std::filesystem::exists(dir.file("w.pt")));
  CHECK(std::filesystem::exists(dir.file("ckpt/tiny-step2.pt")));

  // Evaluation is sharded: 37 samples split 19 + 18, the totals equal one process's.
  const std::string eval =
      " eval " + cfg + " --weights " + dir.file("w.pt") + " --format json --set data.num_samples=37";
  auto one = ptune::test::run(ptune::test::exe() + eval);
  auto two = ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 --" +
                              eval);  // stdout as is
  INFO(one.err << two.err);
  REQUIRE(one.code == 0);
  REQUIRE(two.code == 0);
  auto e1 = nlohmann::json::parse(one.out), e2 = nlohmann::json::parse(two.out);
  CHECK(e1["samples"] == 37);
  CHECK(e2["samples"] == 37);
  CHECK(e2["top1"] == e1["top1"]);
  // The loss within rounding: the ranks' last batches (3 and 2 samples) against one process's
  // (1) may take other kernels that sum in another order, a relative error of about sqrt(K) u
  // per layer (K up to 4,608 products a sum: 4e-6) and at most K u (2.7e-4). A sharding fault
  // shows in the sample count (checked exactly) and moves the mean loss by a sample's share,
  // percent, so the bound sits between the two.
  CHECK(e2["loss"].get<double>() == Approx(e1["loss"].get<double>()).epsilon(1e-3));
  // On request, stdout lines name their rank too; --no-prefix leaves stderr's bare.
  auto tagged =
      ptune::test::run(ptune::test::exe() +
                       " launch --nproc-per-node 2 --master-port 0 --prefix-stdout --no-prefix --" + eval);
  INFO(tagged.out << tagged.err);
  CHECK(tagged.code == 0);
  CHECK(tagged.out.rfind("[rank 0] {\"loss\":", 0) == 0);
  CHECK(tagged.err.find("[rank") == std::string::npos);

  // A sweep row run data-parallel: results name the world, throughput counts both ranks (the row
  // ends after its first few windows: target_ci_pct 100).
  auto s =
      ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- sweep " + cfg +
                       " --set measure.target_ci_pct=100 --out " + dir.file("r.json") + " --format json");
  INFO(s.out << s.err);
  CHECK(s.code == 0);
  // stdout is one JSON document, as `| jq` needs it.
  CHECK(nlohmann::json::parse(s.out)["environment"]["world_size"] == 2);
  auto results = nlohmann::json::parse(ptune::test::read_file(dir.file("r.json")));
  CHECK(results["environment"]["world_size"] == 2);
  CHECK(results["rows"][0]["status"] == "ok");
  const double ms = results["rows"][0]["ms_per_step"], sps = results["rows"][0]["samples_per_s"];
  CHECK(sps == Approx(2 * 4 * 1000.0 / ms).epsilon(0.01));

  // The process group is joined once: a row cannot move it to other settings.
  const std::string rows = dir.write("rows.json", R"({
  "name": "rows", "device": "cpu", "cpu_threads": 1, "data": {"num_samples": 64, "image_size": 16},
  "loader": {"batch_size": 4}, "measure": {"warmup_steps": 1, "steps": 1, "repeats": 1},
  "sweep": [{"name": "a"}, {"name": "b", "set": {"dist.timeout_s": 99}}]})");
  auto t = ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- sweep " +
                            rows + " --out " + dir.file("rows-out.json"));
  INFO(t.out << t.err);
  auto rr = nlohmann::json::parse(ptune::test::read_file(dir.file("rows-out.json")));
  CHECK(rr["rows"][0]["status"] == "ok");
  CHECK(rr["rows"][1]["status"].get<std::string>().find("joined its process group as gloo on cpu") !=
        std::string::npos);
}

TEST_CASE("dist: a profiled sweep under ptune launch writes one trace per rank with distributedInfo",
          "[dist]") {
  TempDir dir;
  const std::string cfg = dir.write("prof.json", R"({
  "name": "prof", "device": "cpu", "cpu_threads": 1, "data": {"num_samples": 64, "image_size": 16},
  "loader": {"batch_size": 4}, "measure": {"warmup_steps": 1, "steps": 1, "profile_steps": 2,
  "out_dir": ")" + dir.file("runs") + R"("}})");
  auto r = ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- sweep " +
                            cfg + " --profile --out " + dir.file("r.json"));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const std::string folder = dir.file("runs/prof/00-config");  // without a sweep: one row, "config"
  std::map<int, std::string> by_rank;                          // rank -> trace file
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    const std::string path = e.path().string();
    auto trace = nlohmann::json::parse(ptune::test::read_file(path));
    INFO(path);
    REQUIRE(trace.contains("distributedInfo"));
    CHECK(trace["distributedInfo"]["backend"] == "gloo");
    CHECK(trace["distributedInfo"]["world_size"] == 2);
    CHECK(trace["traceName"] == path);
    CHECK(!trace.contains("ERROR"));
    CHECK(trace["ptune"]["row"] == "config");
    int steps = 0;
    for (auto& ev : trace["traceEvents"])
      steps +=
          ev.value("name", "").rfind("ProfilerStep#", 0) == 0 && ev.value("cat", "") == "user_annotation";
    CHECK(steps == 2);
    by_rank[trace["distributedInfo"]["rank"].get<int>()] = path;
  }
  REQUIRE(by_rank.size() == 2);
  CHECK(by_rank.count(0) == 1);
  CHECK(by_rank.count(1) == 1);
  // The results name rank 0's trace (the others lie beside it).
  auto results = nlohmann::json::parse(ptune::test::read_file(dir.file("r.json")));
  CHECK(results["rows"][0]["trace"] == by_rank[0]);
}

TEST_CASE("dist: torchrun --no-python runs ptune data-parallel", "[dist]") {
  // torchrun's agent serves the TCPStore (TORCHELASTIC_USE_AGENT_STORE=True): ranks connect.
  const std::string python = PTUNE_PYTHON;
  // Not a silent pass: without Python this test cannot run (scripts/setup configures it).
  if (python.empty()) FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot test torchrun");
  TempDir dir;
  const auto cfg = tiny_file(dir, 2);
  auto r = ptune::test::run("'" + python +
                            "' -m torch.distributed.run --no-python --standalone --nproc-per-node 2 " +
                            ptune::test::exe() + " train " + cfg);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("trained 2 steps") != std::string::npos);
  CHECK(r.out.find("trained 2 steps", r.out.find("trained 2 steps") + 1) ==
        std::string::npos);  // rank 0 only
  CHECK(std::filesystem::exists(dir.file("ckpt/tiny-step2.pt")));
}

TEST_CASE("dist: ptune launch stops every rank when one is killed and names it", "[dist]") {
  TempDir dir;
  const auto cfg = tiny_file(dir, 100000);
  const pid_t launcher =
      spawn({"launch", "--nproc-per-node", "2", "--master-port", "0", "--grace", "3", "--", "train", cfg},
            dir.file("out"), dir.file("err"));
  REQUIRE(wait_for_text(dir.file("err"), "[rank 0] step 2/", 60));
  auto children = children_with(launcher, "RANK");
  REQUIRE(children.size() == 2);
  pid_t rank1 = 0;
  for (auto& [pid, rank] : children)
    if (rank == "1") rank1 = pid;
  REQUIRE(rank1 > 0);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(rank1, SIGKILL);
  const auto code = wait_for(launcher, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string err = ptune::test::read_file(dir.file("err"));
  INFO(err);
  REQUIRE(code);  // no hang
  CHECK(*code == 1);
  CHECK(took < 20);
  CHECK(err.find("ptune: error: rank 1 was killed by signal 9 (SIGKILL); stopped the others") !=
        std::string::npos);
  CHECK(children_with(launcher, "RANK").empty());  // nothing left behind
}

TEST_CASE("dist: ptune launch reports a rank's exit status and forwards Ctrl-C", "[dist]") {
  TempDir dir;
  // Every rank fails the same way: the launcher names one and exits with its status.
  auto bad = ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- train " +
                              dir.write("bad.json", R"({"model": {"arch": "resnet19"}})"));
  CHECK(bad.code == 2);
  // One line: the launcher's, with the rank's error (the same error of the other rank not again).
  CHECK_THAT(bad.err,
             Catch::Matches("ptune: error: rank [01] exited with status 2: [^\n]*model.arch: unknown "
                            "value 'resnet19'[^\n]*\n"));
  // No command after --.
  CHECK(ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2").code == 2);
  // A program's rows are not run on every rank.
  const auto program =
      ptune::test::run(ptune::test::exe() + " launch --nproc-per-node 2 --master-port 0 -- sweep " +
                       dir.write("prog.json", R"({"program": {"command": ["true"]}})"));
  CHECK(program.code == 2);
  CHECK_THAT(
      program.err,
      Catch::Matches("ptune: error: rank [01] exited with status 2: program.command: a program's rows are "
                     "timed by one ptune sweep, not by ptune launch's 2 ranks \\(each would start the "
                     "program\\): run ptune sweep alone, with the program's own launcher \\(torchrun "
                     "\\.\\.\\.\\) in program.command(; stopped the others)?\n"));

  // Ctrl-C: forwarded to both ranks, which agree on a step, checkpoint (rank 0) and stop.
  const auto cfg = tiny_file(dir, 100000);
  const pid_t launcher = spawn({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train", cfg},
                               dir.file("out"), dir.file("err"));
  REQUIRE(wait_for_text(dir.file("err"), "[rank 0] step 2/", 60));
  ::kill(launcher, SIGINT);
  const auto code = wait_for(launcher, 60);
  const std::string err = ptune::test::read_file(dir.file("err"));
  INFO(err);
  REQUIRE(code);
  CHECK(*code == 130);
  CHECK(err.find("ptune: interrupted") != std::string::npos);
  int checkpoints = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.file("ckpt")))
    checkpoints += f.path().extension() == ".pt";
  CHECK(checkpoints == 1);
}

TEST_CASE("dist: the rendezvous store listens on the master address only", "[dist]") {
  // LibTorch's TCPStore listens on every interface unless handed a listening socket
  // (masterListenFd): rank 0 hands it one bound to MASTER_ADDR.
  const int fd = dist::listen_on("127.0.0.1", 0);
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
  CHECK(std::string(ip) == "127.0.0.1");
  const int port = ntohs(addr.sin_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.numWorkers = 2;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(10);
  o.masterListenFd = fd;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  c10d::TCPStoreOptions c = o;
  c.isServer = false;
  c.masterListenFd = std::nullopt;
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", c);
  client->set("k", std::vector<uint8_t>{7});
  CHECK(server->get("k") == std::vector<uint8_t>{7});

  // 192.0.2.1 (TEST-NET-1, never contacted: bind only) is no address of this machine.
  CHECK_THROWS_WITH(
      dist::listen_on("192.0.2.1", 29500),
      "cannot listen on 192.0.2.1:29500: Cannot assign requested address (not an address of this machine)");
  CHECK_THROWS_WITH(dist::listen_on("no-such-host.invalid", 29500),
                    Catch::StartsWith("cannot resolve 'no-such-host.invalid': "));
  // Gloo binds the address that routes to the master: loopback for a loopback master.
  CHECK(dist::local_address_towards("127.0.0.1", 29500) == "127.0.0.1");
  CHECK(dist::local_address_towards("no-such-host.invalid", 29500).empty());
}

TEST_CASE("dist: ptune launch across nodes needs an address and a port every node shares", "[dist]") {
  ptune::system::LaunchOptions o;
  o.args = {"schema"};
  o.nnodes = 2;
  o.master_port = 29500;
  CHECK_THROWS_WITH(dist::launch(o),
                    "launch: --nnodes 2 needs --master-addr: the address of node 0 that every node reaches");
  o.master_addr = "10.0.0.1";
  o.master_port = 0;
  CHECK_THROWS_WITH(
      dist::launch(o),
      "launch: --nnodes 2 needs one --master-port for every node; 0 (any free port) only works on one node");
  o.master_port = 29500;
  o.node_rank = 2;
  CHECK_THROWS_WITH(dist::launch(o), "launch: --node-rank 2 is not in [0, 2) (--nnodes 2)");
  o.node_rank = 0;
  o.nnodes = 0;
  CHECK_THROWS_WITH(dist::launch(o), "launch: --nnodes 0 must be at least 1");
}
