// controller/foreign_children (Note [Foreign children]): what the operator remembers of the
// objects carrying a job's name that the job does not control, bounded whatever tenants make.
#include <gtest/gtest.h>

#include <string>

#include "controller/foreign_children.hpp"

using lockstep::controller::ForeignChildren;
using namespace std::chrono_literals;

TEST(ForeignChildren, AForeignPodIsWarnedAboutOnceAndAgainAfterItsJobIsGone) {
  ForeignChildren f;
  EXPECT_TRUE(f.first_sight("ns/tj", "pod-1"));
  EXPECT_FALSE(f.first_sight("ns/tj", "pod-1"));
  EXPECT_TRUE(f.first_sight("ns/tj", "pod-2"));
  EXPECT_TRUE(f.first_sight("ns/tj2", "pod-1")) << "another job's label is another warning";
  f.forget_job("ns/tj");
  EXPECT_EQ(f.warned(), 1u) << "ns/tj2's stays: a job named like a prefix is another job";
  EXPECT_TRUE(f.first_sight("ns/tj", "pod-1"));
}

// A tenant that labels pod after pod with one job's name costs at most max_warned entries.
TEST(ForeignChildren, ThePodWarningsRememberedAreBounded) {
  ForeignChildren f(100);
  for (int i = 0; i < 10000; ++i) EXPECT_TRUE(f.first_sight("ns/tj", "pod-" + std::to_string(i)));
  EXPECT_EQ(f.warned(), 100u);
  EXPECT_FALSE(f.first_sight("ns/tj", "pod-9999")) << "the newest are kept";
  EXPECT_TRUE(f.first_sight("ns/tj", "pod-0")) << "the oldest were forgotten: warned once more";
  for (int round = 0; round < 50; ++round) {  // jobs that come and go leave nothing behind
    f.first_sight("ns/gone-" + std::to_string(round), "pod");
    f.forget_job("ns/gone-" + std::to_string(round));
  }
  EXPECT_LE(f.warned(), 100u);
}

TEST(ForeignChildren, ATakenPolicyNameLapsesAndBelongsToTheJobsUid) {
  ForeignChildren f;
  const auto t0 = ForeignChildren::Clock::now();
  f.mark_policy_taken("ns/tj", "uid-1", t0);
  auto left = f.policy_taken("ns/tj", "uid-1", t0 + 10s);
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(*left), ForeignChildren::kPolicyTakenFor - 10s);
  EXPECT_FALSE(f.policy_taken("ns/tj", "uid-2", t0 + 10s)) << "a job re-made under the name starts afresh";
  EXPECT_FALSE(f.policy_taken("ns/tj", "uid-1", t0 + ForeignChildren::kPolicyTakenFor)) << "lapsed: tried again";
  f.mark_policy_taken("ns/tj", "uid-1", t0);
  f.forget_job("ns/tj");
  EXPECT_FALSE(f.policy_taken("ns/tj", "uid-1", t0));
}
