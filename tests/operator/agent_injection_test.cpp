// operator_test, agent injection (Note [Agent injection]): the init container that copies the
// agent into the pods, under the restricted Pod Security Standard.
#include "operator_fixture.hpp"

// See Note [Agent injection]: the init container passes the restricted Pod Security Standard, which
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
    EXPECT_EQ(spec["containers"][0]["command"], json({"/lockstep/agent/lockstep-agent", "--max-restarts=3", "--", "python3", "train.py"}));
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

// See Note [Agent injection]: a template that mounts a volume over the agent in the container that
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

// See Note [Agent injection]: every mount of the agent's volume that the template makes (a sidecar's,
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
// port they serve (Note [Job ports]: metrics on each, the rendezvous and the barrier on pod 0).
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
    const bool zero = pod["metadata"]["name"] == "tiny-restricted-0";
    const std::set<int> want = zero ? std::set<int>{9400, 29500, 29501} : std::set<int>{9400};
    EXPECT_EQ(ports, want) << pod["spec"]["containers"][0]["ports"];
  }
}

// See Note [Agent injection]: an agent image that cannot be pulled is named in the job's condition
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
