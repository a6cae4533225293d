// reconcile/in_place and its step of decide: the agents' in-place restarts, read from rank 0's
// agent, counted into the job's status across gang attempts (Note [In-place restarts]).
#include <gtest/gtest.h>

#include "decide_inputs.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/prometheus_text.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/progress.hpp"

#include <nlohmann/json.hpp>

using namespace lockstep::reconcile;
using namespace std::chrono_literals;
using lockstep::test::kNow;  // decide_inputs.hpp (its pods also carry a uid, which no case here reads)
using lockstep::test::pod;

namespace {

const Time kRestartedAt = kNow - 12s;

// What node 0's agent serves, trimmed to the series that matter: agent-level series carry no
// rank label; the info series' rank is the failed worker's.
std::string agent_text(int restarts, int attempt = 0, bool info = true) {
  const std::string agent = "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"";
  std::string t = "# HELP lockstep_restarts_total In-place restarts in this gang attempt\n"
                  "# TYPE lockstep_restarts_total counter\n";
  t += "lockstep_restarts_total{kind=\"in_place\"," + agent + "} " + std::to_string(restarts) + "\n";
  t += "lockstep_restart_attempt{" + agent + "} " + std::to_string(attempt) + "\n";
  t += "lockstep_step{" + agent + ",rank=\"0\"} 120\n";
  if (restarts > 0 && info) {
    t += "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"," + agent + "} 1799999988.25\n";
    t += "lockstep_last_restart_info{exit_code=\"137\",kind=\"in_place\"," + agent +
         ",rank=\"3\",reason=\"WorkerFailed\"} 1\n";
  }
  return t;
}

InPlaceReading reading(int restarts, int attempt = 0) { return *parse_in_place(agent_text(restarts, attempt), attempt); }

// A job of two pods running attempt `attempt` since kNow - 60 s, with a budget of 3.
Observed running(int attempt = 0) {
  Observed in;
  in.job.name = "tj";
  in.job.ns = "ns";
  in.job.nodes = 2;
  in.job.in_place_restarts = 3;
  auto& st = in.job.status;
  st.phase = "Running";
  st.restarts = attempt;
  st.start_time = format_time(kNow - 60s);
  st.conditions.push_back({"Running", "True", "AllNodesRunning", "all 2 pods are running", format_time(kNow - 50s)});
  st.nodes = {2, 2, 0, 0};
  in.pods = {pod(0, "Running", attempt), pod(1, "Running", attempt)};
  in.service_exists = in.podgroup_exists = true;
  in.now = kNow;
  return in;
}

const Condition* restarted(const Decision& d) { return d.status.condition("Restarted"); }

std::vector<Event> events_of(const Decision& d, const std::string& reason) {
  std::vector<Event> out;
  for (const auto& e : d.events)
    if (e.reason == reason) out.push_back(e);
  return out;
}

}  // namespace

TEST(InPlace, ParsesTheAgentsSeries) {
  auto r = parse_in_place(agent_text(2), 0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->attempt, 0);
  EXPECT_EQ(r->restarts, 2);
  ASSERT_TRUE(r->last_at.has_value());
  EXPECT_EQ(format_time(*r->last_at), format_time(kRestartedAt));
  EXPECT_EQ(r->reason, "WorkerFailed");
  EXPECT_EQ(r->rank, "3");
  EXPECT_EQ(r->exit_code, "137");
  // Created at 0 when the pod starts: a reading, with no restart yet.
  auto zero = parse_in_place(agent_text(0), 0);
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(zero->restarts, 0);
  EXPECT_FALSE(zero->last_at.has_value());
  EXPECT_EQ(zero->reason, "");
  // An agent without in-place restarts, or one whose attempt is not the pod's: no reading.
  EXPECT_FALSE(parse_in_place("lockstep_step{rank=\"0\"} 3\nlockstep_restarts_total{kind=\"gang\"} 4\n", 0));
  EXPECT_FALSE(parse_in_place(agent_text(2, 1), 0));
  EXPECT_EQ(parse_in_place(agent_text(2, 1), 1)->attempt, 1);
}

TEST(InPlace, MessagesSayWhatHappenedAndWhereInTheBudget) {
  auto r = reading(2);
  EXPECT_EQ(in_place_message(r, 3),
            "rank 3 exited with code 137 (WorkerFailed); every worker restarted in place in the same pods "
            "(2 of 3 in gang attempt 0)");
  EXPECT_EQ(in_place_event_message(r, 3, 1), in_place_message(r, 3));
  EXPECT_EQ(in_place_event_message(r, 3, 2), "2 in-place restarts since the last reading; the last: " + in_place_message(r, 3));
  r.reason = "Stall";
  r.exit_code.clear();
  EXPECT_EQ(describe_in_place_cause(r), "rank 3 reported no step in time (Stall)");
  r.rank.clear();
  EXPECT_EQ(describe_in_place_cause(r), "the workers reported no step in time (Stall)");
  r.reason = "WorkerFailed";
  EXPECT_EQ(describe_in_place_cause(r), "a worker failed (WorkerFailed)");
  r.reason.clear();
  EXPECT_EQ(describe_in_place_cause(r), "the agent did not say why");
}

TEST(InPlace, NewRestartsAreCountedWithTheRestartedConditionAndOneEvent) {
  auto in = running();
  in.in_place = reading(2);  // two since the last reading
  auto d = decide(in);
  EXPECT_TRUE(d.status_changed);
  EXPECT_EQ(d.status.in_place_restarts, 2);
  EXPECT_EQ(d.status.current_attempt_in_place_restarts, 2);
  EXPECT_EQ(d.status.restarts, 0) << "an in-place restart is not a gang restart";
  EXPECT_EQ(d.status.phase, "Running");
  EXPECT_TRUE(d.delete_pods.empty());
  EXPECT_TRUE(d.create_pods.empty());
  const Condition* c = restarted(d);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->reason, "InPlaceRestart");
  EXPECT_EQ(c->message, in_place_message(*in.in_place, 3));
  EXPECT_EQ(c->last_transition_time, format_time(kRestartedAt)) << "the restart's own time, not the reading's";
  auto ev = events_of(d, "InPlaceRestart");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, "Warning");
  EXPECT_EQ(ev[0].message, in_place_event_message(*in.in_place, 3, 2));
  EXPECT_EQ(d.status.to_json()["inPlaceRestarts"], 2);
  EXPECT_EQ(d.status.to_json()["currentAttemptInPlaceRestarts"], 2);

  // The same reading again: nothing new, nothing written, no Event.
  in.job.status = d.status;
  auto again = decide(in);
  EXPECT_FALSE(again.status_changed);
  EXPECT_TRUE(again.events.empty());

  // One more: one Event, without a count.
  in.in_place = reading(3);
  in.now = kNow + 30s;
  auto third = decide(in);
  EXPECT_EQ(third.status.in_place_restarts, 3);
  ASSERT_EQ(events_of(third, "InPlaceRestart").size(), 1u);
  EXPECT_EQ(events_of(third, "InPlaceRestart")[0].message, in_place_message(*in.in_place, 3));
  EXPECT_NE(restarted(third)->message.find("(3 of 3 in gang attempt 0)"), std::string::npos);
}

// See Note [Final progress]: a restart made after the last reading of a job that then Succeeds is
// counted from rank 0's final line; one already counted is not counted twice; another pod's
// line, or an earlier attempt's, counts nothing.
TEST(InPlace, RestartsAfterTheLastReadingOfAJobThatSucceedsCountFromRank0sFinalLine) {
  auto in = running();
  in.job.status.in_place_restarts = 1;  // one seen by a reading
  in.job.status.current_attempt_in_place_restarts = 1;
  in.pods = {pod(0, "Succeeded", 0, 0), pod(1, "Succeeded", 0, 0)};
  in.pods[0].termination_message = "lockstep-progress step=960 restarts=2 reason=WorkerFailed rank=1 exit=137\n";
  in.pods[1].termination_message = "lockstep-progress step=960 restarts=9 reason=WorkerFailed rank=1 exit=137\n";
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Succeeded");
  EXPECT_EQ(d.status.in_place_restarts, 2) << "rank 0's count, not pod 1's";
  EXPECT_EQ(d.status.current_attempt_in_place_restarts, 2);
  ASSERT_NE(restarted(d), nullptr);
  EXPECT_EQ(restarted(d)->reason, "InPlaceRestart");
  EXPECT_EQ(restarted(d)->message,
            "rank 1 exited with code 137 (WorkerFailed); every worker restarted in place in the same pods (2 of 3 in "
            "gang attempt 0)");
  ASSERT_EQ(events_of(d, "InPlaceRestart").size(), 1u);
  ASSERT_TRUE(d.status.progress.has_value());
  EXPECT_EQ(d.status.progress->step, 960);

  // Counted already (or fewer than counted): nothing added.
  in.job.status.in_place_restarts = 2;
  in.job.status.current_attempt_in_place_restarts = 2;
  EXPECT_EQ(decide(in).status.in_place_restarts, 2);
  EXPECT_TRUE(events_of(decide(in), "InPlaceRestart").empty());

  // A line of a pod of an earlier attempt is not the current rank 0's.
  auto later = running(1);
  later.pods = {pod(0, "Succeeded", 1, 0), pod(1, "Succeeded", 1, 0), pod(0, "Succeeded", 0, 0)};
  later.pods[2].termination_message = "lockstep-progress step=960 restarts=2\n";
  EXPECT_EQ(decide(later).status.in_place_restarts, 0);
}

TEST(InPlace, ARestartWithoutATimeIsDatedByTheReading) {
  auto in = running();
  in.in_place = reading(1);
  in.in_place->last_at.reset();
  EXPECT_EQ(restarted(decide(in))->last_transition_time, format_time(kNow));
}

// See Note [In-place restarts]: the total sums the attempts; the agents' counter starts again at 0
// in the new pods, and a reading of an earlier attempt is never counted against the new one.
TEST(InPlace, AGangRestartKeepsTheTotalAndTheNewAttemptCountsFromZero) {
  auto in = running();
  in.job.status.in_place_restarts = 3;
  in.job.status.current_attempt_in_place_restarts = 3;
  in.in_place = reading(3);
  in.pods[1] = pod(1, "Failed", 0, 137);
  auto d = decide(in);
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.phase, "Restarting");
  EXPECT_EQ(d.status.in_place_restarts, 3);
  EXPECT_EQ(d.status.current_attempt_in_place_restarts, 0);
  const Condition* c = restarted(d);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->reason, "GangRestart");
  EXPECT_EQ(c->last_transition_time, format_time(kNow));
  EXPECT_EQ(c->message, d.status.condition("Restarting")->message);
  EXPECT_NE(c->message.find("tj-1 failed with exit code 137"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find("restarting the gang as attempt 1 of 3, after 3 in-place restarts in attempt 0"),
            std::string::npos) << c->message;
  EXPECT_EQ(events_of(d, "GangRestart").size(), 1u);
  EXPECT_TRUE(events_of(d, "InPlaceRestart").empty());

  // Attempt 1 runs; the reading of attempt 0 is still held: it counts for nothing.
  auto next = running(1);
  next.job.status = d.status;
  next.job.status.phase = "Running";
  next.in_place = reading(3, 0);
  auto stale = decide(next);
  EXPECT_EQ(stale.status.in_place_restarts, 3);
  EXPECT_EQ(stale.status.current_attempt_in_place_restarts, 0);
  EXPECT_EQ(restarted(stale)->reason, "GangRestart");
  EXPECT_TRUE(events_of(stale, "InPlaceRestart").empty());
  // The new pods' agent: 0, then 1.
  next.in_place = reading(0, 1);
  EXPECT_EQ(decide(next).status.in_place_restarts, 3);
  next.in_place = reading(1, 1);
  auto counted = decide(next);
  EXPECT_EQ(counted.status.in_place_restarts, 4);
  EXPECT_EQ(counted.status.current_attempt_in_place_restarts, 1);
  EXPECT_EQ(restarted(counted)->reason, "InPlaceRestart");
  EXPECT_NE(restarted(counted)->message.find("(1 of 3 in gang attempt 1)"), std::string::npos);
}

// A new leader has only the status: what the last one counted is neither lost nor counted
// again.
TEST(InPlace, ANewLeaderCountsFromTheStatusAlone) {
  auto in = running();
  in.in_place = reading(2);
  auto d = decide(in);
  auto restored = JobStatus::from_json(d.status.to_json());
  EXPECT_EQ(restored, d.status);
  in.job.status = restored;
  EXPECT_FALSE(decide(in).status_changed);
  in.in_place = reading(3);
  EXPECT_EQ(decide(in).status.in_place_restarts, 3);
  // A reading below what the status holds (it cannot go down within a pod) changes nothing.
  in.job.status.current_attempt_in_place_restarts = 3;
  in.job.status.in_place_restarts = 3;
  in.in_place = reading(2);
  EXPECT_FALSE(decide(in).status_changed);
}

TEST(InPlace, TheBudgetIsTheSpecsWithTheCrdsDefaultAndBoundsAndNoneUnderNever) {
  auto spec = [](const std::string& run_policy) {
    return JobView::from_json(nlohmann::json::parse(R"({"metadata": {"name": "tj"}, "spec": {"runPolicy": )" +
                                                    run_policy + "}}"));
  };
  EXPECT_EQ(spec("{}").in_place_restarts, 3);
  EXPECT_EQ(spec(R"({"inPlaceRestarts": 7})").in_place_restarts, 7);
  EXPECT_EQ(spec(R"({"inPlaceRestarts": 0})").in_place_restarts, 0);
  EXPECT_EQ(spec(R"({"inPlaceRestarts": -1})").in_place_restarts, 0);
  EXPECT_EQ(spec(R"({"inPlaceRestarts": 1000})").in_place_restarts, kMaxInPlaceRestarts);
  EXPECT_EQ(spec(R"({"inPlaceRestarts": "5"})").in_place_restarts, 3);

  auto in = running();
  in.job.restart_policy = RestartPolicy::Never;
  EXPECT_EQ(in.job.in_place_budget(), 0);
  in.job.restart_policy = RestartPolicy::ExitCode;
  EXPECT_EQ(in.job.in_place_budget(), 3);
  in.job.in_place_restarts = 0;
  EXPECT_EQ(in.job.in_place_budget(), 0);
}

// See Note [Untrusted exposition]: a page of invalid UTF-8, NaN, huge numbers and a megabyte of
// label, read from rank 0's agent, leaves a status and Events that serialize (a JSON dump
// throws on invalid UTF-8: the status write would fail on every reconcile) and say nothing of
// the hostile bytes.
TEST(InPlace, AHostilePageWritesACleanStatus) {
  const std::string agent = "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"";
  const std::string page =
      "lockstep_restarts_total{kind=\"in_place\"," + agent + "} 1e300\n"
      "lockstep_restart_attempt{" + agent + "} 0\n"
      "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"," + agent + "} 1e300\n"
      "lockstep_last_restart_info{exit_code=\"137\xff\",kind=\"in_place\"," + agent + ",rank=\"" +
      std::string(1 << 20, '9') + "\",reason=\"Worker\xc0\xaf" "Failed\"} 1\n"
      "lockstep_last_restart_info{exit_code=\"99999999999\",kind=\"in_place\"," + agent +
      ",rank=\"0\",reason=\"Worker Failed; see http://x\"} 1\n"
      "lockstep_step{" + agent + ",rank=\"0\"} NaN\n"
      "lockstep_step{" + agent + ",rank=\"0\"} 1e300\n"
      "lockstep_steps_total{" + agent + ",rank=\"0\"} 5\n";
  auto in = running();
  in.in_place = parse_in_place(page, 0);
  ASSERT_TRUE(in.in_place);
  EXPECT_EQ(in.in_place->reason, "");
  EXPECT_EQ(in.in_place->rank, "0");
  EXPECT_EQ(in.in_place->exit_code, "");
  EXPECT_FALSE(in.in_place->last_at) << "a time past 2100 is not believed";
  auto sample = parse_progress(page, 0, kNow);
  EXPECT_FALSE(sample) << "a step of 1e300 is not believed";
  auto d = decide(in);
  EXPECT_EQ(d.status.in_place_restarts, kMaxInPlaceReading);
  std::string status;
  ASSERT_NO_THROW(status = d.status.to_json().dump());
  EXPECT_LT(status.size(), 4096u);
  EXPECT_EQ(restarted(d)->message.find("Worker"), std::string::npos) << restarted(d)->message;
  EXPECT_EQ(restarted(d)->last_transition_time, format_time(kNow));
  for (const auto& e : d.events) {
    nlohmann::json event = {{"message", e.message}, {"reason", e.reason}};
    EXPECT_NO_THROW((void)event.dump());
    EXPECT_LT(e.message.size(), 512u);
  }
}
