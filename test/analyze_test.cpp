// ptune analyze: the trace reader, the plugin's step split, the verdicts on GPU-shaped fixtures
// (test/data/traces, made by test/data/make_trace_fixtures.py), on traces Python's torch.profiler
// writes for a CPU ResNet step (made here by test/make_torch_trace.py), and on ptune's own.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "analyze/advice.hpp"
#include "analyze/events.hpp"
#include "analyze/intervals.hpp"
#include "analyze/compare.hpp"
#include "analyze/kernel_precision.hpp"
#include "analyze/overview.hpp"
#include "analyze/render.hpp"
#include "analyze/trace_parts.hpp"
#include "analyze/trace_reader.hpp"
#include "core/errors.hpp"
#include "measure/diagnosis.hpp"
#include "measure/rules.hpp"
#include "report/figures.hpp"
#include "test_util.hpp"

using Json = nlohmann::json;
using ptune::test::TempDir;

namespace {

std::string fixture(const std::string& name) { return std::string(PTUNE_TEST_DATA) + "/traces/" + name; }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Json x(const std::string& cat, const std::string& name, double ts, double dur, Json args = Json::object(),
       int pid = 1, int tid = 1) {
  return Json{{"ph", "X"},  {"cat", cat}, {"name", name}, {"pid", pid},
              {"tid", tid}, {"ts", ts},   {"dur", dur},   {"args", args}};
}

/// The message of the DataError that analyze(path) throws.
std::string error_of(const std::string& path, bool gpu = false) {
  ptune::analyze::AnalyzeOptions opt;
  opt.require_gpu = gpu;
  try {
    ptune::analyze::analyze(path, opt);
  } catch (const ptune::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("analyze: each instant of a step goes to the first category covering it, as the plugin's",
          "[analyze]") {
  // One step [0, 100): a kernel [10, 30), a copy [20, 40), a memset [85, 95), runtime [0, 50),
  // the DataLoader [50, 70), host ops over [0, 85), and nothing in [95, 100).
  TempDir dir;
  Json ev = Json::array();
  ev.push_back(x("user_annotation", "ProfilerStep#7", 0, 100));
  ev.push_back(x("cpu_op", "aten::whole", 0, 80));
  ev.push_back(x("cpu_op", "aten::inside", 10, 10));  // a child: self time is the parent's less this
  ev.push_back(x("cpu_op", "aten::across", 75, 10));  // not well nested (ends after its "parent"): no child
  ev.push_back(x("cuda_runtime", "cudaLaunchKernel", 0, 50, {{"correlation", 5}}));
  ev.push_back(x("kernel", "volta_sgemm_128x64_nn", 10, 20, {{"correlation", 5}, {"stream", 7}}, 0, 7));
  ev.push_back(
      x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 20, 20, {{"correlation", 6}, {"bytes", 64}}, 0, 7));
  ev.push_back(x("gpu_memset", "Memset (Device)", 85, 10, {{"correlation", 7}}, 0, 7));
  ev.push_back(x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 50, 20));
  ev.push_back(x("gpu_user_annotation", "ProfilerStep#7", 0, 100, {}, 0, 7));  // device-side copy: ignored
  const std::string path = dir.write("t.json", Json{{"traceEvents", ev}}.dump());
  const auto a = ptune::analyze::analyze(path);
  REQUIRE(a.ranks.size() == 1);
  const auto& b = a.ranks[0];
  REQUIRE(b.steps.size() == 1);
  const auto& s = b.steps[0];
  CHECK(s.name == "ProfilerStep#7");
  CHECK(s.ms() == Approx(0.1));
  using namespace ptune::analyze;
  CHECK(s.us[kKernel] == Approx(20));      // [10, 30)
  CHECK(s.us[kMemcpy] == Approx(10));      // [30, 40): under the kernel it is kernel time
  CHECK(s.us[kMemset] == Approx(10));      // [85, 95)
  CHECK(s.us[kRuntime] == Approx(20));     // [0, 10) and [40, 50)
  CHECK(s.us[kDataLoader] == Approx(20));  // [50, 70)
  CHECK(s.us[kCpuExec] == Approx(15));     // [70, 85)
  CHECK(s.us[kOther] == Approx(5));        // [95, 100)
  CHECK(s.kernel_us == Approx(20));
  CHECK(b.h2d.count == 1);
  CHECK(b.h2d.pageable == 1);
  CHECK(b.h2d.bytes == 64);
  CHECK(b.half_pct == Approx(0));
  REQUIRE(b.operators.size() == 3);
  CHECK(b.operators[0].name == "aten::whole");
  CHECK(b.operators[0].total_us == Approx(80));
  CHECK(b.operators[0].self_us == Approx(70));
  CHECK(b.operators[1].self_us == Approx(10));
  // Data 20% < 30%, copies 10% < 20%, no sync; the GPU busy 20% of the step.
  CHECK(a.verdict.rule == "launch-bound");
}

TEST_CASE("analyze: Tensor Core and fp16 kernels are told by their names", "[analyze]") {
  using ptune::analyze::is_half_kernel;
  using ptune::analyze::is_tensor_core_kernel;
  CHECK(is_tensor_core_kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"));
  CHECK(is_tensor_core_kernel("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc"));
  CHECK(is_tensor_core_kernel("volta_h884gemm_64x64_ldg8_nn"));
  CHECK(is_tensor_core_kernel("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4"));
  CHECK_FALSE(is_tensor_core_kernel("volta_sgemm_128x64_nn"));
  CHECK_FALSE(is_tensor_core_kernel("void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>"));
  CHECK(is_half_kernel("void cudnn::bn_fw_tr_1C11_kernel_NHWC<__half>"));
  CHECK(is_half_kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn"));
  CHECK(is_half_kernel("xmma_fprop_implicit_gemm_fp16_nhwc_kernel"));
  CHECK_FALSE(is_half_kernel("implicit_convolve_sgemm"));
}

TEST_CASE("analyze: GPU-shaped fixtures get the verdict their shape calls for", "[analyze]") {
  struct Case {
    const char* file;
    const char* rule;
    std::vector<std::string> in_text;
  };
  const std::vector<Case> cases = {
      {"gpu_copy_bound.json",
       "copy-bound",
       {"40% of the step in copies not overlapped by kernels", "3 from pageable memory", "`pin_memory=True`",
        "non_blocking=True"}},
      {"gpu_sync_bound.json.gz",
       "sync-bound",
       {"25% of the step with the GPU idle after the host waited in", "`cudaStreamSynchronize`",
        "`aten::item`", "loss.item()"}},
      {"gpu_launch_bound.json.gz", "launch-bound", {"GPU utilization 27%", "CUDA graphs", "reduce-overhead"}},
      {"gpu_compute_fp32.json.gz",
       "compute-bound on fp32",
       {"0% of kernel time in fp16/bf16 kernels", "torch.autocast", "GradScaler"}},
      {"gpu_compute_amp.json.gz",
       "compute-bound",
       {"GPU utilization 96%", "60% of kernel time on Tensor Cores", "channels_last"}},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    const auto a = ptune::analyze::analyze(fixture(c.file));
    CHECK(a.verdict.rule == c.rule);
    for (const auto& part : c.in_text) {
      INFO(part);
      CHECK(has(a.verdict.text(), part));
    }
    CHECK(a.ranks[0].writer == "pytorch");
    CHECK(a.ranks[0].steps.size() == 3);
    CHECK(a.ranks[0].has_gpu);
  }
  // The AMP fixture's NCHW<->NHWC conversions are a note; the fp32 one has none.
  const auto amp = ptune::analyze::analyze(fixture("gpu_compute_amp.json.gz"));
  REQUIRE_FALSE(amp.notes.empty());
  CHECK(amp.notes.back() ==
        "20% of kernel time converting between NCHW and NHWC: `model.to(memory_format=torch.channels_last)` "
        "and channels_last inputs");
  CHECK(ptune::analyze::analyze(fixture("gpu_compute_fp32.json.gz")).notes.empty());
  // Without ProfilerStep#N: one window, said so.
  const auto whole = ptune::analyze::analyze(fixture("gpu_no_steps.json"));
  CHECK_FALSE(whole.ranks[0].from_steps);
  CHECK(whole.ranks[0].steps.at(0).name == "whole trace");
  CHECK(whole.notes.at(0) ==
        "no ProfilerStep#N spans in the trace: analyzed as one window; call prof.step() once per training "
        "step, with schedule(wait=1, warmup=1, active=3), for a per-step split of steady-state steps");
}

TEST_CASE("analyze: ptune's own traces are advised in config keys", "[analyze]") {
  const auto a = ptune::analyze::analyze(fixture("ptune_launch_bound.json.gz"));
  CHECK(a.ranks[0].writer == "ptune");
  CHECK(a.verdict.text() ==
        "launch-bound (GPU utilization 27%: merged kernel time over the step; 57% of it in host code and "
        "CUDA runtime calls): `optim.cuda_graphs`, then a larger `loader.batch_size`");
  CHECK(ptune::analyze::writer_of(false, "ptune") == "ptune");
  CHECK(ptune::analyze::writer_of(false, "ptune_tests") == "ptune");
  CHECK(ptune::analyze::writer_of(false, "python") == "pytorch");
  CHECK(ptune::analyze::writer_of(true, "python") == "ptune");
}

TEST_CASE("analyze: a folder of ranks gives communication, its overlap and the slowest rank", "[analyze]") {
  const auto a = ptune::analyze::analyze(fixture("ddp"));
  REQUIRE(a.ranks.size() == 2);
  REQUIRE(a.distributed);
  CHECK(a.distributed->world_size == 2);
  CHECK(a.ranks[a.distributed->slowest].rank == 1);
  CHECK(a.distributed->comm_pct == Approx(27.27).margin(0.1));
  CHECK(a.distributed->comm_overlap_pct == Approx(0));
  CHECK(a.verdict.rule == "communication-bound");
  CHECK(a.verdict.evidence ==
        "27% of the step in communication, 0% of it overlapped with compute; rank 1, the slowest");
  CHECK(has(a.verdict.move, "no_sync()"));
  CHECK(a.notes.back() == "rank 1 is the slowest: 11.0 ms per step against 10.0 ms on rank 0");
  const auto j = ptune::analyze::to_json(a);
  CHECK(j["distributed"]["slowest_rank"] == 1);
  CHECK(j["distributed"]["ranks"].size() == 2);
  CHECK(j["rank"] == 1);
}

TEST_CASE("analyze: bad input is named, with the file and what is wrong", "[analyze]") {
  TempDir dir;
  const auto p = [&](const std::string& n) { return dir.file(n); };
  dir.write("bad.json", "hello");
  dir.write("trunc.json", R"({"traceEvents": [{"ph": "X")");
  dir.write("nottrace.json", R"({"a": 1})");
  dir.write("noev.json", R"({"traceEvents": []})");
  dir.write("fake.json.gz", "plain");
  dir.write("zero.json", "");
  std::filesystem::create_directory(p("empty"));
  {
    // A gzip file cut in the middle.
    const std::string whole = ptune::test::read_file(fixture("gpu_compute_amp.json.gz"));
    std::ofstream(p("cut.json.gz"), std::ios::binary) << whole.substr(0, whole.size() / 2);
  }
  CHECK(error_of(p("bad.json")) ==
        "'" + p("bad.json") + "': not JSON (parse error at line 1, column 1: unexpected 'h')");
  // A UTF-8 byte order mark is read past; white space alone, or a gzip of nothing, is no trace;
  // events whose times are strings are named as such.
  const std::string event = R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, )";
  dir.write("bom.json", "\xEF\xBB\xBF{\"traceEvents\": [" + event + R"("ts": 1, "dur": 5}]})");
  CHECK(ptune::analyze::analyze(p("bom.json")).ranks[0].mean().ms() == Approx(0.005));
  dir.write("blank.json", " \n\t ");
  CHECK(error_of(p("blank.json")) == "'" + p("blank.json") + "': white space only (4 bytes), not a trace");
  {
    gzFile gz = gzopen(p("nothing.json.gz").c_str(), "wb");
    REQUIRE(gz != nullptr);
    REQUIRE(gzclose(gz) == Z_OK);
  }
  CHECK(error_of(p("nothing.json.gz")) ==
        "'" + p("nothing.json.gz") + "': empty file, not a trace (once decompressed)");
  dir.write("strings.json", "{\"traceEvents\": [" + event + R"("ts": "1", "dur": "5"}]})");
  CHECK(error_of(p("strings.json")) == "'" + p("strings.json") +
                                           "': no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in "
                                           "its traceEvents: nothing to analyze "
                                           "(its 1 \"ph\": \"X\" events have no number \"ts\" and \"dur\": a "
                                           "string or another type where the trace "
                                           "format has microseconds)");
  dir.write("bad2.json", "{\"traceEvents\": [\n  {\"ph\": \"X\",\n   \"ts\": 1,, \"dur\": 2}]}");
  CHECK(error_of(p("bad2.json")) ==
        "'" + p("bad2.json") + "': not JSON (parse error at line 3, column 12: unexpected ',')");
  // Text that is not UTF-8, a raw tab inside a string, and text after the document: named at
  // their place, whichever piece of the file they are read in.
  dir.write("latin1.json", "{\"traceEvents\": [{\"name\": \"caf\xe9\"}]}");
  CHECK(error_of(p("latin1.json")) ==
        "'" + p("latin1.json") +
            "': not JSON (parse error at line 1, column 31: a byte that is not UTF-8 text (0xe9))");
  dir.write("tab.json", "{\"traceEvents\": [{\"name\": \"a\tb\"}]}");
  CHECK(error_of(p("tab.json")) ==
        "'" + p("tab.json") +
            "': not JSON (parse error at line 1, column 29: an unescaped control character (0x09))");
  dir.write("extra.json", "{\"traceEvents\": []}\n\n  x");
  CHECK(error_of(p("extra.json")) ==
        "'" + p("extra.json") +
            "': not JSON (parse error at line 3, column 3: text after the end of the JSON document)");
  const std::string far = std::string(3 << 20, ' ') + "{\"traceEvents\": [1,, 2]}";
  dir.write("far.json", far);
  CHECK(error_of(p("far.json")) == "'" + p("far.json") + "': not JSON (parse error at line 1, column " +
                                       std::to_string((3 << 20) + 20) + ": unexpected ',')");
  CHECK(error_of(p("trunc.json")) ==
        "'" + p("trunc.json") + "': truncated: the JSON ends at byte 27 before it is complete");
  CHECK(error_of(p("nottrace.json")) ==
        "'" + p("nottrace.json") +
            "': not a profiler trace: no \"traceEvents\" list (torch.profiler's export_chrome_trace and "
            "tensorboard_trace_handler write one)");
  CHECK(error_of(p("noev.json")) == "'" + p("noev.json") +
                                        "': no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in its "
                                        "traceEvents: nothing to analyze");
  // What torch.profiler exports after its schedule's cycle has ended: its own span, no events.
  dir.write("cleared.json",
            R"j({"traceEvents": [{"ph": "X", "cat": "Trace", "ts": 5.5, "dur": 63.8, "pid": "Spans", )j"
            R"j("tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}]})j");
  CHECK(error_of(p("cleared.json")) ==
        "'" + p("cleared.json") +
            "': no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in its traceEvents: nothing to "
            "analyze (torch.profiler's own span only: with a schedule, export the trace from on_trace_ready, "
            "before the end of its cycle clears the events)");
  CHECK(error_of(p("fake.json.gz")) ==
        "'" + p("fake.json.gz") + "': not gzip data, though its name ends in .gz");
  CHECK(error_of(p("cut.json.gz")) ==
        "'" + p("cut.json.gz") + "': truncated gzip data (the compressed stream ends early)");
  CHECK(error_of(p("zero.json")) == "'" + p("zero.json") + "': empty file, not a trace");
  CHECK(error_of(p("empty")) == "'" + p("empty") + "': no trace files (*.json, *.json.gz) in this folder");
  // Traces one folder down (a log folder of runs) are not read; the error names a folder inside.
  std::filesystem::create_directories(p("runs/base"));
  CHECK(error_of(p("runs")) ==
        "'" + p("runs") +
            "': no trace files (*.json, *.json.gz) in this folder (folders inside are not "
            "read: give one, e.g. '" +
            p("runs/base") + "')");
  CHECK(error_of(p("missing")) == "'" + p("missing") + "': no such file or folder");
  // A CPU-only trace is analyzed (GPU figures null), unless GPU figures are asked for.
  Json ev = Json::array({x("cpu_op", "aten::mm", 0, 10)});
  const std::string cpu = dir.write("cpu.json", Json{{"traceEvents", ev}}.dump());
  CHECK(error_of(cpu) == "(no error)");
  CHECK(error_of(cpu, /*gpu=*/true) ==
        "'" + cpu +
            "': a CPU-only trace (no kernels, copies or CUDA runtime calls); --gpu asks for GPU figures: "
            "record it on a GPU with ProfilerActivity.CUDA");
}

// Regression tests for what fuzz/trace_fuzz.cpp found (docs/testing.md, "Fuzzing").

TEST_CASE("analyze: a field of another type than the schema's is ignored as if absent, not thrown",
          "[analyze]") {
  // Each of these threw nlohmann's type_error 302 ("type must be string, but is number").
  TempDir dir;
  Json ev = Json::array();
  ev.push_back(Json{{"ph", 1}});
  ev.push_back(Json{{"ph", "M"}, {"name", "process_name"}, {"args", {{"name", 5}}}});
  ev.push_back(Json{{"ph", "X"}, {"cat", 3}, {"name", "aten::skipped"}, {"ts", 0}, {"dur", 1}});
  ev.push_back(Json{{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", Json::array({"aten::mm"})},
                    {"ts", 0},
                    {"dur", 10},
                    {"args", Json::array({1})}});
  const std::string path = dir.write(
      "types.json", Json{{"traceEvents", ev}, {"deviceProperties", Json::array({Json{{"name", 7}}})}}.dump());
  const auto a = ptune::analyze::analyze(path);
  const auto& b = a.ranks[0];
  CHECK(b.writer == "pytorch");
  CHECK(b.devices.empty());
  REQUIRE(b.operators.size() == 1);
  CHECK(b.operators[0].name.empty());  // a name that is a list: no name
  for (const auto& f : ptune::analyze::formats()) CHECK_FALSE(ptune::analyze::render_analysis(a, f).empty());
}

TEST_CASE("analyze: ids and sizes outside int64 are ignored, and copied bytes saturate", "[analyze]") {
  // A pid of 1e300 was a float-to-int64 overflow (UBSan), two copies of INT64_MAX bytes a
  // signed overflow.
  TempDir dir;
  Json ev = Json::array();
  ev.push_back(x("user_annotation", "ProfilerStep#1", 0, 100));
  ev.push_back(Json{{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::mm"},
                    {"ts", 1},
                    {"dur", 10},
                    {"pid", 1e300},
                    {"tid", -1e300}});
  for (int i = 0; i < 2; ++i)
    ev.push_back(x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20 + 10 * i, 5,
                   {{"bytes", INT64_MAX}, {"correlation", 18446744073709551615ULL}}, 0, 7));
  const std::string path =
      dir.write("big.json",
                Json{{"traceEvents", ev}, {"distributedInfo", {{"rank", 1e300}, {"world_size", 2}}}}.dump());
  const auto a = ptune::analyze::analyze(path);
  const auto& b = a.ranks[0];
  CHECK(b.rank == 0);  // out of range: as when not a number
  CHECK(b.h2d.count == 2);
  CHECK(b.h2d.bytes == INT64_MAX);
  REQUIRE(b.operators.size() == 1);
  CHECK(b.operators[0].name == "aten::mm");
}

TEST_CASE("analyze: a number that overflows a double, and nesting deeper than 64 levels, are named",
          "[analyze]") {
  // The first threw nlohmann's out_of_range 406; the second took 14 s under ASan at a depth of
  // a million.
  TempDir dir;
  const std::string event = R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1})";
  const std::string big = dir.write("big.json", R"({"traceEvents": [{"ph": "X", "ts": 0, "dur": 1e400}]})");
  CHECK(error_of(big) == "'" + big + "': '1e400' overflows a double (largest about 1.8e308)");
  auto nested = [&](int levels) {  // the top object, its "x" list and levels - 2 lists inside
    return R"({"traceEvents": [)" + event + R"(], "x": )" + std::string(levels - 1, '[') +
           std::string(levels - 1, ']') + "}";
  };
  const std::string ok = dir.write("ok.json", nested(64));
  CHECK(error_of(ok) == "(no error)");
  const std::string deep = dir.write("deep.json", nested(65));
  CHECK(error_of(deep) ==
        "'" + deep + "': nesting deeper than 64 levels; a profiler trace is a few levels deep");
  const std::string deeper = dir.write("deeper.json", std::string(1000000, '[') + std::string(1000000, ']'));
  CHECK(error_of(deeper) ==
        "'" + deeper + "': nesting deeper than 64 levels; a profiler trace is a few levels deep");
}

TEST_CASE("analyze: events beyond 1e18 us are skipped, so that every figure stays finite", "[analyze]") {
  // Steps of 1e308 us summed to infinity, and infinity less infinity is NaN.
  TempDir dir;
  Json ev = Json::array();
  ev.push_back(x("user_annotation", "ProfilerStep#1", 0, 100));
  ev.push_back(x("user_annotation", "ProfilerStep#2", 1e308, 1e308));
  ev.push_back(x("cpu_op", "aten::huge", 10, 1e300));
  ev.push_back(x("cpu_op", "aten::early", -1e308, 50));
  ev.push_back(x("cpu_op", "aten::mm", 10, 50));
  const std::string path = dir.write("far.json", Json{{"traceEvents", ev}}.dump());
  const auto a = ptune::analyze::analyze(path);
  const auto& b = a.ranks[0];
  REQUIRE(b.steps.size() == 1);
  CHECK(b.steps[0].ms() == Approx(0.1));
  REQUIRE(b.operators.size() == 1);
  CHECK(b.operators[0].name == "aten::mm");
  const auto j = Json::parse(ptune::analyze::render_analysis(a, "json"));
  CHECK(j["mean"]["ms"] == Approx(0.1));
  CHECK(j["mean"]["split_pct"]["cpu_exec"] == Approx(50));
}

TEST_CASE("analyze: sync calls are counted in the step they start in", "[analyze]") {
  // Counted per step by a search in the sorted sync starts (before: every event for every step,
  // steps x events).
  TempDir dir;
  Json ev = Json::array();
  for (int i = 0; i < 3; ++i)
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i), 100 * i, 100));
  ev.push_back(x("cuda_runtime", "cudaStreamSynchronize", 10, 5));
  ev.push_back(x("cpu_op", "aten::_local_scalar_dense", 100, 5));  // at the boundary: the second step's
  ev.push_back(
      x("cuda_runtime", "cudaStreamSynchronize", 101, 3));      // inside it: the read waited (a sync too)
  ev.push_back(x("cpu_op", "aten::is_nonzero", 150, 5));        // nothing waits inside: not a sync
  ev.push_back(x("cuda_runtime", "cudaLaunchKernel", 160, 5));  // not a sync
  ev.push_back(x("cpu_op", "aten::mm", 250, 10));               // the last step's work: no sync
  ev.push_back(x("cuda_runtime", "cudaDeviceSynchronize", 300, 5));  // after the last step
  const std::string path = dir.write("syncs.json", Json{{"traceEvents", ev}}.dump());
  const auto a = ptune::analyze::analyze(path);
  const auto& b = a.ranks[0];
  REQUIRE(b.steps.size() == 3);
  CHECK(b.steps[0].syncs == 1);
  CHECK(b.steps[1].syncs == 2);  // the read and the sync inside it
  CHECK(b.steps[2].syncs == 0);
}

TEST_CASE("analyze: a step with nothing in it (a profiler cycle cut short) is left out, or is an error alone",
          "[analyze]") {
  // Three steps of 10 ms, each with 8 ms of aten::mm [64, 64] x [64, 64], then a 27 us
  // ProfilerStep#5 with nothing in it (tensorboard_trace_handler's file of the next cycle's
  // first step, or that step cut by the end of the loop).
  TempDir dir;
  Json ev = Json::array();
  const Json dims = Json::array({Json::array({64, 64}), Json::array({64, 64})});
  for (int i = 0; i < 3; ++i) {
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i + 1), i * 10001.0, 10000));
    ev.push_back(x("cpu_op", "aten::mm", i * 10001.0 + 1, 8000, Json{{"Input Dims", dims}}));
  }
  ev.push_back(x("user_annotation", "ProfilerStep#5", 40000, 27));
  const auto a = ptune::analyze::analyze(dir.write("cut.json", Json{{"traceEvents", ev}}.dump()));
  const auto& b = a.ranks[0];
  REQUIRE(b.steps.size() == 3);
  CHECK(b.mean().ms() == Approx(10.0));
  CHECK(b.empty_steps == std::vector<std::string>{"ProfilerStep#5"});
  // Per step of the three: one mm of 2 * 64^3 FLOPs, 8 ms.
  REQUIRE(a.throughput[0].classes.size() == 1);
  CHECK(a.throughput[0].classes[0].calls == Approx(1.0));
  CHECK(a.throughput[0].classes[0].flops == Approx(2.0 * 64 * 64 * 64));
  CHECK(a.throughput[0].classes[0].us == Approx(8000.0));
  CHECK(std::count(
            a.notes.begin(), a.notes.end(),
            "`ProfilerStep#5` was left out: no operator, loader range, kernel, copy or sync in it (a step "
            "the profiler's cycle cut short: `schedule(..., repeat=1)` ends the profiling after one "
            "cycle)") == 1);
  // One step of work and one empty: the one kept (as many of each: not "only empty steps").
  const auto one = ptune::analyze::analyze(dir.write(
      "one.json", Json{{"traceEvents",
                        {x("user_annotation", "ProfilerStep#1", 0, 10000), x("cpu_op", "aten::mm", 1, 8000),
                         x("user_annotation", "ProfilerStep#9", 20000, 27)}}}
                      .dump()));
  CHECK(one.ranks[0].steps.size() == 1);
  CHECK(one.ranks[0].empty_steps == std::vector<std::string>{"ProfilerStep#9"});
  // A file of that step alone: nothing to analyze.
  const std::string alone =
      dir.write("alone.json", Json{{"traceEvents", {x("user_annotation", "ProfilerStep#7", 0, 27)}}}.dump());
  CHECK(error_of(alone) ==
        "'" + alone +
            "': its only step, `ProfilerStep#7`, holds no operator, loader range, kernel, copy or "
            "sync: nothing to analyze (a profiler cycle cut short: with a schedule, `repeat=1` "
            "ends the profiling after one cycle, and a trace written to one file name per cycle "
            "is overwritten by the next)");
}

TEST_CASE("analyze: a path that is not UTF-8 renders as JSON, the bad bytes replaced", "[analyze]") {
  // dump() threw nlohmann's type_error 316 (invalid UTF-8 byte).
  TempDir dir;
  const std::string path =
      dir.write("bad\xff.json", Json{{"traceEvents", {x("cpu_op", "aten::mm", 0, 10)}}}.dump());
  const auto a = ptune::analyze::analyze(path);
  const auto j = Json::parse(ptune::analyze::render_analysis(a, "json"));
  CHECK(has(j["path"].get<std::string>(), "bad\xef\xbf\xbd.json"));
}

TEST_CASE("rule table: the sweep's thresholds are the table's, and docs/analyze.md shows the table",
          "[analyze]") {
  using ptune::measure::rule;
  using ptune::measure::RuleId;
  const ptune::measure::DiagnosisThresholds t;
  CHECK(t.input_bound_pct == rule(RuleId::kInputBound).threshold);
  CHECK(t.copy_bound_pct == rule(RuleId::kCopyBound).threshold);
  CHECK(t.launch_bound_busy_pct == rule(RuleId::kLaunchBound).threshold);
  CHECK(t.low_memory_pct == rule(RuleId::kLowMemory).threshold);
  for (size_t i = 0; i < ptune::measure::rules().size(); ++i)
    CHECK(static_cast<size_t>(ptune::measure::rules()[i].id) == i);
  const std::string page = ptune::test::read_file(std::string(PTUNE_SOURCE_DIR) + "/docs/analyze.md");
  INFO(ptune::measure::rules_markdown());
  CHECK(has(page, ptune::measure::rules_markdown()));
}

TEST_CASE("ptune analyze: table, json and md on stdout, and bad input as one line with exit 2",
          "[e2e][analyze]") {
  using ptune::test::exe;
  using ptune::test::run;
  const std::string trace = fixture("gpu_copy_bound.json");
  auto r = run(exe() + " analyze '" + trace + "'");
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(has(r.out, "verdict: copy-bound (40% of the step in copies not overlapped by kernels"));
  CHECK(has(r.out, "ProfilerStep#1"));
  CHECK(has(r.out, "mean"));
  r = run(exe() + " analyze '" + trace + "' --format json");
  CHECK(r.code == 0);
  const auto j = nlohmann::ordered_json::parse(r.out);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  // The documented shape (docs/analyze.md, "JSON"), in order.
  CHECK(keys == std::vector<std::string>{"path",
                                         "writer",
                                         "device",
                                         "devices",
                                         "steps_from",
                                         "verdict",
                                         "notes",
                                         "rank",
                                         "steps",
                                         "mean",
                                         "tensor_core_pct",
                                         "half_precision_pct",
                                         "top_kernels",
                                         "top_operators",
                                         "dataloader",
                                         "h2d",
                                         "syncs",
                                         "distributed",
                                         "files",
                                         "label",
                                         "schema_version",
                                         "batch_size",
                                         "samples_per_s",
                                         "cuda_graphs",
                                         "streams",
                                         "processes",
                                         "gpu",
                                         "memory",
                                         "allocations",
                                         "under_load",
                                         "load",
                                         "throughput"});
  CHECK(j["gpu"]["trace"]["idle_pct"].is_number());
  r = run(exe() + " analyze '" + trace + "' --format csv");
  CHECK(r.code == 0);
  CHECK(r.out.rfind(
            "step,ms,kernel%,memcpy%,memset%,comm%,runtime%,dataloader%,cpu_exec%,other%,gpu_util%,syncs\n",
            0) == 0);
  CHECK(j["verdict"]["rule"] == "copy-bound");
  CHECK(j["device"] == "cuda");
  CHECK(j["mean"]["split_pct"]["memcpy"] == Approx(40.0));
  CHECK(j["h2d"]["pageable"] == 3);
  CHECK(j["steps"].size() == 3);
  r = run(exe() + " analyze '" + trace + "' --format md");
  CHECK(r.code == 0);
  CHECK(has(r.out, "**Verdict:** copy-bound"));
  CHECK(has(r.out, "| step | ms | kernel% |"));

  TempDir dir;
  const std::string bad = dir.write("bad.json", "{\"traceEvents\": [");
  r = run(exe() + " analyze '" + bad + "'");
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err ==
        "ptune: error: analyze: '" + bad + "': truncated: the JSON ends at byte 17 before it is complete\n");
  r = run(exe() + " analyze '" + dir.file("nothing") + "'");
  CHECK(r.code == 2);
  CHECK(r.err == "ptune: error: analyze: '" + dir.file("nothing") + "': no such file or folder\n");
  r = run(exe() + " analyze '" + trace + "' --format xml");
  CHECK(r.code == 2);
  CHECK(r.err ==
        "ptune: error: --format: unknown format 'xml', did you mean 'md'? allowed: table, json, md, csv\n");
}

TEST_CASE(
    "ptune analyze: torch.profiler traces of a CPU ResNet step, input-bound or not, with or without .item()",
    "[e2e][analyze][python]") {
  using ptune::test::exe;
  using ptune::test::run;
  TempDir dir;
  const auto made =
      run(std::string("'") + PTUNE_PYTHON + "' '" + PTUNE_SOURCE_DIR + "/test/make_torch_trace.py' '" +
          dir.path.string() + "' loader0 workers item workers_item");
  INFO(made.err);
  REQUIRE(made.code == 0);

  // num_workers=0 and a slow Dataset: input-bound, named, with the DataLoader move. A folder as
  // tensorboard_trace_handler writes it.
  auto r = run(exe() + " analyze '" + dir.file("loader0") + "' --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  Json j = Json::parse(r.out);
  CHECK(j["writer"] == "pytorch");
  CHECK(j["device"] == "cpu");
  CHECK(j["steps_from"] == "ProfilerStep#N");
  CHECK(j["steps"].size() == 2);
  CHECK(j["steps"][0]["gpu_util_pct"].is_null());
  CHECK(j["tensor_core_pct"].is_null());
  CHECK(j["verdict"]["rule"] == "input-bound");
  const std::string loader0 = j["verdict"]["text"];
  CHECK(has(loader0, "% of the step in `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`"));
  CHECK(has(loader0, "num_workers=N"));
  // A CPU-only trace: no device to pin memory for, or to normalize on.
  CHECK(has(loader0, "persistent_workers=True"));
  CHECK_FALSE(has(loader0, "pin_memory"));
  CHECK_FALSE(has(loader0, "GPU"));
  CHECK(j["mean"]["split_pct"]["dataloader"].get<double>() >= 30.0);
  for (const auto& n : j["notes"]) CHECK_FALSE(has(n.get<std::string>(), "host sync"));

  // The same Dataset with workers that kept up: not input-bound, and no sync.
  r = run(exe() + " analyze '" + dir.file("workers/trace.json") + "' --format json");
  REQUIRE(r.code == 0);
  j = Json::parse(r.out);
  CHECK(j["verdict"]["rule"] == "compute-bound on the CPU");
  CHECK(j["mean"]["split_pct"]["dataloader"].get<double>() < 30.0);
  CHECK(has(j["dataloader"][0]["name"].get<std::string>(), "_MultiProcessingDataLoaderIter"));
  for (const auto& n : j["notes"]) CHECK_FALSE(has(n.get<std::string>(), "host sync"));

  // A per-step loss.item() on the CPU (a gzip file from export_chrome_trace): it reads host
  // memory, nothing waits: no host sync, no advice about one.
  r = run(exe() + " analyze '" + dir.file("item/trace.json.gz") + "'");
  REQUIRE(r.code == 0);
  CHECK(has(r.out, "verdict: compute-bound on the CPU"));
  CHECK_FALSE(has(r.out, "host sync"));
  CHECK_FALSE(has(r.out, "loss.item()"));

  // Tuning steps as a table: num_workers 0, then 2; a per-step .item() added, then removed.
  // The batch size (8) read from the recorded input shapes.
  const std::string html = dir.file("overview.html");
  // The page's folder is checked before the traces are read: one line, exit 2, nothing printed.
  r = run(exe() + " analyze '" + dir.file("loader0") + "' -o '" + dir.file("none/overview.html") + "'");
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err == "ptune: error: --html: folder '" + dir.file("none") + "' does not exist\n");
  r = run(
      exe() + " analyze '" + dir.file("loader0") + "' '" + dir.file("workers/trace.json") + "' '" +
      dir.file("workers_item/trace.json") + "' '" + dir.file("workers/trace.json") +
      "' --label 'workers 0' --label 'workers 2' --label '+ item()' --label '- item()' --format json -o '" +
      html + "'");
  INFO(r.err);
  REQUIRE(r.code == 0);
  j = Json::parse(r.out);
  REQUIRE(j["versions"].size() == 4);
  CHECK(j["versions"][0]["verdict"]["rule"] == "input-bound");
  CHECK(j["versions"][1]["verdict"]["rule"] == "compute-bound on the CPU");
  CHECK(j["versions"][0]["batch_size"] == 8);
  CHECK(j["versions"][1]["speedup_vs_prev"].get<double>() > 1.5);  // the loader no longer in the step
  CHECK(j["versions"][3]["speedup_vs_prev"].get<double>() > 0);
  // Two steps per trace: every speedup undecided, whatever its size, and why.
  for (size_t i = 1; i < 4; ++i) {
    CHECK(j["versions"][i]["vs_prev"]["verdict"] == "undecided");
    CHECK(j["versions"][i]["vs_first"]["verdict"] == "undecided");
  }
  CHECK(j["versions"][1]["vs_prev"]["reason"] ==
        "2 steps in `workers 0`, 2 steps in `workers 2`: 3 or more per trace are needed");
  auto changes = [&](size_t i) {
    std::string all;
    for (const auto& c : j["changes"][i]["changes"]) all += c["text"].get<std::string>() + "\n";
    return all;
  };
  INFO(changes(0) + "--\n" + changes(1) + "--\n" + changes(2));
  CHECK(has(changes(0),
            "(`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` -> "
            "`enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`)"));
  CHECK(has(changes(0), "verdict input-bound -> compute-bound on the CPU"));
  // A CPU .item() is no host sync: no sync added or removed.
  CHECK_FALSE(has(changes(1), "sync"));
  CHECK_FALSE(has(changes(2), "sync"));
  CHECK(std::filesystem::file_size(html) > 1000);
}

TEST_CASE("ptune analyze agrees with a sweep row's own figures on ptune's trace of it",
          "[e2e][analyze][cpu]") {
  // Tolerance: 15 percentage points for data wait, copy and GPU busy. The row is measured on
  // timed steps without the profiler, the trace on profile_steps recorded steps after them.
  using ptune::test::exe;
  using ptune::test::run;
  TempDir dir;
  // glibc's malloc kept from giving memory back (process.allocator glibc_tuned): with its default
  // the sweep calls the rows allocator-bound (system time, which a trace does not record). Both
  // rows then run, and are profiled, in child processes started with the setting. A row ends
  // once its interval lies within ±50%: this checks the split, not a verdict.
  const std::string cfg = dir.write("exp.json", R"({"name": "an", "cpu_threads": 1,
      "process": {"allocator": "glibc_tuned"},
      "data": {"num_samples": 64, "image_size": 32},
      "loader": {"batch_size": 8},
      "measure": {"warmup_steps": 1, "steps": 3, "profile_steps": 2, "target_ci_pct": 50, "out_dir": ")" +
                                                    dir.file("runs") + R"("},
      "sweep": [{"name": "baseline"}, {"name": "workers", "set": {"loader.num_workers": 2}}]})");
  auto r = run(exe() + " sweep '" + cfg + "' --profile --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json res = Json::parse(r.out);
  REQUIRE(res["rows"].size() == 2);
  // Depends on the CPU: optim.amp (bf16) is advised on fp32 rows only where bf16 is native to
  // what oneDNN uses (not under ONEDNN_MAX_CPU_ISA=AVX2); the environment block says which.
  const bool bf16_native = res["environment"]["cpu"]["bf16_native"].get<bool>();
  for (const Json& row : res["rows"]) {
    INFO("row " << row["name"]);
    const std::string trace = row["trace"];
    r = run(exe() + " analyze '" + trace + "' --format json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    const Json a = Json::parse(r.out);
    CHECK(a["writer"] == "ptune");
    CHECK(a["steps_from"] == "ProfilerStep#N");  // one window per profiled step
    CHECK(a["steps"].size() == 2);
    const bool on_gpu = !row["gpu_busy_pct"].is_null();
    CHECK(a["device"] == (on_gpu ? "cuda" : "cpu"));
    if (on_gpu)
      CHECK(a["mean"]["gpu_util_pct"].get<double>() == Approx(row["gpu_busy_pct"].get<double>()).margin(15));
    REQUIRE_FALSE(a["dataloader"].empty());  // the loader wait is named as PyTorch names it
    CHECK(a["mean"]["split_pct"]["dataloader"].get<double>() ==
          Approx(row["data_wait_pct"].get<double>()).margin(15));
    if (on_gpu)
      CHECK(a["mean"]["split_pct"]["memcpy"].get<double>() ==
            Approx(row["h2d_pct"].get<double>()).margin(15));
    // The same verdict as the row's diagnosis: its first word, and for an fp32 row the same move.
    const std::string diagnosis = row["diagnosis"], rule = a["verdict"]["rule"];
    CHECK(diagnosis.substr(0, diagnosis.find(' ')) == rule.substr(0, rule.find(' ')));
    if (has(diagnosis, "on fp32: optim.amp")) {
      CHECK(rule == "compute-bound on fp32");
      CHECK(has(a["verdict"]["move"].get<std::string>(), "`optim.amp`"));
    }
    if (has(diagnosis, "so optim.amp is not advised")) {
      CHECK(rule == "compute-bound on the CPU");
      CHECK(has(a["notes"].dump(), "`optim.amp` is not advised"));
    }
  }
  // One of the checks above ran: the first row is compute-bound on fp32.
  const std::string first = res["rows"][0]["diagnosis"];
  INFO(first);
  if (bf16_native) {
    CHECK(has(first, "on fp32: optim.amp bf16 with model.channels_last (this CPU's "));
  } else {
    CHECK(has(first, "on fp32: "));
    CHECK(has(first, "so optim.amp is not advised"));
  }
}

TEST_CASE("analyze: more than 256 GiB of trace text is refused, a gzip bomb of spaces takes no memory",
          "[analyze]") {
  TempDir dir;
  const std::string limit = "more than 256 GiB of trace text";
  const std::string advice =
      "; record fewer steps (torch.profiler's schedule(active=N), measure.profile_steps)";
  // A file over the limit (sparse: no disk used), refused before it is read.
  const std::string big = dir.file("big.json");
  std::ofstream(big) << "{";
  std::filesystem::resize_file(big, (uint64_t{256} << 30) + 1);
  CHECK(error_of(big) == "'" + big + "': " + limit + advice);
  // 1 MiB of gzip that inflates to 1 GiB + 64 KiB of spaces: read through (the parser skips
  // blanks; a piece of text is held at a time), and named for what it is.
  const std::string bomb = dir.file("bomb.json.gz");
  gzFile gz = gzopen(bomb.c_str(), "wb1");
  REQUIRE(gz != nullptr);
  const std::string spaces(1 << 20, ' ');
  for (int i = 0; i < 1024; ++i)
    REQUIRE(gzwrite(gz, spaces.data(), static_cast<unsigned>(spaces.size())) > 0);
  REQUIRE(gzwrite(gz, spaces.data(), 1 << 16) > 0);
  REQUIRE(gzclose(gz) == Z_OK);
  CHECK(std::filesystem::file_size(bomb) < (uint64_t{8} << 20));
  CHECK(error_of(bomb) == "'" + bomb + "': white space only (" +
                              std::to_string((uint64_t{1} << 30) + (1 << 16)) + " bytes), not a trace");
}

// The properties of real GPU traces (docs/analyze.md, "Checked on real GPU traces"), each in a
// generated fixture (test/data/make_trace_fixtures.py).

TEST_CASE("analyze: a host wait on a busy GPU costs nothing, compute-bound on fp32 wins", "[analyze]") {
  // As on a real V100 ResNet step: the GPU 97% busy, the host 18% of the step in
  // cudaDeviceSynchronize. The wait is named in a note, not the verdict.
  const auto a = ptune::analyze::analyze(fixture("gpu_busy_sync.json.gz"));
  CHECK(a.verdict.rule == "compute-bound on fp32");
  const auto m = a.ranks[0].mean();
  CHECK(100.0 * m.sync_us / m.end == Approx(20).margin(0.5));
  CHECK(100.0 * m.sync_idle_us / m.end < 10.0);
  REQUIRE_FALSE(a.notes.empty());
  CHECK(has(a.notes[0], "the host waited 20% of the step in syncs with the GPU busy meanwhile"));
  CHECK(has(a.notes[0], "not a bottleneck here"));
}

TEST_CASE("analyze: without ProfilerStep, CUDA initialization and one-time set-up are left out, and said",
          "[analyze]") {
  const auto a = ptune::analyze::analyze(fixture("gpu_init_no_steps.json.gz"));
  const auto& b = a.ranks[0];
  CHECK_FALSE(b.from_steps);
  CHECK(b.before_first_gpu_us == Approx(701010));  // up to the end of the lazy-loading launch
  REQUIRE(b.stalls.size() == 3);
  CHECK(b.stalls[0].name == "cudaLaunchKernel");
  CHECK(b.steps[0].ms() < 12.0);  // the compute, not the 0.7 s of set-up
  CHECK(a.verdict.rule == "compute-bound on fp32");
  REQUIRE_FALSE(a.notes.empty());
  CHECK(has(a.notes[0],
            "analyzed as one window from 701 ms in: what came before is left out (one-time set-up with the "
            "GPU idle: `cudaLaunchKernel` 300 ms, `cudaStreamCreateWithFlags` 250 ms, `cudaMalloc` 150 ms"));
}

TEST_CASE("analyze: CUDA graph launches, the 2021 schema, two processes in one file", "[analyze]") {
  // cudaGraphLaunch: its kernels share its correlation and belong to its step.
  const auto g = ptune::analyze::analyze(fixture("gpu_cuda_graphs.json.gz"));
  const auto& gb = g.ranks[0];
  CHECK(gb.cuda_graphs);
  REQUIRE(gb.steps.size() == 3);
  for (const auto& s : gb.steps) CHECK(100.0 * s.kernel_us / (s.end - s.start) > 85.0);
  CHECK(g.verdict.rule == "compute-bound");
  // Every kernel but the two layout conversions is fp16/bf16 (ampere_fp16_s16816gemm_fp16_* too).
  CHECK(*gb.half_pct == Approx(80).margin(1));
  // The 2021 schema (Operator/Runtime/Kernel, string tids): the same figures as today's.
  const auto old = ptune::analyze::analyze(fixture("gpu_old_schema.json.gz"));
  const auto now = ptune::analyze::analyze(fixture("gpu_compute_fp32.json.gz"));
  CHECK(old.verdict.text() == now.verdict.text());
  CHECK(old.ranks[0].mean().kernel_us == Approx(now.ranks[0].mean().kernel_us));
  CHECK(old.ranks[0].gpu_span_us == Approx(now.ranks[0].gpu_span_us));
  // Two processes' traces in one folder, without distributedInfo: side by side, as ranks.
  const auto procs = ptune::analyze::analyze(fixture("procs"));
  REQUIRE(procs.ranks.size() == 2);
  CHECK_FALSE(procs.ranks[0].rank);
  CHECK(procs.ranks[procs.primary].host_pid == 2222);
  CHECK(has(procs.verdict.evidence, "; process 2222, the slowest"));
  CHECK(has(procs.notes.back(), "process 2222 is the slowest:"));
  // A DataLoader worker's process beside the training process's steps.
  const auto two = ptune::analyze::analyze(fixture("gpu_two_processes.json.gz"));
  CHECK(two.ranks[0].processes == 2);
  CHECK(two.ranks[0].steps.size() == 3);
  CHECK(two.verdict.rule == "compute-bound");
}

TEST_CASE("analyze: batch size from input shapes, peak memory per step from memory samples", "[analyze]") {
  const auto a = ptune::analyze::analyze(fixture("gpu_memory_shapes.json.gz"));
  const auto& b = a.ranks[0];
  CHECK(b.batch_size == 64);
  REQUIRE(b.steps.size() == 3);
  CHECK(*b.steps[0].peak_allocated_mb == Approx(1810));
  CHECK(*b.steps[2].peak_allocated_mb == Approx(1830));
  CHECK(*b.mean().peak_reserved_mb == Approx(2048));
  const auto j = ptune::analyze::to_json(a);
  CHECK(j["batch_size"] == 64);
  CHECK(j["samples_per_s"].get<double>() == Approx(64 * 1000.0 / b.mean().ms()).epsilon(0.001));
  CHECK(j["memory"]["peak_allocated_mb"].get<double>() == Approx(1830));
  // The highest sample (step 3, 1830 MB at 34.2 ms): its device, the operator the code called
  // (aten::convolution_backward, not the aten::empty inside it), and the timeline of that step.
  REQUIRE(b.memory_peaks.size() == 1);
  CHECK(b.memory_peaks[0].device == 0);
  CHECK(b.memory_peaks[0].allocated_mb == Approx(1830));
  CHECK(*b.memory_peaks[0].reserved_mb == Approx(2048));
  CHECK(b.memory_peaks[0].op == "aten::convolution_backward");
  CHECK(b.memory_peaks[0].step == "ProfilerStep#3");
  CHECK(b.memory_peaks[0].at_ms == Approx(4.2));
  const auto& line = j["memory"]["timeline_ms_mb"];
  REQUIRE(line.size() == 4);  // the step's four device samples
  CHECK(line[1][0].get<double>() == Approx(4.2));
  CHECK(line[1][1].get<double>() == Approx(1830));
  CHECK(j["memory"]["devices"][0]["operator_at_peak"] == "aten::convolution_backward");
  CHECK(has(ptune::analyze::render_analysis(a, "table"),
            "  device 0: highest 1830 MB allocated (2048 MB reserved), in `aten::convolution_backward`, "
            "ProfilerStep#3 at 4.2 ms\n"));
  ptune::analyze::Version mv;
  mv.label = "memory";
  mv.analysis = a;
  const std::string page = ptune::analyze::overview_html(ptune::analyze::compare_analyses({mv}));
  CHECK(has(page, "<svg class=\"memory\""));
  CHECK(has(page, "Allocated memory over ProfilerStep#3 on device 0"));
  // A GPU trace without memory events says which profiler option records them.
  const auto none = ptune::analyze::analyze(fixture("gpu_copy_bound.json"));
  CHECK(
      has(ptune::analyze::render_analysis(none, "table"),
          "peak GPU memory: no memory events; `profile_memory=True` in `torch.profiler.profile(...)` records "
          "them\n"));
  CHECK(j["gpu"]["trace"]["idle_pct"].get<double>() == Approx(2.7).margin(0.01));
  // The operators that allocated most: charged to the operator the code called, not the
  // aten::empty inside it; frees not counted.
  REQUIRE(b.allocators.size() == 3);
  CHECK(b.allocators_gpu);
  CHECK(b.allocators[0].name == "aten::convolution_backward");
  CHECK(b.allocators[0].count == 3);
  CHECK(b.allocators[0].bytes == Approx(3 * 512.0 * (1 << 20)));
  CHECK(b.allocators[1].name == "aten::conv2d");
  CHECK(b.allocators[2].name == "aten::add_");
  CHECK(b.allocators[2].bytes == Approx(3 * 32.0 * (1 << 20)));
  CHECK(j["allocations"]["device"] == "gpu");
  CHECK(j["allocations"]["operators"][0]["name"] == "aten::convolution_backward");
  CHECK(j["allocations"]["operators"][0]["count_per_step"].get<double>() == 1.0);
  CHECK(j["allocations"]["operators"][0]["mb_per_step"].get<double>() == 512.0);
  const std::string table = ptune::analyze::render_analysis(a, "table");
  CHECK(table.find("allocated most (GPU memory, per step): aten::convolution_backward 512 MB (1x), "
                   "aten::conv2d 64 MB (1x), aten::add_ 32 MB (1x)\n") != std::string::npos);
  CHECK(ptune::analyze::render_analysis(a, "md").find("512 MB (1x), aten::conv2d 64 MB") !=
        std::string::npos);
}

TEST_CASE("analyze BASE NEXT...: the iterative table, speedups and what changed per pair", "[analyze]") {
  using namespace ptune::analyze;
  CompareOptions copt;
  copt.labels = {"pageable", "pinned fp32", "amp"};
  copt.batch_size = 64;
  const auto c = compare_versions({fixture("gpu_copy_bound.json"), fixture("gpu_compute_fp32.json.gz"),
                                   fixture("gpu_compute_amp.json.gz")},
                                  {}, copt);
  REQUIRE(c.versions.size() == 3);
  REQUIRE(c.pairs.size() == 2);
  CHECK(c.versions[0].label == "pageable");
  CHECK_FALSE(c.versions[0].vs_prev);
  // Steps of equal length: the ratio of geometric means is the ratio of the mean steps.
  CHECK(*c.versions[1].vs_prev == Approx(c.versions[0].step_ms / c.versions[1].step_ms));
  CHECK(*c.versions[2].vs_first == Approx(c.versions[0].step_ms / c.versions[2].step_ms));
  CHECK(*c.versions[2].vs_first ==
        Approx(ptune::stats::welch_speedup(c.versions[0].step_ms_each, c.versions[2].step_ms_each).point));
  CHECK(*c.versions[0].samples_per_s == Approx(64 * 1000.0 / c.versions[0].step_ms));
  auto texts = [&](size_t i) {
    std::string all;
    for (const auto& x : c.pairs[i].changes) all += x.text + "\n";
    return all;
  };
  INFO(texts(0));
  CHECK(has(texts(0), "copies vanished: `Memcpy HtoD (Pageable -> Device)` 1 -> 0 per step"));
  CHECK(has(texts(0), "copies appeared: `Memcpy HtoD (Pinned -> Device)` 0 -> 1 per step"));
  CHECK(has(texts(0), "verdict copy-bound -> compute-bound on fp32"));
  INFO(texts(1));
  CHECK(has(texts(1), "kernel `implicit_convolve_sgemm` 2.4 ms -> 0.00 ms per step"));
  CHECK(has(texts(1), "verdict compute-bound on fp32 -> compute-bound"));
  // The formats.
  const auto j = comparison_json(c);
  CHECK(j["versions"].size() == 3);
  CHECK(j["versions"][2]["verdict"]["rule"] == "compute-bound");
  CHECK(j["changes"][0]["from"] == "pageable");
  const std::string csv = render_versions(c, "csv");
  CHECK(csv.rfind("label,step ms,samples/s,vs prev,vs first,data%,copy%,kernel%,host%,idle%,gpu busy%,peak "
                  "MB,verdict\n",
                  0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 4);
  CHECK(has(render_versions(c, "md"), "| pageable |"));
  CHECK(has(render_versions(c, "table"), "pageable -> pinned fp32:"));
  // --label once per trace.
  copt.labels = {"one"};
  CHECK_THROWS_WITH(
      compare_versions({fixture("gpu_copy_bound.json"), fixture("gpu_compute_amp.json.gz")}, {}, copt),
      "--label given 1 time for 2 traces: give one per trace, in order");
  copt.labels = {"one", ""};
  CHECK_THROWS_WITH(
      compare_versions({fixture("gpu_copy_bound.json"), fixture("gpu_compute_amp.json.gz")}, {}, copt),
      "--label: an empty label; give each trace a name the table can show");
}

namespace {

/// Runs `argv` with stdout and stderr to /dev/null; its exit status, peak resident memory (KiB)
/// and wall time (s).
struct Usage {
  int code = -1;
  long max_rss_kb = 0;
  double wall_s = 0;
};
Usage usage_of(const std::vector<std::string>& argv) {
  Usage u;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  u.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  u.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  u.max_rss_kb = ru.ru_maxrss;
  return u;
}

}  // namespace

TEST_CASE("ptune analyze streams a trace: memory well below the file's size", "[e2e][analyze]") {
  // A 60 MB trace of 100 steps of 1,000 kernels each (Kineto's layout: an event per line).
  TempDir dir;
  const std::string path = dir.file("big.json");
  {
    std::ofstream out(path);
    out << "{\"schemaVersion\": 1, \"traceEvents\": [\n";
    long corr = 0;
    for (int step = 0; step < 100; ++step) {
      const double t0 = step * 20000.0;
      out << R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" << step
          << R"(", "pid": 1, "tid": 1, "ts": )" << t0 << R"(, "dur": 20000, "args": {"External id": 1}},)"
          << "\n";
      for (int k = 0; k < 1000; ++k, ++corr) {
        const double h = t0 + k * 19.0;
        out << R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": )" << h
            << R"(, "dur": 15, "args": {"External id": )" << corr
            << R"(, "Input Dims": [[64, 512], [512, 512]]}},)"
            << "\n";
        out << R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": )"
            << h + 2 << R"(, "dur": 5, "args": {"correlation": )" << corr << R"(, "cbid": 211}},)"
            << "\n";
        out << R"({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": )"
            << h + 10 << R"(, "dur": 17, "args": {"correlation": )" << corr
            << R"(, "stream": 7, "device": 0, "grid": [8, 8, 1], "block": [256, 1, 1], "registers per thread": 128}},)"
            << "\n";
      }
    }
    out << R"({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]})"
        << "\n";
  }
  const auto size_kb = static_cast<long>(std::filesystem::file_size(path) / 1024);
  REQUIRE(size_kb > 50 * 1024);
  const auto base = usage_of({PTUNE_EXE, "--version"});
  const auto a = usage_of({PTUNE_EXE, "analyze", path, "--format", "json"});
  REQUIRE(a.code == 0);
  INFO("file " << size_kb << " KiB; analyze " << a.max_rss_kb << " KiB, --version " << base.max_rss_kb
               << " KiB, " << a.wall_s << " s");
  // The events (300,000 of them) take about 25 MB; the text is never held whole.
  CHECK(a.max_rss_kb - base.max_rss_kb < size_kb / 2);
  CHECK(a.wall_s < 20.0);  // about 1 s on a quiet core
}

// Host syncs: an .item() waits for the device only when its tensor is there. Kineto records an
// input's dtype and shape, not its device: the runtime call that waits (a device-to-host copy,
// a stream sync) inside the read tells.

namespace {

/// How the sync fixture records where calls come from.
enum class Stack { kNone, kPythonFrames, kCallStackField };

/// Three 1 ms steps of a GPU training loop (or, `gpu` false, the same host ops on the CPU): the
/// DataLoader reads each label with .item() on the CPU (torchvision's FakeData), and the loop
/// calls loss.item() on a CUDA tensor, whose aten::_local_scalar_dense encloses a cudaMemcpyAsync
/// device-to-host and a cudaStreamSynchronize.
std::string sync_trace(const TempDir& dir, const std::string& name, bool gpu, Stack stack) {
  Json ev = Json::array();
  int corr = 100;
  auto py = [&](const std::string& frame, double ts, double dur) {
    if (stack == Stack::kPythonFrames) ev.push_back(x("python_function", frame, ts, dur));
  };
  py("train.py(30): <module>", 0, 4000);
  for (int i = 0; i < 3; ++i) {
    const double t0 = 1000.0 * (i + 1);
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i + 1), t0, 1000));
    ev.push_back(
        x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 10, 200));
    py("torchvision/datasets/fakedata.py(40): __getitem__", t0 + 20, 100);
    py("<built-in method item of Tensor object at 0x7f00>", t0 + 30, 30);
    ev.push_back(x("cpu_op", "aten::item", t0 + 31, 20));
    ev.push_back(x("cpu_op", "aten::_local_scalar_dense", t0 + 32, 10));
    ev.push_back(x("cpu_op", "aten::conv2d", t0 + 250, 300));
    if (gpu) {
      ev.push_back(x("cuda_runtime", "cudaLaunchKernel", t0 + 260, 5, Json{{"correlation", ++corr}}));
      ev.push_back(x("kernel", "volta_sgemm_128x64_nn", t0 + 270, 320, Json{{"correlation", corr}}, 0, 7));
    }
    py("train.py(12): train_step", t0 + 590, 200);
    py("<built-in method item of Tensor object at 0x7f01>", t0 + 595, 150);
    ev.push_back(x("cpu_op", "aten::item", t0 + 600, 100));
    Json scalar = x("cpu_op", "aten::_local_scalar_dense", t0 + 602, 96);
    if (stack == Stack::kCallStackField)
      scalar["args"]["Call stack"] =
          "torch/_tensor.py(1000): item;train.py(12): train_step;train.py(30): <module>";
    ev.push_back(scalar);
    if (gpu) {
      ev.push_back(x("cuda_runtime", "cudaMemcpyAsync", t0 + 605, 10, Json{{"correlation", ++corr}}));
      ev.push_back(x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t0 + 620, 2,
                     Json{{"correlation", corr}}, 0, 7));
      ev.push_back(x("cuda_runtime", "cudaStreamSynchronize", t0 + 616, 80));
    }
  }
  return dir.write(name, Json{{"traceEvents", ev}}.dump());
}

std::string all_advice(const ptune::analyze::Analysis& a) {
  std::string s = a.verdict.text() + "\n";
  for (const auto& n : a.notes) s += n + "\n";
  return s;
}

}  // namespace

TEST_CASE("analyze: .item() is a host sync only where it waits for the device, and says where it came from",
          "[analyze]") {
  TempDir dir;
  // Python frames (with_stack=True, torch 2.x): the frame of the training code that called it.
  auto a = ptune::analyze::analyze(sync_trace(dir, "frames.json", true, Stack::kPythonFrames));
  auto& b = a.ranks[0];
  std::map<std::string, int64_t> count;
  for (const auto& s : b.syncs) count[s.name] = s.count;
  // The DataLoader's three label reads are not syncs: nothing waits inside them.
  CHECK(count == std::map<std::string, int64_t>{
                     {"aten::item", 3}, {"cudaMemcpyAsync", 3}, {"cudaStreamSynchronize", 3}});
  for (const auto& s : b.steps) CHECK(s.syncs == 3);
  REQUIRE(b.sync_origins.size() == 3);
  for (const auto& o : b.sync_origins) {
    CHECK(o.where == "`train.py(12): train_step`");
    CHECK(o.count == 3);
  }
  INFO(all_advice(a));
  // The GPU idles after each wait until the next step's kernel: sync-bound, and where the syncs came from.
  CHECK(a.verdict.rule == "sync-bound");
  CHECK(has(a.verdict.evidence,
            "the host waited in `aten::item`, `cudaStreamSynchronize`, `cudaMemcpyAsync` (3 per step; the "
            "host waited 10% of the step); `aten::item`, `cudaMemcpyAsync`, `cudaStreamSynchronize` from "
            "`train.py(12): train_step`"));
  auto j = ptune::analyze::to_json(a);
  CHECK(j["syncs"][0]["from"][0]["where"] == "`train.py(12): train_step`");
  CHECK(has(ptune::analyze::render_analysis(a, "table"), "3x  aten::item from `train.py(12): train_step`\n"));

  // An older trace's "Call stack" field (innermost frame first): the library frame, and the
  // training code's frame that called it.
  a = ptune::analyze::analyze(sync_trace(dir, "callstack.json", true, Stack::kCallStackField));
  REQUIRE_FALSE(a.ranks[0].sync_origins.empty());
  bool item_seen = false;
  for (const auto& o : a.ranks[0].sync_origins)
    if (o.name == "aten::item") {
      item_seen = true;
      CHECK(o.where == "`torch/_tensor.py(1000): item`, called from `train.py(12): train_step`");
    }
  CHECK(item_seen);

  // No stack recorded: its thread and the steps.
  a = ptune::analyze::analyze(sync_trace(dir, "nostack.json", true, Stack::kNone));
  REQUIRE(a.ranks[0].sync_origins.size() == 3);
  CHECK(a.ranks[0].sync_origins[0].where ==
        "the main thread (1) in ProfilerStep#1, ProfilerStep#2, ProfilerStep#3");
  CHECK(has(
      all_advice(a),
      "`cudaStreamSynchronize` from the main thread (1) in ProfilerStep#1, ProfilerStep#2, ProfilerStep#3"));
  // The same events written last first (a Kineto file is not in time order): the steps in order.
  {
    Json doc = Json::parse(ptune::test::read_file(sync_trace(dir, "nostack.json", true, Stack::kNone)));
    std::reverse(doc["traceEvents"].begin(), doc["traceEvents"].end());
    a = ptune::analyze::analyze(dir.write("reversed.json", doc.dump()));
    REQUIRE(a.ranks[0].sync_origins.size() == 3);
    CHECK(a.ranks[0].sync_origins[0].where ==
          "the main thread (1) in ProfilerStep#1, ProfilerStep#2, ProfilerStep#3");
  }

  // The same host ops on the CPU: no syncs, no host-sync advice.
  a = ptune::analyze::analyze(sync_trace(dir, "cpu.json", false, Stack::kPythonFrames));
  CHECK_FALSE(a.ranks[0].has_gpu);
  CHECK(a.ranks[0].syncs.empty());
  CHECK(a.ranks[0].sync_origins.empty());
  for (const auto& s : a.ranks[0].steps) CHECK(s.syncs == 0);
  CHECK_FALSE(has(all_advice(a), "sync"));
  CHECK(a.verdict.rule == "compute-bound on the CPU");
}

namespace {

/// The analysis of `path` as JSON text, read with at most `part_bytes` of its events at a time.
std::string analysis_json(const std::string& path, uint64_t part_bytes) {
  ptune::analyze::AnalyzeOptions opt;
  opt.part_bytes = part_bytes;
  return ptune::analyze::to_json(ptune::analyze::analyze(path, opt)).dump(1);
}

/// How many parts `path` is read in with at most `part_bytes` of events at a time.
size_t parts_of(const std::string& path, uint64_t part_bytes) {
  size_t n = 0;
  ptune::analyze::SpooledTrace(path, part_bytes).for_each_part(part_bytes, [&](const ptune::analyze::Trace&) {
    ++n;
  });
  return n;
}

/// Ten 1 ms steps of a GPU whose kernels run 2.5 steps after their launch (a host far ahead of
/// its device), inside an operator that spans three steps and a Python frame that spans them all.
std::string lagging_trace(const TempDir& dir) {
  Json ev = Json::array();
  ev.push_back(x("python_function", "train.py(30): <module>", 0, 12000));
  ev.push_back(x("cpu_op", "aten::long_op", 1005, 2990));
  for (int i = 0; i < 10; ++i) {
    const double t0 = 1000.0 * (i + 1);
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i + 1), t0, 1000));
    ev.push_back(x("cpu_op", "aten::mm", t0 + 10, 100));
    ev.push_back(x("cuda_runtime", "cudaLaunchKernel", t0 + 20, 5, Json{{"correlation", 100 + i}}));
    ev.push_back(x("kernel", "volta_sgemm_128x64_nn", t0 + 2520, 900, Json{{"correlation", 100 + i}}, 0, 7));
    ev.push_back(x("cpu_op", "aten::item", t0 + 600, 100));
    ev.push_back(x("cpu_op", "aten::_local_scalar_dense", t0 + 602, 96));
  }
  return dir.write("lagging.json", Json{{"traceEvents", ev}}.dump());
}

}  // namespace

TEST_CASE("analyze: a trace read in parts of one step gives what it gives read whole", "[analyze]") {
  const uint64_t whole = ptune::analyze::kDefaultPartBytes;
  // Every fixture, read a step at a time (each file's steps in parts of one step, with their
  // neighbours): the same analysis, every figure.
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PTUNE_TEST_DATA) + "/traces")) {
    const std::string path = entry.path().string();
    if (!entry.is_directory() && !ptune::analyze::is_trace_file_name(path)) continue;
    INFO(path);
    CHECK(analysis_json(path, 0) == analysis_json(path, whole));
  }
  TempDir dir;
  // Syncs whose Python frames (and the loop's frame around every step) lie in earlier parts.
  for (const auto stack : {Stack::kPythonFrames, Stack::kCallStackField, Stack::kNone}) {
    const std::string path = sync_trace(dir, "sync.json", true, stack);
    CHECK(parts_of(path, 0) == 3);
    CHECK(parts_of(path, whole) == 1);
    CHECK(analysis_json(path, 0) == analysis_json(path, whole));
  }
  // Kernels that run two parts after the step that launched them; an operator three steps long.
  const std::string lag = lagging_trace(dir);
  CHECK(parts_of(lag, 0) == 10);
  CHECK(analysis_json(lag, 0) == analysis_json(lag, whole));
  const auto a = ptune::analyze::analyze(lag);
  REQUIRE(a.ranks[0].steps.size() == 10);
  // Each step's window reaches to the end of the kernel it launched, 2.5 steps later.
  CHECK(a.ranks[0].steps.back().end == 10000 + 2520 + 900);
}

TEST_CASE("analyze: a trace whose events are in no order is read in parts as it is whole", "[analyze]") {
  // Parts are read from the stretches of the file that hold one step each where there are few
  // (Kineto's layout), and from a copy sorted by step where there are many: 30 steps of 300
  // events, shuffled, change step about 9,000 times, more than the 4,096 stretches kept for a
  // small file. The same events in time order make 30 stretches.
  Json ev = Json::array();
  int corr = 0;
  for (int i = 0; i < 30; ++i) {
    const double t0 = 2000.0 * (i + 1);
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i + 1), t0, 2000));
    for (int k = 0; k < 100; ++k, ++corr) {
      const double h = t0 + 19.0 * k;
      ev.push_back(x("cpu_op", "aten::mm", h, 15));
      ev.push_back(x("cuda_runtime", "cudaLaunchKernel", h + 2, 5, Json{{"correlation", corr}}));
      ev.push_back(x("kernel", "volta_sgemm_128x64_nn", h + 10, 17, Json{{"correlation", corr}}, 0, 7));
    }
  }
  TempDir dir;
  const uint64_t whole = ptune::analyze::kDefaultPartBytes;
  const std::string path = dir.write("trace.json", Json{{"traceEvents", ev}}.dump());
  const std::string expected = analysis_json(path, whole);
  CHECK(parts_of(path, 0) == 30);
  CHECK(analysis_json(path, 0) == expected);
  CHECK(analysis_json(path, 64 << 10) == expected);  // parts of several steps
  // Kineto's layout: the host's events, then the device's (two stretches a step).
  std::stable_partition(ev.begin(), ev.end(), [](const Json& e) { return e["cat"] != "kernel"; });
  dir.write("trace.json", Json{{"traceEvents", ev}}.dump());
  CHECK(analysis_json(path, 0) == expected);
  CHECK(analysis_json(path, 64 << 10) == expected);
  std::shuffle(ev.begin(), ev.end(), std::mt19937_64(11));
  dir.write("trace.json", Json{{"traceEvents", ev}}.dump());
  CHECK(parts_of(path, 0) == 30);
  CHECK(analysis_json(path, whole) == expected);
  CHECK(analysis_json(path, 0) == expected);
  CHECK(analysis_json(path, 64 << 10) == expected);  // parts of several steps
}

TEST_CASE("analyze: ranges are merged and events sorted as a plain sort would, in runs or not", "[analyze]") {
  using ptune::analyze::Ranges;
  std::mt19937_64 rng(7);
  // The union of `r` sorted first by std::sort (merge of sorted ranges sorts nothing).
  auto reference = [](Ranges r) {
    std::sort(r.begin(), r.end());
    return ptune::analyze::merge(r);
  };

  for (const size_t runs : {1, 3, 40, 2000}) {
    for (const double base : {1.6e15, -3.0e3, 0.0}) {  // epoch microseconds, negative, from zero
      Ranges r;
      for (size_t k = 0; k < runs; ++k) {
        double t = base + static_cast<double>(rng() % 100000) / 4;  // quarter microseconds: ties too
        for (size_t i = 0; i < 6000 / runs + 1; ++i) {
          t += static_cast<double>(rng() % 50) / 2;
          r.emplace_back(t, t + static_cast<double>(rng() % 40) - 5);  // some empty or reversed
        }
      }
      INFO("runs " << runs << ", from " << base);
      CHECK(ptune::analyze::merge(r) == reference(r));
      std::vector<std::pair<double, size_t>> v;
      for (size_t i = 0; i < r.size(); ++i) v.emplace_back(r[i].first, i);
      auto sorted = v;
      std::sort(sorted.begin(), sorted.end());
      ptune::analyze::sort_runs(v.begin(), v.end(), std::less<>());
      CHECK(v == sorted);
    }
  }
}

TEST_CASE("analyze: a trace that fits in memory needs no temporary folder, one read in parts names it",
          "[analyze]") {
  TempDir dir;
  const std::string lag = lagging_trace(dir);
  const char* saved = std::getenv("TMPDIR");
  const std::string before = saved ? saved : "";
  ::setenv("TMPDIR", "/proc", 1);  // a folder where no file can be made, even by root
  ptune::analyze::AnalyzeOptions opt;
  std::string whole, why;
  try {
    whole = ptune::analyze::to_json(ptune::analyze::analyze(lag, opt)).dump(1);
    opt.part_bytes = 0;
    ptune::analyze::analyze(lag, opt);
  } catch (const ptune::DataError& e) {
    why = e.what();
  }
  if (saved)
    ::setenv("TMPDIR", before.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  CHECK(whole == analysis_json(lag, ptune::analyze::kDefaultPartBytes));
  CHECK(why == "'" + lag +
                   "': cannot write the trace's events to the temporary folder '/proc': No such file or "
                   "directory; TMPDIR chooses another folder");
}

TEST_CASE("analyze: the events past memory go to TMPDIR, else to a /tmp on disk, else to /var/tmp",
          "[analyze]") {
  using ptune::analyze::events_folder;
  CHECK(events_folder("/scratch", true, true) == "/scratch");
  CHECK(events_folder("/scratch", false, false) == "/scratch");
  CHECK(events_folder(nullptr, false, true) == "/tmp");
  CHECK(events_folder("", false, true) == "/tmp");
  // /var/tmp in memory too, or not writable: no better place.
  CHECK(events_folder(nullptr, true, false) == "/tmp");
  // /tmp a tmpfs (Fedora, Arch, Debian 13), /var/tmp on disk: the events go to the disk.
  CHECK(events_folder(nullptr, true, true) == "/var/tmp");
  CHECK(events_folder("", true, true) == "/var/tmp");
}

namespace {

/// A CPU trace of steps of the given lengths (ms), each one operator; `load`: ptune's metadata
/// saying it was recorded under load.
std::string steps_trace(const TempDir& dir, const std::string& name, const std::vector<double>& ms,
                        bool load = false) {
  Json ev = Json::array();
  double t = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i + 1), t, ms[i] * 1000));
    ev.push_back(x("cpu_op", "aten::mm", t + 1, ms[i] * 1000 - 2));
    t += ms[i] * 1000 + 1;
  }
  Json doc{{"traceEvents", ev}};
  if (load)
    doc["ptune"] = Json{{"version", "test"},
                        {"load", {{"under_load", true}, {"summary", "other processes used 1.9 of 2 cores"}}}};
  return dir.write(name + ".json", doc.dump());
}

}  // namespace

TEST_CASE("analyze BASE NEXT...: a speedup carries its interval and the sweep's verdict", "[analyze]") {
  using namespace ptune::analyze;
  TempDir dir;
  const std::vector<double> slow{10.0, 10.3, 9.8, 10.1}, fast{5.0, 5.2, 4.9, 5.1};
  const std::string a = steps_trace(dir, "a", slow), b = steps_trace(dir, "b", fast);
  // Clearly different step times: faster, with the interval of Welch's t on log step times.
  auto c = compare_versions({a, b}, {}, {});
  REQUIRE(c.versions[1].prev);
  const Speedup& s = *c.versions[1].prev;
  const auto want = ptune::stats::welch_speedup(slow, fast, ptune::stats::kSpeedupLevel);
  CHECK(s.interval.point == Approx(want.point));
  CHECK(s.interval.lo == Approx(want.lo));
  CHECK(s.interval.hi == Approx(want.hi));
  CHECK(s.interval.lo > 1.8);
  CHECK(s.interval.hi < 2.2);
  CHECK(s.verdict == ptune::stats::Verdict::kFaster);
  CHECK(*c.versions[1].vs_prev == Approx(want.point));
  // The interval as every output prints it (report::interval_text: ± here, where it is symmetric).
  CHECK(speedup_text(s) == [&] {
    char buf[32];
    std::snprintf(buf, sizeof buf, "x%.2f", want.point);
    return std::string(buf) + ptune::report::interval_text(want) + " faster";
  }());
  const std::string table = render_versions(c, "table");
  INFO(table);
  CHECK(has(table, "a -> b:\n  speedup " + speedup_text(s) +
                       ": 99% interval (Welch's t on log step times, 4 and 4 steps)\n"));
  const auto j = comparison_json(c);
  CHECK(j["versions"][1]["vs_prev"]["verdict"] == "faster");
  CHECK(j["versions"][1]["vs_prev"]["lo"].get<double>() == Approx(want.lo).margin(1e-4));
  CHECK(j["versions"][1]["vs_prev"]["hi"].get<double>() == Approx(want.hi).margin(1e-4));
  CHECK(j["versions"][1]["vs_prev"]["steps"].dump() == "[4,4]");
  CHECK(j["versions"][1]["step_ms_each"].size() == 4);
  CHECK(j["versions"][0]["vs_prev"].is_null());
  CHECK(j["changes"][0]["speedup"]["text"] == speedup_text(s));
  CHECK(j["noise"]["min_steps"] == 3);
  const std::string html = overview_html(c);
  CHECK(has(html, "<g class=\"ci\""));
  CHECK(has(html, "data-verdict=\"faster\""));
  CHECK(has(html, speedup_text(s)));
  // The other way round: slower.
  c = compare_versions({b, a}, {}, {});
  CHECK(c.versions[1].prev->verdict == ptune::stats::Verdict::kSlower);
  // Steps within 0.5% of each other on both sides: within noise (the interval within 1.00x +-3%).
  c = compare_versions({steps_trace(dir, "same1", {10.0, 10.03, 9.98, 10.01}),
                        steps_trace(dir, "same2", {10.01, 9.99, 10.02, 10.0})},
                       {}, {});
  CHECK(c.versions[1].prev->interval.lo > 1 / 1.03);
  CHECK(c.versions[1].prev->interval.hi < 1.03);
  CHECK(c.versions[1].prev->verdict == ptune::stats::Verdict::kWithinNoise);
  // Two steps per side: undecided, whatever the interval, and why.
  c = compare_versions({steps_trace(dir, "two_a", {10.0, 10.1}), steps_trace(dir, "two_b", {5.0, 5.05})}, {},
                       {});
  CHECK(c.versions[1].prev->verdict == ptune::stats::Verdict::kUndecided);
  CHECK(c.versions[1].prev->reason ==
        "2 steps in `two_a`, 2 steps in `two_b`: 3 or more per trace are needed");
  CHECK(has(render_versions(c, "table"), "undecided: 2 steps in `two_a`, 2 steps in `two_b`"));
  // One side recorded under load (ptune's metadata says so): undecided, and the load named.
  c = compare_versions({a, steps_trace(dir, "loaded", fast, true)}, {}, {});
  CHECK(c.versions[1].under_load);
  CHECK(c.versions[1].prev->verdict == ptune::stats::Verdict::kUndecided);
  CHECK(c.versions[1].prev->reason ==
        "`loaded` was recorded under load (other processes used 1.9 of 2 cores)");
  CHECK(c.versions[1].prev->interval.level == ptune::stats::kSpeedupLevelUnderLoad);
  CHECK(ptune::analyze::to_json(c.versions[1].analysis)["under_load"] == true);
}

TEST_CASE(
    "ptune analyze: a FakeData loop on the CPU gets no host-sync advice, and an A/A pair is never faster or "
    "slower",
    "[e2e][analyze][python]") {
  // torchvision's FakeData reads each label with .item() in the DataLoader, and the loop calls
  // loss.item(): all on the CPU, none a host sync. Then the same code's odd and even steps as two
  // traces, twice: an A/A pair each time, compared both ways, within noise or undecided. (Two
  // recordings one after the other differ by the machine's load, which a Python trace does not
  // record: on a busy machine they can differ by far more than their steps' spread.)
  using ptune::test::exe;
  using ptune::test::run;
  TempDir dir;
  const auto made = run(std::string("'") + PTUNE_PYTHON + "' '" + PTUNE_SOURCE_DIR +
                        "/test/make_torch_trace.py' '" + dir.path.string() + "' fakedata split:1 split:2");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto r = run(exe() + " analyze '" + dir.file("fakedata/trace.json") + "' --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  Json j = Json::parse(r.out);
  CHECK(j["device"] == "cpu");
  CHECK(j["steps"].size() == 5);
  CHECK(j["syncs"].empty());
  for (const auto& s : j["steps"]) CHECK(s["syncs"] == 0);
  CHECK(j["verdict"]["rule"] != "sync-bound");
  for (const auto& n : j["notes"]) {
    CHECK_FALSE(has(n.get<std::string>(), "host sync"));
    CHECK_FALSE(has(n.get<std::string>(), "item()"));
  }
  CHECK_FALSE(has(j["verdict"]["text"].get<std::string>(), "item()"));
  for (const std::string round : {"1", "2"}) {
    const std::string a = dir.file("fakedata_" + round + "_a/trace.json"),
                      b = dir.file("fakedata_" + round + "_b/trace.json");
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{a, b}, {b, a}}) {
      r = run(exe() + " analyze '" + from + "' '" + to + "' --label x --label y --format json");
      REQUIRE(r.code == 0);
      j = Json::parse(r.out);
      const Json& s = j["versions"][1]["vs_prev"];
      INFO(from << " -> " << to << ": " << s.dump() << " " << j["versions"][0]["step_ms_each"].dump() << " "
                << j["versions"][1]["step_ms_each"].dump());
      CHECK((s["verdict"] == "within noise" || s["verdict"] == "undecided"));
      CHECK(s["steps"] == Json::array({5, 5}));
      CHECK(s["lo"].get<double>() <= s["speedup"].get<double>());
      CHECK(s["speedup"].get<double>() <= s["hi"].get<double>());
    }
  }
  // The table prints the interval and the verdict.
  r = run(exe() + " analyze '" + dir.file("fakedata_1_a/trace.json") + "' '" +
          dir.file("fakedata_1_b/trace.json") + "' --label x --label y");
  REQUIRE(r.code == 0);
  CHECK(has(r.out, "x -> y:\n  speedup x"));
  CHECK(has(r.out, ": 99% interval (Welch's t on log step times, 5 and 5 steps)"));
}

namespace {

/// Fixed ceilings for the roofline tests: 100 GFLOP/s and 10 GB/s (a balance of 10 FLOP/B).
std::optional<ptune::analyze::Ceilings> test_ceilings(const std::string& precision) {
  ptune::analyze::Ceilings c;
  c.peak = {100e9, precision, "test peak"};
  c.bandwidth = {10e9, "test bandwidth"};
  return c;
}

Json op(const std::string& name, double ts, double dur, Json dims, Json types,
        Json concrete = Json::array()) {
  return x("cpu_op", name, ts, dur,
           Json{{"Input Dims", dims}, {"Input type", types}, {"Concrete Inputs", concrete}});
}

}  // namespace

TEST_CASE("analyze: FLOPs and bytes per operator class from input shapes, against the two ceilings",
          "[analyze]") {
  TempDir dir;
  Json ev = Json::array();
  for (int s = 0; s < 2; ++s) {
    const double t0 = s * 1000.0;
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(s + 1), t0, 1000));
    // A 64x64 by 64x64 product: 2*64^3 FLOPs over 3 * 64*64 * 4 bytes = 10.67 FLOP/B: compute-bound.
    ev.push_back(op("aten::mm", t0 + 10, 100, {{64, 64}, {64, 64}}, {"float", "float"}));
    // A 3x3 convolution, stride 1, padding 1: 2 * N * Cout * H * W * Cin * 9, inside aten::conv2d
    // (counted once: the outermost of its class).
    ev.push_back(op("aten::conv2d", t0 + 200, 300, {{2, 8, 16, 16}, {4, 8, 3, 3}, {}, {}, {}, {}, {}},
                    {"float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"},
                    {"", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"}));
    ev.push_back(
        op("aten::convolution", t0 + 210, 280, {{2, 8, 16, 16}, {4, 8, 3, 3}, {}, {}, {}, {}, {}, {}, {}},
           {"float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"},
           {"", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"}));
    // An elementwise add of 1024 floats: 1024 FLOPs over 3 * 4096 bytes: memory-bound.
    ev.push_back(op("aten::add", t0 + 600, 50, {{1024}, {1024}, {}}, {"float", "float", "Scalar"}));
    // A trace's own "flops" (older torch.profiler with_flops=True) is taken as it is.
    ev.push_back(x("cpu_op", "aten::mystery", t0 + 700, 100, Json{{"flops", 5000}}));
  }
  const std::string path = dir.write("t.json", Json{{"traceEvents", ev}}.dump());
  ptune::analyze::AnalyzeOptions opt;
  opt.cpu_ceilings = test_ceilings;
  const auto a = ptune::analyze::analyze(path, opt);
  REQUIRE(a.throughput.size() == 1);
  const auto& th = a.throughput[0];
  CHECK(th.source == "trace");
  std::map<std::string, ptune::analyze::ClassRate> by;
  for (const auto& c : th.classes) by[c.name] = c;
  REQUIRE(by.count("matmul"));
  CHECK(by["matmul"].flops == 2.0 * 64 * 64 * 64);
  CHECK(*by["matmul"].bytes == 4.0 * 3 * 64 * 64);
  CHECK(by["matmul"].us == 100);
  CHECK(ptune::analyze::bound_of(by["matmul"], th.ceilings) == "compute-bound");
  REQUIRE(by.count("convolution"));
  CHECK(by["convolution"].calls == 1);
  CHECK(by["convolution"].flops == 2.0 * 2 * 4 * 16 * 16 * 8 * 9);
  CHECK(*by["convolution"].bytes == 4.0 * (2 * 8 * 16 * 16 + 4 * 8 * 9 + 2 * 4 * 16 * 16));
  CHECK(by["convolution"].us == 300);
  CHECK(by["elementwise"].flops == 1024);
  CHECK(*by["elementwise"].bytes == 4.0 * 3 * 1024);
  CHECK(ptune::analyze::bound_of(by["elementwise"], th.ceilings) == "memory-bound");
  // At 1024 / 12288 FLOP/B the roof is 10 GB/s x 0.083 = 0.83 GFLOP/s; 1024 FLOPs in 50 us = 20.5 MFLOP/s.
  CHECK(*ptune::analyze::roof_of(by["elementwise"], th.ceilings) == Approx(10e9 * 1024.0 / 12288.0));
  CHECK(by["other"].flops == 5000);
  CHECK_FALSE(by["other"].bytes);
  CHECK(th.flops == 2.0 * 64 * 64 * 64 + 2.0 * 2 * 4 * 16 * 16 * 8 * 9 + 1024 + 5000);
  CHECK(th.flops_per_s() == Approx(th.flops / 1e-3));
  const Json j = Json::parse(ptune::analyze::render_analysis(a, "json"));
  CHECK(j["throughput"]["source"] == "trace");
  CHECK(j["throughput"]["ceilings"]["peak_flops_per_s"] == 100e9);
  CHECK(j["throughput"]["peak_pct"].get<double>() == Approx(100.0 * th.flops_per_s() / 100e9).epsilon(0.01));
  CHECK(has(ptune::analyze::render_analysis(a, "table"), "FLOP/s per operator class"));
  ptune::analyze::Version v;
  v.label = "t";
  v.analysis = a;
  const std::string page = ptune::analyze::overview_html(ptune::analyze::compare_analyses({v}));
  CHECK(has(page, "<h3>FLOP/s per operator class</h3>"));
  CHECK(has(page, "<tr data-class=\"matmul\"><td>matmul</td>"));

  // Neither FLOPs nor shapes: the FLOP/s section names the profiler option to add.
  Json bare = Json::array();
  bare.push_back(x("user_annotation", "ProfilerStep#1", 0, 100));
  bare.push_back(x("cpu_op", "aten::mm", 10, 50));
  const auto b = ptune::analyze::analyze(dir.write("bare.json", Json{{"traceEvents", bare}}.dump()), opt);
  CHECK(b.throughput[0].source == "none");
  CHECK(has(ptune::analyze::render_analysis(b, "table"),
            "FLOP/s: none; add `record_shapes=True` (or `with_flops=True`)"));
  CHECK(
      has(Json::parse(ptune::analyze::render_analysis(b, "json"))["throughput"]["missing"].get<std::string>(),
          "add `record_shapes=True`"));
}

TEST_CASE("analyze: a kernel's precision from its library's name", "[analyze]") {
  using ptune::analyze::kernel_precision;
  // cuBLAS, cuDNN and CUTLASS names from real traces.
  CHECK(kernel_precision("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>("
                         "cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1::Params)") == "tf32");
  CHECK(kernel_precision(
            "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16") == "tf32");
  CHECK(kernel_precision("ampere_sgemm_128x64_nn") == "fp32");
  CHECK(kernel_precision("volta_sgemm_128x64_nn") == "fp32");
  CHECK(kernel_precision("void cutlass::Kernel<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(...)") == "fp32");
  CHECK(kernel_precision(
            "implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>") == "fp32");
  CHECK(kernel_precision("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn") == "fp16");
  CHECK(kernel_precision("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn") == "fp16");
  CHECK(kernel_precision("turing_h1688gemm_128x128_ldg8_tn") == "fp16");
  CHECK(kernel_precision("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn") == "bf16");
  CHECK(kernel_precision("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1") ==
        "bf16");
  CHECK(kernel_precision("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128") == "fp8");
  CHECK(kernel_precision("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64 imma") == "int8");
  // Kernels that say no matrix precision.
  CHECK(kernel_precision(
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>")
            .empty());
  CHECK(kernel_precision("nchwToNhwcKernel").empty());
}

namespace {

/// A GPU step's operator with one kernel it launched: the operator on the host (pid 1), its
/// launch inside it, the kernel on stream 7 for `kernel_us`.
void launch(Json& ev, const std::string& op_name, double ts, Json dims, Json types, Json concrete,
            const std::string& kernel, double kernel_us, int64_t& corr) {
  ev.push_back(op(op_name, ts, 40, std::move(dims), std::move(types), std::move(concrete)));
  ev.push_back(x("cuda_runtime", "cudaLaunchKernel", ts + 5, 5, Json{{"correlation", ++corr}}));
  ev.push_back(x("kernel", kernel, ts + 20, kernel_us, Json{{"correlation", corr}}, 0, 7));
}

}  // namespace

TEST_CASE("analyze: each class against the peak of the precision its kernels ran in, never above it",
          "[analyze]") {
  TempDir dir;
  Json ev = Json::array();
  int64_t corr = 0;
  const double flops = 2.0 * 4096 * 4096 * 4096;  // one 4096^3 matrix product: 137.4 GFLOP
  for (int s = 0; s < 2; ++s) {
    const double t0 = s * 100000.0;
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(s + 1), t0, 100000));
    // Two fp32 matrix products: one in TF32 on Tensor Cores at half the A100's 156 TFLOP/s, one in
    // a plain fp32 (SIMT) kernel at half its 19.5 TFLOP/s.
    const Json mm_dims = {{4096, 4096}, {4096, 4096}}, mm_types = {"float", "float"};
    launch(ev, "aten::mm", t0 + 100, mm_dims, mm_types, Json::array(),
           "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(Params)", flops / 78e6,
           corr);
    launch(ev, "aten::mm", t0 + 20000, mm_dims, mm_types, Json::array(), "ampere_sgemm_128x64_nn",
           flops / 9.75e6, corr);
    // A half-precision convolution whose shapes count more FLOPs than its kernel could do in its
    // time at the fp16 peak (312 TFLOP/s): 2 x 64 x 256 x 56 x 56 x 256 x 9 = 237 GFLOP in 100 us.
    launch(ev, "aten::convolution", t0 + 40000,
           {{64, 256, 56, 56}, {256, 256, 3, 3}, {}, {}, {}, {}, {}, {}, {}},
           {"c10::Half", "c10::Half", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList",
            "Scalar"},
           {"", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"},
           "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", 100, corr);
  }
  const std::string path = dir.write(
      "tf32.json",
      Json{{"traceEvents", ev}, {"deviceProperties", Json::array({Json{{"name", "NVIDIA A100-SXM4-40GB"}}})}}
          .dump());
  const auto a = ptune::analyze::analyze(path);
  REQUIRE(a.throughput.size() == 1);
  const auto& th = a.throughput[0];
  std::map<std::string, ptune::analyze::ClassRate> by;
  for (const auto& c : th.classes) by[c.name] = c;
  REQUIRE(by.count("matmul"));
  REQUIRE(by.count("convolution"));
  const auto& mm = by["matmul"];
  // Time-weighted: the TF32 kernel's time at 156, the SIMT kernel's at 19.5 TFLOP/s.
  const double tf32_us = flops / 78e6, fp32_us = flops / 9.75e6;
  CHECK(mm.ceiling == Approx((tf32_us * 156e12 + fp32_us * 19.5e12) / (tf32_us + fp32_us)));
  CHECK(mm.ceiling_text == "fp32 89%, tf32 11% of its kernel time");
  REQUIRE(ptune::analyze::peak_pct(mm));
  CHECK(*ptune::analyze::peak_pct(mm) == Approx(50.0));
  CHECK(mm.over.empty());
  // Above its ceiling: no figure, and why.
  const auto& conv = by["convolution"];
  CHECK(conv.precision == "fp16");
  CHECK(conv.ceiling_text == "fp16");
  CHECK(conv.ceiling == 312e12);
  CHECK_FALSE(ptune::analyze::peak_pct(conv));
  CHECK(
      conv.over ==
      "its FLOPs, counted from the input shapes, are more than its kernels did (a count the kernels did not "
      "do)");
  const Json j = Json::parse(ptune::analyze::render_analysis(a, "json"));
  for (const auto& c : j["throughput"]["classes"]) {
    INFO(c.dump());
    if (!c["peak_pct"].is_null()) CHECK(c["peak_pct"].get<double>() <= 100.0);
    if (!c["roof_pct"].is_null()) CHECK(c["roof_pct"].get<double>() <= 100.0);
    if (c["class"] == "convolution") {
      CHECK(c["peak_pct"].is_null());
      CHECK(c["roof_pct"].is_null());
      CHECK(c["over_ceiling"].get<std::string>().rfind("its FLOPs, counted from the input shapes", 0) == 0);
      CHECK(c["kernel_precision_pct"]["fp16"] == 100.0);
    }
    if (c["class"] == "matmul")
      CHECK(c["kernel_precision_pct"]["tf32"].get<double>() == Approx(11.11).margin(0.01));
  }
  const std::string table = ptune::analyze::render_analysis(a, "table");
  INFO(table);
  CHECK(has(table,
            "  ceilings: 19.5 TFLOP/s fp32, 156 TFLOP/s tf32, 312 TFLOP/s fp16 (NVIDIA A100 Tensor Core "
            "GPU datasheet: NVIDIA A100 40GB, dense)"));
  CHECK(has(table, "  matmul against fp32 89%, tf32 11% of its kernel time, time-weighted: 34.7 TFLOP/s\n"));
  CHECK(has(table, "  convolution: "));
  CHECK(has(table,
            " is more than its ceiling (312 TFLOP/s fp16), so no % of peak: its FLOPs, counted from the "
            "input shapes"));
  // The advice: matrix kernels mostly in plain fp32 on a GPU with TF32: the setting that moves them.
  CHECK(has(ptune::analyze::render_analysis(a, "table"),
            "88% of the matrix kernels' time is in plain fp32 kernels (sgemm, SIMT), not on Tensor Cores: "
            "`torch.backends.cuda.matmul.allow_tf32 = True`"));
}

TEST_CASE("ptune analyze: FLOP/s of a with_flops=True trace against PyTorch's own FLOP counts",
          "[e2e][analyze][python]") {
  using ptune::test::exe;
  using ptune::test::run;
  TempDir dir;
  const auto made = run(std::string("'") + PTUNE_PYTHON + "' '" + PTUNE_SOURCE_DIR +
                        "/test/make_torch_trace.py' '" + dir.path.string() + "' flops");
  INFO(made.err);
  REQUIRE(made.code == 0);
  const Json ref = Json::parse(ptune::test::read_file(dir.file("flops/reference.json")));
  auto r = run(exe() + " analyze '" + dir.file("flops/trace.json") + "' --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.out);
  const Json& th = j["throughput"];
  CHECK(th["precision"] == "fp32");
  std::map<std::string, double> flops;
  for (const auto& c : th["classes"]) flops[c["class"]] = c["flops_per_step"];
  // PyTorch's with_flops formulas cover the forward convolutions and the matrix products
  // (aten::conv2d, addmm, mm); FlopCounterMode adds the backward convolutions.
  const double profiler = ref["profiler_flops_per_step"];
  const double counter = ref["flop_counter_per_step"];
  CHECK(flops["convolution"] + flops["matmul"] == Approx(profiler).epsilon(1e-9));
  CHECK(flops["convolution"] + flops["convolution backward"] + flops["matmul"] ==
        Approx(counter).epsilon(1e-9));
  // Achieved FLOP/s: the step's FLOPs over the mean step.
  CHECK(th["flops_per_s"].get<double>() ==
        Approx(th["flops_per_step"].get<double>() / (j["mean"]["ms"].get<double>() / 1000.0)).epsilon(0.01));
  // A CPU trace is read against this CPU's calibrated ceilings (never a datasheet's).
  REQUIRE(th["ceilings"].is_object());
  CHECK(th["ceilings"]["peak_flops_per_s"].get<double>() > 0);
  CHECK(has(th["ceilings"]["peak_source"].get<std::string>(), "calibrated"));
  CHECK(has(th["ceilings"]["bandwidth_source"].get<std::string>(), "calibrated"));
  // The roofline's call follows from the class's intensity and the two ceilings printed beside
  // it (the ridge: peak over bandwidth; both calibrated on this machine, under whatever load).
  const double ridge =
      th["ceilings"]["peak_flops_per_s"].get<double>() / th["ceilings"]["bytes_per_s"].get<double>();
  for (const auto& c : th["classes"]) {
    if (!c["flops_per_byte"].is_number() || c["flops_per_step"].get<double>() <= 0) continue;
    if (std::fabs(c["flops_per_byte"].get<double>() / ridge - 1) < 0.02) continue;  // printed rounded
    INFO(c.dump() << " ridge " << ridge);
    CHECK(c["bound"] == (c["flops_per_byte"].get<double>() >= ridge ? "compute-bound" : "memory-bound"));
  }
}

TEST_CASE(
    "analyze: the straggler of HTA's two-rank NCCL traces (ncclKernel_*), the DDP fixture's "
    "(ncclDevKernel_*)",
    "[analyze]") {
  // HTA's test data: rank 1 computes about 270 ms per step of kernels against 210 ms on rank 0,
  // which waits for it in its NCCL kernels.
  const auto a = ptune::analyze::analyze(fixture("hta_two_ranks"));
  REQUIRE(a.straggler);
  REQUIRE(a.straggler->slow);
  const auto& slow = a.straggler->ranks[*a.straggler->slow];
  CHECK(a.ranks[slow.index].rank == 1);
  CHECK(slow.wait_us < a.straggler->ranks[1 - *a.straggler->slow].wait_us);
  CHECK(slow.compute_us > a.straggler->ranks[1 - *a.straggler->slow].compute_us);
  CHECK(has(a.straggler->text, "rank 1 is the straggler ("));
  const Json j = Json::parse(ptune::analyze::render_analysis(a, "json"));
  CHECK(j["distributed"]["straggler"]["rank"] == 1);
  CHECK(j["distributed"]["ranks"][0]["wait_ms"].get<double>() >
        j["distributed"]["ranks"][1]["wait_ms"].get<double>());
  ptune::analyze::Version v;
  v.label = "hta";
  v.analysis = a;
  const std::string page = ptune::analyze::overview_html(ptune::analyze::compare_analyses({v}));
  CHECK(has(page, "<tr class=\"straggler\"><td>rank 1</td>"));
  // Markdown has the tables the terminal prints: the ranks and the FLOP/s per class.
  const std::string md = ptune::analyze::render_analysis(a, "md");
  CHECK(
      has(md,
          "\nRanks (per step):\n\n| rank | step ms | compute ms | input ms | waiting ms | communication % | "
          "overlapped % |\n"));
  CHECK(has(md, "\n| rank 1 | 619.3 | 136.0 | 0.0 | 189.5 | 30.6 | 20 |\n"));
  CHECK(has(md, "\nFLOP/s per operator class (per step):\n\n| class | calls | GFLOP |"));

  const auto d = ptune::analyze::analyze(fixture("ddp"));
  REQUIRE(d.straggler);
  for (const auto& r : d.straggler->ranks) CHECK(r.wait_us > 0);  // ncclDevKernel_* are communication
}

TEST_CASE("analyze: the verdict is about the straggler, not the rank whose step measured a little longer",
          "[analyze]") {
  // Two Gloo ranks of one job, 4 steps: rank 1 loads its batches for 8.5 ms and rank 0 waits for
  // it in the all-reduce; rank 0's steps measured 10.3 ms against rank 1's 10.0 ms (where the step
  // ranges end is chance). The time goes into rank 1's loader: that is the verdict, about rank 1.
  TempDir dir;
  auto rank_trace = [&](int rank, double step_ms, double loader_ms, double wait_ms) {
    Json ev = Json::array();
    double t = 0;
    for (int i = 0; i < 4; ++i) {
      ev.push_back(
          x("user_annotation", "ProfilerStep#" + std::to_string(i), t, step_ms * 1000, {}, 10 + rank));
      ev.push_back(x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 1,
                     loader_ms * 1000, {}, 10 + rank));
      ev.push_back(x("cpu_op", "aten::mm", t + 2 + loader_ms * 1000, 1000, {}, 10 + rank));
      ev.push_back(
          x("cpu_op", "gloo:all_reduce", t + 1003 + loader_ms * 1000, wait_ms * 1000, {}, 10 + rank));
      t += step_ms * 1000 + 1;
    }
    return Json{{"traceEvents", ev},
                {"distributedInfo", {{"backend", "gloo"}, {"rank", rank}, {"world_size", 2}}}}
        .dump();
  };
  std::filesystem::create_directory(dir.file("job"));
  dir.write("job/rank0.json", rank_trace(0, 10.3, 0.1, 9.0));
  dir.write("job/rank1.json", rank_trace(1, 10.0, 8.5, 0.3));
  const auto a = ptune::analyze::analyze(dir.file("job"));
  REQUIRE(a.distributed);
  CHECK(a.ranks[a.distributed->slowest].rank == 0);
  REQUIRE(a.straggler);
  REQUIRE(a.straggler->slow);
  CHECK(a.ranks[a.straggler->ranks[*a.straggler->slow].index].rank == 1);
  CHECK(a.ranks[a.primary].rank == 1);
  CHECK(a.verdict.rule == "input-bound");
  CHECK(has(a.verdict.evidence, "; rank 1, the straggler"));
  // "rank 0 is the slowest" would contradict the straggler: not said.
  for (const auto& n : a.notes) CHECK(!has(n, "is the slowest"));
}

TEST_CASE(
    "analyze: a folder of ranks is of one job or an error naming two files, with missing ranks and ranks "
    "apart in a note",
    "[analyze]") {
  TempDir dir;
  // A rank's trace: 3 steps of 10 ms from `t0` (us), its process `pid`.
  auto rank_trace = [&](const std::string& name, int rank, int world, int pid, double t0) {
    Json ev = Json::array();
    for (int i = 0; i < 3; ++i) {
      ev.push_back(
          x("user_annotation", "ProfilerStep#" + std::to_string(i), t0 + i * 10001.0, 10000, {}, pid));
      ev.push_back(x("cpu_op", "aten::mm", t0 + i * 10001.0 + 1, 8000, {}, pid));
    }
    Json doc{{"traceEvents", ev}};
    if (world > 0) doc["distributedInfo"] = {{"backend", "gloo"}, {"rank", rank}, {"world_size", world}};
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    return dir.write(name, doc.dump());
  };
  const std::string tail =
      ": the traces of two runs, not the ranks of one; give each run's folder as its own argument to compare "
      "them (ptune analyze A B)";
  // A second run into the same folder: rank 0 twice, by two processes.
  const auto a0 = rank_trace("rerun/a0.json", 0, 2, 100, 0), a1 = rank_trace("rerun/a1.json", 1, 2, 101, 0);
  const auto b0 = rank_trace("rerun/b0.json", 0, 2, 200, 9e6);
  rank_trace("rerun/b1.json", 1, 2, 201, 9e6);
  CHECK(error_of(dir.file("rerun")) == "'" + dir.file("rerun") + "': '" + a0 + "' and '" + b0 +
                                           "' are both rank 0 of 2, recorded by two processes (100 and 200)" +
                                           tail);
  // Two world sizes.
  const auto w0 = rank_trace("worlds/r0.json", 0, 2, 100, 0), w3 = rank_trace("worlds/r3.json", 3, 4, 103, 0);
  CHECK(error_of(dir.file("worlds")) ==
        "'" + dir.file("worlds") + "': '" + w0 + "' is rank 0 of 2 and '" + w3 + "' is rank 3 of 4" + tail);
  // A rank beside a process without one.
  const auto m0 = rank_trace("mixed/r0.json", 0, 2, 100, 0),
             other = rank_trace("mixed/other.json", 0, 0, 300, 0);
  CHECK(error_of(dir.file("mixed")) ==
        "'" + dir.file("mixed") + "': '" + m0 + "' is rank 0 of 2 and '" + other +
            "' is not one of a world of 2 or more (distributedInfo): the traces "
            "of two runs, not the ranks of one; give each as its own argument to "
            "compare them (ptune analyze A B)");
  // One job's ranks, at the same time: no note. Two of four: said. Apart in time: said.
  rank_trace("job/r0.json", 0, 2, 100, 0), rank_trace("job/r1.json", 1, 2, 101, 500);
  CHECK(ptune::analyze::analyze(dir.file("job")).folder_notes.empty());
  rank_trace("part/r0.json", 0, 4, 100, 0), rank_trace("part/r1.json", 1, 4, 101, 0);
  CHECK(ptune::analyze::analyze(dir.file("part")).folder_notes ==
        std::vector<std::string>{
            "2 of the 4 ranks are in the folder: the straggler and the slowest rank are among these"});
  rank_trace("apart/r0.json", 0, 2, 100, 0), rank_trace("apart/r1.json", 1, 2, 101, 2.5e6);
  const auto apart = ptune::analyze::analyze(dir.file("apart"));
  CHECK(apart.folder_notes ==
        std::vector<std::string>{
            "the ranks' traces do not overlap in time (2.5 s apart): ranks of two runs, or of "
            "machines whose clocks differ; a straggler found between them is not one"});
  CHECK(apart.notes.back() == apart.folder_notes.back());
  // One rank's file given alone is not a folder with ranks missing.
  CHECK(ptune::analyze::analyze(a1).folder_notes.empty());
  CHECK(ptune::analyze::analyze(a0).ranks.size() == 1);
}

TEST_CASE("ptune analyze: a two-rank Gloo run with rank 1's loader slowed names rank 1, slower input",
          "[e2e][analyze][python]") {
  using ptune::test::exe;
  using ptune::test::run;
  TempDir dir;
  const auto made = run(std::string("'") + PTUNE_PYTHON + "' '" + PTUNE_SOURCE_DIR +
                        "/test/make_torch_trace.py' '" + dir.path.string() + "' ddp_slow");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto r = run(exe() + " analyze '" + dir.file("ddp_slow") + "' --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.out);
  CHECK(j["distributed"]["straggler"]["rank"] == 1);
  CHECK(j["distributed"]["straggler"]["why"] == "slower input");
  CHECK(j["verdict"]["rule"] == "input-bound");  // about rank 1, whichever rank's step measured longer
  r = run(exe() + " analyze '" + dir.file("ddp_slow") + "'");
  CHECK(has(r.out, "rank 1 is the straggler (slower input)"));
  CHECK(has(r.out, "; rank 1, the straggler): "));
}

namespace {

/// A CPU trace of `n` steps of `step_ms` each: in each, an operator `op` (with input shapes
/// `dims`) for `op_ms`, and, with `annotate`, a record_function range and a Python frame around
/// the whole step. `pid` and the start `t0` (us) place it among other runs.
std::string shaped_trace(const TempDir& dir, const std::string& name, size_t n, double step_ms,
                         const std::string& op, const Json& dims, double op_ms, bool annotate, int pid = 1,
                         double t0 = 0) {
  Json ev = Json::array();
  double t = t0;
  for (size_t i = 0; i < n; ++i) {
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i), t, step_ms * 1000, {}, pid));
    if (annotate) {
      ev.push_back(x("user_annotation", "train_step", t + 1, step_ms * 1000 - 2, {}, pid));
      ev.push_back(x("python_function", "train.py(12): train_step", t + 1, step_ms * 1000 - 2, {}, pid));
    }
    ev.push_back(x("cpu_op", op, t + 2, op_ms * 1000, Json{{"Input Dims", dims}}, pid));
    t += step_ms * 1000 + 1;
  }
  return dir.write(name, Json{{"traceEvents", ev}}.dump());
}

}  // namespace

TEST_CASE("analyze: a range around the step is not CPU execution, and such a step is host-bound",
          "[analyze]") {
  // 10 ms steps with 3 ms of operators: 70% outside them (Python between operators, a sleep),
  // the same with or without a record_function range and a Python frame around each step.
  TempDir dir;
  for (bool annotate : {false, true}) {
    INFO("annotated: " << annotate);
    const auto a = ptune::analyze::analyze(
        shaped_trace(dir, annotate ? "ann.json" : "plain.json", 4, 10, "aten::linear",
                     Json::array({Json::array({16, 64}), Json::array({10, 64})}), 3, annotate));
    const auto m = a.ranks[0].mean();
    CHECK(100 * m.us[ptune::analyze::kCpuExec] / m.end == Approx(30).margin(0.1));
    CHECK(100 * m.us[ptune::analyze::kOther] / m.end == Approx(70).margin(0.1));
    CHECK(a.verdict.rule == "host-bound");
    CHECK(a.verdict.evidence == "70% of the step in no operator, loader range or copy; 30% in operators");
    CHECK(a.verdict.move == ptune::measure::rule(ptune::measure::RuleId::kHostBound).python_move);
    CHECK(a.ranks[0].batch_size == 16);
  }
  // Mostly operators, none of them a convolution: compute-bound, and channels_last is not advised.
  const auto c = ptune::analyze::analyze(
      shaped_trace(dir, "linear.json", 4, 10, "aten::linear",
                   Json::array({Json::array({16, 64}), Json::array({10, 64})}), 9, true));
  CHECK(c.verdict.rule == "compute-bound on the CPU");
  CHECK(c.verdict.move == "`torch.compile(model)`");
  // An operator whose name merely contains "conv" is not a convolution.
  const auto convert =
      ptune::analyze::analyze(shaped_trace(dir, "convert.json", 4, 10, "prims::convert_element_type",
                                           Json::array({Json::array({16, 64})}), 9, false));
  CHECK(convert.verdict.move == "`torch.compile(model)`");
  const auto conv = ptune::analyze::analyze(
      shaped_trace(dir, "conv.json", 4, 10, "aten::conv2d",
                   Json::array({Json::array({16, 3, 32, 32}), Json::array({8, 3, 3, 3})}), 9, false));
  CHECK(has(conv.verdict.move, "channels_last"));
}

TEST_CASE("analyze: the batch of an embedding is its indices' first dimension", "[analyze]") {
  // aten::embedding(weight [1000, 32], indices [8, 20]): batch 8, not the table's 1000 rows.
  TempDir dir;
  const auto a = ptune::analyze::analyze(
      shaped_trace(dir, "emb.json", 3, 10, "aten::embedding",
                   Json::array({Json::array({1000, 32}), Json::array({8, 20})}), 5, false));
  CHECK(a.ranks[0].batch_size == 8);
}

TEST_CASE("analyze: a slow first step and events with a negative duration are said in notes", "[analyze]") {
  TempDir dir;
  Json ev = Json::array();
  const std::vector<double> ms{40, 10, 10.2, 9.8, 10};
  double t = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    ev.push_back(x("user_annotation", "ProfilerStep#" + std::to_string(i), t, ms[i] * 1000));
    ev.push_back(x("cpu_op", "aten::mm", t + 1, ms[i] * 1000 - 2));
    t += ms[i] * 1000 + 1;
  }
  ev.push_back(x("user_annotation", "ProfilerStep#5", t, -5));
  ev.push_back(x("cpu_op", "aten::mm", t, -5));
  const auto a = ptune::analyze::analyze(dir.write("cold.json", Json{{"traceEvents", ev}}.dump()));
  REQUIRE(a.ranks[0].steps.size() == 5);  // the step of negative duration left out, not a step of 0 ms
  const auto& notes = a.notes;
  INFO(Json(notes).dump(1));
  CHECK(std::count(
            notes.begin(), notes.end(),
            "`ProfilerStep#0` took 40.0 ms, 4.0x the median of the other steps (10.0 ms): a warm-up "
            "step, counted in the mean step and the split; `schedule(wait=1, warmup=1, active=N)` leaves "
            "such steps out of the trace") == 1);
  CHECK(std::count(notes.begin(), notes.end(),
                   "2 events were left out: a negative duration, or a time beyond 1e18 us (a damaged "
                   "trace?)") == 1);
  // Steps alike: no such note.
  const auto even = ptune::analyze::analyze(steps_trace(dir, "even", {10, 10.1, 9.9, 10}));
  for (const auto& n : even.notes) CHECK_FALSE(has(n, "warm-up step"));
}

TEST_CASE(
    "analyze BASE NEXT...: separate runs differ by more than their steps say, batches compare per sample",
    "[analyze]") {
  using ptune::analyze::compare_versions;
  using ptune::stats::Verdict;
  TempDir dir;
  // Two traces 5% apart with steps within 0.2%: a tight interval around 1.05x, which two separate
  // runs of the same code can show. Within the default 10%: within noise, never faster; with
  // --noise-pct 1, faster.
  const auto a = steps_trace(dir, "a", {10.0, 10.02, 9.98, 10.01, 9.99});
  const auto b = steps_trace(dir, "b", {9.52, 9.53, 9.51, 9.52, 9.53});
  auto c = compare_versions({a, b}, {}, {});
  CHECK(c.versions[1].prev->interval.lo > 1.04);
  CHECK(c.versions[1].prev->verdict == Verdict::kWithinNoise);
  CHECK(ptune::analyze::comparison_json(c)["noise"]["floor_pct"] == 10.0);
  ptune::analyze::CompareOptions strict;
  strict.noise_pct = 1;
  c = compare_versions({a, b}, {}, strict);
  CHECK(c.versions[1].prev->verdict == Verdict::kFaster);
  // Batch 16 in 10 ms steps, then batch 32 in 16 ms: slower a step, 1.25x faster per sample, as
  // the samples/s column says.
  const Json b16 = Json::array({Json::array({16, 64}), Json::array({10, 64})});
  const Json b32 = Json::array({Json::array({32, 64}), Json::array({10, 64})});
  const std::string s16 = shaped_trace(dir, "b16.json", 5, 10, "aten::linear", b16, 9, false);
  std::vector<double> jitter{16.0, 16.02, 15.98, 16.01, 15.99};
  Json ev = Json::array();
  double t = 0;
  for (double ms : jitter) {
    ev.push_back(x("user_annotation", "ProfilerStep#1", t, ms * 1000));
    ev.push_back(x("cpu_op", "aten::linear", t + 1, ms * 1000 - 2, Json{{"Input Dims", b32}}));
    t += ms * 1000 + 1;
  }
  const std::string s32 = dir.write("b32.json", Json{{"traceEvents", ev}}.dump());
  c = compare_versions({s16, s32}, {}, strict);
  const auto& s = *c.versions[1].prev;
  CHECK(s.interval.point == Approx(1.25).epsilon(0.002));
  CHECK(s.verdict == Verdict::kFaster);
  CHECK(*c.versions[1].samples_per_s / *c.versions[0].samples_per_s ==
        Approx(s.interval.point).epsilon(0.002));
  CHECK(ptune::analyze::speedup_detail(s) ==
        "99% interval (Welch's t on log times per sample, 5 and 5 steps); 16 and 32 samples a step: compared "
        "per sample");
  CHECK(ptune::analyze::comparison_json(c)["versions"][1]["vs_prev"]["samples_per_step"].dump() == "[16,32]");
  // Two files named alike in two folders: each label names its folder.
  std::filesystem::create_directories(dir.file("run1"));
  std::filesystem::create_directories(dir.file("run2"));
  std::filesystem::copy_file(a, dir.file("run1/trace1.json"));
  std::filesystem::copy_file(b, dir.file("run2/trace1.json"));
  c = compare_versions({dir.file("run1/trace1.json"), dir.file("run2/trace1.json")}, {}, {});
  CHECK(c.versions[0].label == "run1/trace1");
  CHECK(c.versions[1].label == "run2/trace1");
  // Labels taken from a folder's name: the folder above it tells them apart.
  for (const char* run : {"run1", "run2"}) {
    std::filesystem::create_directories(dir.file(std::string(run) + "/log"));
    std::filesystem::copy_file(a, dir.file(std::string(run) + "/log/trace.json"));
  }
  c = compare_versions({dir.file("run1/log/trace.json"), dir.file("run2/log") + "/"}, {}, {});
  CHECK(c.versions[0].label == "run1/log");
  CHECK(c.versions[1].label == "run2/log");
}

TEST_CASE("analyze: a folder of two runs that did not overlap is refused, not read as two ranks",
          "[analyze]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("tb"));
  const Json dims = Json::array({Json::array({16, 64}), Json::array({10, 64})});
  shaped_trace(dir, "tb/vm_100.1.pt.trace.json", 3, 10, "aten::linear", dims, 9, false, 100, 0);
  shaped_trace(dir, "tb/vm_200.2.pt.trace.json", 3, 10, "aten::linear", dims, 9, false, 200, 1e6);
  CHECK(error_of(dir.file("tb")) ==
        "'" + dir.file("tb") + "': '" + dir.file("tb/vm_100.1.pt.trace.json") + "' and '" +
            dir.file("tb/vm_200.2.pt.trace.json") +
            "' are traces of two processes that did not run at the same time and carry no rank "
            "(distributedInfo): two separate runs, not the ranks of one; give each as its own argument to "
            "compare them (ptune analyze A B)");
  // Two processes at the same time: side by side, as before.
  std::filesystem::create_directories(dir.file("same"));
  shaped_trace(dir, "same/p100.json", 3, 10, "aten::linear", dims, 9, false, 100, 0);
  shaped_trace(dir, "same/p200.json", 3, 10, "aten::linear", dims, 9, false, 200, 5000);
  CHECK(ptune::analyze::analyze(dir.file("same")).ranks.size() == 2);
}
