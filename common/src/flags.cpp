#include "lockstep/flags.hpp"

#include <cerrno>
#include <cstdlib>

namespace lockstep::flags {

bool match(int argc, char** argv, int& i, const std::string& name, std::string& value) {
  std::string a = argv[i];
  if (a == name) {
    if (i + 1 >= argc) throw FlagError(name + " needs a value");
    value = argv[++i];
    return true;
  }
  if (a.rfind(name + "=", 0) == 0) {
    value = a.substr(name.size() + 1);
    return true;
  }
  return false;
}

int to_int(const std::string& flag, const std::string& value, int min, int max) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end || errno || v < min || v > max)
    throw FlagError(flag + ": expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                    ", got '" + value + "'");
  return static_cast<int>(v);
}

double to_double(const std::string& flag, const std::string& value, double min, double max) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end || errno || v < min || v > max)
    throw FlagError(flag + ": expected a number from " + std::to_string(min) + " to " + std::to_string(max) +
                    ", got '" + value + "'");
  return v;
}

bool to_bool(const std::string& flag, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  throw FlagError(flag + ": expected true or false, got '" + value + "'");
}

std::chrono::milliseconds to_duration(const std::string& flag, const std::string& value) {
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
