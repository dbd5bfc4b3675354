// libFuzzer target: config text (as load_file reads a file) and --set overrides (apply_set).
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ptune::fuzz::expect_documented_errors([&] {
    ptune::config::ExperimentConfig cfg = ptune::config::parse_text(text, "fuzz.json");
    // What `ptune config` and every run do with an accepted config.
    ptune::config::expand_sweep(cfg);
    (void)ptune::config::to_json(cfg).dump(2);
  });
  // The whole input as one --set PATH=VALUE, on the defaults.
  ptune::fuzz::expect_documented_errors([&] {
    ptune::config::ExperimentConfig cfg;
    ptune::config::apply_set(cfg, text);
    (void)ptune::config::to_json(cfg).dump(2);
  });
  return 0;
}
