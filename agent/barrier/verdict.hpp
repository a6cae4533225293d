// The restart barrier's decision once every agent has stopped its workers (the "Decision" of
// Note [Restart barrier] in `agent/barrier/state.hpp`): which failure is the cause, and whether
// every worker restarts in place or every agent exits with the cause's code.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "barrier/codec.hpp"

namespace lockstep::agent {

// Pure decisions (unit tested).
bool restartable_in_place(const std::string& policy, int code);  // policy: OnFailure | ExitCode | Never
// The cause among the agents' reports: the earliest non-consequence, else the earliest.
std::optional<Failure> pick_cause(const std::vector<Failure>& reports);
struct Verdict {
  bool restart = false;
  int exit_code = 0;
  std::string why;  // for logs, the termination message and the metrics' info
};
Verdict decide(const Failure& cause, int generation, int budget, const std::string& policy);

}  // namespace lockstep::agent
