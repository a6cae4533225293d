// `lockstep run` as the local tier runs it (cli_test, report_test), with the one check every
// healthy run keeps (#42, "No false verdicts"): no line of its output names a straggler, neither
// `lockstep run`'s own ("lockstep run: straggler: rank 1 (node 1): ...", docs/cli.md) nor the
// agent's ("lockstep-agent: straggler: rank 1 on node 1: ..."). A test that slows a rank on
// purpose says so (Verdicts::kExpected) and asserts the verdict itself.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>

#include "lockstep/process.hpp"

namespace lockstep::test {

enum class Verdicts { kNone, kExpected };

// The lines of `output` that tell of a straggler verdict.
inline std::string straggler_lines(const std::string& output) {
  std::istringstream in(output);
  std::string found;
  for (std::string line; std::getline(in, line);)
    if (line.find("straggler: rank") != std::string::npos) found += line + "\n";
  return found;
}

inline void expect_no_straggler_verdict(const std::string& output, const std::string& what) {
  const std::string lines = straggler_lines(output);
  EXPECT_TRUE(lines.empty()) << what << " is healthy, yet a straggler was named:\n" << lines;
}

// `cli run job` in `dir` (lockstep-runs/ goes there), `env` on top of this process's.
inline RunResult lockstep_run(const std::string& cli, const std::string& dir, const std::string& job,
                              std::chrono::seconds timeout, Verdicts verdicts = Verdicts::kNone,
                              const std::map<std::string, std::string>& env = {}) {
  RunResult r = run_capture({"/bin/sh", "-c", "cd '" + dir + "' && exec '" + cli + "' run '" + job + "'"}, env, timeout);
  if (verdicts == Verdicts::kNone) expect_no_straggler_verdict(r.output, "lockstep run " + job);
  return r;
}

}  // namespace lockstep::test
