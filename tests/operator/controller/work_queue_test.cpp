// controller::WorkQueue: the guarantees the controller relies on. Expectations: expectations_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "controller/work_queue.hpp"

using lockstep::controller::WorkQueue;
using namespace std::chrono_literals;

// Milliseconds since `t0`.
static long long ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

static bool eventually_true(const std::atomic<bool>& flag) {
  for (int i = 0; i < 500 && !flag; ++i) std::this_thread::sleep_for(10ms);
  return flag;
}

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_EQ(*q.get(), "b");
}

TEST(WorkQueue, MaxDepthIsTheHighWaterMark) {
  WorkQueue q;
  EXPECT_EQ(q.max_depth(), 0u);
  q.add("a");
  q.add("b");
  q.add("b");  // deduplicated: not deeper
  q.add("c");
  EXPECT_EQ(q.max_depth(), 3u);
  q.done(*q.get());
  q.done(*q.get());
  EXPECT_EQ(q.depth(), 1u);
  EXPECT_EQ(q.max_depth(), 3u);  // drained: the mark stays
  q.add("d");
  EXPECT_EQ(q.max_depth(), 3u);
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

TEST(WorkQueue, AddAfterKeepsOneDelayedEntryPerKeyTheEarliest) {
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  q.add_after("k", 300ms);
  for (int i = 0; i < 1000; ++i) q.add_after("k", 5s);  // a job requeued on every reconcile
  q.add_after("k", 100ms);                              // sooner: replaces the 300 ms entry
  q.add_after("k", 200ms);
  EXPECT_EQ(q.delayed(), 1u);
  EXPECT_EQ(*q.get(), "k");
  long long waited = ms_since(t0);
  EXPECT_GE(waited, 100);
  EXPECT_LT(waited, 4000);
  EXPECT_EQ(q.delayed(), 0u) << "a later entry of the key is still waiting";
  EXPECT_EQ(q.depth(), 0u);
}

// Workers already waiting are woken only for a new earliest deadline (work_queue.cpp): one that
// waits for a later key, or for none, still gets a sooner one on time, and a later addition
// does not hold up the earlier one.
TEST(WorkQueue, WaitingWorkersGetANewEarliestDeadlineOnTime) {
  for (bool anything_delayed : {false, true}) {
    WorkQueue q;
    if (anything_delayed) q.add_after("later", 10s);
    std::vector<std::thread> workers;
    std::atomic<int> got{0};
    std::atomic<long long> soon_ms{-1};
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i)
      workers.emplace_back([&] {
        auto k = q.get();
        if (k && *k == "soon") soon_ms = ms_since(t0);
        if (k) ++got;
      });
    std::this_thread::sleep_for(100ms);  // every worker waiting
    q.add_after("soon", 200ms);
    q.add_after("after", 5s);  // not the earliest: wakes nobody, delays nothing
    for (int i = 0; i < 100 && soon_ms < 0; ++i) std::this_thread::sleep_for(20ms);
    EXPECT_GE(soon_ms.load(), 300) << "with an entry of 10 s before: " << anything_delayed;
    EXPECT_LT(soon_ms.load(), 1500) << "with an entry of 10 s before: " << anything_delayed;
    q.shutdown();
    for (auto& w : workers) w.join();
    EXPECT_EQ(got.load(), 1);
  }
}

// Milliseconds `q` takes to hand out `key` after one more add_rate_limited().
static long long rate_limited_delay(WorkQueue& q, const std::string& key) {
  auto t0 = std::chrono::steady_clock::now();
  q.add_rate_limited(key);
  auto got = q.get();
  long long waited = ms_since(t0);
  EXPECT_EQ(got, key);
  q.done(key);
  return waited;
}

TEST(WorkQueue, RateLimitedBackoffGrowsAndForgetResetsIt) {
  const int base = 40;
  WorkQueue q(std::chrono::milliseconds(base), 10s);
  for (int n = 0; n < 4; ++n)  // 40, 80, 160, 320 ms
    EXPECT_GE(rate_limited_delay(q, "k"), base << n) << "failure " << n + 1;
  EXPECT_EQ(q.failures("k"), 4);
  q.forget("k");
  EXPECT_EQ(q.failures("k"), 0);
  long long waited = rate_limited_delay(q, "k");
  EXPECT_GE(waited, base);
  EXPECT_LT(waited, base * 8) << "forget() did not reset the backoff";  // the next would be 640 ms
}

TEST(WorkQueue, RateLimitedBackoffIsCappedAtMax) {
  WorkQueue q(20ms, 50ms);
  for (int n = 0; n < 6; ++n) q.add_rate_limited("k");  // one delayed entry, six failures
  EXPECT_EQ(*q.get(), "k");
  q.done("k");
  long long waited = rate_limited_delay(q, "k");  // 20 ms * 2^6 uncapped
  EXPECT_GE(waited, 50);
  EXPECT_LT(waited, 1000);
}

TEST(WorkQueue, ShutdownWakesWaitingWorkers) {
  auto q = std::make_unique<WorkQueue>();
  std::atomic<bool> entered{false}, returned{false};
  std::promise<std::optional<std::string>> result;
  auto got = result.get_future();
  std::thread t([&] {
    entered = true;
    auto k = q->get();
    returned = true;
    result.set_value(k);
  });
  ASSERT_TRUE(eventually_true(entered));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "get() returned from an empty queue";
  q->shutdown();
  if (got.wait_for(5s) != std::future_status::ready) {
    t.detach();          // still blocked: leave it (and the queue) behind, and fail
    (void)q.release();
    FAIL() << "shutdown() did not wake a worker blocked in get()";
  }
  t.join();
  EXPECT_FALSE(got.get().has_value());
}
