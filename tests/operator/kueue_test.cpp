// lockstep-operator with a real Kueue (v0.19.2, tests/controlplane/kueue.hpp) against a real
// kube-apiserver: a TrainingJob that names a queue is one Workload, admitted, evicted and
// finished as one (Note [One Workload per job] in operator/reconcile/kueue.hpp). There is no
// kubelet: the tests play it (pod phases) and play rank 0's agent (a /metrics page saying its
// workers started, which is what PodsReady is written from).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube/rest_config.hpp"
#include "chart_support.hpp"
#include "kube_test_support.hpp"
#include "kueue.hpp"
#include "render_compare.hpp"
#include "operator_process.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "http_server.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::kube::Client;
using lockstep::kube::RestConfig;
namespace res = lockstep::kube::resources;
using lockstep::test::control_plane;
using lockstep::test::create_namespace;
using lockstep::test::eventually;
using lockstep::test::kubectl;
using lockstep::test::source_path;

namespace {

// How long an admitted Workload may go without PodsReady before Kueue evicts it, for the
// whole suite: long enough for a test that plays its agents, short for the one that does not.
constexpr auto kPodsReadyTimeout = 20s;

// lockstep-operator with its log in a file (operator_process.hpp), gang restarts after 1 s.
class OperatorProcess : public lockstep::test::OperatorProcess {
 public:
  OperatorProcess(const std::string& kubeconfig, std::vector<std::string> extra)
      : lockstep::test::OperatorProcess(kubeconfig, extra, {"kueue-operator", true, {"--restart-backoff=1s", "--restart-backoff-max=2s"}}) {}
};

// Rank 0's agent, as the operator reads it (operator_process.hpp): its workers started for
// attempt `attempt` once started() says so.
class FakeAgent : public lockstep::test::FakeAgent {
 public:
  explicit FakeAgent(int port) : lockstep::test::FakeAgent(port) { serve("lockstep_restart_attempt 0\n"); }
  void started(int attempt) {
    serve("lockstep_restart_attempt " + std::to_string(attempt) +
          "\nlockstep_worker_up{rank=\"0\",local_rank=\"0\"} 1\nlockstep_restarts_total{kind=\"in_place\"} 0\n");
  }
};

class KueueTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!control_plane()) return;
    auto r = kubectl({"apply", "-f", source_path("crds/lockstep.dev_trainingjobs.yaml")});
    ASSERT_TRUE(r.status.success()) << r.output;
    ASSERT_TRUE(kubectl({"wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev", "--timeout=60s"})
                    .status.success());
    missing_ = lockstep::test::Kueue::missing();
    if (!missing_.empty()) return;
    lockstep::test::KueueOptions o;
    o.pods_ready_timeout = std::chrono::duration_cast<std::chrono::seconds>(kPodsReadyTimeout);
    auto t0 = std::chrono::steady_clock::now();
    kueue_ = lockstep::test::Kueue::start(control_plane()->kubeconfig(), o).release();
    std::fprintf(stderr, "[kueue] ready in %.1f s (log %s)\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), kueue_->log_path().c_str());
    client_ = new Client(RestConfig::from_kubeconfig(control_plane()->kubeconfig()));
    // The operator runs as the chart's service account with kueue.enabled, under the chart's
    // RBAC and nothing more (tests/chart/chart_test.cpp checks the rules themselves).
    const std::string kubeconfig =
        lockstep::test::chart_identity("lockstep", "lockstep-system", {{"kueue.enabled=true"}, ""}).kubeconfig;
    ASSERT_FALSE(kubeconfig.empty());
    operator_ = new OperatorProcess(kubeconfig, {"--progress-period=1s", "--agent-image=lockstep/agent:test",
                                                 "--leader-election-namespace=lockstep-system"});
    ASSERT_TRUE(operator_->wait_log("caches synced")) << operator_->log();
    ASSERT_TRUE(operator_->wait_log("Kueue Workload API (kueue.x-k8s.io/v1beta2) found")) << operator_->log();
  }
  static void TearDownTestSuite() {
    lockstep::test::delete_in_order(operator_, kueue_, client_);
  }
  void SetUp() override {
    LOCKSTEP_REQUIRE_CONTROL_PLANE();
    if (!missing_.empty()) {
      if (lockstep::test::require_all()) FAIL() << "Kueue unavailable: " << missing_;
      GTEST_SKIP() << "SKIPPED: Kueue unavailable: " << missing_;
    }
    ASSERT_NE(kueue_, nullptr);
    ns_ = create_namespace("kq");
  }
  void TearDown() override {
    if (HasFailure() && operator_) {
      std::string log = operator_->log();
      std::fprintf(stderr, "--- operator log (last 4 KB) ---\n%s\n", log.substr(log.size() > 4096 ? log.size() - 4096 : 0).c_str());
    }
    for (const auto& cq : cluster_queues_) kubectl({"delete", "clusterqueue", cq, "--wait=false"});
  }

  void apply(const std::string& yaml) {
    auto r = kubectl({"apply", "-n", ns_, "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output << "\n" << yaml;
  }

  // A ResourceFlavor (with a node label and a toleration the pods must get), a ClusterQueue of
  // `cpu` CPUs for this test's namespace only, and LocalQueue `lq` in it. `preempt`: a higher
  // priority Workload may evict a lower one within the queue.
  std::string make_queue(int cpu, bool preempt = false) {
    const std::string cq = ns_ + "-cq", flavor = ns_ + "-flavor";
    cluster_queues_.push_back(cq);
    apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: " + flavor + "}\n"
          "spec:\n  nodeLabels: {lockstep.dev/pool: " + flavor + "}\n"
          "  tolerations: [{key: lockstep.dev/reserved, operator: Exists, effect: NoSchedule}]\n"
          "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: " + cq + "}\nspec:\n"
          "  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: " + ns_ + "}}\n" +
          (preempt ? "  preemption: {withinClusterQueue: LowerPriority}\n" : "") +
          "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: " + flavor +
          "\n      resources: [{name: cpu, nominalQuota: " + std::to_string(cpu) + "}]\n"
          "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq}\nspec: {clusterQueue: " + cq + "}\n");
    return flavor;
  }

  // A TrainingJob of `nodes` pods of 1 CPU each, queued in `queue` by its label, its agents'
  // metrics on a port of its own (rank 0's is read on 127.0.0.1: FakeAgent).
  int create_job(const std::string& name, int nodes, const std::string& queue = "lq",
                 const std::string& extra_labels = "", const std::string& spec_extra = "") {
    int port = lockstep::free_loopback_port();
    std::string labels = queue.empty() ? extra_labels : "kueue.x-k8s.io/queue-name: " + queue +
                                                            (extra_labels.empty() ? "" : ", " + extra_labels);
    apply("apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: " + name + "\n  labels: {" + labels +
          "}\nspec:\n  nodes: " + std::to_string(nodes) + "\n  masterPort: " + std::to_string(20000 + port % 10000) +
          "\n  metrics: {port: " + std::to_string(port) + "}\n  template:\n    spec:\n      containers:\n"
          "      - {name: trainer, image: lockstep/trainer:test, resources: {requests: {cpu: \"1\"}}}\n" + spec_extra);
    return port;
  }

  json get(const std::string& path) {
    auto r = client_->get(path);
    return r.ok() ? r.body : json();
  }
  // The job, with an empty status until the operator's first write, so tests can read its fields.
  json job(const std::string& name) {
    json j = get(res::kTrainingJobs.path(ns_, name));
    if (j.is_object() && (!j.contains("status") || !j["status"].is_object())) j["status"] = json::object();
    return j;
  }
  std::string phase(const std::string& name) {
    json j = job(name);
    return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
  }
  // The job's condition `type`; an empty object while there is none (before the operator's first
  // status write too), so that .value() reads "" rather than throwing.
  json condition(const std::string& name, const std::string& type) {
    json j = job(name);
    if (j.is_object() && j.contains("status") && j["status"].is_object())
      for (const auto& c : j["status"].value("conditions", json::array()))
        if (c.value("type", "") == type) return c;
    return json::object();
  }
  std::vector<json> pods(const std::string& job_name, bool with_deleting = false) {
    std::string sel = std::string(lockstep::contract::kLabelJobName) + "=" + job_name;
    auto r = client_->get(res::kPods.path(ns_) + "?labelSelector=" + lockstep::kube::url_encode(sel));
    std::vector<json> out;
    if (r.ok())
      for (auto& p : r.body["items"])
        if (with_deleting || !p["metadata"].contains("deletionTimestamp")) out.push_back(p);
    return out;
  }
  json workload(const std::string& job_name) {
    std::string sel = std::string(lockstep::contract::kLabelJobName) + "=" + job_name;
    auto r = client_->get(res::kWorkloads.path(ns_) + "?labelSelector=" + lockstep::kube::url_encode(sel));
    if (!r.ok() || r.body["items"].empty()) return json();
    return r.body["items"][0];
  }
  // Whether the Workload has condition `type` with `status` (and `reason`, when given).
  static bool wl_condition(const json& wl, const std::string& type, const std::string& status = "True",
                           const std::string& reason = "") {
    if (!wl.is_object() || !wl.contains("status") || !wl["status"].is_object()) return false;
    for (const auto& c : wl["status"].value("conditions", json::array()))
      if (c.value("type", "") == type && c.value("status", "") == status && (reason.empty() || c.value("reason", "") == reason))
        return true;
    return false;
  }
  int admitted_workloads() {
    json cq = get(lockstep::kube::Resource{"kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", false}.path("", ns_ + "-cq"));
    return cq.is_object() && cq.contains("status") ? cq["status"].value("admittedWorkloads", 0) : -1;
  }

  // The kubelet's part: every pod of the job Running and ready, rank 0 at 127.0.0.1.
  void run_gang(const std::string& job_name) {
    for (const auto& p : pods(job_name)) {
      const std::string name = p["metadata"]["name"];
      json status = {{"phase", "Running"}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
      if (name == job_name + "-0") status["podIP"] = "127.0.0.1";
      auto r = client_->patch(res::kPods.path(ns_, name, "status"), {{"status", status}});
      ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    }
  }
  void finish_gang(const std::string& job_name, const std::string& phase = "Succeeded", int exit_code = 0) {
    for (const auto& p : pods(job_name)) {
      const std::string name = p["metadata"]["name"];
      json term = {{"exitCode", exit_code}, {"finishedAt", "2026-11-29T00:00:00Z"}};
      json status = {{"phase", phase},
                     {"containerStatuses", json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0},
                                                          {"image", "lockstep/trainer:test"}, {"imageID", ""},
                                                          {"state", {{"terminated", term}}}}})}};
      auto r = client_->patch(res::kPods.path(ns_, name, "status"), {{"status", status}});
      ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    }
  }

  inline static Client* client_ = nullptr;
  inline static OperatorProcess* operator_ = nullptr;
  inline static lockstep::test::Kueue* kueue_ = nullptr;
  inline static std::string missing_;
  std::string ns_;
  std::vector<std::string> cluster_queues_;
};

// Watches the job's pods for the whole test: the most pods of each job ever present at once,
// and whether a pod of a job ever existed while its Workload was not admitted.
class GangWatch {
 public:
  GangWatch(Client& client, const std::string& ns) {
    std::string path = res::kPods.path(ns) + "?labelSelector=" + lockstep::kube::url_encode(lockstep::contract::kLabelJobName);
    std::string rv = client.get(path).body["metadata"].value("resourceVersion", "");
    thread_ = std::thread([this, &client, path, rv] {
      client.watch(path, rv, 300, [this](const std::string& type, json& obj) {
        if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") return;
        std::lock_guard<std::mutex> lock(mu_);
        const std::string job = obj["metadata"]["labels"].value(lockstep::contract::kLabelJobName, "");
        const std::string name = obj["metadata"].value("name", "");
        // A finished pod holds no resources (cleanPodPolicy Running keeps it): not counted.
        const std::string phase = obj.value("status", json::object()).value("phase", "");
        if (type == "DELETED" || phase == "Succeeded" || phase == "Failed") live_[job].erase(name);
        else live_[job].insert(name);
        int cpus = 0;
        for (auto& [j, names] : live_) cpus += static_cast<int>(names.size());
        max_cpus_ = std::max(max_cpus_, cpus);
        if (type == "ADDED") {
          labels_.push_back(obj["metadata"].value("labels", json::object()));
          selectors_.push_back(obj["spec"].value("nodeSelector", json::object()));
        }
      }, cancel_);
    });
  }
  ~GangWatch() {
    cancel_.cancel();
    thread_.join();
  }
  int max_pods_at_once() {  // of pods not finished
    std::lock_guard<std::mutex> lock(mu_);
    return max_cpus_;
  }
  std::vector<json> labels() {
    std::lock_guard<std::mutex> lock(mu_);
    return labels_;
  }
  std::vector<json> node_selectors() {
    std::lock_guard<std::mutex> lock(mu_);
    return selectors_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::set<std::string>> live_;
  int max_cpus_ = 0;
  std::vector<json> labels_, selectors_;
  lockstep::kube::Cancellation cancel_;
  std::thread thread_;
};


}  // namespace

// The quota holds 4 one-CPU pods; gangs of 3, 2 and 2 are queued in that order. The first runs;
// the other two wait whole, the job's condition quoting Kueue's reason; when the first finishes
// both start. No pod ever carries the queue label, every pod gets the flavor's node label and
// toleration, and never are more pods there than the quota holds. The ClusterQueue covers only
// CPU: the agent's init container asks for nothing else (Note [Agent init container resources]).
TEST_F(KueueTest, GangsAreAdmittedWholeAndInOrderWithinTheQuota) {
  const std::string flavor = make_queue(4);
  GangWatch watch(*client_, ns_);
  // In order: Kueue orders pending Workloads by creation time, which has a resolution of one
  // second, so "a" is admitted before the others are made.
  int port_a = create_job("a", 3);
  FakeAgent agent_a(port_a);
  ASSERT_TRUE(eventually([&] { return pods("a").size() == 3; }, 30s)) << job("a").dump(2) << workload("a").dump(2);
  create_job("b", 2);
  create_job("c", 2);
  ASSERT_TRUE(eventually([&] {
    json q = condition("c", "Queued");
    return phase("c") == "Queued" && q.value("message", "").find("insufficient") != std::string::npos;
  }, 30s)) << job("c").dump(2);
  EXPECT_EQ(phase("b"), "Queued");
  EXPECT_TRUE(pods("b").empty());
  EXPECT_TRUE(pods("c").empty());
  EXPECT_EQ(job("c")["status"].value("queue", ""), "lq");
  const std::string said = condition("c", "Queued").value("message", "");
  EXPECT_NE(said.find("couldn't assign flavors to pod set node"), std::string::npos) << said;
  // `kubectl get tj` shows it: phase Queued and the queue.
  auto table = kubectl({"get", "tj", "-n", ns_, "c"});
  EXPECT_NE(table.output.find("Queued"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("lq"), std::string::npos) << table.output;

  // The Workload: one pod set of 3, the pods' own template, no secret.
  json wl = workload("a");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 1u);
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 3);
  EXPECT_EQ(wl.dump().find(lockstep::contract::kBarrierSecret), std::string::npos);
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["kind"], "TrainingJob");

  run_gang("a");
  agent_a.started(0);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("a"), "PodsReady"); }, 20s)) << workload("a").dump(2);
  finish_gang("a");
  ASSERT_TRUE(eventually([&] { return phase("a") == "Succeeded"; }, 20s)) << job("a").dump(2);
  ASSERT_TRUE(eventually([&] {
    json w = workload("a");
    return wl_condition(w, "Finished") && !w["metadata"].contains("finalizers");
  }, 20s)) << workload("a").dump(2);
  // Both waiting gangs fit now.
  ASSERT_TRUE(eventually([&] { return pods("b").size() == 2 && pods("c").size() == 2; }, 30s))
      << job("b").dump(2) << job("c").dump(2);
  EXPECT_EQ(condition("b", "Queued").value("status", ""), "False");
  EXPECT_EQ(condition("b", "Queued").value("reason", ""), "Admitted");

  EXPECT_LE(watch.max_pods_at_once(), 4) << "more pods than the quota holds";
  for (const auto& l : watch.labels()) EXPECT_FALSE(l.contains("kueue.x-k8s.io/queue-name")) << l;
  ASSERT_EQ(watch.node_selectors().size(), 7u);
  for (const auto& s : watch.node_selectors()) EXPECT_EQ(s.value("lockstep.dev/pool", ""), flavor) << s;
  json pod = pods("b").at(0);
  bool tolerated = false;
  for (const auto& t : pod["spec"].value("tolerations", json::array()))
    tolerated |= t.value("key", "") == "lockstep.dev/reserved";
  EXPECT_TRUE(tolerated) << pod["spec"].dump();
}

// A job whose gang never comes together (no agent ever starts its workers) is evicted by Kueue
// at the PodsReady timeout; the gang is stopped and the quota given back, so it holds none while
// it waits; Kueue then puts it back in the queue and it is admitted again. No restart counts.
TEST_F(KueueTest, AGangThatNeverComesTogetherIsEvictedAtThePodsReadyTimeoutAndRequeued) {
  make_queue(4);
  lockstep::test::History versions(*client_, res::kWorkloads.path(ns_));  // every version of the namespace's Workloads
  create_job("stuck", 2);
  ASSERT_TRUE(eventually([&] { return pods("stuck").size() == 2; }, 30s));
  run_gang("stuck");  // containers run and are ready, but no agent says its workers started
  ASSERT_TRUE(eventually([&] {
    return condition("stuck", "Evicted").value("reason", "") == "PodsReadyTimeout";
  }, kPodsReadyTimeout + 30s)) << job("stuck").dump(2);
  // Given back: a version of the Workload evicted, with no admission (Kueue's backoff here is
  // 1 s, so it may well be admitted again by the time the test looks).
  bool held_nothing = eventually([&] {
    for (const auto& w : versions.versions())
      if (wl_condition(w, "Evicted") && !w["status"].contains("admission") &&
          wl_condition(w, "QuotaReserved", "False"))
        return true;
    return false;
  }, 20s);
  EXPECT_TRUE(held_nothing) << workload("stuck").dump(2);
  EXPECT_EQ(job("stuck")["status"].value("restarts", -1), 0) << "an eviction is no failure";
  // Requeued after Kueue's backoff (1 s in this suite), admitted again: new pods.
  ASSERT_TRUE(eventually([&] { return pods("stuck").size() == 2 && condition("stuck", "Evicted").value("status", "") == "False"; },
                         60s))
      << job("stuck").dump(2) << workload("stuck").dump(2);
  auto events = kubectl({"get", "events", "-n", ns_, "--field-selector", "reason=Evicted", "-o", "name"});
  EXPECT_NE(events.output.find("stuck"), std::string::npos) << events.output;
}

// Priority and preemption: a low-priority gang runs on the whole quota; a high-priority one
// arrives. Kueue preempts the low one, whose gang the operator stops; once it is gone and the
// quota given back the high one runs; when that finishes the low one is admitted again, with
// no restart counted.
TEST_F(KueueTest, AHigherPriorityJobPreemptsALowerOneWhichComesBackWithoutARestart) {
  make_queue(4, /*preempt=*/true);
  apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: " + ns_ + "-low}\nvalue: 100\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: " + ns_ + "-high}\nvalue: 1000\n");
  int low_port = create_job("low", 4, "lq", "kueue.x-k8s.io/priority-class: " + ns_ + "-low");
  FakeAgent low_agent(low_port);
  ASSERT_TRUE(eventually([&] { return pods("low").size() == 4; }, 30s)) << job("low").dump(2);
  run_gang("low");
  low_agent.started(0);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("low"), "PodsReady"); }, 20s));
  EXPECT_EQ(workload("low")["spec"].value("priority", 0), 100);

  auto t0 = std::chrono::steady_clock::now();
  int high_port = create_job("high", 4, "lq", "kueue.x-k8s.io/priority-class: " + ns_ + "-high");
  FakeAgent high_agent(high_port);
  ASSERT_TRUE(eventually([&] { return pods("high").size() == 4; }, 60s)) << job("low").dump(2) << job("high").dump(2);
  std::fprintf(stderr, "[kueue] high-priority job created to its 4 pods: %.1f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_TRUE(pods("low", /*with_deleting=*/true).empty()) << "the low gang was gone before the high one's pods came";
  json e = condition("low", "Evicted");
  EXPECT_EQ(e.value("reason", ""), "Preempted") << job("low").dump(2);
  EXPECT_EQ(phase("low"), "Queued");
  EXPECT_EQ(job("low")["status"].value("restarts", -1), 0);

  run_gang("high");
  high_agent.started(0);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("high"), "PodsReady"); }, 20s));
  finish_gang("high");
  ASSERT_TRUE(eventually([&] { return phase("high") == "Succeeded"; }, 20s));
  ASSERT_TRUE(eventually([&] { return pods("low").size() == 4; }, 30s)) << job("low").dump(2) << workload("low").dump(2);
  EXPECT_EQ(job("low")["status"].value("restarts", -1), 0);
  EXPECT_EQ(condition("low", "Evicted").value("status", ""), "False");
}

// A gang restart (a rank failed) keeps the admission: PodsReady goes WaitForRecovery and back to
// True (Recovered) when the new gang is together; Kueue evicts nothing.
TEST_F(KueueTest, AGangRestartKeepsTheAdmissionAndRecovers) {
  make_queue(4);
  int port = create_job("r", 2);
  FakeAgent agent(port);
  ASSERT_TRUE(eventually([&] { return pods("r").size() == 2; }, 30s));
  const std::string wl_uid = workload("r")["metadata"].value("uid", "");
  run_gang("r");
  agent.started(0);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("r"), "PodsReady"); }, 20s));
  // Rank 1 fails: the gang restarts as attempt 1.
  json term = {{"exitCode", 1}, {"finishedAt", "2026-11-29T00:00:00Z"}};
  auto r = client_->patch(res::kPods.path(ns_, "r-1", "status"),
                          {{"status", {{"phase", "Failed"},
                                       {"containerStatuses", json::array({{{"name", "trainer"}, {"ready", false},
                                                                           {"restartCount", 0}, {"image", "i"}, {"imageID", ""},
                                                                           {"state", {{"terminated", term}}}}})}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("r"), "PodsReady", "False", "WaitForRecovery"); }, 20s))
      << workload("r").dump(2);
  ASSERT_TRUE(eventually([&] {
    auto ps = pods("r");
    return ps.size() == 2 && ps[0]["metadata"]["labels"].value(lockstep::contract::kLabelRestartAttempt, "") == "1";
  }, 30s)) << job("r").dump(2);
  run_gang("r");
  agent.started(1);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("r"), "PodsReady", "True", "Recovered"); }, 20s))
      << workload("r").dump(2);
  json w = workload("r");
  EXPECT_EQ(w["metadata"].value("uid", ""), wl_uid) << "the same Workload";
  EXPECT_FALSE(wl_condition(w, "Evicted"));
  EXPECT_EQ(job("r")["status"].value("restarts", -1), 1);
}

// A lost node (the node watch, Note [Lost nodes]) restarts the gang at once under the same
// admission: the Workload stays admitted and is never evicted; PodsReady waits for the new gang.
TEST_F(KueueTest, ALostNodeRestartsTheGangUnderTheSameAdmission) {
  make_queue(4);
  std::vector<std::string> nodes;
  for (const char* suffix : {"a", "b"}) {
    std::string name = ns_ + "-" + suffix;
    auto r = client_->create(res::kNodes.path(), {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}});
    ASSERT_TRUE(r.ok()) << r.message();
    std::string now = "2026-11-29T00:00:00Z";
    json ready = {{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}, {"message", "ok"},
                  {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
    ASSERT_TRUE(client_->patch(res::kNodes.path("", name, "status"), {{"status", {{"conditions", json::array({ready})}}}}).ok());
    nodes.push_back(name);
  }
  int port = create_job("ln", 2);
  FakeAgent agent(port);
  ASSERT_TRUE(eventually([&] { return pods("ln").size() == 2; }, 30s));
  for (int i = 0; i < 2; ++i) {
    json binding = {{"apiVersion", "v1"}, {"kind", "Binding"}, {"metadata", {{"name", "ln-" + std::to_string(i)}}},
                    {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", nodes[i]}}}};
    ASSERT_TRUE(client_->create(res::kPods.path(ns_, "ln-" + std::to_string(i), "binding"), binding).ok());
  }
  run_gang("ln");
  agent.started(0);
  ASSERT_TRUE(eventually([&] { return wl_condition(workload("ln"), "PodsReady"); }, 20s)) << workload("ln").dump(2);
  const std::string wl_uid = workload("ln")["metadata"].value("uid", "");
  lockstep::test::History versions(*client_, res::kWorkloads.path(ns_));  // every version of the namespace's Workloads
  ASSERT_TRUE(client_->remove(res::kNodes.path("", nodes[1])).ok());
  // The pod on the healthy node is deleted gracefully; no kubelet confirms it here: the test does.
  ASSERT_TRUE(eventually([&] {
    auto r = client_->get(res::kPods.path(ns_, "ln-0"));
    return !r.ok() || r.body["metadata"].contains("deletionTimestamp");
  }, 20s)) << job("ln").dump(2);
  client_->remove(res::kPods.path(ns_, "ln-0"), {{"gracePeriodSeconds", 0}});
  ASSERT_TRUE(eventually([&] {
    auto ps = pods("ln");
    return ps.size() == 2 && ps[0]["metadata"]["labels"].value(lockstep::contract::kLabelRestartAttempt, "") == "1";
  }, 30s)) << job("ln").dump(2);
  EXPECT_EQ(condition("ln", "Restarted").value("reason", ""), "NodeLost") << job("ln").dump(2);
  json w = workload("ln");
  EXPECT_EQ(w["metadata"].value("uid", ""), wl_uid);
  EXPECT_TRUE(wl_condition(w, "Admitted"));
  for (const auto& v : versions.versions()) {
    EXPECT_FALSE(wl_condition(v, "Evicted")) << v["status"].dump();
    EXPECT_TRUE(v["status"].contains("admission")) << "the admission was never given back: " << v["status"].dump();
  }
  client_->remove(res::kNodes.path("", nodes[0]));
}

// Suspend is the Workload inactive: Kueue evicts it, the pods go and the quota is given back;
// resumed, it is admitted again.
TEST_F(KueueTest, SuspendGivesTheQuotaBackAndResumeQueuesAgain) {
  make_queue(4);
  int port = create_job("s", 2);
  FakeAgent agent(port);
  ASSERT_TRUE(eventually([&] { return pods("s").size() == 2; }, 30s));
  run_gang("s");
  agent.started(0);
  auto r = client_->patch(res::kTrainingJobs.path(ns_, "s"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] {
    json w = workload("s");
    return phase("s") == "Suspended" && pods("s", true).empty() && w.is_object() && w["spec"].value("active", true) == false &&
           !w["status"].contains("admission");
  }, 30s)) << job("s").dump(2) << workload("s").dump(2);
  EXPECT_TRUE(eventually([&] { return admitted_workloads() == 0; }, 10s));
  r = client_->patch(res::kTrainingJobs.path(ns_, "s"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] { return pods("s").size() == 2 && workload("s")["spec"].value("active", false); }, 30s))
      << job("s").dump(2) << workload("s").dump(2);
}

// Deleting a running job frees its quota: the Workload goes once the pods have, its finalizer
// removed by the operator. Deleting a queued job leaves nothing behind either.
TEST_F(KueueTest, DeletingAJobReleasesItsWorkloadAndQuota) {
  make_queue(2);
  int port = create_job("d", 2);
  FakeAgent agent(port);
  create_job("waiting", 2);
  ASSERT_TRUE(eventually([&] { return pods("d").size() == 2 && phase("waiting") == "Queued"; }, 30s));
  ASSERT_TRUE(eventually([&] { return workload("waiting").is_object(); }, 10s));
  ASSERT_TRUE(kubectl({"delete", "tj", "-n", ns_, "waiting", "--wait=false"}).status.success());
  ASSERT_TRUE(eventually([&] { return !workload("waiting").is_object(); }, 30s)) << workload("waiting").dump(2);
  ASSERT_TRUE(kubectl({"delete", "tj", "-n", ns_, "d", "--wait=false"}).status.success());
  ASSERT_TRUE(eventually([&] { return !workload("d").is_object() && pods("d", true).empty(); }, 60s))
      << workload("d").dump(2);
  EXPECT_TRUE(eventually([&] { return admitted_workloads() == 0; }, 10s));
}

// A queue label naming no LocalQueue: the job waits, and says what Kueue says.
TEST_F(KueueTest, AQueueThatDoesNotExistIsKueuesReasonInTheCondition) {
  make_queue(2);
  create_job("nowhere", 1, "no-such-queue");
  ASSERT_TRUE(eventually([&] {
    json q = condition("nowhere", "Queued");
    return q.value("message", "").find("no-such-queue") != std::string::npos &&
           q.value("message", "").find("doesn't exist") != std::string::npos;
  }, 30s)) << job("nowhere").dump(2) << workload("nowhere").dump(2);
  EXPECT_TRUE(pods("nowhere").empty());
}

// The label and spec.scheduling.queue disagree: the job waits and says which fields.
TEST_F(KueueTest, TwoDifferentQueuesNamedIsAClearError) {
  make_queue(2);
  create_job("torn", 1, "lq", "", "  scheduling: {queue: other}\n");
  ASSERT_TRUE(eventually([&] { return condition("torn", "Queued").value("reason", "") == "QueueConflict"; }, 20s))
      << job("torn").dump(2);
  EXPECT_NE(condition("torn", "Queued").value("message", "").find("spec.scheduling.queue=other"), std::string::npos);
  EXPECT_FALSE(workload("torn").is_object());
  EXPECT_TRUE(pods("torn").empty());
}

// `lockstep render` of a queued job (#44), with the operator's --agent-image: the Workload the
// operator created, the Service, and the pods Kueue admitted, equal but for what the server and
// the admission add (the flavor's nodeSelector and toleration, which render says it cannot know).
TEST_F(KueueTest, RenderPrintsTheWorkloadAndThePodsTheOperatorCreated) {
  const std::string flavor = make_queue(4);
  int port = create_job("shown", 2);
  FakeAgent agent(port);
  ASSERT_TRUE(eventually([&] { return pods("shown").size() == 2; }, 30s)) << workload("shown").dump(2);
  auto got = kubectl({"get", "trainingjob", "shown", "-n", ns_, "-o", "json"});
  ASSERT_TRUE(got.status.success()) << got.output;
  std::string said;
  auto docs = lockstep::test::render::rendered(got.output, {"--agent-image=lockstep/agent:test"}, said);
  const json wl = workload("shown");
  ASSERT_TRUE(wl.is_object());
  const std::vector<std::string> want = {"Workload/" + wl["metadata"].value("name", ""), "Service/shown", "PodGroup/shown",
                                         "Pod/shown-0", "Pod/shown-1"};
  ASSERT_EQ(lockstep::test::render_kinds(docs), want) << said;
  EXPECT_NE(said.find("created once the Workload is admitted"), std::string::npos) << said;
  // Kueue's admission: the flavor's node label and toleration (make_queue), on the pods.
  auto admission = [&](const std::string& path, const json& v) {
    if (path == "spec.nodeSelector") return v == json{{"lockstep.dev/pool", flavor}};
    if (path == "spec.tolerations" || path.rfind("spec.tolerations[", 0) == 0) {
      for (const auto& t : v.is_array() ? v : json::array({v}))
        if (t.value("key", "") != "lockstep.dev/reserved" && !lockstep::test::render::default_tolerations(json::array({t})))
          return false;
      return true;
    }
    return false;
  };
  for (auto& rendered : docs) {
    const std::string kind = rendered["kind"], name = rendered["metadata"]["name"];
    SCOPED_TRACE(kind + "/" + name);
    if (kind == "PodGroup") continue;  // this control plane has no coscheduling CRD (render says so)
    const std::string path = kind == "Workload" ? res::kWorkloads.path(ns_, name)
                             : kind == "Service" ? res::kServices.path(ns_, name)
                                                 : res::kPods.path(ns_, name);
    auto live = client_->get(path);
    ASSERT_TRUE(live.ok()) << live.message();
    if (kind == "Pod") {
      EXPECT_TRUE(lockstep::test::render::take_secret(rendered, live.body)) << "no placeholder secret";
    }
    EXPECT_EQ(lockstep::test::render::differences(rendered, live.body, admission), "") << "rendered against the server's";
  }
}

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
