// A stand-in for NVIDIA's management library (libnvidia-ml.so.1) for test/load_test.cpp: the
// functions ptune's load view resolves, with what they answer set by environment variables
// read at each call, so that one test process can try several machines:
//   PTUNE_FAKE_NVML_DEVICES    the number of devices (default 4); device i's UUID is
//                              GPU-0000000i-1111-2222-3333-444444444444
//   PTUNE_FAKE_NVML_PIDS       the compute processes' IDs, comma-separated (default none)
//   PTUNE_FAKE_NVML_SM_MHZ     the SM clock now, PTUNE_FAKE_NVML_SM_MAX_MHZ its maximum
//                              (each unset: "not supported")
//   PTUNE_FAKE_NVML_REASONS    the clocks event reasons bitmask, 0x... or decimal (unset: "not
//                              supported")
//   PTUNE_FAKE_NVML_SM_UTIL    every process's SM utilization on device 0, in % (one sample each,
//                              taken now, for every process /proc lists; unset: "not supported")
//   PTUNE_FAKE_NVML_ENTRY_BYTES  the size of the process entries filled (16, 24 or 32), for a
//                              driver that fills another than its functions suggest (default:
//                              this build's, below)
// ptune_fake_nvml_read() says which device was last read, ptune_fake_nvml_inits() how many
// times nvmlInit_v2 ran.
// Built three times, as the drivers' libraries differ in how they list processes (see
// nvml::Library in lib/system/load.cpp): by default as a current driver's (the _v3 function
// filling 24-byte nvmlProcessInfo_v2_t entries, beside nvmlDeviceGetConfComputeMemSizeInfo and
// nvmlDeviceGetRunningProcessDetailList); with PTUNE_FAKE_NVML_R535 as the R535 series' (_v3
// filling 32-byte nvmlProcessInfo_v3_t entries, without nvmlDeviceGetRunningProcessDetailList);
// with PTUNE_FAKE_NVML_R450 as an old driver's (only the unversioned function, 16-byte entries).
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6, kInsufficientSize = 7;

struct Device {
  int index;
};
Device g_devices[64];
int g_read = -1;
int g_inits = 0;

int devices() {
  const char* v = std::getenv("PTUNE_FAKE_NVML_DEVICES");
  const int n = v ? std::atoi(v) : 4;
  return n < 0 ? 0 : n > 64 ? 64 : n;
}

std::string uuid_of(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08d-1111-2222-3333-444444444444", i);
  return buf;
}

const Device* device(const void* handle) {
  const auto* d = static_cast<const Device*>(handle);
  if (d < g_devices || d >= g_devices + devices()) return nullptr;
  g_read = d->index;
  return d;
}

bool number(const char* name, unsigned long long* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  *out = std::strtoull(v, nullptr, 0);
  return true;
}

#if defined(PTUNE_FAKE_NVML_R535)
constexpr size_t kEntry = 32;  // nvmlProcessInfo_v3_t
#elif defined(PTUNE_FAKE_NVML_R450)
constexpr size_t kEntry = 16;  // nvmlProcessInfo_v1_t
#else
constexpr size_t kEntry = 24;  // nvmlProcessInfo_v2_t
#endif

/// Entry i of a process list: pid, usedGpuMemory (512 MiB), then (24 and 32 bytes) the MIG instance IDs
/// (0xFFFFFFFF: no MIG), then (32 bytes) usedGpuCcProtectedMemory.
size_t entry_bytes() {
  const char* v = std::getenv("PTUNE_FAKE_NVML_ENTRY_BYTES");
  const size_t n = v ? std::strtoul(v, nullptr, 10) : 0;
  return n == 16 || n == 24 || n == 32 ? n : kEntry;
}

void put_entry(void* infos, size_t i, unsigned int pid) {
  const size_t size = entry_bytes();
  unsigned char* e = static_cast<unsigned char*>(infos) + i * size;
  const unsigned long long memory = 512ull << 20;  // a CUDA context's order of size
  const unsigned int no_mig = 0xFFFFFFFFu;
  std::memcpy(e, &pid, 4);
  std::memset(e + 4, 0, 4);
  std::memcpy(e + 8, &memory, 8);
  if (size >= 24) {
    std::memcpy(e + 16, &no_mig, 4);
    std::memcpy(e + 20, &no_mig, 4);
  }
  if (size >= 32) std::memset(e + 24, 0, 8);
}

int running_processes(void* handle, unsigned int* count, void* infos) {
  if (!device(handle)) return kInvalidArgument;
  std::vector<unsigned int> pids;
  if (const char* v = std::getenv("PTUNE_FAKE_NVML_PIDS")) {
    std::istringstream in(v);
    std::string pid;
    while (std::getline(in, pid, ','))
      if (!pid.empty()) pids.push_back(static_cast<unsigned int>(std::strtoul(pid.c_str(), nullptr, 10)));
  }
  if (*count < pids.size()) {
    *count = static_cast<unsigned int>(pids.size());
    return kInsufficientSize;
  }
  for (size_t i = 0; i < pids.size(); ++i) put_entry(infos, i, pids[i]);
  *count = static_cast<unsigned int>(pids.size());
  return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  ++g_inits;
  return kSuccess;
}

int nvmlShutdown() { return kSuccess; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = static_cast<unsigned int>(devices());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** handle) {
  if (static_cast<int>(index) >= devices()) return kInvalidArgument;
  g_devices[index].index = static_cast<int>(index);
  *handle = &g_devices[index];
  return kSuccess;
}

int nvmlDeviceGetHandleByUUID(const char* uuid, void** handle) {
  for (int i = 0; i < devices(); ++i)
    if (uuid_of(i) == uuid) return nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned int>(i), handle);
  return kNotFound;
}

int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned int length) {
  const Device* d = device(handle);
  if (!d) return kInvalidArgument;
  const std::string u = uuid_of(d->index);
  if (u.size() + 1 > length) return kInsufficientSize;
  std::memcpy(uuid, u.c_str(), u.size() + 1);
  return kSuccess;
}

#if defined(PTUNE_FAKE_NVML_R450)
int nvmlDeviceGetComputeRunningProcesses(void* handle, unsigned int* count, void* infos) {
  return running_processes(handle, count, infos);
}
#else
int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned int* count, void* infos) {
  return running_processes(handle, count, infos);
}
// Present to be looked up (which entries _v3 fills depends on them), never called.
int nvmlDeviceGetConfComputeMemSizeInfo(void*, void*) { return kNotSupported; }
#if !defined(PTUNE_FAKE_NVML_R535)
int nvmlDeviceGetRunningProcessDetailList(void*, void*) { return kNotSupported; }
#endif
#endif

int nvmlDeviceGetClockInfo(void* handle, int type, unsigned int* mhz) {
  unsigned long long v = 0;
  if (!device(handle) || type != 1) return kInvalidArgument;  // NVML_CLOCK_SM only
  if (!number("PTUNE_FAKE_NVML_SM_MHZ", &v)) return kNotSupported;
  *mhz = static_cast<unsigned int>(v);
  return kSuccess;
}

int nvmlDeviceGetMaxClockInfo(void* handle, int type, unsigned int* mhz) {
  unsigned long long v = 0;
  if (!device(handle) || type != 1) return kInvalidArgument;
  if (!number("PTUNE_FAKE_NVML_SM_MAX_MHZ", &v)) return kNotSupported;
  *mhz = static_cast<unsigned int>(v);
  return kSuccess;
}

int nvmlDeviceGetCurrentClocksEventReasons(void* handle, unsigned long long* reasons) {
  if (!device(handle)) return kInvalidArgument;
  return number("PTUNE_FAKE_NVML_REASONS", reasons) ? kSuccess : kNotSupported;
}

/// nvmlProcessUtilizationSample_t.
struct UtilizationSample {
  unsigned int pid;
  unsigned long long time_us;
  unsigned int sm, memory, encoder, decoder;
};

int nvmlDeviceGetProcessUtilization(void* handle, void* samples, unsigned int* count, unsigned long long) {
  const Device* d = device(handle);
  unsigned long long sm = 0;
  if (!d || !count) return kInvalidArgument;
  if (!number("PTUNE_FAKE_NVML_SM_UTIL", &sm)) return kNotSupported;
  std::vector<unsigned int> pids;
  if (d->index == 0)
    if (DIR* dir = opendir("/proc")) {
      while (const dirent* e = readdir(dir))
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
          pids.push_back(static_cast<unsigned int>(std::atol(e->d_name)));
      closedir(dir);
    }
  if (!samples || *count < pids.size()) {
    *count = static_cast<unsigned int>(pids.size());
    return kInsufficientSize;
  }
  const auto now = static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                       std::chrono::system_clock::now().time_since_epoch())
                                                       .count());
  auto* out = static_cast<UtilizationSample*>(samples);
  for (size_t i = 0; i < pids.size(); ++i) out[i] = {pids[i], now, static_cast<unsigned int>(sm), 0, 0, 0};
  *count = static_cast<unsigned int>(pids.size());
  return kSuccess;
}

/// The index of the device last read (processes, clocks, reasons, UUID); -1 before any.
int ptune_fake_nvml_read() { return g_read; }

/// How many times nvmlInit_v2 ran.
int ptune_fake_nvml_inits() { return g_inits; }

}  // extern "C"
