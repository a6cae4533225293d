// Kueue with Lockstep in the real-node cluster (#39): priority and preemption, losing no step.
//
// Kueue v0.19.2 runs as a host process against the cluster's API server
// (tests/controlplane/kueue.hpp); the chart installs the operator with kueue.enabled. A
// ClusterQueue holds the CPU of one checkpointed two-pod job (examples/ddp-checkpoint.yaml,
// each pod held to kCpu) and preempts lower priorities. Here, with real kubelets and real
// trainers (Note [One Workload per job] in operator/reconcile/kueue.hpp, Note [Stop on request]
// in trainer/stop.hpp):
//   - a high-priority job preempts a training low-priority one, in kRounds rounds: each time the
//     low gang's trainers get SIGTERM, agree on a step S, checkpoint it and leave; the low job
//     waits Queued (Evicted, Preempted, an Event, no restart counted); the high job runs to
//     Succeeded; the low one is admitted again and resumes at step S + 1. In all, every step is
//     trained once, and every loss equals that of the same job never stopped;
//   - an in-place restart (a trainer SIGKILLed) under Kueue keeps the admission: the same
//     Workload, no eviction, no Kueue event about one.
// Lines starting "[cluster] kueue:" give each round's preemption latency (the high job created
// to all its pods Running) and the low job's stop (SIGTERM to the checkpoint written to its pods
// gone); the test's properties hold them too.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <filesystem>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "job_support.hpp"
#include "kueue.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::checkpoint_job;
using lockstep::test::cluster_kubectl;
using lockstep::test::condition;
using lockstep::test::create_test_namespace;
using lockstep::test::diagnose;
using lockstep::test::eventually;
using lockstep::test::get_json;
using lockstep::test::last_logged_step;
using lockstep::test::latest_checkpoint;
using lockstep::test::parse_rfc3339;
using lockstep::test::phase;
using lockstep::test::real_cluster;
using lockstep::test::resume_of;
using lockstep::test::Resume;
using lockstep::test::wait_succeeded;
using Clock = std::chrono::system_clock;

namespace {

// Each pod's CPU (request and limit): the quota is one job's two pods, so two jobs never fit.
// A quarter core steps at a rate a machine's speed changes little, and leaves the host lane
// most of the CPU, as in lockstep_cluster_test's fault test.
constexpr const char* kCpu = "250m";
constexpr const char* kQuotaCpu = "500m";
constexpr int kLowSteps = 150, kHighSteps = 30, kRounds = 3;

double seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

// The pods of the jobs in `ns` that are not finished, by job (the lockstep.dev/job-name label).
struct PodsNow {
  std::map<std::string, std::vector<json>> by_job;
  const std::vector<json>& of(const std::string& job) const {
    static const std::vector<json> none;
    auto it = by_job.find(job);
    return it == by_job.end() ? none : it->second;
  }
  size_t count(const std::string& job) const { return of(job).size(); }
  bool any_deleting(const std::string& job) const {
    for (const auto& p : of(job))
      if (p["metadata"].contains("deletionTimestamp")) return true;
    return false;
  }
  bool all_running(const std::string& job, size_t n) const {
    if (count(job) != n) return false;
    for (const auto& p : of(job))
      if (p["status"].value("phase", "") != "Running" || p["metadata"].contains("deletionTimestamp")) return false;
    return true;
  }
};

PodsNow pods_now(const std::string& ns) {
  PodsNow out;
  json pods = get_json(ns, "pods");
  for (const auto& p : pods.is_object() ? pods["items"] : json::array()) {
    const std::string ph = p["status"].value("phase", "");
    if (ph == "Succeeded" || ph == "Failed") continue;
    const std::string job = p["metadata"].value("labels", json::object()).value("lockstep.dev/job-name", "");
    if (!job.empty()) out.by_job[job].push_back(p);
  }
  return out;
}

// The job's Workload (the operator's, found by the job-name label), null when none.
json workload(const std::string& ns, const std::string& job) {
  auto r = cluster_kubectl({"-n", ns, "get", "workloads.kueue.x-k8s.io", "-l", "lockstep.dev/job-name=" + job, "-o", "json"});
  size_t from = r.output.find('{'), to = r.output.rfind('}');
  if (!r.status.success() || from == std::string::npos || to == std::string::npos) return json();
  json list = json::parse(r.output.substr(from, to - from + 1), nullptr, false);
  return list.is_object() && !list["items"].empty() ? list["items"][0] : json();
}

// condition() reads a TrainingJob's; a Workload's has the same shape.
std::string wl_status(const json& wl, const std::string& type) {
  const json* c = condition(wl, type);
  return c ? c->value("status", "") : "";
}

// The Events in `ns` whose reason names an eviction or a preemption, "kind/name reason" each.
std::vector<std::string> eviction_events(const std::string& ns) {
  std::vector<std::string> out;
  json events = get_json(ns, "events");
  for (const auto& e : events.is_object() ? events["items"] : json::array()) {
    const std::string reason = e.value("reason", "");
    if (reason.find("Evict") != std::string::npos || reason.find("Preempt") != std::string::npos)
      out.push_back(e["involvedObject"].value("kind", "") + "/" + e["involvedObject"].value("name", "") + " " + reason +
                    ": " + e.value("message", ""));
  }
  return out;
}

// Rank 0's losses by step, from the text of its loss log ("STEP LOSS" lines). The trainer
// writes the file afresh at each start, so a job stopped and resumed leaves one text per run.
std::map<int, std::vector<double>> losses(const std::string& loss_log_text) {
  std::map<int, std::vector<double>> out;
  std::istringstream in(loss_log_text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    int step;
    double loss;
    if (f >> step >> loss) out[step].push_back(loss);
  }
  return out;
}

// `kubectl logs -f --timestamps POD` into a file from now until the container ends: a pod's
// last lines, which are gone with the pod once it is deleted.
class LogFollower {
 public:
  LogFollower(const std::string& ns, const std::string& pod)
      : path_(::testing::TempDir() + "/kueue-logs-" + ns + "-" + pod + ".txt") {
    std::filesystem::remove(path_);
    lockstep::SpawnOptions o;
    o.argv = {lockstep::test::cluster_setting("TOOLS_BIN") + "/kubectl", "--kubeconfig", real_cluster()->kubeconfig(),
              "-n", ns, "logs", "-f", "--timestamps", pod};
    o.output_path = path_;
    proc_ = lockstep::Process::spawn(o);
  }
  ~LogFollower() { proc_.terminate(2s); }
  bool ended() { return !proc_.running(); }
  std::string text() const { return lockstep::test::read_file(path_); }

 private:
  std::string path_;
  lockstep::Process proc_;
};

// The kubelet's timestamp of the first line of `log` holding `needle`, and that line.
std::optional<Clock::time_point> line_time(const std::string& log, const std::string& needle, std::string* line = nullptr) {
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);)
    if (l.find(needle) != std::string::npos) {
      if (line) *line = l;
      return parse_rfc3339(l.substr(0, l.find(' ')));
    }
  return std::nullopt;
}

// examples/ddp-checkpoint.yaml as checkpoint_job() makes it, queued in LocalQueue "lq" with the
// WorkloadPriorityClass `priority` ("" for none).
std::string queued_job(const std::string& name, const std::string& dir, int steps, const std::string& priority,
                       int in_place_restarts = 3) {
  std::string yaml = checkpoint_job(name, dir, steps, in_place_restarts, kCpu);
  const std::string at = "\n  name: " + name + "\n";
  size_t pos = yaml.find(at);
  if (pos == std::string::npos) throw std::runtime_error("checkpoint_job() gave no metadata.name line");
  yaml.insert(pos + at.size(), "  labels: {kueue.x-k8s.io/queue-name: lq" +
                                   (priority.empty() ? "" : ", kueue.x-k8s.io/priority-class: " + priority) + "}\n");
  return yaml;
}

// Kueue started and Lockstep installed, once for the suite: a failure here fails every test.
class KueueInClusterBase : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster()) return;
    missing_ = lockstep::test::Kueue::missing();
    if (!missing_.empty()) return;
    // The chart's CRDs first: Kueue is told of TrainingJobs (externalFrameworks), and the
    // operator looks for Kueue's API at its start (then only every minute: Note [Kueue API
    // discovery]), so Kueue is up before the operator.
    auto crds = cluster_kubectl({"apply", "--server-side", "-f", std::string(LOCKSTEP_SOURCE_DIR) + "/charts/lockstep/crds"});
    if (!crds.status.success()) {
      problem_ = "kubectl apply of the chart's CRDs: " + crds.output;
      return;
    }
    lockstep::test::KueueOptions o;
    o.dir = ::testing::TempDir() + "/kueue-in-cluster";
    // A gang of real pods under a quarter core each comes together in tens of seconds; a generous
    // PodsReady timeout keeps a slow start from being an eviction of its own.
    o.pods_ready_timeout = 120s;
    auto t0 = std::chrono::steady_clock::now();
    try {
      kueue_ = lockstep::test::Kueue::start(real_cluster()->kubeconfig(), o).release();
    } catch (const std::exception& e) {
      problem_ = std::string("Kueue did not start against the cluster: ") + e.what();
      return;
    }
    std::cerr << "[cluster] kueue: manager ready in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s (log "
              << kueue_->log_path() << ")\n";
    problem_ = lockstep::test::install_lockstep(
        {"replicas=1", "progressPeriod=2s", "restartBackoff=1s", "kueue.enabled=true"}, &install_seconds_);
    if (!problem_.empty()) return;
    std::cerr << "[cluster] helm install (kueue.enabled): operator ready in " << install_seconds_ << " s\n";
    if (!eventually([] {
          auto logs = cluster_kubectl({"-n", lockstep::test::kOperatorNamespace, "logs", "deploy/lockstep-operator"});
          return logs.output.find("Kueue Workload API (kueue.x-k8s.io/v1beta2) found") != std::string::npos;
        }, 60s))
      problem_ = "the operator did not find Kueue's Workload API:\n" + diagnose(lockstep::test::kOperatorNamespace);
  }

  static void TearDownTestSuite() {
    delete kueue_;  // its webhooks go with it, before the cluster does
    kueue_ = nullptr;
  }

  void SetUp() override {
    LOCKSTEP_REQUIRE_REAL_CLUSTER();
    if (!missing_.empty()) {
      if (lockstep::test::env_or("LOCKSTEP_REQUIRE_ALL", "") == "1")
        FAIL() << "Kueue unavailable (scripts/setup.sh builds it; LOCKSTEP_KUEUE_DIR names it): " << missing_;
      GTEST_SKIP() << "SKIPPED: Kueue unavailable: " << missing_;
    }
    ASSERT_TRUE(problem_.empty()) << problem_;
  }

  void TearDown() override {
    if (HasFailure() && kueue_)
      std::cerr << "--- Kueue's log (last 3 KB) ---\n" << [] {
        std::string log = lockstep::test::read_file(kueue_->log_path());
        return log.substr(log.size() > 3072 ? log.size() - 3072 : 0);
      }() << "\n";
  }

  void apply(const std::string& ns, const std::string& yaml) {
    auto r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output << "\n" << yaml;
  }

  // A ResourceFlavor, a ClusterQueue of one job's CPU for `ns` that preempts lower priorities
  // within itself, LocalQueue "lq" in it, and WorkloadPriorityClasses NS-low (100) and NS-high
  // (1000). Memory is covered too, with room for any number of jobs: Kueue admits nothing that
  // requests a resource its ClusterQueue does not cover, and the example's pods request memory.
  void make_queues(const std::string& ns) {
    apply(ns, "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: " + ns + "-flavor}\n"
              "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: " + ns + "-cq}\nspec:\n"
              "  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: " + ns + "}}\n"
              "  preemption: {withinClusterQueue: LowerPriority}\n"
              "  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors:\n    - name: " + ns + "-flavor\n"
              "      resources: [{name: cpu, nominalQuota: " + kQuotaCpu + "}, {name: memory, nominalQuota: 64Gi}]\n"
              "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq}\nspec: {clusterQueue: " + ns + "-cq}\n"
              "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: " + ns + "-low}\nvalue: 100\n"
              "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: " + ns + "-high}\nvalue: 1000\n");
  }

  // Any phase but Succeeded, which wait_succeeded (job_support.hpp) waits for with its checks.
  bool wait_phase(const std::string& ns, const std::string& job, const std::string& want, std::chrono::seconds timeout) {
    return eventually([&] { return phase(ns, job) == want; }, timeout);
  }

  inline static lockstep::test::Kueue* kueue_ = nullptr;
  inline static std::string missing_, problem_;
  inline static double install_seconds_ = 0;
};

// One preemption, seen by polling (a sample every few hundred ms) from the high job's creation
// until all its pods run.
struct Preemption {
  std::optional<Clock::time_point> low_deleting, low_gone, high_pods, high_running;
  json low_while_queued;    // the low TrainingJob, as first seen Queued and Evicted
  bool overlapped = false;  // a high pod seen while a low pod was still there
};

Preemption watch_preemption(const std::string& ns, const std::string& high, std::chrono::seconds timeout) {
  Preemption p;
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!p.high_running && std::chrono::steady_clock::now() < until) {
    PodsNow pods = pods_now(ns);
    auto now = Clock::now();
    if (!p.low_deleting && pods.any_deleting("low")) p.low_deleting = now;
    if (p.low_deleting && !p.low_gone && pods.count("low") == 0) p.low_gone = now;
    if (!p.high_pods && pods.count(high) > 0) p.high_pods = now;
    if (pods.all_running(high, 2)) p.high_running = now;
    p.overlapped |= pods.count(high) > 0 && pods.count("low") > 0;
    if (p.low_while_queued.is_null()) {
      json low = get_json(ns, "trainingjob/low");
      const json* ev = condition(low, "Evicted");
      if (low.is_object() && low["status"].value("phase", "") == "Queued" && ev && ev->value("status", "") == "True")
        p.low_while_queued = low;
    }
    std::this_thread::sleep_for(100ms);
  }
  return p;
}

// What one round of preemption measured, and rank 0's loss log as the low job's stop left it.
struct Round {
  int at_creation = 0;  // the step the low job had logged when the high one was created
  int stop_step = 0;    // S: where its ranks agreed to stop, checkpointed
  double latency = 0, to_checkpoint = 0, to_gone = 0, readmission = 0;
  std::string loss_log;
};

// "" when the loss log text holds each step of first..last once and no other, else what is wrong.
std::string segment_problem(const std::string& loss_log_text, int first, int last) {
  auto by_step = losses(loss_log_text);
  std::string out;
  for (int s = first; s <= last; ++s)
    if (by_step[s].size() != 1) out += " step " + std::to_string(s) + " logged " + std::to_string(by_step[s].size()) + " times;";
  for (const auto& [s, l] : by_step)
    if (s < first || s > last) out += " step " + std::to_string(s) + " outside " + std::to_string(first) + ".." + std::to_string(last) + ";";
  return out;
}

// The suite's fixture: the base, and one round of preemption (the first test's steps).
class KueueInCluster : public KueueInClusterBase {
 protected:
  // Round `k`: once the low job (running again) has logged `since` + 15 steps, job high-k (of
  // the high priority class) is created; it preempts the low one, which stops at an agreed step
  // S, checkpointed, and is Queued while high-k runs to Succeeded; then it resumes at S + 1.
  void preempt(const std::string& ns, const std::string& volumes, int k, int since, Round& r) {
    SCOPED_TRACE("round " + std::to_string(k));
    const std::string high = "high-" + std::to_string(k), low_dir = volumes + "/low", loss = low_dir + "/loss.txt";
    ASSERT_TRUE(eventually([&] { return last_logged_step(loss) >= since + 15 && pods_now(ns).all_running("low", 2); }, 180s))
        << diagnose(ns);
    LogFollower rank0(ns, "low-0"), rank1(ns, "low-1");
    const auto created = Clock::now();
    r.at_creation = last_logged_step(loss);
    apply(ns, queued_job(high, volumes + "/" + high, kHighSteps, ns + "-high"));
    Preemption p = watch_preemption(ns, high, 240s);
    ASSERT_TRUE(p.high_running) << "the high-priority job's pods never all ran\n" << workload(ns, high).dump(1) << diagnose(ns);
    ASSERT_TRUE(p.low_deleting && p.low_gone) << diagnose(ns);
    EXPECT_FALSE(p.overlapped) << "the high job had pods while the low job's were still there: more than the quota";
    EXPECT_EQ(workload(ns, high)["spec"].value("priority", 0), 1000);

    // The low job stopped at step S, checkpointed there, and logged nothing after it.
    r.loss_log = lockstep::test::read_file(loss);
    const int S = r.stop_step = latest_checkpoint(low_dir);
    EXPECT_EQ(S, last_logged_step(loss)) << "steps after the last checkpoint would be redone";
    EXPECT_GE(S, r.at_creation) << "the checkpoint is older than the step training was at when preempted";
    ASSERT_TRUE(eventually([&] { return rank0.ended() && rank1.ended(); }, 30s));
    stopped_at(k, rank0.text(), rank1.text(), S, created, p, r);
    if (HasFatalFailure()) return;

    // Queued while the high job ran, evicted by preemption, no restart counted.
    ASSERT_TRUE(p.low_while_queued.is_object()) << "the low job was never seen Queued and Evicted\n" << diagnose(ns);
    const json* evicted = condition(p.low_while_queued, "Evicted");
    EXPECT_EQ(evicted->value("reason", ""), "Preempted") << evicted->dump();
    EXPECT_EQ(p.low_while_queued["status"].value("restarts", -1), 0) << p.low_while_queued["status"].dump();

    // The high job runs to the end; then the low one is admitted again and resumes at S + 1.
    ASSERT_TRUE(wait_succeeded(ns, high, 240s));
    const auto high_done = Clock::now();
    Resume res;
    ASSERT_TRUE(eventually([&] {
      res = resume_of(ns, "low-0", *p.low_gone);
      return res.first_step_at.has_value();
    }, 240s)) << "the low job did not train again\n" << workload(ns, "low").dump(1) << diagnose(ns);
    EXPECT_EQ(res.step, S) << "resumed from another checkpoint than the one written at the stop";
    r.readmission = seconds(high_done, *res.first_step_at);
    std::cerr << std::fixed << std::setprecision(2) << "[cluster] kueue: round " << k << ": admitted again: " << high
              << " Succeeded -> the low job's first step after the resume " << r.readmission << " s; resumed at step "
              << res.step + 1 << ", " << S - res.step << " steps redone\n" << std::defaultfloat;
    for (const auto& [name, value] : std::map<std::string, double>{{"preemption_latency_seconds", r.latency},
                                                                   {"low_sigterm_to_checkpoint_seconds", r.to_checkpoint},
                                                                   {"low_sigterm_to_pods_gone_seconds", r.to_gone},
                                                                   {"readmission_seconds", r.readmission}})
      RecordProperty("round_" + std::to_string(k) + "_" + name, std::to_string(value));
  }

  // What the low job's last lines say of its stop at step S, and the round's figures: the
  // preemption as the high job sees it, the stop as the low one does (the kubelet's timestamps
  // of the agent's and the trainer's lines, the pods' going as polled).
  void stopped_at(int k, const std::string& log0, const std::string& log1, int S, Clock::time_point created,
                  const Preemption& p, Round& r) {
    std::string written;
    auto sigterm = line_time(log0, "stopping the workers (grace period");  // the agent, on the kubelet's SIGTERM
    auto handler = line_time(log0, "SIGTERM: stopping at the end of a step");
    auto checkpointed = line_time(log0, "stop: checkpoint at step " + std::to_string(S) + " written in", &written);
    ASSERT_TRUE(sigterm && handler && checkpointed)
        << "rank 0's last lines:\n" << log0.substr(log0.size() > 4000 ? log0.size() - 4000 : 0);
    EXPECT_NE(log0.find("stop agreed after step " + std::to_string(S)), std::string::npos) << log0;
    EXPECT_NE(log1.find("stop agreed after step " + std::to_string(S)), std::string::npos) << log1;
    EXPECT_NE(log0.find("stopped on request after step " + std::to_string(S) + "; exit 143"), std::string::npos) << log0;
    r.latency = seconds(created, *p.high_running);
    r.to_checkpoint = seconds(*sigterm, *checkpointed);
    r.to_gone = seconds(*sigterm, *p.low_gone);
    std::cerr << std::fixed << std::setprecision(2) << "[cluster] kueue: round " << k << ": "
              << "preemption latency " << r.latency << " s: high job created -> low pods deleting "
              << seconds(created, *p.low_deleting) << " s -> low pods gone " << seconds(created, *p.low_gone)
              << " s -> high pods created " << seconds(created, *p.high_pods) << " s -> all high pods Running "
              << r.latency << " s\n"
              << "[cluster] kueue: round " << k << ": low job's stop: SIGTERM (pod 0's agent) -> trainer's handler "
              << seconds(*sigterm, *handler) << " s -> checkpoint at step " << S << " written " << r.to_checkpoint
              << " s -> pods gone " << r.to_gone << " s (at step " << r.at_creation
              << " when the high job was created; the trainer: " << written.substr(written.find("stop:")) << ")\n"
              << std::defaultfloat;
  }
};

// #39: high-priority jobs preempt a training low-priority one, kRounds times. Each time it stops
// at a step its ranks agree on, checkpointed there, waits in the queue while the high one runs,
// and comes back at the next step; in all, every step is trained once, with the losses of the
// same job never stopped.
TEST_F(KueueInCluster, AHigherPriorityJobPreemptsATrainingJobWhichResumesAtTheNextStepLosingNone) {
  const std::string ns = create_test_namespace("preempt");
  make_queues(ns);
  const std::string volumes = lockstep::test::real_cluster_state_dir() + "/run/volumes/" + ns;
  const std::string low_dir = volumes + "/low", ref_dir = volumes + "/reference";
  apply(ns, queued_job("low", low_dir, kLowSteps, ns + "-low"));
  // The same job outside Kueue (no queue label), never stopped: the losses to compare. It trains
  // beside the low one, each pod held to kCpu, while the node has room.
  apply(ns, checkpoint_job("reference", ref_dir, kLowSteps, 3, kCpu));
  ASSERT_TRUE(wait_phase(ns, "low", "Running", 180s)) << diagnose(ns);
  const json low_wl = workload(ns, "low");
  ASSERT_TRUE(low_wl.is_object()) << diagnose(ns);
  EXPECT_EQ(low_wl["spec"].value("priority", 0), 100) << low_wl.dump(1);

  // Round 1 at step 25 or later: past the first checkpoint (20), mid-way to the next.
  std::vector<Round> rounds(kRounds);
  for (int k = 1, since = 10; k <= kRounds; since = rounds[k - 1].stop_step, ++k) {
    preempt(ns, volumes, k, since, rounds[k - 1]);
    if (HasFatalFailure()) return;
  }
  json low = get_json(ns, "trainingjob/low");
  EXPECT_EQ(low["status"].value("restarts", -1), 0) << low["status"].dump();
  EXPECT_EQ(workload(ns, "low")["metadata"].value("uid", ""), low_wl["metadata"].value("uid", ""))
      << "the same Workload, admitted again";

  ASSERT_TRUE(wait_succeeded(ns, "low", 300s));
  low = get_json(ns, "trainingjob/low");
  EXPECT_EQ(low["status"].value("restarts", -1), 0) << low["status"].dump();
  const json* ev = condition(low, "Evicted");
  ASSERT_NE(ev, nullptr) << low["status"].dump();
  EXPECT_EQ(ev->value("status", ""), "False") << ev->dump();
  EXPECT_EQ(ev->value("reason", ""), "Readmitted") << ev->dump();
  int evicted_events = 0;
  std::string events;
  for (const auto& e : eviction_events(ns)) {
    evicted_events += e.rfind("TrainingJob/low Evicted:", 0) == 0;
    events += e + "\n";
  }
  EXPECT_EQ(evicted_events, kRounds) << "one Evicted Event on the job per preemption:\n" << events;

  // Every step trained once: each run's loss log starts at the step after the last stop and
  // ends at the next; and every loss is that of the run never stopped (DDP's two-rank
  // all-reduce is deterministic: the bound is float noise).
  std::vector<std::string> runs;
  for (const auto& r : rounds) runs.push_back(r.loss_log);
  runs.push_back(lockstep::test::read_file(low_dir + "/loss.txt"));
  std::map<int, std::vector<double>> all;
  for (int i = 0; i <= kRounds; ++i) {
    const int first = i == 0 ? 1 : rounds[i - 1].stop_step + 1;
    const int last = i < kRounds ? rounds[i].stop_step : kLowSteps;
    EXPECT_EQ(segment_problem(runs[i], first, last), "") << "run " << i + 1 << " of the low job";
    for (const auto& [s, l] : losses(runs[i])) all[s].insert(all[s].end(), l.begin(), l.end());
  }
  ASSERT_TRUE(wait_succeeded(ns, "reference", 300s));
  auto reference = losses(lockstep::test::read_file(ref_dir + "/loss.txt"));
  int compared = 0;
  for (int s = 1; s <= kLowSteps; ++s) {
    if (all[s].size() != 1 || reference[s].size() != 1) continue;  // said above
    EXPECT_NEAR(all[s][0], reference[s][0], 1e-5 * reference[s][0]) << "step " << s;
    ++compared;
  }
  EXPECT_EQ(compared, kLowSteps);
  std::cerr << "[cluster] kueue: " << kRounds << " preemptions, stopped after steps";
  for (const auto& r : rounds) std::cerr << " " << r.stop_step;
  std::cerr << "; all " << compared << " steps' losses equal to the run never stopped\n";
  cluster_kubectl({"delete", "namespace", ns, "--wait=true"}, "", 120s);
}

// An in-place restart is invisible to Kueue: a trainer SIGKILLed in an admitted job is restarted
// in the same pods, and the Workload stays the same one, admitted, PodsReady, never evicted.
TEST_F(KueueInCluster, AnInPlaceRestartKeepsTheAdmission) {
  const std::string ns = create_test_namespace("inplace");
  make_queues(ns);
  const std::string dir = lockstep::test::real_cluster_state_dir() + "/run/volumes/" + ns + "/steady";
  const std::string job = "steady";
  apply(ns, queued_job(job, dir, 60, ns + "-low", 1));
  ASSERT_TRUE(wait_phase(ns, job, "Running", 180s)) << diagnose(ns);
  ASSERT_TRUE(eventually([&] { return wl_status(workload(ns, job), "PodsReady") == "True"; }, 60s))
      << workload(ns, job).dump(1) << diagnose(ns);
  ASSERT_TRUE(eventually([&] { return latest_checkpoint(dir) >= 20 && last_logged_step(dir + "/loss.txt") >= 25; }, 120s))
      << diagnose(ns);
  const json before = workload(ns, job);
  const std::string pod_uids = get_json(ns, "pod/" + job + "-0")["metadata"].value("uid", "") +
                               get_json(ns, "pod/" + job + "-1")["metadata"].value("uid", "");

  auto pids = lockstep::test::worker_pids(ns, job, 1, "lockstep-trainer");
  ASSERT_EQ(pids.size(), 1u) << "pod 1's trainer process, seen from the host";
  const auto killed = Clock::now();
  const int at_step = last_logged_step(dir + "/loss.txt");
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  // While it recovers, every look at the Workload finds it admitted and ready.
  std::string lapse;
  Resume res;
  auto in_place = [&] {
    json st = get_json(ns, "trainingjob/" + job);
    return st.is_object() && st.contains("status") ? st["status"].value("inPlaceRestarts", 0) : 0;
  };
  ASSERT_TRUE(eventually([&] {
    json wl = workload(ns, job);
    if (lapse.empty() && (wl_status(wl, "Admitted") != "True" || wl_status(wl, "PodsReady") != "True" ||
                          wl_status(wl, "Evicted") == "True"))
      lapse = wl.dump(1);
    if (in_place() < 1) return false;
    res = resume_of(ns, job + "-0", killed);
    return res.first_step_at.has_value();
  }, 120s)) << diagnose(ns);
  EXPECT_EQ(lapse, "") << "the Workload was not admitted and ready throughout the restart";
  EXPECT_GE(res.step, 20) << "resumed before the newest complete checkpoint";
  const double recovery = seconds(killed, *res.first_step_at);
  std::cerr << std::fixed << std::setprecision(2) << "[cluster] kueue: in-place restart (SIGKILL of pod 1's trainer at step "
            << at_step << "): every rank stepping again " << recovery << " s after, resumed from step " << res.step
            << "; the Workload admitted throughout\n" << std::defaultfloat;
  RecordProperty("in_place_recovery_seconds", std::to_string(recovery));

  const json after = workload(ns, job);
  EXPECT_EQ(after["metadata"].value("uid", ""), before["metadata"].value("uid", "")) << "the same Workload";
  EXPECT_EQ(wl_status(after, "Admitted"), "True") << after.dump(1);
  EXPECT_NE(wl_status(after, "Evicted"), "True") << after.dump(1);
  const json* ready_before = condition(before, "PodsReady");
  const json* ready_after = condition(after, "PodsReady");
  ASSERT_TRUE(ready_before && ready_after) << after.dump(1);
  EXPECT_EQ(ready_after->value("lastTransitionTime", ""), ready_before->value("lastTransitionTime", ""))
      << "PodsReady changed during an in-place restart: " << ready_after->dump();
  EXPECT_EQ(get_json(ns, "pod/" + job + "-0")["metadata"].value("uid", "") +
                get_json(ns, "pod/" + job + "-1")["metadata"].value("uid", ""),
            pod_uids)
      << "an in-place restart keeps the pods";
  json tj = get_json(ns, "trainingjob/" + job);
  EXPECT_EQ(condition(tj, "Evicted"), nullptr) << tj["status"].dump();

  ASSERT_TRUE(wait_succeeded(ns, job, 240s));
  tj = get_json(ns, "trainingjob/" + job);
  EXPECT_EQ(tj["status"].value("restarts", -1), 0) << tj["status"].dump();
  EXPECT_EQ(tj["status"].value("inPlaceRestarts", -1), 1) << tj["status"].dump();
  EXPECT_EQ(wl_status(workload(ns, job), "Finished"), "True") << workload(ns, job).dump(1);
  std::string events;
  for (const auto& e : eviction_events(ns)) events += e + "\n";
  EXPECT_EQ(events, "") << "an eviction or a preemption in a job that only restarted in place";
  cluster_kubectl({"delete", "namespace", ns, "--wait=true"}, "", 120s);
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
