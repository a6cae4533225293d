#include "reconcile/failure_policy.hpp"

#include <algorithm>

#include "lockstep/contract.hpp"
#include "lockstep/text.hpp"

namespace lockstep::reconcile {

bool is_retryable(RestartPolicy policy, const PodView& pod) {
  switch (policy) {
    case RestartPolicy::Never: return false;
    case RestartPolicy::OnFailure: return true;
    case RestartPolicy::ExitCode: break;
  }
  // Note [Exit codes]
  return contract::exit_code_retryable(pod.exit_code);
}

bool is_consequence(const PodView& pod) { return contract::exit_code_is_consequence(pod.exit_code); }

const PodView* first_failure(const std::vector<const PodView*>& failed, RestartPolicy policy,
                             const FailureTiming& timing) {
  if (failed.empty()) return nullptr;
  auto earlier = [](const PodView* a, const PodView* b) {  // known times first, then by index
    if (a->finished_at && b->finished_at && *a->finished_at != *b->finished_at)
      return *a->finished_at < *b->finished_at;
    if (a->finished_at.has_value() != b->finished_at.has_value()) return a->finished_at.has_value();
    return a->index < b->index;
  };
  std::vector<const PodView*> order(failed);
  std::sort(order.begin(), order.end(), earlier);

  // A consequence gives way to a non-consequence failure that ended soon after it.
  const PodView* first = order.front();
  if (is_consequence(*first) && first->finished_at) {
    for (const PodView* p : order) {
      if (is_consequence(*p)) continue;
      if (!p->finished_at || *p->finished_at <= *first->finished_at + timing.consequence_window) first = p;
      break;
    }
  }
  // Failures within `simultaneous` of it (or of unknown time) tie; a retryable one wins.
  if (!first->finished_at || is_retryable(policy, *first)) return first;
  for (const PodView* p : order) {
    if (p == first || is_consequence(*p) || !is_retryable(policy, *p)) continue;
    bool tie = !p->finished_at || *p->finished_at <= *first->finished_at + timing.simultaneous;
    if (tie) return p;
  }
  return first;
}

// The last non-empty line of a termination message, at most 300 bytes of it.
std::string last_words(const std::string& message) {
  size_t end = message.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = message.find_last_of('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  std::string line = message.substr(start, end + 1 - start);
  if (line.size() > 300) line = text::utf8_head(line, 300) + "...";  // Note [UTF-8 text]
  return line;
}

std::string describe_failure(const PodView& pod) {
  std::string s = "pod " + pod.name;
  if (pod.exit_code >= 0) s += " failed with exit code " + std::to_string(pod.exit_code);
  else if (pod.phase == "Failed") s += " failed";
  else s += " disappeared";
  if (!pod.reason.empty()) s += " (" + pod.reason + ")";
  std::string words = last_words(pod.termination_message);
  if (!words.empty()) s += ": \"" + words + "\"";
  return s;
}

}  // namespace lockstep::reconcile
