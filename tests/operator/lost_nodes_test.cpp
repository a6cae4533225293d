// operator_test, lost nodes (Note [Lost nodes]): a node of a running gang that goes NotReady,
// is tainted or is deleted.
#include "operator_fixture.hpp"

// See Note [Lost nodes]: a node of a running gang goes NotReady. Within seconds, not at eviction,
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
