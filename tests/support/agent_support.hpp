// Helpers the suites that run the agent share (tests/agent/, tests/trainer/): the agent's and the
// trainer's executables and a fresh directory. The restart barrier's are barrier_support.hpp.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <utility>

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

// No false verdicts (issue #42): node 0's agent says `straggler: rank R on node N: ...` when it
// names a straggler (and `lockstep run` says `straggler: rank R (node N): ...`); a healthy run
// says it nowhere. Every helper that runs agents checks their output with this, so every test
// keeps the check unless it says it expects a verdict.
inline constexpr const char* kStragglerVerdict = "straggler: rank";
inline void expect_no_straggler_verdict(const std::string& output, const std::string& whose) {
  std::istringstream in(output);
  std::string said;
  for (std::string line; std::getline(in, line);)
    if (line.find(kStragglerVerdict) != std::string::npos) said += "  " + line + "\n";
  EXPECT_EQ(said, "") << whose << " named a straggler in a run that expects none:\n" << said;
}

// Checks an agent's output file (expect_no_straggler_verdict) when it goes, unless
// expect_straggler() was called: a member of each test's handle on an agent process.
class NoFalseVerdict {
 public:
  NoFalseVerdict() = default;
  explicit NoFalseVerdict(std::string log) : log_(std::move(log)) {}
  NoFalseVerdict(NoFalseVerdict&& o) noexcept : log_(std::exchange(o.log_, {})), expected_(o.expected_) {}
  NoFalseVerdict& operator=(NoFalseVerdict&& o) noexcept {
    check();
    log_ = std::exchange(o.log_, {});
    expected_ = o.expected_;
    return *this;
  }
  ~NoFalseVerdict() { check(); }
  void expect_straggler() { expected_ = true; }

 private:
  void check() {
    if (!log_.empty() && !expected_) expect_no_straggler_verdict(read_file(log_), log_);
    log_.clear();
  }
  std::string log_;
  bool expected_ = false;
};

}  // namespace lockstep::test
