// Lockstep itself in the real-node cluster (#12): the chart installs the operator as a pod
// with in-cluster configuration, and the examples train in pods the real scheduler places
// and the real kubelet starts, from the images scripts/images.sh builds (no registry: they
// are imported into the node's containerd under the names the chart and examples use, so
// nothing is edited to choose them). Bad input ends in a condition that names the pod and
// the reason.
//
// Images: scripts/test.sh builds them before the tests (scripts/images.sh build); this suite
// imports them into its cluster.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cluster_test_support.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::cluster_kubectl;
using lockstep::test::create_test_namespace;
using lockstep::test::eventually;
using lockstep::test::real_cluster;

namespace {

std::string source_path(const std::string& relative) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + relative; }

const char* kOperatorNamespace = "lockstep-system";

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

lockstep::RunResult helm(std::vector<std::string> args) {
  args.insert(args.begin(), "helm");
  args.push_back("--kubeconfig");
  args.push_back(real_cluster()->kubeconfig());
  std::map<std::string, std::string> env;
  for (const char* d : {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"})
    env[d] = ::testing::TempDir() + "/cluster-helm/" + d;
  return lockstep::run_capture(args, env, 300s);
}

json get_json(const std::string& ns, const std::string& object) {
  auto r = cluster_kubectl({"-n", ns, "get", object, "-o", "json"});
  if (!r.status.success()) return json();
  try {
    return json::parse(r.output);
  } catch (const json::exception&) {
    return json();
  }
}

std::string phase(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
}

const json* condition(const json& job, const std::string& type) {
  if (!job.is_object() || !job.contains("status") || !job["status"].contains("conditions")) return nullptr;
  for (const auto& c : job["status"]["conditions"])
    if (c.value("type", "") == type) return &c;
  return nullptr;
}

// What a user would look at when a wait fails.
std::string diagnose(const std::string& ns) {
  std::string out = cluster_kubectl({"-n", ns, "describe", "trainingjobs"}).output;
  out += cluster_kubectl({"-n", ns, "get", "pods", "-o", "wide"}).output;
  out += cluster_kubectl({"-n", kOperatorNamespace, "logs", "deploy/lockstep-operator", "--tail", "40"}).output;
  return out;
}

// Images and the operator, once for the suite: a failure here fails every test, with why.
class LockstepInCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster()) return;
    for (const char* name : {"operator", "trainer"}) {
      auto path = lockstep::run_capture({source_path("scripts/images.sh"), "path", name}, {}, 60s);
      std::string archive = trim(path.output);
      if (!path.status.success() || !std::filesystem::exists(archive)) {
        problem_ = std::string("the ") + name + " image is not built (scripts/images.sh build; scripts/test.sh does it): " +
                   path.output;
        return;
      }
      auto imported = real_cluster()->script({"import", archive}, 5min);
      if (!imported.status.success()) {
        problem_ = "cannot import " + archive + ": " + imported.output;
        return;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    auto r = helm({"install", "lockstep", source_path("charts/lockstep"), "-n", kOperatorNamespace, "--create-namespace",
                   "--set", "replicas=1", "--wait", "--timeout", "180s"});
    if (!r.status.success()) {
      problem_ = "helm install failed: " + r.output + diagnose(kOperatorNamespace);
      return;
    }
    install_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "[cluster] helm install: operator ready in " << install_seconds_ << " s\n";
  }

  void SetUp() override {
    LOCKSTEP_REQUIRE_REAL_CLUSTER();
    ASSERT_TRUE(problem_.empty()) << problem_;
  }

  // Applies an example from the repository as it is, into `ns`.
  void apply_example(const std::string& ns, const std::string& file) {
    auto r = cluster_kubectl({"-n", ns, "apply", "-f", source_path(file)});
    ASSERT_TRUE(r.status.success()) << r.output;
  }

  bool wait_phase(const std::string& ns, const std::string& job, const std::string& want, std::chrono::seconds timeout) {
    return eventually([&] { return phase(ns, job) == want; }, timeout);
  }

  static std::string problem_;
  static double install_seconds_;
};

std::string LockstepInCluster::problem_;
double LockstepInCluster::install_seconds_ = 0;

TEST_F(LockstepInCluster, TheChartRunsTheOperatorInClusterWithItsServiceAccountAndLease) {
  json deploy = get_json(kOperatorNamespace, "deployment/lockstep-operator");
  ASSERT_TRUE(deploy.is_object()) << diagnose(kOperatorNamespace);
  EXPECT_EQ(deploy["status"].value("availableReplicas", 0), 1);
  json pods = get_json(kOperatorNamespace, "pods");
  ASSERT_EQ(pods["items"].size(), 1u) << pods.dump(1);
  const json& pod = pods["items"][0];
  EXPECT_EQ(pod["spec"].value("serviceAccountName", ""), "lockstep-operator");
  // In-cluster configuration: no kubeconfig flag, the projected service-account token.
  std::string args = pod["spec"]["containers"][0].value("args", json::array()).dump();
  EXPECT_EQ(args.find("kubeconfig"), std::string::npos) << args;
  std::string holder = trim(cluster_kubectl({"-n", kOperatorNamespace, "get", "lease", "-o",
                                             "jsonpath={.items[*].spec.holderIdentity}"})
                                .output);
  EXPECT_NE(holder.find(pod["metadata"].value("name", "?")), std::string::npos)
      << "lease holder '" << holder << "' is not the operator pod";
  auto logs = cluster_kubectl({"-n", kOperatorNamespace, "logs", pod["metadata"].value("name", "")});
  EXPECT_NE(logs.output.find("caches synced"), std::string::npos) << logs.output;
  RecordProperty("helm_install_seconds", std::to_string(install_seconds_));
}

// examples/ddp.yaml as written: placed by the scheduler, started by the kubelet, the agents
// meet at pod 0 through the headless Service's DNS name, and it trains to Succeeded.
TEST_F(LockstepInCluster, DdpExampleTrainsInRealPodsToSucceeded) {
  std::string ns = create_test_namespace("ddp");
  auto t0 = std::chrono::steady_clock::now();
  apply_example(ns, "examples/ddp.yaml");
  ASSERT_TRUE(wait_phase(ns, "tiny-ddp", "Succeeded", 300s)) << diagnose(ns);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "[cluster] examples/ddp.yaml: apply -> Succeeded in " << seconds << " s\n";
  RecordProperty("ddp_apply_to_succeeded_seconds", std::to_string(seconds));

  json job = get_json(ns, "trainingjob/tiny-ddp");
  EXPECT_EQ(job["status"]["nodes"].value("succeeded", -1), 2) << job["status"].dump();
  EXPECT_EQ(job["status"]["nodes"].value("failed", -1), 0);
  EXPECT_EQ(job["status"]["nodes"].value("active", -1), 0);
  EXPECT_EQ(job["status"].value("restarts", -1), 0);
  EXPECT_TRUE(job["status"].contains("completionTime"));
  // Pod 1's agent found the master by its DNS name; rank 0 printed its progress.
  auto agent1 = cluster_kubectl({"-n", ns, "logs", "tiny-ddp-1"});
  EXPECT_NE(agent1.output.find("master address 'tiny-ddp-0.tiny-ddp." + ns + ".svc' resolved to 10.244."),
            std::string::npos)
      << agent1.output;
  auto rank0 = cluster_kubectl({"-n", ns, "logs", "tiny-ddp-0"});
  EXPECT_NE(rank0.output.find("step   200/200"), std::string::npos) << rank0.output;
  // cleanPodPolicy Running (the default): the finished pods stay, for their logs.
  json pods = get_json(ns, "pods");
  ASSERT_EQ(pods["items"].size(), 2u);
  for (const auto& p : pods["items"]) EXPECT_EQ(p["status"].value("phase", ""), "Succeeded") << p["metadata"]["name"];
  // ttlSecondsAfterFinished: the example keeps the job an hour; shortened, the job goes,
  // and the garbage collector takes its pods and Service with it.
  auto patch = cluster_kubectl({"-n", ns, "patch", "trainingjob", "tiny-ddp", "--type", "merge", "-p",
                                R"({"spec":{"runPolicy":{"ttlSecondsAfterFinished":1}}})"});
  ASSERT_TRUE(patch.status.success()) << patch.output;
  EXPECT_TRUE(eventually([&] { return get_json(ns, "trainingjob/tiny-ddp").is_null(); }, 60s)) << diagnose(ns);
  EXPECT_TRUE(eventually([&] { return get_json(ns, "pods")["items"].empty(); }, 60s)) << diagnose(ns);
}

// examples/fsdp.yaml as written, with the ReadWriteMany claim it asks for: a hostPath volume
// on the one node stands in for shared storage. The ranks agree on the checkpoint directory
// and the checkpoints land in it.
TEST_F(LockstepInCluster, FsdpExampleCheckpointsOnItsSharedClaimAndSucceeds) {
  std::string ns = create_test_namespace("fsdp");
  std::string dir = lockstep::test::real_cluster_state_dir() + "/run/volumes/" + ns;
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0777);  // the trainer image runs as uid 1000
  std::string storage =
      "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: " + ns + "-ckpt}\n"
      "spec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteMany]\n  storageClassName: \"\"\n"
      "  persistentVolumeReclaimPolicy: Retain\n  hostPath: {path: " + dir + ", type: Directory}\n"
      "  claimRef: {namespace: " + ns + ", name: tiny-fsdp-checkpoints}\n---\n"
      "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: tiny-fsdp-checkpoints}\n"
      "spec:\n  accessModes: [ReadWriteMany]\n  storageClassName: \"\"\n  volumeName: " + ns + "-ckpt\n"
      "  resources: {requests: {storage: 1Gi}}\n";
  auto r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, storage);
  ASSERT_TRUE(r.status.success()) << r.output;
  apply_example(ns, "examples/fsdp.yaml");
  ASSERT_TRUE(wait_phase(ns, "tiny-fsdp", "Succeeded", 300s)) << diagnose(ns);
  json job = get_json(ns, "trainingjob/tiny-fsdp");
  EXPECT_EQ(job["status"]["nodes"].value("succeeded", -1), 2) << job["status"].dump();
  // keep: 3 of the checkpoints at 50, 100, 150 and 200, each complete, with four shards.
  for (int step : {100, 150, 200}) {
    std::string s = dir + "/step-" + std::to_string(step);
    EXPECT_TRUE(std::filesystem::exists(s + "/MANIFEST")) << s;
    for (int rank = 0; rank < 4; ++rank)
      EXPECT_TRUE(std::filesystem::exists(s + "/rank-" + std::to_string(rank) + ".pt")) << s << " rank " << rank;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-50")) << "keep: 3 pruned nothing";
  cluster_kubectl({"-n", ns, "delete", "trainingjob", "tiny-fsdp", "--wait=true"});
  cluster_kubectl({"-n", ns, "delete", "pvc", "tiny-fsdp-checkpoints", "--wait=true"});
  cluster_kubectl({"delete", "pv", ns + "-ckpt", "--wait=true"});
}

// #12 item 5: bad input gets a clear answer in the job's conditions, within a bounded time,
// and `kubectl describe tj` shows it.
std::string job_yaml(const std::string& name, const std::string& image, const std::string& cpu,
                     const std::string& args, const std::string& run_policy) {
  return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " + name + "}\n"
         "spec:\n  nodes: 2\n  procsPerNode: 1\n  strategy: DDP\n  template:\n    spec:\n      containers:\n"
         "      - name: trainer\n        image: " + image + "\n        resources: {requests: {cpu: \"" + cpu + "\"}}\n"
         "  trainer:\n    args: [" + args + "]\n  runPolicy: " + run_policy + "\n";
}

TEST_F(LockstepInCluster, BadInputEndsInAConditionNamingThePodAndTheReason) {
  std::string ns = create_test_namespace("bad");
  const std::string ok_args = "--model=tiny, --device=cpu, --steps=5, --batch-size=4";
  auto apply = [&](const std::string& yaml) {
    auto r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output;
  };
  apply(job_yaml("noimage", "lockstep/trainer:does-not-exist", "100m", ok_args, "{restartPolicy: ExitCode}"));
  apply(job_yaml("badflag", "lockstep/trainer:0.1.0", "100m", "--model=tiny, --device=cpu, --steps=ten",
                 "{restartPolicy: ExitCode}"));
  apply(job_yaml("toobig", "lockstep/trainer:0.1.0", "64", ok_args, "{}"));

  auto blocked_reason = [&](const std::string& job) {
    json j = get_json(ns, "trainingjob/" + job);
    const json* c = condition(j, "PodsBlocked");
    return c && c->value("status", "") == "True" ? c->value("reason", "") + ": " + c->value("message", "") : "";
  };
  // An image that does not exist (and no registry to pull it from).
  std::string noimage;
  EXPECT_TRUE(eventually([&] { return !(noimage = blocked_reason("noimage")).empty(); }, 90s)) << diagnose(ns);
  EXPECT_TRUE(noimage.rfind("ErrImagePull: pod noimage-", 0) == 0 || noimage.rfind("ImagePullBackOff: pod noimage-", 0) == 0)
      << noimage;
  // More CPU than the node has.
  std::string toobig;
  EXPECT_TRUE(eventually([&] { return !(toobig = blocked_reason("toobig")).empty(); }, 60s)) << diagnose(ns);
  EXPECT_NE(toobig.find("Unschedulable: pod toobig-"), std::string::npos) << toobig;
  EXPECT_NE(toobig.find("Insufficient cpu"), std::string::npos) << toobig;
  // A trainer flag error: exit 64, permanent under ExitCode, the trainer's own words quoted.
  EXPECT_TRUE(wait_phase(ns, "badflag", "Failed", 120s)) << diagnose(ns);
  json bad = get_json(ns, "trainingjob/badflag");
  const json* failed = condition(bad, "Failed");
  ASSERT_NE(failed, nullptr) << bad.dump(1);
  EXPECT_EQ(failed->value("reason", ""), "NonRetryableExitCode");
  std::string msg = failed->value("message", "");
  EXPECT_NE(msg.find("failed with exit code 64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--steps"), std::string::npos) << "the trainer's message is not quoted: " << msg;

  // What `kubectl describe` shows a user.
  auto describe = cluster_kubectl({"-n", ns, "describe", "trainingjob", "toobig", "noimage"});
  EXPECT_NE(describe.output.find("Insufficient cpu"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("PodsBlocked"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("lockstep/trainer:does-not-exist"), std::string::npos) << describe.output;
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
