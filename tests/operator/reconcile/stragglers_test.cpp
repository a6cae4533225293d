// reconcile/stragglers: node 0's verdict read from rank 0's page (good, hostile and absurd pages),
// the Straggler condition's words, what decide() does with a reading (Note [Straggler condition])
// and the Replace policy's gang restart and affinity (Note [Replacing a straggler]).
#include <gtest/gtest.h>

#include <chrono>

#include "decide_inputs.hpp"
#include "lockstep/straggler.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/manifests.hpp"
#include "reconcile/stragglers.hpp"

using namespace lockstep::reconcile;
using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::kNow;
using lockstep::test::observed;
using lockstep::test::pod;

namespace {

// A lockstep_straggler_slowdown line as node 0's agent writes it.
std::string slowdown_line(const std::string& node_rank, const std::string& rank, const std::string& value,
                          const std::string& throttle = "") {
  return "lockstep_straggler_slowdown{namespace=\"ns\",node_rank=\"" + node_rank + "\",rank=\"" + rank +
         "\",throttle=\"" + throttle + "\",trainingjob=\"tj\"} " + value + "\n";
}
std::string gauge(const std::string& name, const std::string& value) {
  return name + "{namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} " + value + "\n";
}

}  // namespace

// --- the reading ---------------------------------------------------------------------------

TEST(StragglerReading, TakesTheAgentsVerdictsWorstFirstWithTheirThrottleReasons) {
  // 2 nodes x 4 ranks: node 1 holds ranks 4..7.
  std::string page = "# TYPE lockstep_straggler_slowdown gauge\n" + slowdown_line("1", "5", "1.42", "power") +
                     slowdown_line("0", "2", "2.5", "power,hw_thermal") + slowdown_line("1", "7", "1.6") +
                     gauge("lockstep_stragglers", "3") + gauge("lockstep_straggler_suspects", "4") +
                     gauge("lockstep_straggler_window_seconds", "60");
  auto r = parse_stragglers(page, 2, 4, 3);
  EXPECT_EQ(r.attempt, 3);
  ASSERT_EQ(r.stragglers.size(), 3u);
  EXPECT_EQ(r.stragglers[0], (StragglerVerdict{2, 0, 2.5, lockstep::straggler::kThrottlePower |
                                                              lockstep::straggler::kThrottleHwThermal}));
  EXPECT_EQ(r.stragglers[1], (StragglerVerdict{7, 1, 1.6, 0}));
  EXPECT_EQ(r.stragglers[2], (StragglerVerdict{5, 1, 1.42, lockstep::straggler::kThrottlePower}));
  EXPECT_EQ(r.standing, 3);
  EXPECT_EQ(r.suspects, 4);
  EXPECT_DOUBLE_EQ(r.window_s, 60);
  EXPECT_TRUE(r.active());
}

TEST(StragglerReading, APageWithoutTheSeriesIsNobodyStraggling) {
  auto r = parse_stragglers("lockstep_step{rank=\"0\"} 12\nlockstep_steps_total{rank=\"0\"} 12\n", 2, 4, 0);
  EXPECT_TRUE(r.stragglers.empty());
  EXPECT_EQ(r.standing, 0);
  EXPECT_EQ(r.suspects, 0);
  EXPECT_FALSE(r.active());
  // Suspects alone keep the job on the fast schedule.
  EXPECT_TRUE(parse_stragglers(gauge("lockstep_straggler_suspects", "1"), 2, 4, 0).active());
}

TEST(StragglerReading, HostileSeriesAreIgnoredEachAlone) {
  const std::string huge(5000, '7');
  const std::vector<std::string> bad = {
      slowdown_line("1", "5", "NaN"),          slowdown_line("1", "5", "+Inf"),
      slowdown_line("1", "5", "-1.5"),         slowdown_line("1", "5", "0.99"),
      slowdown_line("1", "5", "1000.5"),       slowdown_line("2", "9", "1.5"),  // node 2 of a 2-node job
      slowdown_line("0", "5", "1.5"),          // rank 5 is node 1's
      slowdown_line("1", "-5", "1.5"),         slowdown_line("1", "+5", "1.5"),
      slowdown_line("1", "5.0", "1.5"),        slowdown_line("1", "0x5", "1.5"),
      slowdown_line("1", "99999999999", "1.5"), slowdown_line(huge, "5", "1.5"),
      slowdown_line("1", huge, "1.5"),         slowdown_line("1", "5", "1.5", "fire"),
      slowdown_line("1", "5", "1.5", "power,,thermal"), slowdown_line("1", "5", "1.5", "POWER"),
      slowdown_line("1", "5", "1.5", "power,"), slowdown_line("1", "5", "1.5", std::string(5000, 'p')),
      "lockstep_straggler_slowdown{rank=\"5\"} 1.5\n",  // no node_rank
      "lockstep_straggler_slowdown{node_rank=\"1\"} 1.5\n",  // no rank
      "lockstep_straggler_slowdown{node_rank=\"1\",rank=\"5\",throttle=\"\xff\xfe\"} 1.5\n",  // not UTF-8
  };
  for (const auto& line : bad) {
    SCOPED_TRACE(line.substr(0, 120));
    auto r = parse_stragglers(line, 2, 4, 0);
    EXPECT_TRUE(r.stragglers.empty());
    EXPECT_EQ(r.standing, 0);
    // One bad line hides nothing else.
    auto mixed = parse_stragglers(line + slowdown_line("1", "6", "1.5"), 2, 4, 0);
    ASSERT_EQ(mixed.stragglers.size(), 1u);
    EXPECT_EQ(mixed.stragglers[0].rank, 6);
  }
  // A missing throttle label is no throttle.
  auto r = parse_stragglers("lockstep_straggler_slowdown{node_rank=\"1\",rank=\"5\"} 1.5\n", 2, 4, 0);
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_EQ(r.stragglers[0].throttle, 0u);
}

TEST(StragglerReading, GaugesOutOfRangeAreNotBelieved) {
  for (const std::string v : {"NaN", "-1", "0.5", "3601", "+Inf"}) {
    auto r = parse_stragglers(gauge("lockstep_straggler_window_seconds", v), 2, 4, 0);
    EXPECT_DOUBLE_EQ(r.window_s, lockstep::straggler::Settings{}.window_s) << v;
  }
  for (const std::string v : {"NaN", "-1", "2.5", "9", "1e9"}) {  // 9 > the world of 8
    auto r = parse_stragglers(gauge("lockstep_straggler_suspects", v) + gauge("lockstep_stragglers", v), 2, 4, 0);
    EXPECT_EQ(r.suspects, 0) << v;
    EXPECT_EQ(r.standing, 0) << v;
    EXPECT_FALSE(r.active()) << v;
  }
  // The count never says fewer than the verdicts listed.
  auto r = parse_stragglers(slowdown_line("1", "5", "1.5") + slowdown_line("1", "6", "1.5") +
                                gauge("lockstep_stragglers", "1"), 2, 4, 0);
  EXPECT_EQ(r.standing, 2);
}

TEST(StragglerReading, ARankGivenTwiceCountsOnceAsFirstGiven) {
  auto r = parse_stragglers(slowdown_line("1", "5", "1.4") + slowdown_line("1", "5", "900") +
                                slowdown_line("1", "5", "1.5", "thermal"), 2, 4, 0);
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_DOUBLE_EQ(r.stragglers[0].slowdown, 1.4);
  EXPECT_EQ(r.stragglers[0].throttle, 0u);
}

TEST(StragglerReading, AtMostEightAreTakenTheWorstFirst) {
  std::string page;
  for (int rank = 0; rank < 20; ++rank)  // 5 nodes x 4 ranks, rank r at 1 + r/10
    page += slowdown_line(std::to_string(rank / 4), std::to_string(rank), std::to_string(1 + rank / 10.0));
  page += gauge("lockstep_stragglers", "20");
  auto r = parse_stragglers(page, 5, 4, 0);
  ASSERT_EQ(r.stragglers.size(), kMaxStragglersRead);
  for (size_t i = 0; i < r.stragglers.size(); ++i) EXPECT_EQ(r.stragglers[i].rank, 19 - static_cast<int>(i));
  EXPECT_EQ(r.standing, 20);
}

TEST(StragglerReading, TenThousandSeriesCostBoundedTimeAndResult) {
  std::string page;
  for (int i = 0; i < 10000; ++i)
    page += slowdown_line(std::to_string(i % 64), std::to_string((i % 64) * 8 + i % 8), std::to_string(1 + (i % 997) / 10.0),
                          i % 3 ? "power" : "");
  ASSERT_GT(page.size(), 1'000'000u);
  const auto start = std::chrono::steady_clock::now();
  auto r = parse_stragglers(page, 64, 8, 0);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.stragglers.size(), kMaxStragglersRead);
  EXPECT_LE(r.standing, 64 * 8);
  for (const auto& v : r.stragglers) EXPECT_EQ(v.rank / 8, v.node_rank);
  // See Note [Untrusted exposition]: at most kMaxSamples lines are parsed; well under a second.
  EXPECT_LT(took, 1s) << std::chrono::duration<double>(took).count() << " s";
  std::cout << "parse of 10,000 slowdown series (" << page.size() << " bytes): "
            << std::chrono::duration<double, std::milli>(took).count() << " ms\n";
}

// --- the words -----------------------------------------------------------------------------

TEST(StragglerMessage, NamesRankPodNodeSlowdownWindowThrottleAndTheOthers) {
  StragglerReading r;
  r.stragglers = {{5, 2, 1.4249, lockstep::straggler::kThrottlePower}};
  r.standing = 3;
  r.window_s = 30;
  EXPECT_EQ(straggler_message(r, "tj-2", "gpu-17"),
            "rank 5 (pod tj-2 on node gpu-17): work 1.42x the gang's typical rank over the last 30 s; GPU clocks "
            "throttled: power cap (and 2 more)");
  r.stragglers[0].throttle = 0;
  r.standing = 1;
  EXPECT_EQ(straggler_message(r, "tj-2", ""),
            "rank 5 (pod tj-2, node unknown): work 1.42x the gang's typical rank over the last 30 s");
  EXPECT_EQ(straggler_message(StragglerReading{}, "tj-2", "n"), "");
}

TEST(StragglerMessage, AVerdictIsTheSameUnlessItsSlowdownMovesByATenth) {
  auto at = [](const std::string& x, int rank = 5, const std::string& tail = "") {
    return "rank " + std::to_string(rank) + " (pod tj-2 on node gpu-17): work " + x + "x the gang's typical rank" + tail;
  };
  EXPECT_TRUE(same_verdict(at("1.42"), at("1.42")));
  EXPECT_TRUE(same_verdict(at("1.42"), at("1.45")));
  EXPECT_TRUE(same_verdict(at("1.42"), at("1.51")));
  EXPECT_FALSE(same_verdict(at("1.42"), at("1.52")));
  EXPECT_FALSE(same_verdict(at("1.42"), at("1.32")));
  EXPECT_FALSE(same_verdict(at("1.42"), at("1.42", 6)));
  EXPECT_FALSE(same_verdict(at("1.42"), at("1.42", 5, " (and 1 more)")));
  EXPECT_FALSE(same_verdict(at("1.42"), "something else"));
  EXPECT_EQ(verdict_subject(at("1.42")), "rank 5 (pod tj-2 on node gpu-17)");
}

// --- decide() ------------------------------------------------------------------------------

namespace {

// tj, 2 nodes x 4 ranks, Running since kNow - 50 s; its pods on node-a and node-b.
Observed gang(StragglerPolicy policy = StragglerPolicy::Report, int attempt = 0) {
  JobView j;
  j.name = "tj";
  j.ns = "ns";
  j.uid = "uid-1";
  j.nodes = 2;
  j.procs_per_node = 4;
  j.straggler_policy = policy;
  j.status.phase = "Running";
  j.status.restarts = attempt;
  j.status.start_time = lockstep::reconcile::format_time(kNow - 60s);
  j.status.conditions.push_back({"Running", "True", "AllNodesRunning", "", format_time(kNow - 50s)});
  PodView a = pod(0, "Running", attempt), b = pod(1, "Running", attempt);
  a.node_name = "node-a";
  b.node_name = "node-b";
  return observed(j, {a, b});
}

StragglerReading verdict(double slowdown, int rank = 5, int attempt = 0) {
  StragglerReading r;
  r.attempt = attempt;
  r.stragglers = {{rank, rank / 4, slowdown, 0}};
  r.standing = 1;
  r.suspects = 1;
  return r;
}

// The next pass: the status the last one wrote, `seconds` later.
Observed after(Observed in, const Decision& d, std::chrono::seconds seconds) {
  in.job.status = d.status;
  in.now += seconds;
  return in;
}

size_t count_events(const Decision& d, const std::string& type, const std::string& reason) {
  size_t n = 0;
  for (const auto& e : d.events) n += e.type == type && e.reason == reason;
  return n;
}

}  // namespace

TEST(StragglerCondition, AVerdictNamesThePodAndNodeOnceWithAWarningEvent) {
  auto in = gang();
  in.stragglers = verdict(1.42);
  auto d = decide(in);
  const Condition* c = d.status.condition("Straggler");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->reason, "SlowRank");
  EXPECT_EQ(c->message, "rank 5 (pod tj-1 on node node-b): work 1.42x the gang's typical rank over the last 30 s");
  EXPECT_EQ(c->last_transition_time, format_time(kNow));
  EXPECT_EQ(count_events(d, "Warning", "Straggler"), 1u);
  EXPECT_TRUE(d.status_changed);
  EXPECT_TRUE(d.delete_pods.empty());

  // A slowdown that drifts by less than 0.1: no write, no Event.
  auto again = after(in, d, 5s);
  again.stragglers = verdict(1.47);
  auto d2 = decide(again);
  EXPECT_FALSE(d2.status_changed) << d2.status.condition("Straggler")->message;
  EXPECT_TRUE(d2.events.empty());
  // By 0.1 or more: the message says it, with no new transition and no Event.
  auto worse = after(again, d2, 5s);
  worse.stragglers = verdict(1.6);
  auto d3 = decide(worse);
  EXPECT_TRUE(d3.status_changed);
  EXPECT_NE(d3.status.condition("Straggler")->message.find("work 1.60x"), std::string::npos);
  EXPECT_EQ(d3.status.condition("Straggler")->last_transition_time, format_time(kNow));
  EXPECT_TRUE(d3.events.empty());
  // Another rank named: an Event.
  auto other = after(worse, d3, 5s);
  other.stragglers = verdict(1.6, 2);
  auto d4 = decide(other);
  EXPECT_EQ(d4.status.condition("Straggler")->message.rfind("rank 2 (pod tj-0 on node node-a)", 0), 0u);
  EXPECT_EQ(count_events(d4, "Warning", "Straggler"), 1u);
}

TEST(StragglerCondition, AReadingWithoutAVerdictClearsItAsRecovered) {
  auto in = gang();
  StragglerReading none;
  none.attempt = 0;
  in.stragglers = none;
  auto quiet = decide(in);
  EXPECT_EQ(quiet.status.condition("Straggler"), nullptr) << "absent while no verdict was ever seen";

  in.stragglers = verdict(1.5);
  auto d = decide(in);
  auto cleared = after(in, d, 20s);
  cleared.stragglers = none;
  auto d2 = decide(cleared);
  const Condition* c = d2.status.condition("Straggler");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, "Recovered");
  EXPECT_EQ(c->message, "rank 5 (pod tj-1 on node node-b) is no longer slower than the gang's typical rank");
  EXPECT_EQ(c->last_transition_time, format_time(kNow + 20s));
  EXPECT_EQ(count_events(d2, "Normal", "StragglerRecovered"), 1u);
  // And stays so without another write.
  auto d3 = decide(after(cleared, d2, 5s));
  EXPECT_FALSE(d3.status_changed);
  EXPECT_TRUE(d3.events.empty());
}

TEST(StragglerCondition, NoReadingAnEarlierAttemptsReadingAFinishedJobOrOffChangeNothing) {
  auto in = gang();
  in.stragglers = verdict(1.5);
  auto d = decide(in);
  // No reading (rank 0 did not answer): the verdict stands.
  auto silent = after(in, d, 5s);
  silent.stragglers.reset();
  EXPECT_FALSE(decide(silent).status_changed);
  // A reading of attempt 0 while the job is in attempt 1 counts for nothing.
  auto stale = gang(StragglerPolicy::Report, 1);
  stale.stragglers = verdict(1.5, 5, 0);
  EXPECT_EQ(decide(stale).status.condition("Straggler"), nullptr);
  // A finished job keeps the condition it had.
  auto done = after(in, d, 5s);
  done.job.status.phase = "Succeeded";
  done.stragglers = StragglerReading{};
  done.stragglers->attempt = 0;
  auto dd = decide(done);
  ASSERT_NE(dd.status.condition("Straggler"), nullptr);
  EXPECT_EQ(dd.status.condition("Straggler")->status, "True");
  // Ignore: no condition, no Event.
  auto off = gang(StragglerPolicy::Ignore);
  off.stragglers = verdict(3);
  auto od = decide(off);
  EXPECT_EQ(od.status.condition("Straggler"), nullptr);
  EXPECT_EQ(count_events(od, "Warning", "Straggler"), 0u);
}

TEST(StragglerReplace, TheGangLeavesTheNodeOnceTheVerdictHeldAndNotAgainstBackoffLimit) {
  auto in = gang(StragglerPolicy::Replace);
  in.job.straggler_replace_after_seconds = 120;
  in.job.backoff_limit = 1;
  in.stragglers = verdict(1.5);
  auto d = decide(in);
  EXPECT_TRUE(d.delete_pods.empty());
  EXPECT_NE(d.status.condition("Straggler")->message.find(
                "; the gang leaves node node-b once this has held for spec.runPolicy.stragglers.replaceAfterSeconds=120"),
            std::string::npos);
  ASSERT_TRUE(d.requeue_after);
  EXPECT_LE(*d.requeue_after, 120s);
  // 119 s on: not yet.
  auto held = after(in, d, 119s);
  auto d2 = decide(held);
  EXPECT_TRUE(d2.delete_pods.empty());
  ASSERT_TRUE(d2.requeue_after);
  EXPECT_LE(*d2.requeue_after, 1s);
  // 120 s on: the gang restarts off node-b.
  auto due = after(held, d2, 1s);
  auto d3 = decide(due);
  EXPECT_EQ(d3.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_EQ(d3.status.restarts, 1);
  EXPECT_EQ(d3.status.stragglers.replacements, 1);
  EXPECT_EQ(d3.status.stragglers.excluded_nodes, (std::vector<std::string>{"node-b"}));
  EXPECT_EQ(d3.status.node_lost_restarts, 0);
  EXPECT_EQ(d3.status.consecutive_restarts, 0) << "no failure: no backoff";
  EXPECT_EQ(d3.status.phase, "Restarting");
  const Condition* restarting = d3.status.condition("Restarting");
  ASSERT_NE(restarting, nullptr);
  EXPECT_EQ(restarting->reason, "StragglerReplaced");
  EXPECT_NE(restarting->message.find("leaving node node-b out of every later attempt (replacement 1 of "
                                     "spec.runPolicy.stragglers.maxReplacements=2); restarting the gang as attempt 1 "
                                     "(0 of spec.runPolicy.backoffLimit=1; straggler replacements do not count)"),
            std::string::npos) << restarting->message;
  EXPECT_EQ(count_events(d3, "Warning", "StragglerReplaced"), 1u);
  const Condition* s = d3.status.condition("Straggler");
  EXPECT_EQ(s->status, "False");
  EXPECT_EQ(s->reason, "Replaced");

  // The old pods gone: attempt 1 at once, its pods kept off node-b.
  auto next = after(due, d3, 1s);
  next.pods.clear();
  next.stragglers.reset();
  auto d4 = decide(next);
  EXPECT_EQ(d4.create_pods, (std::vector<int>{0, 1}));
  EXPECT_EQ(d4.exclude_nodes, (std::vector<std::string>{"node-b"}));
  EXPECT_FALSE(d4.requeue_after && *d4.requeue_after > 0ms) << d4.requeue_after->count();

  // A failure of attempt 1 is the first against backoffLimit=1: a restart, not a failed job.
  auto failing = after(next, d4, 30s);
  failing.pods = {pod(0, "Running", 1), pod(1, "Failed", 1, 137)};
  failing.job.status.phase = "Running";
  auto d5 = decide(failing);
  EXPECT_EQ(d5.status.phase, "Restarting") << d5.status.condition("Restarting")->message;
  EXPECT_EQ(d5.status.restarts, 2);
}

TEST(StragglerReplace, AVerdictFromBeforeTheGangLastRanIsNewAndItsHoldStartsAgain) {
  // Raised 10 min ago; the gang was suspended and resumed since, running again 50 s ago.
  auto in = gang(StragglerPolicy::Replace);
  in.job.straggler_replace_after_seconds = 120;
  in.job.status.conditions.push_back({"Straggler", "True", "SlowRank",
                                      "rank 5 (pod tj-1 on node node-b): work 1.50x the gang's typical rank over the "
                                      "last 30 s; the gang leaves node node-b once this has held for "
                                      "spec.runPolicy.stragglers.replaceAfterSeconds=120",
                                      format_time(kNow - 600s)});
  in.stragglers = verdict(1.5);
  auto d = decide(in);
  EXPECT_TRUE(d.delete_pods.empty()) << "held 10 min, but not in this run of the gang";
  EXPECT_EQ(d.status.condition("Straggler")->last_transition_time, format_time(kNow));
  EXPECT_EQ(count_events(d, "Warning", "Straggler"), 1u);
  // Raised after the gang ran: the hold counts from then.
  in.job.status.conditions.back().last_transition_time = format_time(kNow - 121s);
  EXPECT_EQ(decide(in).status.stragglers.replacements, 0) << "raised before the gang ran (50 s ago)";
  in.job.status.conditions.front().last_transition_time = format_time(kNow - 200s);  // Running since
  auto d2 = decide(in);
  EXPECT_EQ(d2.status.stragglers.replacements, 1);
  EXPECT_EQ(count_events(d2, "Warning", "Straggler"), 0u);
}

TEST(StragglerReplace, ReplaceAfterZeroActsOnTheFirstReading) {
  auto in = gang(StragglerPolicy::Replace);
  in.job.straggler_replace_after_seconds = 0;
  in.stragglers = verdict(1.5, 1);  // rank 1: node 0's
  auto d = decide(in);
  EXPECT_EQ(d.status.stragglers.excluded_nodes, (std::vector<std::string>{"node-a"}));
  EXPECT_EQ(count_events(d, "Warning", "Straggler"), 1u);
  EXPECT_EQ(count_events(d, "Warning", "StragglerReplaced"), 1u);
}

TEST(StragglerReplace, NoMoreThanMaxReplacementsAndNoneWithoutANode) {
  auto in = gang(StragglerPolicy::Replace);
  in.job.straggler_replace_after_seconds = 0;
  in.job.straggler_max_replacements = 2;
  in.job.status.restarts = 2;
  in.job.status.stragglers = {2, {"node-x", "node-y"}};
  for (auto& p : in.pods) p.attempt = 2;
  in.stragglers = verdict(1.5, 5, 2);
  auto d = decide(in);
  EXPECT_TRUE(d.delete_pods.empty());
  EXPECT_EQ(d.status.restarts, 2);
  EXPECT_EQ(d.status.condition("Straggler")->status, "True");
  EXPECT_NE(d.status.condition("Straggler")->message.find("; not replaced: spec.runPolicy.stragglers.maxReplacements=2 reached"),
            std::string::npos);

  auto unbound = gang(StragglerPolicy::Replace);
  unbound.job.straggler_replace_after_seconds = 0;
  unbound.pods[1].node_name.clear();
  unbound.stragglers = verdict(1.5);
  auto u = decide(unbound);
  EXPECT_TRUE(u.delete_pods.empty());
  EXPECT_EQ(u.status.condition("Straggler")->message,
            "rank 5 (pod tj-1, node unknown): work 1.50x the gang's typical rank over the last 30 s; not replaced: its "
            "pod is on no node yet (spec.nodeName unset)");
}

TEST(StragglerReplace, AGangRestartForAFailureEndsTheVerdict) {
  auto in = gang(StragglerPolicy::Replace);
  in.stragglers = verdict(1.5);
  auto d = decide(in);
  auto failing = after(in, d, 5s);
  failing.pods[0].phase = "Failed";
  failing.pods[0].exit_code = 137;
  auto d2 = decide(failing);
  EXPECT_EQ(d2.status.condition("Restarting")->reason, "GangRestart");
  EXPECT_EQ(d2.status.condition("Straggler")->status, "False");
  EXPECT_EQ(d2.status.condition("Straggler")->reason, "GangRestarted");
  EXPECT_EQ(d2.status.stragglers.replacements, 0);
}

TEST(StragglerStatus, RoundTripsAndIsAbsentUntilTheFirstReplacement) {
  JobStatus s;
  EXPECT_FALSE(s.to_json().contains("stragglers"));
  s.restarts = 3;
  s.stragglers = {2, {"node-a", "node-b"}};
  json j = s.to_json();
  EXPECT_EQ(j["stragglers"], json::parse(R"({"replacements": 2, "excludedNodes": ["node-a", "node-b"]})"));
  EXPECT_TRUE(JobStatus::from_json(j) == s);
  // More replacements than restarts is not believed.
  j["stragglers"]["replacements"] = 9;
  EXPECT_EQ(JobStatus::from_json(j).stragglers.replacements, 3);
}

TEST(StragglerSpec, ReadsThePolicyWithinTheCrdsBounds) {
  auto view = [](const std::string& stragglers) {
    return JobView::from_json(json::parse(R"({"metadata": {"name": "tj"}, "spec": {"runPolicy": {"stragglers": )" +
                                          stragglers + "}}}"));
  };
  JobView d = JobView::from_json(json::parse(R"({"metadata": {"name": "tj"}, "spec": {}})"));
  EXPECT_EQ(d.straggler_policy, StragglerPolicy::Report);
  EXPECT_EQ(d.straggler_replace_after_seconds, 120);
  EXPECT_EQ(d.straggler_max_replacements, 2);
  JobView r = view(R"({"policy": "Replace", "replaceAfterSeconds": 30, "maxReplacements": 5})");
  EXPECT_EQ(r.straggler_policy, StragglerPolicy::Replace);
  EXPECT_EQ(r.straggler_replace_after_seconds, 30);
  EXPECT_EQ(r.straggler_max_replacements, 5);
  EXPECT_EQ(view(R"({"policy": "Ignore"})").straggler_policy, StragglerPolicy::Ignore);
  JobView wild = view(R"({"replaceAfterSeconds": -4, "maxReplacements": 1000})");
  EXPECT_EQ(wild.straggler_replace_after_seconds, 0);
  EXPECT_EQ(wild.straggler_max_replacements, kMaxStragglerReplacements);
}

// --- the affinity --------------------------------------------------------------------------

TEST(StragglerAffinity, EachExcludedNodeIsRequiredOutOfEveryTermOfTheTemplate) {
  JobView j;
  j.name = "tj";
  j.ns = "ns";
  j.uid = "u";
  j.nodes = 2;
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "img"}], "affinity": {"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["mine"]}]}]}}}}})");
  json pod = pod_manifest(j, 0, 1, {}, "", {}, {"node-a", "node-b"});
  const json& terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                         ["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  const json a = {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-a"}}};
  const json b = {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-b"}}};
  EXPECT_EQ(terms[0]["matchFields"], json::array({a, b}));
  EXPECT_EQ(terms[0]["matchExpressions"].size(), 1u);
  EXPECT_EQ(terms[1]["matchFields"].size(), 3u);
  EXPECT_EQ(terms[1]["matchFields"][1], a);

  // No affinity of its own: one term.
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "img"}]}})");
  json plain = pod_manifest(j, 0, 1, {}, "", {}, {"node-a"});
  EXPECT_EQ(plain["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json::parse(R"({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}]})"));
  // None excluded: no affinity.
  EXPECT_FALSE(pod_manifest(j, 0, 1)["spec"].contains("affinity"));
}
