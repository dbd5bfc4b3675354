#include "system/rendezvous.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>

namespace ptune::system {
namespace {

/// The integer value of variable `name`, or `fallback` when unset. Throws for a non-integer.
int int_var(const Getenv& getenv, const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || n < INT_MIN || n > INT_MAX)
    throw std::runtime_error(std::string("environment: ") + name + "='" + v + "' is not an integer");
  return static_cast<int>(n);
}

/// The leading integer of a Slurm count such as "4(x2)" or "2,1"; `fallback` when unset.
int leading_int(const Getenv& getenv, const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end == v || n < 1 || n > INT_MAX ? fallback : static_cast<int>(n);
}

bool is_set(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  return v && *v;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first host expression ends at a comma outside brackets.
  std::string expr;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    expr += c;
  }
  // Each "[a-b,c]" range becomes its first value.
  std::string host;
  for (size_t i = 0; i < expr.size(); ++i) {
    if (expr[i] != '[') {
      host += expr[i];
      continue;
    }
    const size_t close = expr.find(']', i);
    const std::string inside =
        expr.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
    host += inside.substr(0, inside.find_first_of("-,"));
    if (close == std::string::npos) break;
    i = close;
  }
  return host;
}

namespace {

/// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, ...), which `ptune launch` sets too.
void read_torchrun(const Getenv& getenv, Environment& e) {
  if (!is_set(getenv, "WORLD_SIZE"))
    throw std::runtime_error("environment: RANK is set but WORLD_SIZE is not");
  if (!is_set(getenv, "RANK")) throw std::runtime_error("environment: WORLD_SIZE is set but RANK is not");
  e.world_size = int_var(getenv, "WORLD_SIZE", 1);
  e.rank = int_var(getenv, "RANK", 0);
  e.local_rank = int_var(getenv, "LOCAL_RANK", e.rank);
  e.local_world_size = int_var(getenv, "LOCAL_WORLD_SIZE", e.world_size);
  e.launcher = "torchrun";
  const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && std::string(agent) == "True";
  e.restart_count = int_var(getenv, "TORCHELASTIC_RESTART_COUNT", 0);
}

/// Slurm's variables (SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, ...); returns the
/// name of the variable the world size was read from.
const char* read_slurm(const Getenv& getenv, Environment& e) {
  const char* size_var = is_set(getenv, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  e.world_size = int_var(getenv, size_var, 1);
  e.rank = int_var(getenv, "SLURM_PROCID", 0);
  e.local_rank = int_var(getenv, "SLURM_LOCALID", 0);
  e.local_world_size =
      leading_int(getenv, "SLURM_STEP_TASKS_PER_NODE", leading_int(getenv, "SLURM_NTASKS_PER_NODE", 1));
  e.launcher = "slurm";
  return size_var;
}

/// Throws std::runtime_error, naming the variables, for a world size, rank or local rank out
/// of range; a local world size below 1 becomes 1.
void check_ranks(Environment& e, const char* size_var, const char* rank_var) {
  if (e.world_size < 1)
    throw std::runtime_error(std::string("environment: ") + size_var + "=" + std::to_string(e.world_size) +
                             " must be at least 1");
  if (e.rank < 0 || e.rank >= e.world_size)
    throw std::runtime_error(std::string("environment: ") + rank_var + "=" + std::to_string(e.rank) +
                             " must be in [0, " + std::to_string(e.world_size) + ") (" + size_var + "=" +
                             std::to_string(e.world_size) + ")");
  if (e.local_rank < 0)
    throw std::runtime_error("environment: local rank " + std::to_string(e.local_rank) + " is negative");
  if (e.local_world_size < 1) e.local_world_size = 1;
}

/// The rendezvous host: MASTER_ADDR, else dist.master_addr, else (Slurm) the first host of
/// the step's or job's node list; "" when none names one.
std::string master_address(const Getenv& getenv, const config::DistConfig& cfg, bool slurm) {
  if (is_set(getenv, "MASTER_ADDR")) return getenv("MASTER_ADDR");
  if (cfg.master_addr && !cfg.master_addr->empty()) return *cfg.master_addr;
  if (!slurm) return "";
  for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (is_set(getenv, list)) return first_slurm_host(getenv(list));
  return "";
}

/// The rendezvous port: MASTER_PORT, else dist.master_port. Throws std::runtime_error for
/// one that is not a port.
int master_port(const Getenv& getenv, const config::DistConfig& cfg) {
  const int port = int_var(getenv, "MASTER_PORT", static_cast<int>(cfg.master_port));
  if (port < 1 || port > 65535)
    throw std::runtime_error("environment: MASTER_PORT=" + std::to_string(port) + " is not in [1, 65535]");
  return port;
}

}  // namespace

Environment parse_environment(const Getenv& getenv, const config::DistConfig& cfg, bool need_address) {
  Environment e;
  const bool torchrun = is_set(getenv, "WORLD_SIZE") || is_set(getenv, "RANK");
  const bool slurm = !torchrun && is_set(getenv, "SLURM_PROCID") &&
                     (is_set(getenv, "SLURM_STEP_NUM_TASKS") || is_set(getenv, "SLURM_NTASKS"));
  if (!torchrun && !slurm) return e;
  if (torchrun) {
    read_torchrun(getenv, e);
    check_ranks(e, "WORLD_SIZE", "RANK");
  } else {
    const char* size_var = read_slurm(getenv, e);
    check_ranks(e, size_var, "SLURM_PROCID");
  }
  if (e.world_size == 1) {  // a world of one: nothing to rendezvous with
    Environment single;
    single.launcher = e.launcher;
    return single;
  }
  e.master_addr = master_address(getenv, cfg, slurm);
  if (e.master_addr.empty() && need_address)
    throw std::runtime_error(
        "environment: no rendezvous address: set MASTER_ADDR or dist.master_addr to the host of rank 0");
  e.master_port = master_port(getenv, cfg);
  return e;
}

const Environment& environment() {
  static const Environment env =
      parse_environment([](const char* name) { return std::getenv(name); }, {}, /*need_address=*/false);
  return env;
}

namespace {
const Environment& environment_or_single() {
  static const Environment single;
  try {
    return environment();
  } catch (const std::exception&) {
    return single;
  }
}
}  // namespace

int world_rank() { return environment_or_single().rank; }
int world_size() { return environment_or_single().world_size; }
int local_rank() { return environment_or_single().local_rank; }
bool is_distributed() { return environment_or_single().distributed(); }

}  // namespace ptune::system
