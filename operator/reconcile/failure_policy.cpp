#include "reconcile/failure_policy.hpp"

#include "lockstep/contract.hpp"

namespace lockstep::reconcile {

bool is_retryable(RestartPolicy policy, const PodView& pod) {
  switch (policy) {
    case RestartPolicy::Never: return false;
    case RestartPolicy::OnFailure: return true;
    case RestartPolicy::ExitCode: break;
  }
  // Note [Exit codes]
  int code = pod.exit_code;
  if (code < 0 || code == 0) return true;
  if (code >= 128) return true;
  return code == contract::kExitStall || code == contract::kExitRendezvous;
}

std::string describe_failure(const PodView& pod) {
  std::string s = "pod " + pod.name;
  if (pod.exit_code >= 0) s += " failed with exit code " + std::to_string(pod.exit_code);
  else if (pod.phase == "Failed") s += " failed";
  else s += " disappeared";
  if (!pod.reason.empty()) s += " (" + pod.reason + ")";
  return s;
}

}  // namespace lockstep::reconcile
