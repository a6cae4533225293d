// plan::model_states against the ZeRO paper's published figures, and the Auto choice.
#include <gtest/gtest.h>

#include "lockstep/memory_plan.hpp"

using namespace lockstep::plan;

// ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam:
// 120 GB, 31.4 GB, 16.6 GB and 1.9 GB of model states per GPU.
TEST(MemoryPlan, MatchesTheZeroPapersFigures) {
  const double p = 7.5e9;
  EXPECT_NEAR(model_states(p, 64, Sharding::DDP).total() / 1e9, 120.0, 0.05);
  EXPECT_NEAR(model_states(p, 64, Sharding::ZeRO1).total() / 1e9, 31.4, 0.05);
  EXPECT_NEAR(model_states(p, 64, Sharding::ZeRO2).total() / 1e9, 16.6, 0.05);
  EXPECT_NEAR(model_states(p, 64, Sharding::ZeRO3).total() / 1e9, 1.9, 0.05);
}

TEST(MemoryPlan, ActivationsFollowKorthikanti) {
  // GPT-3 175B layer: s 2048, b 1, h 12288, a 96: 34 s b h + 5 a s^2 b bytes.
  TransformerShape t{1, 12288, 96, 2048, 1};
  EXPECT_DOUBLE_EQ(activation_bytes(t, false), 34.0 * 2048 * 12288 + 5.0 * 96 * 2048 * 2048);
  EXPECT_DOUBLE_EQ(activation_bytes(t, true), 2.0 * 2048 * 12288);
}

TEST(MemoryPlan, AutoPicksDdpWhenItFitsAndFsdpWhenItDoesNot) {
  auto small = choose(124e6, 8, 1e9, 80e9);  // GPT-2 small on 80 GB GPUs
  EXPECT_FALSE(small.fsdp) << small.why;
  EXPECT_NE(small.why.find("DDP"), std::string::npos);
  auto big = choose(7.5e9, 8, 4e9, 80e9);  // 120 GB of DDP states cannot fit in 64 GB
  EXPECT_TRUE(big.fsdp) << big.why;
  EXPECT_NE(big.why.find("DDP would need"), std::string::npos) << big.why;
}
