// Durations and timestamps as lockstep writes them: one formatter of each kind, used by the
// operator, the agent, the command line and the trainer. Header-only, standard library only.
//   timestamps  RFC 3339 in UTC, as the API server writes them: 2026-11-22T00:42:38Z; with
//               3 fraction digits (the logs') or 6 (metav1.MicroTime)
//   durations   compact, its two largest units: 45s, 3m20s, 2h05m, 3d04h (a status's ETA,
//               messages, the command line's progress line); or seconds with a unit and a
//               fixed number of decimals, 6.03 s (a measured time), or the shortest form,
//               2.5 s (a setting)
#pragma once

#include <chrono>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>

namespace lockstep::time_text {

using SystemTime = std::chrono::system_clock::time_point;

// 2026-11-22T00:42:38Z; fraction_digits 3: 2026-11-22T00:42:38.123Z, 6: ...38.123456Z.
inline std::string rfc3339(SystemTime t, int fraction_digits = 0) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char whole[32];
  std::strftime(whole, sizeof whole, "%Y-%m-%dT%H:%M:%S", &tm);
  const auto since = t.time_since_epoch();
  char out[64];
  if (fraction_digits == 3)
    std::snprintf(out, sizeof out, "%s.%03dZ", whole,
                  static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(since).count() % 1000));
  else if (fraction_digits == 6)
    std::snprintf(out, sizeof out, "%s.%06lldZ", whole,
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(since).count() % 1000000));
  else
    std::snprintf(out, sizeof out, "%sZ", whole);
  return out;
}

// The time an RFC 3339 UTC timestamp stands for, to the second (a fraction is ignored);
// nullopt if it is not one.
inline std::optional<SystemTime> parse_rfc3339(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  if (*end == '.') while (*++end >= '0' && *end <= '9') {}  // fractional seconds: ignored
  if (*end != 'Z' && *end != 'z') return std::nullopt;      // the API server writes UTC
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// Whole seconds in their two largest units: "45s", "3m20s", "2h05m", "3d04h"; negative as 0.
inline std::string compact_duration(long long s) {
  if (s < 0) s = 0;
  auto two = [](long long v) {
    std::string out = std::to_string(v);
    if (v < 10) out.insert(out.begin(), '0');
    return out;
  };
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + two(s % 60) + "s";
  if (s < 86400) return std::to_string(s / 3600) + "h" + two(s / 60 % 60) + "m";
  return std::to_string(s / 86400) + "d" + two(s / 3600 % 24) + "h";
}

// The seconds compact_duration's text stands for; nullopt if it is not one.
inline std::optional<long long> parse_compact_duration(const std::string& text) {
  long long total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i || j == text.size() || j - i > 12) return std::nullopt;
    long long v = std::stoll(text.substr(i, j - i));
    switch (text[j]) {
      case 'd': total += v * 86400; break;
      case 'h': total += v * 3600; break;
      case 'm': total += v * 60; break;
      case 's': total += v; break;
      default: return std::nullopt;
    }
    any = true;
    i = j + 1;
  }
  if (!any) return std::nullopt;
  return total;
}

// A measured time in seconds with `decimals` decimals and the unit: "6.03 s" (2), "0.125 s" (3).
inline std::string seconds(double s, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f s", decimals, s);
  return buf;
}
inline std::string seconds(std::chrono::duration<double> d, int decimals) { return seconds(d.count(), decimals); }

// Now, in Unix seconds with a fraction: the times of the step log, the event log and the
// last-step gauges.
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A setting in seconds, its shortest form: "6 s", "2.5 s", "0.25 s".
inline std::string setting_seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace lockstep::time_text
