// Small command-line parsing helpers whose errors name the flag and what is valid: the one way
// lockstep's programs (operator, agent, trainer, the command line) find a flag and its value.
// Header-only and standard library only, so the trainer, which links no lockstep library,
// uses the same words.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::flags {

struct FlagError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
// "--name=value" or "--name value": true and sets `value` when `arg` is --name, `next` the
// argument after it (null at the end); `took_next` when the value was that next argument.
inline bool match_at(std::string_view arg, const std::string_view* next, const std::string& name, std::string& value,
                     bool& took_next) {
  took_next = false;
  if (arg == name) {
    if (!next) throw FlagError(name + " needs a value");
    value = std::string(*next);
    took_next = true;
    return true;
  }
  if (arg.size() > name.size() && arg.substr(0, name.size()) == name && arg[name.size()] == '=') {
    value = std::string(arg.substr(name.size() + 1));
    return true;
  }
  return false;
}
}  // namespace detail

// "--name=value" or "--name value": true and sets `value` when argv[i] is --name.
inline bool match(int argc, char** argv, int& i, const std::string& name, std::string& value) {
  const std::string_view next = i + 1 < argc ? argv[i + 1] : "";
  bool took_next = false;
  if (!detail::match_at(argv[i], i + 1 < argc ? &next : nullptr, name, value, took_next)) return false;
  if (took_next) ++i;
  return true;
}

// The same over a program's arguments as strings.
inline bool match(const std::vector<std::string>& args, size_t& i, const std::string& name, std::string& value) {
  const std::string_view next = i + 1 < args.size() ? std::string_view(args[i + 1]) : std::string_view();
  bool took_next = false;
  if (!detail::match_at(args[i], i + 1 < args.size() ? &next : nullptr, name, value, took_next)) return false;
  if (took_next) ++i;
  return true;
}

inline int to_int(const std::string& flag, const std::string& value, int min, int max) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end || errno || v < min || v > max)
    throw FlagError(flag + ": expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                    ", got '" + value + "'");
  return static_cast<int>(v);
}

inline double to_double(const std::string& flag, const std::string& value, double min, double max) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end || errno || v < min || v > max)
    throw FlagError(flag + ": expected a number from " + std::to_string(min) + " to " + std::to_string(max) +
                    ", got '" + value + "'");
  return v;
}

inline bool to_bool(const std::string& flag, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  throw FlagError(flag + ": expected true or false, got '" + value + "'");
}

// 250ms, 10s, 5m, 1h; a bare number is seconds.
inline std::chrono::milliseconds to_duration(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  std::string unit = end ? end : "";
  double ms;
  if (unit == "ms") ms = v;
  else if (unit == "s" || unit.empty()) ms = v * 1000;
  else if (unit == "m") ms = v * 60000;
  else if (unit == "h") ms = v * 3600000;
  else ms = -1;
  if (value.empty() || end == value.c_str() || ms < 0)
    throw FlagError(flag + ": expected a duration such as 250ms, 10s, 5m or 1h, got '" + value + "'");
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

}  // namespace lockstep::flags
