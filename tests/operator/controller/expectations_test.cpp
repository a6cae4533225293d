// controller::Expectations (controller/expectations.hpp): what the controller waits to observe
// before it reconciles a job again, and its hold on the work queue.
#include <gtest/gtest.h>

#include <chrono>

#include "controller/controller.hpp"
#include "controller/expectations.hpp"
#include "controller/work_queue.hpp"

using lockstep::controller::Expectations;
using lockstep::controller::hold_for_expectations;
using lockstep::controller::WorkQueue;
using namespace std::chrono_literals;

// Milliseconds since `t0`.
static long long ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Expectations, OutstandingCreatesBlockUntilObserved) {
  Expectations e;
  EXPECT_TRUE(e.satisfied("ns/j"));
  e.expect_create("ns/j", "j-0");
  e.expect_create("ns/j", "j-1");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_create("ns/j", "j-0");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_create("ns/j", "j-1");
  EXPECT_TRUE(e.satisfied("ns/j"));
}

TEST(Expectations, AStatusWriteIsSatisfiedByItsOrANewerVersion) {
  Expectations e;
  e.expect_version("ns/j", "120");
  e.observed_version("ns/j", "119");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_version("ns/j", "125");
  EXPECT_TRUE(e.satisfied("ns/j"));
}

TEST(Expectations, ExpireSoALostEventCannotWedgeAJob) {
  // The delete's event never comes. The reconcile held back by it must be requeued for when
  // the expectation expires, and then go ahead.
  Expectations e(300ms);
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  e.expect_delete("ns/j", "j-0");
  EXPECT_GT(e.expires_in("ns/j").count(), 200);
  EXPECT_TRUE(hold_for_expectations(e, q, "ns/j"));
  EXPECT_EQ(q.delayed(), 1u) << "a held reconcile was not requeued";
  EXPECT_TRUE(hold_for_expectations(e, q, "ns/j"));  // held again (another event): still one entry
  EXPECT_EQ(q.delayed(), 1u);
  EXPECT_EQ(*q.get(), "ns/j");
  EXPECT_GE(ms_since(t0), 300);
  EXPECT_FALSE(hold_for_expectations(e, q, "ns/j")) << "still held after the expectations expired";
  EXPECT_EQ(e.expires_in("ns/j").count(), 0);
  EXPECT_EQ(q.delayed(), 0u);
}

TEST(Expectations, ASatisfiedJobIsNotHeldNorRequeued) {
  Expectations e;
  WorkQueue q;
  e.expect_create("ns/j", "j-0");
  e.observed_create("ns/j", "j-0");
  EXPECT_FALSE(hold_for_expectations(e, q, "ns/j"));
  EXPECT_EQ(q.delayed() + q.depth(), 0u);
}
