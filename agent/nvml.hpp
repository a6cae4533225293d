// GPU series from NVML, loaded at run time with dlopen, so the agent builds and runs with no
// GPU software at all. Without a GPU the series are absent (never zeros) and one line says so.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "config.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

class GpuMonitor {
 public:
  GpuMonitor(Metrics& metrics, const Config& cfg, std::chrono::milliseconds period = std::chrono::seconds(2));
  ~GpuMonitor();
  int gpus() const { return count_; }

 private:
  struct Api;
  void poll_once();
  std::unique_ptr<Api> api_;
  int count_ = 0;
  Config cfg_;
  prometheus::Family<prometheus::Gauge>*util_ = nullptr, *mem_ = nullptr, *power_ = nullptr, *temp_ = nullptr;
  prometheus::Labels base_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lockstep::agent
