// Training progress for `kubectl get tj` (#13): the step reached out of the total, tokens/s
// and an ETA, in status.progress.
//
// Note [Progress]
// The training pods get no extra privilege: they never write to the API server. The operator
// reads what rank 0's agent already serves on its /metrics port (lockstep_step,
// lockstep_total_steps, lockstep_tokens_total of rank 0), at most once per
// --progress-period per job (30 s by default), so the status writes it causes stay one per
// period per running job. Ranks of a synchronous gang take the same steps, so the gang's
// tokens/s is rank 0's rate times the world size; the ETA is the steps left at the step
// rate between two readings.
#pragma once

#include <optional>
#include <string>

#include "reconcile/time.hpp"

namespace lockstep::reconcile {

// One reading of rank 0's series from an agent's Prometheus text exposition.
struct ProgressSample {
  Time at;
  long long step = -1;         // lockstep_step
  long long total_steps = -1;  // lockstep_total_steps; -1 if the program does not say
  double tokens = -1;          // lockstep_tokens_total
};

// nullopt when the text has no lockstep_step series for `rank`.
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
