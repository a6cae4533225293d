#include "real_cluster.hpp"

#include "test_util.hpp"

#include <atomic>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#ifndef LOCKSTEP_SOURCE_DIR
#error "LOCKSTEP_SOURCE_DIR must be defined"
#endif

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace lockstep::test {
namespace {

const std::string kScript = std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/cluster.sh";
std::atomic<pid_t> g_running_script{0};
std::atomic<bool> g_stop_requested{false};

// cluster.sh's exit codes (its header).
constexpr int kExitMachineCannot = 3, kExitSetupMissing = 4, kExitMachineBusy = 5, kExitDown = 6;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// run_script: cluster.sh with LOCKSTEP_CLUSTER_DIR=state_dir, its output copied to stderr as it
// comes (up prints a line per step) unless quiet, and returned.
RunResult run_script(const std::string& state_dir, const std::vector<std::string>& args,
                     std::chrono::milliseconds timeout, bool quiet) {
  fs::create_directories(state_dir);
  std::string log = state_dir + "/fixture-" + (args.empty() ? "usage" : args[0]) + ".log";
  fs::remove(log);
  SpawnOptions so;
  so.argv = {"bash", kScript};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  so.env = {{"LOCKSTEP_CLUSTER_DIR", state_dir}};
  so.output_path = log;
  so.new_process_group = true;  // a Ctrl-C reaches it through our handler, which waits for its teardown
  auto proc = Process::spawn(so);
  g_running_script = proc.pid();
  RunResult result;
  size_t shown = 0;  // bytes of the log already copied to stderr
  auto show = [&](bool all) {
    result.output = read_file(log);
    size_t end = all ? result.output.size() : result.output.rfind('\n') + 1;  // whole lines (npos + 1 is 0)
    if (end <= shown) return;
    if (!quiet) {
      std::istringstream lines(result.output.substr(shown, end - shown));
      for (std::string line; std::getline(lines, line);) std::cerr << "  " << line << "\n";
    }
    shown = end;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto st = proc.wait_for(200ms)) {
      result.status = *st;
      break;
    }
    show(false);
    if (std::chrono::steady_clock::now() > deadline) {
      result.status = proc.terminate(60s);  // its trap tears down what it started
      result.timed_out = true;
      break;
    }
  }
  g_running_script = 0;
  show(true);
  // A stop signal's handler ended this script and will end the program once it has brought
  // the cluster down: going on would run tests against a cluster that is going away.
  while (g_stop_requested) ::pause();
  return result;
}

std::vector<pid_t> recorded_pids(const std::string& state_dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_dir + "/run/pids", ec))
    if (pid_t p = std::atoi(read_file(e.path().string()).c_str()); p > 0) pids.push_back(p);
  return pids;
}

}  // namespace

pid_t running_cluster_script() { return g_running_script; }
void request_cluster_stop() { g_stop_requested = true; }

std::string cluster_setting(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  auto r = run_capture({"bash", "-c", "source \"$1\" && printf '%s' \"${!2}\"", "_",
                        std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/common.sh", name},
                       {}, 30s);
  if (!r.status.success() || r.output.empty())
    throw std::runtime_error("scripts/common.sh does not define " + name + ": " + r.output);
  return cache[name] = r.output;
}

// without_prefixes: the script's lines without their "[lockstep 12:00:00] cluster: " part.
std::string without_prefixes(const std::string& output) {
  std::istringstream in(output);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (auto at = line.find("] cluster: "); line.rfind("[lockstep ", 0) == 0 && at != std::string::npos)
      line = line.substr(at + 11);
    out += (out.empty() ? "" : "\n") + line;
  }
  return out;
}

// unavailable: the exception for a cluster.sh preflight or up that did not succeed.
ClusterUnavailable unavailable(const std::string& what, const RunResult& r, std::chrono::seconds timeout) {
  std::string why = "scripts/cluster.sh " + what + " " + r.status.describe() +
                    (r.timed_out ? " (stopped after " + std::to_string(timeout.count()) + " s)" : "") + ": " +
                    without_prefixes(r.output);
  switch (r.status.signal ? -1 : r.status.code) {
    case kExitMachineCannot: return ClusterUnavailable(ClusterProblem::kMachineCannot, without_prefixes(r.output));
    case kExitSetupMissing: return ClusterUnavailable(ClusterProblem::kSetupMissing, why);
    case kExitMachineBusy: return ClusterUnavailable(ClusterProblem::kMachineBusy, why);
    default: return ClusterUnavailable(ClusterProblem::kStartFailed, why);
  }
}

std::unique_ptr<RealCluster> RealCluster::up(RealClusterOptions options) {
  if (options.state_dir.empty())
    options.state_dir = env_or("LOCKSTEP_CLUSTER_TEST_DIR", cluster_setting("CACHE") + "/cluster-test");
  std::unique_ptr<RealCluster> cluster(new RealCluster());
  cluster->options_ = options;

  // Can this machine run it at all, and did set-up make everything? (Touches nothing.)
  auto pre = run_capture({"bash", kScript, "preflight"}, {{"LOCKSTEP_CLUSTER_DIR", options.state_dir}}, 60s);
  if (!pre.status.success()) throw unavailable("preflight", pre, 60s);

  // A cluster left up here by a killed run: bring it down, so this run starts clean.
  auto status = cluster->script({"status"}, 60s);
  if (status.status.code != kExitDown && !status.status.signal) {
    if (!options.quiet) std::cerr << "[cluster] a cluster from an earlier run is up in " << options.state_dir
                                  << "; bringing it down first\n";
    cluster->script({"down"}, 120s);
  }

  if (!options.quiet) std::cerr << "[cluster] scripts/cluster.sh up (state " << options.state_dir << ")\n";
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_script(options.state_dir, {"up", "--nodes", std::to_string(options.nodes)}, options.up_timeout, options.quiet);
  cluster->up_seconds_ = seconds_since(t0);
  if (!r.status.success()) throw unavailable("up", r, options.up_timeout);
  cluster->up_ = true;
  cluster->daemon_pids_ = recorded_pids(options.state_dir);
  if (!options.quiet)
    std::cerr << "[cluster] up in " << std::fixed << std::setprecision(1) << cluster->up_seconds_
              << " s; KUBECONFIG=" << cluster->kubeconfig() << "\n";
  return cluster;
}

RunResult RealCluster::down() {
  if (!up_) return {};
  up_ = false;
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_script(options_.state_dir, {"down"}, 2min, options_.quiet);
  down_seconds_ = seconds_since(t0);
  return r;
}

RealCluster::~RealCluster() { down(); }

RunResult RealCluster::script(const std::vector<std::string>& args, std::chrono::milliseconds timeout) const {
  return run_script(options_.state_dir, args, timeout, /*quiet=*/true);
}

RunResult RealCluster::kubectl(const std::vector<std::string>& args, const std::string& stdin_data,
                               std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {cluster_setting("TOOLS_BIN") + "/kubectl", "--kubeconfig", kubeconfig()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_capture(argv, {}, timeout, stdin_data);
}

}  // namespace lockstep::test
