// lockstep-operator against a real kube-apiserver. The tests play the kubelet: they patch
// pod status (phase, readiness, exit codes) and watch what the operator does about it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>


#include "http_server.hpp"
#include "kube/client.hpp"
#include "kube/informer.hpp"
#include "kube/resource.hpp"
#include "kube_test_support.hpp"
#include "operator_process.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/text.hpp"
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

namespace {

// A container termination time as the kubelet writes it.
std::string rfc3339(std::chrono::system_clock::time_point t) {
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
double metric(const std::string& page, const std::string& series) {
  std::regex re("(^|\n)" + series + " ([0-9.e+-]+)");
  std::smatch m;
  return std::regex_search(page, m, re) ? std::stod(m[2]) : -1;
}

using lockstep::test::History;  // operator_process.hpp

// The types of the watch events of the pods matching `selector` in `ns`, from now on.
class PodEvents {
 public:
  PodEvents(Client& client, const std::string& ns, const std::string& selector) {
    std::string path = res::kPods.path(ns) + "?labelSelector=" + lockstep::kube::url_encode(selector);
    std::string rv = client.get(path).body["metadata"].value("resourceVersion", "");
    thread_ = std::thread([this, &client, path, rv] {
      client.watch(path, rv, 120, [this](const std::string& type, json&) {
        std::lock_guard<std::mutex> lock(mu_);
        types_.insert(type);
      }, cancel_);
    });
  }
  ~PodEvents() {
    cancel_.cancel();
    thread_.join();
  }
  std::multiset<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return types_;
  }

 private:
  std::mutex mu_;
  std::multiset<std::string> types_;
  lockstep::kube::Cancellation cancel_;
  std::thread thread_;
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
    if (!control_plane()) return;
    lockstep::test::apply_crds();
    if (::testing::Test::HasFatalFailure()) return;
    client_ = new Client(RestConfig::from_kubeconfig(control_plane()->kubeconfig()));
    // Tests pause this operator (Paused) while one of their own acts; a leader resumed after
    // its renew deadline steps down and exits (Note [Fenced writes]), so its lease outlasts
    // every pause.
    operator_ = new OperatorProcess(control_plane()->kubeconfig(),
                                    {"--progress-period=1s", "--lease-duration=300s", "--renew-deadline=240s",
                                     "--operator-namespace=lockstep-system", "--monitoring-namespace=monitoring"});
    ASSERT_TRUE(operator_->wait_log("caches synced")) << operator_->log();
  }
  static void TearDownTestSuite() {
    delete operator_;
    operator_ = nullptr;
    delete client_;
    client_ = nullptr;
  }
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

Client* OperatorTest::client_ = nullptr;
OperatorProcess* OperatorTest::operator_ = nullptr;

}  // namespace

TEST_F(OperatorTest, CreatesServicePodGroupAndPodsWithTheExactEnvironment) {
  kubectl({"create", "priorityclass", "high", "--value=1000"});  // the Priority admission plugin checks it exists
  create_job("envjob", 3, "  masterPort: 29600\n  metrics: {port: 9500}\n  checkpoint: {path: /ckpt, everySteps: 7}\n"
                          "  scheduling: {priorityClassName: high, schedulerName: coscheduler}\n");
  ASSERT_TRUE(wait_pods("envjob", 3));
  json j = job("envjob");
  std::string uid = j["metadata"]["uid"];

  auto svc = client_->get(res::kServices.path(ns_, "envjob"));
  ASSERT_TRUE(svc.ok()) << svc.message();
  EXPECT_EQ(svc.body["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc.body["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc.body["spec"]["selector"][lockstep::contract::kLabelJobName], "envjob");
  auto pg = client_->get(res::kPodGroups.path(ns_, "envjob"));
  ASSERT_TRUE(pg.ok()) << pg.message();
  EXPECT_EQ(pg.body["spec"]["minMember"], 3);

  std::set<std::string> secrets;
  std::set<std::string> names;
  for (const auto& pod : pods("envjob")) {
    std::string name = pod["metadata"]["name"];
    names.insert(name);
    int rank = std::stoi(name.substr(name.rfind('-') + 1));
    SCOPED_TRACE(name);
    const auto& spec = pod["spec"];
    EXPECT_EQ(spec["hostname"], name);
    EXPECT_EQ(spec["subdomain"], "envjob");
    EXPECT_EQ(spec["restartPolicy"], "Never");
    EXPECT_EQ(spec["schedulerName"], "coscheduler");
    EXPECT_EQ(spec["priorityClassName"], "high");
    const auto& labels = pod["metadata"]["labels"];
    EXPECT_EQ(labels["lockstep.dev/job-name"], "envjob");
    EXPECT_EQ(labels["lockstep.dev/node-rank"], std::to_string(rank));
    EXPECT_EQ(labels["lockstep.dev/restart-attempt"], "0");
    EXPECT_FALSE(labels.contains("kueue.x-k8s.io/queue-name"));
    EXPECT_EQ(labels["scheduling.x-k8s.io/pod-group"], "envjob");
    const auto& owner = pod["metadata"]["ownerReferences"][0];
    EXPECT_EQ(owner["kind"], "TrainingJob");
    EXPECT_EQ(owner["uid"], uid);
    EXPECT_EQ(owner["controller"], true);
    EXPECT_EQ(owner["blockOwnerDeletion"], true);
    // Note [Agent injection]: the agent comes from the init container's emptyDir.
    EXPECT_EQ(spec["containers"][0]["command"],
              json({"/lockstep/agent/lockstep-agent", "--", "lockstep-trainer", "--model=tiny", "--steps=10"}));
    ASSERT_EQ(spec["initContainers"].size(), 1u) << spec;
    const auto& init = spec["initContainers"][0];
    EXPECT_EQ(init["name"], "lockstep-agent");
    EXPECT_EQ(init["image"], std::string("lockstep/agent:") + LOCKSTEP_VERSION);
    EXPECT_EQ(init["command"], json({"/lockstep/lockstep-agent", "--install-bundle", "/lockstep-install"}));
    EXPECT_EQ(init["volumeMounts"], json::parse(R"([{"name":"lockstep-agent","mountPath":"/lockstep-install"}])"));
    EXPECT_EQ(spec["containers"][0]["volumeMounts"],
              json::parse(R"([{"name":"lockstep-agent","mountPath":"/lockstep/agent","readOnly":true}])"));
    EXPECT_EQ(spec["volumes"], json::parse(R"([{"name":"lockstep-agent","emptyDir":{"sizeLimit":"256Mi"}}])"));
    std::string master = "envjob-0.envjob." + ns_ + ".svc";
    std::map<std::string, std::string> want = {
        {"LOCKSTEP_JOB_NAME", "envjob"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_JOB_UID", uid},
        {"LOCKSTEP_NNODES", "3"}, {"LOCKSTEP_NODE_RANK", std::to_string(rank)}, {"LOCKSTEP_NPROC_PER_NODE", "2"},
        {"LOCKSTEP_MASTER_ADDR", master}, {"LOCKSTEP_MASTER_PORT", "29600"}, {"LOCKSTEP_RESTART_ATTEMPT", "0"},
        {"LOCKSTEP_STRATEGY", "DDP"}, {"LOCKSTEP_METRICS_PORT", "9500"}, {"LOCKSTEP_IN_PLACE_RESTARTS", "3"},
        {"LOCKSTEP_RESTART_POLICY", "OnFailure"}, {"LOCKSTEP_CHECKPOINT_PATH", "/ckpt"},
        {"LOCKSTEP_CHECKPOINT_EVERY", "7"}, {"LOCKSTEP_CHECKPOINT_KEEP", "3"}, {"PET_NNODES", "3"}, {"PET_NODE_RANK", std::to_string(rank)},
        {"PET_NPROC_PER_NODE", "2"}, {"PET_MASTER_ADDR", master}, {"PET_MASTER_PORT", "29600"}};
    auto env = env_of(pod);
    // Note [Barrier secret]: 32 random bytes in hex, one for every pod of the attempt.
    const std::string secret = env["LOCKSTEP_BARRIER_SECRET"];
    EXPECT_EQ(secret.size(), 64u);
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
    secrets.insert(secret);
    env.erase("LOCKSTEP_BARRIER_SECRET");
    // Note [Worker threads]: the container's CPU request and limit, from the downward API.
    EXPECT_TRUE(env.count("LOCKSTEP_CPU_REQUEST") && env.count("LOCKSTEP_CPU_LIMIT")) << spec["containers"][0]["env"];
    for (const auto& e : spec["containers"][0]["env"]) {
      const std::string name = e["name"];
      if (name != "LOCKSTEP_CPU_REQUEST" && name != "LOCKSTEP_CPU_LIMIT") continue;
      EXPECT_FALSE(e.contains("value")) << e;
      const std::string resource = name == "LOCKSTEP_CPU_REQUEST" ? "requests.cpu" : "limits.cpu";
      EXPECT_EQ(e["valueFrom"], json({{"resourceFieldRef",
                                       {{"containerName", spec["containers"][0]["name"]}, {"resource", resource}, {"divisor", "1m"}}}}))
          << e;
      env.erase(name);
    }
    EXPECT_EQ(env, want);
  }
  EXPECT_EQ(secrets.size(), 1u) << "the pods of one attempt hold different barrier secrets";
  EXPECT_EQ(names, (std::set<std::string>{"envjob-0", "envjob-1", "envjob-2"}));
  EXPECT_TRUE(wait_phase("envjob", "Pending"));
}

// A job that names a Kueue queue where Kueue's Workload API is not served waits, with no pod,
// rather than run outside the quota it asked for, and says why (docs/kueue.md; kueue_test runs
// the rest against a real Kueue).
TEST_F(OperatorTest, AJobThatNamesAQueueWithoutKueueWaitsAndSaysWhy) {
  create_job("queued", 2, "  scheduling: {queue: team-a}\n");
  ASSERT_TRUE(wait_phase("queued", "Queued")) << job("queued").dump(2);
  json j = job("queued");
  const json* q = condition(j, "Queued");
  ASSERT_NE(q, nullptr) << j.dump(2);
  EXPECT_EQ((*q)["reason"], "KueueNotInstalled");
  EXPECT_NE((*q)["message"].get<std::string>().find("LocalQueue team-a"), std::string::npos) << *q;
  EXPECT_EQ(j["status"].value("queue", ""), "team-a");
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(pods("queued").empty());
}

TEST_F(OperatorTest, AllPodsRunningThenSucceededGivesSucceeded) {
  create_job("okjob", 2);
  ASSERT_TRUE(wait_pods("okjob", 2));
  run_all("okjob", 2);
  ASSERT_TRUE(wait_phase("okjob", "Running"));
  json j = job("okjob");
  EXPECT_EQ(j["status"]["nodes"]["ready"], 2);
  EXPECT_EQ(j["status"]["nodes"]["active"], 2);
  EXPECT_TRUE(j["status"].contains("startTime"));
  ASSERT_NE(condition(j, "Running"), nullptr);
  EXPECT_EQ((*condition(j, "Running"))["status"], "True");

  // Steady state: nothing changed, so the operator writes nothing.
  std::string rv = j["metadata"]["resourceVersion"];
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(job("okjob")["metadata"]["resourceVersion"], rv) << "status rewritten with no change";

  set_pod("okjob-0", "Succeeded", 0);
  set_pod("okjob-1", "Succeeded", 0);
  ASSERT_TRUE(wait_phase("okjob", "Succeeded"));
  j = job("okjob");
  EXPECT_TRUE(j["status"].contains("completionTime"));
  EXPECT_EQ(j["status"]["nodes"]["succeeded"], 2);
  EXPECT_EQ((*condition(j, "Succeeded"))["reason"], "AllNodesSucceeded");
  // cleanPodPolicy Running: finished pods stay for their logs.
  EXPECT_EQ(pods("okjob").size(), 2u);
  // Note [Events that say something new]: an Event for the end; the creation and the first
  // start are the Created and Running conditions alone.
  auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=okjob", "-o",
                     "jsonpath={.items[*].reason}"});
  EXPECT_EQ(ev.output, "AllNodesSucceeded") << ev.output;
  ASSERT_NE(condition(j, "Created"), nullptr);
}

// Note [Batched status writes]: a new job's first write waits for the batch period (1 s here)
// while it only says Pending and Created. Pods that run within it make one write, Running with
// both conditions; otherwise the first write says Pending, a period after the job was made.
TEST_F(OperatorTest, ANewJobsFirstStatusWriteWaitsForItsPods) {
  History history(*client_, res::kTrainingJobs.path(ns_), "first");
  std::this_thread::sleep_for(300ms);  // the watch is open
  const auto made = std::chrono::steady_clock::now();
  create_job("first", 2);
  ASSERT_TRUE(eventually([&] { return pods("first").size() == 2; }, 5s));
  run_all("first", 2);
  const double ran_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - made).count();
  ASSERT_TRUE(wait_phase("first", "Running", 10s));
  std::this_thread::sleep_for(1500ms);  // anything still held back would be written by now
  std::vector<json> written;  // the versions with a status: the operator's writes
  for (const auto& v : history.versions())
    if (v.contains("status") && v["status"].is_object() && !v["status"].empty()) written.push_back(v["status"]);
  ASSERT_FALSE(written.empty());
  const json& first = written.front();
  EXPECT_NE(condition(json{{"status", first}}, "Created"), nullptr) << first.dump();
  if (ran_after < 0.7) {
    EXPECT_EQ(written.size(), 1u) << "the pods ran " << ran_after << " s after the job was made: one write";
    EXPECT_EQ(first.value("phase", ""), "Running") << first.dump();
  } else {  // a slow machine: the put-off write, then Running
    EXPECT_EQ(first.value("phase", ""), "Pending") << "the pods ran " << ran_after << " s after the job was made";
    EXPECT_EQ(written.back().value("phase", ""), "Running");
  }
  std::cerr << "[operator] pods running " << ran_after << " s after the job was made; status writes to Running: "
            << written.size() << "\n";
}

// Note [Batched status writes]: pods that change within a moment of each other make one
// write of the node counts, not one each; the counts are right once it is made, and a
// change of phase is not held back.
TEST_F(OperatorTest, NodeCountsThatChangeTogetherAreWrittenTogether) {
  create_job("batch", 6);
  ASSERT_TRUE(wait_pods("batch", 6));
  ASSERT_TRUE(wait_phase("batch", "Pending"));
  std::this_thread::sleep_for(1500ms);  // past the creation's write: the next one is due at once
  History history(*client_, res::kTrainingJobs.path(ns_), "batch");
  std::this_thread::sleep_for(300ms);  // the watch is open
  for (int i = 0; i < 5; ++i) set_pod("batch-" + std::to_string(i), "Running");
  ASSERT_TRUE(eventually([&] { return job("batch")["status"]["nodes"].value("ready", 0) == 5; }, 5s))
      << job("batch")["status"].dump();
  std::this_thread::sleep_for(1500ms);  // anything still held back would be written by now
  std::vector<int> ready_written;
  for (const auto& v : history.versions()) ready_written.push_back(v["status"]["nodes"].value("ready", 0));
  ASSERT_FALSE(ready_written.empty());
  EXPECT_EQ(ready_written.back(), 5);
  EXPECT_LT(ready_written.size(), 5u) << "a status write per pod; ready counts written: "
                                      << ::testing::PrintToString(ready_written);
  EXPECT_EQ(phase("batch"), "Pending");
  // The last pod makes the job Running: a change of phase goes out at once, with its counts.
  set_pod("batch-5", "Running");
  ASSERT_TRUE(wait_phase("batch", "Running", 5s));
  EXPECT_EQ(job("batch")["status"]["nodes"].value("ready", 0), 6);
}

TEST_F(OperatorTest, ExitCode137RestartsTheWholeGang) {
  create_job("oom", 3);
  ASSERT_TRUE(wait_pods("oom", 3, 0));
  std::set<std::string> old_uids, old_secrets;
  for (const auto& p : pods("oom")) {
    old_uids.insert(p["metadata"]["uid"]);
    old_secrets.insert(env_of(p)["LOCKSTEP_BARRIER_SECRET"]);
  }
  run_all("oom", 3);
  ASSERT_TRUE(wait_phase("oom", "Running"));
  set_pod("oom-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return job("oom")["status"].value("restarts", 0) == 1; }));
  ASSERT_TRUE(wait_pods("oom", 3, 1)) << "no second attempt";
  EXPECT_TRUE(pods("oom", 0).empty()) << "pods of attempt 0 left behind";
  for (const auto& p : pods("oom", 1)) {
    EXPECT_EQ(env_of(p)["LOCKSTEP_RESTART_ATTEMPT"], "1");
    EXPECT_FALSE(old_uids.count(p["metadata"]["uid"])) << "pod not recreated";
    // Note [Barrier secret]: a new attempt, a new secret, so attempt 0's ranks are fenced out.
    EXPECT_FALSE(old_secrets.count(env_of(p)["LOCKSTEP_BARRIER_SECRET"]));
  }
  json j = job("oom");
  EXPECT_EQ(j["status"]["restarts"], 1);
  EXPECT_EQ(j["status"]["phase"], "Restarting");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  EXPECT_NE((*c)["message"].get<std::string>().find("exit code 137"), std::string::npos) << *c;
  run_all("oom", 3);
  EXPECT_TRUE(wait_phase("oom", "Running"));
}

TEST_F(OperatorTest, BackoffLimitExhaustedGivesFailed) {
  create_job("flaky", 2, "  runPolicy: {backoffLimit: 1}\n");
  ASSERT_TRUE(wait_pods("flaky", 2, 0));
  set_pod("flaky-0", "Failed", 137);
  ASSERT_TRUE(wait_pods("flaky", 2, 1));
  set_pod("flaky-1", "Running");
  set_pod("flaky-0", "Failed", 139);
  ASSERT_TRUE(wait_phase("flaky", "Failed"));
  json j = job("flaky");
  EXPECT_EQ(j["status"]["restarts"], 1);
  auto* c = condition(j, "Failed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["reason"], "BackoffLimitExceeded");
  EXPECT_TRUE(j["status"].contains("completionTime"));
  // cleanPodPolicy Running removes the pod that was still running.
  EXPECT_TRUE(eventually([&] {
    for (const auto& p : pods("flaky"))
      if (p["status"].value("phase", "") == "Running") return false;
    return true;
  }));
}

TEST_F(OperatorTest, ExitCodePolicyFailsAtOnceOnAProgramError) {
  create_job("bug", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("bug", 2));
  run_all("bug", 2);
  set_pod("bug-1", "Failed", 1);
  ASSERT_TRUE(wait_phase("bug", "Failed"));
  json j = job("bug");
  EXPECT_EQ(j["status"]["restarts"], 0);
  EXPECT_EQ((*condition(j, "Failed"))["reason"], "NonRetryableExitCode");
}

TEST_F(OperatorTest, ExitCodePolicyRetriesTheAgentsStallCode) {
  create_job("stall", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("stall", 2));
  run_all("stall", 2);
  set_pod("stall-0", "Failed", lockstep::contract::kExitStall);
  ASSERT_TRUE(eventually([&] { return job("stall")["status"].value("restarts", 0) == 1; }));
  EXPECT_TRUE(wait_pods("stall", 2, 1));
}

// Pod 1 is OOM-killed; pod 0's collective then fails with exit 1, and its status reaches the
// API server first. Judged by index (or by arrival) the job would fail for good; judged by
// the first failure in time it restarts (Note [The first failure]).
TEST_F(OperatorTest, ExitCodePolicyJudgesTheFirstFailureInTimeNotTheFirstReported) {
  create_job("first", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("first", 2));
  run_all("first", 2);
  ASSERT_TRUE(wait_phase("first", "Running"));
  auto now = std::chrono::system_clock::now();
  set_pod("first-0", "Failed", 1, "Error", rfc3339(now));
  std::this_thread::sleep_for(1500ms);  // the operator sees pod 0's exit 1 alone first
  EXPECT_EQ(phase("first"), "Running") << "decided before pod 1 could report";
  set_pod("first-1", "Failed", 137, "OOMKilled", rfc3339(now - 3s));
  ASSERT_TRUE(eventually([&] { return job("first")["status"].value("restarts", 0) == 1; })) << job("first");
  json j = job("first");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  std::string msg = (*c)["message"];
  EXPECT_EQ(msg.rfind("pod first-1 failed with exit code 137 (OOMKilled), first; first-0 (exit 1) failed as well", 0), 0u)
      << msg;
  EXPECT_TRUE(wait_pods("first", 2, 1));
}

TEST_F(OperatorTest, ExitCodePolicyFailsOnAProgramErrorThatNoPeerContradicts) {
  create_job("alone", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("alone", 2));
  run_all("alone", 2);
  ASSERT_TRUE(wait_phase("alone", "Running"));
  auto t0 = std::chrono::steady_clock::now();
  set_pod("alone-0", "Failed", 1, "Error", rfc3339(std::chrono::system_clock::now()));
  ASSERT_TRUE(wait_phase("alone", "Failed", 20s));
  // It waited for the peer (about 5 s) before failing the job, and no longer.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(job("alone")["status"]["restarts"], 0);
}

TEST_F(OperatorTest, AGangStaysRunningWhenOnePodFinishesFirst) {
  create_job("early", 2);
  ASSERT_TRUE(wait_pods("early", 2));
  run_all("early", 2);
  ASSERT_TRUE(wait_phase("early", "Running"));
  set_pod("early-0", "Succeeded", 0);
  ASSERT_TRUE(eventually([&] { return job("early")["status"]["nodes"].value("succeeded", 0) == 1; }));
  EXPECT_EQ(phase("early"), "Running");
  // Pod 1 then fails: the whole gang reruns, the pod that succeeded included.
  set_pod("early-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return job("early")["status"].value("restarts", 0) == 1; }));
  json j = job("early");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  EXPECT_NE((*c)["message"].get<std::string>().find("early-0 had succeeded"), std::string::npos) << *c;
  EXPECT_TRUE(wait_pods("early", 2, 1));
}

// #12: a pod the scheduler cannot place, or whose image cannot be pulled, is named in the
// job's PodsBlocked condition and a Warning Event, not left as a silent Pending.
// Note [Lost nodes]: a node of a running gang goes NotReady. Within seconds, not at eviction,
// the pod there is force-deleted (gone with no kubelet to confirm it), the gang restarts as
// attempt 1, and the Event and the Restarted condition name the node, the pod and its rank.
TEST_F(OperatorTest, ANodeThatGoesNotReadyRestartsTheGangWithinSeconds) {
  auto [a, b] = gang_on_two_nodes("nr");
  std::string uid = pod_uid("nr-1");
  ASSERT_FALSE(uid.empty());
  auto t0 = std::chrono::steady_clock::now();
  set_node_ready(b, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.");
  double gone = seconds_until_gone("nr-1", uid, t0);
  std::cout << "[ NotReady node " << b << ": its pod force-deleted " << gone << " s after the node's status changed ]\n";
  ASSERT_GE(gone, 0) << "the pod on the lost node is still there: " << operator_->log().substr(0, 4000);
  EXPECT_LT(gone, 5.0);
  json j;  // the status write follows the deletes, so it may land a moment later
  EXPECT_TRUE(eventually([&] {
    j = job("nr");
    return condition(j, "Restarted") != nullptr;
  })) << j.dump();
  EXPECT_EQ(j["status"]["restarts"], 1);
  EXPECT_EQ(j["status"]["nodeLostRestarts"], 1);
  const json* c = condition(j, "Restarted");
  ASSERT_NE(c, nullptr) << j["status"].dump();
  EXPECT_EQ((*c)["reason"], "NodeLost");
  std::string msg = (*c)["message"];
  EXPECT_NE(msg.find("pod nr-1 (rank 1) lost its node: node " + b + " is NotReady (Ready=Unknown, NodeStatusUnknown: "
                     "Kubelet stopped posting node status.) since "),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("restarting the gang as attempt 1"), std::string::npos) << msg;
  EXPECT_TRUE(eventually([&] { return event_messages("nr", "NodeLost").find("node " + b + " is NotReady") != std::string::npos; }))
      << event_messages("nr", "NodeLost");
  // The pod on the healthy node was deleted gracefully: its kubelet (the test) confirms it.
  confirm_graceful_delete("nr-0");
  ASSERT_TRUE(wait_pods("nr", 2, 1)) << "no attempt 1";
}

// A NoExecute taint the pods tolerate for ever changes nothing; one they do not tolerate
// restarts the gang, as a NotReady node does.
TEST_F(OperatorTest, AnUntoleratedNoExecuteTaintRestartsTheGangAndAToleratedOneDoesNot) {
  auto [a, b] = gang_on_two_nodes("taint", "      tolerations:\n"
                                           "      - {key: example.com/maintenance, operator: Exists, effect: NoExecute}\n");
  std::string uid = pod_uid("taint-1");
  taint_node(b, "example.com/maintenance", "planned");
  std::this_thread::sleep_for(3s);  // the NotReady test's reaction took well under a second
  EXPECT_EQ(pod_uid("taint-1"), uid);
  EXPECT_EQ(job("taint")["status"].value("restarts", -1), 0);
  EXPECT_EQ(phase("taint"), "Running");

  auto t0 = std::chrono::steady_clock::now();
  taint_node(b, "example.com/gpu-unhealthy", "true");
  double gone = seconds_until_gone("taint-1", uid, t0);
  std::cout << "[ untolerated NoExecute taint on " << b << ": its pod force-deleted " << gone << " s after the taint ]\n";
  ASSERT_GE(gone, 0) << operator_->log().substr(0, 4000);
  EXPECT_LT(gone, 5.0);
  json j;  // the status write follows the deletes, so it may land a moment later
  EXPECT_TRUE(eventually([&] {
    j = job("taint");
    return condition(j, "Restarted") != nullptr;
  })) << j.dump();
  EXPECT_EQ(j["status"]["restarts"], 1);
  const json* c = condition(j, "Restarted");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["reason"], "NodeLost");
  EXPECT_NE((*c)["message"].get<std::string>().find("node " + b + " has taint example.com/gpu-unhealthy=true:NoExecute "
                                                    "that pod taint-1 does not tolerate"),
            std::string::npos) << *c;
  EXPECT_TRUE(eventually([&] { return event_messages("taint", "NodeLost").find("example.com/gpu-unhealthy") != std::string::npos; }));
  confirm_graceful_delete("taint-0");
  EXPECT_TRUE(wait_pods("taint", 2, 1)) << "no attempt 1";
}

// A node deleted under a running pod (its object gone) is lost too.
TEST_F(OperatorTest, ADeletedNodeRestartsTheGang) {
  auto [a, b] = gang_on_two_nodes("del");
  std::string uid = pod_uid("del-1");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->remove(res::kNodes.path("", b)).ok());
  double gone = seconds_until_gone("del-1", uid, t0);
  std::cout << "[ deleted node " << b << ": its pod force-deleted " << gone << " s after ]\n";
  ASSERT_GE(gone, 0) << operator_->log().substr(0, 4000);
  // The status write follows the deletes (the pods go first), so it may land a moment later.
  json j;
  EXPECT_TRUE(eventually([&] {
    j = job("del");
    return condition(j, "Restarted") != nullptr;
  })) << j.dump();
  const json* c = condition(j, "Restarted");
  ASSERT_NE(c, nullptr);
  EXPECT_NE((*c)["message"].get<std::string>().find("node " + b + " is gone (deleted)"), std::string::npos) << *c;
}

// --node-watch=false (for comparing with waiting for eviction): a NotReady node changes
// nothing, and the operator says why in its log and its /metrics.
TEST_F(OperatorTest, WithTheNodeWatchOffANotReadyNodeChangesNothing) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(), {"--namespace", ns_, "--leader-elect=false", "--node-watch=false"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  EXPECT_NE(op.log().find("node watch off (--node-watch=false)"), std::string::npos) << op.log();
  EXPECT_EQ(metric(op.http("/metrics"), "lockstep_operator_node_watch"), 0);
  auto [a, b] = gang_on_two_nodes("nowatch");
  std::string uid = pod_uid("nowatch-1");
  set_node_ready(b, "False", "KubeletNotReady", "container runtime network not ready");
  std::this_thread::sleep_for(3s);
  bool deleting = true;
  EXPECT_EQ(pod_uid("nowatch-1", &deleting), uid);
  EXPECT_FALSE(deleting);
  EXPECT_EQ(job("nowatch")["status"].value("restarts", -1), 0);
  EXPECT_EQ(phase("nowatch"), "Running");
}

TEST_F(OperatorTest, APodThatCannotStartIsNamedWithItsReason) {
  create_job("blocked", 2);
  ASSERT_TRUE(wait_pods("blocked", 2));
  set_pod("blocked-1", "Running");
  json unschedulable = {{"status",
                         {{"phase", "Pending"},
                          {"conditions",
                           json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                                         {"message", "0/1 nodes are available: 1 Insufficient cpu."}}})}}}};
  auto r = client_->patch(res::kPods.path(ns_, "blocked-0", "status"), unschedulable);
  ASSERT_TRUE(r.ok()) << r.message();
  auto blocked = [&](const std::string& want_reason) {
    json j = job("blocked");
    auto* c = condition(j, "PodsBlocked");
    return c && (*c)["status"] == "True" && (*c)["reason"] == want_reason;
  };
  ASSERT_TRUE(eventually([&] { return blocked("Unschedulable"); }, 20s)) << job("blocked");
  json j = job("blocked");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["message"],
            "pod blocked-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.");
  auto events = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=blocked", "-o",
                         "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}"});
  EXPECT_NE(events.output.find("Warning PodsBlocked: pod blocked-0 cannot be scheduled"), std::string::npos)
      << events.output;
  // Placed, but its image cannot be pulled.
  json pull = {{"status",
                {{"phase", "Pending"},
                 {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "True"}}})},
                 {"containerStatuses",
                  json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0}, {"image", "lockstep/trainer:nope"},
                                {"imageID", ""},
                                {"state", {{"waiting", {{"reason", "ImagePullBackOff"},
                                                        {"message", "Back-off pulling image \"lockstep/trainer:nope\""}}}}}}})}}}};
  r = client_->patch(res::kPods.path(ns_, "blocked-0", "status"), pull);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] { return blocked("ImagePullBackOff"); }, 20s)) << job("blocked");
  // Both run: the condition clears and the job is Running.
  set_pod("blocked-0", "Running");
  ASSERT_TRUE(wait_phase("blocked", "Running"));
  j = job("blocked");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["status"], "False");
}

// Note [Agent injection]: the init container passes the restricted Pod Security Standard, which
// the API server's own PodSecurity admission enforces in a namespace labelled for it: a job
// whose template is itself restricted gets its pods created there. The template's volumes,
// init containers and mounts are kept, beside the operator's.
TEST_F(OperatorTest, InjectedAgentPassesTheRestrictedPodSecurityStandard) {
  auto label = kubectl({"label", "namespace", ns_, "pod-security.kubernetes.io/enforce=restricted"});
  ASSERT_TRUE(label.status.success()) << label.output;
  std::string yaml = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: restricted\n"
                     "spec:\n  nodes: 2\n  procsPerNode: 1\n  template:\n    spec:\n"
                     "      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}\n"
                     "      volumes: [{name: data, emptyDir: {}}]\n"
                     "      initContainers:\n"
                     "      - name: fetch\n        image: python:3.11-slim\n        command: [\"true\"]\n"
                     "        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n"
                     "      containers:\n"
                     "      - name: trainer\n        image: python:3.11-slim\n"
                     "        volumeMounts: [{name: data, mountPath: /data}]\n"
                     "        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n"
                     "  trainer: {command: [python3, train.py]}\n";
  auto r = kubectl({"apply", "-n", ns_, "-f", "-"}, yaml);
  ASSERT_TRUE(r.status.success()) << r.output;
  ASSERT_TRUE(wait_pods("restricted", 2)) << operator_->log();
  for (const auto& pod : pods("restricted")) {
    const auto& spec = pod["spec"];
    ASSERT_EQ(spec["initContainers"].size(), 2u) << spec;
    EXPECT_EQ(spec["initContainers"][0]["name"], "lockstep-agent");
    EXPECT_EQ(spec["initContainers"][1]["name"], "fetch");
    EXPECT_EQ(spec["volumes"].size(), 2u) << spec;
    EXPECT_EQ(spec["containers"][0]["volumeMounts"].size(), 2u) << spec;
    EXPECT_EQ(spec["containers"][0]["command"], json({"/lockstep/agent/lockstep-agent", "--", "python3", "train.py"}));
  }
  // The same job whose own container is not restricted is refused by the API server, so the
  // namespace really enforces the standard.
  std::string loose = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: loose\n"
                      "spec:\n  nodes: 1\n  template:\n    spec:\n      containers:\n"
                      "      - {name: trainer, image: python:3.11-slim}\n";
  ASSERT_TRUE(kubectl({"apply", "-n", ns_, "-f", "-"}, loose).status.success());
  EXPECT_TRUE(eventually([&] {
    auto e = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=loose", "-o",
                      "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"});
    return e.output.find("restricted") != std::string::npos;
  }, 20s)) << "no event says the loose job's pod violates the restricted standard";
  EXPECT_TRUE(pods("loose").empty());
}

// Note [Agent injection]: a template that mounts a volume over the agent in the container that
// runs it gets no pod; the job's PodsBlocked condition names the field, as `lockstep validate` does.
TEST_F(OperatorTest, ATemplateThatOverlaysTheAgentGetsNoPodAndItsConditionNamesTheField) {
  std::string yaml = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: overlay\n"
                     "spec:\n  nodes: 1\n  template:\n    spec:\n      volumes: [{name: bin, emptyDir: {}}]\n"
                     "      containers:\n      - name: trainer\n        image: lockstep/trainer:test\n"
                     "        volumeMounts: [{name: bin, mountPath: /data}, {name: bin, mountPath: /lockstep/agent/lockstep-agent, subPath: x}]\n";
  auto r = kubectl({"apply", "-n", ns_, "-f", "-"}, yaml);
  ASSERT_TRUE(r.status.success()) << r.output;
  ASSERT_TRUE(eventually([&] {
    json j = job("overlay");
    const json* c = condition(j, "PodsBlocked");
    return c && (*c)["status"] == "True";
  }, 20s)) << job("overlay") << operator_->log();
  json j = job("overlay");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["reason"], "TemplateOverlaysAgent");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["message"].get<std::string>().rfind(
                "spec.template.spec.containers[0].volumeMounts[1].mountPath: Invalid value: "
                "\"/lockstep/agent/lockstep-agent\": the operator mounts the Lockstep agent at /lockstep/agent", 0), 0u);
  EXPECT_TRUE(pods("overlay").empty());
}

// Note [Agent injection]: every mount of the agent's volume that the template makes (a sidecar's,
// whole and a subPath, and an init container's) is read-only in the pods the API server admits;
// the operator's own init container alone writes it.
TEST_F(OperatorTest, EveryMountOfTheAgentVolumeIsReadOnlyInThePods) {
  create_job("ro", 1, "",
             "      - name: sidecar\n        image: busybox\n"
             "        volumeMounts: [{name: lockstep-agent, mountPath: /agent},"
             " {name: lockstep-agent, mountPath: /bin/agent, subPath: lockstep-agent, readOnly: false}]\n"
             "      initContainers:\n      - name: fetch\n        image: busybox\n"
             "        volumeMounts: [{name: lockstep-agent, mountPath: /agent}]\n");
  ASSERT_TRUE(wait_pods("ro", 1)) << operator_->log();
  const json spec = pods("ro")[0]["spec"];
  int read_only = 0;
  for (const char* list : {"containers", "initContainers"})
    for (const auto& ctr : spec[list]) {
      const bool ours = std::string(list) == "initContainers" && ctr["name"] == "lockstep-agent";
      for (const auto& m : ctr.value("volumeMounts", json::array()))
        if (m["name"] == "lockstep-agent") {
          EXPECT_EQ(m.value("readOnly", false), !ours) << ctr["name"] << ": " << m;
          read_only += m.value("readOnly", false);
        }
    }
  EXPECT_EQ(read_only, 4) << "the trainer's, the sidecar's two and fetch's: " << spec;
}

// examples/restricted.yaml as written: the pods the operator makes of it are admitted where the
// restricted Pod Security Standard is enforced, carry no service-account token, and list every
// port they serve (Note [Job ports]).
TEST_F(OperatorTest, TheRestrictedExamplesPodsAreAdmittedUnderTheRestrictedStandard) {
  auto label = kubectl({"label", "namespace", ns_, "pod-security.kubernetes.io/enforce=restricted"});
  ASSERT_TRUE(label.status.success()) << label.output;
  auto r = kubectl({"apply", "-n", ns_, "-f", source_path("examples/restricted.yaml")});
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_EQ(r.output.find("Warning"), std::string::npos) << r.output;
  ASSERT_TRUE(wait_pods("tiny-restricted", 2)) << operator_->log();
  for (const auto& pod : pods("tiny-restricted")) {
    EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], false) << pod["spec"];
    std::set<int> ports;
    for (const auto& p : pod["spec"]["containers"][0]["ports"]) ports.insert(p["containerPort"].get<int>());
    EXPECT_EQ(ports, (std::set<int>{9400, 29500, 29501})) << pod["spec"]["containers"][0]["ports"];
  }
}

// Note [Agent injection]: an agent image that cannot be pulled is named in the job's condition
// as the init container's, with the flag that chooses it.
TEST_F(OperatorTest, AnAgentImageThatCannotBePulledIsNamed) {
  create_job("noagent", 1);
  ASSERT_TRUE(wait_pods("noagent", 1));
  json pull = {{"status",
                {{"phase", "Pending"},
                 {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "True"}}})},
                 {"initContainerStatuses",
                  json::array({{{"name", "lockstep-agent"}, {"ready", false}, {"restartCount", 0},
                                {"image", "lockstep/agent:nope"}, {"imageID", ""},
                                {"state", {{"waiting", {{"reason", "ErrImagePull"},
                                                        {"message", "pull access denied for lockstep/agent"}}}}}}})},
                 {"containerStatuses",
                  json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0}, {"image", "lockstep/trainer:test"},
                                {"imageID", ""}, {"state", {{"waiting", {{"reason", "PodInitializing"}}}}}}})}}}};
  auto r = client_->patch(res::kPods.path(ns_, "noagent-0", "status"), pull);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] {
    json j = job("noagent");
    const json* c = condition(j, "PodsBlocked");
    return c && (*c)["status"] == "True";
  }, 20s)) << job("noagent");
  json j = job("noagent");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["reason"], "ErrImagePull");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["message"],
            "pod noagent-0 cannot start: ErrImagePull: init container lockstep-agent (copies the agent from the "
            "operator's --agent-image): pull access denied for lockstep/agent");
}

// #13 item 7, Note [Progress]: the operator reads rank 0's real agent (here on loopback, the
// pod's IP as the test's kubelet reports it) and kubectl get tj shows Step, Tok/s and ETA.
TEST_F(OperatorTest, KubectlGetShowsProgressReadFromRank0sAgent) {
  int metrics_port = lockstep::free_loopback_port();
  create_job("prog", 1, "  metrics: {port: " + std::to_string(metrics_port) + "}\n");
  ASSERT_TRUE(wait_pods("prog", 1));
  // Rank 0's agent: the job's 2 workers, each reporting 400 steps 50 ms apart (20 s),
  // total_steps=400.
  lockstep::SpawnOptions so;
  so.argv = {lockstep::test::env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--",
             lockstep::test::env_or("LOCKSTEP_TEST_WORKER_BIN", "lockstep-test-worker"), "steps", "400"};
  so.env = {{"LOCKSTEP_JOB_NAME", "prog"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_NNODES", "1"},
            {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "2"}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
            {"LOCKSTEP_METRICS_PORT", std::to_string(metrics_port)}};
  so.output_path = ::testing::TempDir() + "/prog-agent-" + std::to_string(::getpid()) + ".log";
  auto agent = lockstep::Process::spawn(so);
  set_pod("prog-0", "Running");
  auto ip = client_->patch(res::kPods.path(ns_, "prog-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
  ASSERT_TRUE(ip.ok()) << ip.message();
  ASSERT_TRUE(wait_phase("prog", "Running"));
  // Two readings a second apart give a rate: every column is filled.
  std::string row;
  bool shown = eventually([&] {
    auto r = kubectl({"get", "tj", "prog", "-n", ns_, "--no-headers", "-o",
                      "custom-columns=STEP:.status.progress.steps,TOK:.status.progress.tokensPerSecond,ETA:.status.progress.eta"});
    row = r.output;
    return r.status.success() && row.find("/400") != std::string::npos && row.find("<none>") == std::string::npos;
  }, 20s);
  EXPECT_TRUE(shown) << row << job("prog")["status"].dump();
  json p = job("prog")["status"]["progress"];
  EXPECT_EQ(p.value("totalSteps", -1), 400);
  EXPECT_GT(p.value("step", 0), 0);
  EXPECT_LT(p.value("step", 400), 400);
  // 512 tokens a step per rank, at most 20 steps a second, 2 ranks: up to 20480 tokens/s
  // for the gang (rank 0's rate times the world size), less on a loaded machine.
  EXPECT_GT(p.value("tokensPerSecond", 0), 4000) << p;
  EXPECT_LT(p.value("tokensPerSecond", 0), 24000) << p;
  // The default table has the columns too.
  auto table = kubectl({"get", "tj", "prog", "-n", ns_});
  EXPECT_NE(table.output.find("STEP"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("ETA"), std::string::npos) << table.output;
  agent.terminate(10s);
}

// #14, Note [In-place restarts]: the agents restart their workers in place and say so on rank
// 0's /metrics; the operator counts it into status (summed across gang attempts), the
// Restarted condition and Events, and its own gang restarts beside them.
TEST_F(OperatorTest, InPlaceRestartsFromRank0sAgentAreCountedAcrossGangRestarts) {
  const int metrics_port = lockstep::free_loopback_port();
  FakeAgent agent(metrics_port);
  // What node 0's agent serves in gang attempt `attempt` after `restarts` in-place restarts,
  // the last at `at` for `info` (the labels of lockstep_last_restart_info).
  auto agent_text = [&](int attempt, int restarts, std::chrono::system_clock::time_point at = {},
                        const std::string& info = "") {
    std::string labels = "namespace=\"" + ns_ + "\",node_rank=\"0\",trainingjob=\"inplace\"";
    std::string t = "# TYPE lockstep_restarts_total counter\nlockstep_restarts_total{kind=\"in_place\"," + labels + "} " +
                    std::to_string(restarts) + "\nlockstep_restart_attempt{" + labels + "} " + std::to_string(attempt) + "\n";
    if (restarts > 0)
      t += "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"," + labels + "} " +
           std::to_string(std::chrono::system_clock::to_time_t(at)) + "\nlockstep_last_restart_info{kind=\"in_place\"," +
           labels + "," + info + "} 1\n";
    return t;
  };
  auto status = [&] { return job("inplace")["status"]; };
  auto restarted = [&] {
    json s = status();
    for (const auto& c : s.value("conditions", json::array()))
      if (c["type"] == "Restarted") return c;
    return json();
  };
  // The messages of the job's Events with `reason`, oldest first.
  auto events = [&](const std::string& reason) {
    auto r = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=inplace,reason=" + reason,
                      "--sort-by=.metadata.creationTimestamp", "-o", "json"});
    std::vector<std::string> out;
    json list = json::parse(r.output, nullptr, false);
    if (!list.is_discarded())
      for (const auto& e : list["items"]) out.push_back(e.value("message", ""));
    return out;
  };
  auto start_attempt = [&](int attempt) {
    ASSERT_TRUE(wait_pods("inplace", 2, attempt));
    run_all("inplace", 2);
    auto ip = client_->patch(res::kPods.path(ns_, "inplace-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
    ASSERT_TRUE(ip.ok()) << ip.message();
    ASSERT_TRUE(wait_phase("inplace", "Running"));
  };

  agent.serve(agent_text(0, 0));
  create_job("inplace", 2, "  metrics: {port: " + std::to_string(metrics_port) + "}\n  runPolicy: {inPlaceRestarts: 3}\n");
  start_attempt(0);
  for (const auto& p : pods("inplace", 0)) {
    EXPECT_EQ(env_of(p)["LOCKSTEP_IN_PLACE_RESTARTS"], "3");
    EXPECT_EQ(env_of(p)["LOCKSTEP_RESTART_POLICY"], "OnFailure");
  }
  std::this_thread::sleep_for(1500ms);  // a reading of 0: nothing to count
  EXPECT_EQ(status().value("inPlaceRestarts", -1), 0) << status();
  EXPECT_TRUE(restarted().is_null()) << restarted();

  // Two in-place restarts between two readings (the poll runs every second here).
  auto first_at = std::chrono::system_clock::now() - 5s;
  agent.serve(agent_text(0, 2, first_at, "exit_code=\"137\",rank=\"3\",reason=\"WorkerFailed\""));
  ASSERT_TRUE(eventually([&] { return status().value("inPlaceRestarts", 0) == 2; }, 15s)) << status();
  json s = status();
  EXPECT_EQ(s["restarts"], 0);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 2);
  EXPECT_EQ(s["phase"], "Running");
  json c = restarted();
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "InPlaceRestart");
  EXPECT_EQ(c["message"], "rank 3 exited with code 137 (WorkerFailed); every worker restarted in place in the same pods "
                          "(2 of 3 in gang attempt 0)");
  EXPECT_EQ(c["lastTransitionTime"], rfc3339(first_at)) << "the restart's time, from the agent";
  ASSERT_TRUE(eventually([&] { return !events("InPlaceRestart").empty(); })) << operator_->log().substr(0, 2000);
  auto in_place_events = events("InPlaceRestart");
  ASSERT_EQ(in_place_events.size(), 1u) << testing::PrintToString(in_place_events);
  EXPECT_EQ(in_place_events[0].rfind("2 in-place restarts since the last reading; the last: rank 3 exited", 0), 0u)
      << in_place_events[0];
  auto type = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=inplace,reason=InPlaceRestart",
                       "-o", "jsonpath={.items[*].type}"});
  EXPECT_EQ(type.output, "Warning");
  // kubectl get tj: Restarts (gang) 0, In-Place 2.
  auto row = kubectl({"get", "tj", "inplace", "-n", ns_, "--no-headers"});
  EXPECT_TRUE(std::regex_search(row.output, std::regex(R"(^inplace\s+Running\s+2\s+2\s+0\s+2\s)"))) << row.output;
  EXPECT_NE(operator_->http("/metrics").find("lockstep_restarts_total{kind=\"gang\",namespace=\"" + ns_ +
                                              "\",trainingjob=\"inplace\"} 0"),
            std::string::npos);

  // Past the budget a pod fails: the operator restarts the gang.
  set_pod("inplace-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return status().value("restarts", 0) == 1; })) << status();
  s = status();
  EXPECT_EQ(s["inPlaceRestarts"], 2);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 0);
  c = restarted();
  EXPECT_EQ(c["reason"], "GangRestart");
  EXPECT_NE(c["message"].get<std::string>().find("restarting the gang as attempt 1 of 3, after 2 in-place restarts in attempt 0"),
            std::string::npos) << c;
  ASSERT_TRUE(eventually([&] { return events("GangRestart").size() == 1; })) << testing::PrintToString(events("GangRestart"));
  ASSERT_TRUE(eventually([&] {
    return operator_->http("/metrics").find("lockstep_restarts_total{kind=\"gang\",namespace=\"" + ns_ +
                                            "\",trainingjob=\"inplace\"} 1") != std::string::npos;
  })) << operator_->http("/metrics");

  // Attempt 1 runs while the endpoint still shows attempt 0's agent: it counts for nothing.
  start_attempt(1);
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(status().value("inPlaceRestarts", -1), 2) << status();
  // The new pods' agent counts from 0: its first in-place restart makes 3 for the job.
  auto second_at = std::chrono::system_clock::now() - 1s;
  agent.serve(agent_text(1, 1, second_at, "rank=\"1\",reason=\"Stall\""));
  ASSERT_TRUE(eventually([&] { return status().value("inPlaceRestarts", 0) == 3; }, 15s)) << status();
  s = status();
  EXPECT_EQ(s["restarts"], 1);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 1);
  c = restarted();
  EXPECT_EQ(c["reason"], "InPlaceRestart");
  EXPECT_EQ(c["message"], "rank 1 reported no step in time (Stall); every worker restarted in place in the same pods "
                          "(1 of 3 in gang attempt 1)");
  EXPECT_EQ(c["lastTransitionTime"], rfc3339(second_at));
  ASSERT_TRUE(eventually([&] { return events("InPlaceRestart").size() == 2; })) << testing::PrintToString(events("InPlaceRestart"));
  EXPECT_EQ(events("InPlaceRestart").back(), c["message"]);
  EXPECT_EQ(events("GangRestart").size(), 1u);
}

// What a real agent of node 0 serves for its ranks 0 and 1 (trimmed to the progress series):
// every series from its start, at 0 until a step report says otherwise.
std::string agent_progress_page(const std::string& ns, const std::string& job, long long step, long long total,
                                long long reports, long long tokens) {
  std::string t;
  for (int rank : {0, 1}) {
    std::string l = "{namespace=\"" + ns + "\",node_rank=\"0\",rank=\"" + std::to_string(rank) + "\",trainingjob=\"" + job + "\"}";
    t += "lockstep_step" + l + " " + std::to_string(step) + "\nlockstep_total_steps" + l + " " + std::to_string(total) +
         "\nlockstep_steps_total" + l + " " + std::to_string(reports) + "\nlockstep_tokens_total" + l + " " +
         std::to_string(tokens) + "\n";
  }
  return t;
}

// #25, Note [Progress schedule]: at the default --progress-period (30 s), a job's first step
// shows within seconds, not a period later; Tok/s comes with the next reading moments after;
// then the readings go back to the period. Before the first step nothing shows (it was "0/0"),
// and a program that does not say its total shows the step alone.
TEST_F(OperatorTest, TheFirstStepShowsWithinSecondsAtTheDefaultProgressPeriod) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(), {"--namespace", ns_, "--leader-elect=false"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  const int metrics_port = lockstep::free_loopback_port();
  FakeAgent agent(metrics_port);
  agent.serve(agent_progress_page(ns_, "first", 0, 0, 0, 0));  // the agent before any step report
  create_job("first", 1, "  metrics: {port: " + std::to_string(metrics_port) + "}\n");
  ASSERT_TRUE(wait_pods("first", 1));
  set_pod("first-0", "Running");
  auto ip = client_->patch(res::kPods.path(ns_, "first-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
  ASSERT_TRUE(ip.ok()) << ip.message();
  ASSERT_TRUE(wait_phase("first", "Running"));
  auto progress = [&] { return job("first")["status"].value("progress", json::object()); };
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Read 2 s and 5 s after it runs (then 9.5 s, ...): no step yet, so nothing to show.
  ASSERT_TRUE(eventually([&] { return agent.gets() >= 2; }, 12s)) << agent.gets() << " readings\n" << op.log();
  std::this_thread::sleep_for(300ms);  // time for a (wrong) status write
  EXPECT_TRUE(progress().empty()) << progress();

  // The first step, from a program that does not say its total.
  agent.serve(agent_progress_page(ns_, "first", 12, 0, 12, 6144));
  auto first_step = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return progress().value("steps", "") == "12"; }, 25s)) << progress();
  double shown_after = since(first_step);
  std::cout << "[ the first step showed " << shown_after << " s after it was served; --progress-period 30s ]\n";
  EXPECT_LT(shown_after, 10.0) << "well under the 30 s period";
  EXPECT_FALSE(progress().contains("totalSteps")) << progress();
  // The next reading comes soon, for a rate: Tok/s, and still no ETA without a total.
  agent.serve(agent_progress_page(ns_, "first", 40, 0, 40, 20480));
  auto shown = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return progress().contains("tokensPerSecond"); }, 15s)) << progress();
  EXPECT_LT(since(shown), 8.0);
  json p = progress();
  EXPECT_EQ(p.value("steps", ""), "40");
  EXPECT_GT(p.value("tokensPerSecond", 0), 0) << p;
  EXPECT_FALSE(p.contains("eta")) << p;

  // With the columns filled, the period again: no reading for the next 6 s.
  int readings = agent.gets();
  agent.serve(agent_progress_page(ns_, "first", 90, 0, 90, 46080));
  std::this_thread::sleep_for(6s);
  EXPECT_EQ(agent.gets(), readings) << "read again within 6 s at a 30 s period";
  EXPECT_EQ(progress().value("steps", ""), "40");
}

// #25, Note [Final progress]: a job's pods and their /metrics are gone once it finished, so
// rank 0's real agent leaves the last step in its termination message; the kubelet (the test)
// puts that into the pod's status, and the Succeeded job keeps showing it. Here no reading is
// ever taken (the pod has no IP), so the step can only come from that message.
TEST_F(OperatorTest, ASucceededJobKeepsRank0sLastStepFromItsTerminationMessage) {
  create_job("final", 1);
  ASSERT_TRUE(wait_pods("final", 1));
  set_pod("final-0", "Running");
  ASSERT_TRUE(wait_phase("final", "Running"));
  // Rank 0's agent, its 2 workers run to the end: the termination message it leaves.
  auto run_agent = [&](const std::vector<std::string>& worker) {
    const std::string log = ::testing::TempDir() + "/final-termination-log-" + std::to_string(::getpid());
    std::filesystem::remove(log);
    lockstep::SpawnOptions so;
    so.argv = {lockstep::test::env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--",
               lockstep::test::env_or("LOCKSTEP_TEST_WORKER_BIN", "lockstep-test-worker")};
    so.argv.insert(so.argv.end(), worker.begin(), worker.end());
    so.env = {{"LOCKSTEP_JOB_NAME", "final"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_NNODES", "1"},
              {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "2"}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
              {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
              {"LOCKSTEP_METRICS_PORT", std::to_string(lockstep::free_loopback_port())},
              {"LOCKSTEP_TERMINATION_LOG", log}};
    so.output_path = ::testing::TempDir() + "/final-agent-" + std::to_string(::getpid()) + ".log";
    auto agent = lockstep::Process::spawn(so);
    auto st = agent.wait_for(120s);
    EXPECT_TRUE(st.has_value() && st->shell_code() == 0) << lockstep::test::read_file(so.output_path);
    return lockstep::test::read_file(log);
  };
  // Steps with a total (20 of 20), then steps without one (30, as a Python program's).
  EXPECT_EQ(run_agent({"steps", "20"}), "lockstep-progress step=20 total=20\n");
  const std::string message = run_agent({"compute", "30", "1"});
  EXPECT_EQ(message, "lockstep-progress step=30\n");
  set_pod("final-0", "Succeeded", 0, "Completed", rfc3339(std::chrono::system_clock::now()), message);
  ASSERT_TRUE(wait_phase("final", "Succeeded"));
  json p = job("final")["status"]["progress"];
  EXPECT_EQ(p.value("steps", ""), "30") << p;
  EXPECT_EQ(p.value("step", -1), 30) << p;
  EXPECT_FALSE(p.contains("totalSteps")) << p;
  auto row = kubectl({"get", "tj", "final", "-n", ns_, "--no-headers"});
  EXPECT_TRUE(std::regex_search(row.output, std::regex(R"(^final\s+Succeeded\s+1\s+0\s+0\s+0\s+30\s)"))) << row.output;
  std::this_thread::sleep_for(2s);  // and it stays
  EXPECT_EQ(job("final")["status"]["progress"], p);
}

// #25: what rank 0 ran to wins over the last reading (here an early stop at 180 of 200, read at
// 10); another rank's pod does not speak for the job, and a line that is not exactly the
// agent's changes nothing (the job then shows every step done, as it always did).
TEST_F(OperatorTest, OnlyRank0sOwnWellFormedLineGivesTheFinalStep) {
  const int port_early = lockstep::free_loopback_port(), port_forged = lockstep::free_loopback_port();
  FakeAgent early(port_early), forged(port_forged);
  early.serve(agent_progress_page(ns_, "early", 10, 200, 10, 5120));
  forged.serve(agent_progress_page(ns_, "forged", 10, 200, 10, 5120));
  create_job("early", 2, "  metrics: {port: " + std::to_string(port_early) + "}\n");
  create_job("forged", 1, "  metrics: {port: " + std::to_string(port_forged) + "}\n");
  for (const std::string name : {"early", "forged"}) {
    ASSERT_TRUE(wait_pods(name, name == "early" ? 2 : 1));
    run_all(name, name == "early" ? 2 : 1);
    auto ip = client_->patch(res::kPods.path(ns_, name + "-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
    ASSERT_TRUE(ip.ok()) << ip.message();
    ASSERT_TRUE(wait_phase(name, "Running"));
    ASSERT_TRUE(eventually([&] { return job(name)["status"].value("progress", json::object()).value("steps", "") == "10/200"; }))
        << job(name)["status"];
  }
  std::string now = rfc3339(std::chrono::system_clock::now());
  set_pod("early-1", "Succeeded", 0, "Completed", now, "lockstep-progress step=999 total=999\n");
  set_pod("early-0", "Succeeded", 0, "Completed", now, "lockstep-progress step=180 total=200\n");
  set_pod("forged-0", "Succeeded", 0, "Completed", now, "lockstep-progress step=180 total=200 namespace=other\n");
  ASSERT_TRUE(wait_phase("early", "Succeeded"));
  ASSERT_TRUE(wait_phase("forged", "Succeeded"));
  json p = job("early")["status"]["progress"];
  EXPECT_EQ(p.value("steps", ""), "180/200") << p;
  EXPECT_EQ(p.value("eta", ""), "0s") << p;
  EXPECT_EQ(job("forged")["status"]["progress"].value("steps", ""), "200/200") << job("forged")["status"];
}

TEST_F(OperatorTest, SuspendRemovesPodsAndResumeRecreatesThem) {
  create_job("susp", 2);
  ASSERT_TRUE(wait_pods("susp", 2));
  auto r = client_->patch(res::kTrainingJobs.path(ns_, "susp"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(wait_phase("susp", "Suspended"));
  ASSERT_TRUE(wait_pods("susp", 0));
  EXPECT_EQ((*condition(job("susp"), "Suspended"))["status"], "True");
  r = client_->patch(res::kTrainingJobs.path(ns_, "susp"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(wait_pods("susp", 2));
  EXPECT_TRUE(wait_phase("susp", "Pending"));
  EXPECT_EQ((*condition(job("susp"), "Suspended"))["status"], "False");
}

TEST_F(OperatorTest, ActiveDeadlineFailsTheJob) {
  create_job("late", 2, "  runPolicy: {activeDeadlineSeconds: 2}\n");
  ASSERT_TRUE(wait_pods("late", 2));
  run_all("late", 2);
  ASSERT_TRUE(wait_phase("late", "Failed", 15s));
  EXPECT_EQ((*condition(job("late"), "Failed"))["reason"], "DeadlineExceeded");
  EXPECT_TRUE(wait_pods("late", 0));
}

TEST_F(OperatorTest, TtlDeletesTheFinishedJob) {
  create_job("ttl", 1, "  runPolicy: {ttlSecondsAfterFinished: 1}\n");
  ASSERT_TRUE(wait_pods("ttl", 1));
  set_pod("ttl-0", "Succeeded", 0);
  ASSERT_TRUE(wait_phase("ttl", "Succeeded"));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kTrainingJobs.path(ns_, "ttl")).not_found(); }, 15s));
}

TEST_F(OperatorTest, DeletingTheJobRemovesEverythingItOwns) {
  create_job("gone", 2);
  ASSERT_TRUE(wait_pods("gone", 2));
  ASSERT_TRUE(eventually([&] { return client_->get(res::kPodGroups.path(ns_, "gone")).ok(); }));
  auto r = client_->remove(res::kTrainingJobs.path(ns_, "gone"));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(wait_pods("gone", 0));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kServices.path(ns_, "gone")).not_found(); }));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kPodGroups.path(ns_, "gone")).not_found(); }));
}

// Note [Job isolation]: spec.isolation NetworkPolicy gets a policy owned by the job that selects
// its pods and admits the job on every port and the operator's and the monitoring namespaces on
// metrics.port; isolation None deletes it, and so does deleting the job (the operator removes
// what a deleted job owned; there is no garbage collector in this tier). Nothing here enforces
// it: see docs/security.md.
TEST_F(OperatorTest, IsolationNetworkPolicyFollowsTheJob) {
  create_job("iso", 2, "  isolation: NetworkPolicy\n  metrics: {port: 9500}\n");
  ASSERT_TRUE(wait_pods("iso", 2));
  std::string uid = job("iso")["metadata"]["uid"];
  lockstep::kube::Response np;
  ASSERT_TRUE(eventually([&] { return (np = client_->get(res::kNetworkPolicies.path(ns_, "iso"))).ok(); }))
      << operator_->log();
  const json& owner = np.body["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["uid"], uid);
  EXPECT_EQ(owner["controller"], true);
  const json& spec = np.body["spec"];
  EXPECT_EQ(spec["policyTypes"], json({"Ingress"}));
  const json& selector = spec["podSelector"]["matchLabels"];
  EXPECT_EQ(selector, json({{lockstep::contract::kLabelJobName, "iso"}}));
  for (const auto& pod : pods("iso"))  // it selects every pod of the job
    for (const auto& [k, v] : selector.items()) EXPECT_EQ(pod["metadata"]["labels"].value(k, ""), v);
  ASSERT_EQ(spec["ingress"].size(), 3u) << spec.dump(2);
  EXPECT_EQ(spec["ingress"][0]["from"], json::parse(R"([{"podSelector": {"matchLabels": {"lockstep.dev/job-name": "iso"}}}])"));
  EXPECT_FALSE(spec["ingress"][0].contains("ports")) << "ranks connect on ephemeral ports";
  std::set<std::string> namespaces;
  for (int i : {1, 2}) {
    const json& rule = spec["ingress"][i];
    namespaces.insert(rule["from"][0]["namespaceSelector"]["matchLabels"].value("kubernetes.io/metadata.name", ""));
    EXPECT_EQ(rule["ports"], json::parse(R"([{"protocol": "TCP", "port": 9500}])")) << rule;
  }
  EXPECT_EQ(namespaces, (std::set<std::string>{"lockstep-system", "monitoring"}));

  // Back to None: the policy goes, the job stays.
  ASSERT_TRUE(kubectl({"patch", "tj", "iso", "-n", ns_, "--type", "merge", "-p", R"({"spec": {"isolation": "None"}})"})
                  .status.success());
  EXPECT_TRUE(eventually([&] { return client_->get(res::kNetworkPolicies.path(ns_, "iso")).not_found(); }))
      << operator_->log();
  EXPECT_EQ(pods("iso").size(), 2u);

  // And again: recreated; deleting the job removes it.
  ASSERT_TRUE(kubectl({"patch", "tj", "iso", "-n", ns_, "--type", "merge", "-p",
                       R"({"spec": {"isolation": "NetworkPolicy"}})"}).status.success());
  ASSERT_TRUE(eventually([&] { return client_->get(res::kNetworkPolicies.path(ns_, "iso")).ok(); })) << operator_->log();
  ASSERT_TRUE(client_->remove(res::kTrainingJobs.path(ns_, "iso")).ok());
  EXPECT_TRUE(eventually([&] { return client_->get(res::kNetworkPolicies.path(ns_, "iso")).not_found(); }))
      << operator_->log();
}

// A job without spec.isolation gets no policy, and one the user made with the job's name and
// label is not the operator's to delete.
TEST_F(OperatorTest, IsolationNoneCreatesNoPolicyAndLeavesAUsersAlone) {
  json users = {{"apiVersion", "networking.k8s.io/v1"}, {"kind", "NetworkPolicy"},
                {"metadata", {{"name", "open"}, {"labels", {{lockstep::contract::kLabelJobName, "open"}}}}},
                {"spec", {{"podSelector", json::object()}, {"policyTypes", json::array({"Ingress"})}}}};
  ASSERT_TRUE(client_->create(res::kNetworkPolicies.path(ns_), users).ok());
  create_job("open", 1);
  ASSERT_TRUE(wait_pods("open", 1));
  ASSERT_TRUE(eventually([&] { return client_->get(res::kServices.path(ns_, "open")).ok(); }));
  std::this_thread::sleep_for(2s);  // a reconcile or two
  auto np = client_->get(res::kNetworkPolicies.path(ns_, "open"));
  ASSERT_TRUE(np.ok()) << np.message();
  EXPECT_FALSE(np.body["metadata"].contains("ownerReferences")) << np.body.dump();
}

TEST_F(OperatorTest, AFailedPodCreationIsReportedAsAnEvent) {
  create_job("nopc", 1, "  scheduling: {priorityClassName: does-not-exist}\n");
  EXPECT_TRUE(eventually([&] {
    auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=nopc,reason=FailedCreatePod",
                       "-o", "jsonpath={.items[*].message}"});
    return ev.output.find("does-not-exist") != std::string::npos;
  })) << "no FailedCreatePod event naming the missing PriorityClass";
  EXPECT_TRUE(pods("nopc").empty());
}

// Note [UTF-8 text]: a pod create refused with a long message in 3-byte characters (here an
// admission policy's words) is reported as an Event whose text, cut at 1,024 bytes, would end
// in the middle of a character. The cut is made on a boundary instead: the Event is recorded and
// the job's status is written (a cut character made the reconcile throw before its status
// write, on every retry).
TEST_F(OperatorTest, AFailedPodCreateWhoseMessageIsCutMidCharacterStillGetsItsStatusWritten) {
  const std::string policy = ns_ + "-refuse-pods";
  struct Cleanup {
    std::string policy;
    ~Cleanup() {
      kubectl({"delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, "--ignore-not-found"});
    }
  } cleanup{policy};
  std::string euros;  // 400 x U+20AC, 3 bytes each
  for (int i = 0; i < 400; ++i) euros += "\xE2\x82\xAC";
  // The words the policy gives, shifted by `pad` bytes so that byte 1,024 of the operator's Event
  // text ("cannot create cut-0: " + the API server's message) falls inside a character.
  auto words = [&](int pad) { return "[" + std::string(pad, 'x') + "]" + euros; };
  auto apply_policy = [&](int pad) {
    std::string yaml =
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: " + policy +
        "}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n"
        "    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        "  validations:\n  - expression: \"false\"\n    messageExpression: \"'" + words(pad) + "'\"\n---\n"
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: " + policy +
        "}\nspec:\n  policyName: " + policy + "\n  validationActions: [Deny]\n  matchResources:\n"
        "    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: " + ns_ + "}}\n";
    auto r = kubectl({"apply", "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output;
  };
  // What the operator will say, read from a dry-run create of its pod once the policy refuses it.
  const json probe = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "cut-0"}}},
                      {"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:test"}}})}}}};
  std::string event_text;
  for (int pad = 0; pad < 3; ++pad) {
    apply_policy(pad);
    ASSERT_TRUE(eventually([&] {
      auto r = client_->create(res::kPods.path(ns_) + "?dryRun=All", probe);
      if (r.ok() || r.message().find(words(pad)) == std::string::npos) return false;
      event_text = "cannot create cut-0: " + r.message();
      return true;
    }, 20s)) << "the policy does not refuse pods in " << ns_;
    if (event_text.size() > 1024 && (static_cast<unsigned char>(event_text[1024]) & 0xC0) == 0x80) break;
  }
  ASSERT_GT(event_text.size(), 1024u);
  ASSERT_EQ(static_cast<unsigned char>(event_text[1024]) & 0xC0, 0x80) << "byte 1,024 is not inside a character";

  create_job("cut", 1);
  ASSERT_TRUE(wait_phase("cut", "Pending", 30s)) << "no status written: " << job("cut") << "\n" << operator_->log();
  std::string kept;
  ASSERT_TRUE(eventually([&] {
    kept = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=cut,reason=FailedCreatePod",
                    "-o", "jsonpath={.items[0].message}"}).output;
    return !kept.empty();
  }, 20s)) << "no FailedCreatePod Event";
  EXPECT_GE(kept.size(), 1022u);
  EXPECT_LT(kept.size(), 1024u) << "cut at the character's start, not in it";
  EXPECT_EQ(event_text.compare(0, kept.size(), kept), 0) << kept;
  EXPECT_EQ(lockstep::text::utf8_invalid_at(kept), std::string::npos);
  EXPECT_TRUE(pods("cut").empty());
  std::cout << "Event text " << event_text.size() << " bytes, byte 1024 inside a character; recorded "
            << kept.size() << " bytes" << std::endl;
}

TEST_F(OperatorTest, PodsWithTheJobsLabelThatItDoesNotControlAreLeftAlone) {
  // Two bare pods carry the job's label, no owner: one with a name of its own, one with the
  // name of the job's pod 1. Neither may be deleted; pod 1 waits for its name.
  auto bare = [&](const std::string& name) {
    json pod = {{"apiVersion", "v1"}, {"kind", "Pod"},
                {"metadata", {{"name", name}, {"labels", {{lockstep::contract::kLabelJobName, "mine"}}}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
    auto r = client_->create(res::kPods.path(ns_), pod);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.body["metadata"].value("uid", "");
  };
  std::string helper_uid = bare("mine-helper"), squatter_uid = bare("mine-1");
  create_job("mine", 2);
  ASSERT_TRUE(eventually([&] { return client_->get(res::kPods.path(ns_, "mine-0")).ok(); }));
  auto events = [&] {
    return kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=mine,reason=ForeignPod", "-o",
                    "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"}).output;
  };
  ASSERT_TRUE(eventually([&] { return events().find("pod mine-1 ") != std::string::npos; })) << events();
  std::this_thread::sleep_for(1500ms);  // time enough for a wrong delete
  for (auto [name, uid] : {std::pair{"mine-helper", helper_uid}, std::pair{"mine-1", squatter_uid}}) {
    auto r = client_->get(res::kPods.path(ns_, name));
    ASSERT_TRUE(r.ok()) << name << " was deleted";
    EXPECT_EQ(r.body["metadata"]["uid"], uid) << name << " was replaced";
    EXPECT_FALSE(r.body["metadata"].contains("deletionTimestamp")) << name << " is being deleted";
  }
  std::string ev = events();
  EXPECT_NE(ev.find("pod mine-1 is labelled lockstep.dev/job-name=mine but has no controller"), std::string::npos) << ev;
  EXPECT_NE(ev.find("creates its own mine-1 once that pod is deleted"), std::string::npos) << ev;
  EXPECT_NE(ev.find("pod mine-helper "), std::string::npos) << ev;
  // The user removes the squatter: the job gets its pod 1.
  ASSERT_TRUE(client_->remove(res::kPods.path(ns_, "mine-1"), {{"gracePeriodSeconds", 0}}).ok());
  ASSERT_TRUE(eventually([&] {
    auto r = client_->get(res::kPods.path(ns_, "mine-1"));
    return r.ok() && r.body["metadata"]["uid"] != squatter_uid &&
           r.body["metadata"].value("ownerReferences", json::array()).size() == 1;
  })) << operator_->log().substr(0, 3000);
  EXPECT_TRUE(client_->get(res::kPods.path(ns_, "mine-helper")).ok());
}

TEST_F(OperatorTest, ServesHealthReadinessAndMetrics) {
  EXPECT_NE(operator_->http("/healthz").find("ok\n200"), std::string::npos);
  EXPECT_NE(operator_->http("/readyz").find("ok\n200"), std::string::npos);
  std::string m = operator_->http("/metrics");
  for (const char* series : {"lockstep_operator_reconcile_duration_seconds_bucket", "lockstep_operator_reconcile_errors_total",
                             "lockstep_operator_workqueue_depth", "lockstep_operator_api_requests_total{code=\"201\",verb=\"POST\"}",
                             "lockstep_operator_trainingjobs{phase=\"Running\"}", "lockstep_operator_pods_created_total",
                             "lockstep_operator_gang_restarts_total", "lockstep_operator_leader 1",
                             "lockstep_operator_node_watch 1"})
    EXPECT_NE(m.find(series), std::string::npos) << series << " missing from:\n" << m.substr(0, 3000);
}

TEST_F(OperatorTest, OperatorRestartedMidJobCreatesNoDuplicates) {
  // An operator that creates one pod at a time, 10 requests a second, is SIGKILLed after
  // its first pods of 30 appear; a fresh one finishes the job. Every pod must be created
  // exactly once: none twice, none deleted and recreated.
  const int nodes = 30;
  Paused paused(operator_);  // the suite's operator watches every namespace
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--namespace", ns_, "--leader-elect=false"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  };
  PodEvents events(*client_, ns_, std::string(lockstep::contract::kLabelJobName) + "=dup");
  auto op = start({"--create-parallelism=1", "--kube-api-qps=10", "--kube-api-burst=1"});
  ASSERT_TRUE(op->wait_log("caches synced")) << op->log();
  create_job("dup", nodes);
  ASSERT_TRUE(eventually([&] { return pods("dup").size() >= 2; })) << op->log();
  op->process().signal(SIGKILL);
  op->process().wait();
  std::map<std::string, std::string> before;
  for (const auto& p : pods("dup")) before[p["metadata"]["name"]] = p["metadata"]["uid"];
  ASSERT_GT(before.size(), 0u);
  ASSERT_LT(static_cast<int>(before.size()), nodes) << "every pod existed before the kill: nothing was mid-creation";
  std::cout << "[ operator killed with " << before.size() << " of " << nodes << " pods created ]\n";

  auto op2 = start({});
  ASSERT_TRUE(wait_pods("dup", nodes)) << op2->log();
  std::this_thread::sleep_for(1500ms);  // time for a duplicate or a replacement to show
  std::set<std::string> names, uids;
  for (const auto& p : pods("dup")) {
    std::string name = p["metadata"]["name"];
    names.insert(name);
    uids.insert(p["metadata"]["uid"].get<std::string>());
    auto it = before.find(name);
    if (it != before.end()) {
      EXPECT_EQ(it->second, p["metadata"]["uid"]) << name << " was recreated after the restart";
    }
  }
  std::set<std::string> want;
  for (int i = 0; i < nodes; ++i) want.insert("dup-" + std::to_string(i));
  EXPECT_EQ(names, want);
  EXPECT_EQ(uids.size(), static_cast<size_t>(nodes));
  auto seen = events.seen();
  EXPECT_EQ(seen.count("ADDED"), static_cast<size_t>(nodes)) << "pods created in all";
  EXPECT_EQ(seen.count("DELETED"), 0u) << "a pod was deleted";
}

TEST_F(OperatorTest, SurvivesAnApiserverRestartMidWatch) {
  // The suite's operator's lease (renew deadline 240 s) outlasts an apiserver restart, as the
  // default one (10 s) does in a cluster.
  create_job("before", 1);
  ASSERT_TRUE(wait_pods("before", 1));
  control_plane()->restart_apiserver();
  // The watches reconnect: a job created after the restart is acted on, and pod updates of
  // the earlier job are still seen.
  create_job("after", 2);
  EXPECT_TRUE(wait_pods("after", 2, 0)) << operator_->log().substr(0, 4000);
  set_pod("before-0", "Succeeded", 0);
  EXPECT_TRUE(wait_phase("before", "Succeeded"));
}

TEST_F(OperatorTest, ResyncReconcilesAnIdleJobWithoutWritingIt) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(),
                     {"--namespace", ns_, "--leader-elect=false", "--resync-period=1s"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  create_job("idle", 1);
  ASSERT_TRUE(wait_pods("idle", 1));
  ASSERT_TRUE(wait_phase("idle", "Pending"));
  std::this_thread::sleep_for(1500ms);  // settled: no event will come for this job now
  std::string rv = job("idle")["metadata"]["resourceVersion"];
  const std::string series = "lockstep_operator_reconcile_duration_seconds_count";
  double before = metric(op.http("/metrics"), series);
  ASSERT_GE(before, 1) << op.http("/metrics");
  std::this_thread::sleep_for(3500ms);
  double after = metric(op.http("/metrics"), series);
  EXPECT_GE(after - before, 2) << "no periodic reconcile of an idle job in 3.5 s with --resync-period=1s";
  EXPECT_EQ(job("idle")["metadata"]["resourceVersion"], rv) << "a resync wrote the unchanged job";
}

TEST_F(OperatorTest, AJobChangedDuringAReconcileMakesItsStatusWriteConflictAndItsEventsWait) {
  // A gang restart deletes 40 pods one request at a time; the job's spec changes in the
  // middle. The status computed before the change must not be written (409, retried),
  // and the retried reconcile must not record a second GangRestart for the one restart.
  const int nodes = 40;
  Paused paused(operator_);
  // The race needs the spec change to land while the deletes are under way. Unthrottled,
  // 40 deletes take well under 100 ms on a fast machine (CI once raced three times in vain),
  // so the operator's client is held to 20 requests a second: the deletes take 2 s.
  OperatorProcess op(control_plane()->kubeconfig(),
                     {"--namespace", ns_, "--leader-elect=false", "--create-parallelism=1", "--kube-api-qps=20",
                      "--kube-api-burst=1"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  // On a loaded machine the test may still see the pods only after all 40 went and the
  // status was written. Such a try tests nothing, so it is made again with a new job
  // (three tries at most).
  std::string race;
  std::unique_ptr<History> history;
  bool raced = false;
  for (int attempt = 0; attempt < 3 && !raced; ++attempt) {
    race = "race" + std::to_string(attempt);
    create_job(race, nodes);
    ASSERT_TRUE(wait_pods(race, nodes));
    run_all(race, nodes);
    ASSERT_TRUE(wait_phase(race, "Running"));
    history = std::make_unique<History>(*client_, res::kTrainingJobs.path(ns_), race);
    set_pod(race + "-0", "Failed", 137);
    ASSERT_TRUE(eventually([&] { return static_cast<int>(pods(race, 0).size()) < nodes; }, 10s));
    auto r = client_->patch(res::kTrainingJobs.path(ns_, race), {{"spec", {{"runPolicy", {{"backoffLimit", 7}}}}}});
    ASSERT_TRUE(r.ok()) << r.message();
    raced = r.body["status"].value("restarts", -1) == 0;
    if (!raced) std::cerr << "[operator] " << race << ": the spec changed only after the status write; trying again\n";
  }
  ASSERT_TRUE(raced) << "three times the spec changed only after the status write: no race was tested";
  ASSERT_TRUE(eventually([&] { return job(race)["status"].value("restarts", 0) == 1; })) << op.log();
  ASSERT_TRUE(wait_pods(race, nodes, 1));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(job(race)["status"]["restarts"], 1);

  // Each status write carries the generation it was computed from, which is current.
  json prev;
  int status_writes = 0;
  for (const auto& v : history->versions()) {
    if (!prev.is_null() && v.value("status", json()) != prev.value("status", json())) {
      ++status_writes;
      EXPECT_EQ(v["status"].value("observedGeneration", 0), v["metadata"].value("generation", 0))
          << "a status computed from generation " << v["status"].value("observedGeneration", 0)
          << " was written over generation " << v["metadata"].value("generation", 0);
    }
    prev = v;
  }
  EXPECT_GE(status_writes, 1);
  EXPECT_NE(op.http("/metrics").find("lockstep_operator_api_requests_total{code=\"409\",verb=\"PATCH\"}"),
            std::string::npos) << "the status write did not conflict";
  auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=" + race + ",reason=GangRestart",
                     "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"});
  int events = 0;
  std::istringstream lines(ev.output);
  for (std::string line; std::getline(lines, line);) events += !line.empty();
  EXPECT_EQ(events, 1) << "GangRestart events for one restart:\n" << ev.output;
}

// The process environment, as NAME=value lines.
std::set<std::string> environment() {
  std::set<std::string> out;
  for (char** e = environ; *e; ++e) out.insert(*e);
  return out;
}
// As it was before main(), before the suite's first Client.
const std::set<std::string> kStartEnvironment = environment();

TEST_F(OperatorTest, AClientTrustsItsClusterCaAloneAndLeavesTheEnvironmentAlone) {
  EXPECT_EQ(environment(), kStartEnvironment) << "the suite's Client changed the process environment";
  RestConfig config = RestConfig::from_kubeconfig(control_plane()->kubeconfig());
  ASSERT_FALSE(config.ca_pem.empty());
  {
    Client client(config);
    auto r = client.get("/version");
    EXPECT_TRUE(r.ok()) << "TLS with the cluster CA: " << r.message();
  }
  EXPECT_EQ(environment(), kStartEnvironment) << "constructing a Client changed the process environment";

  // Who the API server takes each user for: the token's, and the client certificate's
  // (kubeconfig context lockstep-test-cert), both through our TLS transport.
  auto whoami = [](const RestConfig& c) {
    Client client(c);
    auto r = client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}});
    EXPECT_TRUE(r.ok()) << r.message();
    return r.body.value("/status/userInfo"_json_pointer, nlohmann::json::object());
  };
  EXPECT_EQ(whoami(config).value("username", ""), "lockstep-admin");
  RestConfig cert = RestConfig::from_kubeconfig(control_plane()->kubeconfig(), "lockstep-test-cert");
  ASSERT_FALSE(cert.client_cert_pem.empty());
  auto cert_user = whoami(cert);
  EXPECT_NE(cert_user.value("groups", nlohmann::json::array()).dump().find("system:masters"), std::string::npos)
      << cert_user.dump();
  RestConfig bad_token = config;
  bad_token.token = "not-the-token";
  EXPECT_EQ(Client(bad_token).get("/api/v1/namespaces").status, 401);

  // Another CA: the API server's certificate must not verify.
  std::string dir = ::testing::TempDir() + "/other-ca-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto gen = lockstep::run_capture({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                                    "-subj", "/CN=not-the-cluster-ca", "-keyout", dir + "/ca.key", "-out", dir + "/ca.crt"});
  ASSERT_TRUE(gen.status.success()) << gen.output;
  RestConfig wrong = config;
  wrong.ca_pem = lockstep::test::read_text(dir + "/ca.crt");
  Client other(wrong);
  auto r = other.get("/version");
  EXPECT_EQ(r.status, 0) << "verified against a CA that did not sign the API server's certificate";
  EXPECT_FALSE(r.error.empty());
  std::filesystem::remove_all(dir);
}

// Threads of this process, from /proc/self/status.
int thread_count() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

TEST_F(OperatorTest, AnInformerDestroyedMidWatchEndsItsThreadAtOnce) {
  // The watch is open for 240 s (the informer's default); destroying the informer must
  // cancel it and join its thread rather than leave a detached thread using the object.
  auto cycle = [&] {
    lockstep::kube::InformerBase::Options options;
    options.ns = ns_;
    using PodNames = lockstep::kube::Informer<std::string>;
    auto inf = std::make_unique<PodNames>(*client_, res::kPods, options,
                                          PodNames::Typed{[](nlohmann::json& p) { return lockstep::kube::object_key(p); }, {}, {}, {}},
                                          nullptr);
    inf->start();
    ASSERT_TRUE(eventually([&] { return inf->synced(); }, 10s));
    std::this_thread::sleep_for(300ms);  // blocked in the watch's read by now
    auto t0 = std::chrono::steady_clock::now();
    inf.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the destructor waited for the watch to end by itself";
  };
  cycle();  // warm-up: the HTTP client's thread pool starts on first use
  int before = thread_count();
  for (int i = 0; i < 5; ++i) cycle();
  EXPECT_EQ(thread_count(), before) << "an informer's thread outlived it";
}

TEST_F(OperatorTest, AnInformerReadsEventsOfAnySizeAndNeverParsesWhatItPrunes) {
  // Note [Reading a watch] and [Pruned parsing]: events are read in chunks of whatever has
  // arrived, so one larger than a chunk (64 KiB) spans reads; a small one after it must come
  // out whole and at once. The conversion sees the object without its pruned parts.
  struct Seen {
    std::string name, note;
    bool spec = false, managed_fields = false;
    size_t note_size = 0;
  };
  using Pods = lockstep::kube::Informer<Seen>;
  lockstep::kube::InformerBase::Options options;
  options.ns = ns_;
  options.prune = {{{"spec"}, {"metadata", "managedFields"}}};
  std::mutex mu;
  std::map<std::string, Seen> seen;
  auto convert = [](nlohmann::json& p) {
    Seen s;
    s.name = p["metadata"].value("name", "");
    s.spec = p.contains("spec");
    s.managed_fields = p["metadata"].contains("managedFields");
    s.note = p["metadata"].value("annotations", json::object()).value("note", "");
    s.note_size = s.note.size();
    s.note = s.note.substr(0, 8) + s.note.substr(s.note.size() > 8 ? s.note.size() - 8 : 0);
    return s;
  };
  auto pods = std::make_unique<Pods>(*client_, res::kPods, options, Pods::Typed{convert, {}, {}, {}},
                                     [&](const Pods::Ptr&, const Pods::Ptr& now) {
                                       std::lock_guard<std::mutex> lock(mu);
                                       if (now) seen[now->name] = *now;
                                     });
  pods->start();
  ASSERT_TRUE(eventually([&] { return pods->synced(); }, 10s));
  auto make = [&](const std::string& name, size_t note_size) {
    std::string note(note_size, 'n');
    note.front() = '<';
    note.back() = '>';
    json pod = {{"apiVersion", "v1"}, {"kind", "Pod"},
                {"metadata", {{"name", name}, {"annotations", {{"note", note}}}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
    auto r = client_->create(res::kPods.path(ns_), pod);
    ASSERT_TRUE(r.ok()) << r.message();
  };
  make("big", 200 * 1024);  // one event of three chunks and more
  make("small", 10);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.count("big") && seen.count("small");
  }, 10s));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen["big"].note_size, 200u * 1024);
    EXPECT_EQ(seen["big"].note, "<nnnnnnnnnnnnnn>");  // its first and last 8 bytes
    EXPECT_EQ(seen["small"].note_size, 10u);
    for (const auto& name : {"big", "small"}) {
      EXPECT_FALSE(seen[name].spec) << name << ": the pruned spec was parsed";
      EXPECT_FALSE(seen[name].managed_fields) << name << ": the pruned managedFields were parsed";
    }
  }
  // A list is pruned the same way: a fresh informer fills from a list of these two.
  std::map<std::string, Seen> listed;
  auto again = std::make_unique<Pods>(*client_, res::kPods, options, Pods::Typed{convert, {}, {}, {}},
                                      [&](const Pods::Ptr&, const Pods::Ptr& now) {
                                        std::lock_guard<std::mutex> lock(mu);
                                        if (now) listed[now->name] = *now;
                                      });
  again->start();
  ASSERT_TRUE(eventually([&] { return again->synced(); }, 10s));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["big"].note_size, 200u * 1024);
  EXPECT_FALSE(listed["big"].spec);
  EXPECT_FALSE(listed["big"].managed_fields);
  EXPECT_EQ(again->get(ns_, "small")->name, "small");
}

// Short leases, so a takeover happens within the test's time.
const std::vector<std::string> kFastLease = {"--lease-duration=3s", "--renew-deadline=2s", "--retry-period=250ms"};

TEST_F(OperatorTest, TwoOperatorsLeaveExactlyOneLeader) {
  std::vector<std::string> args = {"--namespace", ns_, "--leader-election-namespace", ns_};
  args.insert(args.end(), kFastLease.begin(), kFastLease.end());
  operator_->process().signal(SIGSTOP);  // this test is about the two below
  auto a = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  auto b = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  auto leaders = [&] {
    return static_cast<int>(a->log().find("became leader") != std::string::npos) +
           static_cast<int>(b->log().find("became leader") != std::string::npos);
  };
  ASSERT_TRUE(eventually([&] { return leaders() == 1; })) << a->log() << b->log();
  std::this_thread::sleep_for(4s);  // longer than the lease: the standby must still be waiting
  EXPECT_EQ(leaders(), 1);
  OperatorProcess* leader = a->log().find("became leader") != std::string::npos ? a.get() : b.get();
  OperatorProcess* standby = leader == a.get() ? b.get() : a.get();
  EXPECT_NE(leader->http("/metrics").find("lockstep_operator_leader 1"), std::string::npos);
  EXPECT_NE(standby->http("/metrics").find("lockstep_operator_leader 0"), std::string::npos);
  auto lease = client_->get(res::kLeases.path(ns_, "lockstep-operator"));
  ASSERT_TRUE(lease.ok()) << lease.message();
  // The leader dies without releasing the lease; the standby takes over after it expires.
  leader->process().signal(SIGKILL);
  leader->process().wait();
  ASSERT_TRUE(standby->wait_log("became leader", 15s)) << standby->log();
  create_job("ha", 1);
  EXPECT_TRUE(wait_pods("ha", 1)) << standby->log();
  a.reset();
  b.reset();
  operator_->process().signal(SIGCONT);
}

TEST_F(OperatorTest, GracefulShutdownReleasesTheLease) {
  std::vector<std::string> args = {"--namespace", ns_, "--leader-election-namespace", ns_};
  args.insert(args.end(), kFastLease.begin(), kFastLease.end());
  auto a = std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  ASSERT_TRUE(a->wait_log("became leader"));
  a->process().signal(SIGTERM);
  auto st = a->process().wait_for(10s);
  ASSERT_TRUE(st.has_value()) << "no exit within 10 s of SIGTERM";
  EXPECT_EQ(st->shell_code(), 0) << a->log();
  auto lease = client_->get(res::kLeases.path(ns_, "lockstep-operator"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease.body["spec"].value("holderIdentity", "x"), "");
}

TEST(OperatorWithoutPodGroups, SaysGangSchedulingIsUnavailable) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  // A control plane of its own, with no PodGroup CRD installed.
  auto cp = lockstep::test::ControlPlane::start();
  auto r = lockstep::run_capture({"kubectl", "apply", "-f", source_path("crds/lockstep.dev_trainingjobs.yaml")},
                                 {{"KUBECONFIG", cp->kubeconfig()}});
  ASSERT_TRUE(r.status.success()) << r.output;
  lockstep::run_capture({"kubectl", "wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev"},
                        {{"KUBECONFIG", cp->kubeconfig()}});
  OperatorProcess op(cp->kubeconfig());
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  r = lockstep::run_capture({"kubectl", "apply", "-f", source_path("examples/ddp.yaml")}, {{"KUBECONFIG", cp->kubeconfig()}});
  ASSERT_TRUE(r.status.success()) << r.output;
  Client client(RestConfig::from_kubeconfig(cp->kubeconfig()));
  json cond;
  ASSERT_TRUE(eventually([&] {
    auto j = client.get(res::kTrainingJobs.path("default", "tiny-ddp"));
    if (!j.ok() || !j.body.contains("status")) return false;
    for (const auto& c : j.body["status"].value("conditions", json::array()))
      if (c["type"] == "GangSchedulingUnavailable") cond = c;
    return !cond.is_null();
  })) << op.log();
  EXPECT_EQ(cond["status"], "True");
  EXPECT_NE(cond["message"].get<std::string>().find("spec.scheduling.gang"), std::string::npos);
  // Pods are still created, scheduled one by one.
  EXPECT_TRUE(eventually([&] {
    auto p = client.get(res::kPods.path("default") + "?labelSelector=lockstep.dev%2Fjob-name%3Dtiny-ddp");
    return p.ok() && p.body["items"].size() == 2;
  }));
}

TEST(OperatorWithoutPodGroups, UsesAPodGroupApiInstalledWhileItRuns) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  auto cp = lockstep::test::ControlPlane::start();
  auto kc = [&](const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {"kubectl"};
    argv.insert(argv.end(), args.begin(), args.end());
    return lockstep::run_capture(argv, {{"KUBECONFIG", cp->kubeconfig()}}, 60s, input);
  };
  ASSERT_TRUE(kc({"apply", "-f", source_path("crds/lockstep.dev_trainingjobs.yaml")}).status.success());
  kc({"wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev"});
  OperatorProcess op(cp->kubeconfig(), {"--podgroup-check-period=1s"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  ASSERT_NE(op.log().find("PodGroup API (scheduling.x-k8s.io/v1alpha1) not installed"), std::string::npos) << op.log();

  auto r = kc({"apply", "-f", source_path("tests/crds/podgroup.yaml")});
  ASSERT_TRUE(r.status.success()) << r.output;
  kc({"wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io"});
  std::this_thread::sleep_for(1s);  // the check period: the next reconcile looks again
  std::string job = "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: late, namespace: default}\n"
                    "spec:\n  nodes: 2\n  template:\n    spec:\n      containers:\n"
                    "      - {name: trainer, image: lockstep/trainer:test}\n";
  r = kc({"apply", "-f", "-"}, job);
  ASSERT_TRUE(r.status.success()) << r.output;
  Client client(RestConfig::from_kubeconfig(cp->kubeconfig()));
  EXPECT_TRUE(eventually([&] { return client.get(res::kPodGroups.path("default", "late")).ok(); })) << op.log();
  EXPECT_NE(op.log().find("PodGroup API (scheduling.x-k8s.io/v1alpha1) found"), std::string::npos) << op.log();
  auto pg = client.get(res::kPodGroups.path("default", "late"));
  EXPECT_EQ(pg.body["spec"].value("minMember", 0), 2);
  EXPECT_TRUE(eventually([&] {
    auto j = client.get(res::kTrainingJobs.path("default", "late"));
    if (!j.ok() || !j.body.contains("status")) return false;
    for (const auto& c : j.body["status"].value("conditions", json::array()))
      if (c["type"] == "GangSchedulingUnavailable" && c["status"] == "True") return false;
    return true;
  })) << "the job says gang scheduling is unavailable";
  // The PodGroup informer runs: deleting the PodGroup brings it back.
  ASSERT_TRUE(client.remove(res::kPodGroups.path("default", "late")).ok());
  EXPECT_TRUE(eventually([&] {
    auto p = client.get(res::kPodGroups.path("default", "late"));
    return p.ok() && !p.body["metadata"].contains("deletionTimestamp") && p.body["metadata"]["uid"] != pg.body["metadata"]["uid"];
  })) << op.log();
}

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
