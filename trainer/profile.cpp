#include "profile.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace lockstep::trainer {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::set<ActivityType> activities(const torch::Device& d) {
  if (d.is_cuda()) return {ActivityType::CPU, ActivityType::CUDA};
  return {ActivityType::CPU};
}

// The shortest readable form of a kernel name: templates and arguments cut, at most 90 chars.
std::string short_name(std::string n) {
  if (n.rfind("void ", 0) == 0) n = n.substr(5);
  if (n.size() > 90) n = n.substr(0, 87) + "...";
  return n;
}

}  // namespace

StepProfile::StepProfile(const torch::Device& device) : device_(device) {}

StepProfile::~StepProfile() {
  if (running_) prof::disableProfiler();
}

std::string StepProfile::kind_of(const std::string& n) {
  if (has(n, "nccl") || has(n, "Nccl")) return "communication";
  if (has(n, "Adam") || has(n, "adam")) return "optimizer";
  if (has(n, "Memcpy") || has(n, "Memset") || has(n, "memcpy") || has(n, "aten::copy_") || has(n, "aten::to"))
    return "copies";
  if (has(n, "flash") || has(n, "fmha") || has(n, "sdpa") || has(n, "attention") || has(n, "Attention"))
    return "attention";
  if (has(n, "gemm") || has(n, "nvjet") || has(n, "xmma") || has(n, "cutlass") || has(n, "aten::mm") ||
      has(n, "aten::addmm") || has(n, "aten::bmm"))
    return "matrix products";
  if (has(n, "SoftMax") || has(n, "softmax") || has(n, "nll_loss") || has(n, "cross_entropy")) return "loss (vocabulary)";
  if (has(n, "layer_norm") || has(n, "LayerNorm") || has(n, "GammaBeta")) return "LayerNorm";
  if (has(n, "Gelu") || has(n, "gelu")) return "GELU";
  if (has(n, "elementwise") || has(n, "reduce") || has(n, "multi_tensor_apply") || has(n, "aten::")) return "other elementwise";
  return "other";
}

void StepProfile::start() {
  ProfilerConfig config(ProfilerState::KINETO);
  prof::prepareProfiler(config, activities(device_));
  prof::enableProfiler(config, activities(device_));
  running_ = true;
}

void StepProfile::finish(double step_s, const std::string& trace_path, std::ostream& out) {
  if (!running_) return;
  running_ = false;
  auto result = prof::disableProfiler();
  const auto want = device_.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::map<std::string, std::pair<double, int>> by_name;  // seconds, count
  std::map<std::string, double> by_kind;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  double total = 0;
  for (const auto& e : result->events()) {
    if (e.deviceType() != want || e.isHiddenEvent()) continue;
    const std::string name = e.name();
    if (!device_.is_cuda() && name.rfind("aten::", 0) != 0) continue;  // CPU: operators only
    const double s = static_cast<double>(e.durationNs()) * 1e-9;
    auto& n = by_name[name];
    n.first += s;
    n.second += 1;
    by_kind[kind_of(name)] += s;
    total += s;
    spans.emplace_back(e.startNs(), e.endNs());
  }
  std::sort(spans.begin(), spans.end());
  double busy = 0;  // the union of the intervals: when the device was doing anything
  uint64_t cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [b, e] : spans) {
    if (!open || b > cur_end) {
      if (open) busy += static_cast<double>(cur_end - cur_start) * 1e-9;
      cur_start = b;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) busy += static_cast<double>(cur_end - cur_start) * 1e-9;

  auto ms = [](double s) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(2) << s * 1e3 << " ms";
    return o.str();
  };
  auto pct = [&](double s) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(1) << (step_s > 0 ? 100 * s / step_s : 0) << "%";
    return o.str();
  };
  const char* what = device_.is_cuda() ? "GPU kernels" : "CPU operators (nested ones inside their callers too)";
  out << "lockstep-trainer: profile of one step (Note [Step profile]): step " << ms(step_s) << ", " << what << " "
      << ms(total) << " in " << spans.size() << " events, device busy " << ms(busy) << " (" << pct(busy)
      << "), idle " << ms(std::max(0.0, step_s - busy)) << "\n";
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [k, s] : by_kind) kinds.emplace_back(s, k);
  std::sort(kinds.rbegin(), kinds.rend());
  out << "  by kind:\n";
  for (const auto& [s, k] : kinds) out << "    " << std::left << std::setw(20) << k << std::right << std::setw(12) << ms(s) << std::setw(8) << pct(s) << "\n";
  std::vector<std::pair<double, std::string>> names;
  for (const auto& [n, v] : by_name) names.emplace_back(v.first, n);
  std::sort(names.rbegin(), names.rend());
  out << "  top " << std::min<size_t>(15, names.size()) << " by time:\n";
  for (size_t i = 0; i < names.size() && i < 15; ++i)
    out << "    " << std::setw(12) << ms(names[i].first) << std::setw(8) << pct(names[i].first) << "  x"
        << std::left << std::setw(5) << by_name[names[i].second].second << std::right << " "
        << short_name(names[i].second) << "  [" << kind_of(names[i].second) << "]\n";
  out.flush();
  if (!trace_path.empty()) {
    result->save(trace_path);
    out << "lockstep-trainer: profile trace in " << trace_path << std::endl;
  }
}

}  // namespace lockstep::trainer
