// ResNet architecture against torchvision's state_dict, and weight exchange with Python.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include "errors.hpp"
#include "models/resnet.hpp"
#include "models/state_dict_io.hpp"
#include "test_util.hpp"

using namespace ptune::models;

namespace {

std::string shape_text(const at::Tensor& t) {
  if (t.dim() == 0) return "scalar";
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "x" : "") + std::to_string(t.size(i));
  return s;
}

/// (name, shape) lines of the committed torchvision key list, and its parameter count.
std::pair<std::vector<std::pair<std::string, std::string>>, int64_t> torchvision_keys(const std::string& arch) {
  std::ifstream in(std::string(PTUNE_TEST_DATA) + "/" + arch + "_keys.txt");
  REQUIRE(in);
  std::string header;
  std::getline(in, header);
  auto eq = header.rfind("parameters=");
  REQUIRE(eq != std::string::npos);
  int64_t params = std::stoll(header.substr(eq + 11));
  std::vector<std::pair<std::string, std::string>> keys;
  std::string name, shape;
  while (in >> name >> shape) keys.emplace_back(name, shape);
  return {keys, params};
}

}  // namespace

TEST_CASE("resnet18/50 state_dict names, order and shapes equal torchvision's", "[models]") {
  for (std::string arch : {"resnet18", "resnet50"}) {
    INFO(arch);
    auto [expected, expected_params] = torchvision_keys(arch);
    auto model = make(arch, 1000);
    auto mine = state_dict(*model);
    REQUIRE(mine.size() == expected.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      CHECK(mine[i].first == expected[i].first);
      CHECK(shape_text(mine[i].second) == expected[i].second);
    }
    int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    CHECK(params == expected_params);
  }
  int64_t p18 = 0;
  for (const auto& p : make("resnet18", 1000)->parameters()) p18 += p.numel();
  CHECK(p18 == 11689512);
}

TEST_CASE("initialization follows torchvision", "[models]") {
  torch::manual_seed(0);
  auto model = make("resnet50", 10);
  // kaiming_normal_(mode=fan_out, relu): std = sqrt(2 / (out_channels * k * k)).
  auto w = model->conv1->weight;
  CHECK(w.mean().item<double>() == Approx(0).margin(0.002));
  CHECK(w.std().item<double>() == Approx(std::sqrt(2.0 / (64 * 49))).epsilon(0.03));
  // Every conv, nested ones too: layer4's last 3x3 conv has 512 * 9 fan-out.
  auto nested = model->layer4->children().back()->named_parameters()["conv2.weight"];
  CHECK(nested.std().item<double>() == Approx(std::sqrt(2.0 / (512 * 9))).epsilon(0.03));
  CHECK(model->bn1->weight.eq(1).all().item<bool>());
  CHECK(model->bn1->bias.eq(0).all().item<bool>());
  // Linear keeps torch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
  CHECK(model->fc->weight.abs().max().item<double>() <= 1.0 / std::sqrt(2048.0));
  auto y = model->forward(torch::randn({2, 3, 64, 64}));
  CHECK(y.sizes() == at::IntArrayRef({2, 10}));
  CHECK_THROWS_WITH(make("resnet19", 10), "unknown architecture 'resnet19'");
}

TEST_CASE("state_dict files round-trip through ptune's writer and reader", "[models]") {
  ptune::test::TempDir dir;
  torch::manual_seed(3);
  auto a = make("resnet18", 10);
  write_state_dict(dir.file("w.pt"), state_dict(*a));
  auto read = read_state_dict(dir.file("w.pt"));
  auto orig = state_dict(*a);
  REQUIRE(read.size() == orig.size());
  for (size_t i = 0; i < read.size(); ++i) {
    CHECK(read[i].first == orig[i].first);
    CHECK(read[i].second.equal(orig[i].second));
  }
  torch::manual_seed(4);
  auto b = make("resnet18", 10);
  CHECK(load_into(*b, read, "w.pt").empty());
  CHECK(b->fc->weight.equal(a->fc->weight));
  CHECK(b->layer4->named_buffers()["1.bn2.running_var"].equal(a->layer4->named_buffers()["1.bn2.running_var"]));
}

TEST_CASE("loading checks keys and shapes, and keeps a new head for other classes", "[models]") {
  ptune::test::TempDir dir;
  auto a = make("resnet18", 1000);
  auto sd = state_dict(*a);
  auto b = make("resnet18", 10);
  std::string note = load_into(*b, sd, "imagenet.pt");
  CHECK(note == "imagenet.pt: the classifier head has shape [1000, 512] there and [10, 512] here "
                "(model.num_classes); kept a freshly initialized head");
  CHECK(b->conv1->weight.equal(a->conv1->weight));
  auto c = make("resnet50", 10);
  CHECK_THROWS_WITH(load_into(*c, sd, "r18.pt"), Catch::StartsWith("r18.pt: missing keys for this model: "));
  sd.emplace_back("extra.weight", torch::zeros({1}));
  CHECK_THROWS_WITH(load_into(*a, sd, "x.pt"), "x.pt: keys this model does not have: extra.weight");
  auto text = dir.write("text.pt", "not a zip");
  CHECK_THROWS_WITH(read_state_dict(text), Catch::Contains("not a torch.save zip archive"));
  CHECK_THROWS_WITH(read_state_dict(dir.file("none.pt")),
                    "cannot open weights '" + dir.file("none.pt") + "': No such file or directory");
}

TEST_CASE("torchvision's weights load into ptune and give torchvision's outputs, ptune's load into torchvision",
          "[models][python]") {
  const std::string python = PTUNE_PYTHON;
  // Not a silent pass: without Python this test cannot run (scripts/setup configures it).
  if (python.empty()) FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot test the weight exchange with Python");
  ptune::test::TempDir dir;
  const std::string script = std::string(PTUNE_TEST_DATA) + "/torchvision_io.py";
  auto exported = ptune::test::run("'" + python + "' '" + script + "' export " + dir.path.string());
  INFO(exported.err);
  REQUIRE(exported.code == 0);
  auto model = make("resnet18", 10);
  CHECK(load_into(*model, read_state_dict(dir.file("tv_weights.pt")), "tv_weights.pt").empty());
  model->eval();
  auto io = read_state_dict(dir.file("tv_io.pt"));
  REQUIRE(io.size() == 2);
  torch::NoGradGuard no_grad;
  auto y = model->forward(io[0].second);
  CHECK(torch::allclose(y, io[1].second, 1e-4, 1e-5));

  write_state_dict(dir.file("ptune_weights.pt"), state_dict(*model));
  auto checked = ptune::test::run("'" + python + "' '" + script + "' check " + dir.path.string());
  INFO(checked.err);
  CHECK(checked.code == 0);
  CHECK(checked.out == "ok 122\n");
}
