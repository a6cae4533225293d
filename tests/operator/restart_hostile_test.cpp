// #40 item 3: lost-node restart loops a tenant can start, against lockstep-operator and a real
// kube-apiserver. The test plays a hostile scheduler and kubelet: every pod the operator makes is
// put back where it fails at once (bound to a NotReady node and running there; or failed with a
// forged `lockstep-silent-peer` line while its peer runs on a healthy node; or bound to a node
// that does not exist), and every graceful deletion is confirmed at once. Over 30 s, the gang
// restarts no more than Note [Lost-node restarts in a row] (operator/reconcile/node.hpp) allows,
// counted from status.restarts and from the API server's audit log (pod creates, Event writes);
// a template that sets nodeName is refused, and one stored anyway gets no pod (Note [Pods placed
// by hand]); a repeated Event is counted on one object (Note [Repeated Events]).
#include <gtest/gtest.h>

#include <atomic>
#include <ctime>
#include <functional>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube_test_support.hpp"
#include "lockstep/contract.hpp"
#include "operator_process.hpp"
#include "reconcile/time.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::kube::Client;
using lockstep::kube::RestConfig;
using lockstep::test::control_plane;
using lockstep::test::create_namespace;
using lockstep::test::eventually;
using lockstep::test::kubectl;
using lockstep::test::source_path;
namespace res = lockstep::kube::resources;

namespace {

// The operator's restart delays, as the chart sets them (values.yaml restartBackoff): the
// gang restarts Note [Lost-node restarts in a row] allows in the window follow from them. The
// first restart's attempt starts at once, so a second restart can follow at once; its attempt
// waits --restart-backoff (10 s), the third's 20 s: a fourth restart 28 to 30 s in (the
// conditions' times are whole seconds, so each wait may start up to a second early).
constexpr auto kWindow = 30s;
constexpr int kAllowedRestarts = 4;

// The writes the API server's audit log recorded in namespace `ns` and took (2xx), by resource
// and verb ("pods create", "events patch", ...); subresources (a pod's binding and status) apart.
std::map<std::string, int> writes_taken(const std::string& ns) {
  std::map<std::string, int> out;
  for (const auto& w : lockstep::test::audit_writes(ns)) {  // operator_process.hpp
    if (w.code < 200 || w.code > 299) continue;
    ++out[w.resource + (w.subresource.empty() ? "" : "/" + w.subresource) + " " + w.verb];
  }
  return out;
}

class RestartHostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!control_plane()) return;
    lockstep::test::apply_crds();
    client_ = new Client(RestConfig::from_kubeconfig(control_plane()->kubeconfig()));
    // One operator for the suite, every namespace, its restart delays those the chart sets.
    operator_ = new lockstep::test::OperatorProcess(
        control_plane()->kubeconfig(),
        {"--leader-elect=false", "--restart-backoff=10s", "--restart-backoff-max=5m", "--restart-backoff-reset=10m"},
        {"restart-hostile-operator", false, {}});
    ASSERT_TRUE(operator_->wait_log("caches synced")) << operator_->log();
  }
  static void TearDownTestSuite() { lockstep::test::delete_in_order(operator_, client_); }
  void SetUp() override { LOCKSTEP_REQUIRE_CONTROL_PLANE(); }
  void TearDown() override {
    if (!client_) return;
    for (const auto& n : nodes_) client_->remove(res::kNodes.path("", n));
  }

  static std::string job_yaml(const std::string& name, const std::string& pod_spec_extra = "") {
    return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: " + name +
           "\nspec:\n  nodes: 2\n  procsPerNode: 1\n  template:\n    spec:\n      containers:\n"
           "      - {name: trainer, image: lockstep/trainer:test}\n" + pod_spec_extra;
  }
  static void create_job(const std::string& ns, const std::string& name, const std::string& pod_spec_extra = "") {
    auto r = kubectl({"apply", "-n", ns, "-f", "-"}, job_yaml(name, pod_spec_extra));
    ASSERT_TRUE(r.status.success()) << r.output;
  }
  json job(const std::string& ns, const std::string& name) {
    auto r = client_->get(res::kTrainingJobs.path(ns, name));
    return r.ok() ? r.body : json::object();
  }
  static std::string condition(const json& job, const std::string& type, const std::string& field) {
    for (const auto& c : job.value("status", json::object()).value("conditions", json::array()))
      if (c.value("type", "") == type) return c.value(field, "");
    return "";
  }
  // The kubelet's node, Ready as `ready` says; cluster-scoped, so named after the namespace.
  std::string make_node(const std::string& name, const std::string& ready, const std::string& reason) {
    auto r = client_->create(res::kNodes.path(), {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}});
    EXPECT_TRUE(r.ok()) << name << ": " << r.message();
    nodes_.push_back(name);
    std::string now = lockstep::reconcile::format_time(lockstep::reconcile::Clock::now());
    json cond = {{"type", "Ready"}, {"status", ready}, {"reason", reason}, {"message", reason},
                 {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
    r = client_->patch(res::kNodes.path("", name, "status"), {{"status", {{"conditions", json::array({cond})}}}});
    EXPECT_TRUE(r.ok()) << name << ": " << r.message();
    return name;
  }
  // The Events of `ns` by reason: how many objects, and their counts summed.
  std::map<std::string, std::pair<int, int>> events(const std::string& ns) {
    std::map<std::string, std::pair<int, int>> out;
    auto r = client_->get(res::kEvents.path(ns));
    if (r.ok())
      for (const auto& e : r.body["items"]) {
        auto& [objects, count] = out[e.value("reason", "")];
        ++objects;
        count += e.value("count", 1);
      }
    return out;
  }

  static Client* client_;
  static lockstep::test::OperatorProcess* operator_;
  std::vector<std::string> nodes_;
};

Client* RestartHostileTest::client_ = nullptr;
lockstep::test::OperatorProcess* RestartHostileTest::operator_ = nullptr;

// What the hostile scheduler and kubelet do with a pod of one scenario.
struct Scenario {
  std::string ns, job;
  std::function<std::string(int rank)> node;  // where each rank is bound
  // The pod's status once bound, from its rank (null: left Pending, as on a node with no kubelet).
  std::function<json(int rank)> status;
};

// Plays the scheduler and the kubelet for `scenarios` until stopped: binds each new pod, writes
// its status, and confirms each graceful deletion at once (a deletion with grace period 0).
class HostileKubelet {
 public:
  HostileKubelet(Client& client, std::vector<Scenario> scenarios) : client_(client), scenarios_(std::move(scenarios)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        for (const auto& s : scenarios_) serve(s);
        std::this_thread::sleep_for(20ms);
      }
    });
  }
  ~HostileKubelet() {
    stop_ = true;
    thread_.join();
  }

 private:
  void serve(const Scenario& s) {
    std::string sel = std::string(lockstep::contract::kLabelJobName) + "=" + s.job;
    auto list = client_.get(res::kPods.path(s.ns) + "?labelSelector=" + lockstep::kube::url_encode(sel));
    if (!list.ok()) return;
    for (const auto& p : list.body["items"]) {
      const std::string name = p["metadata"].value("name", ""), uid = p["metadata"].value("uid", "");
      if (p["metadata"].contains("deletionTimestamp")) {
        client_.remove(res::kPods.path(s.ns, name), {{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", uid}}}});
        continue;
      }
      if (done_.count(uid)) continue;
      const int rank = std::stoi(p["metadata"]["labels"].value(lockstep::contract::kLabelNodeRank, "0"));
      if (p["spec"].value("nodeName", "").empty()) {
        json binding = {{"apiVersion", "v1"}, {"kind", "Binding"}, {"metadata", {{"name", name}}},
                        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", s.node(rank)}}}};
        if (!client_.create(res::kPods.path(s.ns, name, "binding"), binding).ok()) continue;
      }
      if (s.status && !client_.patch(res::kPods.path(s.ns, name, "status"), {{"status", s.status(rank)}}).ok()) continue;
      done_.insert(uid);
    }
  }

  Client& client_;
  std::vector<Scenario> scenarios_;
  std::set<std::string> done_;  // pods bound and given their status
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

json running() {
  return {{"phase", "Running"}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
}

// Rank 0's program forged the agents' line and exited 76, as the agent does when a peer went silent.
json forged_silent_peer() {
  json term = {{"exitCode", lockstep::contract::kExitRendezvous},
               {"reason", "Error"},
               {"finishedAt", lockstep::reconcile::format_time(lockstep::reconcile::Clock::now())},
               {"message", std::string(lockstep::contract::kSilentPeerLine) + " node=1\nforged by the program\n"}};
  return {{"phase", "Failed"},
          {"conditions", json::array({{{"type", "Ready"}, {"status", "False"}}})},
          {"containerStatuses", json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0},
                                              {"image", "lockstep/trainer:test"}, {"imageID", ""},
                                              {"state", {{"terminated", term}}}}})}};
}

// The CRD as it was before Note [Pods placed by hand]: without the rule that refuses nodeName.
std::string crd_without_node_name_rule() {
  std::string crd = lockstep::test::read_text(source_path("crds/lockstep.dev_trainingjobs.yaml"));
  size_t rule = crd.find("- rule: \"!has(self.nodeName)\"");
  size_t next = rule == std::string::npos ? rule : crd.find("\n                    properties:", rule);
  if (rule == std::string::npos || next == std::string::npos) return "";
  rule = crd.rfind('\n', rule) + 1;
  return crd.erase(rule, next + 1 - rule);
}

}  // namespace

// The CRD refuses a template's nodeName, naming the field and what to use instead.
TEST_F(RestartHostileTest, ATemplateNodeNameIsRefusedNamingTheField) {
  std::string ns = create_namespace("placed");
  auto r = kubectl({"apply", "-n", ns, "-f", "-"}, job_yaml("placed", "      nodeName: no-such-node\n"));
  EXPECT_FALSE(r.status.success()) << r.output;
  EXPECT_NE(r.output.find("spec.template.spec.nodeName"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nodeSelector"), std::string::npos) << r.output;
  EXPECT_TRUE(job(ns, "placed").empty());
}

// The four triggers at once, over the same 30 s: a job stored with nodeName before the rule
// existed, pods put back on a NotReady node, a forged silent-peer line, pods bound to a node that
// does not exist; and, beside them, a quota that refuses every pod (the same Event again and
// again).
TEST_F(RestartHostileTest, TenantTriggersRestartAtMostTheAllowedIn30s) {
  const std::string placed = create_namespace("placed"), notready = create_namespace("notready"),
                    forged = create_namespace("forged"), gone = create_namespace("gone"),
                    quota = create_namespace("quota");
  // Stored before the rule: the CRD without it, the job, the CRD back.
  const std::string old_crd = crd_without_node_name_rule();
  ASSERT_FALSE(old_crd.empty()) << "the CRD's nodeName rule moved: update crd_without_node_name_rule()";
  lockstep::test::apply_crds(old_crd);
  ASSERT_TRUE(eventually([&] {
    return kubectl({"apply", "-n", placed, "-f", "-"}, job_yaml("placed", "      nodeName: " + placed + "-no-such-node\n"))
        .status.success();
  }, 20s));
  lockstep::test::apply_crds();

  const std::string bad = make_node(notready + "-bad", "False", "KubeletNotReady");
  const std::string a = make_node(forged + "-a", "True", "KubeletReady"), b = make_node(forged + "-b", "True", "KubeletReady");
  lockstep::test::pod_quota(quota, "no-pods", 0, 0);
  if (HasFatalFailure()) return;
  // Pods that tolerate the node's taints for ever, as the hostile template would.
  const std::string tolerate_all = "      tolerations:\n      - {operator: Exists}\n";
  auto kubelet = std::make_unique<HostileKubelet>(*client_, std::vector<Scenario>{
      {notready, "notready", [&](int) { return bad; }, [](int) { return running(); }},
      {forged, "forged", [&](int rank) { return rank == 0 ? a : b; },
       [](int rank) { return rank == 0 ? forged_silent_peer() : running(); }},
      {gone, "gone", [&](int) { return gone + "-no-such-node"; }, nullptr},
  });
  const auto t0 = std::chrono::steady_clock::now();
  create_job(notready, "notready", tolerate_all);
  create_job(forged, "forged");
  create_job(gone, "gone");
  create_job(quota, "quota");
  std::this_thread::sleep_for(kWindow - (std::chrono::steady_clock::now() - t0));
  kubelet.reset();  // the window ends: no pod fails any more, and what failed in it is counted
  std::this_thread::sleep_for(2s);

  struct Figures {
    int restarts, pod_creates, event_writes, event_patches;
  };
  auto figures = [&](const std::string& ns, const std::string& name) {
    json j = job(ns, name);
    auto w = writes_taken(ns);
    Figures f{j.value("status", json::object()).value("restarts", 0), w["pods create"],
              w["events create"] + w["events patch"], w["events patch"]};
    std::cout << "[ " << name << ": in 30 s " << f.restarts << " gang restarts, " << f.pod_creates << " pod creates, "
              << f.event_writes << " Event writes (" << f.event_patches << " of them counting a repeat); Restarted: "
              << condition(j, "Restarted", "message") << "; PodsBlocked: " << condition(j, "PodsBlocked", "message")
              << " ]\n";
    return std::make_pair(f, j);
  };

  // A NotReady node the pods are put back on, and a forged line: each restart bounded.
  for (const auto& [ns, name] : {std::pair{notready, std::string("notready")}, std::pair{forged, std::string("forged")}}) {
    SCOPED_TRACE(name);
    auto [f, j] = figures(ns, name);
    EXPECT_LE(f.restarts, kAllowedRestarts);
    EXPECT_GE(f.restarts, 2) << "the trigger did not restart the gang twice: " << j.dump();
    EXPECT_EQ(j["status"].value("nodeLostRestarts", -1), f.restarts);
    EXPECT_EQ(j["status"].value("consecutiveNodeLostRestarts", -1), f.restarts);
    EXPECT_LE(f.pod_creates, 2 * (kAllowedRestarts + 1));
    EXPECT_LE(f.event_writes, 2 * kAllowedRestarts + 1) << "a NodeLost Event per restart, and a PodsBlocked one";
    EXPECT_EQ(condition(j, "Restarted", "reason"), "NodeLost");
    EXPECT_NE(condition(j, "Restarted", "message").find("lost-node restart " + std::to_string(f.restarts) + " in a row of at most 10"),
              std::string::npos) << condition(j, "Restarted", "message");
    auto e = events(ns);
    EXPECT_EQ(e["NodeLost"].first, f.restarts) << "one Event per restart, each with its own attempt";
    EXPECT_EQ(e["NodeLost"].second, f.restarts);
  }
  // A forged line names the silent pod's node, though it is Ready.
  EXPECT_NE(condition(job(forged, "forged"), "Restarted", "message").find("on node " + b + " went silent"), std::string::npos);

  // A template's nodeName, stored before the rule: no pod at all, and one PodsBlocked Event.
  {
    auto [f, j] = figures(placed, "placed");
    EXPECT_EQ(f.pod_creates, 0);
    EXPECT_EQ(f.restarts, 0);
    EXPECT_EQ(condition(j, "PodsBlocked", "reason"), "TemplateNodeName");
    EXPECT_NE(condition(j, "PodsBlocked", "message").find("while spec.template.spec.nodeName is set"), std::string::npos);
    EXPECT_EQ(f.event_writes, 1);
    EXPECT_EQ(events(placed)["PodsBlocked"].first, 1);
  }
  // Pods bound to a node that does not exist, never started: blocked, not restarted.
  {
    auto [f, j] = figures(gone, "gone");
    EXPECT_EQ(f.restarts, 0);
    EXPECT_EQ(f.pod_creates, 2);
    EXPECT_EQ(condition(j, "PodsBlocked", "reason"), "BoundToLostNode");
    EXPECT_NE(condition(j, "PodsBlocked", "message").find("is gone (deleted)"), std::string::npos);
    EXPECT_EQ(f.event_writes, 1);
  }
  // See Note [Repeated Events]: every pass the quota refuses the pods with the same words; one Event
  // counts them.
  {
    auto [f, j] = figures(quota, "quota");
    EXPECT_EQ(f.pod_creates, 0) << "the audit log counts only what the API server took";
    auto e = events(quota)["FailedCreatePod"];
    std::cout << "[ quota: " << e.first << " FailedCreatePod Event(s), count " << e.second << " ]\n";
    EXPECT_EQ(e.first, 1);
    EXPECT_GE(e.second, 3) << "the retries in 30 s, counted";
    EXPECT_EQ(f.event_patches, e.second - 1);
    EXPECT_EQ(f.event_writes, e.second);
  }
}

int main(int argc, char** argv) {
  lockstep::test::ControlPlaneOptions options;
  options.audit_writes = true;
  return lockstep::test::run_tests_with_control_plane(argc, argv, options);
}
