// libFuzzer target: a profiler trace (.json, or .json.gz when the input is gzip data) through
// what `ptune analyze FILE` does: analyze() (trace_parts, BreakdownBuilder, advise), then render() in
// every format; analyze() with --gpu (require_gpu), which refuses a CPU-only trace; and analyze()
// a step at a time (--events-mb 0: the trace read in parts).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "analyze/advice.hpp"
#include "analyze/render.hpp"
#include "fuzz_util.hpp"

namespace {

/// The scratch file's name without its extension: one per process (analyze reads a path).
const std::string& scratch_stem() {
  static const std::string stem = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/ptune-fuzz-trace-" + std::to_string(::getpid());
  }();
  return stem;
}

void write(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

/// `ptune analyze PATH [--gpu] [--events-mb 0]` in every format (`parts`: a step at a time).
void analyze_and_render(const std::string& path, bool gpu, bool parts = false) {
  ptune::fuzz::expect_documented_errors([&] {
    ptune::analyze::AnalyzeOptions opt;
    opt.require_gpu = gpu;
    if (parts) opt.part_bytes = 0;
    const ptune::analyze::Analysis a = ptune::analyze::analyze(path, opt);
    for (const std::string& format : ptune::analyze::formats())
      (void)ptune::analyze::render_analysis(a, format);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader tells gzip by its content, not by the name: gzip data is read as .json and as
  // .json.gz; other data only as .json (under a .gz name it is an error of its own).
  const std::string json = scratch_stem() + ".json";
  write(json, data, size);
  analyze_and_render(json, /*gpu=*/false);
  analyze_and_render(json, /*gpu=*/true);
  analyze_and_render(json, /*gpu=*/false, /*parts=*/true);
  std::remove(json.c_str());
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    const std::string gz = scratch_stem() + ".json.gz";
    write(gz, data, size);
    analyze_and_render(gz, /*gpu=*/false);
    std::remove(gz.c_str());
  }
  return 0;
}
