// Note [Repeated Events] (controller/event_correlator.hpp): which Event a repeat counts on, for
// how long, and how much is remembered.
#include <gtest/gtest.h>

#include "controller/event_correlator.hpp"

using lockstep::controller::EventCorrelator;
using namespace std::chrono_literals;

namespace {

const EventCorrelator::Clock::time_point kT0 = EventCorrelator::Clock::from_time_t(1'800'000'000);

std::string key(const std::string& message, const std::string& uid = "uid-1", const std::string& reason = "FailedCreatePod") {
  return EventCorrelator::key("ns", uid, "Warning", reason, message);
}

}  // namespace

TEST(EventCorrelator, ARepeatWithinTheWindowCountsOnTheEventRecorded) {
  EventCorrelator c;
  const std::string quota = key("cannot create tj-0: exceeded quota");
  EXPECT_FALSE(c.repeat(quota, kT0)) << "nothing recorded yet: a new Event";
  c.recorded(quota, "tj.1", kT0);
  for (int n = 2; n <= 5; ++n) {
    auto r = c.repeat(quota, kT0 + std::chrono::minutes(n));
    ASSERT_TRUE(r) << n;
    EXPECT_EQ(r->name, "tj.1");
    EXPECT_EQ(r->count, n);
  }
  // The window counts from the last repeat: 9 minutes later it is still the same Event.
  EXPECT_EQ(c.repeat(quota, kT0 + 5min + 9min).value_or(EventCorrelator::Repeat{}).count, 6);
  EXPECT_FALSE(c.repeat(quota, kT0 + 14min + 10min)) << "10 minutes of silence: a new Event";
  EXPECT_EQ(c.size(), 0u) << "and the old one is forgotten";
}

// Only the same job, type, reason and message is a repeat.
TEST(EventCorrelator, AnythingElseIsANewEvent) {
  EventCorrelator c;
  c.recorded(key("pod tj-1 cannot be scheduled"), "tj.1", kT0);
  EXPECT_FALSE(c.repeat(key("pod tj-0 cannot be scheduled"), kT0 + 1s));
  EXPECT_FALSE(c.repeat(key("pod tj-1 cannot be scheduled", "uid-2"), kT0 + 1s)) << "another job (or one made again)";
  EXPECT_FALSE(c.repeat(key("pod tj-1 cannot be scheduled", "uid-1", "PodsBlocked"), kT0 + 1s));
  EXPECT_NE(EventCorrelator::key("ns", "u", "Normal", "R", "m"), EventCorrelator::key("ns", "u", "Warning", "R", "m"));
  EXPECT_NE(EventCorrelator::key("a", "u", "Normal", "R", "m"), EventCorrelator::key("b", "u", "Normal", "R", "m"));
  EXPECT_TRUE(c.repeat(key("pod tj-1 cannot be scheduled"), kT0 + 1s));
}

// An Event the API server no longer has is made again; a clock that went back starts afresh.
TEST(EventCorrelator, AForgottenOrFutureEventIsMadeAgain) {
  EventCorrelator c;
  const std::string k = key("m");
  c.recorded(k, "tj.1", kT0);
  c.forget(k);
  EXPECT_FALSE(c.repeat(k, kT0 + 1s));
  c.recorded(k, "tj.2", kT0);
  EXPECT_FALSE(c.repeat(k, kT0 - 1s));
}

// What it remembers is bounded, whatever the jobs say: the least recently used go first, and a
// message is never kept (a 1 MB one costs its key no more than a short one).
TEST(EventCorrelator, RemembersAtMostItsCapacityLeastRecentlyUsedFirst) {
  EventCorrelator c(3);
  c.recorded(key("a"), "tj.a", kT0);
  c.recorded(key("b"), "tj.b", kT0 + 1s);
  c.recorded(key("c"), "tj.c", kT0 + 2s);
  EXPECT_TRUE(c.repeat(key("a"), kT0 + 3s)) << "a is now the most recent";
  c.recorded(key("d"), "tj.d", kT0 + 4s);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_FALSE(c.repeat(key("b"), kT0 + 5s)) << "b, the least recently used, was dropped";
  EXPECT_TRUE(c.repeat(key("a"), kT0 + 5s));
  EXPECT_TRUE(c.repeat(key("c"), kT0 + 5s));
  EXPECT_TRUE(c.repeat(key("d"), kT0 + 5s));

  EventCorrelator full;
  const std::string huge(1 << 20, 'x');
  EXPECT_LT(key(huge).size(), 64u);
  for (size_t i = 0; i < 3 * EventCorrelator::kCapacity; ++i)
    full.recorded(key(std::to_string(i), "uid-" + std::to_string(i % 500)), "tj." + std::to_string(i), kT0);
  EXPECT_EQ(full.size(), EventCorrelator::kCapacity);
}
