#include "reconcile/time.hpp"

#include <ctime>

namespace lockstep::reconcile {

std::string format_time(Time t) {
  std::time_t tt = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<Time> parse_time(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  if (*end == '.') while (*++end >= '0' && *end <= '9') {}  // fractional seconds: ignored
  if (*end != 'Z' && *end != 'z') return std::nullopt;      // the API server writes UTC
  return Clock::from_time_t(timegm(&tm));
}

}  // namespace lockstep::reconcile
