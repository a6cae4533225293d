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

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "job_support.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::cluster_kubectl;
using lockstep::test::create_test_namespace;
using lockstep::test::eventually;
using lockstep::test::kOperatorNamespace;
using lockstep::test::real_cluster;
using lockstep::test::checkpoint_job;
using lockstep::test::condition;
using lockstep::test::diagnose;
using lockstep::test::final_loss;
using lockstep::test::get_json;
using lockstep::test::last_logged_step;
using lockstep::test::loss_at;
using lockstep::test::latest_checkpoint;
using lockstep::test::parse_rfc3339;
using lockstep::test::phase;
using lockstep::test::report_recovery;
using lockstep::test::resume_of;
using lockstep::test::Resume;
using lockstep::test::trim;
using lockstep::test::no_straggler_verdict;
using lockstep::test::wait_succeeded;

namespace {

std::string source_path(const std::string& relative) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + relative; }

// Images and the operator, once for the suite: a failure here fails every test, with why.
class LockstepInCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster()) return;
    problem_ = lockstep::test::install_lockstep(
        {"replicas=1", "progressPeriod=2s",
         // Gang restarts after 1 s, 2 s, 4 s, ... rather than the default 10 s, 20 s, ...:
         // the fault test restarts one gang four times.
         "restartBackoff=1s"},
        &install_seconds_);
    if (problem_.empty()) std::cerr << "[cluster] helm install: operator ready in " << install_seconds_ << " s\n";
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

  // Any phase but Succeeded, which wait_succeeded (job_support.hpp) waits for with its checks.
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
  // #13 item 7: while it trains, `kubectl get tj` shows the step out of the total, tokens/s
  // and an ETA, which the operator (a pod) read from rank 0's agent (another pod) over the
  // pod network; the training pods have no API access for it.
  std::string progress_row;
  ASSERT_TRUE(eventually([&] {
    auto r = cluster_kubectl({"-n", ns, "get", "tj", "tiny-ddp", "--no-headers", "-o",
                              "custom-columns=PHASE:.status.phase,STEP:.status.progress.steps,"
                              "TOK:.status.progress.tokensPerSecond,ETA:.status.progress.eta"});
    std::istringstream row(r.output);
    std::string phase_now, step, tok, eta;
    row >> phase_now >> step >> tok >> eta;
    if (phase_now == "Running" && step.find("/200") != std::string::npos && tok != "<none>" && eta != "<none>" &&
        progress_row.empty())
      progress_row = r.output;
    return phase_now == "Succeeded";
  }, 300s)) << diagnose(ns);
  EXPECT_TRUE(no_straggler_verdict(ns, "tiny-ddp"));
  EXPECT_FALSE(progress_row.empty()) << "no reading of rank 0's progress while the job ran: "
                                     << get_json(ns, "trainingjob/tiny-ddp")["status"].dump();
  std::cerr << "[cluster] kubectl get tj while training: " << progress_row;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "[cluster] examples/ddp.yaml: apply -> Succeeded in " << seconds << " s\n";
  RecordProperty("ddp_apply_to_succeeded_seconds", std::to_string(seconds));

  json job = get_json(ns, "trainingjob/tiny-ddp");
  EXPECT_EQ(job["status"]["nodes"].value("succeeded", -1), 2) << job["status"].dump();
  EXPECT_EQ(job["status"]["nodes"].value("failed", -1), 0);
  EXPECT_EQ(job["status"]["nodes"].value("active", -1), 0);
  EXPECT_EQ(job["status"].value("restarts", -1), 0);
  EXPECT_TRUE(job["status"].contains("completionTime"));
  // A finished job shows every step done.
  EXPECT_EQ(job["status"]["progress"].value("steps", ""), "200/200") << job["status"].dump();
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
  EXPECT_TRUE(eventually([&] {
    json pods = get_json(ns, "pods");
    return pods.is_object() && pods["items"].empty();
  }, 60s)) << diagnose(ns);
}

// #26 item 13: examples/restricted.yaml as written, in a namespace that enforces the restricted
// Pod Security Standard: admitted (the API server would refuse a pod that is not), run by real
// kubelets as user 1000 with no service-account token, and trains to Succeeded.
TEST_F(LockstepInCluster, TheRestrictedExampleTrainsWhereTheRestrictedStandardIsEnforced) {
  std::string ns = create_test_namespace("restricted");
  auto label = cluster_kubectl({"label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                                "pod-security.kubernetes.io/enforce-version=latest"});
  ASSERT_TRUE(label.status.success()) << label.output;
  auto t0 = std::chrono::steady_clock::now();
  apply_example(ns, "examples/restricted.yaml");
  ASSERT_TRUE(wait_succeeded(ns, "tiny-restricted", 300s));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "[cluster] examples/restricted.yaml (enforce=restricted): apply -> Succeeded in " << seconds << " s\n";
  RecordProperty("restricted_apply_to_succeeded_seconds", std::to_string(seconds));
  json job = get_json(ns, "trainingjob/tiny-restricted");
  EXPECT_EQ(job["status"]["nodes"].value("succeeded", -1), 2) << job["status"].dump();
  EXPECT_EQ(job["status"].value("restarts", -1), 0) << job["status"].dump();
  json pods = get_json(ns, "pods");
  ASSERT_EQ(pods["items"].size(), 2u) << diagnose(ns);
  for (const auto& p : pods["items"]) {
    EXPECT_EQ(p["spec"].value("automountServiceAccountToken", true), false) << p["metadata"]["name"];
    for (const auto& c : p["spec"]["containers"])
      for (const auto& m : c.value("volumeMounts", json::array()))
        EXPECT_NE(m.value("mountPath", ""), "/var/run/secrets/kubernetes.io/serviceaccount") << p["metadata"]["name"];
  }
  auto rank0 = cluster_kubectl({"-n", ns, "logs", "tiny-restricted-0"});
  EXPECT_NE(rank0.output.find("step   200/200"), std::string::npos) << rank0.output;
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
  ASSERT_TRUE(wait_succeeded(ns, "tiny-fsdp", 300s));
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
  // One CPU more than the node can give, whatever its size.
  std::string allocatable = trim(cluster_kubectl({"get", "nodes", "-o", "jsonpath={.items[0].status.allocatable.cpu}"}).output);
  long long millicores = allocatable.empty() ? 0
                         : allocatable.back() == 'm' ? std::stoll(allocatable.substr(0, allocatable.size() - 1))
                                                      : std::stoll(allocatable) * 1000;
  ASSERT_GT(millicores, 0) << "node allocatable cpu: '" << allocatable << "'";
  apply(job_yaml("toobig", "lockstep/trainer:0.1.0", std::to_string(millicores + 1000) + "m", ok_args, "{}"));

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
  EXPECT_NE(msg.find("pod badflag-"), std::string::npos) << "the failed pod is not named: " << msg;
  EXPECT_NE(msg.find("--steps"), std::string::npos) << "the trainer's message is not quoted: " << msg;

  // What `kubectl describe` shows a user.
  auto describe = cluster_kubectl({"-n", ns, "describe", "trainingjob", "toobig", "noimage", "badflag"});
  EXPECT_NE(describe.output.find("Insufficient cpu"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("PodsBlocked"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("lockstep/trainer:does-not-exist"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("NonRetryableExitCode"), std::string::npos) << describe.output;
  EXPECT_NE(describe.output.find("exit code 64"), std::string::npos) << describe.output;
  // Their pods hold the node's CPU: gone before the next test.
  cluster_kubectl({"delete", "namespace", ns, "--wait=true"}, "", 120s);
}

// ---- #13: faults while a job trains in the cluster -----------------------------------------

// #13 items 1-3 and #14: faults injected while examples/ddp-checkpoint.yaml trains, with one
// in-place restart allowed per gang attempt. A lost trainer process is restarted in place: the
// same pods (UIDs unchanged), every rank anew, resumed from the newest complete checkpoint,
// counted in status.inPlaceRestarts with a Restarted condition and an Event. The next failure
// is beyond that budget, so the agents exit and the operator recreates the gang; so do a pod
// deleted and a container killed. Every recovery resumes from the newest complete checkpoint
// (never step 0), status and Events count each kind, no pod of an old attempt or a duplicate is
// left, and the final loss equals an uninterrupted run of the same job.
TEST_F(LockstepInCluster, FaultsRestartInPlaceThenAsAGangAndResumeFromTheLastCheckpoint) {
  std::string ns = create_test_namespace("faults");
  std::string volumes = lockstep::test::real_cluster_state_dir() + "/run/volumes/" + ns;
  const std::string job = "faulty", dir = volumes + "/faulty";
  // The job outlives four faults and a 20 s kubelet outage, most of it fixed wall time (the
  // recoveries, the outage), so the steps it needs grow with the steps a second. As a test,
  // each pod is held to a quarter of a core: the job steps at a rate a machine's speed changes
  // little (about 450 steps here by the end of the outage, with room for a core twice as fast)
  // and leaves the other lane (Note [Two lanes]) most of the CPU. bench/recovery
  // (LOCKSTEP_RECOVERY_REPORT) measures recovery as a job would see it: the example's own
  // resources, nothing held, and steps to match.
  const bool bench = lockstep::test::recovery_bench();
  const int steps = bench ? 5000 : 1000;
  const std::string cpu = bench ? "" : "250m";
  auto r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, checkpoint_job(job, dir, steps, 1, cpu));
  ASSERT_TRUE(r.status.success()) << r.output;
  ASSERT_TRUE(wait_phase(ns, job, "Running", 120s)) << diagnose(ns);

  auto status = [&] {  // {} while the API server is briefly unreachable (the operator's restart)
    json j = get_json(ns, "trainingjob/" + job);
    return j.is_object() && j.contains("status") && j["status"].is_object() ? j["status"] : json::object();
  };
  auto restarts = [&] { return lockstep::test::job_restarts(ns, job); };
  auto in_place = [&] { return status().value("inPlaceRestarts", 0); };
  auto pod_json = [&](int i) { return get_json(ns, "pod/" + job + "-" + std::to_string(i)); };
  auto pod_uids = [&] {
    std::vector<std::string> uids;
    for (int i = 0; i < 2; ++i) {
      json p = pod_json(i);
      uids.push_back(p.is_object() && p.contains("metadata") ? p["metadata"].value("uid", "") : "");
    }
    return uids;
  };
  int expected_restarts = 0, expected_in_place = 0;
  enum class Kind { InPlace, Gang };
  // Waits for a checkpoint newer than `after`, injects the fault, and checks the recovery.
  auto inject = [&](const std::string& what, Kind kind, const std::function<void()>& fault) {
    SCOPED_TRACE(what);
    int before = latest_checkpoint(dir);
    ASSERT_TRUE(eventually([&] { return latest_checkpoint(dir) >= before + 20 && phase(ns, job) == "Running"; }, 120s))
        << "no new checkpoint after step " << before << "\n" << diagnose(ns);
    int saved = latest_checkpoint(dir);
    // Mid-way to the next checkpoint, as a fault would come: half an interval to redo.
    ASSERT_TRUE(eventually([&] { return last_logged_step(dir + "/loss.txt") >= saved + 10; }, 60s)) << diagnose(ns);
    const auto uids = pod_uids();
    ASSERT_FALSE(uids[0].empty() || uids[1].empty()) << "both pods, before the fault\n" << diagnose(ns);
    auto at = std::chrono::system_clock::now();
    int at_step = last_logged_step(dir + "/loss.txt");
    fault();
    Resume res;
    if (kind == Kind::InPlace) {
      ++expected_in_place;
      // status follows the agents' /metrics at the operator's progress period (2 s here).
      ASSERT_TRUE(eventually([&] { return in_place() >= expected_in_place; }, 90s)) << diagnose(ns);
      EXPECT_EQ(in_place(), expected_in_place) << "one fault, one in-place restart";
      const json tj = get_json(ns, "trainingjob/" + job);
      const json* c = condition(tj, "Restarted");
      ASSERT_NE(c, nullptr) << tj.dump();
      EXPECT_EQ(c->value("reason", ""), "InPlaceRestart") << c->dump();
      ASSERT_TRUE(eventually([&] {
        res = resume_of(ns, job + "-0", at);
        return res.first_step_at.has_value();
      }, 120s)) << diagnose(ns);
      EXPECT_EQ(pod_uids(), uids) << "an in-place restart keeps the pods";
    } else {
      ++expected_restarts;
      ASSERT_TRUE(eventually([&] { return restarts() >= expected_restarts; }, 120s)) << diagnose(ns);
      EXPECT_EQ(restarts(), expected_restarts) << "one fault, one gang restart";
      ASSERT_TRUE(eventually([&] {
        auto p = pod_json(0);
        if (!p.is_object() || p["metadata"]["labels"].value("lockstep.dev/restart-attempt", "") !=
                                  std::to_string(expected_restarts))
          return false;
        res = resume_of(ns, job + "-0", at);
        return res.first_step_at.has_value();
      }, 120s)) << diagnose(ns);
      auto now = pod_uids();
      EXPECT_NE(now[0], uids[0]) << "a gang restart recreates the pods";
      EXPECT_NE(now[1], uids[1]) << "a gang restart recreates the pods";
    }
    EXPECT_GT(res.step, 0) << "the gang started again from step 0";
    EXPECT_GE(res.step, saved) << "resumed before the newest complete checkpoint";
    double seconds = std::chrono::duration<double>(*res.first_step_at - at).count();
    std::cerr << "[cluster] fault '" << what << "' (" << (kind == Kind::InPlace ? "in place" : "gang") << ") at step " << at_step
              << ", after checkpoint " << saved << ": resumed at step " << res.step << " (" << at_step - res.step
              << " steps redone), every rank stepping again " << seconds << " s after the fault\n";
    report_recovery(what, saved, at_step, res.step, seconds);
    RecordProperty("recovery_seconds_" + std::to_string(expected_restarts + expected_in_place), std::to_string(seconds));
  };

  inject("SIGKILL of the trainer in pod 1: an in-place restart", Kind::InPlace, [&] {
    auto pids = lockstep::test::worker_pids(ns, job, 1, "lockstep-trainer");
    ASSERT_EQ(pids.size(), 1u) << "pod 1's trainer process, seen from the host";
    ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  });
  inject("SIGSTOP of the trainer in pod 0 (a stalled rank), beyond the in-place budget: a gang restart", Kind::Gang, [&] {
    auto pids = lockstep::test::worker_pids(ns, job, 0, "lockstep-trainer");
    ASSERT_EQ(pids.size(), 1u);
    ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  });
  inject("kubectl delete pod " + job + "-0", Kind::Gang, [&] {
    auto d = cluster_kubectl({"-n", ns, "delete", "pod", job + "-0", "--wait=false"});
    ASSERT_TRUE(d.status.success()) << d.output;
  });
  inject("the container of pod 1 killed through containerd, and the operator's pod deleted during the restart", Kind::Gang, [&] {
    std::string id = pod_json(1)["status"]["containerStatuses"][0].value("containerID", "");
    ASSERT_EQ(id.rfind("containerd://", 0), 0u) << id;
    auto k = lockstep::run_capture({"ctr", "--address", lockstep::test::real_cluster_state_dir() + "/run/containerd/containerd.sock",
                                    "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", id.substr(13)},
                                   {}, 30s);
    ASSERT_TRUE(k.status.success()) << k.output;
    // The operator goes while the gang restarts; its Deployment brings it back, and the new
    // leader finishes the restart (no duplicate pods, one restart counted).
    ASSERT_TRUE(eventually([&] { return restarts() >= expected_restarts + 1 || phase(ns, job) == "Restarting"; }, 60s));
    auto d = cluster_kubectl({"-n", kOperatorNamespace, "delete", "pod", "-l", "app.kubernetes.io/name=lockstep-operator",
                              "--wait=false"});
    ASSERT_TRUE(d.status.success()) << d.output;
  });

  int at_start = 0;  // the step training was at when the kubelet came back: after every resume
  // The kubelet away for 20 s (a kubelet restart or upgrade), within the node controller's
  // grace period (50 s): the containers train on under containerd and nothing restarts. Longer,
  // the node turns NotReady, which the operator takes for a lost node and restarts the gang on
  // healthy nodes (Note [Lost nodes]; nodes_in_cluster_test).
  {
    SCOPED_TRACE("the kubelet stopped for 20 s");
    int before = latest_checkpoint(dir);
    ASSERT_TRUE(eventually([&] { return latest_checkpoint(dir) >= before + 20 && phase(ns, job) == "Running"; }, 120s))
        << diagnose(ns);
    auto stop = real_cluster()->script({"kubelet", "stop"}, 60s);
    ASSERT_TRUE(stop.status.success()) << stop.output;
    int at_stop = last_logged_step(dir + "/loss.txt");
    auto node_ready = [] {
      return trim(cluster_kubectl({"get", "nodes", "-o", "jsonpath={.items[0].status.conditions[?(@.type==\"Ready\")].status}"})
                      .output);
    };
    bool not_ready = false;
    auto until = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < until) {
      not_ready |= node_ready() != "True";
      std::this_thread::sleep_for(2s);
    }
    auto start = real_cluster()->script({"kubelet", "start"}, 120s);
    ASSERT_TRUE(start.status.success()) << start.output;
    at_start = last_logged_step(dir + "/loss.txt");
    std::cerr << "[cluster] kubelet away 20 s: training went from step " << at_stop << " to " << at_start
              << (not_ready ? "; the node turned NotReady" : "; the node stayed Ready") << "\n";
    EXPECT_GT(at_start, at_stop) << "training stopped while the kubelet was away";
    if (const char* path = std::getenv("LOCKSTEP_RECOVERY_REPORT"); path && *path)
      std::ofstream(path, std::ios::app) << "kubelet\t" << at_stop << "\t" << at_start << "\t" << not_ready << "\n";
    EXPECT_TRUE(eventually([&] { return node_ready() == "True"; }, 90s)) << diagnose(ns);
    std::this_thread::sleep_for(10s);  // the kubelet's first pod syncs
    EXPECT_EQ(restarts(), expected_restarts) << "the gang restarted although no process was lost\n" << diagnose(ns);
  }

  // The same job without faults (below), started now as a test: it trains to the step compared
  // while the faulty one trains its last steps, instead of after them (each pod held to its
  // quarter core, so neither slows the other). bench/recovery starts it after, alone, as it
  // times both.
  const std::string ref_dir = volumes + "/reference";
  auto start_reference = [&] {
    return cluster_kubectl({"-n", ns, "apply", "-f", "-"}, checkpoint_job("reference", ref_dir, steps, 1, cpu));
  };
  // No straggler verdict through the faults, the restarts and the kubelet's absence: each
  // resume clears the ranks' windows, and none may make a healthy rank look slow. Checked before
  // the reference job starts: from then on the test itself puts two more training pods on this
  // node, and on a 2-core machine whose other lane takes the cores a quota caps what a pod
  // uses but guarantees nothing, so one rank may really get less CPU than the other. CI saw
  // that on 2026-11-30: rank 0 1.45x for 45 s, named as the reference pods started, a true
  // verdict on the machine (a neighbour took a rank's core), not the judge's error.
  EXPECT_TRUE(lockstep::test::no_straggler_verdict(ns, job)) << "through the faults and the kubelet's absence";
  if (!bench) {
    r = start_reference();
    ASSERT_TRUE(r.status.success()) << r.output;
  }

  ASSERT_TRUE(wait_succeeded(ns, job, 420s, /*expect_straggler=*/!bench));
  json final_status = status();
  EXPECT_EQ(final_status.value("restarts", -1), expected_restarts) << final_status.dump();
  EXPECT_EQ(final_status.value("inPlaceRestarts", -1), expected_in_place) << final_status.dump();
  // Events say why: one GangRestart per gang fault, an InPlaceRestart for the in-place one.
  json events = get_json(ns, "events");
  int gang_restart_events = 0, in_place_events = 0;  // each restart's Event has its own message
  for (const auto& e : events.value("items", json::array())) {
    if (e["involvedObject"].value("name", "") != job) continue;
    gang_restart_events += e.value("reason", "") == "GangRestart";
    in_place_events += e.value("reason", "") == "InPlaceRestart";
  }
  EXPECT_EQ(gang_restart_events, expected_restarts) << events.dump(1);
  EXPECT_EQ(in_place_events, expected_in_place) << events.dump(1);
  // No pod of an earlier attempt, and no duplicate.
  json pods = get_json(ns, "pods");
  json faulty_pods = json::array();
  for (const auto& p : pods["items"])
    if (p["metadata"].value("labels", json::object()).value("lockstep.dev/job-name", "") == job) faulty_pods.push_back(p);
  ASSERT_EQ(faulty_pods.size(), 2u) << pods.dump(1);
  for (const auto& p : faulty_pods)
    EXPECT_EQ(p["metadata"]["labels"].value("lockstep.dev/restart-attempt", ""), std::to_string(expected_restarts));

  // The same job without faults trains to the same loss: resume is exact (DDP's two-rank
  // all-reduce is deterministic, so the bound is float noise). Compared at the step the faulty
  // run was at when the kubelet came back, after its last resume: from there on both runs
  // compute the same steps from the same state, so a difference would show there already.
  // bench/recovery runs it to the end for the wall-time ratio.
  if (bench) {
    r = start_reference();
    ASSERT_TRUE(r.status.success()) << r.output;
    ASSERT_TRUE(wait_succeeded(ns, "reference", 420s));
  } else
    ASSERT_TRUE(eventually([&] { return last_logged_step(ref_dir + "/loss.txt") >= at_start; }, 420s))
        << "the reference run did not reach step " << at_start << "\n" << diagnose(ns);
  double faulty = loss_at(dir + "/loss.txt", at_start), reference = loss_at(ref_dir + "/loss.txt", at_start);
  ASSERT_GT(faulty, 0) << "no loss logged for step " << at_start << ": " << lockstep::test::read_file(dir + "/loss.txt");
  ASSERT_GT(reference, 0) << "no loss logged for step " << at_start << ": " << lockstep::test::read_file(ref_dir + "/loss.txt");
  std::cerr << std::setprecision(8) << "[cluster] loss at step " << at_start << " after " << expected_restarts + expected_in_place
            << " faults " << faulty << ", uninterrupted " << reference << "\n";
  EXPECT_NEAR(faulty, reference, 1e-5 * reference);
  if (bench) {
    double faulty_final = final_loss(dir + "/loss.txt"), reference_final = final_loss(ref_dir + "/loss.txt");
    EXPECT_NEAR(faulty_final, reference_final, 1e-5 * reference_final) << "the final losses";
    auto wall = [&](const std::string& name) {
      json st = get_json(ns, "trainingjob/" + name)["status"];
      return std::chrono::duration<double>(parse_rfc3339(st.value("completionTime", "")) -
                                           parse_rfc3339(st.value("startTime", "")))
          .count();
    };
    std::ofstream(std::getenv("LOCKSTEP_RECOVERY_REPORT"), std::ios::app) << "job\t" << wall(job) << "\t" << wall("reference") << "\n";
  }
  // The reference run's pods still train and hold their CPU requests: gone before the next
  // test, which sizes its pods by the CPU the node has left.
  cluster_kubectl({"delete", "namespace", ns, "--wait=true"}, "", 120s);
}

// ---- #13 item 6: gang scheduling with the coscheduling plugin --------------------------------

// CPU (millicores) the node has left for new pods: allocatable less what its pods request.
long long free_millicpu() {
  // A quantity: "2", "1500m", or a bare number.
  auto to_milli = [](const json& q) -> long long {
    if (q.is_number()) return static_cast<long long>(q.get<double>() * 1000);
    if (!q.is_string()) return 0;
    std::string s = q.get<std::string>();
    if (s.empty()) return 0;
    if (s.back() == 'm') return std::stoll(s.substr(0, s.size() - 1));
    return static_cast<long long>(std::stod(s) * 1000);
  };
  json nodes = get_json("default", "nodes");
  if (!nodes.is_object() || nodes["items"].empty()) return 0;
  long long free = to_milli(nodes["items"][0]["status"]["allocatable"]["cpu"]);
  json pods = json::parse(cluster_kubectl({"get", "pods", "-A", "-o", "json"}).output);
  for (const auto& p : pods["items"]) {
    std::string phase = p["status"].value("phase", "");
    if (phase == "Succeeded" || phase == "Failed" || !p["spec"].contains("nodeName")) continue;
    for (const auto& c : p["spec"]["containers"])
      if (c.contains("resources") && c["resources"].contains("requests") && c["resources"]["requests"].contains("cpu"))
        free -= to_milli(c["resources"]["requests"]["cpu"]);
  }
  return free;
}

// A job of three one-rank pods, each asking for `cpu_milli`, with or without gang scheduling.
std::string gang_job(const std::string& name, long long cpu_milli, bool gang) {
  return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " + name + "}\n"
         "spec:\n  nodes: 3\n  procsPerNode: 1\n  strategy: DDP\n  template:\n    spec:\n      containers:\n"
         "      - name: trainer\n        image: lockstep/trainer:0.1.0\n"
         "        resources: {requests: {cpu: " + std::to_string(cpu_milli) + "m, memory: 256Mi}}\n"
         "  trainer:\n    args: [--model=tiny, --device=cpu, --steps=20, --batch-size=4]\n"
         "  scheduling:\n    gang: " + (gang ? "true\n    schedulerName: scheduler-plugins-scheduler\n" : "false\n");
}

std::vector<std::string> bound_pods(const std::string& ns, const std::string& job) {
  std::vector<std::string> out;
  json pods = get_json(ns, "pods");
  if (!pods.is_object()) return out;
  for (const auto& p : pods.value("items", json::array()))  // (the blocker pod has no labels)
    if (p["metadata"].value("labels", json::object()).value("lockstep.dev/job-name", "") == job &&
        !p["spec"].value("nodeName", "").empty())
      out.push_back(p["metadata"].value("name", ""));
  return out;
}

// A gang that does not fit: with the coscheduling scheduler no member is bound (none runs,
// none holds the node's CPU) and the job says why; once there is room all members start
// together. The same job with the default scheduler starts the members that fit: the partial
// start gang scheduling prevents.
TEST_F(LockstepInCluster, AGangThatDoesNotFitStartsNoMemberUntilAllFit) {
  std::string ns = create_test_namespace("gang");
  long long free = free_millicpu();
  ASSERT_GT(free, 600) << "the node has too little CPU left for this test";
  // Three members of 0.3 F fit in F; a blocker of 0.5 F leaves room for one.
  long long member = free * 3 / 10, blocker = free / 2;
  std::string blocker_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: blocker}\nspec:\n"
                            "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: nettest\n    image: " +
                            lockstep::test::cluster_setting("NETTEST_IMAGE") +
                            "\n    imagePullPolicy: Never\n    args: [serve, \"8080\"]\n"
                            "    resources: {requests: {cpu: " + std::to_string(blocker) + "m}}\n";
  auto r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, blocker_pod);
  ASSERT_TRUE(r.status.success()) << r.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"blocker"}), "");

  // Without gang scheduling: the default scheduler binds the member that fits.
  r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, gang_job("loose", member, false));
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_TRUE(eventually([&] { return bound_pods(ns, "loose").size() == 1; }, 60s)) << diagnose(ns);
  std::this_thread::sleep_for(5s);
  EXPECT_EQ(bound_pods(ns, "loose").size(), 1u) << "a partial start: one member holds its CPU, two wait";
  cluster_kubectl({"-n", ns, "delete", "trainingjob", "loose", "--wait=true"}, "", 120s);
  ASSERT_TRUE(eventually([&] { return bound_pods(ns, "loose").empty(); }, 60s)) << diagnose(ns);

  // With it: nobody is bound while the gang does not fit, and the job says why.
  r = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, gang_job("gang", member, true));
  ASSERT_TRUE(r.status.success()) << r.output;
  std::string why;
  EXPECT_TRUE(eventually([&] {
    json j = get_json(ns, "trainingjob/gang");  // kept: condition() points into it
    const json* c = condition(j, "PodsBlocked");
    if (c && c->value("status", "") == "True") why = c->value("reason", "") + ": " + c->value("message", "");
    return !why.empty();
  }, 90s)) << diagnose(ns);
  std::cerr << "[cluster] a gang that does not fit: " << why << "\n";
  EXPECT_NE(why.find("pod gang-"), std::string::npos) << why;
  EXPECT_NE(why.find("none of the 3 pods starts until all of them fit"), std::string::npos) << why;
  for (int i = 0; i < 10; ++i) {  // over 20 s: no member bound, none Running
    EXPECT_TRUE(bound_pods(ns, "gang").empty()) << diagnose(ns);
    std::this_thread::sleep_for(2s);
  }
  EXPECT_EQ(phase(ns, "gang"), "Pending");

  // Room for all: they are bound together.
  auto freed = std::chrono::steady_clock::now();
  r = cluster_kubectl({"-n", ns, "delete", "pod", "blocker", "--wait=true"});
  ASSERT_TRUE(r.status.success()) << r.output;
  ASSERT_TRUE(eventually([&] { return bound_pods(ns, "gang").size() == 3; }, 120s)) << diagnose(ns);
  std::cerr << "[cluster] gang bound "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - freed).count()
            << " s after the capacity was freed\n";
  // Bound together: the scheduler's PodScheduled transitions within a few seconds.
  std::vector<std::chrono::system_clock::time_point> scheduled;
  json pods = get_json(ns, "pods");  // kept alive for the loop
  for (const auto& p : pods.value("items", json::array()))
    for (const auto& c : p["status"].value("conditions", json::array()))
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "True")
        scheduled.push_back(parse_rfc3339(c.value("lastTransitionTime", "")));
  ASSERT_EQ(scheduled.size(), 3u);
  auto [lo, hi] = std::minmax_element(scheduled.begin(), scheduled.end());
  EXPECT_LE(std::chrono::duration<double>(*hi - *lo).count(), 3.0) << "the members were not bound together";
  EXPECT_TRUE(wait_succeeded(ns, "gang", 180s));
  cluster_kubectl({"-n", ns, "delete", "trainingjob", "gang", "--wait=true"}, "", 120s);
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
