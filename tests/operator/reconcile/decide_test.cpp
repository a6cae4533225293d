// reconcile::decide, table by table: observed state in, actions and status out.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <functional>
#include <iostream>

#include "lockstep/contract.hpp"
#include "decide_inputs.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/failure_policy.hpp"
#include "reconcile/manifests.hpp"

using namespace lockstep::reconcile;
using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::kNow;  // decide_inputs.hpp
using lockstep::test::observed;
using lockstep::test::pod;

namespace {

JobView job(int nodes = 2) {
  JobView j;
  j.name = "tj";
  j.ns = "ns";
  j.uid = "uid-1";
  j.generation = 3;
  j.nodes = nodes;
  return j;
}

// A failed pod whose container ended `ago` before kNow.
PodView failed(int index, int exit_code, std::chrono::seconds ago, int attempt = 0) {
  PodView p = pod(index, "Failed", attempt, exit_code);
  p.finished_at = kNow - ago;
  return p;
}

// A job whose status says it has been running (all pods seen Running) since kNow - 60 s.
JobView running_job(int nodes = 2) {
  JobView j = job(nodes);
  j.status.phase = "Running";
  j.status.start_time = format_time(kNow - 60s);
  j.status.conditions.push_back({"Running", "True", "AllNodesRunning", "", format_time(kNow - 50s)});
  return j;
}

const Condition* cond(const Decision& d, const std::string& type) { return d.status.condition(type); }
// "" when the condition is missing, so a wrong decision fails the test instead of crashing it.
std::string message(const Decision& d, const std::string& type) {
  const Condition* c = cond(d, type);
  return c ? c->message : "";
}
std::string reason(const Decision& d, const std::string& type) {
  const Condition* c = cond(d, type);
  return c ? c->reason : "";
}

}  // namespace

TEST(Decide, ANewJobGetsServicePodGroupAndEveryPod) {
  auto in = observed(job(3));
  in.service_exists = in.podgroup_exists = false;
  auto d = decide(in);
  EXPECT_TRUE(d.create_service);
  EXPECT_TRUE(d.create_podgroup);
  EXPECT_EQ(d.create_pods, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(d.delete_pods.empty());
  EXPECT_EQ(d.status.phase, "Pending");
  EXPECT_EQ(d.status.start_time, format_time(kNow));
  EXPECT_EQ(d.status.observed_generation, 3);
  EXPECT_EQ(d.status.nodes.active, 3);
  ASSERT_NE(cond(d, "Created"), nullptr);
  EXPECT_TRUE(d.status_changed);
  EXPECT_TRUE(d.events.empty()) << "Note [Events that say something new]: the Created condition says it";
}

TEST(Decide, NoGangMeansNoPodGroup) {
  auto j = job();
  j.gang = false;
  auto in = observed(j);
  in.podgroup_exists = false;
  EXPECT_FALSE(decide(in).create_podgroup);
}

TEST(Decide, MissingPodGroupApiIsAConditionNotAnError) {
  auto in = observed(job());
  in.podgroup_exists = false;
  in.gang_support = GangSupport::Unavailable;
  auto d = decide(in);
  EXPECT_FALSE(d.create_podgroup);
  EXPECT_EQ(d.create_pods.size(), 2u);
  ASSERT_NE(cond(d, "GangSchedulingUnavailable"), nullptr);
  EXPECT_EQ(cond(d, "GangSchedulingUnavailable")->status, "True");
}

// See Note [Events that say something new]: the first start is the Running condition alone; after
// a gang restart an Event says the gang runs again.
TEST(Decide, AllPodsRunningIsRunningWithAnEventOnlyAfterARestart) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow - 5s);
  auto d = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(d.status.phase, "Running");
  EXPECT_EQ(d.status.nodes.ready, 2);
  ASSERT_NE(cond(d, "Running"), nullptr);
  EXPECT_EQ(cond(d, "Running")->status, "True");
  EXPECT_EQ(message(d, "Created"), "pods of attempt 0 created") << "the attempt's pods exist: the condition says so";
  EXPECT_TRUE(d.events.empty()) << d.events[0].reason;

  j.status.phase = "Restarting";
  j.status.restarts = 2;
  auto again = decide(observed(j, {pod(0, "Running", 2), pod(1, "Running", 2)}));
  EXPECT_EQ(again.status.phase, "Running");
  ASSERT_EQ(again.events.size(), 1u);
  EXPECT_EQ(again.events[0].reason, "Running");
  EXPECT_EQ(again.events[0].message, "all 2 pods are running again (attempt 2)");
}

TEST(Decide, NothingChangedMeansNoStatusWrite) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow - 5s);
  auto first = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  j.status = first.status;
  auto again = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_FALSE(again.status_changed);
  EXPECT_TRUE(again.events.empty());
  EXPECT_TRUE(again.create_pods.empty());
}

TEST(Decide, AllSucceededIsSucceededAndKeepsFinishedPodsUnderRunningPolicy) {
  auto d = decide(observed(running_job(), {pod(0, "Succeeded", 0, 0), pod(1, "Succeeded", 0, 0)}));
  EXPECT_EQ(d.status.phase, "Succeeded");
  EXPECT_EQ(d.status.completion_time, format_time(kNow));
  EXPECT_EQ(cond(d, "Succeeded")->reason, "AllNodesSucceeded");
  EXPECT_EQ(cond(d, "Running")->status, "False");
  EXPECT_TRUE(d.delete_pods.empty());
}

TEST(Decide, CleanPodPolicyAllRemovesFinishedPodsToo) {
  auto j = running_job();
  j.clean_pod_policy = CleanPodPolicy::All;
  auto d = decide(observed(j, {pod(0, "Succeeded", 0, 0), pod(1, "Succeeded", 0, 0)}));
  EXPECT_EQ(d.delete_pods.size(), 2u);
}

TEST(Decide, AFailedPodRestartsTheGangWithBackoff) {
  Options opt;
  opt.restart_backoff = 10s;
  auto d = decide(observed(running_job(3), {pod(0, "Running"), pod(1, "Failed", 0, 137), pod(2, "Running")}), opt);
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1", "tj-2"}));
  // Each delete names the pod it saw: a newer pod of the same name is never deleted.
  EXPECT_EQ(d.delete_pod_uids, (std::vector<std::string>{"uid-0-0", "uid-1-0", "uid-2-0"}));
  EXPECT_TRUE(d.create_pods.empty());
  ASSERT_TRUE(d.requeue_after.has_value());
  EXPECT_EQ(*d.requeue_after, 10s);
  EXPECT_NE(cond(d, "Restarting")->message.find("tj-1 failed with exit code 137"), std::string::npos);
  ASSERT_FALSE(d.events.empty());
  EXPECT_EQ(d.events.back().type, "Warning");
}

TEST(Decide, TheNextAttemptWaitsForOldPodsAndTheBackoff) {
  Options opt;
  opt.restart_backoff = 10s;
  auto j = running_job();
  j.status.phase = "Restarting";
  j.status.restarts = 1;
  j.status.conditions.push_back({"Restarting", "True", "GangRestart", "", format_time(kNow - 4s)});
  // Old pods still terminating: nothing is created.
  auto waiting = decide(observed(j, {pod(0, "Running", 0), pod(1, "Failed", 0, 137)}), opt);
  EXPECT_TRUE(waiting.create_pods.empty());
  EXPECT_EQ(waiting.delete_pods.size(), 2u);
  // Old pods gone but only 4 s of the 10 s backoff passed: requeue for the rest.
  auto backoff = decide(observed(j), opt);
  EXPECT_TRUE(backoff.create_pods.empty());
  ASSERT_TRUE(backoff.requeue_after.has_value());
  EXPECT_EQ(*backoff.requeue_after, 6s);
  // Backoff over: attempt 1 is created.
  auto in = observed(j);
  in.now = kNow + 7s;
  auto go = decide(in, opt);
  EXPECT_EQ(go.create_pods, (std::vector<int>{0, 1}));
  EXPECT_EQ(go.status.restarts, 1);
}

// See Note [Pods that do not terminate]: a gang restart held by a pod that will not go says so,
// naming it, how long past due, and its finalizers; the condition clears once it is gone.
TEST(Decide, AGangRestartHeldByAPodThatDoesNotTerminateSaysSo) {
  auto j = running_job();
  j.status.phase = "Restarting";
  j.status.restarts = 1;
  j.status.conditions.push_back({"Restarting", "True", "GangRestart", "", format_time(kNow - 200s)});
  PodView held = pod(0, "Running", 0);
  held.deleting = true;
  held.finalizers = "example.com/hold";
  PodView going = pod(1, "Failed", 0, 137);
  going.deleting = true;
  going.deletion_due = kNow + 20s;  // still within its grace period
  // 10 s past due: not yet stuck; looked at again when it would be.
  held.deletion_due = kNow - 10s;
  auto early = decide(observed(j, {held, going}));
  EXPECT_EQ(cond(early, "StuckTerminating"), nullptr);
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_EQ(*early.requeue_after, 20s);
  // 95 s past due: named, with its finalizers; the other pod is not.
  held.deletion_due = kNow - 95s;
  auto stuck = decide(observed(j, {held, going}));
  EXPECT_TRUE(stuck.create_pods.empty());
  ASSERT_NE(cond(stuck, "StuckTerminating"), nullptr);
  EXPECT_EQ(cond(stuck, "StuckTerminating")->status, "True");
  EXPECT_EQ(reason(stuck, "StuckTerminating"), "PodsNotTerminating");
  EXPECT_NE(message(stuck, "StuckTerminating").find("tj-0 (95 s past its deletion; finalizers: example.com/hold)"),
            std::string::npos) << message(stuck, "StuckTerminating");
  EXPECT_EQ(message(stuck, "StuckTerminating").find("tj-1"), std::string::npos);
  // Gone: the condition turns False and the next attempt starts.
  j.status = stuck.status;
  auto gone = decide(observed(j));
  EXPECT_EQ(cond(gone, "StuckTerminating")->status, "False");
  EXPECT_EQ(gone.create_pods, (std::vector<int>{0, 1}));
}

TEST(Decide, BackoffLimitExhaustedFails) {
  auto j = running_job();
  j.backoff_limit = 2;
  j.status.restarts = 2;
  auto d = decide(observed(j, {pod(0, "Failed", 2, 137), pod(1, "Running", 2)}));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(cond(d, "Failed")->reason, "BackoffLimitExceeded");
  EXPECT_EQ(d.status.restarts, 2);
  EXPECT_EQ(d.delete_pods, std::vector<std::string>{"tj-1"});  // cleanPodPolicy Running
}

TEST(Decide, RestartPolicyNeverFailsAtOnce) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::Never;
  auto d = decide(observed(j, {pod(0, "Failed", 0, 137), pod(1, "Running")}));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(cond(d, "Failed")->reason, "PodFailed");
}

TEST(Decide, ExitCodePolicyTellsBugsFromKills) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  struct Case { int code; bool retried; };
  for (auto c : {Case{1, false}, Case{2, false}, Case{127, false}, Case{lockstep::contract::kExitStall, true},
                 Case{lockstep::contract::kExitRendezvous, true},
                 Case{lockstep::contract::kExitCollective, true}, Case{128, true}, Case{137, true}, Case{143, true}}) {
    auto d = decide(observed(j, {pod(0, "Failed", 0, c.code), pod(1, "Running")}));
    EXPECT_EQ(d.status.phase, c.retried ? "Restarting" : "Failed") << "exit code " << c.code;
    if (!c.retried) {
      EXPECT_EQ(cond(d, "Failed")->reason, "NonRetryableExitCode");
    }
  }
}

TEST(Decide, APodThatVanishesFromARunningGangRestartsIt) {
  auto d = decide(observed(running_job(), {pod(0, "Running")}));
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_NE(cond(d, "Restarting")->message.find("tj-1 disappeared"), std::string::npos);
}

TEST(Decide, StalePodsOfAnEarlierAttemptAreDeleted) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow);
  j.status.restarts = 1;
  auto d = decide(observed(j, {pod(0, "Running", 0), pod(1, "Pending", 1)}));
  EXPECT_EQ(d.delete_pods, std::vector<std::string>{"tj-0"});
  EXPECT_TRUE(d.create_pods.empty());
}

TEST(Decide, SuspendRemovesPodsAndResumeResetsTheClock) {
  auto j = running_job();
  j.suspend = true;
  auto s = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(s.status.phase, "Suspended");
  EXPECT_EQ(s.delete_pods.size(), 2u);
  EXPECT_TRUE(s.create_pods.empty());
  EXPECT_EQ(cond(s, "Suspended")->status, "True");

  j.suspend = false;
  j.status = s.status;
  auto r = decide(observed(j));
  EXPECT_EQ(cond(r, "Suspended")->status, "False");
  EXPECT_EQ(r.status.start_time, format_time(kNow));
  EXPECT_EQ(r.create_pods.size(), 2u);
  EXPECT_EQ(r.status.phase, "Pending");
}

TEST(Decide, ActiveDeadline) {
  auto j = running_job();
  j.active_deadline_seconds = 100;  // started 60 s ago
  auto before = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(before.status.phase, "Running");
  ASSERT_TRUE(before.requeue_after.has_value());
  EXPECT_EQ(*before.requeue_after, 40s);
  j.active_deadline_seconds = 30;
  auto after = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(after.status.phase, "Failed");
  EXPECT_EQ(cond(after, "Failed")->reason, "DeadlineExceeded");
  EXPECT_EQ(after.delete_pods.size(), 2u);
}

TEST(Decide, TtlAfterFinished) {
  auto j = job();
  j.status.phase = "Succeeded";
  j.status.completion_time = format_time(kNow - 30s);
  j.ttl_seconds_after_finished = 100;
  auto wait = decide(observed(j));
  EXPECT_FALSE(wait.delete_job);
  ASSERT_TRUE(wait.requeue_after.has_value());
  EXPECT_EQ(*wait.requeue_after, 70s);
  j.ttl_seconds_after_finished = 10;
  EXPECT_TRUE(decide(observed(j)).delete_job);
}

TEST(Decide, AFinishedJobCreatesNothing) {
  auto j = job();
  j.status.phase = "Failed";
  j.status.completion_time = format_time(kNow);
  auto in = observed(j);
  in.service_exists = false;
  auto d = decide(in);
  EXPECT_FALSE(d.create_service);
  EXPECT_TRUE(d.create_pods.empty());
}

// See Note [The first failure]: pod 1 is OOM-killed; pod 0's collective then fails (exit 1
// from a torchrun-style program). By index pod 0's 1 would fail the job for good.
TEST(FirstFailure, AnOomKillBeforeAPeersExit1RestartsTheGang) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  auto d = decide(observed(j, {failed(0, 1, 20s), failed(1, 137, 25s)}));
  EXPECT_EQ(d.status.phase, "Restarting");
  std::string msg = message(d, "Restarting");
  EXPECT_EQ(msg.rfind("pod tj-1 failed with exit code 137, first; tj-0 (exit 1) failed as well", 0), 0u) << msg;
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
}

TEST(FirstFailure, AnExit1BeforeAKillFailsTheJob) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  auto d = decide(observed(j, {failed(0, 137, 20s), failed(1, 1, 25s)}));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(reason(d, "Failed"), "NonRetryableExitCode");
  EXPECT_EQ(message(d, "Failed").rfind("pod tj-1 failed with exit code 1, first", 0), 0u);
}

TEST(FirstFailure, FailuresWithinTheClockPrecisionTieAndTheRetryableOneWins) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  // Same second, or one second apart on two nodes' clocks: either order restarts.
  for (auto [a, b] : {std::pair{20s, 20s}, std::pair{21s, 20s}, std::pair{20s, 21s}}) {
    auto d = decide(observed(j, {failed(0, 1, a), failed(1, 137, b)}));
    EXPECT_EQ(d.status.phase, "Restarting") << a.count() << " " << b.count();
  }
  // Three seconds apart is not a tie.
  EXPECT_EQ(decide(observed(j, {failed(0, 1, 23s), failed(1, 137, 20s)})).status.phase, "Failed");
  // A failure with no time at all (its node lost) may have come first.
  PodView lost = pod(1, "Failed", 0, -1);
  lost.reason = "NodeLost";
  EXPECT_EQ(decide(observed(j, {failed(0, 1, 20s), lost})).status.phase, "Restarting");
}

TEST(FirstFailure, APeersCollectiveErrorGivesWayToTheRankThatExitedJustAfter) {
  auto j = running_job(3);
  j.restart_policy = RestartPolicy::ExitCode;
  // Rank 2 exits 1 (a bug); its sockets close first, so ranks 0 and 1 record 77 before its
  // container ends.
  auto d = decide(observed(j, {failed(0, lockstep::contract::kExitCollective, 30s),
                               failed(1, lockstep::contract::kExitCollective, 30s), failed(2, 1, 26s)}));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(message(d, "Failed").rfind("pod tj-2 failed with exit code 1, first; tj-0 (exit 77), tj-1 (exit 77)", 0),
            0u)
      << message(d, "Failed");
  // A stall long before an exit 1 is the cause: the 1 came from the broken gang.
  auto late = decide(observed(j, {failed(0, lockstep::contract::kExitStall, 200s), failed(1, 1, 100s),
                                  pod(2, "Running")}));
  EXPECT_EQ(late.status.phase, "Restarting");
}

TEST(FirstFailure, APermanentVerdictWaitsForPeersStillRunning) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  Options opt;
  opt.failure_timing.settle = 5s;
  // Pod 0 exited 1 a second ago; pod 1 still shows Running (its OOM kill may not be reported yet).
  auto wait = decide(observed(j, {failed(0, 1, 1s), pod(1, "Running")}), opt);
  EXPECT_EQ(wait.status.phase, "Running");
  EXPECT_TRUE(wait.delete_pods.empty());
  EXPECT_TRUE(wait.create_pods.empty());
  EXPECT_TRUE(wait.events.empty());
  ASSERT_TRUE(wait.requeue_after.has_value());
  EXPECT_EQ(*wait.requeue_after, 4s);
  // Pod 1's status arrives: OOM-killed in the same second. Restart.
  auto both = decide(observed(j, {failed(0, 1, 1s), failed(1, 137, 1s)}), opt);
  EXPECT_EQ(both.status.phase, "Restarting");
  // Nothing arrives within the window: the job fails.
  auto in = observed(j, {failed(0, 1, 1s), pod(1, "Running")});
  in.now = kNow + 4s;
  auto final = decide(in, opt);
  EXPECT_EQ(final.status.phase, "Failed");
  EXPECT_EQ(final.delete_pods, std::vector<std::string>{"tj-1"});
  // A retryable cause does not wait.
  EXPECT_EQ(decide(observed(j, {failed(0, 137, 1s), pod(1, "Running")}), opt).status.phase, "Restarting");
}

// Note [Partly succeeded]
TEST(PartlySucceeded, AJobStaysRunningWhenOnePodFinishesFirst) {
  auto d = decide(observed(running_job(), {pod(0, "Succeeded", 0, 0), pod(1, "Running")}));
  EXPECT_EQ(d.status.phase, "Running");
  EXPECT_TRUE(d.events.empty());
  EXPECT_TRUE(d.create_pods.empty());
  EXPECT_EQ(d.status.nodes.succeeded, 1);
  // So a pod that then vanishes still restarts the gang.
  auto gone = decide(observed(running_job(), {pod(0, "Succeeded", 0, 0)}));
  EXPECT_EQ(gone.status.phase, "Restarting");
  // And a gang never seen Running whose first pod already finished is Running, not Pending.
  auto pending = job();
  pending.status.phase = "Pending";
  auto late = decide(observed(pending, {pod(0, "Succeeded", 0, 0), pod(1, "Running")}));
  EXPECT_EQ(late.status.phase, "Running");
}

TEST(PartlySucceeded, AFailureAfterASuccessRerunsTheWholeGang) {
  auto d = decide(observed(running_job(), {pod(0, "Succeeded", 0, 0), failed(1, 137, 1s)}));
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_NE(message(d, "Restarting").find("tj-0 had succeeded; every rank reruns from the last checkpoint"),
            std::string::npos)
      << message(d, "Restarting");
}

// #13: under a gang scheduler, the condition says what its message means for the job.
TEST(BlockedPods, AGangThatDoesNotFitSaysNoPodStartsUntilAllFit) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow);
  j.scheduler_name = "scheduler-plugins-scheduler";
  PodView p0 = pod(0, "Pending"), p1 = pod(1, "Pending");
  p0.unschedulable_message = p1.unschedulable_message = "0/1 nodes are available: 1 optimistic rejection in PostFilter.";
  auto d = decide(observed(j, {p0, p1}));
  EXPECT_EQ(reason(d, "PodsBlocked"), "Unschedulable");
  EXPECT_EQ(message(d, "PodsBlocked"),
            "pod tj-0 cannot be scheduled: 0/1 nodes are available: 1 optimistic rejection in PostFilter. (gang "
            "scheduling by scheduler-plugins-scheduler: none of the 2 pods starts until all of them fit)");
  j.gang = false;  // the default scheduler's words stand alone
  EXPECT_EQ(message(decide(observed(j, {p0, p1})), "PodsBlocked"),
            "pod tj-0 cannot be scheduled: 0/1 nodes are available: 1 optimistic rejection in PostFilter.");
}

// #12: a pod that cannot start is named with its reason, not left as a silent Pending.
TEST(BlockedPods, AnUnschedulablePodIsNamedWithTheSchedulersMessage) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow);
  PodView p0 = pod(0, "Pending");
  p0.unschedulable_message = "0/1 nodes are available: 1 Insufficient cpu.";
  auto d = decide(observed(j, {p0, pod(1, "Running")}));
  EXPECT_EQ(d.status.phase, "Pending");
  EXPECT_EQ(reason(d, "PodsBlocked"), "Unschedulable");
  EXPECT_EQ(message(d, "PodsBlocked"), "pod tj-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.");
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].type, "Warning");
  EXPECT_EQ(d.events[0].reason, "PodsBlocked");
  // Still blocked on the next pass: no second Event. Once both run, the condition clears.
  j.status = d.status;
  EXPECT_TRUE(decide(observed(j, {p0, pod(1, "Running")})).events.empty());
  auto ran = decide(observed(j, {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(ran.status.phase, "Running");
  ASSERT_NE(cond(ran, "PodsBlocked"), nullptr);
  EXPECT_EQ(cond(ran, "PodsBlocked")->status, "False");
}

TEST(BlockedPods, AnImageThatCannotBePulledIsNamedButPullingIsNot) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow);
  PodView p1 = pod(1, "Pending");
  p1.waiting_reason = "ContainerCreating";
  EXPECT_EQ(cond(decide(observed(j, {pod(0, "Running"), p1})), "PodsBlocked"), nullptr);
  p1.waiting_reason = "ImagePullBackOff";
  p1.waiting_message = "Back-off pulling image \"lockstep/trainer:nope\"";
  auto d = decide(observed(j, {pod(0, "Running"), p1}));
  EXPECT_EQ(reason(d, "PodsBlocked"), "ImagePullBackOff");
  EXPECT_EQ(message(d, "PodsBlocked"),
            "pod tj-1 cannot start: ImagePullBackOff: Back-off pulling image \"lockstep/trainer:nope\"");
}

TEST(FailureMessage, QuotesTheLastLineOfTheTerminationMessage) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  PodView p0 = failed(0, 64, 10s);
  p0.termination_message = "step 0\nlockstep-trainer: --steps must be an integer >= 1, got 'ten'\n\n";
  auto d = decide(observed(j, {p0, failed(1, 64, 10s)}));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(message(d, "Failed").rfind("pod tj-0 failed with exit code 64: \"lockstep-trainer: --steps must be an integer "
                                       ">= 1, got 'ten'\"",
                                       0),
            0u)
      << message(d, "Failed");
  p0.termination_message = std::string(1000, 'x');
  EXPECT_EQ(describe_failure(p0).size(), std::string("pod tj-0 failed with exit code 64: \"").size() + 300 + 4);
}

TEST(RestartDelay, DoublesUpToTheCap) {
  Options o;
  o.restart_backoff = 10s;
  o.restart_backoff_max = 60s;
  EXPECT_EQ(restart_delay(1, o), 10s);
  EXPECT_EQ(restart_delay(2, o), 20s);
  EXPECT_EQ(restart_delay(3, o), 40s);
  EXPECT_EQ(restart_delay(4, o), 60s);
  EXPECT_EQ(restart_delay(30, o), 60s);
}

// See Note [Job isolation]: the policy follows spec.isolation whatever the phase.
TEST(Isolation, ThePolicyIsCreatedWhileAskedForAndDeletedWhenNot) {
  for (const char* phase : {"", "Running", "Succeeded", "Suspended"}) {
    SCOPED_TRACE(phase);
    auto j = job();
    j.status.phase = phase;
    if (j.status.finished()) j.status.completion_time = format_time(kNow);
    j.suspend = std::string(phase) == "Suspended";
    j.isolation = Isolation::NetworkPolicy;
    auto in = observed(j);
    EXPECT_TRUE(decide(in).create_network_policy);
    in.network_policy_uid = "np-1";
    auto kept = decide(in);
    EXPECT_FALSE(kept.create_network_policy);
    EXPECT_EQ(kept.delete_network_policy_uid, "");
    in.job.isolation = Isolation::None;
    EXPECT_EQ(decide(in).delete_network_policy_uid, "np-1");
    in.network_policy_uid = "";
    auto none = decide(in);
    EXPECT_FALSE(none.create_network_policy);
    EXPECT_EQ(none.delete_network_policy_uid, "");
  }
  auto deleting = job();
  deleting.isolation = Isolation::NetworkPolicy;
  deleting.deleting = true;  // the garbage collector's, with the job
  EXPECT_FALSE(decide(observed(deleting)).create_network_policy);
}

// See Note [Backoff reset]: the restart delay doubles only over restarts in a row, counted since the
// last attempt that ran for the stable stretch.
namespace {

Options backoff_options() {
  Options o;
  o.restart_backoff = 10s;
  o.restart_backoff_max = 300s;
  o.restart_backoff_reset = 10min;
  return o;
}

// `j` after its next attempt has been Running for `ran` (its pods of attempt status.restarts).
void ran_for(JobView& j, std::chrono::seconds ran) {
  j.status.phase = "Running";
  for (auto& c : j.status.conditions)
    if (c.type == "Running") c = {"Running", "True", "AllNodesRunning", "", format_time(kNow - ran)};
}

// One failure of attempt status.restarts of a job that ran `ran`: the delay it gets.
std::chrono::milliseconds fail_after(JobView& j, std::chrono::seconds ran, const Options& o) {
  ran_for(j, ran);
  int attempt = j.status.restarts;
  auto d = decide(observed(j, {pod(0, "Failed", attempt, 137), pod(1, "Running", attempt)}), o);
  EXPECT_EQ(d.status.restarts, attempt + 1);
  EXPECT_EQ(d.status.phase, "Restarting");
  j.status = d.status;
  return d.requeue_after.value_or(0ms);
}

}  // namespace

TEST(BackoffReset, SixFailuresFarApartEachWaitTheBaseDelay) {
  auto o = backoff_options();
  auto j = running_job();
  j.backoff_limit = 10;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(fail_after(j, 20min, o), 10s) << "failure " << i + 1;
    EXPECT_EQ(j.status.consecutive_restarts, 1);
  }
  EXPECT_EQ(j.status.restarts, 6);
}

TEST(BackoffReset, FailuresInQuickSuccessionDouble) {
  auto o = backoff_options();
  auto j = running_job();
  j.backoff_limit = 10;
  std::vector<std::chrono::milliseconds> delays;
  for (int i = 0; i < 7; ++i) delays.push_back(fail_after(j, 1min, o));
  EXPECT_EQ(delays, (std::vector<std::chrono::milliseconds>{10s, 20s, 40s, 80s, 160s, 300s, 300s}));
  EXPECT_EQ(j.status.consecutive_restarts, 7);
}

TEST(BackoffReset, AFailureAfterAStableStretchGoesBackToTheBase) {
  auto o = backoff_options();
  auto j = running_job();
  j.backoff_limit = 10;
  EXPECT_EQ(fail_after(j, 30s, o), 10s);
  EXPECT_EQ(fail_after(j, 30s, o), 20s);
  EXPECT_EQ(fail_after(j, 30s, o), 40s);
  EXPECT_EQ(fail_after(j, 9min, o), 80s) << "short of the stable stretch";
  EXPECT_EQ(fail_after(j, 10min, o), 10s) << "an attempt that ran the stable stretch";
  EXPECT_EQ(j.status.consecutive_restarts, 1);
  // The wait before the next attempt is the reset one too: 5 s into it, 5 s are left.
  for (auto& c : j.status.conditions)
    if (c.type == "Restarting") c.last_transition_time = format_time(kNow);
  auto in = observed(j);
  in.now = kNow + 5s;
  auto waiting = decide(in, o);
  EXPECT_TRUE(waiting.create_pods.empty());
  ASSERT_TRUE(waiting.requeue_after.has_value());
  EXPECT_EQ(*waiting.requeue_after, 5s);
  EXPECT_EQ(fail_after(j, 30s, o), 20s) << "and they double again from there";
}

TEST(BackoffReset, AResetOfZeroNeverResets) {
  auto o = backoff_options();
  o.restart_backoff_reset = 0s;
  auto j = running_job();
  j.backoff_limit = 10;
  EXPECT_EQ(fail_after(j, 20min, o), 10s);
  EXPECT_EQ(fail_after(j, 20min, o), 20s);
  EXPECT_EQ(fail_after(j, 20min, o), 40s);
}

TEST(BackoffReset, AnAttemptThatNeverRanCountsInTheRow) {
  auto o = backoff_options();
  auto j = running_job();
  EXPECT_EQ(fail_after(j, 20min, o), 10s);
  // Attempt 1 fails while Pending (its Running condition is False since the restart).
  auto d = decide(observed(j, {pod(0, "Failed", 1, 137), pod(1, "Pending", 1)}), o);
  EXPECT_EQ(d.status.consecutive_restarts, 2);
  EXPECT_EQ(d.requeue_after.value_or(0ms), 20s);
}

// A status written before the count existed goes on from its restarts, as the delay did then;
// the count round-trips and never exceeds the restarts.
TEST(BackoffReset, TheCountIsKeptInTheStatus) {
  auto old = JobStatus::from_json({{"phase", "Restarting"}, {"restarts", 4}});
  EXPECT_EQ(old.consecutive_restarts, 4);
  EXPECT_EQ(old.node_lost_restarts, 0);
  JobStatus s;
  s.restarts = 5;
  s.consecutive_restarts = 2;
  s.node_lost_restarts = 1;
  auto back = JobStatus::from_json(s.to_json());
  EXPECT_EQ(back.consecutive_restarts, 2);
  EXPECT_EQ(back.node_lost_restarts, 1);
  EXPECT_TRUE(back == s);
  s.consecutive_restarts = 3;
  EXPECT_FALSE(back == s);
  auto bad = JobStatus::from_json({{"restarts", 2}, {"consecutiveRestarts", 900}, {"nodeLostRestarts", -1}});
  EXPECT_EQ(bad.consecutive_restarts, 2);
  EXPECT_EQ(bad.node_lost_restarts, 0);
  // See Note [Lost-node restarts in a row]: the lost-node restarts in a row are some of them.
  s.consecutive_node_lost_restarts = 1;
  EXPECT_EQ(JobStatus::from_json(s.to_json()).consecutive_node_lost_restarts, 1);
  EXPECT_EQ(old.consecutive_node_lost_restarts, 0);
  auto forged = JobStatus::from_json({{"restarts", 5}, {"nodeLostRestarts", 2}, {"consecutiveNodeLostRestarts", 40}});
  EXPECT_EQ(forged.consecutive_node_lost_restarts, 2);
}

// JobStatus's == is defaulted (C++20), and it decides whether the operator writes a status: so
// every field the status holds, changed alone, must read back as a different status. A field
// from_json forgot, or one a hand-written == left out, would read back equal and never be
// written.
TEST(StatusWrites, EveryFieldOfTheStatusDecidesAWrite) {
  JobStatus s;
  s.phase = "Running";
  s.conditions = {{"Running", "True", "AllRunning", "every pod runs", "2026-11-27T08:00:00Z"}};
  s.nodes = {4, 3, 2, 1};
  s.restarts = 9;
  s.consecutive_restarts = 5;
  s.node_lost_restarts = 3;
  s.consecutive_node_lost_restarts = 2;
  s.lost_nodes = {"node-a", "node-b"};
  s.in_place_restarts = 7;
  s.current_attempt_in_place_restarts = 2;
  s.start_time = "2026-11-27T07:00:00Z";
  s.completion_time = "2026-11-27T09:00:00Z";
  s.observed_generation = 12;
  s.progress = Progress{120, 1000, 5432.0, 95};
  s.stragglers = {2, {"node-c", "node-d"}};
  const json written = s.to_json();
  ASSERT_TRUE(JobStatus::from_json(written) == s) << written.dump();
  const json flat = written.flatten();
  size_t checked = 0;
  for (const auto& [path, value] : flat.items()) {
    if (path == "/progress/steps") continue;  // "120/1000" for kubectl's column, derived from step and totalSteps
    json changed = flat;
    if (value.is_number_integer()) changed[path] = value.get<long long>() - 1;
    else if (value.is_string()) changed[path] = value.get<std::string>() + "x";
    else FAIL() << path << " holds " << value.dump() << ": teach this test to change it";
    EXPECT_FALSE(JobStatus::from_json(changed.unflatten()) == s)
        << path << " changed, and the status reads back equal: such a change would never be written";
    ++checked;
  }
  EXPECT_GE(checked, 20u) << written.dump();
}

// See Note [Lost nodes]: a pod of the current attempt, not finished, on a node that is NotReady,
// unreachable, deleted, or tainted NoExecute without a toleration for ever, restarts the gang
// at once; its pods on lost nodes are force-deleted.
namespace {

PodView on(PodView p, const std::string& node) {
  p.node_name = node;
  return p;
}

NodeView node(const std::string& name, const std::string& ready = "True", const std::string& reason = "",
              const std::string& message = "") {
  NodeView n;
  n.name = name;
  n.ready = ready;
  n.ready_reason = reason;
  n.ready_message = message;
  n.ready_since = "2026-11-28T12:03:04Z";
  return n;
}

// A running gang of two: tj-0 on worker-1 (Ready), tj-1 on worker-2, as `worker2` says.
Observed gang_on(const NodeView& worker2, JobView j = running_job()) {
  auto in = observed(std::move(j), {on(pod(0, "Running"), "worker-1"), on(pod(1, "Running"), "worker-2")});
  in.watch_nodes = true;
  in.nodes = {{"worker-1", node("worker-1")}, {"worker-2", worker2}};
  return in;
}

std::string restarted_message(const Decision& d) { return message(d, "Restarted"); }

void expect_node_lost_restart(const Decision& d, const std::string& why) {
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.node_lost_restarts, 1);
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_EQ(d.delete_pod_force, (std::vector<bool>{false, true})) << "only the pod on the lost node is forced";
  EXPECT_EQ(reason(d, "Restarted"), "NodeLost");
  EXPECT_EQ(reason(d, "Restarting"), "NodeLost");
  std::string want = "pod tj-1 (rank 1) lost its node: " + why;
  EXPECT_NE(restarted_message(d).find(want), std::string::npos) << restarted_message(d);
  ASSERT_FALSE(d.events.empty());
  EXPECT_EQ(d.events.back().type, "Warning");
  EXPECT_EQ(d.events.back().reason, "NodeLost");
  EXPECT_NE(d.events.back().message.find(want), std::string::npos) << d.events.back().message;
  EXPECT_NE(d.events.back().message.find("restarting the gang as attempt 1"), std::string::npos) << d.events.back().message;
}

}  // namespace

TEST(LostNodes, ANotReadyNodeRestartsTheGangAndForceDeletesItsPod) {
  auto d = decide(gang_on(node("worker-2", "False", "KubeletNotReady", "container runtime is down")));
  expect_node_lost_restart(
      d, "node worker-2 is NotReady (Ready=False, KubeletNotReady: container runtime is down) since 2026-11-28T12:03:04Z");
}

TEST(LostNodes, AnUnreachableNodeRestartsTheGang) {
  auto d = decide(gang_on(node("worker-2", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")));
  expect_node_lost_restart(d, "node worker-2 is NotReady (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting "
                              "node status.) since 2026-11-28T12:03:04Z");
}

TEST(LostNodes, ADeletedNodeRestartsTheGang) {
  NodeView gone;
  gone.name = "worker-2";
  gone.gone = true;
  expect_node_lost_restart(decide(gang_on(gone)), "node worker-2 is gone (deleted)");
}

TEST(LostNodes, AnUntoleratedNoExecuteTaintRestartsTheGang) {
  NodeView tainted = node("worker-2");
  tainted.no_execute = {{"example.com/gpu-unhealthy", "true"}};
  expect_node_lost_restart(decide(gang_on(tainted)),
                           "node worker-2 has taint example.com/gpu-unhealthy=true:NoExecute that pod tj-1 does not "
                           "tolerate");
}

TEST(LostNodes, ATaintThePodToleratesForEverChangesNothing) {
  NodeView tainted = node("worker-2");
  tainted.no_execute = {{"example.com/gpu-unhealthy", "true"}, {"example.com/maintenance", ""}};
  struct Case {
    std::vector<Toleration> tolerations;
    bool restarts;
  };
  const Toleration gpu_equal{"example.com/gpu-unhealthy", false, "true", std::nullopt};
  const Toleration maintenance{"example.com/maintenance", true, "", std::nullopt};
  const Toleration everything{"", true, "", std::nullopt};
  for (const auto& c : {Case{{gpu_equal, maintenance}, false}, Case{{everything}, false},
                        Case{{gpu_equal}, true},  // the second taint is not tolerated
                        Case{{Toleration{"example.com/gpu-unhealthy", false, "false", std::nullopt}, maintenance}, true},
                        Case{{}, true}}) {
    auto in = gang_on(tainted);
    in.pods[1].tolerations = c.tolerations;
    auto d = decide(in);
    EXPECT_EQ(d.status.phase, c.restarts ? "Restarting" : "Running") << ::testing::PrintToString(c.tolerations.size());
    if (!c.restarts) {
      EXPECT_TRUE(d.delete_pods.empty());
      EXPECT_EQ(cond(d, "Restarted"), nullptr);
      EXPECT_TRUE(d.events.empty());
    }
  }
}

// A toleration with tolerationSeconds tolerates only until the taint manager evicts the pod.
TEST(LostNodes, ATolerationWithTolerationSecondsIsNoToleration) {
  NodeView tainted = node("worker-2");
  tainted.no_execute = {{"example.com/gpu-unhealthy", "true"}};
  auto in = gang_on(tainted);
  in.pods[1].tolerations = {{"example.com/gpu-unhealthy", true, "", 300}};
  auto d = decide(in);
  expect_node_lost_restart(d, "node worker-2 has taint example.com/gpu-unhealthy=true:NoExecute that pod tj-1 does not "
                              "tolerate (its toleration has tolerationSeconds: it would be evicted)");
}

// A pod with more tolerations than the cache keeps is taken to tolerate every taint.
TEST(LostNodes, APodWithTooManyTolerationsToJudgeIsTakenToTolerate) {
  NodeView tainted = node("worker-2");
  tainted.no_execute = {{"example.com/gpu-unhealthy", "true"}};
  auto in = gang_on(tainted);
  in.pods[1].tolerations_cut = true;
  EXPECT_EQ(decide(in).status.phase, "Running");
}

TEST(LostNodes, APodNotYetScheduledOrOnANodeNotKnownIsNotJudged) {
  auto j = job();
  j.status.phase = "Pending";
  j.status.start_time = format_time(kNow - 5s);
  auto in = observed(j, {pod(0, "Pending"), on(pod(1, "Pending"), "worker-9")});
  in.watch_nodes = true;
  in.nodes = {{"worker-2", node("worker-2", "False")}};
  auto d = decide(in);
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_TRUE(d.delete_pods.empty());
  // A node that has no Ready condition yet (it has just registered) is not lost either.
  in.pods[1].node_name = "worker-2";
  in.nodes["worker-2"] = node("worker-2", "");
  EXPECT_TRUE(decide(in).delete_pods.empty());
}

TEST(LostNodes, AFinishedPodOnALostNodeChangesNothing) {
  auto in = gang_on(node("worker-2", "Unknown", "NodeStatusUnknown"));
  in.pods[1].phase = "Succeeded";
  in.pods[1].exit_code = 0;
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Running");
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_TRUE(d.delete_pods.empty());
}

// See Note [Pods that do not terminate]: a pod of an earlier attempt stuck Terminating on a lost
// node is force-deleted once; one on a healthy node keeps its graceful deletion.
TEST(LostNodes, AStalePodTerminatingOnALostNodeIsForceDeleted) {
  auto j = running_job();
  j.status.phase = "Restarting";
  j.status.restarts = 1;
  j.status.conditions.push_back({"Restarting", "True", "GangRestart", "", format_time(kNow - 20s)});
  PodView stuck = on(pod(0, "Running", 0), "worker-2");
  stuck.deleting = true;
  stuck.deletion_due = kNow - 5s;
  PodView going = on(pod(1, "Running", 0), "worker-1");
  going.deleting = true;
  going.deletion_due = kNow + 25s;
  auto in = observed(j, {stuck, going});
  in.watch_nodes = true;
  in.nodes = {{"worker-1", node("worker-1")}, {"worker-2", node("worker-2", "Unknown", "NodeStatusUnknown")}};
  auto d = decide(in);
  EXPECT_EQ(d.delete_pods, std::vector<std::string>{"tj-0"});
  EXPECT_EQ(d.delete_pod_force, std::vector<bool>{true});
  EXPECT_EQ(d.delete_pod_uids, std::vector<std::string>{"uid-0-0"});
  EXPECT_TRUE(d.create_pods.empty()) << "the next attempt still waits for it to go";
  // Once forced, it is not deleted again.
  in.pods[0].deleted_at_once = true;
  EXPECT_TRUE(decide(in).delete_pods.empty());
  // With the node watch off, nothing is forced.
  in.pods[0].deleted_at_once = false;
  in.watch_nodes = false;
  EXPECT_TRUE(decide(in).delete_pods.empty());
}

TEST(LostNodes, WithTheNodeWatchOffNothingHappens) {
  auto in = gang_on(node("worker-2", "False", "KubeletNotReady"));
  in.watch_nodes = false;
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Running");
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_TRUE(d.delete_pods.empty());
  EXPECT_TRUE(d.events.empty());
}

TEST(LostNodes, RestartPolicyNeverFailsTheJobAndForceDeletesThePodThere) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::Never;
  auto d = decide(gang_on(node("worker-2", "False", "KubeletNotReady"), j));
  EXPECT_EQ(d.status.phase, "Failed");
  EXPECT_EQ(reason(d, "Failed"), "NodeLost");
  EXPECT_NE(message(d, "Failed").find("node worker-2 is NotReady"), std::string::npos) << message(d, "Failed");
  EXPECT_NE(message(d, "Failed").find("restartPolicy=Never"), std::string::npos);
  // cleanPodPolicy Running: both running pods go, the one on the lost node at once.
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_EQ(d.delete_pod_force, (std::vector<bool>{false, true}));
}

// See Note [Lost nodes]: restarts for lost nodes do not count toward backoffLimit; other failures
// count as before, and the messages say which is which.
TEST(LostNodes, RestartsForLostNodesDoNotCountTowardTheBackoffLimit) {
  auto j = running_job();
  j.backoff_limit = 1;
  j.status.restarts = 1;
  j.status.node_lost_restarts = 1;
  auto in = gang_on(node("worker-2", "False"), j);
  for (auto& p : in.pods) p.attempt = 1;
  auto again = decide(in);
  EXPECT_EQ(again.status.phase, "Restarting") << "a second lost node is not past backoffLimit 1";
  EXPECT_EQ(again.status.restarts, 2);
  EXPECT_EQ(again.status.node_lost_restarts, 2);
  EXPECT_NE(message(again, "Restarted").find("as attempt 2 (0 of spec.runPolicy.backoffLimit=1; restarts for lost nodes "
                                             "do not count)"),
            std::string::npos)
      << message(again, "Restarted");
  // An exit 137 is the first counted restart; the next one is past the limit.
  auto failed_once = decide(observed(j, {pod(0, "Failed", 1, 137), pod(1, "Running", 1)}));
  EXPECT_EQ(failed_once.status.phase, "Restarting");
  j.status = failed_once.status;
  ran_for(j, 1min);
  auto past = decide(observed(j, {pod(0, "Failed", 2, 137), pod(1, "Running", 2)}));
  EXPECT_EQ(past.status.phase, "Failed");
  EXPECT_EQ(reason(past, "Failed"), "BackoffLimitExceeded");
  EXPECT_NE(message(past, "Failed").find("1 gang restart(s) reached spec.runPolicy.backoffLimit=1 (besides 1 for lost "
                                         "nodes, which do not count)"),
            std::string::npos)
      << message(past, "Failed");
}

// A lost node is the cause even when a peer's failure is reported first: the peer's collective
// broke because of it.
TEST(LostNodes, ALostNodeIsTheCauseBeforeAPeersFailure) {
  auto j = running_job();
  j.restart_policy = RestartPolicy::ExitCode;
  auto in = gang_on(node("worker-2", "Unknown", "NodeStatusUnknown"), j);
  in.pods[0] = on(failed(0, lockstep::contract::kExitCollective, 2s), "worker-1");
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(reason(d, "Restarted"), "NodeLost");
}

// See Note [Lost nodes]: a lost node's restart waits no backoff and leaves the count of restarts in
// a row alone; the next attempt's pods prefer other nodes than the lost one, until it runs.
TEST(LostNodes, TheNextAttemptStartsAtOnceAndPrefersOtherNodes) {
  auto o = backoff_options();
  auto j = running_job();
  j.status.consecutive_restarts = 2;  // two crashes in a row before
  j.status.restarts = 2;
  auto in = gang_on(node("worker-2", "Unknown", "NodeStatusUnknown"), j);
  for (auto& p : in.pods) p.attempt = 2;
  auto d = decide(in, o);
  EXPECT_EQ(d.status.restarts, 3);
  EXPECT_EQ(d.status.consecutive_restarts, 2) << "a lost node is not the program's failure";
  EXPECT_EQ(d.status.lost_nodes, (std::vector<std::string>{"worker-2"}));
  EXPECT_LE(d.requeue_after.value_or(1h), 1ms) << "no restart delay";

  // The old pods gone: the next attempt's pods are made at once, avoiding worker-2.
  JobView next = j;
  next.status = d.status;
  auto create = decide(observed(next, {}), o);
  EXPECT_EQ(create.create_pods, (std::vector<int>{0, 1})) << "no backoff wait";
  EXPECT_EQ(create.avoid_nodes, (std::vector<std::string>{"worker-2"}));
  json made = pod_manifest(next, 1, 3, {}, "", create.avoid_nodes);
  json pref = made["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(pref.size(), 1u) << made["spec"].dump();
  EXPECT_EQ(pref[0]["weight"], 100);
  EXPECT_EQ(pref[0]["preference"]["matchExpressions"][0]["operator"], "NotIn");
  EXPECT_EQ(pref[0]["preference"]["matchExpressions"][0]["values"], json::array({"worker-2"}));

  // Once that attempt runs, the list is cleared; the status round-trips it meanwhile.
  EXPECT_EQ(JobStatus::from_json(d.status.to_json()).lost_nodes, d.status.lost_nodes);
  next.status = create.status;
  auto running = decide(observed(next, {on(pod(0, "Running", 3), "worker-1"), on(pod(1, "Running", 3), "worker-3")}), o);
  EXPECT_EQ(running.status.phase, "Running");
  EXPECT_TRUE(running.status.lost_nodes.empty());

  // A crash of the program still waits the backoff and clears nothing it should not.
  auto crash = decide(observed(running_job(), {pod(0, "Failed", 0, 137), pod(1, "Running", 0)}), o);
  EXPECT_EQ(crash.requeue_after.value_or(0ms), 10s);
  EXPECT_TRUE(crash.status.lost_nodes.empty());
}

// Note [Lost nodes], a silent node: the surviving agents exit 76 naming the rank whose agent
// went silent; that pod still runs in the API (its node not yet NotReady), so it is
// force-deleted, the gang restarts with NodeLost naming its node, and the next attempt
// prefers other nodes.
TEST(LostNodes, AnAgentsReportOfASilentPeerTakesThatPodsNodeForLost) {
  auto in = gang_on(node("worker-2"));  // still Ready
  PodView survivor = on(failed(0, lockstep::contract::kExitRendezvous, 1s), "worker-1");
  survivor.termination_message =
      "lockstep-silent-peer node=1\nlockstep-agent: node 1's agent (10.244.2.5:41234) said nothing for 6.0 s (more than "
      "--peer-timeout, 6 s); treating it as lost (its node frozen, powered off or cut off)\n";
  in.pods[0] = survivor;
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(reason(d, "Restarted"), "NodeLost");
  EXPECT_EQ(d.status.node_lost_restarts, 1);
  EXPECT_EQ(d.status.lost_nodes, (std::vector<std::string>{"worker-2"}));
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_EQ(d.delete_pod_force, (std::vector<bool>{false, true})) << "only the silent pod is forced";
  EXPECT_NE(message(d, "Restarted").find("pod tj-1 (rank 1) on node worker-2 went silent: pod tj-0 failed with exit code 76"),
            std::string::npos)
      << message(d, "Restarted");
  ASSERT_FALSE(d.events.empty());
  EXPECT_NE(d.events.back().message.find("worker-2"), std::string::npos) << d.events.back().message;

  // Not read: the node watch off; a line that is not first or not exact; a rank out of the job;
  // the named pod already finished. Then it is an ordinary failure, judged as ever (here a
  // consequence's exit 76 waits for its peers' status): no node is taken for lost.
  auto taken_for_lost = [&](const std::string& message, bool watch = true, const std::string& peer_phase = "Running") {
    auto o = gang_on(node("worker-2"));
    PodView s = survivor;
    s.termination_message = message;
    o.pods[0] = s;
    o.pods[1].phase = peer_phase;
    o.watch_nodes = watch;
    auto e = decide(o);
    return reason(e, "Restarted") == "NodeLost" || !e.status.lost_nodes.empty() ||
           std::count(e.delete_pod_force.begin(), e.delete_pod_force.end(), true) > 0;
  };
  EXPECT_TRUE(taken_for_lost(survivor.termination_message)) << "the check itself";
  EXPECT_FALSE(taken_for_lost(survivor.termination_message, false));
  EXPECT_FALSE(taken_for_lost(survivor.termination_message, true, "Succeeded"));
  EXPECT_FALSE(taken_for_lost("lockstep-agent: x\nlockstep-silent-peer node=1\n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=1 \n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=01\n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=7\n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=-1\n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=99999\n"));
  EXPECT_FALSE(taken_for_lost("lockstep-silent-peer node=0\n")) << "the reporter itself";
  EXPECT_EQ(silent_peer("lockstep-silent-peer node=0"), 0);
  EXPECT_EQ(silent_peer("lockstep-silent-peer node=12\nrest"), 12);
  EXPECT_EQ(silent_peer(""), std::nullopt);
}

// See Note [Lost nodes]: the agents' word names a silent pod only with the agent's own exit code,
// and only a pod that runs: one that never started, or is already being deleted, is left as
// the failure it is.
TEST(LostNodes, ASilentPeerNeedsTheAgentsExitCodeAndARunningPod) {
  auto judged_lost = [](int exit_code, const std::string& peer_phase, bool peer_deleting) {
    auto in = gang_on(node("worker-2"));
    PodView survivor = on(failed(0, exit_code, 1s), "worker-1");
    survivor.termination_message = "lockstep-silent-peer node=1\nlockstep-agent: node 1's agent said nothing\n";
    in.pods[0] = survivor;
    in.pods[1].phase = peer_phase;
    in.pods[1].deleting = peer_deleting;
    auto d = decide(in);
    return reason(d, "Restarted") == "NodeLost" || std::count(d.delete_pod_force.begin(), d.delete_pod_force.end(), true) > 0;
  };
  EXPECT_TRUE(judged_lost(lockstep::contract::kExitRendezvous, "Running", false)) << "the check itself";
  EXPECT_FALSE(judged_lost(1, "Running", false)) << "a program's own exit 1 with a forged line";
  EXPECT_FALSE(judged_lost(137, "Running", false));
  EXPECT_FALSE(judged_lost(lockstep::contract::kExitRendezvous, "Pending", false)) << "it never ran";
  EXPECT_FALSE(judged_lost(lockstep::contract::kExitRendezvous, "Running", true)) << "already being deleted";
}

// #40 item 3: lost-node restarts in a row back off and are capped (Note [Lost-node restarts in
// a row]); a pod that never ran on its node is blocked, not lost; a template that sets nodeName
// makes no pod (Note [Pods placed by hand]). Each trigger is driven through the real decide()
// over simulated time, against a cluster that does the worst it can: every pod the operator
// creates is put back where it fails again (bound to the bad node and running there, or failed
// with a forged line) and every deletion is confirmed at once.
namespace {

// What the cluster makes of a pod the operator has just created, at `now`.
using Place = std::function<void(PodView&, Time now)>;

struct Simulation {
  Observed in;
  Options opt = backoff_options();
  Place place;
  std::vector<Time> restarts_at;  // when each gang restart was decided
  int passes = 0, creates = 0, force_deletes = 0, events = 0;
  std::map<std::string, int> events_by_reason;

  Simulation(JobView j, std::map<std::string, NodeView> nodes, Place p) : place(std::move(p)) {
    in = observed(std::move(j));
    in.watch_nodes = true;
    in.nodes = std::move(nodes);
  }

  Decision pass() {
    ++passes;
    Decision d = decide(in, opt);
    for (size_t i = 0; i < d.delete_pods.size(); ++i) {
      force_deletes += d.delete_pod_force[i] ? 1 : 0;
      std::erase_if(in.pods, [&](const PodView& p) { return p.name == d.delete_pods[i]; });  // confirmed at once
    }
    if (d.status.restarts > in.job.status.restarts) restarts_at.push_back(in.now);
    in.job.status = d.status;
    for (int i : d.create_pods) {
      PodView p = pod(i, "Pending", d.status.restarts);
      p.uid += "-" + std::to_string(creates++);
      place(p, in.now);
      in.pods.push_back(p);
    }
    events += static_cast<int>(d.events.size());
    for (const auto& e : d.events) ++events_by_reason[e.reason];
    return d;
  }
  // A pass every millisecond for `span` (each create, delete and status write brings one), or
  // until the job finishes.
  void run_for(std::chrono::milliseconds span) {
    for (const Time end = in.now + span; in.now < end && !in.job.status.finished(); in.now += 1ms) pass();
  }
  // Passes as the controller makes them: 1 ms after a pass that changed something, else when
  // the decision asks to be requeued; until the job finishes or `limit` has passed.
  void run_until_finished(std::chrono::milliseconds limit) {
    for (const Time end = in.now + limit; in.now < end && !in.job.status.finished();) {
      Decision d = pass();
      if (!d.create_pods.empty() || !d.delete_pods.empty() || d.status_changed) in.now += 1ms;
      else if (d.requeue_after) in.now += *d.requeue_after;
      else break;
    }
  }
  // The job's condition of `type` now: its reason and message ("" when it has none).
  std::string why(const std::string& type) const {
    const Condition* c = in.job.status.condition(type);
    return c ? c->reason : "";
  }
  std::string said(const std::string& type) const {
    const Condition* c = in.job.status.condition(type);
    return c ? c->message : "";
  }
  double seconds_between_restarts(size_t k) const {  // between restart k and k+1 (from 0)
    return std::chrono::duration<double>(restarts_at[k + 1] - restarts_at[k]).count();
  }
};

// The restarts Note [Lost-node restarts in a row] allows in `span` from the first: the first's
// attempt starts at once, so the second can follow at once; the n-th's attempt (n >= 2) waits
// restart_delay(n - 1), so the (n+1)-th comes that much later, less up to a second (the
// conditions' times are whole seconds, so a wait can start up to a second early).
int allowed_restarts(std::chrono::milliseconds span, const Options& o) {
  int allowed = 2;
  std::chrono::milliseconds at{0};
  for (int n = 2; n < o.max_node_lost_restarts_in_a_row; ++n) {
    at += restart_delay(n - 1, o) - 1s;
    if (at >= span) break;
    ++allowed;
  }
  return allowed;
}

// Pods of the job bound to `node` and running there at once.
Place run_on(const std::string& node, std::vector<Toleration> tolerations = {}) {
  return [node, tolerations](PodView& p, Time) {
    p.node_name = node;
    p.phase = "Running";
    p.ready = true;
    p.tolerations = tolerations;
  };
}

void expect_bounded_loop(const Simulation& sim, const Options& o) {
  const int allowed = allowed_restarts(30s, o);
  EXPECT_EQ(allowed, 4) << "two at once, one after 10 s, one after 20 s more (up to 2 s earlier)";
  std::cout << "[ 30 s: " << sim.restarts_at.size() << " gang restarts (allowed " << allowed << "), " << sim.creates
            << " pod creates, " << sim.force_deletes << " force deletes, " << sim.events << " Events, in " << sim.passes
            << " passes ]\n";
  EXPECT_LE(static_cast<int>(sim.restarts_at.size()), allowed);
  ASSERT_GE(static_cast<int>(sim.restarts_at.size()), allowed - 1) << "the trigger did not restart the gang as often as it may";
  EXPECT_EQ(sim.in.job.status.restarts, static_cast<int>(sim.restarts_at.size()));
  EXPECT_EQ(sim.in.job.status.node_lost_restarts, sim.in.job.status.restarts) << "each was a lost node's";
  EXPECT_EQ(sim.in.job.status.consecutive_node_lost_restarts, sim.in.job.status.restarts);
  EXPECT_LT(sim.seconds_between_restarts(0), 0.01) << "the first of a row at once";
  EXPECT_GE(sim.seconds_between_restarts(1), 9.0) << "the second after --restart-backoff";
  EXPECT_EQ(sim.events_by_reason.at("NodeLost"), static_cast<int>(sim.restarts_at.size()));
  EXPECT_EQ(sim.events, static_cast<int>(sim.restarts_at.size())) << "no other Event";
  // Attempt 0 and one attempt after each restart but the last, whose attempt still waits.
  EXPECT_EQ(sim.creates, 2 * static_cast<int>(sim.restarts_at.size()));
  EXPECT_EQ(sim.in.job.status.phase, "Restarting");
  EXPECT_NE(sim.said("Restarted").find("the next attempt after "), std::string::npos) << sim.said("Restarted");
}

}  // namespace

TEST(LostNodeLoops, ANotReadyNodeThePodsArePutBackOnRestartsAtMostTheAllowedIn30s) {
  Simulation sim(job(), {{"bad", node("bad", "False", "KubeletNotReady", "container runtime is down")}},
                 run_on("bad", {{"node.kubernetes.io/not-ready", true, "", std::nullopt}}));
  sim.run_for(30s);
  expect_bounded_loop(sim, sim.opt);
  EXPECT_EQ(sim.force_deletes, 2 * sim.in.job.status.restarts) << "both pods were on the lost node";
}

TEST(LostNodeLoops, ATaintThePodsTolerateForAWhileRestartsAtMostTheAllowedIn30s) {
  NodeView tainted = node("bad");
  tainted.no_execute = {{"example.com/gpu-unhealthy", "true"}};
  Simulation sim(job(), {{"bad", tainted}}, run_on("bad", {{"example.com/gpu-unhealthy", true, "", 300}}));
  sim.run_for(30s);
  expect_bounded_loop(sim, sim.opt);
}

TEST(LostNodeLoops, AForgedSilentPeerLineRestartsAtMostTheAllowedIn30s) {
  // Every attempt: rank 0's program writes the line and exits 76 at once; rank 1 runs on a
  // healthy node.
  Place forge = [](PodView& p, Time now) {
    p.node_name = p.index == 0 ? "worker-1" : "worker-2";
    p.phase = p.index == 0 ? "Failed" : "Running";
    if (p.index != 0) return;
    p.exit_code = lockstep::contract::kExitRendezvous;
    p.finished_at = now;
    p.termination_message = "lockstep-silent-peer node=1\n";
  };
  Simulation sim(job(), {{"worker-1", node("worker-1")}, {"worker-2", node("worker-2")}}, forge);
  sim.run_for(30s);
  expect_bounded_loop(sim, sim.opt);
  EXPECT_EQ(sim.force_deletes, sim.in.job.status.restarts) << "the running pod on the healthy node, once a restart";
}

// The cap: past kMaxNodeLostRestartsInARow in a row the next loss fails the job, after waits
// that doubled up to --restart-backoff-max.
TEST(LostNodeLoops, PastTheCapInARowTheJobFails) {
  Simulation sim(job(), {{"bad", node("bad", "Unknown", "NodeStatusUnknown")}}, run_on("bad"));
  sim.run_until_finished(std::chrono::hours(2));
  const int cap = sim.opt.max_node_lost_restarts_in_a_row;
  EXPECT_EQ(cap, kMaxNodeLostRestartsInARow);
  EXPECT_EQ(sim.in.job.status.phase, "Failed");
  EXPECT_EQ(sim.why("Failed"), "NodeLostRestartsExceeded");
  const std::string said = sim.said("Failed");
  EXPECT_NE(said.find("restarted " + std::to_string(cap) + " times in a row for lost nodes"), std::string::npos) << said;
  EXPECT_NE(said.find("node bad is NotReady"), std::string::npos) << said;
  ASSERT_EQ(static_cast<int>(sim.restarts_at.size()), cap);
  EXPECT_EQ(sim.in.job.status.node_lost_restarts, cap);
  for (size_t k = 1; k + 1 < sim.restarts_at.size(); ++k) {
    double want = std::chrono::duration<double>(restart_delay(static_cast<int>(k), sim.opt)).count();
    EXPECT_GE(sim.seconds_between_restarts(k), want - 1.0) << "restart " << k + 2;
  }
  double total = std::chrono::duration<double>(sim.in.now - kNow).count();
  std::cout << "[ " << cap << " lost-node restarts in a row, then Failed, " << total << " s after the first pass; "
            << sim.events << " Events, " << sim.passes << " passes ]\n";
  EXPECT_GE(total, 20 * 60.0) << "the waits doubled up to the 5 min cap";
  EXPECT_EQ(sim.events_by_reason["NodeLost"], cap);
  EXPECT_EQ(sim.events_by_reason["NodeLostRestartsExceeded"], 1);
  EXPECT_TRUE(sim.in.pods.empty()) << "cleanPodPolicy Running: the last pods went";
}

// A template that sets nodeName gets no pod, however long: one PodsBlocked condition and Event.
TEST(LostNodeLoops, ATemplateNodeNameMakesNoPodAndSaysWhy) {
  JobView j = job();
  j.template_node_name = "no-such-node";
  Simulation sim(j, {}, run_on("no-such-node"));
  sim.run_for(30s);
  EXPECT_EQ(sim.creates, 0);
  EXPECT_TRUE(sim.restarts_at.empty());
  EXPECT_EQ(sim.events, 1);
  EXPECT_EQ(sim.events_by_reason["PodsBlocked"], 1);
  EXPECT_EQ(sim.why("PodsBlocked"), "TemplateNodeName");
  EXPECT_NE(sim.said("PodsBlocked").find("while spec.template.spec.nodeName is set (no-such-node)"), std::string::npos)
      << sim.said("PodsBlocked");
  // In the words of the CRD's rule, which `lockstep validate` quotes too.
  std::string rule_says;
  YAML::Node crd = YAML::LoadFile(std::string(LOCKSTEP_SOURCE_DIR) + "/crds/lockstep.dev_trainingjobs.yaml");
  for (const auto& rule : crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                             ["template"]["properties"]["spec"]["x-kubernetes-validations"])
    if (rule["rule"].as<std::string>() == "!has(self.nodeName)") rule_says = rule["message"].as<std::string>();
  ASSERT_FALSE(rule_says.empty()) << "the CRD has no rule on spec.template.spec.nodeName";
  EXPECT_NE(sim.said("PodsBlocked").find(rule_says), std::string::npos) << sim.said("PodsBlocked") << "\n" << rule_says;
  EXPECT_EQ(sim.in.job.status.phase, "Pending");
  // Once the template no longer sets it, the pods are made.
  sim.in.job.template_node_name.clear();
  EXPECT_EQ(sim.pass().create_pods, (std::vector<int>{0, 1}));
}

// A pod bound to a node that is gone (a webhook's nodeName, a node deleted before its kubelet
// started the pod) never ran: PodsBlocked, no gang restart. Once Kubernetes deletes it (the pod
// garbage collector), it is force-deleted and made again in the same attempt.
TEST(LostNodeLoops, APodThatNeverRanOnAGoneNodeIsBlockedNotRestarted) {
  NodeView gone;
  gone.name = "no-such-node";
  gone.gone = true;
  Place bind_there = [](PodView& p, Time) {
    p.node_name = "no-such-node";  // Pending: no kubelet ever starts it
  };
  Simulation sim(job(), {{"no-such-node", gone}}, bind_there);
  sim.run_for(30s);
  EXPECT_TRUE(sim.restarts_at.empty());
  EXPECT_EQ(sim.in.job.status.restarts, 0);
  EXPECT_EQ(sim.creates, 2);
  EXPECT_EQ(sim.force_deletes, 0);
  EXPECT_EQ(sim.events, 1);
  EXPECT_EQ(sim.why("PodsBlocked"), "BoundToLostNode");
  EXPECT_NE(sim.said("PodsBlocked").find("pod tj-0 never started on its node: node no-such-node is gone (deleted)"),
            std::string::npos)
      << sim.said("PodsBlocked");
  // The pod garbage collector deletes them (gracefully; no kubelet confirms it): forced, then
  // made again in attempt 0.
  for (auto& p : sim.in.pods) p.deleting = true;
  Decision d = sim.pass();
  EXPECT_EQ(d.delete_pods, (std::vector<std::string>{"tj-0", "tj-1"}));
  EXPECT_EQ(d.delete_pod_force, (std::vector<bool>{true, true}));
  d = sim.pass();
  EXPECT_EQ(d.create_pods, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.status.restarts, 0);
}

// The count in a row starts afresh after an attempt that ran for the stable stretch, whatever
// ended it; the crash count does too after a lost node's restart of such an attempt.
TEST(LostNodeLoops, AStableRunStartsTheRowAfresh) {
  auto o = backoff_options();
  JobView j = running_job();
  j.status.restarts = j.status.node_lost_restarts = j.status.consecutive_node_lost_restarts = 5;
  j.status.consecutive_restarts = 3;
  auto lose = [&](std::chrono::seconds ran) {
    JobView k = j;
    ran_for(k, ran);
    auto in = gang_on(node("worker-2", "Unknown", "NodeStatusUnknown"), k);
    for (auto& p : in.pods) p.attempt = 5;
    return decide(in, o);
  };
  auto quick = lose(1min);
  EXPECT_EQ(quick.status.consecutive_node_lost_restarts, 6);
  EXPECT_EQ(quick.status.consecutive_restarts, 3) << "a lost node is not the program's failure";
  EXPECT_EQ(quick.requeue_after.value_or(0ms), restart_delay(5, o));
  EXPECT_NE(message(quick, "Restarted").find("lost-node restart 6 in a row of at most 10, the next attempt after 2m40s"),
            std::string::npos)
      << message(quick, "Restarted");
  auto stable = lose(10min);
  EXPECT_EQ(stable.status.consecutive_node_lost_restarts, 1);
  EXPECT_EQ(stable.status.consecutive_restarts, 0);
  EXPECT_LE(stable.requeue_after.value_or(1h), 1ms);
  EXPECT_NE(message(stable, "Restarted").find("lost-node restart 1 in a row of at most 10, the next attempt at once"),
            std::string::npos)
      << message(stable, "Restarted");
  // A program's failure after a stable run starts the row of lost nodes afresh as well.
  ran_for(j, 10min);
  auto crash = decide(observed(j, {pod(0, "Failed", 5, 137), pod(1, "Running", 5)}), o);
  EXPECT_EQ(crash.status.phase, "Restarting");
  EXPECT_EQ(crash.status.consecutive_node_lost_restarts, 0);
  EXPECT_EQ(crash.status.consecutive_restarts, 1);
}
