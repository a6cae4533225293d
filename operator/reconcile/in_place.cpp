#include "reconcile/in_place.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "reconcile/exposition.hpp"

namespace lockstep::reconcile {

std::optional<InPlaceReading> parse_in_place(const std::string& text, int attempt) {
  InPlaceReading r;
  r.attempt = attempt;
  bool counted = false, info_is_set = false;
  for (const auto& s : samples_of(text, {"lockstep_restarts_total", "lockstep_last_restart_timestamp_seconds",
                                         "lockstep_last_restart_info", "lockstep_restart_attempt"})) {
    if (!std::isfinite(s.value)) continue;
    if (s.name == "lockstep_restart_attempt") {
      if (static_cast<long long>(s.value) != attempt) return std::nullopt;
      continue;
    }
    if (s.label("kind") != "in_place") continue;  // the operator's kind="gang" is not served here
    if (s.name == "lockstep_restarts_total") {
      // One series per agent; should there be more, the highest count is the gang's.
      double v = std::min(std::max(s.value, 0.0), static_cast<double>(INT_MAX));
      r.restarts = std::max(r.restarts, static_cast<int>(v));
      counted = true;
    } else if (s.name == "lockstep_last_restart_timestamp_seconds") {
      if (s.value > 0)
        r.last_at = Time(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.value)));
    } else if (!info_is_set) {  // lockstep_last_restart_info: the one series set to 1
      r.reason = s.label("reason").value_or("");
      r.rank = s.label("rank").value_or("");
      r.exit_code = s.label("exit_code").value_or("");
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
