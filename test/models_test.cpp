// ResNet architecture against torchvision's state_dict, and weight exchange with Python.
#include <catch2/catch.hpp>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include "core/errors.hpp"
#include "models/model.hpp"
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
std::pair<std::vector<std::pair<std::string, std::string>>, int64_t> torchvision_keys(
    const std::string& arch) {
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
  for (const auto& p : ResNet("resnet18", 1000)->parameters()) p18 += p.numel();
  CHECK(p18 == 11689512);
}

TEST_CASE("initialization follows torchvision", "[models]") {
  torch::manual_seed(0);
  auto model = ResNet("resnet50", 10);
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
  CHECK_THROWS_WITH(ResNet("resnet19", 10), "unknown architecture 'resnet19'");
}

TEST_CASE("state_dict files round-trip through ptune's writer and reader", "[models]") {
  ptune::test::TempDir dir;
  torch::manual_seed(3);
  auto a = ResNet("resnet18", 10);
  write_state_dict(dir.file("w.pt"), state_dict(*a));
  auto read = read_state_dict(dir.file("w.pt"));
  auto orig = state_dict(*a);
  REQUIRE(read.size() == orig.size());
  for (size_t i = 0; i < read.size(); ++i) {
    CHECK(read[i].first == orig[i].first);
    CHECK(read[i].second.equal(orig[i].second));
  }
  torch::manual_seed(4);
  auto b = ResNet("resnet18", 10);
  CHECK(load_into(*b, read, "w.pt").empty());
  CHECK(b->fc->weight.equal(a->fc->weight));
  CHECK(
      b->layer4->named_buffers()["1.bn2.running_var"].equal(a->layer4->named_buffers()["1.bn2.running_var"]));
}

TEST_CASE("loading checks keys and shapes, and keeps a new head for other classes", "[models]") {
  ptune::test::TempDir dir;
  auto a = ResNet("resnet18", 1000);
  auto sd = state_dict(*a);
  auto b = ResNet("resnet18", 10);
  std::string note = load_into(*b, sd, "imagenet.pt");
  CHECK(note ==
        "imagenet.pt: the classifier head has shape [1000, 512] there and [10, 512] here "
        "(model.num_classes); kept a freshly initialized head");
  CHECK(b->conv1->weight.equal(a->conv1->weight));
  auto c = ResNet("resnet50", 10);
  CHECK_THROWS_WITH(load_into(*c, sd, "r18.pt"), Catch::StartsWith("r18.pt: missing keys for this model: "));
  sd.emplace_back("extra.weight", torch::zeros({1}));
  CHECK_THROWS_WITH(load_into(*a, sd, "x.pt"), "x.pt: keys this model does not have: extra.weight");
  auto text = dir.write("text.pt", "not a zip");
  CHECK_THROWS_WITH(read_state_dict(text), Catch::Contains("not a torch.save zip archive"));
  CHECK_THROWS_WITH(read_state_dict(dir.file("none.pt")),
                    "cannot open weights '" + dir.file("none.pt") + "': No such file or directory");
}

TEST_CASE(
    "torchvision's weights load into ptune and give torchvision's outputs, ptune's load into torchvision",
    "[models][python]") {
  const std::string python = PTUNE_PYTHON;
  // Not a silent pass: without Python this test cannot run (scripts/setup configures it).
  if (python.empty())
    FAIL(
        "PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot test the weight exchange with "
        "Python");
  ptune::test::TempDir dir;
  const std::string script = std::string(PTUNE_TEST_DATA) + "/torchvision_io.py";
  // One Python process exports, then checks ptune's weights when told: torch imported once.
  ptune::test::Coprocess py("'" + python + "' '" + script + "' export-check " + dir.path.string());
  {
    const auto exported = py.receive();
    INFO(py.err());
    REQUIRE(exported == std::optional<std::string>("exported"));
  }
  auto model = ResNet("resnet18", 10);
  CHECK(load_into(*model, read_state_dict(dir.file("tv_weights.pt")), "tv_weights.pt").empty());
  model->eval();
  auto io = read_state_dict(dir.file("tv_io.pt"));
  REQUIRE(io.size() == 2);
  torch::NoGradGuard no_grad;
  auto y = model->forward(io[0].second);
  CHECK(torch::allclose(y, io[1].second, 1e-4, 1e-5));

  write_state_dict(dir.file("ptune_weights.pt"), state_dict(*model));
  CHECK(py.send("check"));
  const auto checked = py.receive();
  const int code = py.finish();
  INFO(py.err());
  CHECK(code == 0);
  CHECK(checked == std::optional<std::string>("ok 122"));
}

TEST_CASE("weights in other shapes are recognized: a key, DDP's prefix, no counters, a whole module",
          "[models][python]") {
  const std::string python = PTUNE_PYTHON;
  if (python.empty())
    FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot make the fixtures");
  ptune::test::TempDir dir;
  const std::string script = std::string(PTUNE_TEST_DATA) + "/torchvision_io.py";
  auto made = ptune::test::run("'" + python + "' '" + script + "' variants " + dir.path.string());
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto reference = ResNet("resnet18", 10);
  load_into(*reference, read_state_dict(dir.file("reference.pt")), "reference.pt");
  auto same_as_reference = [&](const std::string& file) {
    auto m = ResNet("resnet18", 10);
    std::vector<std::string> notes;
    CHECK(load_into(*m, read_state_dict(dir.file(file), &notes), file).empty());
    auto a = state_dict(*m), b = state_dict(*reference);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].second.equal(b[i].second));
    return notes;
  };
  CHECK(same_as_reference("wrapped.pt") ==
        std::vector<std::string>{dir.file("wrapped.pt") +
                                 ": took the state_dict stored under the key 'state_dict'"});
  CHECK(same_as_reference("ddp.pt") ==
        std::vector<std::string>{dir.file("ddp.pt") + ": stripped DDP's 'module.' prefix from every key"});
  CHECK(same_as_reference("no_counters.pt").empty());  // as torchvision's strict=True load
  CHECK_THROWS_WITH(read_state_dict(dir.file("whole_model.pt")),
                    dir.file("whole_model.pt") +
                        ": holds a pickled torchvision.models.resnet.ResNet object, not a "
                        "state_dict of tensors (torch.save(model) saves the whole module); in Python, save "
                        "torch.save(model.state_dict(), path) instead");
}

TEST_CASE("files that are not weights are named for what they are", "[models]") {
  ptune::test::TempDir dir;
  auto check = [&](const std::string& path, const std::string& message) {
    INFO(path);
    try {
      read_state_dict(path);
      FAIL("no error");
    } catch (const ptune::DataError& e) {
      CHECK(std::string(e.what()) == message);
      CHECK(std::string(e.what()).find("enforce fail") == std::string::npos);
    }
  };
  check(dir.path.string(), dir.path.string() + ": is a folder, not a file");
  check(dir.write("empty.pt", ""), dir.file("empty.pt") + ": empty file");
  auto model = ResNet("resnet18", 10);
  write_state_dict(dir.file("good.pt"), state_dict(*model));
  const std::string good = ptune::test::read_file(dir.file("good.pt"));
  check(dir.write("cut.pt", good.substr(0, good.size() / 2)),
        dir.file("cut.pt") + ": a damaged or truncated zip archive");
  check(dir.write("zip.pt", "PK\x03\x04 not really"),
        dir.file("zip.pt") + ": a damaged or truncated zip archive");
}

namespace {

/// A torch.save-style archive holding `pickle` as data.pkl and `records` as data/<name>.
std::string write_archive(const ptune::test::TempDir& dir, const std::string& name, const std::string& pickle,
                          const std::vector<std::pair<std::string, std::string>>& records = {}) {
  const std::string path = dir.file(name);
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  for (const auto& [key, bytes] : records) writer.writeRecord("data/" + key, bytes.data(), bytes.size());
  writer.writeEndOfFile();
  return path;
}

std::string binunicode(const std::string& s) {
  std::string out = "X";
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((s.size() >> (8 * k)) & 0xff));
  return out + s;
}

std::string long8(int64_t v) {
  std::string out = "\x8a\x08";
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
  return out;
}

/// The pickle of {"w": a float tensor of `numel` elements in storage record "0"}.
std::string tensor_dict_pickle(int64_t numel) {
  return std::string("\x80\x02}(") + binunicode("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" +
         binunicode("storage") + "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") +
         long8(numel) + "tQ" + long8(0) + "(" + long8(numel) + "t(" + long8(1) + "t\x89" +
         "ccollections\nOrderedDict\n)RtRu.";
}

std::string data_error(const std::string& path) {
  try {
    read_state_dict(path);
  } catch (const ptune::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a weights file never runs code: os.system, builtins.eval and friends are refused", "[models]") {
  ptune::test::TempDir dir;
  const std::string marker = dir.file("ran");
  const std::string shell = "touch '" + marker + "'";
  const std::string py = "__import__('os').system(\"" + shell + "\")";
  // The classic payloads: GLOBAL + REDUCE, the same nested in a dict, NEWOBJ, and the
  // protocol-4 STACK_GLOBAL and protocol-0 INST/OBJ forms (not understood at all).
  const std::vector<std::pair<std::string, std::string>> pickles = {
      {"os_system.pt",
       "\x80\x02"
       "cos\nsystem\n(" +
           binunicode(shell) + "tR."},
      {"posix_system.pt",
       "\x80\x02"
       "cposix\nsystem\n(" +
           binunicode(shell) + "tR."},
      {"eval.pt",
       "\x80\x02"
       "cbuiltins\neval\n(" +
           binunicode(py) + "tR."},
      {"exec_in_dict.pt", "\x80\x02}(" + binunicode("w") + "cbuiltins\nexec\n(" + binunicode(py) + "tRu."},
      {"newobj.pt",
       "\x80\x02"
       "csubprocess\nPopen\n(" +
           binunicode(shell) + "t\x81."},
      {"stack_global.pt", "\x80\x04\x8c\x02os\x8c\x06system\x93(" + binunicode(shell) + "tR."},
      {"inst.pt", "(" + binunicode(shell) + "ios\nsystem\n."},
  };
  for (const auto& [name, pickle] : pickles) {
    INFO(name);
    const std::string path = write_archive(dir, name, pickle);
    const std::string error = data_error(path);
    CHECK(error.rfind(path + ": ", 0) == 0);
    CHECK_FALSE(std::filesystem::exists(marker));
  }
  CHECK(data_error(dir.file("os_system.pt")) ==
        dir.file("os_system.pt") +
            ": holds a pickled os.system object, not a state_dict of tensors (torch.save(model) "
            "saves the whole module); in Python, save torch.save(model.state_dict(), path) instead");
  CHECK(data_error(dir.file("stack_global.pt")) ==
        dir.file("stack_global.pt") + ": cannot read the state_dict: unsupported pickle opcode 0x93");
}

TEST_CASE("hostile pickles: chains a million deep, cycles, storages larger than their record", "[models]") {
  // Found with fuzz/state_dict_fuzz and its review: a list nested a million deep overflowed
  // the stack when the values were freed (recursive destructors); a list holding itself
  // leaked; a storage's element count was allocated before the record was checked (a 1 KB
  // file could ask for terabytes, reported as a damaged zip).
  ptune::test::TempDir dir;
  const size_t depth = 1000000;
  const std::string deep =
      write_archive(dir, "deep.pt", "\x80\x02" + std::string(depth, ']') + std::string(depth - 1, 'a') + ".");
  CHECK(data_error(deep) == deep + ": expected a dict of tensors (a state_dict)");
  const std::string cycle = write_archive(dir, "cycle.pt",
                                          std::string("\x80\x02]q\x00h\x00"
                                                      "a.",
                                                      9));
  CHECK(data_error(cycle) == cycle + ": expected a dict of tensors (a state_dict)");

  const std::string four_floats(16, '\0');
  const std::string ok = write_archive(dir, "ok.pt", tensor_dict_pickle(4), {{"0", four_floats}});
  auto tensors = read_state_dict(ok);
  REQUIRE(tensors.size() == 1);
  CHECK(tensors[0].first == "w");
  CHECK(tensors[0].second.numel() == 4);
  for (int64_t numel : {int64_t(5), int64_t(1) << 40, int64_t(1) << 62, int64_t(-1)}) {
    INFO(numel);
    const std::string big = write_archive(dir, "big.pt", tensor_dict_pickle(numel), {{"0", four_floats}});
    CHECK(data_error(big) ==
          big + ": cannot read the state_dict: storage record 'data/0' is shorter than its tensor");
  }
}
