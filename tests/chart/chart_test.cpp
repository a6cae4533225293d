// charts/lockstep against the real kube-apiserver: lint, server-side dry-run of the rendered
// manifests, a real install, and the operator reconciling a TrainingJob with the chart's
// ServiceAccount token, which proves the chart's RBAC is enough. And the RBAC is no more
// than the operator uses.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "chart_support.hpp"
#include "kube_test_support.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using lockstep::run_capture;
using lockstep::test::control_plane;
using lockstep::test::kubectl;
using lockstep::test::read_text;
using lockstep::test::eventually;
using lockstep::test::source_path;

using lockstep::test::helm;  // chart_support.hpp

TEST(Chart, CarriesTheSameCrdAndDashboardsAsTheRepository) {
  EXPECT_EQ(read_text(source_path("charts/lockstep/crds/lockstep.dev_trainingjobs.yaml")),
            read_text(source_path("crds/lockstep.dev_trainingjobs.yaml")))
      << "copy crds/lockstep.dev_trainingjobs.yaml to charts/lockstep/crds/";
  int n = 0;
  for (const auto& e : fs::directory_iterator(source_path("dashboards"))) {
    if (e.path().extension() != ".json") continue;
    ++n;
    EXPECT_EQ(read_text(source_path("charts/lockstep/dashboards/" + e.path().filename().string())), read_text(e.path()))
        << e.path().filename() << " differs in charts/lockstep/dashboards/";
  }
  EXPECT_GE(n, 2);
}

TEST(Chart, LintPasses) {
  auto r = helm({"lint", source_path("charts/lockstep")});
  EXPECT_TRUE(r.status.success()) << r.output;
  EXPECT_NE(r.output.find("0 chart(s) failed"), std::string::npos) << r.output;
}

TEST(Chart, RenderedManifestsPassServerSideDryRun) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  kubectl({"create", "namespace", "dry-run"});
  kubectl({"create", "namespace", "team-a"});  // the namespaced mode puts its Role there
  for (std::vector<std::string> set : {std::vector<std::string>{}, {"--set", "watchNamespace=team-a"},
                                       {"--set", "networkPolicy.enabled=true", "--set", "monitoringNamespace=monitoring",
                                        "--set", "networkPolicy.probeCIDRs={10.0.0.0/8}"},
                                       {"--set", "networkPolicy.enabled=true"}}) {
    std::vector<std::string> args = {"template", "lockstep", source_path("charts/lockstep"), "-n", "dry-run", "--include-crds"};
    args.insert(args.end(), set.begin(), set.end());
    auto t = helm(args);
    ASSERT_TRUE(t.status.success()) << t.output;
    auto r = kubectl({"apply", "--dry-run=server", "-f", "-"}, t.output);  // every object names its namespace
    EXPECT_TRUE(r.status.success()) << lockstep::shell_join(set) << "\n" << r.output;
  }
}

// Exactly the (group, resource, verb) triples lockstep-operator's code uses (docs/operator.md).
// See Note [Agent injection]: the agent image is a value, defaulting to the chart's own version;
// an empty repository injects nothing.
TEST(Chart, AgentImageIsAValueDefaultingToTheChartsVersion) {
  auto version = helm({"show", "chart", source_path("charts/lockstep")});
  ASSERT_TRUE(version.status.success()) << version.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(version.output, m, std::regex("appVersion: \"?([0-9.]+)"))) << version.output;
  const std::string app_version = m[1];
  struct Case {
    std::vector<std::string> set;
    std::string image, policy;
  };
  for (const Case& c : {Case{{}, "lockstep/agent:" + app_version, "IfNotPresent"},
                        Case{{"--set", "agent.image.repository=registry.example/team/agent", "--set",
                              "agent.image.tag=9.9", "--set", "agent.image.pullPolicy=Always"},
                             "registry.example/team/agent:9.9", "Always"},
                        Case{{"--set", "agent.image.repository="}, "", "IfNotPresent"}}) {
    std::vector<std::string> args = {"template", "lockstep", source_path("charts/lockstep"), "-n", "x",
                                     "--show-only", "templates/deployment.yaml"};
    args.insert(args.end(), c.set.begin(), c.set.end());
    auto t = helm(args);
    ASSERT_TRUE(t.status.success()) << t.output;
    YAML::Node dep;  // the file renders a Service, then the Deployment
    for (const auto& doc : YAML::LoadAll(t.output))
      if (doc["kind"] && doc["kind"].as<std::string>() == "Deployment") dep = doc;
    ASSERT_TRUE(dep) << t.output;
    std::vector<std::string> flags;
    for (const auto& a : dep["spec"]["template"]["spec"]["containers"][0]["args"]) flags.push_back(a.as<std::string>());
    auto has = [&](const std::string& f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
    EXPECT_TRUE(has("--agent-image=" + c.image)) << t.output;
    EXPECT_TRUE(has("--agent-image-pull-policy=" + c.policy)) << t.output;
  }
}

// Note [Job isolation] (operator/reconcile/manifests.hpp): the operator learns its namespace
// from the downward API and the monitoring namespace and the jobs' default isolation from
// values; its own NetworkPolicy is on by default (#40: any pod could read every tenant's job
// names on /metrics) and admits only the monitoring namespace and the probe CIDRs, on the HTTP
// port; networkPolicy.enabled=false is the way out.
TEST(Chart, NetworkIsolationValues) {
  auto render = [](std::vector<std::string> set) {
    std::vector<std::string> args = {"template", "lockstep", source_path("charts/lockstep"), "-n", "ops"};
    args.insert(args.end(), set.begin(), set.end());
    auto t = helm(args);
    EXPECT_TRUE(t.status.success()) << t.output;
    std::map<std::string, YAML::Node> by_kind;
    for (const auto& doc : YAML::LoadAll(t.output))
      if (doc && doc["kind"]) by_kind[doc["kind"].as<std::string>()] = doc;
    return by_kind;
  };
  auto plain = render({});
  ASSERT_TRUE(plain.count("NetworkPolicy")) << "the operator's NetworkPolicy is on by default";
  EXPECT_EQ(plain["NetworkPolicy"]["spec"]["ingress"].size(), 0u) << "with no monitoring namespace, no peer";
  EXPECT_FALSE(render({"--set", "networkPolicy.enabled=false"}).count("NetworkPolicy")) << "and can be turned off";
  ASSERT_TRUE(plain.count("Deployment"));
  const YAML::Node ctr = plain["Deployment"]["spec"]["template"]["spec"]["containers"][0];
  bool pod_namespace = false;
  for (const auto& e : ctr["env"])
    pod_namespace |= e["name"].as<std::string>() == "POD_NAMESPACE" &&
                     e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>() == "metadata.namespace";
  EXPECT_TRUE(pod_namespace) << "the operator's namespace (--operator-namespace's default) from the downward API";
  std::vector<std::string> args;
  for (const auto& a : ctr["args"]) args.push_back(a.as<std::string>());
  EXPECT_NE(std::find(args.begin(), args.end(), "--monitoring-namespace="), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--default-isolation=None"), args.end());
  args.clear();
  for (const auto& a : render({"--set", "defaultIsolation=NetworkPolicy"})["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"])
    args.push_back(a.as<std::string>());
  EXPECT_NE(std::find(args.begin(), args.end(), "--default-isolation=NetworkPolicy"), args.end());

  auto on = render({"--set", "networkPolicy.enabled=true", "--set", "monitoringNamespace=monitoring", "--set",
                    "networkPolicy.probeCIDRs={10.0.0.0/16,fd00::/64}", "--set", "metrics.port=8081"});
  ASSERT_TRUE(on.count("NetworkPolicy"));
  const YAML::Node np = on["NetworkPolicy"];
  EXPECT_EQ(np["metadata"]["namespace"].as<std::string>(), "ops");
  EXPECT_EQ(np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as<std::string>(), "lockstep-operator");
  EXPECT_EQ(np["spec"]["policyTypes"].size(), 1u);
  EXPECT_EQ(np["spec"]["policyTypes"][0].as<std::string>(), "Ingress");
  ASSERT_EQ(np["spec"]["ingress"].size(), 1u);
  const YAML::Node rule = np["spec"]["ingress"][0];
  ASSERT_EQ(rule["ports"].size(), 1u);
  EXPECT_EQ(rule["ports"][0]["port"].as<int>(), 8081);
  ASSERT_EQ(rule["from"].size(), 3u);
  EXPECT_EQ(rule["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as<std::string>(), "monitoring");
  EXPECT_EQ(rule["from"][1]["ipBlock"]["cidr"].as<std::string>(), "10.0.0.0/16");
  EXPECT_EQ(rule["from"][2]["ipBlock"]["cidr"].as<std::string>(), "fd00::/64");
  args.clear();
  for (const auto& a : on["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]) args.push_back(a.as<std::string>());
  EXPECT_NE(std::find(args.begin(), args.end(), "--monitoring-namespace=monitoring"), args.end());

  // Enabled with no peer: no ingress at all but what the CNI exempts.
  auto closed = render({"--set", "networkPolicy.enabled=true"});
  ASSERT_TRUE(closed.count("NetworkPolicy"));
  EXPECT_TRUE(closed["NetworkPolicy"]["spec"]["ingress"].IsSequence());
  EXPECT_EQ(closed["NetworkPolicy"]["spec"]["ingress"].size(), 0u);
}

// See Note [Lost nodes]: nodes are cluster-scoped, so the node watch has a ClusterRole of its own
// (named with the release's namespace), with the operator's other rules cluster-wide or not;
// nodeWatch false drops it and turns the watch off. The backoff reset is a value too.
TEST(Chart, NodeWatchIsAValueWithAClusterRoleOfItsOwn) {
  auto render = [](std::vector<std::string> set) {
    std::vector<std::string> args = {"template", "rel", source_path("charts/lockstep"), "-n", "ops"};
    args.insert(args.end(), set.begin(), set.end());
    auto t = helm(args);
    EXPECT_TRUE(t.status.success()) << t.output;
    std::map<std::string, YAML::Node> by_name;  // kind/name
    std::vector<std::string> flags;
    for (const auto& doc : YAML::LoadAll(t.output)) {
      if (!doc || !doc["kind"]) continue;
      by_name[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] = doc;
      if (doc["kind"].as<std::string>() == "Deployment")
        for (const auto& a : doc["spec"]["template"]["spec"]["containers"][0]["args"]) flags.push_back(a.as<std::string>());
    }
    return std::make_pair(by_name, flags);
  };
  auto has = [](const std::vector<std::string>& flags, const std::string& f) {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  };
  for (std::vector<std::string> set : {std::vector<std::string>{}, {"--set", "watchNamespace=team-a"}}) {
    auto [docs, flags] = render(set);
    SCOPED_TRACE(lockstep::shell_join(set));
    ASSERT_TRUE(docs.count("ClusterRole/rel-operator-nodes-ops"));
    const YAML::Node rules = docs["ClusterRole/rel-operator-nodes-ops"]["rules"];
    ASSERT_EQ(rules.size(), 1u);
    EXPECT_EQ(rules[0]["resources"][0].as<std::string>(), "nodes");
    ASSERT_TRUE(docs.count("ClusterRoleBinding/rel-operator-nodes-ops"));
    const YAML::Node subject = docs["ClusterRoleBinding/rel-operator-nodes-ops"]["subjects"][0];
    EXPECT_EQ(subject["name"].as<std::string>(), "rel-operator");
    EXPECT_EQ(subject["namespace"].as<std::string>(), "ops");
    EXPECT_TRUE(has(flags, "--node-watch=true"));
    EXPECT_TRUE(has(flags, "--restart-backoff-reset=10m"));
  }
  auto [off, flags] = render({"--set", "nodeWatch=false", "--set", "restartBackoffReset=0s"});
  EXPECT_FALSE(off.count("ClusterRole/rel-operator-nodes-ops"));
  EXPECT_FALSE(off.count("ClusterRoleBinding/rel-operator-nodes-ops"));
  EXPECT_TRUE(has(flags, "--node-watch=false"));
  EXPECT_TRUE(has(flags, "--restart-backoff-reset=0s"));
}

TEST(Chart, RbacGrantsOnlyWhatTheOperatorUses) {
  const std::set<std::string> used = {
      "lockstep.dev/trainingjobs/list", "lockstep.dev/trainingjobs/watch", "lockstep.dev/trainingjobs/delete",
      "lockstep.dev/trainingjobs/status/patch",
      // blockOwnerDeletion on every child, under OwnerReferencesPermissionEnforcement.
      "lockstep.dev/trainingjobs/finalizers/update",
      "/pods/list", "/pods/watch", "/pods/create", "/pods/delete",
      "/services/list", "/services/watch", "/services/create", "/services/delete",
      "networking.k8s.io/networkpolicies/list", "networking.k8s.io/networkpolicies/watch",
      "networking.k8s.io/networkpolicies/create", "networking.k8s.io/networkpolicies/delete",
      "scheduling.x-k8s.io/podgroups/list", "scheduling.x-k8s.io/podgroups/watch",
      "scheduling.x-k8s.io/podgroups/create", "scheduling.x-k8s.io/podgroups/delete",
      "/events/create", "/events/patch",  // Note [Repeated Events]
      // See Note [Lost nodes]: the node watch, and a read of a node it has not seen.
      "/nodes/get", "/nodes/list", "/nodes/watch",
      "coordination.k8s.io/leases/get", "coordination.k8s.io/leases/create", "coordination.k8s.io/leases/update"};
  auto t = helm({"template", "lockstep", source_path("charts/lockstep"), "-n", "lockstep-system"});
  ASSERT_TRUE(t.status.success()) << t.output;
  std::set<std::string> granted;
  for (const auto& doc : YAML::LoadAll(t.output)) {
    if (!doc || !doc["kind"]) continue;
    std::string kind = doc["kind"].as<std::string>();
    if (kind != "ClusterRole" && kind != "Role") continue;
    for (const auto& rule : doc["rules"])
      for (const auto& g : rule["apiGroups"])
        for (const auto& r : rule["resources"])
          for (const auto& v : rule["verbs"]) {
            std::string verb = v.as<std::string>();
            EXPECT_NE(verb, "*") << "wildcard verb";
            EXPECT_NE(r.as<std::string>(), "secrets") << "the operator never reads Secrets";
            granted.insert(g.as<std::string>() + "/" + r.as<std::string>() + "/" + verb);
          }
  }
  for (const auto& g : granted) EXPECT_TRUE(used.count(g)) << "the chart grants " << g << ", which the operator does not use";
  for (const auto& u : used) EXPECT_TRUE(granted.count(u)) << "the chart lacks " << u << ", which the operator needs";
}

// docs/kueue.md: kueue.enabled grants the operator exactly what it uses of Kueue's objects (the
// kueue_test suite runs the operator under these rules against a real Kueue), and Kueue's manager
// a read of TrainingJobs, bound to the service account the values name. Off, none of it.
TEST(Chart, KueueGrantsTheOperatorItsWorkloadsAndKueueAReadOfTrainingJobs) {
  auto rules_of = [](std::vector<std::string> set) {
    std::vector<std::string> args = {"template", "rel", source_path("charts/lockstep"), "-n", "ops"};
    args.insert(args.end(), set.begin(), set.end());
    auto t = helm(args);
    EXPECT_TRUE(t.status.success()) << t.output;
    std::map<std::string, std::set<std::string>> granted;  // role -> group/resource/verb
    std::map<std::string, YAML::Node> bindings;
    for (const auto& doc : YAML::LoadAll(t.output)) {
      if (!doc || !doc["kind"]) continue;
      const std::string kind = doc["kind"].as<std::string>(), name = doc["metadata"]["name"].as<std::string>();
      if (kind == "ClusterRoleBinding" || kind == "RoleBinding") bindings[name] = doc;
      if (kind != "ClusterRole" && kind != "Role") continue;
      for (const auto& rule : doc["rules"])
        for (const auto& g : rule["apiGroups"])
          for (const auto& r : rule["resources"])
            for (const auto& v : rule["verbs"])
              granted[name].insert(g.as<std::string>() + "/" + r.as<std::string>() + "/" + v.as<std::string>());
    }
    return std::make_pair(granted, bindings);
  };
  auto [off, off_bindings] = rules_of({});
  for (const auto& [role, verbs] : off)
    for (const auto& v : verbs) EXPECT_EQ(v.find("kueue.x-k8s.io"), std::string::npos) << role << ": " << v;
  EXPECT_FALSE(off.count("rel-operator-kueue-reads-trainingjobs"));

  auto [on, bindings] = rules_of({"--set", "kueue.enabled=true", "--set", "kueue.serviceAccount.namespace=kq"});
  std::set<std::string> operator_kueue;
  for (const auto& role : {"rel-operator", "rel-operator-kueue-ops"})
    for (const auto& v : on[role])
      if (v.find("kueue.x-k8s.io/") == 0 || v.find("scheduling.k8s.io/") == 0) operator_kueue.insert(v);
  const std::set<std::string> used = {
      "kueue.x-k8s.io/workloads/list", "kueue.x-k8s.io/workloads/watch", "kueue.x-k8s.io/workloads/create",
      "kueue.x-k8s.io/workloads/delete", "kueue.x-k8s.io/workloads/patch", "kueue.x-k8s.io/workloads/status/patch",
      "kueue.x-k8s.io/resourceflavors/get", "kueue.x-k8s.io/resourceflavors/list", "kueue.x-k8s.io/resourceflavors/watch",
      "kueue.x-k8s.io/workloadpriorityclasses/get", "scheduling.k8s.io/priorityclasses/get"};
  EXPECT_EQ(operator_kueue, used);
  EXPECT_EQ(on["rel-operator-kueue-reads-trainingjobs"],
            (std::set<std::string>{"lockstep.dev/trainingjobs/get", "lockstep.dev/trainingjobs/list",
                                   "lockstep.dev/trainingjobs/watch"}));
  ASSERT_TRUE(bindings.count("rel-operator-kueue-reads-trainingjobs"));
  const YAML::Node subject = bindings["rel-operator-kueue-reads-trainingjobs"]["subjects"][0];
  EXPECT_EQ(subject["name"].as<std::string>(), "kueue-controller-manager");
  EXPECT_EQ(subject["namespace"].as<std::string>(), "kq");
  EXPECT_EQ(bindings["rel-operator-kueue-ops"]["subjects"][0]["name"].as<std::string>(), "rel-operator");
}

TEST(Chart, InstallsAndItsServiceAccountCanRunTheOperator) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  for (const char* f : {"tests/crds/podgroup.yaml"}) ASSERT_TRUE(kubectl({"apply", "-f", source_path(f)}).status.success());
  auto r = helm({"install", "lockstep", source_path("charts/lockstep"), "-n", "lockstep-system", "--create-namespace"});
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_NE(r.output.find("lockstep-operator"), std::string::npos) << "NOTES.txt: " << r.output;
  for (std::vector<std::string> obj : {std::vector<std::string>{"deployment", "lockstep-operator"},
                                       {"serviceaccount", "lockstep-operator"}, {"service", "lockstep-operator"},
                                       {"configmap", "lockstep-dashboards"}, {"role", "lockstep-operator-leader-election"},
                                       {"rolebinding", "lockstep-operator-leader-election"}}) {
    auto g = kubectl({"get", "-n", "lockstep-system", obj[0], obj[1]});
    EXPECT_TRUE(g.status.success()) << obj[0] << " " << obj[1] << ": " << g.output;
  }
  EXPECT_TRUE(kubectl({"get", "clusterrole", "lockstep-operator"}).status.success());
  EXPECT_TRUE(kubectl({"get", "clusterrole", "lockstep-operator-nodes-lockstep-system"}).status.success());
  EXPECT_TRUE(kubectl({"get", "crd", "trainingjobs.lockstep.dev"}).status.success());
  auto dep = kubectl({"get", "deployment", "lockstep-operator", "-n", "lockstep-system", "-o",
                      "jsonpath={.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} "
                      "{.spec.template.spec.securityContext.runAsNonRoot}"});
  EXPECT_EQ(dep.output, "true true");

  // The chart's ServiceAccount, as the operator would see it in its pod.
  std::string kc = lockstep::test::service_account_kubeconfig("lockstep-system", "lockstep-operator",
                                                              ::testing::TempDir() + "/sa-kubeconfig");
  auto whoami = run_capture({"kubectl", "--kubeconfig", kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"});
  EXPECT_EQ(whoami.output, "system:serviceaccount:lockstep-system:lockstep-operator");

  std::string log = ::testing::TempDir() + "/chart-operator.log";
  lockstep::SpawnOptions so;
  so.argv = {lockstep::test::env_or("LOCKSTEP_OPERATOR_BIN", "lockstep-operator"), "--kubeconfig", kc, "--leader-election-namespace", "lockstep-system",
             "--http-port", "0"};
  so.output_path = log;
  auto op = lockstep::Process::spawn(so);
  kubectl({"create", "namespace", "chart-job"});
  ASSERT_TRUE(kubectl({"apply", "-n", "chart-job", "-f", source_path("examples/ddp.yaml")}).status.success());
  EXPECT_TRUE(eventually([&] {
    auto p = kubectl({"get", "pods", "-n", "chart-job", "-l", "lockstep.dev/job-name=tiny-ddp", "-o", "name"});
    return std::count(p.output.begin(), p.output.end(), '\n') == 2;
  })) << read_text(log);
  EXPECT_TRUE(eventually([&] {
    return kubectl({"get", "tj", "tiny-ddp", "-n", "chart-job", "-o", "jsonpath={.status.phase}"}).output == "Pending";
  })) << read_text(log);
  EXPECT_TRUE(kubectl({"get", "podgroup", "tiny-ddp", "-n", "chart-job"}).status.success());
  // The agent is brought in by an init container from the operator's own version's image.
  auto init = kubectl({"get", "pod", "tiny-ddp-0", "-n", "chart-job", "-o",
                       "jsonpath={.spec.initContainers[0].name} {.spec.initContainers[0].image} "
                       "{.spec.containers[0].command[0]}"});
  EXPECT_EQ(init.output, std::string("lockstep-agent lockstep/agent:") + LOCKSTEP_VERSION + " /lockstep/agent/lockstep-agent");
  // spec.isolation under the chart's RBAC: the policy is created, and deleted again at None.
  ASSERT_TRUE(kubectl({"patch", "tj", "tiny-ddp", "-n", "chart-job", "--type", "merge", "-p",
                       R"({"spec": {"isolation": "NetworkPolicy"}})"}).status.success());
  EXPECT_TRUE(eventually([&] { return kubectl({"get", "networkpolicy", "tiny-ddp", "-n", "chart-job"}).status.success(); }))
      << read_text(log);
  ASSERT_TRUE(kubectl({"patch", "tj", "tiny-ddp", "-n", "chart-job", "--type", "merge", "-p",
                       R"({"spec": {"isolation": "None"}})"}).status.success());
  EXPECT_TRUE(eventually([&] {
    return kubectl({"get", "networkpolicy", "-n", "chart-job", "-o", "name"}).output.empty();
  })) << read_text(log);
  op.terminate(10s);
  std::string text = read_text(log);
  EXPECT_EQ(text.find("forbidden"), std::string::npos) << text;
  EXPECT_NE(text.find("became leader"), std::string::npos) << text;
  EXPECT_NE(text.find("watching nodes"), std::string::npos) << "the chart's RBAC lets it watch nodes: " << text;
}

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
