// What the operator keeps of a node and judges from it (reconcile/node.hpp, Note [Lost nodes]).
// Which jobs a node's change queues: controller/node_index_test.cpp.
#include <gtest/gtest.h>

#include "pod_text.hpp"
#include "reconcile/node.hpp"

using namespace lockstep::reconcile;
using nlohmann::json;

namespace {

// A node as a kubelet writes it, most of it never read.
json kubelet_node() {
  return json::parse(R"({
    "kind": "Node", "apiVersion": "v1",
    "metadata": {"name": "worker-2", "resourceVersion": "77", "labels": {"kubernetes.io/hostname": "worker-2"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.1.2.0/24", "providerID": "x",
             "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": "2026-11-28T12:03:09Z"},
                        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-28T12:03:09Z"},
                        {"key": "example.com/gpu-unhealthy", "value": "true", "effect": "NoExecute"}]},
    "status": {
      "capacity": {"cpu": "64", "nvidia.com/gpu": "8"},
      "conditions": [
        {"type": "MemoryPressure", "status": "Unknown", "reason": "NodeStatusUnknown"},
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
         "lastHeartbeatTime": "2026-11-28T12:02:20Z", "lastTransitionTime": "2026-11-28T12:03:04Z"}],
      "images": [{"names": ["lockstep/trainer:1"], "sizeBytes": 1}]
    }
  })");
}

}  // namespace

TEST(NodeView, KeepsTheReadyConditionAndTheNoExecuteTaints) {
  NodeView n = NodeView::from_json(kubelet_node());
  EXPECT_EQ(n.name, "worker-2");
  EXPECT_EQ(n.ready, "Unknown");
  EXPECT_EQ(n.ready_reason, "NodeStatusUnknown");
  EXPECT_EQ(n.ready_message, "Kubelet stopped posting node status.");
  EXPECT_EQ(n.ready_since, "2026-11-28T12:03:04Z");
  ASSERT_EQ(n.no_execute.size(), 2u);
  EXPECT_EQ(n.no_execute[0], (NodeTaint{"node.kubernetes.io/unreachable", ""}));
  EXPECT_EQ(n.no_execute[1], (NodeTaint{"example.com/gpu-unhealthy", "true"}));
  EXPECT_FALSE(n.gone);
  // A heartbeat changes nothing it keeps.
  json later = kubelet_node();
  later["status"]["conditions"][1]["lastHeartbeatTime"] = "2026-11-28T12:09:00Z";
  later["status"]["images"].push_back({{"names", {"other"}}});
  EXPECT_TRUE(NodeView::from_json(later) == n);
}

// Another team's controller writes taints and may write conditions: what reaches a message is
// bounded in count and length, and printable.
TEST(NodeView, BoundsAndCleansWhatOthersWrite) {
  json node = kubelet_node();
  node["spec"]["taints"] = json::array();
  for (int i = 0; i < 100; ++i)
    node["spec"]["taints"].push_back({{"key", "k" + std::to_string(i)}, {"value", std::string(5000, 'v')}, {"effect", "NoExecute"}});
  node["spec"]["taints"][0]["key"] = "evil\n\x1b[31mkey\xc3\xa9";
  node["status"]["conditions"][1]["message"] = std::string(100000, 'm');
  node["status"]["conditions"][1]["reason"] = 42;  // not a string
  NodeView n = NodeView::from_json(node);
  ASSERT_EQ(n.no_execute.size(), kMaxNodeTaints);
  EXPECT_EQ(n.no_execute[0].key, "evil??[31mkey??");
  EXPECT_EQ(n.no_execute[1].value.size(), kMaxTaintValue + 3);  // and "..."
  EXPECT_EQ(n.ready_message.size(), 256u + 3);
  EXPECT_EQ(n.ready_reason, "");
  EXPECT_EQ(printable("a\tb\x7f", 10), "a?b?");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  // Anything but an object reads as a node with nothing known.
  for (const json& odd : {json(), json("x"), json::array(), json{{"status", {{"conditions", "Ready"}}}}}) {
    NodeView none = NodeView::from_json(odd);
    EXPECT_EQ(none.ready, "");
    EXPECT_TRUE(none.no_execute.empty());
  }
}

TEST(Tolerations, MatchAsTheKubeletMatchesThemLessTolerationSeconds) {
  const NodeTaint gpu{"example.com/gpu-unhealthy", "true"};
  EXPECT_TRUE(tolerates_for_ever({"example.com/gpu-unhealthy", false, "true", std::nullopt}, gpu));
  EXPECT_FALSE(tolerates_for_ever({"example.com/gpu-unhealthy", false, "false", std::nullopt}, gpu));
  EXPECT_TRUE(tolerates_for_ever({"example.com/gpu-unhealthy", true, "", std::nullopt}, gpu));
  EXPECT_TRUE(tolerates_for_ever({"", true, "", std::nullopt}, gpu));  // an empty key with Exists: every taint
  EXPECT_FALSE(tolerates_for_ever({"other", true, "", std::nullopt}, gpu));
  EXPECT_FALSE(tolerates_for_ever({"example.com/gpu-unhealthy", true, "", 300}, gpu));
  EXPECT_FALSE(tolerates_for_ever({"example.com/gpu-unhealthy", true, "", 0}, gpu));
}

// A pod's tolerations as the cache keeps them: only those that can tolerate a NoExecute taint.
TEST(Tolerations, APodKeepsThoseThatMayTolerateANoExecuteTaint) {
  json pod = {{"metadata", {{"name", "tj-1"}}},
              {"spec",
               {{"nodeName", "worker-2"},
                {"tolerations",
                 {{{"key", "a"}, {"operator", "Exists"}, {"effect", "NoSchedule"}},   // another effect
                  {{"key", "b"}, {"operator", "Equal"}, {"value", "1"}, {"effect", "NoExecute"}},
                  {{"operator", "Exists"}},                                             // every effect
                  {{"key", "c"}, {"operator", "Lt"}, {"value", "1"}},                    // no such operator
                  {{"key", "node.kubernetes.io/unreachable"}, {"operator", "Exists"}, {"effect", "NoExecute"},
                   {"tolerationSeconds", 300}}}}}}};
  PodView p = lockstep::test::pod_view(pod);
  EXPECT_EQ(p.node_name, "worker-2");
  ASSERT_EQ(p.tolerations.size(), 3u);
  EXPECT_EQ(p.tolerations[0], (Toleration{"b", false, "1", std::nullopt}));
  EXPECT_EQ(p.tolerations[1], (Toleration{"", true, "", std::nullopt}));
  EXPECT_EQ(p.tolerations[2], (Toleration{"node.kubernetes.io/unreachable", true, "", 300}));
  EXPECT_FALSE(p.tolerations_cut);
  for (int i = 0; i < 40; ++i) pod["spec"]["tolerations"].push_back({{"key", "k"}, {"operator", "Exists"}});
  PodView many = lockstep::test::pod_view(pod);
  EXPECT_EQ(many.tolerations.size(), kMaxTolerations);
  EXPECT_TRUE(many.tolerations_cut);
}

// Pods with the same tolerations share one copy of the list (the cache's memory); one with other
// tolerations has its own, and the copies compare by their elements.
TEST(Tolerations, PodsWithTheSameListShareOneCopy) {
  auto pod = [](const std::string& name, long long seconds) {
    return json{{"metadata", {{"name", name}}},
                {"spec",
                 {{"tolerations",
                   {{{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"}, {"effect", "NoExecute"},
                     {"tolerationSeconds", seconds}},
                    {{"key", "node.kubernetes.io/unreachable"}, {"operator", "Exists"}, {"effect", "NoExecute"},
                     {"tolerationSeconds", seconds}}}}}}};
  };
  PodView a = lockstep::test::pod_view(pod("tj-0", 300)), b = lockstep::test::pod_view(pod("tj-1", 300));
  PodView other = lockstep::test::pod_view(pod("tj-2", 60));
  ASSERT_EQ(a.tolerations.size(), 2u);
  EXPECT_TRUE(a.tolerations.same_copy(b.tolerations));
  EXPECT_EQ(a.tolerations, b.tolerations);
  EXPECT_FALSE(a.tolerations.same_copy(other.tolerations));
  EXPECT_NE(a.tolerations, other.tolerations);
  EXPECT_EQ(other.tolerations[1], (Toleration{"node.kubernetes.io/unreachable", true, "", 60}));
  // Made from a vector with the same elements: the same copy; none: empty, equal to none.
  Tolerations same(std::vector<Toleration>(a.tolerations.begin(), a.tolerations.end()));
  EXPECT_TRUE(same.same_copy(a.tolerations));
  EXPECT_TRUE(Tolerations{}.empty());
  EXPECT_EQ(Tolerations{}, Tolerations(std::vector<Toleration>{}));
  EXPECT_EQ(std::distance(Tolerations{}.begin(), Tolerations{}.end()), 0);
  // A list whose last pod is gone goes with it, and a later one is made anew (no stale copy).
  {
    Tolerations only({{"gone.example/key", true, "", 5}});
    EXPECT_EQ(only.size(), 1u);
  }
  Tolerations again({{"gone.example/key", true, "", 5}});
  EXPECT_EQ(again[0], (Toleration{"gone.example/key", true, "", 5}));
}

// See Note [Lost nodes]: the silent-peer line as the agent writes it, read from a pod's text with
// the agent's exit code; a forged line reads the same, which is why the operator bounds what it
// buys (Note [Lost-node restarts in a row]).
TEST(SilentPeer, TheLineAndTheExitCodeAreReadFromThePodsText) {
  json pod = {{"metadata", {{"name", "tj-0"}}},
              {"spec", {{"nodeName", "worker-1"}}},
              {"status",
               {{"phase", "Failed"},
                {"containerStatuses",
                 {{{"name", "trainer"},
                   {"state",
                    {{"terminated",
                      {{"exitCode", 76}, {"message", "lockstep-silent-peer node=1\nlockstep-agent: node 1 said nothing\n"}}}}}}}}}}};
  PodView p = lockstep::test::pod_view(pod);
  EXPECT_EQ(p.exit_code, 76);
  EXPECT_EQ(silent_peer(p.termination_message), 1);
}
