#pragma once
/// ptune's logging: one line per message on stderr, "ptune: <level>: <text>". A thin wrapper
/// over spdlog, compiled in its own translation unit (log.cpp) because LibTorch ships its own
/// fmt headers, which clash with the fmt that Debian's spdlog is built against.

#include <string>

namespace ptune::log {

enum class Level { kDebug, kInfo, kWarn, kError };

/// Sets the lowest level printed (default kInfo).
void set_level(Level level);
void debug(const std::string& msg);
void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);

}  // namespace ptune::log
