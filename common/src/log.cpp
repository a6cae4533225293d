#include "lockstep/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

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
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s.%03dZ %s %s: %s\n", ts, ms, name(level), component.c_str(), message.c_str());
  std::fflush(stderr);
}

}  // namespace lockstep::log
