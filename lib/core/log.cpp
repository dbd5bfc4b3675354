#include "core/log.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace ptune::log {
namespace {

/// Colour as the tables have it (report::terminal_style): only on a terminal whose TERM is set and
/// not "dumb", and not where NO_COLOR is set to a non-empty value.
spdlog::color_mode color_mode() {
  const char* term = std::getenv("TERM");
  const char* no_color = std::getenv("NO_COLOR");
  const bool color = ::isatty(STDERR_FILENO) == 1 && term && *term && std::strcmp(term, "dumb") != 0 &&
                     !(no_color && *no_color);
  return color ? spdlog::color_mode::automatic : spdlog::color_mode::never;
}

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("ptune", color_mode());
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
