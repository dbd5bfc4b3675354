// Every architecture against torchvision itself (test/data/zoo_io.py writes
// the reference at a small size): outputs in eval and training mode, every gradient after one
// backward, the state after one SGD step, parameter counts, strict weight loads both ways,
// channels_last against torchvision in channels_last, ptune's trainer in bf16 autocast and in
// channels_last against PyTorch's own runs of the same weights and batch, and bf16 autocast
// training through ptune's trainer.
// Each architecture is its own test case (its own process under ctest).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "engine/sgd.hpp"
#include "engine/trainer.hpp"
#include "models/model.hpp"
#include "models/state_dict_io.hpp"
#include "models/vit.hpp"
#include "test_util.hpp"

using namespace ptune::models;

namespace {

struct OneThread {
  int before = at::get_num_threads();
  OneThread() { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(before); }
};

/// max |a - b| relative to max |b|, or to `floor` when that is larger: one number per tensor,
/// insensitive to entries near zero.
double rel_err(const at::Tensor& a, const at::Tensor& b, double floor = 1e-30) {
  const at::Tensor x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble).contiguous();
  const double scale = std::max(y.abs().max().item<double>(), floor);
  return (x - y).abs().max().item<double>() / scale;
}

/// The gradients' scale below which a tensor's own largest entry is no yardstick: 1e-3 of the
/// largest gradient entry of the model. Some gradients are zero in exact arithmetic and only
/// rounding in float32 (a BatchNorm bias whose output feeds a 1x1 conv and a training-mode
/// BatchNorm: that BatchNorm's backward removes the per-channel mean, so the bias gradient sums
/// to 0); relative to themselves their differences are noise of any size.
double grad_floor(const std::map<std::string, at::Tensor>& grads) {
  double m = 0;
  for (const auto& [k, g] : grads) m = std::max(m, g.abs().max().item<double>());
  return 1e-3 * m;
}

/// The architecture under test at the reference's size: vit_tiny is torchvision's
/// VisionTransformer at 32x32 (8x8 patches, 2 layers, 2 heads, hidden 32, MLP 64), the same
/// classes as vit_b_16; the others are ptune's model.arch at 32x32.
Model build(const std::string& arch) {
  if (arch == "vit_tiny") {
    ViTOptions o;
    o.image_size = 32;
    o.patch_size = 8;
    o.num_layers = 2;
    o.num_heads = 2;
    o.hidden_dim = 32;
    o.mlp_dim = 64;
    return Model(std::shared_ptr<ModelImpl>(std::make_shared<VisionTransformerImpl>(arch, o, 10)));
  }
  return make(arch, 10, 32);
}

std::map<std::string, at::Tensor> read_map(const std::string& path) {
  std::map<std::string, at::Tensor> m;
  for (auto& [k, v] : read_state_dict(path)) m[k] = v;
  return m;
}

/// Loads `dir`/weights.pt into a fresh model; channels_last converts the 4-d parameters as the
/// trainer does.
Model loaded(const std::string& arch, const ptune::test::TempDir& dir, bool channels_last = false) {
  Model m = build(arch);
  REQUIRE(load_into(*m, read_state_dict(dir.file("weights.pt")), "weights.pt").empty());
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : m->parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  return m;
}

struct Tolerances {
  double out = 1e-5;   // eval and training outputs
  double grad = 1e-5;  // each gradient, relative to its largest entry
  double step = 1e-5;  // each tensor after one SGD step
};

/// The training-mode forward with the seed zoo_io.py sets (dropout and stochastic depth draw
/// the same rows on both sides), the cross-entropy and its backward.
at::Tensor train_forward_backward(Model& m, const at::Tensor& x, const at::Tensor& labels) {
  m->train();
  torch::manual_seed(7);
  at::Tensor out = m->forward(x);
  torch::nn::functional::cross_entropy(out, labels).backward();
  return out.detach();
}

/// The first step's loss of ptune's trainer (its autocast scope, its loss in float32, the
/// parameters in channels_last as it converts them) from `weights` on the batch (x, labels).
double trainer_loss(const std::string& arch, const std::string& weights, bool bf16, bool channels_last,
                    const at::Tensor& x, const at::Tensor& labels) {
  ptune::config::ExperimentConfig cfg;
  cfg.device = "cpu";
  cfg.model.arch = arch;
  cfg.model.num_classes = 10;
  cfg.model.weights = weights;
  cfg.model.channels_last = channels_last;
  cfg.data.image_size = 32;
  cfg.optim.amp = bf16 ? ptune::config::Amp::kBf16 : ptune::config::Amp::kOff;
  ptune::engine::Trainer trainer(cfg, c10::Device(c10::kCPU));
  torch::manual_seed(7);  // zoo_io.py's TRAIN_SEED before the forward: the same dropout rows
  return trainer.step(channels_last ? x.contiguous(at::MemoryFormat::ChannelsLast) : x, labels)
      .item<double>();
}

/// ptune's trainer in bf16 autocast and in channels_last against PyTorch's own runs of the same
/// weights and batch on this CPU. bf16 rounds and accumulates differently on AVX2 (emulated),
/// AVX512-BF16 and AMX, and the NHWC kernels sum in another order than the NCHW ones, so no
/// fixed tolerance holds on every CPU; the yardstick is this machine's: ptune's bf16 loss lies
/// no farther from PyTorch's bf16 loss than PyTorch's bf16 loss lies from its fp32 one (or than
/// the two programs' fp32 losses lie apart), and the same for channels_last.
void check_trainer_against_torch(const std::string& arch, const std::string& weights,
                                 std::map<std::string, at::Tensor>& ref) {
  const at::Tensor x = ref["input"], labels = ref["labels"];
  const auto loss = [&](const at::Tensor& out) {
    return torch::nn::functional::cross_entropy(out.to(at::kFloat), labels).item<double>();
  };
  const double tf = loss(ref["train_out"]), tb = loss(ref["bf16_train_out"]), tcl = loss(ref["cl_train_out"]);
  const double pf = trainer_loss(arch, weights, false, false, x, labels);
  const double pb = trainer_loss(arch, weights, true, false, x, labels);
  const double pcl = trainer_loss(arch, weights, false, true, x, labels);
  INFO(arch << ": fp32 loss ptune " << pf << ", PyTorch " << tf << "; bf16 ptune " << pb << ", PyTorch " << tb
            << "; channels_last ptune " << pcl << ", PyTorch " << tcl);
  CHECK(tb != tf);  // PyTorch's autocast ran in bf16...
  CHECK(pb != pf);  // ...and ptune's did
  const double fp32_apart = std::abs(pf - tf);
  CHECK(std::abs(pb - tb) <= std::max(std::abs(tb - tf), fp32_apart));
  CHECK(std::abs(pcl - tcl) <= std::max(std::abs(tcl - tf), fp32_apart));
}

void check_against_torchvision(const std::string& arch, const Tolerances& tol) {
  const std::string python = PTUNE_PYTHON;
  if (python.empty())
    FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot make torchvision's reference");
  OneThread one_thread;
  ptune::test::TempDir dir;
  const std::string script = std::string(PTUNE_TEST_DATA) + "/zoo_io.py";
  // One Python process exports, then checks ptune's weights when told: torch imported once.
  ptune::test::Coprocess py("'" + python + "' '" + script + "' export-check " + arch + " " +
                            dir.path.string());
  {
    const auto exported = py.receive();
    INFO(py.err());
    REQUIRE(exported == std::optional<std::string>("exported"));
  }
  auto ref = read_map(dir.file("ref.pt"));
  const at::Tensor x = ref["input"], labels = ref["labels"];

  Model model = loaded(arch, dir);
  // Parameter count, and ptune's weights back into torchvision with strict=True.
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  CHECK(params == ref["params"].item<int64_t>());
  write_state_dict(dir.file("ptune_weights.pt"), state_dict(*model));
  {
    CHECK(py.send("check"));
    const auto checked = py.receive();
    const int code = py.finish();
    INFO(checked.value_or("(nothing)") << "\n" << py.err());
    CHECK(code == 0);
    CHECK(checked.value_or("").rfind("ok ", 0) == 0);
  }

  {
    model->eval();
    torch::NoGradGuard no_grad;
    const double e = rel_err(model->forward(x), ref["eval_out"]);
    INFO("eval output relative error " << e);
    CHECK(e < tol.out);
  }
  const at::Tensor train_out = train_forward_backward(model, x, labels);
  const double e_train = rel_err(train_out, ref["train_out"]);
  INFO("training output relative error " << e_train);
  CHECK(e_train < tol.out);
  double worst_grad = 0;
  std::string worst_name;
  std::map<std::string, at::Tensor> grads, ref_grads;
  for (const auto& p : model->named_parameters()) {
    REQUIRE(p.value().grad().defined());
    grads[p.key()] = p.value().grad().clone();
    ref_grads[p.key()] = ref["grad." + p.key()];
  }
  const double floor = grad_floor(ref_grads);
  for (const auto& [name, g] : grads) {
    const double e = rel_err(g, ref_grads[name], floor);
    if (e > worst_grad) worst_grad = e, worst_name = name;
  }
  {
    INFO("largest gradient relative error " << worst_grad << " (" << worst_name << ")");
    CHECK(worst_grad < tol.grad);
  }
  // One step of ptune's SGD (the fused kernel the trainer runs) against torch.optim.SGD.
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  ptune::engine::fused_sgd_step(sgd);
  double worst_step = 0;
  std::string worst_step_name;
  size_t compared = 0;
  for (const auto& [name, t] : state_dict(*model)) {
    const auto it = ref.find("after." + name);
    REQUIRE(it != ref.end());
    ++compared;
    const double e =
        t.scalar_type() == at::kLong ? (t.equal(it->second) ? 0.0 : 1.0) : rel_err(t, it->second);
    if (e > worst_step) worst_step = e, worst_step_name = name;
  }
  CHECK(compared == state_dict(*model).size());
  {
    INFO("largest relative error after one SGD step " << worst_step << " (" << worst_step_name << ")");
    CHECK(worst_step < tol.step);
  }

  // channels_last against torchvision's channels_last run on the same weights and input. The
  // NHWC kernels sum in another order than the NCHW ones, and training-mode BatchNorm over 4
  // values per channel amplifies that rounding by up to a few hundred percent on one tensor,
  // differently on every CPU (AVX2 against AVX-512 kernels). The yardstick is therefore this
  // machine's own: ptune in channels_last may differ from PyTorch in channels_last by no more
  // than PyTorch's two layouts differ from each other (its NCHW reference against its
  // channels_last one), per tensor and over all gradients; the NCHW tolerances (tol.grad,
  // tol.out) where PyTorch's layouts agree more closely than that.
  Model cl = loaded(arch, dir, /*channels_last=*/true);
  const at::Tensor cl_out = train_forward_backward(cl, x.contiguous(at::MemoryFormat::ChannelsLast), labels);
  {
    const double e = rel_err(cl_out, ref["cl_train_out"]),
                 torch_e = rel_err(ref["cl_train_out"], ref["train_out"]);
    INFO("channels_last output relative error " << e << "; PyTorch's layouts differ by " << torch_e);
    CHECK(e <= std::max(torch_e, tol.out));
  }
  double worst_cl = 0, worst_torch = 0, largest = 0;
  std::string worst_cl_name, largest_name;
  double diff2 = 0, torch_diff2 = 0, norm2 = 0;
  for (const auto& p : cl->named_parameters()) {
    const at::Tensor mine = p.value().grad(), theirs = ref["cl_grad." + p.key()],
                     theirs_nchw = ref_grads[p.key()];
    REQUIRE(theirs.defined());
    const double e = rel_err(mine, theirs, floor), torch_e = rel_err(theirs, theirs_nchw, floor);
    if (e > largest) largest = e, largest_name = p.key();
    if (e > std::max(torch_e, tol.grad) && e - torch_e > worst_cl - worst_torch)
      worst_cl = e, worst_torch = torch_e, worst_cl_name = p.key();
    diff2 += (mine.to(at::kDouble) - theirs.to(at::kDouble)).pow(2).sum().item<double>();
    torch_diff2 += (theirs.to(at::kDouble) - theirs_nchw.to(at::kDouble)).pow(2).sum().item<double>();
    norm2 += theirs_nchw.to(at::kDouble).pow(2).sum().item<double>();
  }
  {
    INFO("channels_last largest gradient relative error " << largest << " (" << largest_name << ")");
    INFO("channels_last gradient beyond PyTorch's own layout difference: " << worst_cl_name << " " << worst_cl
                                                                           << " against " << worst_torch);
    CHECK(worst_cl_name.empty());
  }
  const double whole = std::sqrt(diff2 / norm2), torch_whole = std::sqrt(torch_diff2 / norm2);
  {
    INFO("channels_last whole-gradient relative error " << whole << "; PyTorch's layouts differ by "
                                                        << torch_whole);
    CHECK(whole <= std::max(torch_whole, tol.grad));
  }
  // The trainer (a model.arch at 32x32: not the small ViT) in bf16 and in channels_last.
  if (arch != "vit_tiny") check_trainer_against_torch(arch, dir.file("weights.pt"), ref);
}

/// ptune's trainer on `arch` with bf16 autocast and channels_last: the steps run, the losses
/// are finite and the weights move.
void check_trains_bf16(const std::string& arch, int64_t image_size) {
  OneThread one_thread;
  ptune::config::ExperimentConfig cfg;
  cfg.device = "cpu";
  cfg.model.arch = arch;
  cfg.model.num_classes = 10;
  cfg.model.channels_last = true;
  cfg.optim.amp = ptune::config::Amp::kBf16;
  cfg.data.num_samples = 16;
  cfg.data.image_size = image_size;
  cfg.loader.batch_size = 2;
  cfg.optim.lr = 0.01;
  const c10::Device cpu(c10::kCPU);
  ptune::engine::Trainer trainer(cfg, cpu);
  std::vector<at::Tensor> before;
  for (auto& p : trainer.model()->parameters()) before.push_back(p.detach().clone());
  ptune::data::Loader loader(ptune::engine::make_dataset(cfg), ptune::engine::loader_options(cfg, cpu, 0, 1));
  loader.start_epoch(0);
  for (int s = 0; s < 2; ++s) {
    auto batch = loader.next();
    REQUIRE(batch);
    auto [images, labels] = trainer.to_device(*batch);
    const double loss = trainer.step(images, labels).item<double>();
    INFO("step " << s << " loss " << loss);
    CHECK(std::isfinite(loss));
  }
  // Every gradient is there and finite; nearly every weight moved (a few updates are below
  // float32's resolution of the weight: ConvNeXt's blocks start with layer scale 1e-6).
  size_t moved = 0, i = 0;
  for (auto& p : trainer.model()->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().isfinite().all().item<bool>());
    moved += !p.detach().equal(before[i++]);
  }
  CHECK(moved >= before.size() * 8 / 10);
}

}  // namespace

TEST_CASE("zoo: state_dict names, order, shapes and parameter counts equal torchvision's", "[models][zoo]") {
  for (std::string arch : {"resnet34", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2",
                           "mobilenet_v3_large", "convnext_tiny", "vit_b_16"}) {
    INFO(arch);
    std::ifstream in(std::string(PTUNE_TEST_DATA) + "/" + arch + "_keys.txt");
    REQUIRE(in);
    std::string header;
    std::getline(in, header);
    const int64_t expected_params = std::stoll(header.substr(header.rfind("parameters=") + 11));
    std::vector<std::pair<std::string, std::string>> expected;
    std::string name, shape;
    while (in >> name >> shape) expected.emplace_back(name, shape);
    auto model = make(arch, 1000, 224);
    auto mine = state_dict(*model);
    REQUIRE(mine.size() == expected.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      std::string s;
      for (int64_t d = 0; d < mine[i].second.dim(); ++d)
        s += (d ? "x" : "") + std::to_string(mine[i].second.size(d));
      CHECK(mine[i].first == expected[i].first);
      CHECK((s.empty() ? "scalar" : s) == expected[i].second);
    }
    int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    CHECK(params == expected_params);
  }
}

TEST_CASE("zoo: image sizes an arch cannot take are config errors naming both keys",
          "[models][zoo][config]") {
  CHECK(ptune::config::image_size_problem("vit_b_16", 224).empty());
  CHECK(ptune::config::image_size_problem("vit_b_16", 32).empty());
  CHECK_FALSE(ptune::config::image_size_problem("vit_b_16", 100).empty());
  CHECK_FALSE(ptune::config::image_size_problem("convnext_tiny", 16).empty());
  CHECK(ptune::config::image_size_problem("mobilenet_v3_large", 16).empty());
  ptune::config::ExperimentConfig cfg;
  cfg.model.arch = "vit_b_16";
  cfg.data.image_size = 100;
  CHECK_THROWS_WITH(ptune::config::validate(cfg, ""),
                    Catch::StartsWith("data.image_size: 100 does not fit model.arch vit_b_16: "));
  CHECK_THROWS_AS(make("vit_b_16", 10, 100), std::invalid_argument);
  // A head of another size is fine-tuning, for every arch's head.
  auto a = make("mobilenet_v3_large", 1000);
  auto b = make("mobilenet_v3_large", 10);
  CHECK(load_into(*b, state_dict(*a), "imagenet.pt") ==
        "imagenet.pt: the classifier head has shape [1000, 1280] there and [10, 1280] here "
        "(model.num_classes); kept a freshly initialized head");
}

TEST_CASE("zoo: resnet18 equals torchvision", "[zoo][python]") { check_against_torchvision("resnet18", {}); }
TEST_CASE("zoo: resnet34 equals torchvision", "[zoo][python]") { check_against_torchvision("resnet34", {}); }
TEST_CASE("zoo: resnet101 equals torchvision", "[zoo][python]") {
  check_against_torchvision("resnet101", {});
}
TEST_CASE("zoo: resnet152 equals torchvision", "[zoo][python]") {
  check_against_torchvision("resnet152", {});
}
TEST_CASE("zoo: resnext50_32x4d equals torchvision", "[zoo][python]") {
  check_against_torchvision("resnext50_32x4d", {});
}
TEST_CASE("zoo: wide_resnet50_2 equals torchvision", "[zoo][python]") {
  check_against_torchvision("wide_resnet50_2", {});
}
TEST_CASE("zoo: mobilenet_v3_large equals torchvision", "[zoo][python]") {
  check_against_torchvision("mobilenet_v3_large", {});
}
TEST_CASE("zoo: convnext_tiny equals torchvision", "[zoo][python]") {
  check_against_torchvision("convnext_tiny", {});
}
TEST_CASE("zoo: ViT (VisionTransformer, vit_b_16's classes at 32x32) equals torchvision", "[zoo][python]") {
  check_against_torchvision("vit_tiny", {});
}

TEST_CASE("zoo: every arch trains under bf16 autocast with channels_last", "[zoo]") {
  for (auto [arch, size] : std::vector<std::pair<std::string, int64_t>>{{"resnet34", 32},
                                                                        {"resnext50_32x4d", 32},
                                                                        {"mobilenet_v3_large", 32},
                                                                        {"convnext_tiny", 32},
                                                                        {"vit_b_16", 32}}) {
    INFO(arch);
    check_trains_bf16(arch, size);
  }
}
