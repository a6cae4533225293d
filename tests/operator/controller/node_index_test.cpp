// Which jobs a node's change queues (controller/node_index.hpp, Note [Lost nodes]).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/node_index.hpp"

using lockstep::reconcile::PodRecord;

TEST(NodeIndex, ANodesJobsAreThoseWithAPodBoundToIt) {
  auto pod = [](const std::string& job, const std::string& name, const std::string& node) {
    PodRecord r;
    r.ns = "ns";
    r.view.name = name;
    r.job = job;
    r.view.node_name = node;
    return r;
  };
  lockstep::controller::NodeIndex index;
  auto a0 = pod("a", "a-0", ""), a0_bound = pod("a", "a-0", "worker-1"), a1 = pod("a", "a-1", "worker-1");
  auto b0 = pod("b", "b-0", "worker-1"), b1 = pod("b", "b-1", "worker-2");
  index.update(nullptr, &a0);  // not bound yet
  EXPECT_EQ(index.nodes(), 0u);
  index.update(&a0, &a0_bound);
  for (auto* p : {&a1, &b0, &b1}) index.update(nullptr, p);
  EXPECT_EQ(index.jobs_on("worker-1"), (std::vector<std::string>{"ns/a", "ns/b"}));
  EXPECT_EQ(index.jobs_on("worker-2"), (std::vector<std::string>{"ns/b"}));
  EXPECT_TRUE(index.jobs_on("worker-3").empty());
  index.update(&b0, nullptr);
  EXPECT_EQ(index.jobs_on("worker-1"), (std::vector<std::string>{"ns/a"}));
  index.update(&a0_bound, nullptr);
  EXPECT_EQ(index.jobs_on("worker-1"), (std::vector<std::string>{"ns/a"})) << "a-1 is still there";
  index.update(&a1, nullptr);
  index.update(&b1, nullptr);
  EXPECT_EQ(index.nodes(), 0u);
}

// Updates that leave a pod's node and job as they were (its status: nearly every event) count
// it once; one that moves it to another job's label moves it.
TEST(NodeIndex, UpdatesInPlaceCountAPodOnce) {
  PodRecord p;
  p.ns = "ns";
  p.job = "a";
  p.view.node_name = "worker-1";
  lockstep::controller::NodeIndex index;
  index.update(nullptr, &p);
  PodRecord running = p, finished = p, relabelled = p;
  running.view.phase = "Running";
  finished.view.phase = "Succeeded";
  relabelled.job = "b";
  index.update(&p, &running);
  index.update(&running, &finished);
  EXPECT_EQ(index.jobs_on("worker-1"), (std::vector<std::string>{"ns/a"}));
  index.update(&finished, &relabelled);
  EXPECT_EQ(index.jobs_on("worker-1"), (std::vector<std::string>{"ns/b"}));
  index.update(&relabelled, nullptr);
  EXPECT_EQ(index.nodes(), 0u) << "counted once: gone with its one delete";
}
