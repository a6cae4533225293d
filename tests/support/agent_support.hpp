// Helpers the suites that run the agent share (tests/agent/, tests/trainer/): the agent's and the
// trainer's executables and a fresh directory. The restart barrier's are barrier_support.hpp.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_util.hpp"

namespace lockstep::test {

inline std::string agent_bin() { return env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"); }
inline std::string trainer_bin() { return env_or("LOCKSTEP_TRAINER_BIN", "lockstep-trainer"); }

// <TempDir>/<name>-<pid>, empty.
inline std::string fresh_temp_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace lockstep::test
