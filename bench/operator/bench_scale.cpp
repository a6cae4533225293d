// bench/operator/bench_scale.cpp: lockstep-operator at cluster scale, on fake nodes.
//
// A real control plane (etcd + kube-apiserver, tests/controlplane), the TrainingJob and
// PodGroup CRDs, the real gang scheduler (kube-scheduler with scheduler-plugins' Coscheduling,
// tests/cluster/cosched), KWOK playing the kubelet of `--nodes` fake Nodes (its Stages move a
// bound pod to Running, and, once released, to Succeeded after `--succeed-after`), and
// lockstep-operator at its defaults (flags after `--` go to it). The benchmark itself sends a
// deleted pod's final delete, conditional on its UID, as the kubelet does (Reaper). Then:
//
//   1. apply: `--jobs` TrainingJobs of `--gang` pods each (default 1,250 x 8 = 10,000 pods):
//      the time to every pod created, and to every job Running;
//   2. storm (`--storm-percent`, default 10; 0 skips it): that share of the running pods fails
//      at once (status Failed, exit code 137, through pods/status, in parallel); every job hit
//      must restart as a gang (all its pods recreated as attempt 1, after the operator's
//      backoff) and run again; the time until it does, the gang restarts, and the operator's
//      request rate against its --kube-api-qps;
//   3. complete: the pods are released (KWOK's Succeeded stage skips pods labelled
//      lockstep_bench_hold, which the jobs' template sets while there is a storm to come) and
//      every job must end Succeeded.
//
// Checks (exit 1 when one fails): every job Succeeded; no duplicate pod (per job and index,
// never two pods alive at once, and exactly 1 + status.restarts pods ever created); each job
// hit by the storm restarted exactly once, every other job never. Figures are printed against
// the targets (operator RSS <= 64 MB and CPU <= 1 ms per pod at 10,000 pods), never
// asserted. Exit 77 when a binary it needs is missing (1 under LOCKSTEP_REQUIRE_ALL=1), 130
// on Ctrl-C (every child stopped, the control plane removed).
//
// The fake pods get no IP, so the operator's progress reader (Note [Progress]) skips them.
//
// --kueue (docs/kueue.md): Kueue (tests/controlplane/kueue.hpp) beside the control plane, a
// ClusterQueue whose quota admits every job at once and a LocalQueue, and every job queued in it:
// each job is then one Workload, admitted before its pods are made. The figures to compare with a
// run without it (bench/operator/kueue.sh runs both): apply to all pods created, and the
// operator's requests per job by verb. Run both with the operator's --progress-period=0, so that
// PodsReady is written when every pod runs (the fake pods have no agent to read), as it is with
// real agents.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "bench_util.hpp"
#include "control_plane.hpp"
#include "kueue.hpp"
#include "kwok.hpp"
#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "lockstep/flags.hpp"

namespace bench = lockstep::bench;
namespace fs = std::filesystem;
namespace res = lockstep::kube::resources;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

using bench::g_stop;

const char* kNamespace = "scale";
using bench::kwok::kHoldLabel;
const char* kGangScheduler = "scheduler-plugins-scheduler";

struct Options {
  int nodes = 1000, jobs = 1250, gang = 8, storm_percent = 10, storm_exit_code = 137;
  std::chrono::milliseconds succeed_after{5000};
  std::chrono::seconds timeout{1800};
  std::string kwok, scheduler, keep_dir;
  std::string operator_bin = LOCKSTEP_OPERATOR_BIN;  // --operator: another build's, to compare two
  bool kueue = false;
  std::vector<std::string> operator_args;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

using bench::cache_dir;

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "lockstep-bench-scale: " << problem << "\n"
            << "usage: lockstep-bench-scale [--nodes N] [--jobs J] [--gang P] [--succeed-after D] [--storm-percent P]\n"
            << "         [--timeout D] [--kwok PATH] [--scheduler PATH] [--operator PATH] [--keep-dir DIR] [--kueue]\n"
            << "         [-- operator flags...]\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  using namespace lockstep::flags;
  Options o;
  o.kwok = bench::kwok::binary();
  o.scheduler = env_or("LOCKSTEP_GANG_SCHEDULER_BIN",
                       cache_dir() + "/scheduler-plugins-" LOCKSTEP_SCHEDULER_PLUGINS_VERSION "/bin/kube-scheduler-cosched");
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v, a = argv[i];
      if (a == "--") {
        o.operator_args.assign(argv + i + 1, argv + argc);
        break;
      }
      if (a == "--help" || a == "-h") usage("flags");
      if (a == "--kueue") {
        o.kueue = true;
        continue;
      }
      if (match(argc, argv, i, "--nodes", v)) o.nodes = to_int("--nodes", v, 1, 100000);
      else if (match(argc, argv, i, "--jobs", v)) o.jobs = to_int("--jobs", v, 1, 100000);
      else if (match(argc, argv, i, "--gang", v)) o.gang = to_int("--gang", v, 1, 512);
      else if (match(argc, argv, i, "--storm-percent", v)) o.storm_percent = to_int("--storm-percent", v, 0, 100);
      else if (match(argc, argv, i, "--succeed-after", v)) o.succeed_after = to_duration("--succeed-after", v);
      else if (match(argc, argv, i, "--timeout", v)) o.timeout = std::chrono::duration_cast<std::chrono::seconds>(to_duration("--timeout", v));
      else if (match(argc, argv, i, "--kwok", v)) o.kwok = v;
      else if (match(argc, argv, i, "--scheduler", v)) o.scheduler = v;
      else if (match(argc, argv, i, "--operator", v)) o.operator_bin = v;
      else if (match(argc, argv, i, "--keep-dir", v)) o.keep_dir = v;
      else usage("unknown flag '" + a + "'");
    }
  } catch (const FlagError& e) {
    usage(e.what());
  }
  return o;
}

// The operator's requests by verb: "GET 123, POST 456, ...".
std::string requests_by_verb(const std::string& metrics, double per) {
  std::map<std::string, double> verbs;
  std::istringstream in(metrics);
  const std::string name = "lockstep_operator_api_requests_total{";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    auto v = line.find("verb=\"");
    if (v == std::string::npos) continue;
    std::string verb = line.substr(v + 6, line.find('"', v + 6) - v - 6);
    verbs[verb] += std::stod(line.substr(line.rfind(' ') + 1));
  }
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  for (const auto& [verb, n] : verbs) o << (o.tellp() ? ", " : "") << verb << " " << n / per;
  return o.str();
}

// Lists, then watches, a collection; every object seen goes to on_event(type, object) on this
// watcher's thread (ADDED for what a list returns). Re-lists after a 410.
class Watcher {
 public:
  using Handler = std::function<void(const std::string& type, const json& obj)>;
  Watcher(const lockstep::kube::RestConfig& config, std::string path, Handler handler)
      : client_(config), path_(std::move(path)), handler_(std::move(handler)) {
    // Right after its CRD is applied the API server may answer "storage is (re)initializing"
    // for a few seconds (its watch cache for the new resource): tried again until 30 s.
    for (auto until = std::chrono::steady_clock::now() + 30s;;) {
      try {
        list();
        break;
      } catch (const std::exception&) {
        if (std::chrono::steady_clock::now() >= until) throw;
        std::this_thread::sleep_for(250ms);
      }
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Watcher() {
    stop_ = true;
    cancel_.cancel();
    thread_.join();
  }

 private:
  void list() {
    auto r = client_.get(path_);
    if (!r.ok()) throw std::runtime_error("list " + path_ + ": " + r.message());
    for (const auto& item : r.body["items"]) handler_("ADDED", item);
    rv_ = r.body["metadata"].value("resourceVersion", "");
  }
  void run() {
    while (!stop_) {
      auto r = client_.watch(path_, rv_, 60, [&](const std::string& type, json& obj) {
        if (type == "BOOKMARK") return;
        rv_ = obj["metadata"].value("resourceVersion", rv_);
        handler_(type, obj);
      }, cancel_);
      if (stop_) break;
      if (r.gone()) {
        try {
          list();
        } catch (const std::exception&) {
          std::this_thread::sleep_for(1s);
        }
      } else if (!r.ok()) {
        std::this_thread::sleep_for(200ms);
      }
    }
  }
  lockstep::kube::Client client_;
  std::string path_, rv_;
  Handler handler_;
  std::atomic<bool> stop_{false};
  lockstep::kube::Cancellation cancel_;
  std::thread thread_;
};

// Plays the kubelet's last step for a pod being deleted: the final delete, with grace period 0
// and a precondition on the pod's UID, as the kubelet's status manager sends it. KWOK's delete
// Stage deletes by name alone, and a delete of it queued for an old pod removed the next
// attempt's pod of the same name once the operator had recreated it (every TrainingJob pod
// keeps its name across gang restarts): restarts the operator never caused.
class Reaper {
 public:
  explicit Reaper(const lockstep::kube::RestConfig& config) : client_(config) {
    thread_ = std::thread([this] { run(); });
  }
  ~Reaper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // From the pod watch: a pod with a deletionTimestamp.
  void deleting(const std::string& name, const std::string& uid) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!seen_.insert(uid).second) return;
      queue_.emplace_back(name, uid);
    }
    cv_.notify_one();
  }
  int removed() const { return removed_; }

 private:
  void run() {
    while (true) {
      std::vector<std::pair<std::string, std::string>> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        while (!queue_.empty() && batch.size() < 16) {
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
      }
      std::vector<std::string> paths;
      std::vector<json> options;
      for (const auto& [name, uid] : batch) {
        paths.push_back(res::kPods.path(kNamespace, name));
        options.push_back({{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", uid}}}});
      }
      auto results = client_.remove_all(paths, options);
      for (const auto& r : results)
        if (r.ok()) ++removed_;
    }
  }
  lockstep::kube::Client client_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> queue_;
  std::set<std::string> seen_;
  bool stop_ = false;
  std::atomic<int> removed_{0};
  std::thread thread_;
};

// What the benchmark knows of the pods and jobs, from its two watches.
struct Cluster {
  struct Pod {
    std::string uid, job, phase;
    int index = -1, attempt = -1;
    bool bound = false, deleting = false;
  };
  struct Slot {                 // one job index
    std::set<std::string> uids;  // every pod ever seen in it
    std::set<std::string> alive;
    size_t max_alive = 0;
  };
  struct Job {
    std::string phase;
    int restarts = 0;
  };
  std::mutex mu;
  std::map<std::string, Pod> pods;                       // by name
  std::map<std::pair<std::string, int>, Slot> slots;    // by job, index
  std::map<std::string, Job> jobs;
  std::atomic<int> created{0};                           // distinct pods ever seen
  Clock::time_point last_created{};

  void on_pod(const std::string& type, const json& obj) {
    const json& md = obj["metadata"];
    std::string name = md.value("name", ""), uid = md.value("uid", "");
    const json labels = md.value("labels", json::object());
    std::lock_guard<std::mutex> lock(mu);
    Slot& slot_of = slots[{labels.value("lockstep.dev/job-name", ""), std::stoi(labels.value("lockstep.dev/node-rank", "-1"))}];
    if (type == "DELETED") {
      slot_of.alive.erase(uid);
      auto it = pods.find(name);
      if (it != pods.end() && it->second.uid == uid) pods.erase(it);
      return;
    }
    if (slot_of.uids.insert(uid).second) {
      ++created;
      last_created = Clock::now();
    }
    slot_of.alive.insert(uid);
    slot_of.max_alive = std::max(slot_of.max_alive, slot_of.alive.size());
    Pod& p = pods[name];
    p.uid = uid;
    p.job = labels.value("lockstep.dev/job-name", "");
    p.index = std::stoi(labels.value("lockstep.dev/node-rank", "-1"));
    p.attempt = std::stoi(labels.value("lockstep.dev/restart-attempt", "-1"));
    p.phase = obj.contains("status") ? obj["status"].value("phase", "") : "";
    p.bound = obj.contains("spec") && !obj["spec"].value("nodeName", "").empty();
    p.deleting = md.contains("deletionTimestamp");
  }

  void on_job(const std::string& type, const json& obj) {
    std::string name = obj["metadata"].value("name", "");
    std::lock_guard<std::mutex> lock(mu);
    if (type == "DELETED") {
      jobs.erase(name);
      return;
    }
    Job& j = jobs[name];
    const json status = obj.value("status", json::object());
    j.phase = status.value("phase", "");
    j.restarts = status.value("restarts", 0);
  }

  struct Counts {
    int pods = 0, bound = 0, running = 0, succeeded = 0, failed = 0;
    std::map<std::string, int> jobs;  // by phase
  };
  Counts counts() {
    std::lock_guard<std::mutex> lock(mu);
    Counts c;
    for (const auto& [name, p] : pods) {
      ++c.pods;
      c.bound += p.bound;
      c.running += p.phase == "Running";
      c.succeeded += p.phase == "Succeeded";
      c.failed += p.phase == "Failed";
    }
    for (const auto& [name, j] : jobs) ++c.jobs[j.phase.empty() ? "(none)" : j.phase];
    return c;
  }
  int job_count(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const auto& [name, j] : jobs) n += j.phase == phase;
    return n;
  }
  // Job `name` Running with all `gang` pods Running in attempt `attempt`.
  bool running_in(const std::string& name, int gang, int attempt) {
    auto it = jobs.find(name);
    if (it == jobs.end() || it->second.phase != "Running" || it->second.restarts != attempt) return false;
    for (int i = 0; i < gang; ++i) {
      auto p = pods.find(name + "-" + std::to_string(i));
      if (p == pods.end() || p->second.phase != "Running" || p->second.attempt != attempt || p->second.deleting) return false;
    }
    return true;
  }
};

std::string fmt(double v, int precision = 1) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(precision) << v;
  return o.str();
}

// The gang scheduler's configuration, as scripts/cluster.sh writes it (its template:
// scripts/cluster/templates/kube-scheduler-cosched.yaml), with a client rate limit high enough
// that binding never waits on it (the operator's is what is measured).
std::string scheduler_config(const std::string& kubeconfig) {
  return "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
         "leaderElection: {leaderElect: false}\n"
         "clientConnection: {kubeconfig: " + kubeconfig + ", qps: 5000, burst: 10000}\n"
         "profiles:\n- schedulerName: " + std::string(kGangScheduler) + "\n"
         "  plugins:\n    multiPoint:\n      enabled: [{name: Coscheduling}]\n"
         "    queueSort:\n      enabled: [{name: Coscheduling}]\n      disabled: [{name: \"*\"}]\n"
         "  pluginConfig:\n  - name: Coscheduling\n    args: {permitWaitingTimeSeconds: 30}\n";
}

// The operator's --kube-api-qps: the pass-through flag, else the default its --help names.
double operator_qps(const std::string& binary, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--kube-api-qps" && i + 1 < args.size()) return std::stod(args[i + 1]);
    if (args[i].rfind("--kube-api-qps=", 0) == 0) return std::stod(args[i].substr(15));
  }
  auto help = lockstep::run_capture({binary, "--help"}).output;
  auto at = help.find("--kube-api-qps");
  auto d = help.find("(default ", at);
  return at == std::string::npos || d == std::string::npos ? 0 : std::stod(help.substr(d + 9));
}

bool wait_ready(const std::string& url, std::chrono::seconds timeout, const std::function<bool()>& alive) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline && !g_stop && alive()) {
    if (lockstep::run_capture({"curl", "-skf", "-o", "/dev/null", url}, {}, 5s).status.success()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

int missing(const std::string& what) {
  bool require = env_or("LOCKSTEP_REQUIRE_ALL", "") == "1";
  std::cout << (require ? "FAILED: " : "SKIPPED: ") << what << " (scripts/setup.sh builds it)" << std::endl;
  return require ? 1 : 77;
}

// Exit 77 (1 under LOCKSTEP_REQUIRE_ALL=1) when a binary the benchmark needs is missing, else 0.
int check_prerequisites(const Options& o) {
  std::string k8s_bin = env_or("LOCKSTEP_K8S_BIN", "");
  if (k8s_bin.empty() || !fs::exists(k8s_bin + "/kube-apiserver") || !fs::exists(k8s_bin + "/etcd"))
    return missing("etcd and kube-apiserver not found in LOCKSTEP_K8S_BIN='" + k8s_bin + "'");
  if (!fs::exists(o.kwok)) return missing("kwok not found at " + o.kwok + " (LOCKSTEP_KWOK_BIN)");
  if (!fs::exists(o.scheduler)) return missing("the gang scheduler not found at " + o.scheduler + " (LOCKSTEP_GANG_SCHEDULER_BIN)");
  if (!lockstep::run_capture({"sh", "-c", "command -v kubectl"}).status.success()) return missing("kubectl not on PATH");
  return 0;
}

// --- The run ------------------------------------------------------------------------------------

// What lives for the whole run: the options, the clock, and what the teardown stops.
struct Run {
  explicit Run(Options options)
      : o(std::move(options)), total(o.jobs * o.gang), storm(o.storm_percent > 0), qps(operator_qps(o.operator_bin, o.operator_args)) {}
  Options o;
  const int total;    // pods
  const bool storm;   // a storm is to come: the pods are held until phase 3
  const double qps;   // the operator's --kube-api-qps
  Clock::time_point t_start;
  std::unique_ptr<lockstep::test::ControlPlane> cp;
  lockstep::Process kwok, scheduler, op;
  std::string metrics_url;

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t_start).count(); }
};

void print_plan(const Run& run) {
  const Options& o = run.o;
  std::cout << "bench/scale: " << (o.kueue ? "with Kueue: " : "") << o.jobs << " TrainingJobs x " << o.gang << " pods = " << run.total << " pods on " << o.nodes
            << " KWOK nodes; gang scheduler " << kGangScheduler << "; pods succeed " << o.succeed_after.count()
            << " ms after they run" << (run.storm ? " once released" : "") << "; storm " << o.storm_percent
            << "% of running pods; operator flags: " << (o.operator_args.empty() ? "(defaults)" : lockstep::shell_join(o.operator_args))
            << " (--kube-api-qps " << run.qps << "); " << std::thread::hardware_concurrency() << " cores" << std::endl;
}

// --- set-up -------------------------------------------------------------------------------------

// The control plane, the TrainingJob and PodGroup CRDs, and the benchmark's namespace.
void start_control_plane(Run& run) {
  lockstep::test::ControlPlaneOptions cpo;
  if (!run.o.keep_dir.empty()) {
    cpo.dir = run.o.keep_dir;
    cpo.keep_dir = true;
  }
  run.cp = lockstep::test::ControlPlane::start(cpo);
  std::cout << "  control plane up in " << fmt(run.cp->startup_seconds()) << " s (" << run.cp->dir() << ")" << std::endl;
  std::map<std::string, std::string> env = {{"KUBECONFIG", run.cp->kubeconfig()}};
  for (const char* f : {"/crds/lockstep.dev_trainingjobs.yaml", "/tests/cluster/cosched/podgroup-crd.yaml"}) {
    auto r = lockstep::run_capture({"kubectl", "apply", "--server-side", "-f", std::string(LOCKSTEP_SOURCE_DIR) + f}, env);
    if (!r.status.success()) throw std::runtime_error("kubectl apply " + std::string(f) + ": " + r.output);
  }
  lockstep::run_capture({"kubectl", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"}, env);
  lockstep::run_capture({"kubectl", "create", "namespace", kNamespace}, env);
}

// --kueue: Kueue, a ClusterQueue whose quota admits every job at once, and the LocalQueue
// the jobs name.
std::unique_ptr<lockstep::test::Kueue> start_kueue(const Run& run) {
  if (auto why = lockstep::test::Kueue::missing(); !why.empty()) throw std::runtime_error("--kueue: " + why);
  lockstep::test::KueueOptions ko;
  ko.pods_ready_timeout = std::chrono::seconds(3600);  // no eviction: admission and requests are measured
  if (!run.o.keep_dir.empty()) ko.dir = run.o.keep_dir + "/kueue";
  auto t_kueue = Clock::now();
  auto kueue = lockstep::test::Kueue::start(run.cp->kubeconfig(), ko);
  const std::string cpus = std::to_string(run.total), memory = std::to_string(2 * run.total) + "Gi";
  std::map<std::string, std::string> env = {{"KUBECONFIG", run.cp->kubeconfig()}};
  auto q = lockstep::run_capture(
      {"kubectl", "apply", "-f", "-"}, env, 60s,
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: bench}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: bench}\nspec:\n  namespaceSelector: {}\n"
      "  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors:\n    - name: bench\n      resources:\n"
      "      - {name: cpu, nominalQuota: " + cpus + "}\n      - {name: memory, nominalQuota: " + memory + "}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: bench, namespace: " + std::string(kNamespace) +
      "}\nspec: {clusterQueue: bench}\n");
  if (!q.status.success()) throw std::runtime_error("the Kueue queues: " + q.output);
  std::cout << "  Kueue ready in " << fmt(std::chrono::duration<double>(Clock::now() - t_kueue).count())
            << " s; ClusterQueue of " << cpus << " CPUs and " << memory << ": every job fits at once" << std::endl;
  return kueue;
}

lockstep::kube::RestConfig client_config(const Run& run) {
  auto config = lockstep::kube::RestConfig::from_kubeconfig(run.cp->kubeconfig());
  config.qps = 1e6;  // the benchmark's own requests never wait on a client-side limit
  config.burst = 1000000;
  return config;
}

// --- fake nodes and KWOK --------------------------------------------------------------
// KWOK with this benchmark's Stages (bench/operator/kwok.hpp), until it reports every node Ready.
void start_kwok(Run& run, lockstep::kube::Client& client) {
  auto t_nodes = Clock::now();
  run.kwok = bench::kwok::start(run.o.kwok, *run.cp, bench::kwok::stages(run.o.succeed_after), run.o.nodes, client);
  std::cout << "  " << run.o.nodes << " KWOK nodes Ready in " << fmt(std::chrono::duration<double>(Clock::now() - t_nodes).count())
            << " s" << std::endl;
}

// --- the gang scheduler -----------------------------------------------------------------
void start_scheduler(Run& run) {
  const std::string dir = run.cp->dir();
  std::ofstream(dir + "/scheduler.yaml") << scheduler_config(run.cp->kubeconfig());
  int port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {run.o.scheduler, "--config", dir + "/scheduler.yaml", "--authentication-kubeconfig", run.cp->kubeconfig(),
             "--authorization-kubeconfig", run.cp->kubeconfig(), "--bind-address", "127.0.0.1", "--secure-port",
             std::to_string(port), "--v=1"};
  so.output_path = dir + "/scheduler.log";
  so.new_process_group = true;
  run.scheduler = lockstep::Process::spawn(so);
  if (!wait_ready("https://127.0.0.1:" + std::to_string(port) + "/readyz", 120s, [&] { return run.scheduler.running(); }))
    throw std::runtime_error(g_stop ? "interrupted" : "the gang scheduler is not ready: " + lockstep::test::tail_file(dir + "/scheduler.log"));
}

// --- the operator ---------------------------------------------------------------------------
void start_operator(Run& run) {
  const std::string dir = run.cp->dir();
  int port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {run.o.operator_bin, "--kubeconfig", run.cp->kubeconfig(), "--http-address", "127.0.0.1", "--http-port",
             std::to_string(port), "--leader-elect", "false", "--log-level", "warn"};
  so.argv.insert(so.argv.end(), run.o.operator_args.begin(), run.o.operator_args.end());
  so.output_path = dir + "/operator.log";
  so.new_process_group = true;
  run.op = lockstep::Process::spawn(so);
  run.metrics_url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  if (!wait_ready("http://127.0.0.1:" + std::to_string(port) + "/readyz", 120s, [&] { return run.op.running(); }))
    throw std::runtime_error(g_stop ? "interrupted" : "the operator is not ready: " + lockstep::test::tail_file(dir + "/operator.log"));
}

// --- what the phases share ------------------------------------------------------------------

// The phases' shared state: the client, the benchmark's view of the cluster, the operator's
// readings at the start of phase 1, the jobs the storm hit, and the report they write.
struct Phases {
  Phases(Run& r, lockstep::kube::Client& c, Cluster& cl) : run(r), o(r.o), client(c), cluster(cl) {}
  Run& run;
  const Options& o;
  lockstep::kube::Client& client;
  Cluster& cluster;
  // Each /metrics read costs the operator CPU (about 17 ms at 1,250 jobs on 2 busy cores: the
  // per-job series), so it is read every 5 s and the reads' own cost is measured at the end.
  int scrapes = 0;
  double peak_rate = 0;  // the operator's highest request rate over 5 s (wait_for)
  double op_cpu0 = 0, req0 = 0;
  Clock::time_point t_apply;
  bool ok = false;  // every phase so far finished
  std::set<std::string> hit;
  std::ostringstream report;

  std::string scrape() {
    ++scrapes;
    return lockstep::run_capture({"curl", "-sf", run.metrics_url}, {}, 10s).output;
  }
  double since_apply(Clock::time_point t) const { return std::chrono::duration<double>(t - t_apply).count(); }
};

double requests(const std::string& m) { return bench::metric_sum(m, "lockstep_operator_api_requests_total"); }

// Waits until done() holds, with a progress line every 5 s; false on timeout, Ctrl-C or a
// component gone. Reads the operator's request count with each line, for its highest rate
// over 5 s (peak_rate).
bool wait_for(Phases& p, const std::string& what, const std::function<bool()>& done) {
  Run& run = p.run;
  auto start = Clock::now(), last_sample = start;
  std::deque<std::pair<Clock::time_point, double>> samples{{start, requests(p.scrape())}};
  std::string m;
  while (!done()) {
    std::string problem = g_stop ? "interrupted" : !run.op.running() ? "the operator exited" : !run.kwok.running() ? "kwok exited"
                          : !run.scheduler.running() ? "the scheduler exited" : !run.cp->healthy() ? "the control plane died"
                          : Clock::now() - start > p.o.timeout ? "timed out after " + std::to_string(p.o.timeout.count()) + " s" : "";
    if (!problem.empty()) {
      std::cout << "  " << what << ": " << problem << std::endl;
      return false;
    }
    std::this_thread::sleep_for(200ms);
    if (Clock::now() - last_sample < 5s) continue;
    last_sample = Clock::now();
    m = p.scrape();
    samples.emplace_back(last_sample, requests(m));
    while (samples.size() > 2 && samples.back().first - samples[1].first >= 5s) samples.pop_front();
    double window = std::chrono::duration<double>(samples.back().first - samples.front().first).count();
    double rate = window > 0 ? (samples.back().second - samples.front().second) / window : 0;
    if (window >= 4.5) p.peak_rate = std::max(p.peak_rate, rate);
    auto c = p.cluster.counts();
    std::ostringstream jobs;
    for (const auto& [phase, n] : c.jobs) jobs << " " << phase << " " << n;
    std::cout << "  [" << fmt(run.elapsed(), 0) << " s] " << what << ": pods created " << p.cluster.created << ", bound "
              << c.bound << ", Running " << c.running << ", Succeeded " << c.succeeded << ", Failed " << c.failed
              << "; jobs" << jobs.str() << "; operator " << fmt(bench::cpu_seconds(run.op.pid())) << " CPU s, RSS "
              << fmt(bench::status_kb(run.op.pid(), "VmRSS:") / 1024.0) << " MB, " << fmt(rate, 0) << " req/s, queue max "
              << bench::metric_sum(m, "lockstep_operator_workqueue_depth_max") << std::endl;
  }
  return true;
}

// --- 1. apply ---------------------------------------------------------------------------------

// TrainingJob job-I: `gang` pods for the gang scheduler, held (kHoldLabel) while a storm is to come.
json training_job(const Run& run, int i) {
  const Options& o = run.o;
  json labels = run.storm ? json{{kHoldLabel, "true"}} : json::object();
  json md = {{"name", "job-" + std::to_string(i)}, {"namespace", kNamespace}};
  if (o.kueue) md["labels"] = {{"kueue.x-k8s.io/queue-name", "bench"}};
  return {{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"},
          {"metadata", md},
          {"spec", {{"nodes", o.gang}, {"procsPerNode", 1}, {"strategy", "DDP"},
                    {"scheduling", {{"gang", true}, {"schedulerName", kGangScheduler}}},
                    {"template", {{"metadata", {{"labels", labels}}},
                                  {"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:bench"},
                                                                          {"resources", {{"requests", {{"cpu", "1"}, {"memory", "2Gi"}}}}}}})}}}}}}}};
}

void report_apply(Phases& p, double created_s, double running_s, double succeeded_s);

// Applies every job, then waits until all their pods exist and every job runs (with a storm
// to come) or has succeeded (without one).
void phase1_apply(Phases& p) {
  const Options& o = p.o;
  std::cout << "phase 1: apply " << o.jobs << " TrainingJobs" << std::endl;
  p.op_cpu0 = bench::cpu_seconds(p.run.op.pid());
  p.req0 = requests(p.scrape());
  p.t_apply = Clock::now();
  std::atomic<int> apply_errors{0};
  bench::parallel(o.jobs, 16, [&](int i) {
    auto r = p.client.create(res::kTrainingJobs.path(kNamespace), training_job(p.run, i));
    if (!r.ok()) {
      if (apply_errors++ < 3) std::cerr << "  apply job-" << i << ": " << r.message() << "\n";
    }
  });
  double apply_s = std::chrono::duration<double>(Clock::now() - p.t_apply).count();
  std::cout << "  applied in " << fmt(apply_s) << " s (" << apply_errors << " errors)" << std::endl;
  p.ok = apply_errors == 0 && wait_for(p, "phase 1", [&] { return p.cluster.created >= p.run.total; });
  double created_s = -1;
  if (p.ok) {
    std::lock_guard<std::mutex> lock(p.cluster.mu);
    created_s = p.since_apply(p.cluster.last_created);
  }
  double running_s = -1, succeeded_s = -1;
  if (p.ok && p.run.storm) {
    p.ok = wait_for(p, "phase 1", [&] { return p.cluster.job_count("Running") == o.jobs && p.cluster.counts().running == p.run.total; });
    if (p.ok) running_s = p.since_apply(Clock::now());
  } else if (p.ok) {
    p.ok = wait_for(p, "phase 1", [&] { return p.cluster.job_count("Succeeded") == o.jobs; });
    if (p.ok) succeeded_s = p.since_apply(Clock::now());
  }
  report_apply(p, created_s, running_s, succeeded_s);
}

void report_apply(Phases& p, double created_s, double running_s, double succeeded_s) {
  const Options& o = p.o;
  const int total = p.run.total;
  double op_cpu1 = bench::cpu_seconds(p.run.op.pid());
  std::string m1 = p.scrape();
  double req1 = requests(m1);
  p.report << "  phase 1 (" << o.jobs << " jobs x " << o.gang << " pods):\n"
           << "    apply -> all " << total << " pods created:   " << (created_s < 0 ? "not reached (" + std::to_string(p.cluster.created) + " created)" : fmt(created_s) + " s (" + fmt(total / created_s, 0) + " pods/s)") << "\n";
  if (p.run.storm) p.report << "    apply -> all jobs Running:       " << (running_s < 0 ? "not reached" : fmt(running_s) + " s") << "\n";
  else p.report << "    apply -> all jobs Succeeded:     " << (succeeded_s < 0 ? "not reached" : fmt(succeeded_s) + " s") << "\n";
  p.report << "    operator CPU:                    " << fmt(op_cpu1 - p.op_cpu0, 2) << " s = " << fmt((op_cpu1 - p.op_cpu0) / (p.cluster.created / 1000.0), 3)
           << " s per 1,000 pods (target <= 1 ms per pod)\n"
           << "    operator API requests:           " << fmt(req1 - p.req0, 0) << " = " << fmt((req1 - p.req0) / o.jobs, 2) << " per job ("
           << requests_by_verb(m1, o.jobs) << " per job, since start)\n"
           << "    operator request rate:           " << fmt((req1 - p.req0) / std::max(1e-9, p.since_apply(Clock::now())), 1)
           << " req/s on average (--kube-api-qps " << p.run.qps << ")\n";
}

// --- 2. the storm -------------------------------------------------------------------------------

// The pods the storm fails: `--storm-percent` of all pods, drawn from the Running ones (seed
// 15), with the UID each failure is meant for.
struct Victims {
  std::vector<std::string> names;
  std::map<std::string, std::string> uids;
};

Victims pick_victims(Phases& p) {
  Victims v;
  {
    std::lock_guard<std::mutex> lock(p.cluster.mu);
    for (const auto& [name, pod] : p.cluster.pods)
      if (pod.phase == "Running") {
        v.names.push_back(name);
        v.uids[name] = pod.uid;
      }
  }
  std::mt19937 rng(15);
  std::shuffle(v.names.begin(), v.names.end(), rng);
  v.names.resize(static_cast<size_t>(p.run.total) * p.o.storm_percent / 100);
  return v;
}

std::string utc_now() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return std::string(buf);
}

// A failed pod's status as the kubelet would write it (exit code `exit_code`), for a
// strategic-merge patch conditional on the pod's UID.
json failed_status(const std::string& uid, int exit_code, const std::string& now) {
  return {{"metadata", {{"uid", uid}}}, {"status", {{"phase", "Failed"}, {"reason", "Error"},
         {"conditions", json::array({{{"type", "Ready"}, {"status", "False"}, {"lastTransitionTime", now}},
                                     {{"type", "ContainersReady"}, {"status", "False"}, {"lastTransitionTime", now}}})},
         {"containerStatuses", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:bench"}, {"imageID", ""},
                                             {"ready", false}, {"started", false}, {"restartCount", 0},
                                             {"state", {{"terminated", {{"exitCode", exit_code}, {"reason", "Error"},
                                                                        {"startedAt", now}, {"finishedAt", now}}}}}}})}}}};
}

// The operator's readings as the storm starts.
struct StormStart {
  double op_cpu = 0, requests = 0, gang_restarts = 0;
  Clock::time_point t;
};

void report_storm(Phases& p, size_t failed, const StormStart& s, double recovered_s);

// Fails the victims at once, then waits until every job hit runs again as attempt 1.
void phase2_storm(Phases& p) {
  if (!p.ok || !p.run.storm) return;
  const Options& o = p.o;
  Victims v = pick_victims(p);
  const auto& names = v.names;
  for (const auto& n : names) p.hit.insert(n.substr(0, n.rfind('-')));
  std::cout << "phase 2: storm: " << names.size() << " running pods fail at once (exit code " << o.storm_exit_code << "), "
            << p.hit.size() << " jobs hit" << std::endl;
  StormStart s;
  s.op_cpu = bench::cpu_seconds(p.run.op.pid());
  s.requests = requests(p.scrape());
  s.gang_restarts = bench::metric_sum(p.scrape(), "lockstep_operator_gang_restarts_total");
  p.peak_rate = 0;
  s.t = Clock::now();
  // A pod can be gone before its failure is written: another pod of its gang failed first
  // and the operator's gang restart deleted it. That is the storm working, not an error;
  // the patch names the pod's UID, so it never fails the next attempt's pod of that name.
  std::atomic<int> patch_errors{0}, already_gone{0};
  std::string now = utc_now();
  bench::parallel(static_cast<int>(names.size()), 32, [&](int i) {
    json status = failed_status(v.uids[names[i]], o.storm_exit_code, now);
    auto r = p.client.patch(res::kPods.path(kNamespace, names[i], "status"), status, lockstep::kube::PatchType::StrategicMerge);
    if (r.ok()) return;
    if (r.not_found() || r.conflict()) ++already_gone;
    else if (patch_errors++ < 3) std::cerr << "  fail " << names[i] << ": " << r.message() << "\n";
  });
  double patch_s = std::chrono::duration<double>(Clock::now() - s.t).count();
  std::cout << "  " << names.size() - already_gone << " pods Failed in " << fmt(patch_s, 2) << " s (" << already_gone
            << " already deleted by their gang's restart; " << patch_errors << " errors)" << std::endl;
  p.ok = patch_errors == 0 && wait_for(p, "phase 2", [&] {
    std::lock_guard<std::mutex> lock(p.cluster.mu);
    for (const auto& job : p.hit)
      if (!p.cluster.running_in(job, o.gang, 1)) return false;
    return true;
  });
  double recovered_s = p.ok ? std::chrono::duration<double>(Clock::now() - s.t).count() : -1;
  report_storm(p, names.size(), s, recovered_s);
}

void report_storm(Phases& p, size_t failed, const StormStart& s, double recovered_s) {
  const Options& o = p.o;
  std::string m2 = p.scrape();
  double req3 = requests(m2), storm_s = std::chrono::duration<double>(Clock::now() - s.t).count();
  int restarted = 0;
  {
    std::lock_guard<std::mutex> lock(p.cluster.mu);
    for (const auto& [name, j] : p.cluster.jobs) restarted += j.restarts > 0;
  }
  p.report << "  phase 2 (storm: " << failed << " of " << p.run.total << " running pods Failed, exit code " << o.storm_exit_code
           << ", " << p.hit.size() << " jobs hit):\n"
           << "    storm -> every job hit Running again (all pods of attempt 1): " << (recovered_s < 0 ? "not reached" : fmt(recovered_s) + " s")
           << " (includes the operator's --restart-backoff)\n"
           << "    gang restarts: " << fmt(bench::metric_sum(m2, "lockstep_operator_gang_restarts_total") - s.gang_restarts, 0)
           << " (lockstep_operator_gang_restarts_total); jobs with status.restarts > 0: " << restarted << "\n"
           << "    operator requests: " << fmt(req3 - s.requests, 0) << " in " << fmt(storm_s) << " s = " << fmt((req3 - s.requests) / storm_s, 1)
           << " req/s on average, " << (p.peak_rate > 0 ? fmt(p.peak_rate, 1) : std::string("n/a")) << " req/s at most over 5 s (--kube-api-qps " << p.run.qps
           << ", burst above it allowed by --kube-api-burst)\n"
           << "    operator CPU: " << fmt(bench::cpu_seconds(p.run.op.pid()) - s.op_cpu, 2) << " s\n";
}

// --- 3. complete -----------------------------------------------------------------------------------

// Releases every pod (removes the hold label), then waits until every job has succeeded.
void phase3_complete(Phases& p) {
  if (!p.ok || !p.run.storm) return;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(p.cluster.mu);
    for (const auto& [name, pod] : p.cluster.pods) names.push_back(name);
  }
  std::cout << "phase 3: release " << names.size() << " pods to succeed" << std::endl;
  auto t_release = Clock::now();
  std::atomic<int> errors{0};
  bench::parallel(static_cast<int>(names.size()), 32, [&](int i) {
    auto r = p.client.patch(res::kPods.path(kNamespace, names[i]), {{"metadata", {{"labels", {{kHoldLabel, nullptr}}}}}});
    if (!r.ok() && !r.not_found() && errors++ < 3) std::cerr << "  release " << names[i] << ": " << r.message() << "\n";
  });
  p.ok = errors == 0 && wait_for(p, "phase 3", [&] { return p.cluster.job_count("Succeeded") == p.o.jobs; });
  double done_s = p.ok ? std::chrono::duration<double>(Clock::now() - t_release).count() : -1;
  p.report << "  phase 3: release -> all jobs Succeeded: " << (done_s < 0 ? "not reached" : fmt(done_s) + " s")
           << " (pods succeed " << p.o.succeed_after.count() << " ms after release); apply -> all Succeeded: "
           << (done_s < 0 ? "not reached" : fmt(p.since_apply(Clock::now())) + " s") << "\n";
}

// --- checks ------------------------------------------------------------------------------------------

// The operator's totals over the run, read once it is quiet.
struct Totals {
  std::string m;       // its /metrics
  int run_scrapes;     // the benchmark's reads of it during the run
  double scrape_cpu;   // the operator's CPU seconds per read
  long hwm, rss;       // kB
  double op_cpu, req;  // since phase 1 started
};

Totals read_totals(Phases& p) {
  Totals t;
  t.m = p.scrape();
  // What the benchmark's own /metrics reads cost the operator, read 10 times now (quiet).
  t.run_scrapes = p.scrapes;
  double s0 = bench::cpu_seconds(p.run.op.pid());
  for (int i = 0; i < 10; ++i) p.scrape();
  t.scrape_cpu = (bench::cpu_seconds(p.run.op.pid()) - s0) / 10;
  t.hwm = bench::status_kb(p.run.op.pid(), "VmHWM:"), t.rss = bench::status_kb(p.run.op.pid(), "VmRSS:");
  t.op_cpu = s0 - p.op_cpu0, t.req = requests(t.m) - p.req0;
  return t;
}

// Every job Succeeded, no duplicate pod, the expected restarts: the failures (none when all
// hold), with a line of counts added to the report.
std::vector<std::string> check_jobs(Phases& p) {
  const Options& o = p.o;
  Cluster& cluster = p.cluster;
  std::vector<std::string> failures;
  std::lock_guard<std::mutex> lock(cluster.mu);
  int succeeded = 0, dup_alive = 0, wrong_count = 0, wrong_restarts = 0, expected_pods = 0;
  for (const auto& [name, j] : cluster.jobs) {
    succeeded += j.phase == "Succeeded";
    bool was_hit = p.hit.count(name) > 0;
    if (j.restarts != (was_hit ? 1 : 0)) ++wrong_restarts;
    expected_pods += o.gang * (1 + j.restarts);
    for (int i = 0; i < o.gang; ++i) {
      auto s = cluster.slots.find({name, i});
      size_t n = s == cluster.slots.end() ? 0 : s->second.uids.size();
      if (n != static_cast<size_t>(1 + j.restarts)) ++wrong_count;
      if (s != cluster.slots.end() && s->second.max_alive > 1) ++dup_alive;
    }
  }
  if (p.ok && succeeded != o.jobs) failures.push_back(std::to_string(o.jobs - succeeded) + " jobs not Succeeded");
  if (!p.ok) failures.push_back("a phase did not finish (see above)");
  if (static_cast<int>(cluster.jobs.size()) != o.jobs) failures.push_back("the watch saw " + std::to_string(cluster.jobs.size()) + " jobs");
  if (dup_alive) failures.push_back(std::to_string(dup_alive) + " job indexes had two pods alive at once");
  if (p.ok && wrong_count) failures.push_back(std::to_string(wrong_count) + " job indexes had a pod count other than 1 + status.restarts");
  if (p.ok && wrong_restarts) failures.push_back(std::to_string(wrong_restarts) + " jobs restarted other than once when hit, never otherwise");
  p.report << "  checks: jobs Succeeded " << succeeded << "/" << o.jobs << "; pods created " << cluster.created << " (expected "
           << expected_pods << " = " << o.gang << " x (1 + restarts) per job); indexes with two pods alive at once: " << dup_alive
           << "; indexes with a pod count other than 1 + restarts: " << wrong_count << "; jobs with unexpected restarts: "
           << wrong_restarts << "\n";
  return failures;
}

void report_whole_run(Phases& p, const Totals& t) {
  const Run& run = p.run;
  const std::string& m = t.m;
  double per_k = p.cluster.created / 1000.0;
  p.report << "  whole run (" << p.cluster.created << " pods created):\n"
           << "    reconcile duration:  p50 " << fmt(bench::histogram_quantile(m, "lockstep_operator_reconcile_duration_seconds", 0.5) * 1000, 2)
           << " ms, p99 " << fmt(bench::histogram_quantile(m, "lockstep_operator_reconcile_duration_seconds", 0.99) * 1000, 2) << " ms ("
           << fmt(bench::metric_sum(m, "lockstep_operator_reconcile_duration_seconds_count"), 0) << " reconciles)\n"
           << "    work queue depth at most: " << fmt(bench::metric_sum(m, "lockstep_operator_workqueue_depth_max"), 0) << " jobs\n"
           << "    operator RSS:        peak (VmHWM) " << fmt(t.hwm / 1024.0) << " MB, at the end " << fmt(t.rss / 1024.0)
           << " MB (anonymous " << fmt(bench::status_kb(run.op.pid(), "RssAnon:") / 1024.0) << " MB, files " << fmt(bench::status_kb(run.op.pid(), "RssFile:") / 1024.0)
           << " MB; target <= 64 MB at 10,000 pods: " << (t.hwm > 0 && t.hwm <= 64 * 1024 ? "met" : "NOT met") << ")\n"
           << "    operator CPU:        " << fmt(t.op_cpu, 2) << " s = " << fmt(t.op_cpu / per_k, 3) << " s per 1,000 pods ("
           << fmt(t.op_cpu / per_k, 3) << " ms per pod; target <= 1 ms per pod: " << (t.op_cpu / per_k <= 1.0 ? "met" : "NOT met") << ")\n"
           << "      of which the benchmark's " << t.run_scrapes << " /metrics reads: about " << fmt(t.run_scrapes * t.scrape_cpu, 2) << " s ("
           << fmt(t.scrape_cpu * 1000, 1) << " ms each); without them " << fmt((t.op_cpu - t.run_scrapes * t.scrape_cpu) / per_k, 3) << " ms per pod\n"
           << "    API requests:        " << fmt(t.req, 0) << " = " << fmt(t.req / p.o.jobs, 2) << " per job (" << requests_by_verb(m, p.o.jobs)
           << " per job, since start; watches included)\n"
           << "    apiserver CPU: " << fmt(bench::cpu_seconds(run.cp->apiserver_pid()), 1) << " s, etcd " << fmt(bench::cpu_seconds(run.cp->etcd_pid()), 1)
           << " s, kwok " << fmt(bench::cpu_seconds(run.kwok.pid()), 1) << " s, scheduler " << fmt(bench::cpu_seconds(run.scheduler.pid()), 1)
           << " s (since each started)\n";
}

// Prints the report and the checks' verdict; true when every check passed.
bool print_results(Phases& p, const std::vector<std::string>& failures) {
  bool checks_ok = failures.empty();
  std::cout << "\nresults (kube-apiserver " << "v1.34.4 on loopback, KWOK " LOCKSTEP_KWOK_VERSION ", scheduler-plugins "
            << LOCKSTEP_SCHEDULER_PLUGINS_VERSION << " Coscheduling; " << std::thread::hardware_concurrency() << " cores):\n"
            << p.report.str();
  for (const auto& f : failures) std::cout << "  CHECK FAILED: " << f << "\n";
  std::cout << (checks_ok ? "checks passed" : "checks FAILED") << std::endl;
  return checks_ok;
}

// --- the run, in order ------------------------------------------------------------------------

// The set-up, the three phases and the checks: 0 when every check passed, 1 when one failed or
// something broke (printed), 130 on Ctrl-C. Kueue, the client and the watches end here; what
// they ran on is stopped afterwards (stop_everything).
int run_phases(Run& run) {
  try {
    start_control_plane(run);
    std::unique_ptr<lockstep::test::Kueue> kueue;
    if (run.o.kueue) kueue = start_kueue(run);
    auto config = client_config(run);
    lockstep::kube::Client client(config);
    bench::kwok::create_nodes(client, run.o.nodes);
    start_kwok(run, client);
    start_scheduler(run);
    start_operator(run);
    std::cout << "  gang scheduler and operator ready; set-up took " << fmt(run.elapsed()) << " s" << std::endl;

    Cluster cluster;
    Reaper reaper(config);
    Watcher pod_watch(config, res::kPods.path(kNamespace), [&](const std::string& t, const json& obj) {
      cluster.on_pod(t, obj);
      if (t != "DELETED" && obj["metadata"].contains("deletionTimestamp"))
        reaper.deleting(obj["metadata"].value("name", ""), obj["metadata"].value("uid", ""));
    });
    Watcher job_watch(config, res::kTrainingJobs.path(kNamespace), [&](const std::string& t, const json& obj) { cluster.on_job(t, obj); });

    Phases p(run, client, cluster);
    phase1_apply(p);
    phase2_storm(p);
    phase3_complete(p);
    Totals totals = read_totals(p);
    std::vector<std::string> failures = check_jobs(p);
    report_whole_run(p, totals);
    bool checks_ok = print_results(p, failures);
    return g_stop ? 130 : checks_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cout << "bench/scale: " << (g_stop ? "interrupted" : std::string("error: ") + e.what()) << std::endl;
    return g_stop ? 130 : 1;
  }
}

// Stops everything, the operator first (it would act on what goes away), the control plane last.
void stop_everything(Run& run) {
  std::cout << "stopping the operator, the scheduler, kwok and the control plane" << std::endl;
  for (auto* p : {&run.op, &run.scheduler, &run.kwok})
    if (p->pid() > 0) p->terminate(5s);
  if (run.cp) run.cp->stop();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  bench::catch_stop_signals();
  if (int rc = check_prerequisites(o)) return rc;
  Run run(std::move(o));
  print_plan(run);
  run.t_start = Clock::now();
  int rc = run_phases(run);
  stop_everything(run);
  std::fflush(nullptr);
  ::_exit(rc);
}
