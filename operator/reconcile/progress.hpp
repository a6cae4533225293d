// Training progress for `kubectl get tj` (#13, #25): the step reached out of the total, tokens/s
// and an ETA, in status.progress.
//
// Note [Progress]
// The training pods get no extra privilege: they never write to the API server. The operator
// reads what rank 0's agent already serves on its /metrics port (lockstep_step,
// lockstep_total_steps, lockstep_steps_total and lockstep_tokens_total of rank 0). Ranks of a
// synchronous gang take the same steps, so the gang's tokens/s is rank 0's rate times the
// world size; the ETA is the steps left at the step rate between two readings.
//   What the columns show: nothing before rank 0's first step (the agent serves 0 for every
// series until then: lockstep_steps_total says whether a step came), the step alone when the
// program does not say its total (lockstep_total_steps stays 0: a Python program without
// total_steps), "step/total" when it does; never "0/0".
//   Everything read from a pod is the job's own word: parsed strictly and bounded, and it only
// ever changes that job's status.progress.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "reconcile/time.hpp"

namespace lockstep::reconcile {

// The largest step or total accepted from a pod: exact in a double and in JSON, and far
// beyond any real run. A larger figure is not believed.
inline constexpr long long kMaxSteps = 1'000'000'000'000'000LL;  // 1e15

// One reading of rank 0's series from an agent's Prometheus text exposition.
struct ProgressSample {
  Time at;
  long long step = -1;         // lockstep_step
  long long total_steps = -1;  // lockstep_total_steps; -1 if the program does not say
  double tokens = -1;          // lockstep_tokens_total; -1 if absent
};

// nullopt when rank `rank` has reported no step yet (lockstep_steps_total is 0, or there is
// no lockstep_step series), or when its step is not a whole number in [0, kMaxSteps]. A total
// of 0 (the agent's value until a report says one) or one not in [1, kMaxSteps] is unknown.
std::optional<ProgressSample> parse_progress(const std::string& metrics_text, int rank, Time at);

struct Progress {
  long long step = 0, total_steps = -1;
  std::optional<double> tokens_per_second;
  std::optional<long long> eta_seconds;
  bool operator==(const Progress& o) const {
    return step == o.step && total_steps == o.total_steps && tokens_per_second == o.tokens_per_second &&
           eta_seconds == o.eta_seconds;
  }
};

// From the newest reading, and the one before it when there is one (for the rates). The
// result is in the status's own resolution (whole tokens/s, the ETA as format_duration shows
// it), so it reads back from the status equal and an unchanged reading writes nothing.
Progress progress_between(const std::optional<ProgressSample>& before, const ProgressSample& now, int world_size);

// "45s", "3m20s", "2h05m", "3d04h".
std::string format_duration(long long seconds);
// The seconds format_duration's text stands for; nullopt if it is not one.
std::optional<long long> parse_duration(const std::string& text);

}  // namespace lockstep::reconcile
