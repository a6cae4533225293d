// controller::slow_start_batches (Note [Slow start]).
#include <gtest/gtest.h>

#include <numeric>

#include "controller/slow_start.hpp"

using lockstep::controller::slow_start_batches;

TEST(SlowStart, BatchesDoubleUpToTheParallelism) {
  EXPECT_EQ(slow_start_batches(1, 8, 256), (std::vector<int>{1}));
  EXPECT_EQ(slow_start_batches(2, 8, 256), (std::vector<int>{1, 1}));
  EXPECT_EQ(slow_start_batches(10, 8, 256), (std::vector<int>{1, 2, 4, 3}));
  EXPECT_EQ(slow_start_batches(40, 8, 256), (std::vector<int>{1, 2, 4, 8, 8, 8, 8, 1}));
  EXPECT_TRUE(slow_start_batches(0, 8, 256).empty());
}

TEST(SlowStart, APassCreatesAtMostItsCap) {
  auto b = slow_start_batches(4096, 8, 256);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 256);
  EXPECT_EQ(b.front(), 1);
  for (int n : b) EXPECT_LE(n, 8);
}

TEST(SlowStart, NonsenseLimitsStillMakeProgress) {
  EXPECT_EQ(slow_start_batches(3, 0, 0), (std::vector<int>{1}));
  EXPECT_EQ(slow_start_batches(3, 1, 100), (std::vector<int>{1, 1, 1}));
}
