// operator_test, isolation (Note [Job isolation]): the NetworkPolicy of spec.isolation.
#include "operator_fixture.hpp"

// See Note [Job isolation]: spec.isolation NetworkPolicy gets a policy owned by the job that selects
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
