// operator_test, render (#44): `lockstep render` of a job read back from the API server prints
// the objects this operator created for it, equal but for what the server adds (Note [What
// render cannot know] in cli/render.hpp; tests/cli/render_test.cpp has the rest).
#include "operator_fixture.hpp"
#include "render_compare.hpp"

TEST_F(OperatorTest, RenderPrintsTheObjectsTheOperatorCreated) {
  // Isolation on (a NetworkPolicy), a gang (a PodGroup), and template fields of every sort.
  create_job("rendered", 2, "  isolation: NetworkPolicy\n  checkpoint: {path: /ckpt, everySteps: 5}\n",
             "      nodeSelector: {pool: \"1\"}\n");
  ASSERT_TRUE(wait_pods("rendered", 2));
  ASSERT_TRUE(eventually([&] { return client_->get(res::kNetworkPolicies.path(ns_, "rendered")).ok(); }, 20s));
  // The job as `kubectl get tj -o json` gives it (JSON is YAML), into `lockstep render -` with
  // this operator's flags.
  auto got = kubectl({"get", "trainingjob", "rendered", "-n", ns_, "-o", "json"});
  ASSERT_TRUE(got.status.success()) << got.output;
  std::string said;
  auto docs = lockstep::test::render::rendered(got.output, {"--operator-namespace=lockstep-system", "--monitoring-namespace=monitoring"}, said);
  ASSERT_EQ(lockstep::test::render_kinds(docs),
            (std::vector<std::string>{"Service/rendered", "NetworkPolicy/rendered", "PodGroup/rendered", "Pod/rendered-0",
                                      "Pod/rendered-1"}))
      << said;
  for (auto& rendered : docs) {
    const std::string kind = rendered["kind"], name = rendered["metadata"]["name"];
    SCOPED_TRACE(kind + "/" + name);
    const std::string path = kind == "Service"         ? res::kServices.path(ns_, name)
                             : kind == "NetworkPolicy" ? res::kNetworkPolicies.path(ns_, name)
                             : kind == "PodGroup"      ? res::kPodGroups.path(ns_, name)
                                                       : res::kPods.path(ns_, name);
    auto live = client_->get(path);
    ASSERT_TRUE(live.ok()) << live.message();
    if (kind == "Pod") {
      EXPECT_TRUE(lockstep::test::render::take_secret(rendered, live.body)) << "no placeholder secret";
    }
    EXPECT_EQ(lockstep::test::render::differences(rendered, live.body), "") << "rendered against the server's";
  }
}
