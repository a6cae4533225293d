// bench/operator: lockstep-operator at scale against the local control plane.
//
// 1. Raw: N bare pods created straight against the API server by `--concurrency` clients:
//    the API server's own pod-create rate on this machine, in this run.
// 2. Operator: J TrainingJobs of `--nodes` pods each applied at once; the time from the first
//    apply to the last pod created, the per-job latency from apply to all pods created, the
//    operator's reconcile durations, and its peak RSS.
// Prints the operator's pod-create rate as a ratio of the raw rate. Targets (issue #3):
// ratio >= 0.70, peak RSS <= 30 MB.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "control_plane.hpp"
#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "lockstep/flags.hpp"
#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"
#include "bench_util.hpp"

namespace bench = lockstep::bench;

using namespace std::chrono_literals;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace res = lockstep::kube::resources;

namespace {

// Quantile of a Prometheus histogram in text format, interpolated within its bucket.
double histogram_quantile(const std::string& metrics, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    std::string prefix = name + "_bucket{le=\"";
    if (line.rfind(prefix, 0) != 0) continue;
    auto end = line.find('"', prefix.size());
    std::string le = line.substr(prefix.size(), end - prefix.size());
    double bound = le == "+Inf" ? 1e300 : std::stod(le);
    buckets.emplace_back(bound, std::stod(line.substr(line.rfind(' ') + 1)));
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

std::string memory_breakdown(pid_t pid) {
  std::string out;
  for (const char* field : {"RssAnon", "RssFile"})
    out += std::string(field) + " " + std::to_string(bench::status_kb(pid, std::string(field) + ":") / 1024) + " MB; ";
  return out;
}

// Runs `total` tasks on `threads` threads; task(i) for i in [0, total).
void parallel(int total, int threads, const std::function<void(int)>& task) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i; (i = next++) < total;) task(i);
    });
  for (auto& t : pool) t.join();
}

// Counts pods of a namespace as a watch sees them appear (the same instrument for both
// phases), with the time each job's last pod appeared.
class PodCounter {
 public:
  PodCounter(const lockstep::kube::RestConfig& config, const std::string& ns, int nodes)
      : client_(config), ns_(ns), nodes_(nodes) {
    rv_ = client_.get(res::kPods.path(ns)).body["metadata"].value("resourceVersion", "");
    thread_ = std::thread([this] { run(); });
    std::this_thread::sleep_for(300ms);  // the watch is open before the first create
  }
  ~PodCounter() {
    stop_ = true;
    cancel_.cancel();  // ends the watch at once
    thread_.join();
  }
  int total() const { return total_; }
  // Waits until `n` pods were seen or `timeout` passes; returns the time of the last one.
  Clock::time_point wait(int n, std::chrono::seconds timeout, const std::function<bool()>& alive) {
    auto deadline = Clock::now() + timeout;
    while (total_ < n && Clock::now() < deadline && alive()) std::this_thread::sleep_for(5ms);
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  std::map<std::string, Clock::time_point> job_done() {
    std::lock_guard<std::mutex> lock(mu_);
    return job_done_;
  }

 private:
  void run() {
    while (!stop_) {
      auto r = client_.watch(res::kPods.path(ns_), rv_, 60, [&](const std::string& type, json& obj) {
        rv_ = obj["metadata"].value("resourceVersion", rv_);
        if (type != "ADDED") return;
        std::string job = obj["metadata"]["labels"].value("lockstep.dev/job-name", "");
        std::lock_guard<std::mutex> lock(mu_);
        last_ = Clock::now();
        if (!job.empty() && ++per_job_[job] == nodes_) job_done_[job] = last_;
        ++total_;
      }, cancel_);
      if (r.gone()) break;
    }
  }
  lockstep::kube::Client client_;
  std::string ns_, rv_;
  int nodes_;
  std::mutex mu_;
  std::map<std::string, int> per_job_;
  std::map<std::string, Clock::time_point> job_done_;
  Clock::time_point last_{};
  std::atomic<int> total_{0};
  std::atomic<bool> stop_{false};
  lockstep::kube::Cancellation cancel_;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  lockstep::kube::init_http_threads(2);  // as the operator does: the baseline gets the same client
  int jobs = 100, nodes = 8, concurrency = 32, workers = 4, parallelism = 8, rounds = 3;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v;
      using namespace lockstep::flags;
      if (match(argc, argv, i, "--jobs", v)) jobs = to_int("--jobs", v, 1, 10000);
      else if (match(argc, argv, i, "--nodes", v)) nodes = to_int("--nodes", v, 1, 512);
      else if (match(argc, argv, i, "--concurrency", v)) concurrency = to_int("--concurrency", v, 1, 256);
      else if (match(argc, argv, i, "--rounds", v)) rounds = to_int("--rounds", v, 1, 20);
      else if (match(argc, argv, i, "--workers", v)) workers = to_int("--workers", v, 1, 64);
      else if (match(argc, argv, i, "--create-parallelism", v)) parallelism = to_int("--create-parallelism", v, 1, 64);
      else throw FlagError(std::string("unknown flag '") + argv[i] + "' (flags: --jobs --nodes --concurrency --workers)");
    }
  } catch (const std::exception& e) {
    std::cerr << "lockstep-bench-operator: " << e.what() << "\n";
    return 2;
  }
  const int total = jobs * nodes;
  // Client-side rate limits, far above what the API server takes here, so neither side's
  // token bucket ever delays a request (the operator's defaults are 50 and 100).
  const double raw_qps = 1e6;
  const int raw_burst = 1000000;
  const std::string op_qps = "100000", op_burst = "100000";
  std::ostringstream limits;
  limits << "client rate limits: raw qps " << std::fixed << std::setprecision(0) << raw_qps << " burst " << raw_burst
         << "; operator --kube-api-qps " << op_qps << " --kube-api-burst " << op_burst;
  std::cout << "bench/operator: " << jobs << " TrainingJobs x " << nodes << " pods = " << total
            << " pods; raw baseline with " << concurrency << " concurrent clients; operator with " << workers
            << " workers, --create-parallelism " << parallelism << "\n  " << limits.str() << "\n";

  auto cp = lockstep::test::ControlPlane::start();
  std::map<std::string, std::string> env = {{"KUBECONFIG", cp->kubeconfig()}};
  for (const char* f : {"/crds/lockstep.dev_trainingjobs.yaml", "/tests/crds/podgroup.yaml"}) {
    auto r = lockstep::run_capture({"kubectl", "apply", "-f", std::string(LOCKSTEP_SOURCE_DIR) + f}, env);
    if (!r.status.success()) { std::cerr << r.output; return 1; }
  }
  lockstep::run_capture({"kubectl", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"}, env);

  auto config = lockstep::kube::RestConfig::from_kubeconfig(cp->kubeconfig());
  config.qps = raw_qps;
  config.burst = raw_burst;
  lockstep::kube::Client client(config);

  // The pod each side creates is the same manifest: the operator's own.
  json job_obj = {{"metadata", {{"name", "raw"}, {"namespace", "raw"}, {"uid", "00000000-0000-0000-0000-000000000000"}}},
                  {"spec", {{"nodes", nodes}, {"procsPerNode", 8}, {"strategy", "DDP"}, {"scheduling", {{"gang", true}}},
                            {"template", {{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:bench"}}})}}}}}}}};

  // The operator runs throughout, watching every namespace (its label selector skips the
  // raw pods). Rounds alternate raw and operator so drift on this shared machine hits both.
  int http_port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {LOCKSTEP_OPERATOR_BIN, "--kubeconfig", cp->kubeconfig(), "--workers", std::to_string(workers),
             "--create-parallelism", std::to_string(parallelism), "--kube-api-qps", op_qps, "--kube-api-burst",
             op_burst, "--http-address", "127.0.0.1", "--http-port", std::to_string(http_port), "--log-level", "warn",
             "--leader-elect", "false"};
  so.output_path = cp->dir() + "/operator.log";
  auto op = lockstep::Process::spawn(so);
  for (int i = 0; i < 200; ++i) {
    auto r = lockstep::run_capture({"curl", "-sf", "http://127.0.0.1:" + std::to_string(http_port) + "/readyz"}, {}, 5s);
    if (r.status.success()) break;
    std::this_thread::sleep_for(50ms);
  }
  auto view = lockstep::reconcile::JobView::from_json(job_obj);

  std::vector<double> raw_rates, op_rates, ratios, job_latency, api_cpu_raw, api_cpu_op, op_cpu, client_cpu;
  bool complete = true;
  for (int round = 1; round <= rounds; ++round) {
    std::string raw_ns = "raw-" + std::to_string(round), op_ns = "bench-" + std::to_string(round);
    for (const auto& ns : {raw_ns, op_ns}) lockstep::run_capture({"kubectl", "create", "namespace", ns}, env);

    // --- raw: the API server's own pod-create rate ---------------------------------------
    std::atomic<int> raw_errors{0};
    int raw_seen;
    double raw_s;
    {
      PodCounter seen(config, raw_ns, nodes);
      double api0 = bench::cpu_seconds(cp->apiserver_pid()), self0 = bench::cpu_seconds(getpid());
      auto t_raw = Clock::now();
      parallel(total, concurrency, [&](int i) {
        json pod = lockstep::reconcile::pod_manifest(view, i, 0);
        pod["metadata"]["name"] = "raw-" + std::to_string(i);
        pod["metadata"]["namespace"] = raw_ns;
        pod["metadata"].erase("ownerReferences");
        pod["metadata"]["labels"].erase("lockstep.dev/job-name");
        if (!client.create(res::kPods.path(raw_ns), pod).ok()) ++raw_errors;
      });
      auto last = seen.wait(total - raw_errors, 60s, [] { return true; });
      raw_s = std::chrono::duration<double>(last - t_raw).count();
      raw_seen = seen.total();
      api_cpu_raw.push_back(bench::cpu_seconds(cp->apiserver_pid()) - api0);
      client_cpu.push_back(bench::cpu_seconds(getpid()) - self0);
    }
    raw_rates.push_back(raw_seen / raw_s);

    // --- operator: TrainingJobs in, pods out ----------------------------------------------
    PodCounter counter(config, op_ns, nodes);
    std::map<std::string, Clock::time_point> applied;
    std::mutex applied_mu;
    double api1 = bench::cpu_seconds(cp->apiserver_pid()), op1 = bench::cpu_seconds(op.pid());
    auto t_op = Clock::now();
    parallel(jobs, concurrency, [&](int i) {
      json tj = job_obj;
      std::string name = "job-" + std::to_string(i);
      tj["apiVersion"] = "lockstep.dev/v1alpha1";
      tj["kind"] = "TrainingJob";
      tj["metadata"] = {{"name", name}, {"namespace", op_ns}};
      {
        std::lock_guard<std::mutex> lock(applied_mu);
        applied[name] = Clock::now();
      }
      auto r = client.create(res::kTrainingJobs.path(op_ns), tj);
      if (!r.ok()) std::cerr << "apply " << name << ": " << r.message() << "\n";
    });
    auto last = counter.wait(total, 300s, [&] { return op.running(); });
    double op_s = std::chrono::duration<double>(last - t_op).count();
    api_cpu_op.push_back(bench::cpu_seconds(cp->apiserver_pid()) - api1);
    op_cpu.push_back(bench::cpu_seconds(op.pid()) - op1);
    complete &= counter.total() == total;
    op_rates.push_back(counter.total() / op_s);
    ratios.push_back(op_rates.back() / raw_rates.back());
    for (const auto& [job, done] : counter.job_done())
      job_latency.push_back(std::chrono::duration<double>(done - applied[job]).count());
    std::cout << "  round " << round << "/" << rounds << ": raw " << std::fixed << std::setprecision(0) << raw_rates.back()
              << " pods/s, operator " << op_rates.back() << " pods/s (" << counter.total() << "/" << total << " in "
              << std::setprecision(2) << op_s << " s), ratio " << ratios.back() << std::endl;
  }

  auto metrics = lockstep::run_capture({"curl", "-s", "http://127.0.0.1:" + std::to_string(http_port) + "/metrics"}, {}, 10s).output;

  long rss_kb = bench::status_kb(op.pid(), "VmHWM:");
  std::string breakdown = memory_breakdown(op.pid());
  op.terminate(10s);  // it would otherwise act on the objects below

  // --- what each request costs the API server --------------------------------------------
  // The operator's pods come with a TrainingJob (the user's), a Service, a PodGroup, a
  // status write and an Event per job. Their measured API-server CPU bounds the ratio any
  // operator can reach on this machine, whatever its own efficiency.
  lockstep::run_capture({"kubectl", "create", "namespace", "costs"}, env);
  const int n = 200;
  auto cost = [&](const std::function<void(int)>& request) {
    double api0 = bench::cpu_seconds(cp->apiserver_pid());
    parallel(n, concurrency, request);
    return (bench::cpu_seconds(cp->apiserver_pid()) - api0) / n * 1000;  // ms per request
  };
  json tj = job_obj;
  tj["apiVersion"] = "lockstep.dev/v1alpha1";
  tj["kind"] = "TrainingJob";
  double c_pod = cost([&](int i) {
    json pod = lockstep::reconcile::pod_manifest(view, i, 0);
    pod["metadata"] = {{"name", "c-" + std::to_string(i)}, {"namespace", "costs"}};
    client.create(res::kPods.path("costs"), pod);
  });
  double c_job = cost([&](int i) {
    json j = tj;
    j["metadata"] = {{"name", "c-" + std::to_string(i)}, {"namespace", "costs"}};
    client.create(res::kTrainingJobs.path("costs"), j);
  });
  auto named = [&](int i) {
    auto v = view;
    v.name = "c-" + std::to_string(i);
    v.ns = "costs";
    return v;
  };
  double c_svc = cost([&](int i) { client.create(res::kServices.path("costs"), lockstep::reconcile::service_manifest(named(i))); });
  double c_pg = cost([&](int i) { client.create(res::kPodGroups.path("costs"), lockstep::reconcile::podgroup_manifest(named(i))); });
  double c_status = cost([&](int i) {
    lockstep::reconcile::JobStatus st;
    st.phase = "Pending";
    st.nodes.active = nodes;
    client.patch(res::kTrainingJobs.path("costs", "c-" + std::to_string(i), "status"), {{"status", st.to_json()}});
  });
  double c_event = cost([&](int i) {
    client.create(res::kEvents.path("costs"), lockstep::reconcile::event_manifest(named(i), "Normal", "CreatedPods", "x",
                                                                                 "2026-01-01T00:00:00Z", "bench"));
  });
  double per_job = nodes * c_pod + c_job + c_svc + c_pg + c_status + c_event;
  double ceiling = nodes * c_pod / per_job;

  double ratio = bench::percentile(ratios, 0.5);
  std::string hist = "lockstep_operator_reconcile_duration_seconds";
  std::cout << std::fixed << std::setprecision(3) << "\nresults: median of " << rounds << " rounds (" << jobs << " jobs x " << nodes
            << " pods; kube-apiserver v1.34.4 on loopback; " << std::thread::hardware_concurrency() << " cores)\n"
            << "  " << limits.str() << "\n"
            << "  raw pod creates:              " << std::setprecision(0) << bench::percentile(raw_rates, 0.5)
            << " pods/s (" << concurrency << " clients)\n"
            << "  operator, first apply -> all pods: " << std::setprecision(2) << total / bench::percentile(op_rates, 0.5)
            << " s, " << std::setprecision(0) << bench::percentile(op_rates, 0.5) << " pods/s\n"
            << "  ratio operator/raw:           " << std::setprecision(2) << ratio << " (rounds: " << [&] {
                 std::ostringstream o;
                 for (size_t i = 0; i < ratios.size(); ++i) o << (i ? ", " : "") << std::setprecision(2) << ratios[i];
                 return o.str();
               }() << "; target >= 0.70)\n"
            << "  job apply -> all its pods:    p50 " << std::setprecision(3) << bench::percentile(job_latency, 0.5)
            << " s, p99 " << bench::percentile(job_latency, 0.99) << " s\n"
            << "  reconcile duration:           p50 " << histogram_quantile(metrics, hist, 0.5) * 1000 << " ms, p99 "
            << histogram_quantile(metrics, hist, 0.99) * 1000 << " ms\n"
            << "  CPU seconds per round:        apiserver " << std::setprecision(2) << bench::percentile(api_cpu_raw, 0.5)
            << " (raw) vs " << bench::percentile(api_cpu_op, 0.5) << " (operator); operator " << bench::percentile(op_cpu, 0.5)
            << "; raw client " << bench::percentile(client_cpu, 0.5) << "\n"
            << "  API-server CPU per request:   pod " << std::setprecision(2) << c_pod << " ms, TrainingJob " << c_job
            << ", Service " << c_svc << ", PodGroup " << c_pg << ", status patch " << c_status << ", Event " << c_event
            << "\n  ratio ceiling from those:     " << nodes << " pods / (" << nodes
            << " pods + job + Service + PodGroup + status + Event) = " << ceiling << "\n"
            << "  operator peak RSS (VmHWM):    " << std::setprecision(1) << rss_kb / 1024.0
            << " MB (target <= 30); at the end " << breakdown << "\n";
  bool pass = complete && ratio >= 0.70 && rss_kb > 0 && rss_kb <= 30 * 1024;
  std::cout << (pass ? "targets met\n" : "targets NOT met\n");
  std::fflush(nullptr);
  ::_exit(complete ? 0 : 1);
}
