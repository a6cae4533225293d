// agent/barrier/verdict: the cause among the agents' reports and what follows from it.
#include <gtest/gtest.h>

#include "barrier/verdict.hpp"
#include "barrier_support.hpp"
#include "lockstep/contract.hpp"

using namespace lockstep::agent;
using lockstep::test::failure;

TEST(Barrier, TheCauseIsTheEarliestFailureThatIsNotAPeersConsequence) {
  // Node 0's rank lost its peer (77) a moment before node 1's OOM kill was seen: 137 is the cause.
  auto c = pick_cause({failure(0, lockstep::contract::kExitCollective, 1000), failure(1, 137, 1005)});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->node, 1);
  EXPECT_EQ(pick_cause({failure(1, 3, 2000), failure(0, 137, 1000)})->node, 0) << "earliest wins";
  EXPECT_EQ(pick_cause({failure(1, 77, 2000), failure(0, 75, 1000, "Stall")})->node, 0) << "only consequences: the earliest";
  EXPECT_FALSE(pick_cause({}).has_value());
}

TEST(Barrier, TheVerdictFollowsThePolicyAndTheBudget) {
  auto oom = failure(1, 137, 1000), bug = failure(1, 3, 1000);
  EXPECT_TRUE(decide(oom, 0, 3, "OnFailure").restart);
  EXPECT_TRUE(decide(bug, 2, 3, "OnFailure").restart);
  auto spent = decide(oom, 3, 3, "OnFailure");
  EXPECT_FALSE(spent.restart);
  EXPECT_EQ(spent.exit_code, 137);
  EXPECT_NE(spent.why.find("in-place restarts spent (3 of 3"), std::string::npos) << spent.why;
  EXPECT_TRUE(decide(oom, 0, 3, "ExitCode").restart);
  EXPECT_TRUE(decide(failure(1, lockstep::contract::kExitStall, 0, "Stall"), 0, 3, "ExitCode").restart);
  auto permanent = decide(bug, 0, 3, "ExitCode");
  EXPECT_FALSE(permanent.restart);
  EXPECT_NE(permanent.why.find("exit code 3 is permanent under restartPolicy ExitCode"), std::string::npos);
  EXPECT_FALSE(decide(oom, 0, 3, "Never").restart);
  EXPECT_NE(decide(oom, 0, 0, "OnFailure").why.find("in-place restarts are off"), std::string::npos);
}
