// Config parsing, validation and every error text a user can meet.
#include <catch2/catch.hpp>

#include "config/commands.hpp"
#include "config/config.hpp"
#include "config/suggest.hpp"
#include "core/errors.hpp"
#include "test_util.hpp"

using ptune::ConfigError;
using ptune::config::ExperimentConfig;
using Json = nlohmann::ordered_json;

namespace {

ExperimentConfig parse(const std::string& text) {
  return ptune::config::from_json(Json::parse(text), "exp.json");
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string set_error(const std::string& assignment) {
  ExperimentConfig cfg;
  try {
    ptune::config::apply_set(cfg, assignment);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("defaults fill every missing key", "[config]") {
  auto cfg = parse("{}");
  CHECK(cfg.model.arch == "resnet18");
  CHECK(cfg.loader.batch_size == 32);
  CHECK(cfg.loader.num_workers == 0);
  CHECK(cfg.optim.lr == Approx(0.001));
  CHECK(cfg.data.mean == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(!cfg.model.weights);
  CHECK(cfg.sweep.empty());
}

TEST_CASE("values are read into the structs", "[config]") {
  auto cfg = parse(R"({"model": {"arch": "resnet50", "weights": "w.pt"}, "loader": {"batch_size": 512},
                       "optim": {"lr": 0.1, "amp": "bf16"}, "device": "cuda:1"})");
  CHECK(cfg.model.arch == "resnet50");
  CHECK(*cfg.model.weights == "w.pt");
  CHECK(cfg.loader.batch_size == 512);
  CHECK(cfg.optim.lr == Approx(0.1));
  CHECK(cfg.optim.amp == ptune::config::Amp::kBf16);
  CHECK(cfg.device == "cuda:1");
}

TEST_CASE("unknown keys are errors with a suggestion", "[config]") {
  CHECK(error_of(R"({"loader": {"batch_sise": 3}})") ==
        "exp.json: unknown key 'loader.batch_sise', did you mean 'loader.batch_size'?");
  CHECK(error_of(R"({"modle": {}})") == "exp.json: unknown key 'modle', did you mean 'model'?");
  CHECK(error_of(R"({"zzzzzzzz": 1})") == "exp.json: unknown key 'zzzzzzzz'");
}

TEST_CASE("wrong types name the path, the value and the expected type", "[config]") {
  CHECK(error_of(R"({"loader": {"batch_size": "32"}})") ==
        "exp.json: loader.batch_size: expected an integer, got \"32\" (a string)");
  CHECK(error_of(R"({"loader": {"batch_size": 3.5}})") ==
        "exp.json: loader.batch_size: expected an integer, got 3.5 (a number)");
  CHECK(error_of(R"({"loader": {"pin_memory": 1}})") ==
        "exp.json: loader.pin_memory: expected true or false, got 1 (an integer)");
  CHECK(error_of(R"({"data": {"mean": [0.5, 0.5]}})") ==
        "exp.json: data.mean: expected a list of 3 numbers, got [0.5,0.5] (a list)");
  CHECK(error_of(R"({"loader": 5})") == "exp.json: loader: expected an object, got 5 (an integer)");
  CHECK(error_of(R"([1, 2])") == "exp.json: expected a JSON object at the top level, got a list");
}

TEST_CASE("out-of-range values say what is allowed", "[config]") {
  CHECK(error_of(R"({"loader": {"batch_size": 0}})") ==
        "exp.json: loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]");
  CHECK(error_of(R"({"optim": {"lr": -0.1}})") ==
        "exp.json: optim.lr: -0.1 is out of range; allowed: a number in (0, 1000]");
  CHECK(error_of(R"({"loader": {"num_workers": -1}})") ==
        "exp.json: loader.num_workers: -1 is out of range; allowed: an integer in [0, 256]");
  CHECK(error_of(R"({"optim": {"momentum": 1.0}})") ==
        "exp.json: optim.momentum: 1.0 is out of range; allowed: a number in [0, 1)");
}

TEST_CASE("hostile files: overflow, repeated keys, deep nesting, sizes beyond any machine", "[config]") {
  ptune::test::TempDir dir;
  auto big = dir.write("big.json", R"({"data": {"num_samples": 1e309}})");
  CHECK_THROWS_WITH(ptune::config::load_file(big),
                    big + ": data.num_samples: '1e309' overflows a double (largest about 1.8e308)");
  auto twice = dir.write("twice.json", R"({"data": {"num_samples": 5, "image_size": 32, "num_samples": 7}})");
  CHECK_THROWS_WITH(ptune::config::load_file(twice),
                    twice + ": data.num_samples: the key appears twice in one object; keep one");
  auto row_twice = dir.write("row.json", R"({"sweep": [{"name": "a"}, {"name": "b", "name": "c"}]})");
  CHECK_THROWS_WITH(ptune::config::load_file(row_twice),
                    row_twice + ": sweep[1].name: the key appears twice in one object; keep one");
  // 100,000 levels: refused at the 64th, never a stack overflow.
  auto deep =
      dir.write("deep.json", R"({"sweep": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  CHECK_THROWS_WITH(ptune::config::load_file(deep),
                    Catch::StartsWith(deep + ": sweep[0][0][0]") &&
                        Catch::EndsWith(": nesting deeper than 64 levels; a config is a few levels deep"));
  CHECK(set_error("data.num_samples=1e309") ==
        "--set data.num_samples=1e309: '1e309' overflows a double (largest about 1.8e308)");
  CHECK(error_of(R"({"data": {"num_samples": 1000000000000}})") ==
        "exp.json: data.num_samples: 1000000000000 is out of range; allowed: an integer in [1, 100000000]");
  CHECK(error_of(R"({"model": {"num_classes": 10000000}})") ==
        "exp.json: model.num_classes: 10000000 is out of range; allowed: an integer in [1, 100000]");
  CHECK(error_of(R"({"cpu_threads": 100000})") ==
        "exp.json: cpu_threads: 100000 is out of range; allowed: an integer in [0, 1024]");
  // Every numeric key has a maximum in the schema.
  for (const auto& [path, prop] : ptune::config::schema()["properties"].items()) {
    auto check_leaf = [](const std::string& p, const Json& leaf) {
      INFO(p);
      if (leaf.contains("type") && (leaf["type"] == "integer" || leaf["type"] == "number"))
        CHECK((leaf.contains("maximum") || leaf.contains("exclusiveMaximum")));
    };
    if (prop.contains("properties")) {
      for (const auto& [k, leaf] : prop["properties"].items()) check_leaf(path + "." + k, leaf);
    } else {
      check_leaf(path, prop);
    }
  }
}

TEST_CASE("unknown enum values suggest the nearest", "[config]") {
  CHECK(error_of(R"({"model": {"arch": "resnet19"}})") ==
        "exp.json: model.arch: unknown value 'resnet19', did you mean 'resnet18'? allowed: resnet18, "
        "resnet34, resnet50, resnet101, resnet152, resnext50_32x4d, wide_resnet50_2, mobilenet_v3_large, "
        "convnext_tiny, vit_b_16");
  CHECK(error_of(R"({"optim": {"amp": "fp8"}})") ==
        "exp.json: optim.amp: unknown value 'fp8', did you mean 'fp16'? allowed: off, bf16, fp16");
  CHECK(error_of(R"({"optim": {"kind": "lamb"}})") ==
        "exp.json: optim.kind: unknown value 'lamb'; allowed: sgd, adamw");
  CHECK(error_of(R"({"device": "cuda:x"})") ==
        "exp.json: device: unknown device 'cuda:x', did you mean 'cuda'? allowed: auto, cpu, cuda, cuda:N");
}

TEST_CASE("files: missing, unreadable and malformed", "[config]") {
  ptune::test::TempDir dir;
  auto missing = dir.file("nope.json");
  CHECK_THROWS_WITH(ptune::config::load_file(missing),
                    "cannot open config '" + missing + "': No such file or directory");
  auto bad = dir.write("bad.json", "{\n  \"loader\": {\n    \"batch_size\": 32,\n  }\n}\n");
  CHECK_THROWS_WITH(ptune::config::load_file(bad),
                    Catch::StartsWith(bad + ":4:3: malformed JSON: syntax error while parsing object key"));
  auto good = dir.write("good.json", R"({"loader": {"batch_size": 8}})");
  CHECK(ptune::config::load_file(good).loader.batch_size == 8);
  auto typo = dir.write("typo.json", R"({"loader": {"workers": 8}})");
  CHECK_THROWS_WITH(ptune::config::load_file(typo),
                    typo + ": unknown key 'loader.workers', did you mean 'loader.num_workers'?");
}

TEST_CASE("set overrides (--set) are typed by the field", "[config]") {
  ExperimentConfig cfg;
  ptune::config::apply_set(cfg, "loader.batch_size=256");
  ptune::config::apply_set(cfg, "optim.amp=bf16");
  ptune::config::apply_set(cfg, "loader.pin_memory=true");
  ptune::config::apply_set(cfg, "data.mean=[0.1,0.2,0.3]");
  ptune::config::apply_set(cfg, "model.weights=/tmp/w.pt");
  ptune::config::apply_set(cfg, "name=my run");
  CHECK(cfg.loader.batch_size == 256);
  CHECK(cfg.optim.amp == ptune::config::Amp::kBf16);
  CHECK(cfg.loader.pin_memory);
  CHECK(cfg.data.mean == std::vector<double>{0.1, 0.2, 0.3});
  CHECK(*cfg.model.weights == "/tmp/w.pt");
  CHECK(cfg.name == "my run");
  ptune::config::apply_set(cfg, "model.weights=null");
  CHECK(!cfg.model.weights);
}

TEST_CASE("set override (--set) errors", "[config]") {
  CHECK(set_error("loader.batch_sise=3") ==
        "--set: unknown key 'loader.batch_sise', did you mean 'loader.batch_size'?");
  // Not a key: the sweep (not "did you mean 'seed'"), and a section.
  CHECK(set_error("sweep=[]") ==
        "--set: sweep: the sweep's rows are not set from the command line; edit them in the config, or pick "
        "rows "
        "with --rows");
  CHECK(set_error(R"(loader={"batch_size": 4})") ==
        "--set: 'loader' is a section; set its keys one at a time, e.g. --set loader.batch_size=...");
  CHECK(set_error("loader.batch_size=abc") ==
        "--set: loader.batch_size: expected an integer, got \"abc\" (a string)");
  CHECK(set_error("loader.batch_size=0") ==
        "--set: loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]");
  CHECK(set_error("model.arch=resnet19") ==
        "--set: model.arch: unknown value 'resnet19', did you mean 'resnet18'? allowed: resnet18, resnet34, "
        "resnet50, resnet101, resnet152, resnext50_32x4d, wide_resnet50_2, mobilenet_v3_large, "
        "convnext_tiny, vit_b_16");
  CHECK(set_error("batch_size") == "--set 'batch_size': expected PATH=VALUE, e.g. loader.batch_size=256");
}

TEST_CASE("set overrides (--set) whose bytes are not UTF-8 are config errors", "[config]") {
  // Found by fuzz/config_fuzz: the error message (and later the results file) serialized the
  // bytes as JSON, and nlohmann's type_error 316 escaped instead of a ConfigError.
  CHECK(set_error("data.mean=[0.485, 0.40\x9d\x9d&]") ==
        "--set: data.mean: expected a list of 3 numbers, got \"[0.485, 0.40\xef\xbf\xbd\xef\xbf\xbd&]\" (a "
        "string)");
  CHECK(set_error("loader.batch_size=\xff") ==
        "--set: loader.batch_size: expected an integer, got \"\xef\xbf\xbd\" (a string)");
  CHECK(set_error("name=run \xff") == "--set: name: the value is not valid UTF-8 text");
  CHECK(set_error("model.arch=\xc3") == "--set: model.arch: the value is not valid UTF-8 text");
  ExperimentConfig cfg;
  ptune::config::apply_set(cfg, "name=caf\xc3\xa9");  // UTF-8 is fine
  CHECK(ptune::config::to_json(cfg).dump().find("caf\xc3\xa9") != std::string::npos);
}

TEST_CASE("sweep rows are cumulative patches", "[config]") {
  auto cfg = parse(R"({"loader": {"batch_size": 8}, "sweep": [
      {"name": "base"},
      {"name": "workers", "set": {"loader.num_workers": 2}},
      {"name": "big", "set": {"loader.batch_size": 64, "optim.amp": "bf16"}},
      {"name": "nested", "set": {"optim": {"set_to_none": true}}}]})");
  auto rows = ptune::config::expand_sweep(cfg);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].first.name == "base");
  CHECK(rows[0].second.loader.batch_size == 8);
  CHECK(rows[0].second.loader.num_workers == 0);
  CHECK(rows[1].second.loader.num_workers == 2);
  CHECK(rows[2].second.loader.num_workers == 2);  // kept from the row before
  CHECK(rows[2].second.loader.batch_size == 64);
  CHECK(rows[2].second.optim.amp == ptune::config::Amp::kBf16);
  CHECK(rows[3].second.optim.set_to_none);
  CHECK(rows[3].second.optim.amp == ptune::config::Amp::kBf16);
  CHECK(rows[3].second.sweep.empty());
}

TEST_CASE("a config without rows sweeps itself", "[config]") {
  auto rows = ptune::config::expand_sweep(parse(R"({"loader": {"batch_size": 4}})"));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].second.loader.batch_size == 4);
}

TEST_CASE("bad sweep rows are errors with their index", "[config]") {
  CHECK(error_of(R"({"sweep": [{"name": "a"}, {"name": "b", "set": {"loader.batch_sise": 1}}]})") ==
        "exp.json: sweep[1].set: unknown key 'loader.batch_sise', did you mean 'loader.batch_size'?");
  CHECK(error_of(R"({"sweep": [{"set": {}}]})") == "exp.json: sweep[0]: missing \"name\"");
  CHECK(error_of(R"({"sweep": [{"name": "a", "sett": {}}]})") ==
        "exp.json: sweep[0]: unknown key 'sett', did you mean 'set'? allowed: name, set");
  CHECK(error_of(R"({"sweep": [{"name": "a", "set": {"loader.batch_size": -4}}]})") ==
        "exp.json: sweep[0].set: loader.batch_size: -4 is out of range; allowed: an integer in [1, 1048576]");
}

TEST_CASE("to_json round-trips the resolved config", "[config]") {
  auto cfg = parse(
      R"({"name": "x", "loader": {"batch_size": 7}, "sweep": [{"name": "r", "set": {"optim.lr": 0.5}}]})");
  auto again = ptune::config::from_json(ptune::config::to_json(cfg), "resolved");
  CHECK(ptune::config::to_json(again) == ptune::config::to_json(cfg));
  CHECK(again.loader.batch_size == 7);
  CHECK(again.sweep.at(0).set["optim.lr"] == 0.5);
}

TEST_CASE("the schema and the parser agree", "[config]") {
  const Json schema = ptune::config::schema();
  // The committed schema is the generated one (regenerate with `ptune schema > configs/schema.json`).
  auto committed =
      Json::parse(ptune::test::read_file(std::string(PTUNE_SOURCE_DIR) + "/configs/schema.json"));
  CHECK(committed == schema);
  // Every leaf the schema documents is a key the parser accepts, with the schema's default...
  const ExperimentConfig defaults;
  const Json resolved = ptune::config::to_json(defaults);
  size_t leaves = 0;
  for (auto& [key, prop] : schema["properties"].items()) {
    if (key == "sweep") continue;
    if (prop.contains("properties")) {
      for (auto& [leaf, spec] : prop["properties"].items()) {
        ++leaves;
        CHECK(resolved.at(key).at(leaf) == spec.at("default"));
        CHECK_NOTHROW(ptune::config::from_json(Json{{key, Json{{leaf, spec.at("default")}}}}, "schema"));
      }
    } else {
      ++leaves;
      CHECK(resolved.at(key) == prop.at("default"));
    }
  }
  // ...and every key the parser knows is in the schema.
  CHECK(leaves == ptune::config::field_paths().size());
  CHECK(schema["additionalProperties"] == false);
}

TEST_CASE("did-you-mean picks close words only", "[config]") {
  CHECK(ptune::config::edit_distance("kitten", "sitting") == 3);
  CHECK(ptune::config::closest("resnet19", {"resnet18", "resnet50"}) == "resnet18");
  CHECK(ptune::config::closest("vgg", {"resnet18", "resnet50"}).empty());
}

TEST_CASE("rules between keys are checked for the config and every sweep row", "[config]") {
  ExperimentConfig cfg;
  cfg.data.kind = ptune::config::DataKind::kImageFolder;
  CHECK_THROWS_WITH(ptune::config::validate(cfg, "exp.json"),
                    "exp.json: data.root: required when data.kind is image_folder");
  cfg.data.root = "/data";
  CHECK_NOTHROW(ptune::config::validate(cfg, "exp.json"));
  cfg.loader.gpu_resize = true;
  CHECK_THROWS_WITH(ptune::config::validate(cfg, "exp.json"),
                    "exp.json: loader.gpu_resize: works with data.kind fake_cifar only, not 'image_folder'");
  auto swept = parse(R"({"sweep": [{"name": "base"}, {"name": "graphs", "set": {"optim.cuda_graphs": true}},
                                    {"name": "adamw", "set": {"optim.kind": "adamw"}}]})");
  CHECK_THROWS_WITH(ptune::config::expand_sweep(swept),
                    "sweep[2] 'adamw': optim.cuda_graphs: works with optim.kind sgd, not 'adamw' (LibTorch's "
                    "AdamW counts its steps on the host, which a replayed graph cannot)");
}

TEST_CASE("a program section: command, args, env and its rows' changes", "[config]") {
  ExperimentConfig cfg = parse(R"({"program": {"command": ["sh", "-c", "echo step 1"], "env": {"A": "1"},
                                   "samples_per_step": 32},
                                   "sweep": [{"name": "base"},
                                             {"name": "b", "set": {"program.env.B": "2", "program.args": ["x"]}},
                                             {"name": "c", "set": {"program.env.A": null}}]})");
  CHECK(cfg.program.enabled());
  const auto rows = ptune::config::expand_sweep(cfg);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].second.program.env == std::map<std::string, std::string>{{"A", "1"}});
  CHECK(rows[1].second.program.env == std::map<std::string, std::string>{{"A", "1"}, {"B", "2"}});
  CHECK(rows[1].second.program.argv() == std::vector<std::string>{"sh", "-c", "echo step 1", "x"});
  CHECK(rows[2].second.program.env == std::map<std::string, std::string>{{"B", "2"}});
  ptune::config::apply_set(cfg, "program.env.C=a b=c");
  CHECK(cfg.program.env.at("C") == "a b=c");
  ptune::config::apply_set(cfg, R"(program.args=["--workers", "2"])");
  CHECK(cfg.program.args == std::vector<std::string>{"--workers", "2"});
  CHECK(ptune::config::to_json(cfg)["program"]["env"]["A"] == "1");
}

TEST_CASE("a program's config errors name the key, the value and what is allowed", "[config]") {
  CHECK(error_of(R"({"model": {"arch": "resnet50"}, "program": {"command": ["sh"]}})") ==
        "exp.json: model: a config with a program (program.command) times that program, which these keys of "
        "ptune's own pipelines (model, data, loader, optim, measure.mode) do not reach; leave them out");
  CHECK(error_of(R"({"program": {"command": ["sh"]}, "measure": {"mode": "data"}})") ==
        "exp.json: measure.mode: a config with a program (program.command) times that program, which these "
        "keys of ptune's own pipelines (model, data, loader, optim, measure.mode) do not reach; leave them "
        "out");
  CHECK(
      error_of(
          R"({"program": {"command": ["sh"]}, "sweep": [{"name": "r", "set": {"loader.batch_size": 8}}]})") ==
      "exp.json: sweep[0].set: loader.batch_size: a config with a program (program.command) times that "
      "program, which these keys of ptune's own pipelines (model, data, loader, optim, measure.mode) do not "
      "reach; leave them out");
  CHECK(error_of(R"({"program": {"command": "python train.py"}})") ==
        "exp.json: program.command: expected a list of strings, got \"python train.py\" (a string)");
  CHECK(error_of(R"({"program": {"env": {"A=B": "1"}}})") ==
        "exp.json: program.env: 'A=B' cannot name an environment variable (not empty, no '=')");
  CHECK(error_of(R"({"program": {"env": {"A": 1}}})") ==
        "exp.json: program.env: A: expected a string, got 1 (an integer)");
  auto invalid = [](const std::string& text) {
    try {
      ptune::config::expand_sweep(parse(text));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(invalid(R"({"program": {"command": ["no-such-program-xyz"], "env": {"PATH": "/nowhere"}}})") ==
        "program.command: 'no-such-program-xyz' is not found on PATH (/nowhere)");
  CHECK(invalid(R"({"program": {"command": ["./train.py"], "cwd": "/"}})") ==
        "program.command: './train.py' is not an executable file (program.cwd '/')");
  CHECK(invalid(R"({"program": {"command": ["sh"], "step_pattern": "step (\\d+"}})") ==
        "program.step_pattern: 'step (\\d+' is neither a logger's name (auto, tqdm, torchvision, timm, step) "
        "nor a regular expression: missing closing parenthesis at offset 9");
  // A logger's name is taken as the name, not compiled (a name is the whole value, exactly).
  CHECK(invalid(R"({"program": {"command": ["sh"], "step_pattern": "tqdm"}})") == "(no error)");
  CHECK(invalid(R"({"program": {"command": ["sh"], "step_pattern": "auto"}})") == "(no error)");
  CHECK(invalid(R"({"program": {"command": ["sh"], "cwd": "/no/such/folder"}})") ==
        "program.cwd: '/no/such/folder' is not a folder");
  // Program keys without a command would be ignored while ptune's own pipeline runs: an error.
  CHECK(invalid(R"({"program": {"args": ["--fast"]}})") ==
        "program.command: empty (no program: ptune's own pipelines run), while program.args is set; name the "
        "program's command, e.g. [\"python3\", \"train.py\"]");
  CHECK(
      invalid(
          R"j({"program": {"command": [], "samples_per_step": 32, "step_pattern": "it (?<step>\\d+)"}})j") ==
      "program.command: empty (no program: ptune's own pipelines run), while program.step_pattern, "
      "program.samples_per_step are set; name the program's command, e.g. [\"python3\", \"train.py\"]");
}

namespace {

std::vector<std::string> words(const std::string& text) { return ptune::config::split_command(text).argv; }

std::string split_error(const std::string& text) {
  try {
    ptune::config::split_command(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a command line is split as a shell splits a simple command, and shell features are refused",
          "[config]") {
  using V = std::vector<std::string>;
  CHECK(words("python3  train.py\t--workers 4\n") == V{"python3", "train.py", "--workers", "4"});
  CHECK(words("python3 -c 'print(\"a  b\")' \"it's\" a\\ b '' x\\\ny") ==
        V{"python3", "-c", "print(\"a  b\")", "it's", "a b", "", "xy"});
  CHECK(words(R"(echo "a \"q\" \\ \n \$" 'x\y' end\)") == V{"echo", "a \"q\" \\ \\n $", "x\\y", "end\\"});
  const auto c = ptune::config::split_command("OMP_NUM_THREADS=4 A='x y' python3 B=1 t.py");
  CHECK(c.argv == V{"python3", "B=1", "t.py"});
  CHECK(c.env == std::map<std::string, std::string>{{"A", "x y"}, {"OMP_NUM_THREADS", "4"}});
  // A quoted or invalid name is a word, as in a shell.
  CHECK(words("'A=1' x") == V{"A=1", "x"});
  CHECK(words("1A=1 x") == V{"1A=1", "x"});
  const std::string shell =
      ", and ptune runs the command without a shell: put it in single quotes, or name a shell (sh -c '...')";
  CHECK(split_error("python3 a.py | tee log") == "'|' is a shell operator" + shell);
  CHECK(split_error("python3 a.py > log") == "'>' is a shell operator" + shell);
  CHECK(split_error("cd x && python3 a.py") == "'&' is a shell operator" + shell);
  CHECK(split_error("python3 $HOME/a.py") == "'$' is a shell expansion" + shell);
  CHECK(split_error("python3 \"$HOME/a.py\"") == "'$' in double quotes is a shell expansion" + shell);
  CHECK(split_error("python3 *.py") == "'*' is a file name pattern" + shell);
  CHECK(split_error("python3 ~/a.py") == "'~' at the start of a word is a home folder" + shell);
  CHECK(split_error("python3 a.py # c") == "'#' at the start of a word starts a comment" + shell);
  CHECK(words("python3 'a|b*$~' x#y a~") == V{"python3", "a|b*$~", "x#y", "a~"});
  CHECK(split_error("python3 'a") == "a single quote (') that is not closed");
  CHECK(split_error("python3 \"a") == "a double quote (\") that is not closed");
  CHECK(split_error("  ") == "an empty command; name a program and its arguments, e.g. 'python3 train.py'");
  CHECK(split_error("A=1 B=2") ==
        "variables but no command after them; name a program, e.g. 'NAME=VALUE python3 train.py'");
}

TEST_CASE("commands become a sweep of program rows, each differing from the row before it", "[config]") {
  using ptune::config::CommandRow;
  std::vector<CommandRow> rows{{"sh -c 'echo step 1'", ""},
                               {"sh -c 'echo step 1' --workers 4", "four"},
                               {"X=1 sh -c 'echo step 1' --workers 4", ""},
                               {"sh -c 'echo step 1'", ""}};
  rows[2].set["program.samples_per_step"] = 32;
  const Json every_row{{"program.env.A", "1"}, {"program.step_pattern", "step (?<step>\\d+)"}};
  const auto cfg = ptune::config::config_from_commands(rows, every_row, {"measure.steps=7"});
  CHECK(cfg.name == "compare");
  CHECK(cfg.measure.steps == 7);
  CHECK(cfg.program.command == std::vector<std::string>{"sh", "-c", "echo step 1"});
  CHECK(cfg.program.env == std::map<std::string, std::string>{{"A", "1"}});
  CHECK(cfg.program.step_pattern == "step (?<step>\\d+)");
  REQUIRE(cfg.sweep.size() == 4);
  CHECK(cfg.sweep[0].name == "sh -c 'echo step 1'");
  CHECK(cfg.sweep[0].set == Json::object());
  CHECK(cfg.sweep[1].name == "four");
  CHECK(cfg.sweep[1].set == Json{{"program.args", {"--workers", "4"}}});
  CHECK(cfg.sweep[2].name == "X=1 sh -c 'echo step 1' --workers 4");
  CHECK(cfg.sweep[2].set ==
        Json{{"program.env", {{"A", "1"}, {"X", "1"}}}, {"program.samples_per_step", 32}});
  // A repeated command gets its row's number; the row undoes what the rows before it changed.
  CHECK(cfg.sweep[3].name == "sh -c 'echo step 1' (row 3)");
  CHECK(cfg.sweep[3].set == Json{{"program.args", Json::array()},
                                 {"program.env", {{"A", "1"}}},
                                 {"program.samples_per_step", 0}});
  // Expanded as a sweep of a config file, each row is its command.
  const auto expanded =
      ptune::config::expand_sweep(ptune::config::from_json(ptune::config::to_json(cfg), "c.json"));
  REQUIRE(expanded.size() == 4);
  CHECK(expanded[2].second.program.argv() ==
        std::vector<std::string>{"sh", "-c", "echo step 1", "--workers", "4"});
  CHECK(expanded[2].second.program.samples_per_step == 32);
  CHECK(expanded[3].second.program.argv() == std::vector<std::string>{"sh", "-c", "echo step 1"});
  CHECK(expanded[3].second.program.env == std::map<std::string, std::string>{{"A", "1"}});
}

TEST_CASE(
    "commands that differ mid-way: the words they all start with are the program, a row's change the rest",
    "[config]") {
  using ptune::config::CommandRow;
  using V = std::vector<std::string>;
  auto sweep_of = [](const std::vector<CommandRow>& rows) {
    return ptune::config::config_from_commands(rows, Json::object(), {});
  };
  // An option's value differs: the option goes with it.
  auto cfg = sweep_of({{"sh train.sh --lr 0.1 --amp", ""}, {"sh train.sh --lr 0.2 --amp", ""}});
  CHECK(cfg.program.command == V{"sh", "train.sh"});
  CHECK(cfg.program.args == V{"--lr", "0.1", "--amp"});
  CHECK(cfg.sweep[1].set == Json{{"program.args", {"--lr", "0.2", "--amp"}}});
  // Another script of the same interpreter.
  cfg = sweep_of({{"sh a.sh", ""}, {"sh b.sh", ""}});
  CHECK(cfg.program.command == V{"sh"});
  CHECK(cfg.sweep[1].set == Json{{"program.args", {"b.sh"}}});
  // Nothing in common: each row its command.
  cfg = sweep_of({{"sh a.sh", ""}, {"env -i sh a.sh", ""}});
  CHECK(cfg.program.command == V{"sh", "a.sh"});
  CHECK(cfg.program.args.empty());
  CHECK(cfg.sweep[1].set == Json{{"program.command", {"env", "-i", "sh", "a.sh"}}});
}

TEST_CASE("a comparison's errors name the row and its command", "[config]") {
  using ptune::config::CommandRow;
  auto error = [](const std::vector<CommandRow>& rows, const Json& every_row = Json::object(),
                  const std::vector<std::string>& sets = {}) {
    try {
      ptune::config::config_from_commands(rows, every_row, sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error({}) ==
        "no commands; give each command as one argument, the baseline first, e.g. 'python3 train.py' "
        "'python3 train.py --workers 4'");
  CHECK(error({{"sh", ""}, {"", ""}}) ==
        "row 1 '': an empty command; name a program and its arguments, e.g. 'python3 train.py'");
  CHECK(error({{"/bin/sh", ""}, {"no-such-program-xyz a", ""}}, {{"program.env.PATH", "/nowhere"}}) ==
        "row 1 'no-such-program-xyz a': program.command: 'no-such-program-xyz' is not found on PATH "
        "(/nowhere)");
  CHECK(
      error({{"sh", ""}}, {{"program.samples_per_step", -1}}) ==
      "row 0 'sh': program.samples_per_step: -1 is out of range; allowed: an integer in [0, 1099511627776]");
  CHECK(error({{"sh", "a\tb"}}) ==
        "row 0 'sh': its name has a control character; a row's name is printed (name it with --name)");
  for (const char* key : {"program.command", "program.args"})
    CHECK(error({{"sh", ""}}, Json::object(), {std::string(key) + "=[\"x\"]"}) ==
          "--set " + std::string(key) +
              ": the commands are the rows' programs and their arguments; put them in each command instead, "
              "e.g. 'python3 train.py --workers 4'");
  CHECK(error({{"sh", ""}}, Json::object(), {"loader.batch_size=8"}) ==
        "--set: loader.batch_size: a config with a program (program.command) times that program, which these "
        "keys of ptune's own pipelines (model, data, loader, optim, measure.mode) do not reach; leave them "
        "out");
}
