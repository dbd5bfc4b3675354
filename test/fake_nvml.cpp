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
// ptune_fake_nvml_read() says which device was last read, ptune_fake_nvml_inits() how many
// times nvmlInit_v2 ran.
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

struct ProcessInfo {  // nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

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

int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned int* count, ProcessInfo* infos) {
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
  for (size_t i = 0; i < pids.size(); ++i) infos[i] = {pids[i], 1u << 20, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *count = static_cast<unsigned int>(pids.size());
  return kSuccess;
}

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

/// The index of the device last read (processes, clocks, reasons, UUID); -1 before any.
int ptune_fake_nvml_read() { return g_read; }

/// How many times nvmlInit_v2 ran.
int ptune_fake_nvml_inits() { return g_inits; }

}  // extern "C"
