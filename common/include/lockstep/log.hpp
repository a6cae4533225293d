// One-line, timestamped logs on stderr: "2026-11-22T00:42:38.123Z INFO  component: message".
#pragma once

#include <sstream>
#include <string>

namespace lockstep::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_level(Level level);
bool parse_level(const std::string& name, Level& out);  // debug, info, warn, error
bool enabled(Level level);
void write(Level level, const std::string& component, const std::string& message);

}  // namespace lockstep::log

// LOCKSTEP_LOG(Info, "operator", "created " << n << " pods");
#define LOCKSTEP_LOG(level, component, expr)                                         \
  do {                                                                               \
    if (::lockstep::log::enabled(::lockstep::log::Level::level)) {                   \
      std::ostringstream lockstep_log_os_;                                           \
      lockstep_log_os_ << expr;                                                      \
      ::lockstep::log::write(::lockstep::log::Level::level, component, lockstep_log_os_.str()); \
    }                                                                                \
  } while (0)
