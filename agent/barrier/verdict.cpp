#include "barrier/verdict.hpp"

#include <algorithm>

#include "lockstep/contract.hpp"

namespace lockstep::agent {

bool restartable_in_place(const std::string& policy, int code) {
  if (policy == "Never") return false;
  if (policy == "OnFailure") return true;
  return contract::exit_code_retryable(code);  // ExitCode: Note [Exit codes] in the operator
}

std::optional<Failure> pick_cause(const std::vector<Failure>& reports) {
  if (reports.empty()) return std::nullopt;
  std::vector<Failure> order(reports);
  std::stable_sort(order.begin(), order.end(), [](const Failure& a, const Failure& b) {
    return a.at_ms != b.at_ms ? a.at_ms < b.at_ms : a.node < b.node;
  });
  for (const auto& f : order)
    if (!contract::exit_code_is_consequence(f.code)) return f;
  return order.front();
}

Verdict decide(const Failure& cause, int generation, int budget, const std::string& policy) {
  Verdict v;
  v.exit_code = cause.code;
  std::string what = cause.what.empty() ? "rank " + std::to_string(cause.rank) + " failed" : cause.what;
  what += " on node " + std::to_string(cause.node) + " first";
  if (!restartable_in_place(policy, cause.code)) {
    v.why = what + "; exit code " + std::to_string(cause.code) + " is permanent under restartPolicy " + policy +
            ", so no in-place restart";
  } else if (generation >= budget) {
    v.why = what + (budget == 0 ? "; in-place restarts are off (spec.runPolicy.inPlaceRestarts=0)"
                                : "; in-place restarts spent (" + std::to_string(generation) + " of " +
                                      std::to_string(budget) + ", spec.runPolicy.inPlaceRestarts)");
  } else {
    v.restart = true;
    v.why = what + "; every worker restarts in place (" + std::to_string(generation + 1) + " of " +
            std::to_string(budget) + ")";
  }
  return v;
}

}  // namespace lockstep::agent
