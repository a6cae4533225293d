// Small command-line parsing helpers whose errors name the flag and what is valid.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

namespace lockstep::flags {

struct FlagError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "--name=value" or "--name value": true and sets `value` when argv[i] is --name.
bool match(int argc, char** argv, int& i, const std::string& name, std::string& value);

int to_int(const std::string& flag, const std::string& value, int min, int max);
double to_double(const std::string& flag, const std::string& value, double min, double max);
bool to_bool(const std::string& flag, const std::string& value);
// 250ms, 10s, 5m, 1h; a bare number is seconds.
std::chrono::milliseconds to_duration(const std::string& flag, const std::string& value);

}  // namespace lockstep::flags
