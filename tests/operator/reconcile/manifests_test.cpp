// reconcile/manifests: what the operator asks the API server to create.
#include <gtest/gtest.h>
#include <set>
#include <vector>
#include <yaml-cpp/yaml.h>

#include "lockstep/contract.hpp"
#include "lockstep/random.hpp"
#include "pod_text.hpp"
#include "reconcile/manifests.hpp"

using namespace lockstep::reconcile;
using json = nlohmann::json;

TEST(PodManifest, RunsTheAgentInTheTrainerContainerAndKeepsUserEnv) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.uid = "u";
  j.nodes = 4;
  j.procs_per_node = 8;
  j.command = {"python", "train.py"};
  j.args = {"--lr=3e-4"};
  j.tmpl = json::parse(R"({"metadata": {"labels": {"team": "a"}},
    "spec": {"containers": [
      {"name": "sidecar", "image": "busybox"},
      {"name": "trainer", "image": "img", "env": [{"name": "MY_VAR", "value": "1"},
                                                  {"name": "LOCKSTEP_NNODES", "value": "99"}]}]}})");
  json pod = pod_manifest(j, 2, 5);
  EXPECT_EQ(pod["metadata"]["name"], "tj-2");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.dev/restart-attempt"], "5");
  const json& sidecar = pod["spec"]["containers"][0];
  EXPECT_FALSE(sidecar.contains("command"));
  EXPECT_FALSE(sidecar.contains("env"));
  const json& ctr = pod["spec"]["containers"][1];
  EXPECT_EQ(ctr["command"], json({"lockstep-agent", "--max-restarts=3", "--", "python", "train.py", "--lr=3e-4"}));
  std::map<std::string, std::string> env;
  int nnodes_entries = 0;
  for (const auto& e : ctr["env"]) {
    env[e["name"]] = e.value("value", "");
    nnodes_entries += e["name"] == "LOCKSTEP_NNODES";
    // See Note [Worker threads]: the container's own CPU request and limit, from the downward API.
    if (e["name"] == "LOCKSTEP_CPU_REQUEST" || e["name"] == "LOCKSTEP_CPU_LIMIT") {
      EXPECT_EQ(e["valueFrom"]["resourceFieldRef"],
                json({{"containerName", "trainer"}, {"resource", e["name"] == "LOCKSTEP_CPU_REQUEST" ? "requests.cpu" : "limits.cpu"},
                      {"divisor", "1m"}}))
          << e;
    }
  }
  EXPECT_TRUE(env.count("LOCKSTEP_CPU_REQUEST") && env.count("LOCKSTEP_CPU_LIMIT"));
  EXPECT_EQ(env["MY_VAR"], "1");
  EXPECT_EQ(env["LOCKSTEP_NNODES"], "4");  // the operator's value wins, once
  EXPECT_EQ(nnodes_entries, 1);
  EXPECT_EQ(env["LOCKSTEP_NODE_RANK"], "2");
  EXPECT_EQ(env["LOCKSTEP_RESTART_ATTEMPT"], "5");
  EXPECT_EQ(env["PET_MASTER_ADDR"], "tj-0.tj.team.svc");
  EXPECT_EQ(ctr["ports"][0]["containerPort"], 9400);
  // A failed container's last log lines become its termination message (quoted in the job's
  // condition); the sidecar is left alone, and a template's own choice is kept.
  EXPECT_EQ(ctr["terminationMessagePolicy"], "FallbackToLogsOnError");
  EXPECT_FALSE(sidecar.contains("terminationMessagePolicy"));
  json t = j.tmpl.parsed();
  t["spec"]["containers"][1]["terminationMessagePolicy"] = "File";
  j.tmpl = t;
  EXPECT_EQ(pod_manifest(j, 0, 0)["spec"]["containers"][1]["terminationMessagePolicy"], "File");
}

// See Note [Worker threads]: the downward API names the container the agent runs in, which is the
// first one when none is called "trainer"; a reference to a container the pod lacks would
// make the API server refuse the pod.
TEST(PodManifest, CpuVariablesNameTheContainerTheAgentRunsIn) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "main", "image": "img"}, {"name": "sidecar", "image": "busybox"}]}})");
  json pod = pod_manifest(j, 0, 0);
  int found = 0;
  for (const auto& e : pod["spec"]["containers"][0]["env"])
    if (e["name"] == "LOCKSTEP_CPU_REQUEST" || e["name"] == "LOCKSTEP_CPU_LIMIT") {
      ++found;
      EXPECT_EQ(e["valueFrom"]["resourceFieldRef"]["containerName"], "main") << e;
    }
  EXPECT_EQ(found, 2);
  EXPECT_FALSE(pod["spec"]["containers"][1].contains("env"));
}

// See cpu_request_set: LOCKSTEP_CPU_LIMIT only where the template gives the container no CPU
// request the downward API would report (the agent reads the limit only without one).
TEST(PodManifest, TheCpuLimitVariableIsLeftOutWhereTheRequestIsKnown) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  auto cpu_vars = [&](const std::string& resources) {
    j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "img")" +
                         (resources.empty() ? std::string() : ", \"resources\": " + resources) + "}]}}");
    std::set<std::string> out;
    const json pod = pod_manifest(j, 0, 0);
    for (const auto& e : pod["spec"]["containers"][0]["env"])
      if (e["name"] == "LOCKSTEP_CPU_REQUEST" || e["name"] == "LOCKSTEP_CPU_LIMIT") out.insert(e["name"]);
    return out;
  };
  const std::set<std::string> request{"LOCKSTEP_CPU_REQUEST"}, both{"LOCKSTEP_CPU_REQUEST", "LOCKSTEP_CPU_LIMIT"};
  EXPECT_EQ(cpu_vars(R"({"requests": {"cpu": "500m", "memory": "2Gi"}})"), request);
  EXPECT_EQ(cpu_vars(R"({"requests": {"cpu": 2}, "limits": {"cpu": "4"}})"), request);
  EXPECT_EQ(cpu_vars(R"({"limits": {"cpu": "1500m"}})"), request) << "the API server copies a lone limit to the request";
  EXPECT_EQ(cpu_vars(R"({"requests": {"cpu": "0"}, "limits": {"cpu": "2"}})"), both) << "a request of 0 is none";
  EXPECT_EQ(cpu_vars(R"({"requests": {"memory": "2Gi"}, "limits": {"nvidia.com/gpu": 8}})"), both);
  EXPECT_EQ(cpu_vars(""), both) << "a LimitRange's defaults reach the agent through both";
  EXPECT_EQ(cpu_vars(R"({"requests": {"cpu": "lots"}})"), both) << "no quantity: as if none";
}

// Note [Agent injection]
TEST(PodManifest, InjectsTheAgentIntoTheTrainerContainerOnly) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.command = {"python3", "train.py"};
  j.tmpl = json::parse(R"({"spec": {
    "volumes": [{"name": "data", "emptyDir": {}}, {"name": "lockstep-agent", "hostPath": {"path": "/"}}],
    "initContainers": [{"name": "fetch", "image": "busybox"}, {"name": "lockstep-agent", "image": "evil"}],
    "containers": [
      {"name": "sidecar", "image": "busybox"},
      {"name": "trainer", "image": "pytorch/pytorch",
       "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "lockstep-agent", "mountPath": "/x"}]}]}})");
  AgentInjection agent{"registry.example/lockstep/agent:1.2.3", "Always"};
  json pod = pod_manifest(j, 0, 0, agent);
  const json& spec = pod["spec"];
  // The template's own are kept; a template entry with a reserved name is replaced, not doubled.
  ASSERT_EQ(spec["volumes"].size(), 2u) << spec;
  EXPECT_EQ(spec["volumes"][0]["name"], "data");
  EXPECT_EQ(spec["volumes"][1], json::parse(R"({"name": "lockstep-agent", "emptyDir": {"sizeLimit": "256Mi"}})"));
  ASSERT_EQ(spec["initContainers"].size(), 2u) << spec;
  const json& init = spec["initContainers"][0];  // first: the template's own may use the agent's files
  EXPECT_EQ(init["name"], "lockstep-agent");
  EXPECT_EQ(init["image"], "registry.example/lockstep/agent:1.2.3");
  EXPECT_EQ(init["imagePullPolicy"], "Always");
  EXPECT_EQ(init["command"], json({"/lockstep/lockstep-agent", "--install-bundle", "/lockstep-install"}));
  EXPECT_EQ(spec["initContainers"][1]["name"], "fetch");
  // Small (Note [Agent init container resources]: the trainer container here names none, so
  // neither does it), and within the restricted Pod Security Standard.
  EXPECT_EQ(init["resources"], json::object());
  EXPECT_EQ(init["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(init["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(init["securityContext"]["capabilities"]["drop"], json({"ALL"}));
  EXPECT_EQ(init["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  // As the agent image's own user (65532:65532), which runAsNonRoot holds to: none of ours.
  EXPECT_FALSE(init["securityContext"].contains("runAsUser")) << init;
  EXPECT_FALSE(init["securityContext"].contains("runAsGroup")) << init;
  const json& ctr = spec["containers"][1];
  EXPECT_EQ(ctr["command"], json({"/lockstep/agent/lockstep-agent", "--max-restarts=3", "--", "python3", "train.py"}));
  EXPECT_EQ(ctr["volumeMounts"], json::parse(R"([{"name": "data", "mountPath": "/data"},
                                                 {"name": "lockstep-agent", "mountPath": "/lockstep/agent", "readOnly": true}])"));
  EXPECT_EQ(ctr["image"], "pytorch/pytorch");  // the user's image, as it is
  EXPECT_FALSE(spec["containers"][0].contains("volumeMounts"));
  // Without an agent image (--agent-image ''; lockstep run): nothing injected, the agent from PATH.
  json plain = pod_manifest(j, 0, 0);
  EXPECT_EQ(plain["spec"]["containers"][1]["command"], json({"lockstep-agent", "--max-restarts=3", "--", "python3", "train.py"}));
  EXPECT_EQ(plain["spec"]["initContainers"].size(), 2u);  // the template's, as written
  EXPECT_EQ(plain["spec"]["initContainers"][1]["image"], "evil");
}

TEST(ServiceManifest, IsHeadlessAndPublishesNotReadyPods) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.master_port = 29501;
  json svc = service_manifest(j);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 29501);
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["controller"], true);
}

// spec.scheduling.queue does what the CRD's description says: the job is queued as one Kueue
// Workload, and no pod carries the queue label (Kueue's pod integration would make each pod a
// Workload of its own), not even one the template sets. Nothing on the PodGroup either.
TEST(QueueManifest, NoPodCarriesTheQueueLabelAsTheCrdSays) {
  YAML::Node crd = YAML::LoadFile(std::string(LOCKSTEP_SOURCE_DIR) + "/crds/lockstep.dev_trainingjobs.yaml");
  std::string said = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                        ["scheduling"]["properties"]["queue"]["description"].as<std::string>();
  EXPECT_NE(said.find("one Kueue Workload"), std::string::npos) << said;
  EXPECT_NE(said.find("never on its pods"), std::string::npos) << said;
  EXPECT_EQ(said.find("label on every pod"), std::string::npos) << said;

  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.nodes = 3;
  j.queue = "team-a";
  j.tmpl = json{{"metadata", {{"labels", {{lockstep::contract::kLabelKueueQueue, "team-b"},
                                          {"kueue.x-k8s.io/priority-class", "high"}, {"app", "x"}}}}}};
  for (int i = 0; i < j.nodes; ++i) {
    json labels = pod_manifest(j, i, 0)["metadata"]["labels"];
    EXPECT_FALSE(labels.contains(lockstep::contract::kLabelKueueQueue)) << i << labels;
    EXPECT_FALSE(labels.contains("kueue.x-k8s.io/priority-class")) << i << labels;
    EXPECT_EQ(labels["app"], "x");
  }
  json pg = podgroup_manifest(j);
  EXPECT_EQ(pg["spec"], json({{"minMember", 3}}));
  EXPECT_EQ(pg.dump().find("team-a"), std::string::npos) << pg.dump();
}

// Every pod tells its agent the in-place budget per gang attempt and the restart policy to
// judge a worker's exit by; under Never the budget is 0 (Note [In-place restarts]). Both are
// flags before the agent's `--`, each only where it is not the agent's default (Note [Agent
// flags]); never variables, not even a template's own of those names, which would override the
// job's spec.
TEST(PodManifest, CarriesTheInPlaceBudgetAndTheRestartPolicyAsAgentFlags) {
  auto flags_of = [](const json& pod) {
    std::vector<std::string> flags;
    const json& cmd = pod["spec"]["containers"][0]["command"];
    for (size_t i = 1; i < cmd.size() && cmd[i] != "--"; ++i) flags.push_back(cmd[i]);
    return flags;
  };
  auto env_names = [](const json& pod) {
    std::set<std::string> names;
    for (const auto& e : pod["spec"]["containers"][0]["env"]) names.insert(e["name"]);
    return names;
  };
  using Flags = std::vector<std::string>;
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.nodes = 2;
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "img", "env": [
    {"name": "LOCKSTEP_IN_PLACE_RESTARTS", "value": "9"}, {"name": "LOCKSTEP_RESTART_POLICY", "value": "Never"},
    {"name": "MINE", "value": "1"}]}]}})");
  for (int i = 0; i < j.nodes; ++i) {
    const json pod = pod_manifest(j, i, 0);
    EXPECT_EQ(flags_of(pod), Flags({"--max-restarts=3"})) << i;  // the CRD's default; OnFailure is the agent's
    const auto names = env_names(pod);
    EXPECT_FALSE(names.count(lockstep::contract::kInPlaceRestarts)) << i;
    EXPECT_FALSE(names.count(lockstep::contract::kRestartPolicy)) << i;
    EXPECT_TRUE(names.count("MINE")) << i;
    EXPECT_FALSE(names.count(lockstep::contract::kAgentPort)) << "the agents default it";
  }
  j.in_place_restarts = 5;
  j.restart_policy = RestartPolicy::ExitCode;
  EXPECT_EQ(flags_of(pod_manifest(j, 1, 2)), Flags({"--max-restarts=5", "--restart-policy=ExitCode"}));
  j.restart_policy = RestartPolicy::Never;
  EXPECT_EQ(flags_of(pod_manifest(j, 0, 0)), Flags({"--restart-policy=Never"}));
  j.restart_policy = RestartPolicy::OnFailure;
  j.in_place_restarts = 0;
  EXPECT_EQ(flags_of(pod_manifest(j, 0, 0)), Flags{});
  EXPECT_EQ(pod_manifest(j, 0, 0)["spec"]["containers"][0]["command"][1], "--");
}

// See Note [Job ports]: every port a pod serves is listed, once, named unless the name is taken:
// metrics on every pod, the rendezvous and the barrier on pod 0, which serves them.
TEST(PodManifest, ListsTheRendezvousBarrierAndMetricsPorts) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.master_port = 30000;
  j.metrics_port = 9500;
  auto ports_of = [](const json& pod) {
    std::map<int, std::string> out;
    for (const auto& p : pod["spec"]["containers"][0]["ports"]) out[p["containerPort"]] = p.value("name", "");
    return out;
  };
  EXPECT_EQ(ports_of(pod_manifest(j, 0, 0)),
            (std::map<int, std::string>{{9500, "metrics"}, {30000, "rendezvous"}, {30001, "barrier"}}));
  EXPECT_EQ(ports_of(pod_manifest(j, 1, 0)), (std::map<int, std::string>{{9500, "metrics"}}));
  EXPECT_EQ(ports_of(pod_manifest(j, 7, 3)), (std::map<int, std::string>{{9500, "metrics"}}));
  EXPECT_EQ(barrier_port(j), 30001);
  // The template's own entries are kept; a port it lists already is not added again, and a
  // name it uses for another port is not reused.
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "img",
      "ports": [{"name": "barrier", "containerPort": 8080}, {"name": "mine", "containerPort": 30000}]}]}})");
  json ports = pod_manifest(j, 0, 0)["spec"]["containers"][0]["ports"];
  EXPECT_EQ(ports.size(), 4u) << ports.dump();
  EXPECT_EQ(ports_of(pod_manifest(j, 0, 0)),
            (std::map<int, std::string>{{8080, "barrier"}, {9500, "metrics"}, {30000, "mine"}, {30001, ""}}));
}

// Training pods never call the API server: no service-account token unless the template
// sets automountServiceAccountToken itself.
TEST(PodManifest, MountsNoServiceAccountTokenUnlessTheTemplateAsks) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  EXPECT_EQ(pod_manifest(j, 0, 0)["spec"]["automountServiceAccountToken"], false);
  j.tmpl = json::parse(R"({"spec": {"automountServiceAccountToken": true, "containers": [{"name": "trainer"}]}})");
  EXPECT_EQ(pod_manifest(j, 0, 0)["spec"]["automountServiceAccountToken"], true);
}

// See Note [Barrier secret]: the attempt's secret goes into the trainer container's env, and is
// read back from the pod informer's cache (the pod's text, as every pod is read) for a pod
// created later in the same attempt: from the trainer container only, and only a value of the
// operator's own form.
TEST(PodManifest, CarriesTheBarrierSecretAndItIsReadBack) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.nodes = 2;
  const std::string secret = lockstep::random_hex(32);
  auto pod = pod_manifest(j, 1, 4, {}, secret);
  EXPECT_EQ(lockstep::test::pod_view(pod).barrier_secret.hex(), secret);
  EXPECT_EQ(lockstep::test::pod_view(pod_manifest(j, 1, 4)).barrier_secret.hex(), "") << "none unless given";
  EXPECT_EQ(lockstep::test::pod_view(json::object()).barrier_secret.hex(), "");
  EXPECT_EQ(lockstep::test::pod_view(json{{"spec", {{"containers", "x"}}}}).barrier_secret.hex(), "");
  // A sidecar's variable of that name, before the trainer container, is not the secret.
  j.tmpl = json::parse(R"({"spec": {"containers": [
      {"name": "sidecar", "env": [{"name": "LOCKSTEP_BARRIER_SECRET", "value": ")" + std::string(64, 'a') + R"("}]},
      {"name": "trainer"}]}})");
  auto with_sidecar = pod_manifest(j, 1, 4, {}, secret);
  EXPECT_EQ(lockstep::test::pod_view(with_sidecar).barrier_secret.hex(), secret);
  // Without a container named trainer, the first is the trainer container, as pod_manifest takes it.
  j.tmpl = json::parse(R"({"spec": {"containers": [{"name": "main"}, {"name": "side"}]}})");
  EXPECT_EQ(lockstep::test::pod_view(pod_manifest(j, 1, 4, {}, secret)).barrier_secret.hex(), secret);
  // Not of the operator's form (a tenant's own pod, a template's value): none.
  for (std::string forged : {std::string(63, 'a'), std::string(64, 'A'), std::string(64, 'g'), std::string(65, 'a')}) {
    json p = pod;
    for (auto& e : p["spec"]["containers"][0]["env"])
      if (e["name"] == "LOCKSTEP_BARRIER_SECRET") e["value"] = forged;
    EXPECT_EQ(lockstep::test::pod_view(p).barrier_secret.hex(), "") << forged;
  }
  // Only in the env: not in labels or annotations, where more readers would see it.
  EXPECT_EQ(pod["metadata"].dump().find(secret), std::string::npos);
}

// See Note [Job isolation]: the job's own pods on every port; the operator's and the monitoring
// namespaces on the metrics port only; ingress alone.
TEST(NetworkPolicyManifest, AdmitsTheJobOnEveryPortAndTheOperatorAndMonitoringOnMetrics) {
  JobView j = JobView::from_json(json::parse(R"({"metadata": {"name": "tj", "namespace": "team", "uid": "u"},
    "spec": {"isolation": "NetworkPolicy", "metrics": {"port": 9500}}})"));
  ASSERT_EQ(j.isolation, Isolation::NetworkPolicy);
  json np = network_policy_manifest(j, {"lockstep-system", "monitoring"});
  EXPECT_EQ(np["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(np["kind"], "NetworkPolicy");
  EXPECT_EQ(np["metadata"]["name"], "tj");
  EXPECT_EQ(np["metadata"]["namespace"], "team");
  EXPECT_EQ(np["metadata"]["ownerReferences"], json::array({owner_reference(j)}));
  EXPECT_EQ(np["metadata"]["labels"]["lockstep.dev/job-name"], "tj");  // the informer's selector
  EXPECT_EQ(np["spec"]["policyTypes"], json({"Ingress"}));

  // It selects exactly what the job's pods carry, whatever the template adds.
  j.tmpl = json::parse(R"({"metadata": {"labels": {"team": "a"}}, "spec": {"containers": [{"name": "trainer"}]}})");
  json pod_labels = pod_manifest(j, 1, 2)["metadata"]["labels"];
  const json& selector = np["spec"]["podSelector"]["matchLabels"];
  ASSERT_FALSE(selector.empty());
  for (const auto& [k, v] : selector.items()) EXPECT_EQ(pod_labels.value(k, ""), v) << k;
  EXPECT_FALSE(selector.contains("lockstep.dev/restart-attempt"));  // every attempt's pods

  const json& ingress = np["spec"]["ingress"];
  ASSERT_EQ(ingress.size(), 3u) << ingress;
  EXPECT_EQ(ingress[0], json::parse(R"({"from": [{"podSelector": {"matchLabels": {"lockstep.dev/job-name": "tj"}}}]})"))
      << "the job's own pods, every port (Gloo and NCCL use ephemeral ones)";
  for (auto [i, ns] : {std::pair<int, const char*>{1, "lockstep-system"}, {2, "monitoring"}}) {
    EXPECT_EQ(ingress[i]["from"], json::array({{{"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", ns}}}}}}}))
        << ingress[i];
    EXPECT_EQ(ingress[i]["ports"], json::parse(R"([{"protocol": "TCP", "port": 9500}])")) << ingress[i];
  }
}

TEST(NetworkPolicyManifest, LeavesOutPeersWithNoNamespace) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  EXPECT_EQ(network_policy_manifest(j, {})["spec"]["ingress"].size(), 1u);  // the job's own pods only
  json one = network_policy_manifest(j, {"", "monitoring"})["spec"]["ingress"];
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], "monitoring");
  EXPECT_EQ(network_policy_manifest(j, {"ops", "ops"})["spec"]["ingress"].size(), 2u);  // one rule for one namespace
  EXPECT_EQ(JobView::from_json(json::parse(R"({"spec": {}})")).isolation, Isolation::None);
}

// See Note [Cached templates]: a running job's template is kept as its compact text, shared by
// copies of the view, and gives back the same object; a finished or suspended job's is not kept.
TEST(CachedTemplates, ARunningJobKeepsItsTemplateAsSharedTextAndTheOthersKeepNone) {
  json tmpl = json::parse(R"({"metadata": {"labels": {"team": "a"}},
    "spec": {"containers": [{"name": "trainer", "image": "img", "env": [{"name": "A", "value": "1"}]}]}})");
  json obj = {{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"},
              {"metadata", {{"name", "tj"}, {"namespace", "team"}, {"uid", "u"}, {"resourceVersion", "7"}}},
              {"spec", {{"nodes", 2}, {"template", tmpl}}}};
  JobRecord running = JobRecord::from_json(obj);
  EXPECT_FALSE(running.view.tmpl.empty());
  EXPECT_EQ(running.view.tmpl.bytes(), tmpl.dump().size()) << "compact text, not a tree";
  EXPECT_EQ(running.view.tmpl.parsed(), tmpl);
  JobView copy = running.view;
  EXPECT_EQ(copy.tmpl.parsed(), tmpl);
  EXPECT_EQ(pod_manifest(copy, 0, 0)["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(pod_manifest(copy, 0, 0)["spec"]["containers"][0]["image"], "img");

  json finished = obj;
  finished["status"] = {{"phase", "Succeeded"}, {"completionTime", "2026-01-01T00:00:00Z"}};
  EXPECT_TRUE(JobRecord::from_json(finished).view.tmpl.empty());
  json suspended = obj;
  suspended["spec"]["runPolicy"] = {{"suspend", true}};
  EXPECT_TRUE(JobRecord::from_json(suspended).view.tmpl.empty());
  // No template, or one that is not an object: pods from an empty one, as before.
  json none = obj;
  none["spec"].erase("template");
  EXPECT_TRUE(JobRecord::from_json(none).view.tmpl.empty());
  EXPECT_EQ(JobRecord::from_json(none).view.tmpl.parsed(), json::object());
}

TEST(PodManifest, OnePodPerNodeAddsAnAntiAffinityBetweenTheJobsPodsToTheTemplatesOwn) {
  JobView j = JobView::from_json(json::parse(R"({"metadata": {"name": "spread", "namespace": "ns"},
      "spec": {"nodes": 3, "scheduling": {"onePodPerNode": true},
               "template": {"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                 {"labelSelector": {"matchLabels": {"team": "b"}}, "topologyKey": "zone"}]}}}}}})"));
  json rules = pod_manifest(j, 1, 0)["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(rules.size(), 2u) << rules.dump();
  EXPECT_EQ(rules[0]["topologyKey"], "zone") << "the template's own rule is kept";
  EXPECT_EQ(rules[1]["topologyKey"], "kubernetes.io/hostname");
  EXPECT_EQ(rules[1]["labelSelector"]["matchLabels"][lockstep::contract::kLabelJobName], "spread");

  // Without the field (the default), the template's affinity is as written, and none is added.
  JobView plain = JobView::from_json(json::parse(R"({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodes": 2}})"));
  EXPECT_FALSE(pod_manifest(plain, 0, 0)["spec"].contains("affinity"));
  JobView alone = JobView::from_json(json::parse(R"({"metadata": {"name": "a", "namespace": "ns"},
      "spec": {"nodes": 2, "scheduling": {"onePodPerNode": true}}})"));
  json rule = pod_manifest(alone, 0, 0)["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(rule.size(), 1u);
  EXPECT_EQ(rule[0]["labelSelector"]["matchLabels"][lockstep::contract::kLabelJobName], "a");
}

// See Note [Agent injection]: every mount of the agent's volume in the template, whole or a subPath,
// in a container or an init container, is read-only in the pod, whatever the template says; the
// operator's own init container, which fills it, alone writes it. Without injection the volume
// of that name is the template's own and left alone.
TEST(PodManifest, EveryMountOfTheAgentVolumeIsReadOnly) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  j.tmpl = json::parse(R"({"spec": {
    "volumes": [{"name": "lockstep-agent", "emptyDir": {}}],
    "initContainers": [
      {"name": "fetch", "image": "busybox", "volumeMounts": [{"name": "lockstep-agent", "mountPath": "/agent"}]}],
    "containers": [
      {"name": "trainer", "image": "img"},
      {"name": "sidecar", "image": "busybox", "volumeMounts": [
        {"name": "data", "mountPath": "/data"},
        {"name": "lockstep-agent", "mountPath": "/agent", "readOnly": false},
        {"name": "lockstep-agent", "mountPath": "/bin/agent", "subPath": "lockstep-agent"},
        {"name": 5, "mountPath": "/odd"}]}]}})");
  json pod = pod_manifest(j, 0, 0, AgentInjection{"lockstep/agent:1"});
  const json& spec = pod["spec"];
  int read_only = 0, writable = 0;
  for (const char* list : {"containers", "initContainers"})
    for (const auto& ctr : spec[list])
      for (const auto& m : ctr.value("volumeMounts", json::array())) {
        if (m["name"] != "lockstep-agent") continue;
        const bool ours = ctr["name"] == "lockstep-agent" && std::string(list) == "initContainers";
        (m.value("readOnly", false) ? read_only : writable) += 1;
        EXPECT_EQ(m.value("readOnly", false), !ours) << ctr["name"] << ": " << m;
      }
  EXPECT_EQ(read_only, 4) << "the trainer's own, fetch's and the sidecar's two";
  EXPECT_EQ(writable, 1) << "the operator's init container's";
  EXPECT_EQ(spec["containers"][1]["volumeMounts"][0], json::parse(R"({"name": "data", "mountPath": "/data"})"));
  EXPECT_EQ(spec["containers"][1]["volumeMounts"][3], json::parse(R"({"name": 5, "mountPath": "/odd"})"));

  json plain = pod_manifest(j, 0, 0);
  EXPECT_EQ(plain["spec"]["containers"][1]["volumeMounts"][1]["readOnly"], false);
  EXPECT_FALSE(plain["spec"]["initContainers"][0]["volumeMounts"][0].contains("readOnly"));
}

// See Note [Agent injection]: a mount (of any volume, a subPath too) or a device at or below
// /lockstep/agent in the container that runs the agent would overlay it: agent_overlay names the
// field. However the path is spelt; in that container only; never a mount of the agent's own
// volume there, which the operator replaces.
TEST(AgentOverlay, NamesAMountOrDeviceAtOrBelowTheAgentInTheContainerThatRunsIt) {
  auto with_mount = [](const std::string& path, const std::string& extra = "") {
    return json::parse(R"({"spec": {"containers": [{"name": "side", "image": "x"}, {"name": "trainer", "image": "x",
        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "bin", "mountPath": )" + json(path).dump() +
                       extra + "}]}]}}");
  };
  for (const std::string path : {"/lockstep/agent", "/lockstep/agent/", "/lockstep/agent/lockstep-agent",
                                 "/lockstep//agent", "/lockstep/./agent/lib", "/x/../lockstep/agent", "lockstep/agent",
                                 "/../lockstep/agent/x"}) {
    const std::string problem = agent_overlay(with_mount(path));
    const std::string field = "spec.template.spec.containers[1].volumeMounts[1].mountPath: Invalid value: ";
    EXPECT_EQ(problem.rfind(field + json(path).dump() + ": ", 0), 0u) << path << ": " << problem;
  }
  EXPECT_NE(agent_overlay(with_mount("/lockstep/agent/lockstep-agent", R"(, "subPath": "evil")")), "")
      << "a subPath overlays too";
  for (const std::string path : {"/lockstep", "/lockstep/agents", "/lockstep/agent-x", "/lockstep-install",
                                 "/data/lockstep/agent", "/", ""})
    EXPECT_EQ(agent_overlay(with_mount(path)), "") << path;
  EXPECT_EQ(agent_overlay(with_mount("/lockstep/agent")),
            "spec.template.spec.containers[1].volumeMounts[1].mountPath: Invalid value: \"/lockstep/agent\": the operator "
            "mounts the Lockstep agent at /lockstep/agent in the container that runs it (the one named trainer), and a "
            "mount at or below that path would hide or replace the agent; use a path outside /lockstep/agent");

  // A device there does the same.
  json device = json::parse(R"({"spec": {"containers": [{"name": "main", "image": "x",
      "volumeDevices": [{"name": "disk", "devicePath": "/lockstep/agent/lockstep-agent"}]}]}})");
  EXPECT_EQ(agent_overlay(device).rfind("spec.template.spec.containers[0].volumeDevices[0].devicePath: Invalid value: "
                                        "\"/lockstep/agent/lockstep-agent\": the operator mounts the Lockstep agent at "
                                        "/lockstep/agent in the container that runs it (the first, as none is named "
                                        "trainer), and a device at or below",
                                        0),
            0u)
      << agent_overlay(device);
  // Another container may mount anything there: it does not run the agent.
  EXPECT_EQ(agent_overlay(json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "x"},
      {"name": "side", "image": "x", "volumeMounts": [{"name": "bin", "mountPath": "/lockstep/agent"}]}]}})")), "");
  // The template's mount of the agent's own volume in that container is replaced by the operator's.
  EXPECT_EQ(agent_overlay(json::parse(R"({"spec": {"containers": [{"name": "trainer", "image": "x",
      "volumeMounts": [{"name": "lockstep-agent", "mountPath": "/lockstep/agent/x"}]}]}})")), "");
  // Shapes the CRD lets through, or no template at all: nothing to name.
  for (const char* odd : {R"({})", R"({"spec": {"containers": "x"}})", R"({"spec": {"containers": [{"name": "trainer",
      "volumeMounts": [{"mountPath": 7}, "x", {"mountPath": "/lockstep/agent/y", "name": ["a"]}]}]}})"})
    EXPECT_EQ(agent_overlay(json::parse(odd)).empty(), std::string(odd).find("/y") == std::string::npos) << odd;
  EXPECT_EQ(agent_overlay(json()), "");
}

// See Note [UTF-8 text]: an Event's message is cut at 1,024 bytes on a character boundary, whatever
// character straddles the bound, so the Event can be sent (dump() throws on a cut character).
TEST(EventManifest, CutsALongMessageOnACharacterBoundary) {
  JobView j;
  j.name = "tj";
  j.ns = "team";
  for (const std::string c : {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"})
    for (size_t shift = 0; shift < c.size(); ++shift) {
      const std::string message = std::string(kMaxEventMessage - 1 - shift, 'a') + c + std::string(500, 'z');
      json event = event_manifest(j, "Warning", "FailedCreatePod", message, "2026-01-01T00:00:00Z", "lockstep-operator");
      const std::string kept = event["message"];
      const size_t whole = kMaxEventMessage - 1 - shift + c.size();  // the character ends here
      EXPECT_EQ(kept.size(), whole <= kMaxEventMessage ? kMaxEventMessage : kMaxEventMessage - 1 - shift)
          << c.size() << "-byte character, shift " << shift;
      EXPECT_EQ(message.compare(0, kept.size(), kept), 0);
      EXPECT_NO_THROW((void)event.dump());
    }
  EXPECT_EQ(event_manifest(j, "Normal", "R", "short", "t", "c")["message"], "short");
}
