// Straggler detection (#42, Note [Straggler score] in common/include/lockstep/straggler.hpp):
//   1. detection time against the slowdown factor (1.1x, 1.25x, 1.5x, 2x), one round per onset,
//      on a recorded run's real step series (tests/common/data/straggler_healthy_2ranks.csv)
//      tiled to 10 minutes, as node 0's agent judges it (an evaluation every 5 s); each round
//      beside the bound 4 * window * f / (1 + 4 * f) + hold + interval (at the default 20th
//      percentile); and again for 1.1x and 1.25x at a lower threshold (1.15);
//   1b. the same for 1.5x, 2x and 2.5x on a recorded gang of 500m pods on a loaded machine;
//   2. false verdicts over long healthy runs: 8 hours of that series, each rank's figures drawn
//      again from the recording (so the ranks are independent), with a checkpoint on rank 0 every
//      300 steps, an hour of a loaded machine (both ranks 1.5x, each step's figure jittered by up
//      to 2x) and one-step spikes of 20x; three seeds; at both thresholds;
//   2b. false verdicts on recorded healthy runs under CPU quotas (50% and 25% of a CPU a rank,
//      50% on a loaded machine), against the verdicts of medians alone;
//   3. the cost: per step on an agent (a report's work into its rank's window) against parsing
//      the step report itself, the baseline it rides on; per evaluation on node 0 at 4,096 nodes
//      of 8 ranks, against the 5 s it has; the bytes a member sends;
//   4. the operator's cost per reading: the verdict parsed from rank 0's page against the
//      progress it parses from the same page already.
// Every round is printed; nothing is asserted (a benchmark, not a timed test).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "lockstep/straggler.hpp"
#include "reconcile/progress.hpp"
#include "reconcile/stragglers.hpp"
#include "step_report.hpp"
#include "straggler_series.hpp"

namespace {

using namespace lockstep;
using Clock = std::chrono::steady_clock;
constexpr double kInterval = 5;  // node 0's evaluation interval (kFiguresInterval in the agent)

void detection(const std::vector<test::RecordedStep>& recorded, const straggler::Settings& settings,
               std::vector<double> factors, const char* title = "1. detection time") {
  const auto run = test::tiled(recorded, 600);
  std::printf("%s (window %.0f s, hold %.0f s, threshold %.2f, an evaluation every %.0f s)\n", title,
              settings.window_s, settings.hold_s, settings.threshold, kInterval);
  for (double f : factors) {
    // The slow steps fill (1 - lower_quantile) of the window (Note [Straggler score], "Time to
    // a verdict"), then the hold, then up to one interval.
    const double k = (1 - settings.lower_quantile) / settings.lower_quantile;
    const double bound = k * settings.window_s * f / (1 + k * f) + settings.hold_s + kInterval;
    std::vector<double> found;
    for (int round = 0; round < 5 && !bench::g_stop; ++round) {
      const double t0 = 60 + round * 7.3;
      auto changes = straggler::replay(
          test::samples_of(run, [&](int rank, double at) { return rank == 1 && at >= t0 ? f : 1.0; }), settings,
          kInterval);
      const straggler::Detector::Change* first = nullptr;
      for (const auto& c : changes)
        if (c.raised) { first = &c; break; }
      if (first && first->who.rank == 1) {
        found.push_back(first->at_s - t0);
        std::printf("   %.2fx round %d: onset %.1f s, rank 1 named after %5.1f s (%.2fx of the bound %.1f s), at %.2fx\n", f,
                    round + 1, t0, first->at_s - t0, (first->at_s - t0) / bound, bound, first->who.slowdown);
      } else if (first) {
        std::printf("   %.2fx round %d: onset %.1f s, WRONG rank %d named after %.1f s\n", f, round + 1, t0,
                    first->who.rank, first->at_s - t0);
      } else {
        std::printf("   %.2fx round %d: onset %.1f s, not named in the %.0f s after it (under the threshold)\n", f,
                    round + 1, t0, run.back().at_s - t0);
      }
    }
    if (!found.empty())
      std::printf("   %.2fx: median %.1f s, worst %.1f s over %zu round(s)\n", f, bench::percentile(found, 0.5),
                  bench::percentile(found, 1.0), found.size());
  }
}

// A healthy run of `seconds`: each rank's work drawn from the recording's, a checkpoint on rank
// 0 every 300 steps (10 s of work; rank 1 waits), `loaded_from..loaded_to` a loaded machine.
std::vector<straggler::Sample> healthy_run(const std::vector<test::RecordedStep>& recorded, double seconds,
                                           unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> work;
  for (const auto& s : recorded)
    if (s.step_s > s.exposed_s) work.push_back(s.step_s - s.exposed_s);
  std::uniform_int_distribution<size_t> pick(0, work.size() - 1);
  std::uniform_real_distribution<double> jitter(0.5, 2.0), spike(0, 1);
  const double loaded_from = seconds * 0.4, loaded_to = loaded_from + 3600;
  std::vector<straggler::Sample> out;
  double t = 0;
  for (long long step = 1; t < seconds; ++step) {
    const bool loaded = t >= loaded_from && t < loaded_to;
    double w[2];
    for (int r = 0; r < 2; ++r) {
      w[r] = work[pick(rng)] * (loaded ? 1.5 * jitter(rng) : 1.0);
      if (spike(rng) < 0.001) w[r] *= 20;  // a page-in, a GC pause
    }
    if (step % 300 == 0) w[0] += 10;  // rank 0 writes the checkpoint
    const double step_s = std::max(w[0], w[1]) + 0.004;
    t += step_s;
    for (int r = 0; r < 2; ++r) out.push_back({r, r, t, w[r]});
  }
  return out;
}

void false_verdicts(const std::vector<test::RecordedStep>& recorded, const straggler::Settings& settings) {
  const double hours = 8;
  std::printf("2. false verdicts over %.0f h healthy runs (checkpoints, spikes, an hour loaded), threshold %.2f\n",
              hours, settings.threshold);
  for (unsigned seed = 1; seed <= 3 && !bench::g_stop; ++seed) {
    const auto run = healthy_run(recorded, hours * 3600, seed);
    const auto t = Clock::now();
    const auto changes = straggler::replay(run, settings, kInterval);
    const double took = std::chrono::duration<double>(Clock::now() - t).count();
    size_t raised = 0;
    for (const auto& c : changes) raised += c.raised;
    std::printf("   seed %u: %zu steps, %zu false verdict(s) (replayed in %.2f s)\n", seed, run.size() / 2, raised, took);
  }
}

// Recorded healthy runs under CPU quotas (tests/common/data/straggler_quota*_2ranks.csv),
// replayed end to end three times over (each round one more copy, so the seams differ): the
// verdicts of the judge against those of medians alone (lower_quantile 0.5, the baseline: the
// judge before Note [Straggler score]'s "The overlap").
void quota_runs(const std::string& dir) {
  std::printf("2b. false verdicts on recorded healthy runs under CPU quotas: the judge against medians alone\n");
  for (const char* name : {"straggler_quota_2ranks.csv", "straggler_quota250_2ranks.csv", "straggler_quota500_loaded_2ranks.csv"}) {
    const auto one = test::load_recorded_steps(dir + "/" + name);
    const double span = one.back().at_s - one.front().at_s;
    for (int copies = 1; copies <= 3 && !bench::g_stop; ++copies) {
      const auto run = test::samples_of(test::tiled(one, span * copies), [](int, double) { return 1.0; });
      straggler::Settings medians_only;
      medians_only.lower_quantile = 0.5;
      size_t judge = 0, baseline = 0;
      for (const auto& c : straggler::replay(run, straggler::Settings{}, kInterval)) judge += c.raised;
      for (const auto& c : straggler::replay(run, medians_only, kInterval)) baseline += c.raised;
      std::printf("   %s round %d: %.0f s, %zu false verdict(s); medians alone %zu\n", name, copies,
                  run.back().at_s - run.front().at_s, judge, baseline);
    }
  }
}

template <class F>
double seconds_per_call(F&& f, int calls) {
  const auto t = Clock::now();
  for (int i = 0; i < calls; ++i) f(i);
  return std::chrono::duration<double>(Clock::now() - t).count() / calls;
}

void cost() {
  std::printf("3. cost\n");
  const std::string line =
      "step=120 step_s=0.412 compute_s=0.301 comm_s=0.150 exposed_comm_s=0.041 tokens=65536 flops=4.1e13 "
      "loss=2.93 mem_bytes=812345344 comm_s.allreduce=0.150 exposed_comm_s.allreduce=0.041";
  straggler::Settings settings;
  for (int round = 1; round <= 3 && !bench::g_stop; ++round) {
    volatile double sink = 0;
    const double parse = seconds_per_call([&](int) { sink = sink + agent::parse_step_report(line)->step; }, 200000);
    straggler::RankWindow window;
    const auto report = *agent::parse_step_report(line);
    // A step every 10 ms into a 30 s window, and its figure (median and 20th percentile) every
    // 5 s (500 steps).
    const double add = seconds_per_call(
        [&](int i) {
          window.add(i * 0.01, *straggler::work_seconds(report.step_s, report.compute_s, report.exposed_comm_s));
          if (i % 500 == 0)
            if (auto f = window.figure(i * 0.01, settings)) sink = sink + f->median_s + f->lower_s;
        },
        200000);
    std::printf("   round %d, agent per step: parse %.0f ns (the baseline), window %.0f ns: %.2fx of the parse\n", round,
                parse * 1e9, add * 1e9, add / parse);
  }
  const int nodes = 4096, nproc = 8;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.3, 0.01);
  std::vector<straggler::RankFigure> figures;
  for (int r = 0; r < nodes * nproc; ++r) {
    const double median = noise(rng);
    figures.push_back({r, r / nproc, median, 0, median * 0.9});
  }
  figures[12345].median_s *= 1.6;
  figures[12345].lower_s *= 1.6;
  for (int round = 1; round <= 3 && !bench::g_stop; ++round) {
    straggler::Detector detector(settings);
    double now = 0;
    const double each = seconds_per_call([&](int) { detector.update(now += kInterval, straggler::score(figures)); }, 20);
    std::printf("   round %d, node 0 per evaluation of %d ranks: %.2f ms, %.4f%% of the %.0f s interval; %zu named\n",
                round, nodes * nproc, each * 1e3, each / kInterval * 100, kInterval, detector.stragglers().size());
  }
  char figure[64];
  std::string wire = "FIGURES gen=0";
  for (int i = 0; i < nproc; ++i) {
    std::snprintf(figure, sizeof figure, " w%d=%.6g l%d=%.6g", i, 0.301234, i, 0.271234);
    wire += figure;
  }
  std::printf("   wire: a member's FIGURES line for %d ranks is %zu bytes every %.0f s; node 0 takes %.1f KB/s from %d nodes\n",
              nproc, wire.size() + 1, kInterval, (wire.size() + 1) * (nodes - 1) / kInterval / 1024, nodes);
}

// A rank 0 agent's page as the operator reads it: 8 ranks' training series (a step histogram
// of 15 buckets and a dozen counters and gauges each) and node 0's straggler series.
std::string rank0_page() {
  std::string page;
  const std::string base = "namespace=\"ns\",trainingjob=\"tj\"";
  for (int r = 0; r < 8; ++r) {
    const std::string l = base + ",node_rank=\"0\",rank=\"" + std::to_string(r) + "\"";
    for (int b = 0; b < 15; ++b)
      page += "lockstep_step_duration_seconds_bucket{" + l + ",le=\"" + std::to_string(0.01 * (1 << b)) + "\"} " +
              std::to_string(100 * b) + "\n";
    for (const char* name : {"lockstep_steps_total", "lockstep_step", "lockstep_total_steps", "lockstep_tokens_total",
                             "lockstep_compute_seconds_total", "lockstep_comm_exposed_seconds_total", "lockstep_loss",
                             "lockstep_worker_up", "lockstep_last_step_timestamp_seconds", "lockstep_flops_total",
                             "lockstep_straggler_score", "lockstep_metrics_malformed_total"})
      page += std::string(name) + "{" + l + "} 1234.5\n";
  }
  page += "lockstep_straggler_slowdown{" + base + ",node_rank=\"3\",rank=\"29\",throttle=\"power\"} 1.42\n";
  page += "lockstep_stragglers{" + base + ",node_rank=\"0\"} 1\nlockstep_straggler_suspects{" + base +
          ",node_rank=\"0\"} 1\nlockstep_straggler_window_seconds{" + base + ",node_rank=\"0\"} 30\n";
  return page;
}

void operator_cost() {
  const std::string page = rank0_page();
  std::printf("4. the operator's cost per reading of rank 0's page (%zu bytes): the straggler verdict against the "
              "progress it already parses from the same page\n", page.size());
  for (int round = 1; round <= 3 && !bench::g_stop; ++round) {
    volatile long long sink = 0;
    const auto at = reconcile::Clock::now();
    const double progress =
        seconds_per_call([&](int) { sink = sink + reconcile::parse_progress(page, 0, at).value_or(reconcile::ProgressSample{}).step; }, 2000);
    const double verdict =
        seconds_per_call([&](int) { sink = sink + reconcile::parse_stragglers(page, 512, 8, 0).stragglers.size(); }, 2000);
    std::printf("   round %d: progress %.1f us (the baseline), straggler verdict %.1f us: %.2fx\n", round, progress * 1e6,
                verdict * 1e6, verdict / progress);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::catch_stop_signals();
  const std::string path = argc > 1 ? argv[1] : test::recorded_series_path();
  const auto recorded = test::load_recorded_steps(path);
  std::printf("lockstep-bench-straggler: %zu recorded step reports from %s\n", recorded.size(), path.c_str());
  const straggler::Settings defaults;
  detection(recorded, defaults, {1.1, 1.25, 1.5, 2.0});
  // The same on a recorded gang of 500m pods on a loaded machine, whose ranks' steps are two
  // humps (Note [Straggler score], "The overlap").
  if (!bench::g_stop)
    detection(test::load_recorded_steps(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/common/data/straggler_quota500_loaded_2ranks.csv"),
              defaults, {1.5, 2.0, 2.5}, "1b. detection time on 500m pods of a loaded machine");
  if (!bench::g_stop) false_verdicts(recorded, defaults);
  if (!bench::g_stop) quota_runs(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/common/data");
  // A lower threshold (--straggler-threshold 1.15) names a 1.25x rank too: what it costs.
  straggler::Settings lower;
  lower.threshold = 1.15;
  if (!bench::g_stop) detection(recorded, lower, {1.1, 1.25});
  if (!bench::g_stop) false_verdicts(recorded, lower);
  if (!bench::g_stop) cost();
  if (!bench::g_stop) operator_cost();
  return bench::g_stop ? 130 : 0;
}
