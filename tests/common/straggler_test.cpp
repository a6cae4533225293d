// The straggler judge (common/include/lockstep/straggler.hpp, Note [Straggler score]): the work
// figure, the window, the score and the verdict's hold, first on small made-up figures, then on
// a recorded run's real step series (tests/common/data/straggler_healthy_2ranks.csv) with a
// checkpoint pause, a warm-up, one slow step and a lasting slowdown injected.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "lockstep/straggler.hpp"
#include "straggler_series.hpp"

namespace {

using lockstep::straggler::Detector;
using lockstep::straggler::RankFigure;
using lockstep::straggler::RankWindow;
using lockstep::straggler::Reading;
using lockstep::straggler::Settings;
namespace straggler = lockstep::straggler;
using lockstep::test::load_recorded_steps;
using lockstep::test::recorded_series_path;
using lockstep::test::RecordedStep;
using lockstep::test::samples_of;

constexpr double kInterval = 5;  // node 0's evaluation interval (kFiguresInterval)

std::vector<Detector::Change> replay_recorded(const std::vector<RecordedStep>& steps,
                                              std::function<double(int, double)> factor,
                                              const Settings& settings = {}) {
  return straggler::replay(samples_of(steps, factor), settings, kInterval);
}

// A recording of tests/common/data/.
std::vector<RecordedStep> recorded_data(const std::string& name) {
  return load_recorded_steps(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/common/data/" + name);
}

// The judge before its overlap test: medians alone (a lower quantile at the median).
Settings medians_only() {
  Settings s;
  s.lower_quantile = 0.5;
  return s;
}

std::string said(const std::vector<Detector::Change>& changes) {
  std::string out;
  for (const auto& c : changes)
    out += (c.raised ? "raised rank " : "cleared rank ") + std::to_string(c.who.rank) + " at " +
           std::to_string(c.at_s) + " s (" + std::to_string(c.who.slowdown) + "x)\n";
  return out.empty() ? "nothing" : out;
}

TEST(StragglerWork, IsStepTimeLessExposedCommunicationElseCompute) {
  EXPECT_DOUBLE_EQ(*straggler::work_seconds(0.5, 0.1, 0.2), 0.3);  // exposed wins over compute
  EXPECT_DOUBLE_EQ(*straggler::work_seconds(0.5, 0.1, std::nullopt), 0.1);
  EXPECT_DOUBLE_EQ(*straggler::work_seconds(std::nullopt, 0.25, 0.2), 0.25);
  EXPECT_FALSE(straggler::work_seconds(0.5, std::nullopt, std::nullopt));  // step time alone names nobody
  EXPECT_FALSE(straggler::work_seconds(0.2, 0.1, 0.3));                    // negative: not believed
  EXPECT_FALSE(straggler::work_seconds(std::numeric_limits<double>::infinity(), std::nullopt, 0.1));
}

TEST(StragglerWindow, IsTheMedianOfTheLastWindowOnceWarmFromEnoughSteps) {
  Settings s;
  s.window_s = 12;  // a warm-up of 4 s, then 6 s of steps before a figure
  s.min_samples = 4;
  RankWindow w;
  for (int i = 0; i < 4; ++i) w.add(i, 5.0);  // the warm-up's steps: slow, and left out
  for (int i = 4; i < 10; ++i) w.add(i, i == 6 ? 100.0 : 1.0);  // one slow step
  EXPECT_FALSE(w.figure(9, s)) << "9 s in: only 5 s after the warm-up";
  EXPECT_DOUBLE_EQ(w.figure(10, s)->median_s, 1.0) << "the warm-up's 5.0s and the one 100.0 move nothing";
  for (int i = 10; i < 20; ++i) w.add(i, 2.0);
  // At 20 the window [8, 20] holds 8 and 9 (1.0) and 10..19 (2.0): median 2.0.
  EXPECT_DOUBLE_EQ(w.figure(20, s)->median_s, 2.0);
  EXPECT_EQ(w.size(), 12u) << "older samples are dropped";
  EXPECT_FALSE(w.figure(40, s)) << "nothing in the last 12 s";
  w.clear();
  w.add(50, 1.0);
  EXPECT_FALSE(w.figure(52, s)) << "a clear (a restart) starts a new warm-up";
}

TEST(StragglerWindow, KeepsAtMostMaxSamples) {
  RankWindow w;
  for (int i = 0; i < 100; ++i) w.add(i * 0.001, 1.0 + i, 16);
  EXPECT_EQ(w.size(), 16u);
  Settings s;
  s.window_s = 0.03;
  s.min_samples = 1;
  EXPECT_DOUBLE_EQ(w.figure(0.1, s)->median_s, 1.0 + 91.5) << "the newest 16: 85..100, median of 85+i";
}

TEST(StragglerWindow, ItsLowerFigureIsTheTwentiethPercentile) {
  Settings s;
  s.window_s = 300;
  s.min_samples = 8;
  RankWindow w;
  w.add(0, 99.0);  // the first step: its warm-up (100 s) is left out
  for (int i = 0; i < 20; ++i) w.add(100 + i, 20.0 - i);  // 20, 19, ..., 1
  auto f = w.figure(251, s);
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->median_s, 10.5);
  EXPECT_DOUBLE_EQ(f->lower_s, 4.0) << "4 of the 20 are at most 4";
  RankWindow alike;
  alike.add(0, 99.0);
  for (int i = 0; i < 9; ++i) alike.add(100 + i, 3.0);
  EXPECT_DOUBLE_EQ(alike.figure(251, s)->lower_s, 3.0);
  RankWindow nine;  // of 9, the 2nd smallest (ceil(0.2 x 9) = 2)
  nine.add(0, 99.0);
  for (int i = 0; i < 9; ++i) nine.add(100 + i, 9.0 - i);
  EXPECT_DOUBLE_EQ(nine.figure(251, s)->lower_s, 2.0);
  s.lower_quantile = 0.5;
  EXPECT_DOUBLE_EQ(w.figure(251, s)->lower_s, 10.5) << "at the median: the median";
  s.lower_quantile = 0;
  EXPECT_DOUBLE_EQ(w.figure(251, s)->lower_s, 1.0) << "at 0: the fastest";
}

TEST(StragglerScore, IsAgainstTheLowerMedianOfTheRanks) {
  EXPECT_FALSE(straggler::score({{0, 0, 1.0}})) << "a rank alone is nobody's straggler";
  auto two = straggler::score({{0, 0, 1.0}, {1, 1, 1.5}});
  ASSERT_TRUE(two);
  EXPECT_DOUBLE_EQ(two->reference_s, 1.0) << "of two, the faster";
  EXPECT_DOUBLE_EQ(two->scores[1].slowdown, 1.5);
  // One rank unusually fast does not make the others slow (the fastest would: NVRx's choice).
  auto fast_one = straggler::score({{0, 0, 0.5}, {1, 0, 1.0}, {2, 1, 1.02}, {3, 1, 0.98}});
  ASSERT_TRUE(fast_one);
  EXPECT_DOUBLE_EQ(fast_one->reference_s, 0.98);
  for (const auto& s : fast_one->scores) EXPECT_FALSE(straggler::suspect(s, *fast_one, Settings{}));
  // Half the gang slow: the slow half is named. Most of it slow: a slow job, nobody named.
  auto half = straggler::score({{0, 0, 1.0}, {1, 0, 1.0}, {2, 1, 2.0}, {3, 1, 2.0}});
  EXPECT_TRUE(straggler::suspect(half->scores[2], *half, Settings{}));
  auto most = straggler::score({{0, 0, 1.0}, {1, 0, 2.0}, {2, 1, 2.0}, {3, 1, 2.0}});
  for (const auto& s : most->scores) EXPECT_FALSE(straggler::suspect(s, *most, Settings{}));
  EXPECT_FALSE(straggler::score({{0, 0, std::nan("")}, {1, 1, 1.0}})) << "a figure that is not one is left out";
}

TEST(StragglerScore, ASuspectIsOverTheRatioAndTheAbsoluteExcess) {
  Settings s;
  const Reading tenth{0.1, {}}, ms{0.001, {}};  // steps all alike: the lower figure is the median
  EXPECT_TRUE(straggler::suspect({1, 1, 1.34, 0, 0.134}, tenth, s));
  EXPECT_FALSE(straggler::suspect({1, 1, 1.30, 0, 0.130}, tenth, s)) << "under 4/3";
  EXPECT_FALSE(straggler::suspect({1, 1, 2.0, 0, 0.002}, ms, s)) << "1 ms more on a 1 ms step: timer noise";
}

TEST(StragglerScore, ASuspectHasFourInFiveOfItsStepsSlowerThanTheTypicalRanksTypicalStep) {
  // Two ranks 2x apart at the median. Rank 1's fastest fifth (its 20th percentile, 1.5) is still
  // slower than rank 0's median: a suspect. Rank 1's steps spread down to 0.8 at its 20th
  // percentile (a quota's periods, Note [Straggler score], "The overlap"): a fifth of its steps
  // are as fast as rank 0's typical one, and nobody is. Rank 0's own spread plays no part.
  RankFigure fast{0, 0, 1.0, 0, 0.9}, slow{1, 1, 2.0, 0, 1.5};
  auto apart = straggler::score({fast, slow});
  ASSERT_TRUE(apart);
  EXPECT_DOUBLE_EQ(apart->scores[1].lower_s, 1.5);
  EXPECT_TRUE(straggler::suspect(apart->scores[1], *apart, Settings{}));
  fast.lower_s = 0.1;
  EXPECT_TRUE(straggler::suspect(straggler::score({fast, slow})->scores[1], *straggler::score({fast, slow}), Settings{}))
      << "the typical rank's own spread changes nothing";
  slow.lower_s = 0.8;
  auto overlapping = straggler::score({fast, slow});
  ASSERT_TRUE(overlapping);
  EXPECT_DOUBLE_EQ(overlapping->scores[1].slowdown, 2.0) << "the score stays the ratio of medians";
  EXPECT_FALSE(straggler::suspect(overlapping->scores[1], *overlapping, Settings{}));
  slow.lower_s = 1.0;
  EXPECT_FALSE(straggler::suspect(straggler::score({fast, slow})->scores[1], *straggler::score({fast, slow}), Settings{}))
      << "at the reference is not above it";
  // A lower figure over its median (or none: 0) counts as the median.
  auto none = straggler::score({{0, 0, 1.0}, {1, 1, 2.0}});
  EXPECT_DOUBLE_EQ(none->scores[1].lower_s, 2.0);
  EXPECT_TRUE(straggler::suspect(none->scores[1], *none, Settings{}));
  auto over = straggler::score({{0, 0, 1.0}, {1, 1, 2.0, 0, 3.0}});
  EXPECT_DOUBLE_EQ(over->scores[1].lower_s, 2.0);
}

TEST(StragglerDetector, RaisesAfterTheHoldAndClearsAfterItUnder) {
  Settings s;
  s.hold_s = 10;
  Detector d(s);
  auto reading = [](double slow) { return straggler::score({{0, 0, 1.0}, {1, 1, slow}}); };
  EXPECT_TRUE(d.update(0, reading(1.5)).empty());
  EXPECT_EQ(d.suspects(), 1u);
  EXPECT_TRUE(d.update(5, reading(1.5)).empty());
  EXPECT_TRUE(d.update(7, reading(1.1)).empty()) << "a dip resets the hold";
  EXPECT_TRUE(d.update(8, reading(1.5)).empty());
  auto raised = d.update(18, reading(1.6));
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_TRUE(raised[0].raised);
  EXPECT_EQ(raised[0].who.rank, 1);
  ASSERT_EQ(d.stragglers().size(), 1u);
  EXPECT_DOUBLE_EQ(d.stragglers()[0].slowdown, 1.6);
  EXPECT_TRUE(d.update(20, reading(1.0)).empty()) << "still a straggler until under for the hold";
  EXPECT_EQ(d.stragglers().size(), 1u);
  auto cleared = d.update(30, reading(1.0));
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_FALSE(cleared[0].raised);
  EXPECT_TRUE(d.stragglers().empty());
}

TEST(StragglerDetector, ARankThatGoesAwayLosesItsVerdictAndAResetForgetsAll) {
  Settings s;
  s.hold_s = 0;
  Detector d(s);
  ASSERT_EQ(d.update(0, straggler::score({{0, 0, 1.0}, {1, 1, 2.0}})).size(), 1u);
  auto gone = d.update(5, std::nullopt);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_FALSE(gone[0].raised);
  ASSERT_EQ(d.update(10, straggler::score({{0, 0, 1.0}, {1, 1, 2.0}})).size(), 1u);
  d.reset();
  EXPECT_TRUE(d.stragglers().empty());
  EXPECT_EQ(d.suspects(), 0u);
}

TEST(StragglerThrottle, TokensAndWordsRoundTripAndAnUnknownTokenIsRefused) {
  const unsigned bits = straggler::kThrottlePower | straggler::kThrottleHwSlowdown;
  EXPECT_EQ(straggler::throttle_tokens(bits), "power,hw_slowdown");
  EXPECT_EQ(straggler::throttle_words(bits), "power cap, hardware slowdown");
  EXPECT_EQ(straggler::parse_throttle_tokens("power,hw_slowdown"), bits);
  EXPECT_EQ(straggler::parse_throttle_tokens(""), 0u);
  EXPECT_FALSE(straggler::parse_throttle_tokens("power,boost"));
  EXPECT_FALSE(straggler::parse_throttle_tokens("power,"));
  EXPECT_EQ(straggler::parse_throttle_tokens(straggler::throttle_tokens(straggler::kThrottleAll)), straggler::kThrottleAll);
  straggler::Straggler who{5, 2, 1.4249, straggler::kThrottlePower, 0};
  EXPECT_EQ(straggler::describe(who, Settings{}),
            "rank 5 on node 2: work 1.42x the gang's typical rank over the last 30 s; GPU clocks throttled: power cap");
}

class StragglerRecorded : public ::testing::Test {
 protected:
  void SetUp() override {
    steps_ = load_recorded_steps(recorded_series_path());
    ASSERT_GT(steps_.size(), 4000u);
  }
  std::vector<RecordedStep> steps_;
};

TEST_F(StragglerRecorded, TheHealthyRunHasNoVerdictEvenWithAShortWindow) {
  EXPECT_EQ(said(replay_recorded(steps_, [](int, double) { return 1.0; })), "nothing");
  Settings quick;
  quick.window_s = 5;
  quick.hold_s = 2;
  EXPECT_EQ(said(replay_recorded(steps_, [](int, double) { return 1.0; }, quick)), "nothing");
}

TEST_F(StragglerRecorded, AHealthyRunUnderCpuQuotasHasNoVerdict) {
  // Each worker at 50% of a CPU: steps of ~96 ms of work, bimodal (a step the quota cuts short
  // waits for the next period).
  const auto quota = recorded_data("straggler_quota_2ranks.csv");
  ASSERT_GT(quota.size(), 1700u);
  EXPECT_EQ(said(replay_recorded(quota, [](int, double) { return 1.0; })), "nothing");
  // ... and a rank of it slowed 2x after 40 s is named.
  auto changes = replay_recorded(quota, [](int rank, double at) { return rank == 0 && at >= 40 ? 2.0 : 1.0; });
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes[0].who.rank, 0) << said(changes);
}

TEST_F(StragglerRecorded, AHealthyGangUnderTightQuotasWhoseRanksTakeTurnsHasNoVerdict) {
  // Each node at 25% of a CPU: both ranks throttled in most periods, each rank's work spread
  // over 15-100 ms, which rank is late changing from step to step (Note [Straggler score], "The
  // overlap"). Medians alone named each rank in turn (as `lockstep run` did when recording it,
  // and the CI's cluster tier on 250m pods); a suspect must also have four in five of its steps
  // slower than the typical rank's typical step.
  const auto quota = recorded_data("straggler_quota250_2ranks.csv");
  ASSERT_GT(quota.size(), 2900u);
  const auto before = replay_recorded(quota, [](int, double) { return 1.0; }, medians_only());
  EXPECT_NE(said(before), "nothing") << "the recording no longer shows the case";
  EXPECT_EQ(said(replay_recorded(quota, [](int, double) { return 1.0; })), "nothing");
}

TEST_F(StragglerRecorded, AGangOf500mPodsOnALoadedMachineHasNoVerdictYetARankSlowedTwiceIsNamed) {
  // 500m pods beside busy loops: each rank's work two humps (a quota pause in the step or not),
  // its 90th percentile 2.2-2.7x its median, the medians up to 1.6x apart either way. Nobody is
  // named as it was recorded; rank 1 slowed 2x from 60 s into the tiled run is named, and within
  // a minute and a half (CI's cluster tier saw the earlier overlap test, against the typical
  // rank's 90th percentile, take 99 s on such pods; bench/straggler section 1b measures it).
  const auto loaded = recorded_data("straggler_quota500_loaded_2ranks.csv");
  ASSERT_GT(loaded.size(), 7000u);
  EXPECT_NE(said(replay_recorded(loaded, [](int, double) { return 1.0; }, medians_only())), "nothing")
      << "medians alone named a rank of this healthy run";
  EXPECT_EQ(said(replay_recorded(loaded, [](int, double) { return 1.0; })), "nothing");
  const auto run = lockstep::test::tiled(loaded, 600);
  const auto changes = replay_recorded(run, [](int rank, double at) { return rank == 1 && at >= 60 ? 2.0 : 1.0; });
  ASSERT_FALSE(changes.empty());
  EXPECT_TRUE(changes[0].raised);
  EXPECT_EQ(changes[0].who.rank, 1) << said(changes);
  EXPECT_LE(changes[0].at_s - run.front().at_s - 60, 90) << said(changes);
}

TEST_F(StragglerRecorded, ACheckpointPauseOnRankZeroRaisesNothing) {
  // Step 1200: rank 0 writes a checkpoint for 20 s (work), rank 1 waits for it (exposed).
  for (auto& s : steps_) {
    if (s.step == 1200) {
      s.step_s += 20;
      if (s.rank == 1) s.exposed_s += 20;
    }
    if (s.step >= 1200) s.at_s += 20;
  }
  EXPECT_EQ(said(replay_recorded(steps_, [](int, double) { return 1.0; })), "nothing");
}

TEST_F(StragglerRecorded, AWarmUpOfOneRankRaisesNothing) {
  // Rank 1's first 15 s take 3x the work (a cold data cache, a neighbour still starting), then
  // it is as fast as rank 0: longer than the warm-up left out (10 s), and outvoted after it.
  auto changes = replay_recorded(lockstep::test::tiled(steps_, 120),
                                 [&](int rank, double at) { return rank == 1 && at < 15.0 ? 3.0 : 1.0; });
  EXPECT_EQ(said(changes), "nothing");
}

TEST_F(StragglerRecorded, ARankSlowOnlyOnceRaisesNothing) {
  for (auto& s : steps_)
    if (s.step == 900 && s.rank == 1) s.step_s += 8;  // one 8 s step: a page-in, a GC pause
  EXPECT_EQ(said(replay_recorded(steps_, [](int, double) { return 1.0; })), "nothing");
}

TEST_F(StragglerRecorded, ARankSlowThroughoutIsNamedWithinTheBoundAndOnlyIt) {
  const Settings s;
  const auto run = lockstep::test::tiled(steps_, 150);
  for (double f : {1.5, 2.0}) {
    const double t0 = 40;  // past the warm-up
    auto changes = replay_recorded(run, [&](int rank, double at) { return rank == 1 && at >= t0 ? f : 1.0; });
    ASSERT_FALSE(changes.empty()) << f << "x: no verdict";
    EXPECT_TRUE(changes[0].raised);
    EXPECT_EQ(changes[0].who.rank, 1) << said(changes);
    EXPECT_NEAR(changes[0].who.slowdown, f, 0.25 * f) << said(changes);
    // See Note [Straggler score]: the slow steps fill four fifths of the window
    // (4 * window * f / (1 + 4 * f)), then the hold, plus an evaluation interval.
    const double bound = 4 * s.window_s * f / (1 + 4 * f) + s.hold_s + kInterval;
    EXPECT_LE(changes[0].at_s - t0, bound) << f << "x: " << said(changes);
    for (const auto& c : changes) EXPECT_EQ(c.who.rank, 1) << said(changes);
  }
}

TEST_F(StragglerRecorded, ASlowdownUnderTheThresholdIsNotAVerdict) {
  auto changes = replay_recorded(steps_, [](int rank, double) { return rank == 1 ? 1.2 : 1.0; });
  EXPECT_EQ(said(changes), "nothing");
}

TEST_F(StragglerRecorded, ARankThatRecoversIsCleared) {
  Settings s;
  s.window_s = 10;
  s.hold_s = 5;
  auto changes =
      replay_recorded(steps_, [](int rank, double at) { return rank == 1 && at >= 2 && at < 25 ? 2.0 : 1.0; }, s);
  ASSERT_EQ(changes.size(), 2u) << said(changes);
  EXPECT_TRUE(changes[0].raised);
  EXPECT_FALSE(changes[1].raised);
  EXPECT_GT(changes[1].at_s, 25.0);
}

}  // namespace
