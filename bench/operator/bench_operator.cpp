// bench/operator: lockstep-operator at scale against the local control plane.
//
// 1. Raw: N bare pods created straight against the API server by `--concurrency` clients:
//    the API server's own pod-create rate on this machine, in this run.
// 2. Operator: J TrainingJobs of `--nodes` pods each applied at once; the time from the first
//    apply to the last pod created, the per-job latency from apply to all pods created, the
//    operator's reconcile durations, and its peak RSS.
// Prints the operator's pod-create rate as a ratio of the raw rate. Targets (issue #3):
// ratio >= 0.70, peak RSS <= 30 MB.
// 3. `--peer kubeflow`: lockstep-operator against Kubeflow training-operator instead of the raw
//    baseline, both at their defaults (issue #15; "Peer mode" below, bench/operator/run.sh).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>


#include "control_plane.hpp"
#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube/rest_config.hpp"
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

std::string memory_breakdown(pid_t pid) {
  std::string out;
  for (const char* field : {"RssAnon", "RssFile"})
    out += std::string(field) + " " + std::to_string(bench::status_kb(pid, std::string(field) + ":") / 1024) + " MB; ";
  return out;
}

// Counts pods of a namespace as a watch sees them appear (the same instrument for both
// phases), with the time each job's last pod appeared.
class PodCounter {
 public:
  PodCounter(const lockstep::kube::RestConfig& config, const std::string& ns, int nodes,
             std::string job_label = "lockstep.dev/job-name")
      : client_(config), ns_(ns), job_label_(std::move(job_label)), nodes_(nodes) {
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
        std::string job = obj["metadata"]["labels"].value(job_label_, "");
        std::lock_guard<std::mutex> lock(mu_);
        last_ = Clock::now();
        if (!job.empty() && ++per_job_[job] == nodes_) job_done_[job] = last_;
        ++total_;
      }, cancel_);
      if (r.gone()) break;
    }
  }
  lockstep::kube::Client client_;
  std::string ns_, job_label_, rv_;
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

// --- The raw baseline (the default mode) ---------------------------------------------------
//
// Rounds alternate raw creates and operator creates (the file's steps 1 and 2) against one
// control plane and one operator, which runs throughout; then the API-server CPU each kind of
// request costs, and the results.

struct RawOptions {
  int jobs = 100, nodes = 8, concurrency = 32, workers = 4, parallelism = 8, rounds = 3;
};

// Client-side rate limits, far above what the API server takes here, so neither side's
// token bucket ever delays a request (the operator's defaults are 50 and 100).
const double kRawQps = 1e6;
const int kRawBurst = 1000000;
const char* const kOperatorQps = "100000";
const char* const kOperatorBurst = "100000";

std::string rate_limits() {
  std::ostringstream limits;
  limits << "client rate limits: raw qps " << std::fixed << std::setprecision(0) << kRawQps << " burst " << kRawBurst
         << "; operator --kube-api-qps " << kOperatorQps << " --kube-api-burst " << kOperatorBurst;
  return limits.str();
}

// The raw baseline's run: what every round shares, what each measured, and what the end read.
struct RawRun {
  explicit RawRun(const RawOptions& options) : o(options), total(options.jobs * options.nodes) {}
  RawOptions o;
  int total;
  std::unique_ptr<lockstep::test::ControlPlane> cp;
  std::map<std::string, std::string> env;
  lockstep::kube::RestConfig config;
  std::unique_ptr<lockstep::kube::Client> client;
  json job_obj;  // the TrainingJob whose pods both sides create
  lockstep::reconcile::JobView view;
  lockstep::Process op;
  int http_port = 0;
  // One sample per round.
  std::vector<double> raw_rates, op_rates, ratios, job_latency, api_cpu_raw, api_cpu_op, op_cpu, client_cpu;
  bool complete = true;
  // Read from the operator before it stops.
  std::string metrics, breakdown;
  long rss_kb = -1;
  // The API server's CPU per request, ms.
  double c_pod = 0, c_job = 0, c_svc = 0, c_pg = 0, c_status = 0, c_event = 0;
};

void print_raw_plan(const RawRun& run) {
  const RawOptions& o = run.o;
  std::cout << "bench/operator: " << o.jobs << " TrainingJobs x " << o.nodes << " pods = " << run.total
            << " pods; raw baseline with " << o.concurrency << " concurrent clients; operator with " << o.workers
            << " workers, --create-parallelism " << o.parallelism << "\n  " << rate_limits() << "\n";
}

// The control plane with the TrainingJob and PodGroup CRDs, and the benchmark's client; false
// (kubectl's output printed) when a CRD does not apply.
bool start_control_plane(RawRun& run) {
  run.cp = lockstep::test::ControlPlane::start();
  run.env = {{"KUBECONFIG", run.cp->kubeconfig()}};
  for (const char* f : {"/crds/lockstep.dev_trainingjobs.yaml", "/tests/crds/podgroup.yaml"}) {
    auto r = lockstep::run_capture({"kubectl", "apply", "-f", std::string(LOCKSTEP_SOURCE_DIR) + f}, run.env);
    if (!r.status.success()) { std::cerr << r.output; return false; }
  }
  lockstep::run_capture({"kubectl", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"}, run.env);

  run.config = lockstep::kube::RestConfig::from_kubeconfig(run.cp->kubeconfig());
  run.config.qps = kRawQps;
  run.config.burst = kRawBurst;
  run.client = std::make_unique<lockstep::kube::Client>(run.config);

  // The pod each side creates is the same manifest: the operator's own.
  run.job_obj = {{"metadata", {{"name", "raw"}, {"namespace", "raw"}, {"uid", "00000000-0000-0000-0000-000000000000"}}},
                 {"spec", {{"nodes", run.o.nodes}, {"procsPerNode", 8}, {"strategy", "DDP"}, {"scheduling", {{"gang", true}}},
                           {"template", {{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:bench"}}})}}}}}}}};
  return true;
}

// The operator runs throughout, watching every namespace (its label selector skips the
// raw pods). Rounds alternate raw and operator so drift on this shared machine hits both.
void start_operator(RawRun& run) {
  run.http_port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {LOCKSTEP_OPERATOR_BIN, "--kubeconfig", run.cp->kubeconfig(), "--workers", std::to_string(run.o.workers),
             "--create-parallelism", std::to_string(run.o.parallelism), "--kube-api-qps", kOperatorQps, "--kube-api-burst",
             kOperatorBurst, "--http-address", "127.0.0.1", "--http-port", std::to_string(run.http_port), "--log-level", "warn",
             "--leader-elect", "false"};
  so.output_path = run.cp->dir() + "/operator.log";
  run.op = lockstep::Process::spawn(so);
  for (int i = 0; i < 200; ++i) {
    auto r = lockstep::run_capture({"curl", "-sf", "http://127.0.0.1:" + std::to_string(run.http_port) + "/readyz"}, {}, 5s);
    if (r.status.success()) break;
    std::this_thread::sleep_for(50ms);
  }
  run.view = lockstep::reconcile::JobView::from_json(run.job_obj);
}

// A round's two namespaces: raw-N for the raw creates, bench-N for the operator's jobs.
std::pair<std::string, std::string> create_round_namespaces(const RawRun& run, int round) {
  std::string raw_ns = "raw-" + std::to_string(round), op_ns = "bench-" + std::to_string(round);
  for (const auto& ns : {raw_ns, op_ns}) lockstep::run_capture({"kubectl", "create", "namespace", ns}, run.env);
  return {raw_ns, op_ns};
}

// --- raw: the API server's own pod-create rate ---------------------------------------
void time_raw_creates(RawRun& run, const std::string& raw_ns) {
  const RawOptions& o = run.o;
  std::atomic<int> raw_errors{0};
  int raw_seen;
  double raw_s;
  {
    PodCounter seen(run.config, raw_ns, o.nodes);
    double api0 = bench::cpu_seconds(run.cp->apiserver_pid()), self0 = bench::cpu_seconds(getpid());
    auto t_raw = Clock::now();
    bench::parallel(run.total, o.concurrency, [&](int i) {
      json pod = lockstep::reconcile::pod_manifest(run.view, i, 0);
      pod["metadata"]["name"] = "raw-" + std::to_string(i);
      pod["metadata"]["namespace"] = raw_ns;
      pod["metadata"].erase("ownerReferences");
      pod["metadata"]["labels"].erase("lockstep.dev/job-name");
      if (!run.client->create(res::kPods.path(raw_ns), pod).ok()) ++raw_errors;
    });
    auto last = seen.wait(run.total - raw_errors, 60s, [] { return true; });
    raw_s = std::chrono::duration<double>(last - t_raw).count();
    raw_seen = seen.total();
    run.api_cpu_raw.push_back(bench::cpu_seconds(run.cp->apiserver_pid()) - api0);
    run.client_cpu.push_back(bench::cpu_seconds(getpid()) - self0);
  }
  run.raw_rates.push_back(raw_seen / raw_s);
}

// --- operator: TrainingJobs in, pods out ----------------------------------------------
// Prints the round's line.
void time_operator_creates(RawRun& run, const std::string& op_ns, int round) {
  const RawOptions& o = run.o;
  PodCounter counter(run.config, op_ns, o.nodes);
  std::map<std::string, Clock::time_point> applied;
  std::mutex applied_mu;
  double api1 = bench::cpu_seconds(run.cp->apiserver_pid()), op1 = bench::cpu_seconds(run.op.pid());
  auto t_op = Clock::now();
  bench::parallel(o.jobs, o.concurrency, [&](int i) {
    json tj = run.job_obj;
    std::string name = "job-" + std::to_string(i);
    tj["apiVersion"] = "lockstep.dev/v1alpha1";
    tj["kind"] = "TrainingJob";
    tj["metadata"] = {{"name", name}, {"namespace", op_ns}};
    {
      std::lock_guard<std::mutex> lock(applied_mu);
      applied[name] = Clock::now();
    }
    auto r = run.client->create(res::kTrainingJobs.path(op_ns), tj);
    if (!r.ok()) std::cerr << "apply " << name << ": " << r.message() << "\n";
  });
  auto last = counter.wait(run.total, 300s, [&] { return run.op.running(); });
  double op_s = std::chrono::duration<double>(last - t_op).count();
  run.api_cpu_op.push_back(bench::cpu_seconds(run.cp->apiserver_pid()) - api1);
  run.op_cpu.push_back(bench::cpu_seconds(run.op.pid()) - op1);
  run.complete &= counter.total() == run.total;
  run.op_rates.push_back(counter.total() / op_s);
  run.ratios.push_back(run.op_rates.back() / run.raw_rates.back());
  for (const auto& [job, done] : counter.job_done())
    run.job_latency.push_back(std::chrono::duration<double>(done - applied[job]).count());
  std::cout << "  round " << round << "/" << o.rounds << ": raw " << std::fixed << std::setprecision(0) << run.raw_rates.back()
            << " pods/s, operator " << run.op_rates.back() << " pods/s (" << counter.total() << "/" << run.total << " in "
            << std::setprecision(2) << op_s << " s), ratio " << run.ratios.back() << std::endl;
}

// Reads the operator's metrics and memory, then stops it.
void stop_operator(RawRun& run) {
  run.metrics = lockstep::run_capture({"curl", "-s", "http://127.0.0.1:" + std::to_string(run.http_port) + "/metrics"}, {}, 10s).output;

  run.rss_kb = bench::status_kb(run.op.pid(), "VmHWM:");
  run.breakdown = memory_breakdown(run.op.pid());
  run.op.terminate(10s);  // it would otherwise act on the objects below
}

// --- what each request costs the API server --------------------------------------------
// The operator's pods come with a TrainingJob (the user's), a Service, a PodGroup, a
// status write and an Event per job. Their measured API-server CPU bounds the ratio any
// operator can reach on this machine, whatever its own efficiency.
void measure_request_costs(RawRun& run) {
  lockstep::kube::Client& client = *run.client;
  lockstep::run_capture({"kubectl", "create", "namespace", "costs"}, run.env);
  const int n = 200;
  auto cost = [&](const std::function<void(int)>& request) {
    double api0 = bench::cpu_seconds(run.cp->apiserver_pid());
    bench::parallel(n, run.o.concurrency, request);
    return (bench::cpu_seconds(run.cp->apiserver_pid()) - api0) / n * 1000;  // ms per request
  };
  json tj = run.job_obj;
  tj["apiVersion"] = "lockstep.dev/v1alpha1";
  tj["kind"] = "TrainingJob";
  run.c_pod = cost([&](int i) {
    json pod = lockstep::reconcile::pod_manifest(run.view, i, 0);
    pod["metadata"] = {{"name", "c-" + std::to_string(i)}, {"namespace", "costs"}};
    client.create(res::kPods.path("costs"), pod);
  });
  run.c_job = cost([&](int i) {
    json j = tj;
    j["metadata"] = {{"name", "c-" + std::to_string(i)}, {"namespace", "costs"}};
    client.create(res::kTrainingJobs.path("costs"), j);
  });
  auto named = [&](int i) {
    auto v = run.view;
    v.name = "c-" + std::to_string(i);
    v.ns = "costs";
    return v;
  };
  run.c_svc = cost([&](int i) { client.create(res::kServices.path("costs"), lockstep::reconcile::service_manifest(named(i))); });
  run.c_pg = cost([&](int i) { client.create(res::kPodGroups.path("costs"), lockstep::reconcile::podgroup_manifest(named(i))); });
  run.c_status = cost([&](int i) {
    lockstep::reconcile::JobStatus st;
    st.phase = "Pending";
    st.nodes.active = run.o.nodes;
    client.patch(res::kTrainingJobs.path("costs", "c-" + std::to_string(i), "status"), {{"status", st.to_json()}});
  });
  run.c_event = cost([&](int i) {
    client.create(res::kEvents.path("costs"), lockstep::reconcile::event_manifest(named(i), "Normal", "CreatedPods", "x",
                                                                                 "2026-01-01T00:00:00Z", "bench"));
  });
}

// The medians of the rounds, the request costs, and whether the targets are met.
void print_raw_results(const RawRun& run) {
  const RawOptions& o = run.o;
  double per_job = o.nodes * run.c_pod + run.c_job + run.c_svc + run.c_pg + run.c_status + run.c_event;
  double ceiling = o.nodes * run.c_pod / per_job;

  double ratio = bench::percentile(run.ratios, 0.5);
  std::string hist = "lockstep_operator_reconcile_duration_seconds";
  std::cout << std::fixed << std::setprecision(3) << "\nresults: median of " << o.rounds << " rounds (" << o.jobs << " jobs x " << o.nodes
            << " pods; kube-apiserver v1.34.4 on loopback; " << std::thread::hardware_concurrency() << " cores)\n"
            << "  " << rate_limits() << "\n"
            << "  raw pod creates:              " << std::setprecision(0) << bench::percentile(run.raw_rates, 0.5)
            << " pods/s (" << o.concurrency << " clients)\n"
            << "  operator, first apply -> all pods: " << std::setprecision(2) << run.total / bench::percentile(run.op_rates, 0.5)
            << " s, " << std::setprecision(0) << bench::percentile(run.op_rates, 0.5) << " pods/s\n"
            << "  ratio operator/raw:           " << std::setprecision(2) << ratio << " (rounds: " << [&] {
                 std::ostringstream out;
                 for (size_t i = 0; i < run.ratios.size(); ++i) out << (i ? ", " : "") << std::setprecision(2) << run.ratios[i];
                 return out.str();
               }() << "; target >= 0.70)\n"
            << "  job apply -> all its pods:    p50 " << std::setprecision(3) << bench::percentile(run.job_latency, 0.5)
            << " s, p99 " << bench::percentile(run.job_latency, 0.99) << " s\n"
            << "  reconcile duration:           p50 " << bench::histogram_quantile(run.metrics, hist, 0.5) * 1000 << " ms, p99 "
            << bench::histogram_quantile(run.metrics, hist, 0.99) * 1000 << " ms\n"
            << "  CPU seconds per round:        apiserver " << std::setprecision(2) << bench::percentile(run.api_cpu_raw, 0.5)
            << " (raw) vs " << bench::percentile(run.api_cpu_op, 0.5) << " (operator); operator " << bench::percentile(run.op_cpu, 0.5)
            << "; raw client " << bench::percentile(run.client_cpu, 0.5) << "\n"
            << "  API-server CPU per request:   pod " << std::setprecision(2) << run.c_pod << " ms, TrainingJob " << run.c_job
            << ", Service " << run.c_svc << ", PodGroup " << run.c_pg << ", status patch " << run.c_status << ", Event " << run.c_event
            << "\n  ratio ceiling from those:     " << o.nodes << " pods / (" << o.nodes
            << " pods + job + Service + PodGroup + status + Event) = " << ceiling << "\n"
            << "  operator peak RSS (VmHWM):    " << std::setprecision(1) << run.rss_kb / 1024.0
            << " MB (target <= 30); at the end " << run.breakdown << "\n";
  bool pass = run.complete && ratio >= 0.70 && run.rss_kb > 0 && run.rss_kb <= 30 * 1024;
  std::cout << (pass ? "targets met\n" : "targets NOT met\n");
}

// --- Peer mode: lockstep-operator against Kubeflow training-operator -------------------------
//
// Both operators run at once against one control plane; rounds alternate (lockstep,
// kubeflow, lockstep, ...) so drift on a shared machine hits both. Each round applies J jobs
// of N pods in a fresh namespace: a TrainingJob with `nodes: N`, or a PyTorchJob with one
// Master and N-1 Workers, the same image and command. No kubelet runs, so the pods stay
// Pending: what is timed is their creation. Per operator and round: the time from the first
// apply to the last pod created (a watch sees it), the operator's CPU seconds and its peak RSS
// over the round, and the API requests it made per job (its own client-side counter: lockstep's
// lockstep_operator_api_requests_total, Kubeflow's controller-runtime rest_client_requests_total).
// CPU and requests are read once the operator has gone quiet after the last pod (its status
// writes included); the round then deletes its jobs and pods and waits until they are gone.

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};
void check_interrupt() {
  if (bench::g_stop) throw Interrupted();
}
// Sleeps, waking early on Ctrl-C.
void nap(std::chrono::milliseconds d) {
  auto until = Clock::now() + d;
  while (Clock::now() < until) {
    check_interrupt();
    std::this_thread::sleep_for(std::min<Clock::duration>(20ms, until - Clock::now()));
  }
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  return {std::istream_iterator<std::string>(in), {}};
}

std::string http_get(const std::string& url) {
  auto r = lockstep::run_capture({"curl", "-sf", "--max-time", "5", url}, {}, 10s);
  return r.status.success() ? r.output : "";
}

// Resets the kernel's peak-RSS mark (VmHWM) of a process we own; false if the kernel refuses.
bool reset_peak_rss(pid_t pid) {
  std::ofstream out("/proc/" + std::to_string(pid) + "/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

const lockstep::kube::Resource kNamespaces{"", "v1", "namespaces", "Namespace", false};
const lockstep::kube::Resource kPyTorchJobs{"kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"};
const char* const kKubeflowCertDir = "/tmp/k8s-webhook-server/serving-certs";  // fixed in its pkg/cert

struct PeerOptions {
  int jobs = 100, nodes = 8, rounds = 3, concurrency = 32;
  std::vector<std::string> operators{"lockstep", "kubeflow"};
  std::string kubeflow_bin, kubeflow_crd;
  std::vector<std::string> lockstep_flags, kubeflow_flags;
};

struct Operator {
  std::string name;
  std::vector<std::string> argv;
  lockstep::Process proc;
  std::string log, metrics_url, request_counter, job_label;
  lockstep::kube::Resource job_resource;
  std::function<json(const std::string& ns, const std::string& name)> manifest;
  std::vector<double> seconds, cpu, rss_mb, requests_per_job;
  bool rss_per_round = true;
  int incomplete_rounds = 0;

  // -1 while the counter has no sample yet.
  double requests() const { return bench::metric_sum(http_get(metrics_url), request_counter, "", -1); }
};

std::string log_tail(const std::string& path) { return lockstep::test::tail_file(path, 20); }

// Deletes a round's jobs, then its pods, Services and PodGroups, until no pod is left (an
// operator that has not yet seen a job's deletion may create a pod after the first sweep).
void clean_namespace(lockstep::kube::Client& client, const std::string& ns, const lockstep::kube::Resource& jobs,
                     const std::string& who) {
  auto t0 = Clock::now();
  auto count = [&](const std::string& path) {
    auto r = client.get(path + "?limit=500");
    return r.ok() ? static_cast<int>(r.body["items"].size()) : -1;
  };
  client.remove(jobs.path(ns));
  auto last_print = Clock::now();
  while (count(jobs.path(ns)) != 0) {
    if (Clock::now() - t0 > 120s) throw std::runtime_error(who + ": jobs in " + ns + " still there after 120 s");
    nap(100ms);
  }
  int quiet = 0;
  while (quiet < 2) {
    for (const auto* r : {&res::kPods, &res::kServices, &res::kPodGroups}) client.remove(r->path(ns));
    nap(500ms);
    int left = count(res::kPods.path(ns));
    quiet = left == 0 ? quiet + 1 : 0;
    if (Clock::now() - last_print > 3s) {
      std::cout << "    " << who << ": deleting, " << left << " pods left after "
                << std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count() << " s" << std::endl;
      last_print = Clock::now();
    }
    if (Clock::now() - t0 > 180s) throw std::runtime_error(who + ": pods in " + ns + " still there after 180 s");
  }
}

void measure_round(Operator& op, lockstep::kube::Client& client, const lockstep::kube::RestConfig& config,
                   const PeerOptions& o, int round) {
  const int total = o.jobs * o.nodes;
  std::string ns = op.name + "-" + std::to_string(round);
  if (!client.create(kNamespaces.path(), {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}}).ok())
    throw std::runtime_error("cannot create namespace " + ns);
  PodCounter counter(config, ns, o.nodes, op.job_label);
  double req0 = op.requests(), cpu0 = bench::cpu_seconds(op.proc.pid());
  op.rss_per_round &= reset_peak_rss(op.proc.pid());
  std::atomic<int> apply_errors{0};
  auto t0 = Clock::now();
  std::atomic<bool> applied{false};
  std::thread applier([&] {  // the applies run while the loop below reports progress
    bench::parallel(o.jobs, o.concurrency, [&](int i) {
      std::string name = "job-" + std::to_string(i);
      auto r = client.create(op.job_resource.path(ns), op.manifest(ns, name));
      if (!r.ok() && apply_errors++ < 3) std::cerr << "    apply " << op.job_resource.kind << " " << name << ": " << r.message() << "\n";
    });
    applied = true;
  });
  struct Join {
    std::thread& t;
    ~Join() { t.join(); }
  } join{applier};
  auto last_print = Clock::now();
  while (counter.total() < total) {
    if (applied && apply_errors) throw std::runtime_error(op.name + ": " + std::to_string(apply_errors) + " applies failed");
    nap(20ms);
    if (!op.proc.running()) throw std::runtime_error(op.name + " exited; its log ends:\n" + log_tail(op.log));
    if (Clock::now() - t0 > 600s) break;
    if (Clock::now() - last_print >= 2s) {
      last_print = Clock::now();
      std::cout << "    " << op.name << " round " << round << ": " << counter.total() << "/" << total << " pods after "
                << std::fixed << std::setprecision(1) << std::chrono::duration<double>(last_print - t0).count() << " s"
                << std::endl;
    }
  }
  int created = counter.total();
  double secs = std::chrono::duration<double>(counter.wait(created, 0s, [] { return true; }) - t0).count();
  // The work the round set off ends after the last pod (status writes, Events): read CPU and
  // requests once the request counter has stood still for a second (at most 15 s on).
  double prev = op.requests(), now_req = prev;
  auto settle0 = Clock::now();
  for (int still = 0; still < 2 && Clock::now() - settle0 < 15s;) {
    nap(500ms);
    now_req = op.requests();
    still = now_req == prev ? still + 1 : 0;
    prev = now_req;
  }
  double cpu = bench::cpu_seconds(op.proc.pid()) - cpu0;
  double rss = bench::status_kb(op.proc.pid(), "VmHWM:") / 1024.0;
  double per_job = (now_req - req0) / o.jobs;
  if (created < total) ++op.incomplete_rounds;
  op.seconds.push_back(secs);
  op.cpu.push_back(cpu);
  op.rss_mb.push_back(rss);
  op.requests_per_job.push_back(per_job);
  std::cout << "  round " << round << "/" << o.rounds << " " << std::left << std::setw(8) << op.name << std::right << ": "
            << created << "/" << total << " pods in " << std::fixed << std::setprecision(2) << secs << " s; CPU "
            << cpu << " s; peak RSS " << std::setprecision(1) << rss << " MB; " << per_job << " API requests per job"
            << (created < total ? " (INCOMPLETE after 600 s)" : "") << std::endl;
  clean_namespace(client, ns, op.job_resource, op.name);
}

// Starts Kubeflow's manager as its Deployment would run, minus what a pod gives it: its
// webhook Secret and ValidatingWebhookConfiguration must exist (it fills in the first and
// patches the CA into the second), and the kubelet would copy the Secret's certificate into
// its fixed certificate directory, which it waits for before it starts any controller.
void start_kubeflow(Operator& op, lockstep::kube::Client& client, lockstep::test::ControlPlane& cp,
                    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra) {
  const std::string ns = "kubeflow", secret = "training-operator-webhook-cert";
  client.create(kNamespaces.path(), {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  auto r = client.create("/api/v1/namespaces/" + ns + "/secrets",
                         {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", secret}, {"namespace", ns}}}});
  if (!r.ok()) throw std::runtime_error("creating Kubeflow's webhook Secret: " + r.message());
  // No webhooks in it: the API server would reach them through a Service of a cluster this
  // is not, so PyTorchJob creates here are not validated by Kubeflow's webhook (a cost its
  // Deployment pays and this run does not).
  r = client.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                    {{"apiVersion", "admissionregistration.k8s.io/v1"}, {"kind", "ValidatingWebhookConfiguration"},
                     {"metadata", {{"name", "validator.training-operator.kubeflow.org"}}}, {"webhooks", json::array()}});
  if (!r.ok()) throw std::runtime_error("creating Kubeflow's ValidatingWebhookConfiguration: " + r.message());
  for (const char* f : {"tls.crt", "tls.key"}) ::unlink((std::string(kKubeflowCertDir) + "/" + f).c_str());
  lockstep::run_capture({"mkdir", "-p", kKubeflowCertDir});

  int metrics_port = lockstep::free_loopback_port(), health_port = lockstep::free_loopback_port(),
      webhook_port = lockstep::free_loopback_port();
  op.argv.insert(op.argv.end(), {"--kubeconfig", cp.kubeconfig(), "--enable-scheme=pytorchjob", "--metrics-bind-address",
                                 "127.0.0.1:" + std::to_string(metrics_port), "--health-probe-bind-address",
                                 "127.0.0.1:" + std::to_string(health_port), "--webhook-server-port",
                                 std::to_string(webhook_port)});
  op.argv.insert(op.argv.end(), extra.begin(), extra.end());  // after ours: Go's flag package keeps the last
  lockstep::SpawnOptions so;
  so.argv = op.argv;
  so.output_path = op.log = cp.dir() + "/kubeflow.log";
  so.new_process_group = true;  // Ctrl-C reaches the benchmark, which stops it
  so.env = env;
  op.proc = lockstep::Process::spawn(so);
  op.metrics_url = "http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics";

  auto deadline = Clock::now() + 180s;
  bool copied = false;
  while (true) {
    check_interrupt();
    if (!op.proc.running()) throw std::runtime_error("Kubeflow's manager exited; its log ends:\n" + log_tail(op.log));
    if (Clock::now() > deadline) throw std::runtime_error("Kubeflow's manager not ready after 180 s; its log ends:\n" + log_tail(op.log));
    if (!copied) {
      auto s = client.get("/api/v1/namespaces/" + ns + "/secrets/" + secret);
      auto& data = s.body["data"];
      if (s.ok() && data.is_object() && data.contains("tls.crt") && data.contains("tls.key")) {
        for (const char* f : {"tls.key", "tls.crt"}) {  // the certificate last: its presence is what it waits for
          std::string why;
          auto bytes = lockstep::kube::decode_base64(data[f].is_string() ? data[f].get<std::string>() : "", &why);
          if (!bytes) throw std::runtime_error("Kubeflow's Secret " + secret + " holds a " + f + " that is not base64: " + why);
          std::string path = std::string(kKubeflowCertDir) + "/" + f, tmp = path + ".tmp";
          std::ofstream(tmp, std::ios::binary).write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
          std::rename(tmp.c_str(), path.c_str());
        }
        copied = true;
      }
    } else if (!http_get("http://127.0.0.1:" + std::to_string(health_port) + "/readyz").empty()) {
      break;
    }
    nap(100ms);
  }
}

void start_lockstep(Operator& op, lockstep::test::ControlPlane& cp, const std::vector<std::string>& extra) {
  int port = lockstep::free_loopback_port();
  op.argv.insert(op.argv.end(), {"--kubeconfig", cp.kubeconfig(), "--http-address", "127.0.0.1", "--http-port",
                                 std::to_string(port), "--leader-elect", "false", "--log-level", "warn"});
  op.argv.insert(op.argv.end(), extra.begin(), extra.end());  // after ours: its parser keeps the last
  lockstep::SpawnOptions so;
  so.argv = op.argv;
  so.output_path = op.log = cp.dir() + "/lockstep-operator.log";
  so.new_process_group = true;
  op.proc = lockstep::Process::spawn(so);
  op.metrics_url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  auto deadline = Clock::now() + 60s;
  while (http_get("http://127.0.0.1:" + std::to_string(port) + "/readyz").empty()) {
    if (!op.proc.running()) throw std::runtime_error("lockstep-operator exited; its log ends:\n" + log_tail(op.log));
    if (Clock::now() > deadline) throw std::runtime_error("lockstep-operator not ready after 60 s");
    nap(50ms);
  }
}

std::string joined(const std::vector<double>& v, int precision) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << std::fixed << std::setprecision(precision) << v[i];
  return o.str();
}

// A peer run's state: the control plane and the operators, which take the rounds in turn.
struct PeerRun {
  PeerRun(const PeerOptions& options, std::unique_ptr<lockstep::test::ControlPlane> control_plane)
      : o(options), cp(std::move(control_plane)) {}
  const PeerOptions& o;
  std::unique_ptr<lockstep::test::ControlPlane> cp;
  std::map<std::string, std::string> env;
  std::vector<std::unique_ptr<Operator>> ops;

  // Stops every operator still running, then the control plane.
  void stop_all() {
    for (auto& op : ops)
      if (op->proc.pid() > 0 && op->proc.running()) op->proc.terminate(5s);
    if (cp) cp->stop();
  }
};

// Whether Kubeflow takes part; if it does, its binary and CRD must be there (FlagError if not).
bool check_kubeflow_files(const PeerOptions& o) {
  bool want_kubeflow = std::find(o.operators.begin(), o.operators.end(), "kubeflow") != o.operators.end();
  if (want_kubeflow) {
    if (::access(o.kubeflow_bin.c_str(), X_OK) != 0)
      throw lockstep::flags::FlagError("--kubeflow-bin: no executable at '" + o.kubeflow_bin +
                                       "' (bench/operator/run.sh builds it: scripts/setup.sh --bench-operator)");
    if (::access(o.kubeflow_crd.c_str(), R_OK) != 0)
      throw lockstep::flags::FlagError("--kubeflow-crd: cannot read '" + o.kubeflow_crd + "'");
  }
  return want_kubeflow;
}

void print_peer_plan(const PeerOptions& o) {
  const int total = o.jobs * o.nodes;
  std::cout << "bench/operator: lockstep-operator against Kubeflow training-operator, " << o.jobs << " jobs x " << o.nodes
            << " pods = " << total << " pods a round, " << o.rounds << " rounds (operators in turn: " << [&] {
                 std::string s;
                 for (const auto& n : o.operators) s += (s.empty() ? "" : ", ") + n;
                 return s;
               }() << ")" << std::endl;
}

// The TrainingJob and PodGroup CRDs, and Kubeflow's when it takes part.
void create_peer_crds(PeerRun& run, bool want_kubeflow) {
  std::vector<std::string> crds = {std::string(LOCKSTEP_SOURCE_DIR) + "/crds/lockstep.dev_trainingjobs.yaml",
                                   std::string(LOCKSTEP_SOURCE_DIR) + "/tests/crds/podgroup.yaml"};
  if (want_kubeflow) crds.push_back(run.o.kubeflow_crd);
  for (const auto& f : crds) {
    // create, not apply: Kubeflow's CRD is larger than apply's last-applied annotation allows
    auto r = lockstep::run_capture({"kubectl", "create", "-f", f}, run.env);
    if (!r.status.success()) throw std::runtime_error("kubectl create -f " + f + ": " + r.output);
  }
  lockstep::run_capture({"kubectl", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"}, run.env);
}

// The operators --operators names, in its order, each with the job it is given.
std::vector<std::unique_ptr<Operator>> make_operators(const PeerOptions& o) {
  // The same pod each: the image and command lockstep's pods get (the agent, which would
  // launch procsPerNode trainers), one pod per node.
  json tj_spec = {{"nodes", o.nodes}, {"procsPerNode", 8}, {"strategy", "DDP"},
                  {"template", {{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:bench"}}})}}}}}};
  json probe = {{"metadata", {{"name", "probe"}, {"namespace", "probe"}, {"uid", "00000000-0000-0000-0000-000000000000"}}},
                {"spec", tj_spec}};
  json pod = lockstep::reconcile::pod_manifest(lockstep::reconcile::JobView::from_json(probe), 0, 0);
  json container = {{"name", "pytorch"}, {"image", "lockstep/trainer:bench"}, {"command", pod["spec"]["containers"][0]["command"]}};

  std::vector<std::unique_ptr<Operator>> ops;
  for (const auto& name : o.operators) {
    auto op = std::make_unique<Operator>();
    op->name = name;
    if (name == "lockstep") {
      op->argv = {LOCKSTEP_OPERATOR_BIN};
      op->request_counter = "lockstep_operator_api_requests_total";
      op->job_label = "lockstep.dev/job-name";
      op->job_resource = res::kTrainingJobs;
      op->manifest = [tj_spec](const std::string& ns, const std::string& n) {
        return json{{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"},
                    {"metadata", {{"name", n}, {"namespace", ns}}}, {"spec", tj_spec}};
      };
    } else {
      op->argv = {o.kubeflow_bin};
      op->request_counter = "rest_client_requests_total";
      op->job_label = "training.kubeflow.org/job-name";
      op->job_resource = kPyTorchJobs;
      int nodes = o.nodes;
      op->manifest = [container, nodes](const std::string& ns, const std::string& n) {
        auto replica = [&](int replicas) {
          return json{{"replicas", replicas}, {"template", {{"spec", {{"containers", json::array({container})}}}}}};
        };
        json specs = {{"Master", replica(1)}};
        if (nodes > 1) specs["Worker"] = replica(nodes - 1);
        return json{{"apiVersion", "kubeflow.org/v1"}, {"kind", "PyTorchJob"}, {"metadata", {{"name", n}, {"namespace", ns}}},
                    {"spec", {{"nprocPerNode", "8"}, {"pytorchReplicaSpecs", specs}}}};
      };
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

// Starts the operators and prints their command lines.
void start_operators(PeerRun& run, lockstep::kube::Client& client) {
  // Kubeflow starts last: its start waits on its certificate.
  for (auto& op : run.ops) {
    if (op->name == "lockstep") start_lockstep(*op, *run.cp, run.o.lockstep_flags);
    else start_kubeflow(*op, client, *run.cp, run.env, run.o.kubeflow_flags);
  }
  for (auto& op : run.ops) std::cout << "  " << op->name << ": " << lockstep::shell_join(op->argv) << "\n";
  std::cout << std::flush;
}

// The medians of the rounds, side by side; false when a round did not create all its pods.
bool print_peer_results(const PeerRun& run) {
  const PeerOptions& o = run.o;
  const auto& ops = run.ops;
  std::cout << "\nresults: median of " << o.rounds << " rounds (" << o.jobs << " jobs x " << o.nodes
            << " pods; kube-apiserver v1.34.4 on loopback; " << std::thread::hardware_concurrency() << " cores)\n";
  auto med = [](const std::vector<double>& v) { return bench::percentile(v, 0.5); };
  auto row = [&](const std::string& label, std::vector<double> Operator::*field, int prec,
                 const std::string& unit) {
    std::cout << "  " << std::left << std::setw(34) << label << std::right;
    for (auto& op : ops)
      std::cout << std::setw(10) << op->name << " " << std::fixed << std::setprecision(prec) << med((*op).*field) << unit
                << " (" << joined((*op).*field, prec) << ")  ";
    if (ops.size() == 2 && med((*ops[0]).*field) > 0)
      std::cout << " " << ops[1]->name << "/" << ops[0]->name << " " << std::setprecision(2)
                << med((*ops[1]).*field) / med((*ops[0]).*field);
    std::cout << "\n";
  };
  row("first apply -> all pods", &Operator::seconds, 2, " s");
  row("operator CPU seconds per round", &Operator::cpu, 2, " s");
  row("peak RSS (VmHWM)", &Operator::rss_mb, 1, " MB");
  row("API requests per job", &Operator::requests_per_job, 1, "");
  bool complete = true;
  for (auto& op : ops) {
    if (!op->rss_per_round) std::cout << "  (" << op->name << "'s peak RSS is over its whole life: clear_refs was refused)\n";
    if (op->incomplete_rounds) {
      std::cout << "  " << op->name << ": " << op->incomplete_rounds << " rounds did not create all pods\n";
      complete = false;
    }
  }
  std::cout << std::flush;
  return complete;
}

int run_peers(const PeerOptions& o) {
  bench::catch_stop_signals();
  const bool want_kubeflow = check_kubeflow_files(o);
  print_peer_plan(o);
  PeerRun run(o, lockstep::test::ControlPlane::start());
  try {
    run.env = {{"KUBECONFIG", run.cp->kubeconfig()}};
    create_peer_crds(run, want_kubeflow);
    auto config = lockstep::kube::RestConfig::from_kubeconfig(run.cp->kubeconfig());
    config.qps = 1e6;  // the benchmark's own applies never wait on a token bucket
    config.burst = 1000000;
    lockstep::kube::Client client(config);
    run.ops = make_operators(o);
    start_operators(run, client);
    for (int round = 1; round <= o.rounds; ++round)
      for (auto& op : run.ops) measure_round(*op, client, config, o, round);
    bool complete = print_peer_results(run);
    run.stop_all();
    return complete ? 0 : 1;
  } catch (const Interrupted&) {
    std::cout << "\ninterrupted: stopping the operators and the control plane" << std::endl;
    run.stop_all();
    return 130;
  } catch (...) {
    run.stop_all();
    throw;
  }
}

// Runs the peer mode and exits with its status; a FlagError (a missing Kubeflow binary or CRD)
// goes on to main, which exits 2.
[[noreturn]] void run_peer_mode(const PeerOptions& peer) {
  int rc = 1;
  try {
    rc = run_peers(peer);
  } catch (const lockstep::flags::FlagError&) {
    throw;
  } catch (const std::exception& e) {
    std::cerr << "lockstep-bench-operator: " << e.what() << "\n";
  }
  std::fflush(nullptr);
  ::_exit(rc);  // as main's: no static destructors of the HTTP client's threads
}

// --- The command line -------------------------------------------------------------------------

// The raw baseline's flags, and the peer mode's when one of its flags is given.
struct Flags {
  RawOptions raw;
  PeerOptions peer;
  bool peer_mode = false;
};

// --operators: a comma-separated list of lockstep and kubeflow.
std::vector<std::string> parse_operators(const std::string& v) {
  using lockstep::flags::FlagError;
  std::vector<std::string> operators;
  std::stringstream in(v);
  for (std::string name; std::getline(in, name, ',');) {
    if (name != "lockstep" && name != "kubeflow")
      throw FlagError("--operators: '" + name + "' is neither lockstep nor kubeflow (a comma-separated list)");
    operators.push_back(name);
  }
  if (operators.empty()) throw FlagError("--operators: give lockstep, kubeflow or both");
  return operators;
}

// Throws FlagError, naming the flag at fault.
Flags parse_flags(int argc, char** argv) {
  Flags f;
  RawOptions& raw = f.raw;
  PeerOptions& peer = f.peer;
  bool raw_only_flag = false;
  if (const char* e = std::getenv("LOCKSTEP_KUBEFLOW_BIN")) peer.kubeflow_bin = e;
  if (const char* e = std::getenv("LOCKSTEP_KUBEFLOW_CRD")) peer.kubeflow_crd = e;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    using namespace lockstep::flags;
    if (match(argc, argv, i, "--jobs", v)) raw.jobs = to_int("--jobs", v, 1, 10000);
    else if (match(argc, argv, i, "--nodes", v)) raw.nodes = to_int("--nodes", v, 1, 512);
    else if (match(argc, argv, i, "--concurrency", v)) raw.concurrency = to_int("--concurrency", v, 1, 256);
    else if (match(argc, argv, i, "--rounds", v)) raw.rounds = to_int("--rounds", v, 1, 20);
    else if (match(argc, argv, i, "--workers", v)) raw.workers = to_int("--workers", v, 1, 64), raw_only_flag = true;
    else if (match(argc, argv, i, "--create-parallelism", v)) raw.parallelism = to_int("--create-parallelism", v, 1, 64), raw_only_flag = true;
    else if (match(argc, argv, i, "--peer", v)) {
      if (v != "kubeflow") throw FlagError("--peer must be 'kubeflow', not '" + v + "'");
      f.peer_mode = true;
    } else if (match(argc, argv, i, "--operators", v)) peer.operators = parse_operators(v), f.peer_mode = true;
    else if (match(argc, argv, i, "--lockstep-flags", v)) peer.lockstep_flags = split_words(v), f.peer_mode = true;
    else if (match(argc, argv, i, "--kubeflow-flags", v)) peer.kubeflow_flags = split_words(v), f.peer_mode = true;
    else if (match(argc, argv, i, "--kubeflow-bin", v)) peer.kubeflow_bin = v;
    else if (match(argc, argv, i, "--kubeflow-crd", v)) peer.kubeflow_crd = v;
    else throw FlagError(std::string("unknown flag '") + argv[i] +
                         "' (flags: --jobs --nodes --rounds --concurrency; raw baseline: --workers --create-parallelism; "
                         "against Kubeflow: --peer kubeflow --operators --lockstep-flags --kubeflow-flags --kubeflow-bin "
                         "--kubeflow-crd)");
  }
  if (f.peer_mode && raw_only_flag)
    throw lockstep::flags::FlagError("--workers and --create-parallelism set the raw baseline's operator; against Kubeflow each "
                    "operator runs at its defaults: give lockstep's through --lockstep-flags");
  if (f.peer_mode) peer.jobs = raw.jobs, peer.nodes = raw.nodes, peer.rounds = raw.rounds, peer.concurrency = raw.concurrency;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = parse_flags(argc, argv);
    if (flags.peer_mode) run_peer_mode(flags.peer);
  } catch (const std::exception& e) {
    std::cerr << "lockstep-bench-operator: " << e.what() << "\n";
    return 2;
  }
  RawRun run(flags.raw);
  print_raw_plan(run);
  if (!start_control_plane(run)) return 1;
  start_operator(run);
  for (int round = 1; round <= run.o.rounds; ++round) {
    auto [raw_ns, op_ns] = create_round_namespaces(run, round);
    time_raw_creates(run, raw_ns);
    time_operator_creates(run, op_ns, round);
  }
  stop_operator(run);
  measure_request_costs(run);
  print_raw_results(run);
  std::fflush(nullptr);
  ::_exit(run.complete ? 0 : 1);
}
