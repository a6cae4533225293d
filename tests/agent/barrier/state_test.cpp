// See Note [Barrier state]: the restart barrier's protocol on its own, without sockets, threads or
// a clock: every transition of Note [Restart barrier] and what it broadcasts.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "barrier/state.hpp"
#include "lockstep/contract.hpp"

using namespace lockstep::agent;
using namespace std::chrono_literals;
using Clock = BarrierState::Clock;
using Phase = BarrierState::Phase;

namespace {

const Clock::time_point t0{};

BarrierState make(int n, int restarts = 3, const std::string& policy = "OnFailure") {
  return BarrierState(n, restarts, policy, t0, 60s, 40s);
}

Message msg(const std::string& verb, int gen, std::map<std::string, std::string> fields = {}) {
  fields["gen"] = std::to_string(gen);
  return {verb, fields};
}

Message failed(int gen, int code, int rank) {
  return msg("FAILED", gen, {{"code", std::to_string(code)}, {"rank", std::to_string(rank)}, {"what", "rank failed"}});
}

// The verbs broadcast, in order.
std::string verbs(const BarrierState::Out& out) {
  std::string v;
  for (const auto& m : out.broadcast) v += (v.empty() ? "" : " ") + m.verb;
  return v;
}

void join_all(BarrierState& s, int n) {
  for (int i = 0; i < n; ++i) {
    BarrierState::Out out;
    ASSERT_EQ(s.join(i, out), "");
    EXPECT_EQ(verbs(out), i + 1 == n ? "START" : "") << "node " << i;
  }
}

}  // namespace

TEST(BarrierState, StartsGenerationZeroWhenTheLastNodeJoins) {
  auto s = make(3);
  join_all(s, 3);
  EXPECT_EQ(s.phase(), Phase::Running);
  EXPECT_EQ(s.generation(), 0);
}

TEST(BarrierState, RefusesASecondNodeOfOneRankAndALateJoiner) {
  auto s = make(2);
  BarrierState::Out out;
  ASSERT_EQ(s.join(0, out), "");
  EXPECT_NE(s.join(0, out).find("node 0 has already joined"), std::string::npos);
  ASSERT_EQ(s.join(1, out), "");
  s.left(1);  // its connection closed after the start
  EXPECT_NE(s.join(1, out).find("already started without it"), std::string::npos);
}

TEST(BarrierState, AFailureStopsEveryNodeAndRestartsTheGeneration) {
  auto s = make(2);
  join_all(s, 2);
  BarrierState::Out out;
  s.message(1, failed(0, 137, 1), 1000, t0 + 1s, out);
  EXPECT_EQ(verbs(out), "STOP");
  EXPECT_EQ(s.phase(), Phase::Stopping);
  out = {};
  s.message(1, msg("STOPPED", 0), 1001, t0 + 2s, out);
  EXPECT_EQ(verbs(out), "") << "node 0 has not stopped yet";
  s.message(0, msg("STOPPED", 0), 1002, t0 + 2s, out);
  ASSERT_EQ(verbs(out), "START");
  EXPECT_EQ(out.broadcast[0].get("gen"), "1");
  EXPECT_EQ(s.generation(), 1);
  EXPECT_EQ(s.phase(), Phase::Running);
  // A message about the old generation changes nothing.
  out = {};
  s.message(0, failed(0, 1, 0), 1003, t0 + 3s, out);
  EXPECT_EQ(verbs(out), "");
  EXPECT_EQ(s.phase(), Phase::Running);
}

TEST(BarrierState, TheCauseIsTheEarliestFailureThatIsNotAConsequence) {
  auto s = make(2);
  join_all(s, 2);
  BarrierState::Out out;
  // Node 0's rank saw its collective break (a consequence) before node 1's rank died.
  s.message(0, failed(0, lockstep::contract::kExitCollective, 0), 1000, t0, out);
  s.message(1, failed(0, 137, 1), 1005, t0, out);
  s.message(0, msg("STOPPED", 0), 1006, t0, out);
  out = {};
  s.message(1, msg("STOPPED", 0), 1007, t0, out);
  ASSERT_EQ(verbs(out), "START");
  EXPECT_EQ(out.broadcast[0].get("node"), "1") << out.broadcast[0].get("why");
}

TEST(BarrierState, ARetryableFailureBeyondTheBudgetEndsWithItsCode) {
  auto s = make(1, /*restarts=*/0);
  join_all(s, 1);
  BarrierState::Out out;
  s.message(0, failed(0, 137, 0), 1000, t0, out);
  s.message(0, msg("STOPPED", 0), 1001, t0, out);
  ASSERT_EQ(verbs(out), "STOP EXIT");
  EXPECT_EQ(out.broadcast[1].get("exit"), "137");
  EXPECT_EQ(s.phase(), Phase::Finished);
}

TEST(BarrierState, EveryNodeDoneEndsWithZero) {
  auto s = make(2);
  join_all(s, 2);
  BarrierState::Out out;
  s.message(0, msg("DONE", 0), 1000, t0, out);
  EXPECT_EQ(verbs(out), "");
  // A node that finished and then left is fine.
  s.left(0);
  s.lost(0, "", out);
  EXPECT_EQ(verbs(out), "");
  s.message(1, msg("DONE", 0), 1001, t0, out);
  ASSERT_EQ(verbs(out), "EXIT");
  EXPECT_EQ(out.broadcast[0].get("exit"), "0");
}

TEST(BarrierState, ALostNodeEndsTheGenerationWithTheRendezvousCodeAndNamesASilentOne) {
  auto s = make(3);
  join_all(s, 3);
  BarrierState::Out out;
  s.silent(2);
  s.left(2);
  s.lost(2, "node 2's agent said nothing for 6.00 s", out);
  ASSERT_EQ(verbs(out), "EXIT");
  EXPECT_EQ(out.broadcast[0].get("exit"), std::to_string(lockstep::contract::kExitRendezvous));
  EXPECT_EQ(out.broadcast[0].get("silent"), "2");
  EXPECT_EQ(out.broadcast[0].get("why"), "node 2's agent said nothing for 6.00 s");
  // Once finished, nothing more is decided.
  out = {};
  s.lost(1, "", out);
  EXPECT_EQ(verbs(out), "");
}

TEST(BarrierState, ANodeLostBeforeTheStartMayComeBack) {
  auto s = make(2);
  BarrierState::Out out;
  ASSERT_EQ(s.join(0, out), "");
  s.left(0);
  s.lost(0, "", out);
  EXPECT_EQ(verbs(out), "");
  EXPECT_EQ(s.join(0, out), "");
  EXPECT_EQ(s.join(1, out), "");
  EXPECT_EQ(verbs(out), "START");
}

TEST(BarrierState, TheRendezvousAndTheStopHaveDeadlinesNamingWhoIsMissing) {
  auto s = make(3);
  BarrierState::Out out;
  ASSERT_EQ(s.join(1, out), "");
  s.tick(t0 + 59s, out);
  EXPECT_EQ(verbs(out), "");
  s.tick(t0 + 61s, out);
  ASSERT_EQ(verbs(out), "EXIT");
  EXPECT_NE(out.broadcast[0].get("why").find("node(s) 0, 2 did not join"), std::string::npos) << out.broadcast[0].get("why");

  auto t = make(2);
  join_all(t, 2);
  out = {};
  t.message(0, failed(0, 1, 0), 1000, t0 + 100s, out);
  t.message(0, msg("STOPPED", 0), 1001, t0 + 100s, out);
  out = {};
  t.tick(t0 + 139s, out);
  EXPECT_EQ(verbs(out), "") << "the stop limit counts from the STOP";
  t.tick(t0 + 141s, out);
  ASSERT_EQ(verbs(out), "EXIT");
  EXPECT_NE(out.broadcast[0].get("why").find("node(s) 1 did not stop"), std::string::npos) << out.broadcast[0].get("why");
}

TEST(BarrierState, OnlyTheFirstReportOfANodeCounts) {
  auto s = make(2);
  join_all(s, 2);
  BarrierState::Out out;
  s.message(0, failed(0, 1, 0), 2000, t0, out);             // node 0: its rank 0 exited 1, later
  s.message(1, failed(0, 3, 1), 1000, t0, out);             // node 1: earlier
  s.message(1, msg("STOPPED", 0, {{"code", "9"}, {"rank", "1"}}), 500, t0, out);  // a second report: ignored
  out = {};
  s.message(0, msg("STOPPED", 0), 2001, t0, out);
  ASSERT_EQ(verbs(out), "START");
  EXPECT_EQ(out.broadcast[0].get("code"), "3");
}
