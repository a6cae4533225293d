// operator_test, PodGroups: an operator on a control plane without the PodGroup API, and the
// API installed while it runs.
#include "operator_fixture.hpp"

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
