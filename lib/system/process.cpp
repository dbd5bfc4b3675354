#include "system/process.hpp"

#include <malloc.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <linux/mempolicy.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"

extern char** environ;

namespace ptune::system {
namespace {

/// A library ptune preloads, and where a user gets it.
struct Library {
  std::vector<std::string> files;  // tried in order
  std::string package;             // how to install it
};

const Library& library_for(const std::string& key, const std::string& value) {
  static const std::map<std::string, Library> libs = {
      {"jemalloc", {{"libjemalloc.so.2"}, "Debian's libjemalloc2 (apt-get install libjemalloc2)"}},
      {"tcmalloc",
       {{"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"},
        "Debian's libtcmalloc-minimal4 (apt-get install libtcmalloc-minimal4)"}},
      {"intel",
       {{"libiomp5.so"}, "PyPI's intel-openmp (pip install intel-openmp, in the active Python environment)"}},
  };
  auto it = libs.find(value);
  if (it == libs.end()) throw std::logic_error("internal error: no library for " + key + " '" + value + "'");
  return it->second;
}

/// The system's library folders, multiarch first.
std::vector<std::string> system_library_dirs() {
  std::vector<std::string> dirs = {"/usr/local/lib"};
  utsname u{};
  if (::uname(&u) == 0) {
    const std::string triple = std::string(u.machine) + "-linux-gnu";
    dirs.push_back("/usr/lib/" + triple);
    dirs.push_back("/lib/" + triple);
  }
  dirs.push_back("/usr/lib");
  dirs.push_back("/lib");
  return dirs;
}

void split_into(const char* list, std::vector<std::string>& out) {
  if (!list) return;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ':'))
    if (!part.empty()) out.push_back(part);
}

/// The library `value` of `key` needs, found, or ConfigError naming the package.
std::string require_library(const std::string& key, const std::string& value) {
  const Library& lib = library_for(key, value);
  for (const auto& file : lib.files)
    if (std::string path = find_library(file); !path.empty()) return path;
  const char* only = std::getenv("PTUNE_LIBRARY_PATH");
  const std::string where =
      only && *only ? std::string("PTUNE_LIBRARY_PATH: ") + only
                    : "LD_LIBRARY_PATH, the active Python environment and the system's library folders";
  throw ConfigError(key + ": '" + value + "' needs " + lib.files.front() +
                    ", which is not installed here (looked in " + where + "); it comes with " + lib.package);
}

/// The CPUs of NUMA node `node` (its cpulist).
std::vector<int> node_cpus(int node) {
  std::ifstream in("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
  std::string text;
  std::getline(in, text);
  if (text.empty()) return {};
  return parse_cpu_list(text, "node" + std::to_string(node));
}

const char* const kTunedMalloc =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_max=0";

}  // namespace

std::vector<std::string> library_dirs() {
  std::vector<std::string> dirs;
  split_into(std::getenv("PTUNE_LIBRARY_PATH"), dirs);
  if (!dirs.empty()) return dirs;  // only these, when given
  split_into(std::getenv("LD_LIBRARY_PATH"), dirs);
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(env); v && *v) dirs.push_back(std::string(v) + "/lib");
  for (auto& d : system_library_dirs()) dirs.push_back(d);
  return dirs;
}

std::string find_library(const std::string& file) {
  std::error_code ec;
  for (const auto& d : library_dirs()) {
    const std::filesystem::path p = std::filesystem::path(d) / file;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return {};
}

std::vector<int> parse_cpu_list(const std::string& text, const std::string& key) {
  auto bad = [&] {
    return ConfigError(key + ": '" + text +
                       "' is not a CPU list; allowed: CPU numbers and ranges, e.g. \"0-3,8\"");
  };
  std::set<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    part.erase(0, part.find_first_not_of(" \t\n"));
    part.erase(part.find_last_not_of(" \t\n") + 1);
    const size_t dash = part.find('-');
    const std::string lo_s = part.substr(0, dash),
                      hi_s = dash == std::string::npos ? lo_s : part.substr(dash + 1);
    auto number = [&](const std::string& s) {
      if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) throw bad();
      return std::stoi(s);
    };
    const int lo = number(lo_s), hi = number(hi_s);
    if (lo > hi || hi >= CPU_SETSIZE) throw bad();
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  if (cpus.empty()) throw bad();
  return {cpus.begin(), cpus.end()};
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return out;
}

const std::vector<int>& allowed_cpus() {
  static const std::vector<int> cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> out;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
    return out;
  }();
  return cpus;
}

std::vector<int> numa_nodes() {
  std::vector<int> nodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    const int n = std::stoi(name.substr(4));
    if (!node_cpus(n).empty()) nodes.push_back(n);
  }
  std::sort(nodes.begin(), nodes.end());
  if (nodes.empty()) nodes.push_back(0);
  return nodes;
}

ProcessPlan plan_process(const config::ProcessConfig& p) {
  ProcessPlan plan;
  if (p.allocator == config::Allocator::kGlibcTuned) {
    plan.env.emplace_back("GLIBC_TUNABLES", kTunedMalloc);
  } else if (p.allocator != config::Allocator::kGlibc) {
    plan.preload.push_back(require_library("process.allocator", config::name(p.allocator)));
  }
  if (p.openmp == config::OpenMp::kIntel)
    plan.preload.push_back(require_library("process.openmp", config::name(p.openmp)));
  if (p.bind_threads) {
    plan.env.emplace_back("OMP_PROC_BIND", "close");
    plan.env.emplace_back("OMP_PLACES", "cores");
  }
  const std::vector<int> allowed = allowed_cpus();
  if (p.cpus) {
    plan.cpus = parse_cpu_list(*p.cpus, "process.cpus");
    for (int c : plan.cpus)
      if (!std::binary_search(allowed.begin(), allowed.end(), c))
        throw ConfigError("process.cpus: CPU " + std::to_string(c) + " in '" + *p.cpus +
                          "' is not one this process may run on; allowed: " + cpu_list_text(allowed));
  }
  if (p.numa_node >= 0) {
    const std::vector<int> nodes = numa_nodes();
    if (!std::binary_search(nodes.begin(), nodes.end(), static_cast<int>(p.numa_node)))
      throw ConfigError("process.numa_node: node " + std::to_string(p.numa_node) +
                        " does not exist here; allowed: -1 (no binding) or " + cpu_list_text(nodes));
    if (nodes.size() == 1) {
      plan.notes.push_back(
          "process.numa_node " + std::to_string(p.numa_node) +
          " does not apply here: this machine has one NUMA node, so binding to it changes nothing");
    } else {
      std::vector<int> cpus = node_cpus(static_cast<int>(p.numa_node)), both;
      const std::vector<int>& within = plan.cpus.empty() ? allowed : plan.cpus;
      std::set_intersection(cpus.begin(), cpus.end(), within.begin(), within.end(), std::back_inserter(both));
      if (both.empty())
        throw ConfigError("process.numa_node: node " + std::to_string(p.numa_node) +
                          " has none of the CPUs " + cpu_list_text(within) +
                          (plan.cpus.empty() ? " this process may run on" : " of process.cpus"));
      plan.cpus = both;
      plan.numa_node = static_cast<int>(p.numa_node);
    }
  }
  return plan;
}

bool same_process(const config::ProcessConfig& a, const config::ProcessConfig& b) {
  const bool one_node = numa_nodes().size() == 1;
  auto node = [&](const config::ProcessConfig& p) { return one_node ? -1 : p.numa_node; };
  return a.allocator == b.allocator && a.openmp == b.openmp && a.bind_threads == b.bind_threads &&
         a.cpus == b.cpus && node(a) == node(b);
}

bool default_process(const config::ProcessConfig& p) { return same_process(p, config::ProcessConfig{}); }

std::vector<std::string> environment_with(const ProcessPlan& plan) {
  std::map<std::string, std::string> set(plan.env.begin(), plan.env.end());
  std::vector<std::string> out;
  std::string preload, tunables;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const std::string value = entry.find('=') == std::string::npos ? "" : entry.substr(entry.find('=') + 1);
    if (name == "LD_PRELOAD")
      preload = value;
    else if (name == "GLIBC_TUNABLES")
      tunables = value;
    else if (!set.count(name))
      out.push_back(entry);
  }
  for (const auto& [name, value] : set) {
    if (name == "GLIBC_TUNABLES")
      tunables = tunables.empty() ? value : tunables + ":" + value;
    else if (!value.empty())
      out.push_back(name + "=" + value);
  }
  std::string libs;
  for (const auto& l : plan.preload) libs += (libs.empty() ? "" : ":") + l;
  if (!preload.empty()) libs += (libs.empty() ? "" : ":") + preload;
  if (!libs.empty()) out.push_back("LD_PRELOAD=" + libs);
  if (!tunables.empty()) out.push_back("GLIBC_TUNABLES=" + tunables);
  return out;
}

int bind_process(const ProcessPlan& plan) {
  if (!plan.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : plan.cpus) CPU_SET(c, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) return errno;
  }
  if (plan.numa_node >= 0) {
    unsigned long mask[16] = {};
    const int bits = static_cast<int>(8 * sizeof(unsigned long));
    if (plan.numa_node >= 16 * bits) return EINVAL;
    mask[plan.numa_node / bits] |= 1ul << (plan.numa_node % bits);
    if (::syscall(SYS_set_mempolicy, MPOL_BIND, mask, 16 * bits + 1) != 0) return errno;
  }
  return 0;
}

std::string describe_this_process() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> libs;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string file = line.substr(slash + 1);
    for (const char* stem : {"libjemalloc", "libtcmalloc", "libiomp5", "libgomp"})
      if (file.rfind(stem, 0) == 0) libs.insert(file);
  }
  std::string text = "libraries:";
  for (const auto& l : libs) text += " " + l;
  if (libs.empty()) text += " none of jemalloc, tcmalloc, libiomp5, libgomp";
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  text += std::string("; GLIBC_TUNABLES ") + (tunables && *tunables ? tunables : "unset");
  text += "; CPUs " + cpu_list_text(allowed_cpus());
  int mode = -1;
  unsigned long mask[16] = {};
  if (::syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0) == 0) {
    std::vector<int> nodes;
    for (int n = 0; n < static_cast<int>(16 * 8 * sizeof(unsigned long)); ++n)
      if (mask[n / (8 * sizeof(unsigned long))] & (1ul << (n % (8 * sizeof(unsigned long)))))
        nodes.push_back(n);
    text +=
        mode == MPOL_BIND ? "; memory bound to node(s) " + cpu_list_text(nodes) : "; memory: default policy";
  }
  return text;
}

void return_free_memory() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace ptune::system
