// controller::WorkQueue and controller::Expectations: the guarantees the controller relies on.
#include <gtest/gtest.h>

#include <thread>

#include "controller/expectations.hpp"
#include "controller/work_queue.hpp"

using lockstep::controller::Expectations;
using lockstep::controller::WorkQueue;
using namespace std::chrono_literals;

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_EQ(*q.get(), "b");
}

TEST(WorkQueue, AKeyInProgressIsNotHandedOutTwiceButIsRequeuedWhenDone) {
  WorkQueue q;
  q.add("a");
  auto k = q.get();
  q.add("a");  // while processing
  EXPECT_EQ(q.depth(), 0u);
  q.done(*k);
  EXPECT_EQ(q.depth(), 1u);
  EXPECT_EQ(*q.get(), "a");
}

TEST(WorkQueue, AddAfterDelays) {
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  q.add_after("late", 100ms);
  q.add("now");
  EXPECT_EQ(*q.get(), "now");
  EXPECT_EQ(*q.get(), "late");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
}

TEST(WorkQueue, RateLimitedBackoffGrowsAndForgetResetsIt) {
  WorkQueue q(10ms, 1s);
  for (int i = 0; i < 3; ++i) q.add_rate_limited("k");
  EXPECT_EQ(q.failures("k"), 3);
  q.forget("k");
  EXPECT_EQ(q.failures("k"), 0);
}

TEST(WorkQueue, ShutdownWakesWaitingWorkers) {
  WorkQueue q;
  std::thread t([&] { EXPECT_FALSE(q.get().has_value()); });
  std::this_thread::sleep_for(20ms);
  q.shutdown();
  t.join();
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
  Expectations e(std::chrono::seconds(0));
  e.expect_delete("ns/j", "j-0");
  std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(e.satisfied("ns/j"));
}
