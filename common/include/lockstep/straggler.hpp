// Straggler detection (#42, docs/metrics.md "Stragglers"): which rank of a gang is slower than
// the others at the work it does outside exposed communication, judged over a sliding window.
// Pure: no I/O, no clock, no thread (the caller passes the time, in seconds on a monotonic
// clock). The agent feeds it (every agent its own ranks, node 0's the gang's verdict) and
// `lockstep run` reads what node 0's agent decided; tests and bench/straggler replay recorded
// series through it.
//
// Note [Straggler score]
// In synchronous training every rank waits for the slowest at each collective, so step time is
// the same on every rank and names nobody. What differs is where the time goes: the slow rank
// spends it working (compute, data loading, host work), the others waiting in the collectives,
// which shows as their exposed communication. So each rank's figure is its *work*: step time
// minus exposed communication (compute_s when a program sends no exposed figure; a rank that
// sends neither has no figure and is never judged).
//   * The window. Each rank's figure is the median of its work over the last `window_s`
//     (30 s), from at least `min_samples` (8) steps: a checkpoint, an evaluation pass or any
//     one slow step is one sample of many and moves a median not at all.
//   * Warm-up. A gang's first seconds are not its pace: one pod's neighbours are still
//     starting, caches are cold, memory is being touched for the first time. The cluster tier
//     saw healthy 500m pods differ by 1.4x-1.5x in their first 30 s, once the median had only
//     a few seconds of steps. So a rank's steps of the first window_s / 3 (10 s) after it starts
//     (its first step since its window was cleared: a start, an in-place restart) are left
//     out, and it has a figure only once window_s / 2 (15 s) of steps came after them: nobody
//     is judged in a rank's first 25 s, nor named before 40 s.
//   * The score. slowdown = a rank's median / the gang's reference, the reference being the
//     lower median of the ranks' medians (for 2 ranks the faster one; for 4 the second
//     fastest). NVRx's relative score is the fastest rank's median over each rank's, flagged
//     under 0.75; we flag at the same ratio (slowdown >= 1/0.75 = 1.33) but measure against the
//     lower median, not the fastest rank: one rank that is unusually fast (less data, a
//     cached shard) would otherwise make the whole gang look slow, and a gang slowed as a
//     whole (more than half its ranks) has no straggler, only a slow job. A rank must also be
//     at least `min_excess_s` (2 ms) slower in absolute terms: on micro-steps a timer's noise
//     is a large ratio of nothing.
//   * The overlap. A ratio of medians is not enough when a rank's steps are not alike. Under a
//     tight CPU limit every step waits for its cgroup's next quota period at some point of the
//     step, and which rank waits where changes from step to step: a recorded healthy run of
//     2 ranks at 25% of a CPU each (tests/common/data/straggler_quota250_2ranks.csv) has both
//     ranks' work spread over 15-100 ms, and its medians 2.4x apart one minute, the other way
//     round the next. The old judge named each rank in turn; so did the cluster tier's healthy
//     250m pods in CI. A straggler is slower than the gang at nearly every step, so a suspect's
//     `lower_quantile` (its 20th percentile) must also be above the reference: four in five of
//     its steps slower than the typical rank's typical step. Where the ranks' steps overlap as
//     widely as above, the slower median's lower fifth is down among the other rank's steps.
//     The test looks at the suspect's lower tail, not the typical rank's upper one: a gang of
//     500m pods on a loaded machine (tests/common/data/straggler_quota500_loaded_2ranks.csv)
//     has each rank's 90th percentile at 2.2-2.7x its median, so an earlier form (a suspect's
//     median above the typical rank's 90th percentile) missed a rank slowed 2x for minutes,
//     as CI's cluster tier saw (named after 99 s). bench/straggler sections 1b and 2b have the
//     figures.
//   * The verdict. A rank over the threshold (as a ratio, in absolute terms and past the
//     overlap) is a suspect; a suspect held for `hold_s` (15 s) at every evaluation is a
//     straggler, and a straggler that is no suspect for `hold_s` is cleared (hysteresis: a
//     rank hovering at the threshold neither flaps nor is lost). A rank
//     whose figure goes away (no steps in the window: stalled, restarted) is no longer judged:
//     its verdict and suspicion end with it, and stall detection is what notices a rank that
//     stopped.
//   * Time to a verdict. A rank slowed by a factor f at time t0 passes the overlap once its
//     slow steps fill four fifths of the window; it steps f times slower from then on, so that
//     takes about 4 * window * f / (1 + 4 * f) (26 s at 1.5x with the default 30 s), then
//     `hold_s`, then up to one evaluation interval (5 s): bench/straggler measured a median of
//     40 s at 1.5x and at 2x on a recorded run whose steps are alike (38 s and 35 s with the
//     earlier form); 1.25x is under the default threshold (named in 41 s at
//     --straggler-threshold 1.15, with no false verdict in 8 h of healthy runs at either). On
//     the recording of 500m pods, whose steps are two humps, 2x in a median of 40 s (worst
//     68 s), 1.5x in 98 s: the fast hump of a slowed rank stays under the reference longer.
//   * What it cannot tell apart: a slow node from a slow data shard or uneven work (a rank
//     whose batches are longer, a pipeline stage that does more): the figure is time, not its
//     cause. A job whose ranks do different work by design should say `runPolicy.stragglers.policy: Ignore`.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::straggler {

struct Settings {
  double window_s = 30;        // each rank's figure: the median of its work over this long
  size_t min_samples = 8;      // fewer steps than this in the window: no figure yet
  double threshold = 4.0 / 3;  // slowdown at or above this: a suspect (NVRx's 0.75 as a score)
  double min_excess_s = 0.002; // and at least this much slower than the reference, in seconds
  double hold_s = 15;          // suspect this long: a straggler; under the threshold this long: cleared
  double lower_quantile = 0.2; // a suspect's this quantile must be above the reference (the overlap)
  size_t max_samples = 2048;   // per rank, the oldest dropped beyond it (memory bound)
};

// The figure a step report gives: step_s - exposed_comm_s when both are there, else compute_s;
// nullopt when neither, or when the result is not finite and positive.
std::optional<double> work_seconds(std::optional<double> step_s, std::optional<double> compute_s,
                                   std::optional<double> exposed_comm_s);

// One rank's recent work figures, by arrival time.
class RankWindow {
 public:
  // Samples beyond max_samples drop the oldest (a memory bound at any step rate).
  void add(double at_s, double work_s, size_t max_samples = Settings{}.max_samples);
  void clear() {
    samples_.clear();
    first_at_s_.reset();
  }
  // The median and the settings.lower_quantile of the samples of the last settings.window_s
  // before `now_s` (older ones are dropped), or nullopt with fewer than settings.min_samples,
  // or before the rank is warm: the samples of the first window_s / 3 after its first (since a
  // clear) are left out, and a figure needs window_s / 2 of samples after them (Note [Straggler
  // score]).
  struct Figure {
    double median_s = 0, lower_s = 0;
  };
  std::optional<Figure> figure(double now_s, const Settings& settings);
  size_t size() const { return samples_.size(); }

 private:
  struct Sample {
    double at_s, work_s;
  };
  std::deque<Sample> samples_;
  std::optional<double> first_at_s_;  // the first sample since the last clear
};

// A rank's figure as the gang's judge sees it.
struct RankFigure {
  int rank = -1, node_rank = -1;
  double median_s = 0;     // RankWindow::figure
  unsigned throttle = 0;   // the rank's GPU's clock-throttle reasons (Throttle bits), 0: none or unknown
  double lower_s = 0;      // RankWindow::figure's lower quantile (0, or over median_s: median_s)
};

struct Score {
  int rank = -1, node_rank = -1;
  double slowdown = 1;  // median_s / reference_s
  unsigned throttle = 0;
  double lower_s = 0;   // the rank's lower quantile (RankFigure::lower_s)
};

struct Reading {
  double reference_s = 0;     // the lower median of the ranks' medians
  std::vector<Score> scores;  // one per figure, in the figures' order
};

// A rank's lower quantile as the judge takes it: its median when none was given (0) or when the
// figure is over the median (RankFigure::lower_s; the FIGURES a member sends, figures_message).
inline double lower_or_median(double lower_s, double median_s) {
  return lower_s > 0 && lower_s < median_s ? lower_s : median_s;
}

// The gang's reading, or nullopt with fewer than 2 figures (a rank alone is nobody's straggler).
std::optional<Reading> score(const std::vector<RankFigure>& figures);

// True when `s` is over the threshold both as a ratio and in absolute terms, and its lower
// quantile is above the reference (Note [Straggler score], "The overlap").
bool suspect(const Score& s, const Reading& reading, const Settings& settings);

struct Straggler {
  int rank = -1, node_rank = -1;
  double slowdown = 1;  // at the latest evaluation
  unsigned throttle = 0;
  double since_s = 0;   // when it became a straggler (the verdict), caller's clock
  bool operator==(const Straggler& o) const { return rank == o.rank && node_rank == o.node_rank; }
};

// The verdicts over time (hold and hysteresis, Note [Straggler score]).
class Detector {
 public:
  explicit Detector(Settings settings = {}) : settings_(settings) {}
  struct Change {
    Straggler who;
    bool raised;     // true: a new verdict; false: cleared
    double at_s = 0; // the evaluation that made it
  };
  // One evaluation at `now_s` of `reading` (nullopt: no reading, every rank unjudged). Returns
  // what changed; stragglers() is the standing verdicts after it, the worst first.
  std::vector<Change> update(double now_s, const std::optional<Reading>& reading);
  const std::vector<Straggler>& stragglers() const { return standing_; }
  size_t suspects() const;  // ranks over the threshold now, verdict or not
  void reset();             // a restart: nobody is judged, nothing stands
  const Settings& settings() const { return settings_; }

 private:
  struct Track {
    int rank = -1, node_rank = -1;
    double over_since = -1;   // over the threshold since, -1: not over
    double under_since = -1;  // a straggler under the threshold since, -1: not under
    bool straggler = false;
    double since = 0, slowdown = 1;
    unsigned throttle = 0;
  };
  Settings settings_;
  std::vector<Track> tracks_;  // by rank, sorted
  std::vector<Straggler> standing_;
};

// A recorded step's figure, for replaying a run's series through the judge as the agents
// would have judged it (tests, bench/straggler).
struct Sample {
  int rank = -1, node_rank = -1;
  double at_s = 0;    // arrival
  double work_s = 0;  // work_seconds
};
// Feeds `samples` (sorted by at_s) into a window per rank and evaluates every `interval_s` from
// the first sample's time, as node 0's agent does (kFiguresInterval), until the last sample.
std::vector<Detector::Change> replay(const std::vector<Sample>& samples, const Settings& settings,
                                     double interval_s);

// NVML's clock-throttle ("clock event") reasons that explain a slow GPU, as bits of
// RankFigure::throttle (the agent maps NVML's own bits onto these).
enum Throttle : unsigned {
  kThrottlePower = 1,        // software power cap
  kThrottleThermal = 2,      // software thermal slowdown
  kThrottleHwSlowdown = 4,   // hardware slowdown (power brake or thermal, by the board)
  kThrottleHwThermal = 8,    // hardware thermal slowdown
  kThrottleHwPowerBrake = 16,// hardware power brake (an external signal)
  kThrottleAll = 31,
};
// "power cap, thermal" for the bits set, in a fixed order; "" for none. The comma-separated
// token form ("power,thermal") is throttle_tokens.
std::string throttle_words(unsigned bits);
std::string throttle_tokens(unsigned bits);
// The bits of a token list as throttle_tokens writes it; nullopt for any unknown token.
std::optional<unsigned> parse_throttle_tokens(const std::string& tokens);

// "work 1.42x the gang's typical rank over the last 30 s[; GPU clocks throttled: power cap]":
// what every verdict says after naming its rank (the agent's log line, the operator's
// condition, lockstep run's lines and report), each naming the rank its own way.
std::string verdict_words(double slowdown, double window_s, unsigned throttle);
// "rank 5 on node 2: " and its verdict_words (the agent's log line).
std::string describe(const Straggler& s, const Settings& settings);

}  // namespace lockstep::straggler
