// libFuzzer target: a weights file (a torch.save zip with a pickle) through identify() and
// read_state_dict(), as `model.weights` and `ptune check` read it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_util.hpp"
#include "models/state_dict_io.hpp"

namespace {

/// One scratch file per process (read_state_dict reads a path, as ptune does).
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/ptune-fuzz-state-dict-" + std::to_string(::getpid()) +
           ".pt";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  (void)ptune::models::identify(path);  // never throws: anything escaping is a finding
  ptune::fuzz::expect_documented_errors([&] {
    std::vector<std::string> notes;
    ptune::models::NamedTensors tensors = ptune::models::read_state_dict(path, &notes);
    // Tensors are views the pickle describes (as_strided); ptune copies only those whose
    // shape matches the model, so they are not read here.
    (void)tensors;
  });
  std::remove(path.c_str());
  return 0;
}
