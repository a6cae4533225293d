// See Note [Job isolation]: what the job's status says of its network isolation (status.isolation,
// the Isolated condition), for every way it can turn out; decide_test checks the policy's
// create and delete.
#include <gtest/gtest.h>

#include "reconcile/decide.hpp"

using namespace lockstep::reconcile;

namespace {

const Time kNow = Clock::from_time_t(1'800'000'000);

Observed observed(Isolation isolation, bool given) {
  Observed o;
  o.job.name = "tj";
  o.job.ns = "ns";
  o.job.uid = "uid-1";
  o.job.nodes = 2;
  o.job.isolation = isolation;
  o.job.isolation_given = given;
  o.service_exists = true;
  o.podgroup_exists = true;
  o.now = kNow;
  return o;
}

const Condition* isolated(const Decision& d) { return d.status.condition("Isolated"); }

}  // namespace

TEST(IsolationStatus, AnIsolatedJobSaysSoFromItsFirstStatus) {
  auto d = decide(observed(Isolation::NetworkPolicy, true));
  EXPECT_TRUE(d.create_network_policy);
  EXPECT_EQ(d.status.isolation, "NetworkPolicy");
  ASSERT_NE(isolated(d), nullptr) << "in the first status write: no write of its own";
  EXPECT_EQ(isolated(d)->status, "True");
  EXPECT_EQ(isolated(d)->reason, "NetworkPolicy");
}

TEST(IsolationStatus, AJobWithoutIsolationSaysWhatReachesIt) {
  for (bool given : {true, false}) {
    SCOPED_TRACE(given);
    auto d = decide(observed(Isolation::None, given));
    EXPECT_FALSE(d.create_network_policy);
    EXPECT_EQ(d.status.isolation, "None");
    ASSERT_NE(isolated(d), nullptr) << "a False condition that was never True is written: it says something";
    EXPECT_EQ(isolated(d)->status, "False");
    EXPECT_EQ(isolated(d)->reason, "NotRequested");
    EXPECT_NE(isolated(d)->message.find("any pod of the cluster can reach"), std::string::npos) << isolated(d)->message;
    EXPECT_NE(isolated(d)->message.find(given ? "spec.isolation is None" : "the operator's default is None"),
              std::string::npos)
        << isolated(d)->message;
  }
}

// #40 item 8: a NetworkPolicy of the job's name that it does not own is left alone, no create
// is sent, and the condition says the job is not isolated, until the name is free again.
TEST(IsolationStatus, APolicyOfTheJobsNameThatItDoesNotOwnIsSaidAndLeftAlone) {
  auto in = observed(Isolation::NetworkPolicy, true);
  in.network_policy_taken = true;
  auto d = decide(in);
  EXPECT_FALSE(d.create_network_policy);
  EXPECT_EQ(d.delete_network_policy_uid, "");
  EXPECT_EQ(d.status.isolation, "None");
  ASSERT_NE(isolated(d), nullptr);
  EXPECT_EQ(isolated(d)->status, "False");
  EXPECT_EQ(isolated(d)->reason, "NetworkPolicyNameTaken");
  // The name free again: the policy is made, the condition turns True, its time moves.
  in.job.status = d.status;
  in.network_policy_taken = false;
  in.now = kNow + std::chrono::seconds(90);
  auto freed = decide(in);
  EXPECT_TRUE(freed.create_network_policy);
  ASSERT_NE(isolated(freed), nullptr);
  EXPECT_EQ(isolated(freed)->status, "True");
  EXPECT_EQ(isolated(freed)->last_transition_time, format_time(in.now));
  // The job's own policy, once in the cache, counts over a lingering mark.
  in.job.status = freed.status;
  in.network_policy_uid = "np-1";
  in.network_policy_taken = true;
  auto own = decide(in);
  EXPECT_FALSE(own.create_network_policy);
  EXPECT_EQ(isolated(own)->status, "True");
  EXPECT_EQ(own.status.isolation, "NetworkPolicy");
}
