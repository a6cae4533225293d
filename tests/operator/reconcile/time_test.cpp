// reconcile/time: RFC 3339 timestamps as the API server writes them.
#include <gtest/gtest.h>

#include "reconcile/time.hpp"

using namespace lockstep::reconcile;

TEST(Time, RoundTripsRfc3339) {
  auto t = parse_time("2026-11-22T00:42:38Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(format_time(*t), "2026-11-22T00:42:38Z");
  EXPECT_TRUE(parse_time("2026-11-22T00:42:38.123456Z").has_value());
  EXPECT_FALSE(parse_time("yesterday").has_value());
}
