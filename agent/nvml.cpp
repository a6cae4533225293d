#include "nvml.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>

#include "lockstep/log.hpp"
#include "lockstep/text.hpp"

using namespace prometheus;

namespace lockstep::agent {

namespace {

constexpr const char* kNvml = "libnvidia-ml.so.1";

// What one ld.so.conf reading may take: a few hundred directories, from a few dozen files of
// at most 64 KB each, includes at most 8 deep. Anything past that is ignored, not an error.
struct ConfLimits {
  size_t max_dirs;
  size_t max_files = 64;
  size_t max_bytes = 64 * 1024;
  int max_depth = 8;
};

std::string trim(const std::string& s) { return std::string(text::trim(s, " \t\r\n\v\f")); }

// A directory entry worth trying: absolute, printable, not absurdly long; without trailing slashes.
bool plausible_dir(std::string& d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (d.empty() || d[0] != '/' || d.size() > 1024) return false;
  return std::all_of(d.begin(), d.end(), [](unsigned char c) { return c >= 0x20 && c != 0x7f; });
}

void read_conf(const std::string& path, int depth, const ConfLimits& lim, size_t& files, std::set<std::string>& seen,
               std::vector<std::string>& out) {
  if (depth > lim.max_depth || files >= lim.max_files || out.size() >= lim.max_dirs) return;
  char real[PATH_MAX];
  if (!seen.insert(::realpath(path.c_str(), real) ? real : path).second) return;  // each file once
  std::ifstream in(path);
  if (!in) return;
  ++files;
  std::string text(lim.max_bytes, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  std::string base = path.substr(0, path.rfind('/') + 1);
  size_t pos = 0;
  while (pos < text.size() && out.size() < lim.max_dirs) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (line.compare(0, 7, "include") == 0 && line.size() > 7 && std::isspace(static_cast<unsigned char>(line[7]))) {
      // ldconfig: each pattern a glob, relative to the including file's directory.
      std::string rest = line.substr(8);
      size_t at = 0;
      while (at < rest.size()) {
        size_t b = rest.find_first_not_of(" \t", at);
        if (b == std::string::npos) break;
        size_t e = rest.find_first_of(" \t", b);
        std::string pattern = rest.substr(b, e == std::string::npos ? std::string::npos : e - b);
        at = e == std::string::npos ? rest.size() : e;
        if (pattern[0] != '/') pattern = base + pattern;
        glob_t g{};
        if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
          for (size_t i = 0; i < g.gl_pathc; ++i) read_conf(g.gl_pathv[i], depth + 1, lim, files, seen, out);
        ::globfree(&g);
      }
      continue;
    }
    if (line.compare(0, 5, "hwcap") == 0) continue;  // hwcap entries name no directory
    // A directory, possibly with an old-style "=TYPE" suffix.
    std::string dir = trim(line.substr(0, line.find('=')));
    if (plausible_dir(dir)) out.push_back(dir);
  }
}

}  // namespace

unsigned throttle_bits_from_nvml(unsigned long long reasons) {
  static constexpr std::pair<unsigned long long, unsigned> kMap[] = {
      {0x4, straggler::kThrottlePower},       {0x8, straggler::kThrottleHwSlowdown},
      {0x20, straggler::kThrottleThermal},    {0x40, straggler::kThrottleHwThermal},
      {0x80, straggler::kThrottleHwPowerBrake}};
  unsigned bits = 0;
  for (const auto& [nvml, ours] : kMap)
    if (reasons & nvml) bits |= ours;
  return bits;
}

std::vector<std::string> ld_so_conf_dirs(const std::string& path, size_t max_dirs) {
  std::vector<std::string> dirs, out;
  std::set<std::string> seen;
  size_t files = 0;
  read_conf(path, 0, ConfLimits{max_dirs}, files, seen, dirs);
  seen.clear();
  for (auto& d : dirs)
    if (seen.insert(d).second) out.push_back(std::move(d));
  return out;
}

std::vector<std::string> nvml_search_dirs(const std::string& ld_library_path, const std::string& ld_so_conf) {
  std::vector<std::string> dirs;
  // The image's own LD_LIBRARY_PATH (the bundle's loader ignored it), then the usual homes of
  // the driver's libraries: Debian/Ubuntu, Red Hat, the NVIDIA device plugin's, then the
  // image's ld.so.conf, which the bundle's loader (--inhibit-cache) does not read either.
  size_t start = 0;
  while (start <= ld_library_path.size()) {
    size_t end = ld_library_path.find_first_of(":;", start);
    if (end == std::string::npos) end = ld_library_path.size();
    std::string d = ld_library_path.substr(start, end - start);
    if (plausible_dir(d)) dirs.push_back(d);
    start = end + 1;
  }
  for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
                        "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib"})
    dirs.emplace_back(d);
  for (auto& d : ld_so_conf_dirs(ld_so_conf)) dirs.push_back(std::move(d));
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (auto& d : dirs)
    if (seen.insert(d).second) unique.push_back(std::move(d));
  return unique;
}

// The few NVML entry points used, declared here from NVML's documented C API.
struct GpuMonitor::Api {
  using Device = void*;
  struct Utilization { unsigned int gpu, memory; };
  struct Memory { unsigned long long total, free, used; };
  // nvmlMemory_v2_t: `used` without the memory the driver reserves (about 600 MiB on an H200,
  // which the v1 call counts as used), as nvidia-smi reports it. version: the struct's size
  // with 2 in the top byte (NVML_STRUCT_VERSION(Memory, 2)).
  struct MemoryV2 { unsigned int version; unsigned long long total, reserved, free, used; };
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*memory_v2)(Device, MemoryV2*) = nullptr;  // drivers since R510; else `memory`
  int (*power)(Device, unsigned int*) = nullptr;        // milliwatts
  int (*temperature)(Device, int, unsigned int*) = nullptr;  // sensor 0: the GPU die
  // nvmlDeviceGetCurrentClocksEventReasons (R535 on), else its older name
  // nvmlDeviceGetCurrentClocksThrottleReasons; null when neither is there.
  int (*clock_reasons)(Device, unsigned long long*) = nullptr;

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib, name));
    return f != nullptr;
  }
};

GpuMonitor::GpuMonitor(Metrics& metrics, const Config& cfg, std::chrono::milliseconds period)
    : api_(new Api), cfg_(cfg), metrics_(metrics), base_(metrics.base_labels()), period_(period) {
  std::string from = load_library();
  if (!api_->lib) {
    LOCKSTEP_LOG(Info, "agent", "no NVIDIA GPU here (" << from << "): GPU series are absent");
    return;
  }
  LOCKSTEP_LOG(Info, "agent", "NVML: " << from);
  bool ok = api_->sym(api_->init, "nvmlInit_v2") && api_->sym(api_->shutdown, "nvmlShutdown") &&
            api_->sym(api_->count, "nvmlDeviceGetCount_v2") && api_->sym(api_->handle, "nvmlDeviceGetHandleByIndex_v2") &&
            api_->sym(api_->utilization, "nvmlDeviceGetUtilizationRates") &&
            api_->sym(api_->memory, "nvmlDeviceGetMemoryInfo") && api_->sym(api_->power, "nvmlDeviceGetPowerUsage") &&
            api_->sym(api_->temperature, "nvmlDeviceGetTemperature");
  api_->sym(api_->memory_v2, "nvmlDeviceGetMemoryInfo_v2");
  if (!api_->sym(api_->clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    api_->sym(api_->clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
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
  if (api_->clock_reasons)
    throttled_ = &BuildGauge()
                      .Name("lockstep_gpu_clock_throttled")
                      .Help("1 while NVML says the GPU's clocks are held down for this reason (power, thermal, "
                            "hw_slowdown, hw_thermal, hw_power_brake), else 0")
                      .Register(reg);
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

std::string GpuMonitor::load_library() {
  api_->lib = ::dlopen(kNvml, RTLD_NOW | RTLD_LOCAL);
  if (api_->lib) {
    link_map* map = nullptr;
    std::string path = ::dlinfo(api_->lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name ? map->l_name : kNvml;
    return "loaded " + path;
  }
  const char* plain = ::dlerror();
  std::string plain_error = plain ? plain : "unknown error";
  // Not on the loader's path. Under the bundle (docs/agent.md, "The bundle") that path is the
  // bundle's own directory and the loader's built-in directories, while the NVIDIA container
  // toolkit puts the library wherever the image keeps its libraries: look there by name.
  const char* llp = std::getenv("LD_LIBRARY_PATH");
  auto dirs = nvml_search_dirs(llp ? llp : "", "/etc/ld.so.conf");
  std::string failures;
  for (const auto& d : dirs) {
    std::string path = d + "/" + kNvml;
    if (::access(path.c_str(), F_OK) != 0) continue;
    api_->lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api_->lib) return "loaded " + path + " (found by searching the image's library directories)";
    const char* err = ::dlerror();
    failures += "; " + path + " did not load: " + (err ? err : "unknown error");
  }
  return std::string(kNvml) + " not loadable (" + plain_error + "), nor found in the " + std::to_string(dirs.size()) +
         " directories of LD_LIBRARY_PATH, the usual library directories and /etc/ld.so.conf" + failures;
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
    Api::MemoryV2 m2{};
    m2.version = static_cast<unsigned int>(sizeof(Api::MemoryV2)) | (2u << 24);
    Api::Memory m{};
    if (api_->memory_v2 && api_->memory_v2(dev, &m2) == 0) mem_->Add(labels).Set(static_cast<double>(m2.used));
    else if (api_->memory(dev, &m) == 0) mem_->Add(labels).Set(static_cast<double>(m.used));
    unsigned int mw = 0;
    if (api_->power(dev, &mw) == 0) power_->Add(labels).Set(mw / 1000.0);
    unsigned int c = 0;
    if (api_->temperature(dev, 0, &c) == 0) temp_->Add(labels).Set(c);
    poll_throttle(dev, i, labels);
  }
}

// One series per reason, and GPU i's bits for local rank i's straggler figure (the usual layout
// of one GPU a worker; a rank beyond the GPUs has none).
void GpuMonitor::poll_throttle(void* dev, int gpu, const Labels& labels) {
  unsigned long long reasons = 0;
  if (!throttled_ || api_->clock_reasons(dev, &reasons) != 0) return;
  const unsigned bits = throttle_bits_from_nvml(reasons);
  for (unsigned bit = 1; bit <= straggler::kThrottleAll; bit <<= 1) {
    Labels l = labels;
    l["reason"] = straggler::throttle_tokens(bit);
    throttled_->Add(l).Set((bits & bit) ? 1 : 0);
  }
  if (gpu < cfg_.nproc_per_node) metrics_.set_throttle(gpu, bits);
}

}  // namespace lockstep::agent
