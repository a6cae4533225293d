// agent/nvml: what can be checked without a GPU (the GPU tier is agent_gpu_test).
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <filesystem>

#include "nvml.hpp"

using namespace lockstep::agent;
namespace straggler = lockstep::straggler;

// NVML's clock event reasons (nvml.h) onto straggler::Throttle: the five that slow a GPU down
// against the user's wishes, nothing else.
TEST(Nvml, ClockEventReasonsMapOntoThrottleBits) {
  EXPECT_EQ(throttle_bits_from_nvml(0), 0u);
  EXPECT_EQ(throttle_bits_from_nvml(0x4), straggler::kThrottlePower);         // SwPowerCap
  EXPECT_EQ(throttle_bits_from_nvml(0x8), straggler::kThrottleHwSlowdown);    // HwSlowdown
  EXPECT_EQ(throttle_bits_from_nvml(0x20), straggler::kThrottleThermal);      // SwThermalSlowdown
  EXPECT_EQ(throttle_bits_from_nvml(0x40), straggler::kThrottleHwThermal);    // HwThermalSlowdown
  EXPECT_EQ(throttle_bits_from_nvml(0x80), straggler::kThrottleHwPowerBrake); // HwPowerBrakeSlowdown
  // Idle 0x1, application clocks 0x2, sync boost 0x10, display clocks 0x100: not a slow GPU.
  EXPECT_EQ(throttle_bits_from_nvml(0x1 | 0x2 | 0x10 | 0x100), 0u);
  EXPECT_EQ(throttle_bits_from_nvml(0x4 | 0x80 | 0x1), straggler::kThrottlePower | straggler::kThrottleHwPowerBrake);
  EXPECT_EQ(throttle_bits_from_nvml(~0ULL), static_cast<unsigned>(straggler::kThrottleAll));
}

// Without NVML, no GPU series at all: the throttle series is absent, never a 0 that reads as a
// measurement.
TEST(Nvml, WithoutAGpuTheThrottleSeriesIsAbsent) {
  std::string dir = ::testing::TempDir() + "/agent-nvml-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  Metrics m(cfg, dir);
  GpuMonitor gpus(m, cfg);
  if (gpus.gpus() > 0) GTEST_SKIP() << "SKIPPED: this machine has a GPU (agent_gpu_test covers it)";
  const std::string text = prometheus::TextSerializer().Serialize(m.registry()->Collect());
  EXPECT_EQ(text.find("lockstep_gpu_clock_throttled"), std::string::npos) << text;
  EXPECT_EQ(text.find("lockstep_gpu_"), std::string::npos) << text;
}
