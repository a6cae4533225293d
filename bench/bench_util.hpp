// What the benchmarks share: a process's CPU time and memory from /proc, percentiles, a
// parallel loop, and readings of Prometheus text.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lockstep::bench {

// Set by SIGINT and SIGTERM once catch_stop_signals() has run: a benchmark's loops check it
// and wind down (stop what they started, print what they have, exit 130).
// A lock-free atomic: safe to set in a signal handler and to read from any thread.
inline std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);
inline void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = true; };
  for (int s : {SIGINT, SIGTERM}) ::sigaction(s, &sa, nullptr);
}

// Where scripts/setup.sh caches what it builds (scripts/common.sh's CACHE): LOCKSTEP_CACHE, else
// $XDG_CACHE_HOME/lockstep, else ~/.cache/lockstep.
inline std::string cache_dir() {
  auto env = [](const char* name, const std::string& otherwise) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : otherwise;
  };
  return env("LOCKSTEP_CACHE", env("XDG_CACHE_HOME", env("HOME", "/root") + "/.cache") + "/lockstep");
}

// The process's own CPU seconds (user + system, children excluded); -1 once it is gone.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i)
    if (i >= 14) ticks += std::stod(f);  // fields 14 and 15: utime, stime
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "kB" field of /proc/PID/status, e.g. "VmHWM:" (peak RSS) or "RssAnon:"; -1 if absent.
inline long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
  return -1;
}

// The p-quantile (0..1) by nearest rank; 0 for no samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

// Runs `total` tasks on `threads` threads: task(i) for i in [0, total). Stops taking new
// tasks once g_stop is set (Ctrl-C).
inline void parallel(int total, int threads, const std::function<void(int)>& task) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i; !g_stop && (i = next++) < total;) task(i);
    });
  for (auto& t : pool) t.join();
}

// Quantile of a Prometheus histogram in text format, interpolated within its bucket.
inline double histogram_quantile(const std::string& metrics, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  std::istringstream in(metrics);
  const std::string prefix = name + "_bucket{le=\"";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    auto end = line.find('"', prefix.size());
    std::string le = line.substr(prefix.size(), end - prefix.size());
    buckets.emplace_back(le == "+Inf" ? 1e300 : std::stod(le), std::stod(line.substr(line.rfind(' ') + 1)));
  }
  if (buckets.empty() || buckets.back().second == 0) return 0;
  double rank = q * buckets.back().second, prev_bound = 0, prev_count = 0;
  for (auto [bound, count] : buckets) {
    if (count >= rank) {
      if (bound > 1e299) return prev_bound;
      return prev_bound + (bound - prev_bound) * (count == prev_count ? 0 : (rank - prev_count) / (count - prev_count));
    }
    prev_bound = bound;
    prev_count = count;
  }
  return prev_bound;
}

// Sum of a metric's samples in Prometheus text, over the series whose line contains `filter`;
// `none` when no sample matches.
inline double metric_sum(const std::string& metrics, const std::string& name, const std::string& filter = "",
                         double none = 0) {
  double sum = 0;
  bool any = false;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    if (!filter.empty() && line.find(filter) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    any = true;
  }
  return any ? sum : none;
}

}  // namespace lockstep::bench
