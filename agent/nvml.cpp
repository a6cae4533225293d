#include "nvml.hpp"

#include <dlfcn.h>

#include "lockstep/log.hpp"

using namespace prometheus;

namespace lockstep::agent {

// The few NVML entry points used, declared here from NVML's documented C API.
struct GpuMonitor::Api {
  using Device = void*;
  struct Utilization { unsigned int gpu, memory; };
  struct Memory { unsigned long long total, free, used; };
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*power)(Device, unsigned int*) = nullptr;        // milliwatts
  int (*temperature)(Device, int, unsigned int*) = nullptr;  // sensor 0: the GPU die

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib, name));
    return f != nullptr;
  }
};

GpuMonitor::GpuMonitor(Metrics& metrics, const Config& cfg, std::chrono::milliseconds period)
    : api_(new Api), cfg_(cfg), base_(metrics.base_labels()), period_(period) {
  api_->lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api_->lib) {
    LOCKSTEP_LOG(Info, "agent", "no NVIDIA GPU here (libnvidia-ml.so.1 not loadable): GPU series are absent");
    return;
  }
  bool ok = api_->sym(api_->init, "nvmlInit_v2") && api_->sym(api_->shutdown, "nvmlShutdown") &&
            api_->sym(api_->count, "nvmlDeviceGetCount_v2") && api_->sym(api_->handle, "nvmlDeviceGetHandleByIndex_v2") &&
            api_->sym(api_->utilization, "nvmlDeviceGetUtilizationRates") &&
            api_->sym(api_->memory, "nvmlDeviceGetMemoryInfo") && api_->sym(api_->power, "nvmlDeviceGetPowerUsage") &&
            api_->sym(api_->temperature, "nvmlDeviceGetTemperature");
  unsigned int n = 0;
  if (!ok || api_->init() != 0 || api_->count(&n) != 0 || n == 0) {
    LOCKSTEP_LOG(Info, "agent", "NVML found but no usable GPU: GPU series are absent");
    return;
  }
  count_ = static_cast<int>(n);
  auto& reg = *metrics.registry();
  util_ = &BuildGauge().Name("lockstep_gpu_utilization_ratio").Help("GPU busy time over the last sample period (0-1)").Register(reg);
  mem_ = &BuildGauge().Name("lockstep_gpu_memory_used_bytes").Help("GPU memory in use").Register(reg);
  power_ = &BuildGauge().Name("lockstep_gpu_power_watts").Help("GPU power draw").Register(reg);
  temp_ = &BuildGauge().Name("lockstep_gpu_temperature_celsius").Help("GPU temperature").Register(reg);
  LOCKSTEP_LOG(Info, "agent", "NVML: " << count_ << " GPU(s); exporting utilization, memory, power and temperature");
  poll_once();
  thread_ = std::thread([this] {
    while (!stop_) {
      for (auto waited = std::chrono::milliseconds(0); waited < period_ && !stop_; waited += std::chrono::milliseconds(50))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!stop_) poll_once();
    }
  });
}

GpuMonitor::~GpuMonitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (count_ > 0) api_->shutdown();
  if (api_->lib) ::dlclose(api_->lib);
}

void GpuMonitor::poll_once() {
  for (int i = 0; i < count_; ++i) {
    Api::Device dev = nullptr;
    if (api_->handle(static_cast<unsigned int>(i), &dev) != 0) continue;
    Labels labels = base_;
    labels["gpu"] = std::to_string(i);
    // GPU i serves local rank i when each worker has one GPU, the usual layout.
    labels["rank"] = i < cfg_.nproc_per_node ? std::to_string(cfg_.node_rank * cfg_.nproc_per_node + i) : "";
    Api::Utilization u{};
    if (api_->utilization(dev, &u) == 0) util_->Add(labels).Set(u.gpu / 100.0);
    Api::Memory m{};
    if (api_->memory(dev, &m) == 0) mem_->Add(labels).Set(static_cast<double>(m.used));
    unsigned int mw = 0;
    if (api_->power(dev, &mw) == 0) power_->Add(labels).Set(mw / 1000.0);
    unsigned int c = 0;
    if (api_->temperature(dev, 0, &c) == 0) temp_->Add(labels).Set(c);
  }
}

}  // namespace lockstep::agent
