// operator_test's fixture: lockstep-operator against a real kube-apiserver. The tests play the
// kubelet: they patch pod status (phase, readiness, exit codes) and watch what the operator does
// about it. One control plane and one operator for the whole binary (operator_fixture.cpp); the
// cases are split by behaviour: creation_test.cpp, lifecycle_test.cpp, failures_test.cpp,
// lost_nodes_test.cpp, agent_injection_test.cpp, progress_test.cpp, isolation_test.cpp,
// api_connection_test.cpp, leadership_test.cpp, pod_groups_test.cpp, stragglers_test.cpp.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube_test_support.hpp"
#include "operator_process.hpp"
#include "lockstep/contract.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::kube::Client;
using lockstep::kube::RestConfig;
namespace res = lockstep::kube::resources;
using lockstep::test::control_plane;
using lockstep::test::create_namespace;
using lockstep::test::kubectl;
using lockstep::test::eventually;
using lockstep::test::source_path;

// A container termination time as the kubelet writes it.
inline std::string rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&tt));
  return buf;
}

// A lockstep-operator process with its log in a file (operator_process.hpp), restarting gangs
// after 1 s, 2 s, 2 s, ... rather than 10 s, 20 s, ...
class OperatorProcess : public lockstep::test::OperatorProcess {
 public:
  OperatorProcess(const std::string& kubeconfig, std::vector<std::string> extra = {})
      : lockstep::test::OperatorProcess(kubeconfig, extra, {"operator", true, {"--restart-backoff=1s", "--restart-backoff-max=2s"}}) {}
};

// The value of an unlabelled series in a /metrics page, -1 if absent.
inline double metric(const std::string& page, const std::string& series) {
  std::regex re("(^|\n)" + series + " ([0-9.e+-]+)");
  std::smatch m;
  return std::regex_search(page, m, re) ? std::stod(m[2]) : -1;
}

using lockstep::test::History;  // operator_process.hpp

// The types of the watch events of the pods matching `selector` in `ns`, from now on.
class PodEvents {
 public:
  PodEvents(Client& client, const std::string& ns, const std::string& selector)
      : watch_(client, res::kPods.path(ns) + "?labelSelector=" + lockstep::kube::url_encode(selector), 120,
               [this](const std::string& type, json&) {
                 std::lock_guard<std::mutex> lock(mu_);
                 types_.insert(type);
               }) {}
  std::multiset<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return types_;
  }

 private:
  std::mutex mu_;
  std::multiset<std::string> types_;
  lockstep::test::Watch watch_;  // last (operator_process.hpp)
};

using lockstep::test::FakeAgent;  // operator_process.hpp

// Pauses an operator (SIGSTOP) for a scope, so only the one a test starts acts.
class Paused {
 public:
  explicit Paused(OperatorProcess* op) : op_(op) { op_->process().signal(SIGSTOP); }
  ~Paused() { op_->process().signal(SIGCONT); }

 private:
  OperatorProcess* op_;
};

class OperatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    client_ = lockstep::test::apply_crds_and_connect();
    if (!client_) return;
    // Tests pause this operator (Paused) while one of their own acts; a leader resumed after
    // its renew deadline steps down and exits (Note [Fenced writes]), so its lease outlasts
    // every pause.
    operator_ = new OperatorProcess(control_plane()->kubeconfig(),
                                    {"--progress-period=1s", "--lease-duration=300s", "--renew-deadline=240s",
                                     "--operator-namespace=lockstep-system", "--monitoring-namespace=monitoring"});
    ASSERT_TRUE(operator_->wait_log("caches synced")) << operator_->log();
  }
  static void TearDownTestSuite() { lockstep::test::delete_in_order(operator_, client_); }
  void SetUp() override {
    LOCKSTEP_REQUIRE_CONTROL_PLANE();
    ASSERT_NE(client_, nullptr);
    ns_ = create_namespace("op");
  }

  void TearDown() override {
    for (const auto& n : nodes_) client_->remove(res::kNodes.path("", n));
  }

  // A TrainingJob with `nodes` pods; `spec_extra` is YAML appended under spec (2-space indent),
  // `pod_spec_extra` under its template's pod spec (6-space indent).
  void create_job(const std::string& name, int nodes, const std::string& spec_extra = "",
                  const std::string& pod_spec_extra = "") {
    std::string yaml = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: " + name +
                       "\nspec:\n  nodes: " + std::to_string(nodes) +
                       "\n  procsPerNode: 2\n  strategy: DDP\n  template:\n    spec:\n      containers:\n"
                       "      - {name: trainer, image: lockstep/trainer:test}\n" + pod_spec_extra +
                       "  trainer: {args: [--model=tiny, --steps=10]}\n" + spec_extra;
    auto r = kubectl({"apply", "-n", ns_, "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output;
  }
  // The job, with an empty status until the operator's first write (which waits up to a
  // second for the pods: Note [Batched status writes]), so tests can read status fields.
  json job(const std::string& name) {
    auto r = client_->get(res::kTrainingJobs.path(ns_, name));
    if (!r.ok()) return json();
    if (!r.body.contains("status") || !r.body["status"].is_object()) r.body["status"] = json::object();
    return r.body;
  }
  std::string phase(const std::string& name) {
    json j = job(name);
    return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
  }
  std::vector<json> pods(const std::string& job_name, int attempt = -1) {
    std::string sel = std::string(lockstep::contract::kLabelJobName) + "=" + job_name;
    if (attempt >= 0) sel += std::string(",") + lockstep::contract::kLabelRestartAttempt + "=" + std::to_string(attempt);
    auto r = client_->get(res::kPods.path(ns_) + "?labelSelector=" + lockstep::kube::url_encode(sel));
    std::vector<json> out;
    if (r.ok())
      for (auto& p : r.body["items"])
        if (!p["metadata"].contains("deletionTimestamp")) out.push_back(p);
    return out;
  }
  bool wait_pods(const std::string& job_name, int n, int attempt = -1) {
    return eventually([&] { return static_cast<int>(pods(job_name, attempt).size()) == n; });
  }
  bool wait_phase(const std::string& job_name, const std::string& want, std::chrono::milliseconds t = 20s) {
    return eventually([&] { return phase(job_name) == want; }, t);
  }
  // The kubelet's part: report a pod's phase, readiness and container exit code.
  // `finished_at`: the container's termination time (RFC 3339), if any; `message`: its
  // termination message, as the kubelet copies it from the container's file.
  void set_pod(const std::string& pod, const std::string& phase, int exit_code = -1, const std::string& reason = "",
               const std::string& finished_at = "", const std::string& message = "") {
    json status = {{"phase", phase},
                   {"conditions", json::array({{{"type", "Ready"}, {"status", phase == "Running" ? "True" : "False"}}})}};
    if (exit_code >= 0) {
      json term = {{"exitCode", exit_code}};
      if (!reason.empty()) term["reason"] = reason;
      if (!finished_at.empty()) term["finishedAt"] = finished_at;
      if (!message.empty()) term["message"] = message;
      status["containerStatuses"] = json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0},
                                                  {"image", "lockstep/trainer:test"}, {"imageID", ""},
                                                  {"state", {{"terminated", term}}}}});
    }
    auto r = client_->patch(res::kPods.path(ns_, pod, "status"), {{"status", status}});
    ASSERT_TRUE(r.ok()) << pod << ": " << r.message();
  }
  void run_all(const std::string& job_name, int nodes) {
    for (int i = 0; i < nodes; ++i) set_pod(job_name + "-" + std::to_string(i), "Running");
  }
  // The kubelet's and the scheduler's part for nodes (Note [Lost nodes]): this control plane
  // has neither, so the test makes Node objects, writes their Ready condition through the
  // status subresource, taints them, and binds pods to them. Nodes are cluster-scoped: named
  // after the test's namespace, and deleted after the test.
  std::string make_node(const std::string& suffix) {
    std::string name = ns_ + "-" + suffix;
    auto r = client_->create(res::kNodes.path(), {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}});
    EXPECT_TRUE(r.ok()) << name << ": " << r.message();
    nodes_.push_back(name);
    set_node_ready(name, "True", "KubeletReady", "kubelet is posting ready status");
    return name;
  }
  void set_node_ready(const std::string& node, const std::string& status, const std::string& reason,
                      const std::string& message) {
    std::string now = rfc3339(std::chrono::system_clock::now());
    json ready = {{"type", "Ready"}, {"status", status}, {"reason", reason}, {"message", message},
                  {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
    auto r = client_->patch(res::kNodes.path("", node, "status"), {{"status", {{"conditions", json::array({ready})}}}});
    ASSERT_TRUE(r.ok()) << node << ": " << r.message();
  }
  void taint_node(const std::string& node, const std::string& key, const std::string& value) {
    json taint = {{"key", key}, {"value", value}, {"effect", "NoExecute"}};
    auto r = client_->patch(res::kNodes.path("", node), {{"spec", {{"taints", json::array({taint})}}}});
    ASSERT_TRUE(r.ok()) << node << ": " << r.message();
  }
  void bind(const std::string& pod, const std::string& node) {
    json binding = {{"apiVersion", "v1"}, {"kind", "Binding"}, {"metadata", {{"name", pod}}},
                    {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
    auto r = client_->create(res::kPods.path(ns_, pod, "binding"), binding);
    ASSERT_TRUE(r.ok()) << pod << " -> " << node << ": " << r.message();
  }
  // A gang of two running on two fresh nodes: <job>-0 on the first, <job>-1 on the second.
  std::pair<std::string, std::string> gang_on_two_nodes(const std::string& job_name, const std::string& pod_spec_extra = "") {
    std::string a = make_node(job_name + "-a"), b = make_node(job_name + "-b");
    create_job(job_name, 2, "", pod_spec_extra);
    EXPECT_TRUE(wait_pods(job_name, 2, 0));
    bind(job_name + "-0", a);
    bind(job_name + "-1", b);
    run_all(job_name, 2);
    EXPECT_TRUE(wait_phase(job_name, "Running"));
    return {a, b};
  }
  // The pod's uid, "" when it is gone; `deleting` says whether its deletion has begun.
  std::string pod_uid(const std::string& pod, bool* deleting = nullptr) {
    auto r = client_->get(res::kPods.path(ns_, pod));
    if (!r.ok()) return "";
    if (deleting) *deleting = r.body["metadata"].contains("deletionTimestamp");
    return r.body["metadata"].value("uid", "");
  }
  // Seconds until the pod of uid `uid` named `pod` is gone (no kubelet confirms a deletion
  // here: only a force deletion removes a bound pod); -1 if not within `timeout`.
  double seconds_until_gone(const std::string& pod, const std::string& uid, std::chrono::steady_clock::time_point since,
                            std::chrono::milliseconds timeout = 15s) {
    if (!eventually([&] { return pod_uid(pod) != uid; }, timeout)) return -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }
  std::string event_messages(const std::string& job_name, const std::string& reason) {
    return kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=" + job_name + ",reason=" + reason,
                    "-o", "jsonpath={.items[*].message}"}).output;
  }
  // After a gang restart for a lost node: the operator deleted the pod on the healthy node
  // gracefully, and no kubelet confirms it; the test does, as the kubelet would, and attempt 1
  // follows.
  void confirm_graceful_delete(const std::string& pod) {
    bool deleting = false;
    ASSERT_TRUE(eventually([&] { return !pod_uid(pod, &deleting).empty() && deleting; }, 10s))
        << pod << " was not deleted gracefully";
    auto r = client_->remove(res::kPods.path(ns_, pod), {{"gracePeriodSeconds", 0}});
    ASSERT_TRUE(r.ok() || r.not_found()) << r.message();
  }

  // nullptr also before the job's first status write (Note [Batched status writes]).
  const json* condition(const json& j, const std::string& type) {
    if (!j.is_object() || !j.contains("status") || !j["status"].is_object() || !j["status"].contains("conditions") ||
        !j["status"]["conditions"].is_array())
      return nullptr;
    for (const auto& c : j["status"]["conditions"])
      if (c.is_object() && c.value("type", "") == type) return &c;
    return nullptr;
  }
  std::map<std::string, std::string> env_of(const json& pod) {
    std::map<std::string, std::string> env;
    for (const auto& e : pod["spec"]["containers"][0]["env"]) env[e["name"]] = e.value("value", "");
    return env;
  }

  static Client* client_;
  static OperatorProcess* operator_;
  std::string ns_;
  std::vector<std::string> nodes_;  // made by this test
};
