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
//   When (Note [Progress schedule]): soon after a job starts running, then every
// --progress-period. After the job (Note [Final progress]): rank 0's agent leaves its last
// step in its container's termination message, which the kubelet puts into the pod's status.
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
  bool operator==(const Progress&) const = default;
};

// From the newest reading, and the one before it when there is one (for the rates). The
// result is in the status's own resolution (whole tokens/s, the ETA as format_duration shows
// it), so it reads back from the status equal and an unchanged reading writes nothing.
Progress progress_between(const std::optional<ProgressSample>& before, const ProgressSample& now, int world_size);

// Note [Progress schedule]
// The period (--progress-period, 30 s) bounds the steady cost: one reading, and at most one
// status write, per running job per period. But a job first read a period after it started
// left a short job's columns empty all its life (#25). So each gang attempt starts on a fast
// schedule: its first reading `first` (2 s) after the operator sees it running, then intervals
// growing by half each time (3, 4.5, 6.75, 10.1, 15.2, 22.8 s, then the period) while a
// reading finds no step. The first reading with a step brings the next one `first` later, for
// a rate (Tok/s, ETA); from the first reading with a rate on, the period. So a first step that
// comes T s after the job runs shows within about T/2 + 2 s (never more than a period), and a
// rate a few seconds later.
//   Cost: the growing intervals reach the period after 7 readings (64 s), so a program that
// never reports a step is read 7 times in its first minute instead of 2; a job that reports
// steps gets 2 to 4 readings in its first seconds and then the period (a few more when its
// steps take longer than 2 s): over an hour, 120 to 130 readings instead of 120
// (progress_test checks both).
class ReadingSchedule {
 public:
  using ms = std::chrono::milliseconds;
  // `first` is capped at `period` (a period under 2 s is read at the period).
  ReadingSchedule(ms first, ms period);
  enum class Found { Nothing, Step, Rate };  // no step (or no answer), a step, a step and a rate
  // The interval until the next reading, after one that found `found`.
  ms after(Found found);
  ms interval() const { return interval_; }  // until the next reading

 private:
  ms first_, period_, interval_;
  bool stepped_ = false;  // a reading of this attempt has found a step
};
inline constexpr std::chrono::milliseconds kFirstReading{2000};

// Note [Final progress]
// A finished job must keep showing how far it got, but its pods' agents have exited and their
// /metrics with them. So when its workers have all exited 0, node 0's agent writes one line of
// rank 0's progress as its container's termination message (/dev/termination-log, or
// LOCKSTEP_TERMINATION_LOG):
//   lockstep-progress step=N[ total=M]
// (total when the program said one; agent/termination_message.cpp). The kubelet copies it into the
// pod's status (containerStatuses[].state.terminated.message), which the pod informer already
// reads. When the job Succeeds, decide() takes rank 0's line (the current attempt's pod of
// index 0 that the job controls, nobody else's) over the last reading: the run's last step, and
// its total. The message is the pod's, so it is untrusted: the whole message must be that one
// line (a trailing newline allowed), at most kMaxSummaryBytes, the prefix exactly as above,
// then only the keys step, total, restarts, reason, rank and exit, each once: step, total,
// rank and exit as plain decimal integers (no sign, no exponent, at most 16 digits, rank and
// exit at most 9) with step <= kMaxSteps and 1 <= total <= kMaxSteps, restarts at most
// kMaxInPlaceReading, reason a CamelCase word of at most kMaxReasonBytes; step or restarts
// must be there, total needs step, and the cause needs restarts. Anything else is not a
// summary and changes nothing.
//   restarts closes the gap Note [In-place restarts] leaves at a job's end: restarts made
// after the operator's last reading of rank 0's /metrics are counted from this line when the
// job Succeeds (decide.cpp; a failed job's message is its last words, not this line).
//   Where no line comes (rank 0's container has another terminationMessagePath, its agent
// failed or is older, the workers failed: a failure's message is its last words, Note
// [Termination message]), the status keeps the last reading, and a job whose every pod
// Succeeded shows its total as the step when the total is known. A rank 0 pod deleted before
// the job finished is a vanished pod of a running gang: a gang restart, not success, so a
// Succeeded job always had its rank 0 pod to read.
inline constexpr size_t kMaxSummaryBytes = 256;
inline constexpr const char* kSummaryPrefix = "lockstep-progress";

struct FinalSummary {
  long long step = -1;         // -1: not given (a run that restarted in place but reported no step)
  long long total_steps = -1;  // -1: not given
  // The attempt's in-place restarts as rank 0's agent counted them (-1: not given), and the
  // last one's cause: what in_place.hpp's InPlaceReading holds, checked the same way.
  int in_place_restarts = -1;
  std::string reason, rank, exit_code;
  bool operator==(const FinalSummary&) const = default;
};

// The summary line of a termination message, or nullopt (not one, or malformed: see above).
std::optional<FinalSummary> parse_final_summary(const std::string& termination_message);

// The progress a job that Succeeded shows: `last` (the newest reading, else the status's), with
// rank 0's summary when there is one (its step and total; tokens/s kept), else the total as the
// step when it is known. The ETA is 0 when the total is known.
std::optional<Progress> final_progress(std::optional<Progress> last, const std::optional<FinalSummary>& summary);

// "45s", "3m20s", "2h05m", "3d04h".
std::string format_duration(long long seconds);
// The seconds format_duration's text stands for; nullopt if it is not one.
std::optional<long long> parse_duration(const std::string& text);

}  // namespace lockstep::reconcile
