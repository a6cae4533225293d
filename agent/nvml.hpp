// GPU series from NVML, loaded at run time with dlopen, so the agent builds and runs with no
// GPU software at all. Without a GPU the series are absent (never zeros) and one line says so.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

// Where to look for libnvidia-ml.so.1 by name when a plain dlopen does not find it, in order:
// the directories of `ld_library_path` (the image's LD_LIBRARY_PATH), the usual library
// directories of Debian, Ubuntu and Red Hat images and of the NVIDIA device plugin, then the
// directories `ld_so_conf` names. Without repeats.
std::vector<std::string> nvml_search_dirs(const std::string& ld_library_path, const std::string& ld_so_conf);

// The directories an ld.so.conf file names, its `include` globs followed as ldconfig does,
// bounded: at most `max_dirs` directories, from at most 64 files of at most 64 KB each,
// includes at most 8 deep; comments, hwcap lines, relative or unprintable entries and
// unreadable files are skipped; each file is read once, each directory given once.
std::vector<std::string> ld_so_conf_dirs(const std::string& path, size_t max_dirs = 256);

// NVML's current clock event ("throttle") reasons that explain a slow GPU, as straggler::Throttle
// bits (nvml.h: SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40,
// HwPowerBrakeSlowdown 0x80); the other reasons (idle, application clocks, sync boost, display
// clocks) slow nothing down that a user did not ask for, and are left out.
unsigned throttle_bits_from_nvml(unsigned long long reasons);

class GpuMonitor {
 public:
  GpuMonitor(Metrics& metrics, const Config& cfg, std::chrono::milliseconds period = std::chrono::seconds(2));
  ~GpuMonitor();
  int gpus() const { return count_; }

 private:
  struct Api;
  std::string load_library();  // sets api_->lib; says where it came from, or why not
  void poll_once();
  std::unique_ptr<Api> api_;
  int count_ = 0;
  void poll_throttle(void* device, int gpu, const prometheus::Labels& labels);
  Config cfg_;
  Metrics& metrics_;
  prometheus::Family<prometheus::Gauge>*util_ = nullptr, *mem_ = nullptr, *power_ = nullptr, *temp_ = nullptr;
  prometheus::Family<prometheus::Gauge>* throttled_ = nullptr;  // absent where NVML cannot say
  prometheus::Labels base_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lockstep::agent
