#include "lockstep/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "lockstep/time_text.hpp"

namespace lockstep::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::Info)};
std::mutex g_mu;
const char* name(Level l) {
  switch (l) {
    case Level::Debug: return "DEBUG";
    case Level::Info: return "INFO ";
    case Level::Warn: return "WARN ";
    case Level::Error: return "ERROR";
  }
  return "?";
}
}  // namespace

void set_level(Level level) { g_level = static_cast<int>(level); }

bool parse_level(const std::string& s, Level& out) {
  if (s == "debug") out = Level::Debug;
  else if (s == "info") out = Level::Info;
  else if (s == "warn" || s == "warning") out = Level::Warn;
  else if (s == "error") out = Level::Error;
  else return false;
  return true;
}

bool enabled(Level level) { return static_cast<int>(level) >= g_level.load(); }

void write(Level level, const std::string& component, const std::string& message) {
  const std::string ts = time_text::rfc3339(std::chrono::system_clock::now(), 3);  // 2026-11-22T00:42:38.123Z
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s %s %s: %s\n", ts.c_str(), name(level), component.c_str(), message.c_str());
  std::fflush(stderr);
}

}  // namespace lockstep::log
