#include "reconcile/in_place.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>

#include "reconcile/prometheus_text.hpp"

namespace lockstep::reconcile {
namespace {

// The agent's words for a restart's cause (Note [In-place restarts]) reach the Restarted
// condition, an Event and the log, but the text is the pod's (Note [Untrusted exposition]):
// a reason is taken only as a short CamelCase word (the agent's are WorkerFailed and Stall), a
// rank or exit code only as a small decimal integer; anything else is as if not said.
std::string word_or_nothing(const std::optional<std::string>& v) {
  if (!v || v->empty() || v->size() > kMaxReasonBytes || !std::isupper(static_cast<unsigned char>((*v)[0])) ||
      !std::all_of(v->begin(), v->end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    return "";
  return *v;
}

std::string integer_or_nothing(const std::optional<std::string>& v) {
  if (!v) return "";
  size_t digits = v->size() - (!v->empty() && (*v)[0] == '-');
  if (digits == 0 || digits > 9 ||
      !std::all_of(v->end() - static_cast<long>(digits), v->end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "";
  return *v;
}

// The latest restart time believed: after 1970 and before 2100 (a Time holds up to 2262).
constexpr double kMaxRestartTime = 4102444800.0;

}  // namespace

bool parse_workers_started(const std::string& text, int attempt) {
  bool this_attempt = false, up = false;
  for (const auto& s : samples_of(text, {"lockstep_restart_attempt", "lockstep_worker_up"})) {
    if (s.name == "lockstep_restart_attempt") {
      if (s.value != static_cast<double>(attempt)) return false;
      this_attempt = true;
    } else if (s.value == 1.0) {
      up = true;
    }
  }
  return this_attempt && up;
}

std::optional<InPlaceReading> parse_in_place(const std::string& text, int attempt) {
  InPlaceReading r;
  r.attempt = attempt;
  bool counted = false, info_is_set = false;
  for (const auto& s : samples_of(text, {"lockstep_restarts_total", "lockstep_last_restart_timestamp_seconds",
                                         "lockstep_last_restart_info", "lockstep_restart_attempt"})) {
    if (s.name == "lockstep_restart_attempt") {
      // Also NaN, a fraction or a figure out of range: not this attempt's.
      if (s.value != static_cast<double>(attempt)) return std::nullopt;
      continue;
    }
    if (!std::isfinite(s.value)) continue;
    if (s.label("kind") != "in_place") continue;  // the operator's kind="gang" is not served here
    if (s.name == "lockstep_restarts_total") {
      // One series per agent; should there be more, the highest count is the gang's.
      // Capped: the budget is at most 100 per attempt, so the job's total over its attempts
      // (backoffLimit <= 1000) stays far from overflowing an int.
      double v = std::min(std::max(s.value, 0.0), static_cast<double>(kMaxInPlaceReading));
      r.restarts = std::max(r.restarts, static_cast<int>(v));
      counted = true;
    } else if (s.name == "lockstep_last_restart_timestamp_seconds") {
      if (s.value > 0 && s.value < kMaxRestartTime)
        r.last_at = Time(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.value)));
    } else if (!info_is_set) {  // lockstep_last_restart_info: the one series set to 1
      r.reason = word_or_nothing(s.label("reason"));
      r.rank = integer_or_nothing(s.label("rank"));
      r.exit_code = integer_or_nothing(s.label("exit_code"));
      info_is_set = s.value == 1;
    }
  }
  if (!counted) return std::nullopt;
  return r;
}

std::string describe_in_place_cause(const InPlaceReading& r) {
  if (r.reason.empty()) return "the agent did not say why";
  std::string who = r.rank.empty() ? "" : "rank " + r.rank;
  std::string what;
  if (r.reason == "Stall") {
    what = (who.empty() ? "the workers" : who) + " reported no step in time";
  } else if (!r.exit_code.empty()) {
    what = (who.empty() ? "a worker" : who) + " exited with code " + r.exit_code;
  } else {
    what = who.empty() ? "a worker failed" : who + " failed";
  }
  return what + " (" + r.reason + ")";
}

std::string in_place_message(const InPlaceReading& r, int budget) {
  return describe_in_place_cause(r) + "; every worker restarted in place in the same pods (" +
         std::to_string(r.restarts) + " of " + std::to_string(budget) + " in gang attempt " +
         std::to_string(r.attempt) + ")";
}

std::string in_place_event_message(const InPlaceReading& r, int budget, int added) {
  std::string message = in_place_message(r, budget);
  if (added <= 1) return message;
  return std::to_string(added) + " in-place restarts since the last reading; the last: " + message;
}

}  // namespace lockstep::reconcile
