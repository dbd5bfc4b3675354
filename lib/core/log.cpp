#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace ptune::log {
namespace {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("ptune");
    lg->set_pattern("ptune: %^%l%$: %v");
    lg->set_level(spdlog::level::info);
    return lg;
  }();
  return *l;
}

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    default:
      return spdlog::level::err;
  }
}

}  // namespace

void set_level(Level level) { logger().set_level(to_spd(level)); }
void debug(const std::string& msg) { logger().debug("{}", msg); }
void info(const std::string& msg) { logger().info("{}", msg); }
void warn(const std::string& msg) { logger().warn("{}", msg); }
void error(const std::string& msg) { logger().error("{}", msg); }

}  // namespace ptune::log
