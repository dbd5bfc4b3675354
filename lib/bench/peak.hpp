#pragma once
/// The machine's peak FLOP/s per precision, the ceiling a row's achieved FLOP/s is read
/// against. On a known GPU from a table of the vendor's dense (not sparse) figures; on an
/// unknown GPU and on every CPU measured: a short matrix-multiply calibration with the threads
/// the row runs on, cached per machine and LibTorch build. A calibrated figure is an achievable
/// peak (what LibTorch's own matmul reaches here), not the datasheet's.

#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "config/config.hpp"
#include "system/gpu_specs.hpp"

namespace ptune::bench {

/// The precision a row's matrix products run in: "bf16" under optim.amp bf16, "fp16" under
/// fp16, else "fp32" ("tf32" on a GPU where LibTorch lets cuBLAS, or cuDNN for a convolutional
/// `arch`, use TF32). Throws nothing.
std::string row_precision(config::Amp amp, const c10::Device& device, const std::string& arch);

/// What calibrate() measured.
struct Calibration {
  double flops_per_s = 0;  // the fastest of the timed samples: competing work only slows a sample
  int64_t n = 0;           // the side of the square matrices
  int64_t reps = 0;        // products per sample
  int64_t threads = 0;     // LibTorch's intra-op threads it ran with (CPU)
  bool steady = false;     // the slowest sample within 80% of the fastest: nothing else ran between
};

/// Times n x n matrix products (at::mm) in `precision` ("fp32" | "tf32" | "bf16" | "fp16") on
/// `device` with LibTorch's current intra-op threads: n doubled (from 512 on a CPU, 1024 on a
/// GPU) until one product takes 10 ms (the fastest of three; at most 2048 on a CPU, 8192 on a
/// GPU), then 7 samples of about 20 ms each; returns the fastest sample's rate. About 200 ms on
/// a CPU. Throws std::runtime_error when the precision cannot run there (a CPU's fp16, tf32).
Calibration calibrate(const c10::Device& device, const std::string& precision);

/// The peak for a row on `device` in `precision`: a known GPU's table figure, else the
/// calibrated one, read from the cache ($PTUNE_CACHE, else $XDG_CACHE_HOME/ptune, else
/// ~/.cache/ptune; peak/<key>.json) or measured and stored there; the key holds the device's
/// model, the instruction set LibTorch dispatches to, the threads, the LibTorch version and the
/// precision. On a CPU the calibration goes on with more products until its span is long enough
/// for /proc's counters to tell competing load (system::min_load_span_s: 0.4 s on 2 cores). A
/// calibration taken while other processes used the cores (system::LoadSampler) or whose samples
/// were not steady is not cached, and is marked Peak::under_load: no ceiling. Within a process one figure per
/// key (every row of a table reads against the same peak). A cache that cannot be written is skipped. Returns
/// flops_per_s 0 (and why in source) when the precision cannot be measured. Throws nothing.
system::Peak machine_peak(const c10::Device& device, const std::string& precision);

/// The memory bandwidth ceiling of `device` for a roofline: a known GPU's datasheet figure;
/// on a CPU (and an unknown GPU) calibrated: the fastest of 7 samples of copying a 64 MiB float
/// tensor into another (at::copy_, LibTorch's current threads; bytes moved: read plus write; more
/// rounds until the span tells competing load, as machine_peak()),
/// cached as machine_peak() caches (key: the device's model, instruction set, threads, LibTorch
/// version and "bandwidth"). An achievable figure, not a datasheet's. Throws nothing; bytes_per_s
/// 0 and why in source when it cannot be measured.
system::Bandwidth machine_bandwidth(const c10::Device& device);

}  // namespace ptune::bench
