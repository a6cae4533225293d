// The Service and PodGroup informers' prune (controller::child_prune, controller/controller.hpp),
// which leaves out only what ChildRef never reads.
#include <gtest/gtest.h>

#include "controller/controller.hpp"
#include "kube/prune.hpp"
#include "pod_text.hpp"
#include "reconcile/job.hpp"

using lockstep::kube::parse_pruned;
using lockstep::kube::PruneRoot;
using lockstep::reconcile::ChildRef;
using lockstep::test::kubelet_pod;  // pod_text.hpp
using nlohmann::json;

TEST(ChildPrune, AServiceOrPodGroupKeepsOnlyItsMetadata) {
  auto prune = lockstep::controller::child_prune();
  json pg = kubelet_pod({{"phase", "Running"}, {"running", 8}, {"succeeded", 0}});
  pg["kind"] = "PodGroup";
  pg["spec"] = {{"minMember", 8}};
  json pruned = parse_pruned(pg.dump(), &prune, PruneRoot::Document);
  EXPECT_FALSE(pruned.contains("spec"));
  EXPECT_FALSE(pruned.contains("status"));
  EXPECT_TRUE(ChildRef::from_json(pruned) == ChildRef::from_json(pg));
  EXPECT_EQ(ChildRef::from_json(pruned).controller_uid, "job-uid");
  EXPECT_EQ(ChildRef::from_json(pruned).job, "train");
}
