// operator_test, lifecycle: a job's way to its end (success, suspend and resume, deadline,
// TTL, deletion).
#include "operator_fixture.hpp"

TEST_F(OperatorTest, AllPodsRunningThenSucceededGivesSucceeded) {
  create_job("okjob", 2);
  ASSERT_TRUE(wait_pods("okjob", 2));
  run_all("okjob", 2);
  ASSERT_TRUE(wait_phase("okjob", "Running"));
  json j = job("okjob");
  EXPECT_EQ(j["status"]["nodes"]["ready"], 2);
  EXPECT_EQ(j["status"]["nodes"]["active"], 2);
  EXPECT_TRUE(j["status"].contains("startTime"));
  ASSERT_NE(condition(j, "Running"), nullptr);
  EXPECT_EQ((*condition(j, "Running"))["status"], "True");

  // Steady state: nothing changed, so the operator writes nothing.
  std::string rv = j["metadata"]["resourceVersion"];
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(job("okjob")["metadata"]["resourceVersion"], rv) << "status rewritten with no change";

  set_pod("okjob-0", "Succeeded", 0);
  set_pod("okjob-1", "Succeeded", 0);
  ASSERT_TRUE(wait_phase("okjob", "Succeeded"));
  j = job("okjob");
  EXPECT_TRUE(j["status"].contains("completionTime"));
  EXPECT_EQ(j["status"]["nodes"]["succeeded"], 2);
  EXPECT_EQ((*condition(j, "Succeeded"))["reason"], "AllNodesSucceeded");
  // cleanPodPolicy Running: finished pods stay for their logs.
  EXPECT_EQ(pods("okjob").size(), 2u);
  // See Note [Events that say something new]: an Event for the end; the creation and the first
  // start are the Created and Running conditions alone.
  auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=okjob", "-o",
                     "jsonpath={.items[*].reason}"});
  EXPECT_EQ(ev.output, "AllNodesSucceeded") << ev.output;
  ASSERT_NE(condition(j, "Created"), nullptr);
}

TEST_F(OperatorTest, AGangStaysRunningWhenOnePodFinishesFirst) {
  create_job("early", 2);
  ASSERT_TRUE(wait_pods("early", 2));
  run_all("early", 2);
  ASSERT_TRUE(wait_phase("early", "Running"));
  set_pod("early-0", "Succeeded", 0);
  ASSERT_TRUE(eventually([&] { return job("early")["status"]["nodes"].value("succeeded", 0) == 1; }));
  EXPECT_EQ(phase("early"), "Running");
  // Pod 1 then fails: the whole gang reruns, the pod that succeeded included.
  set_pod("early-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return job("early")["status"].value("restarts", 0) == 1; }));
  json j = job("early");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  EXPECT_NE((*c)["message"].get<std::string>().find("early-0 had succeeded"), std::string::npos) << *c;
  EXPECT_TRUE(wait_pods("early", 2, 1));
}

TEST_F(OperatorTest, SuspendRemovesPodsAndResumeRecreatesThem) {
  create_job("susp", 2);
  ASSERT_TRUE(wait_pods("susp", 2));
  auto r = client_->patch(res::kTrainingJobs.path(ns_, "susp"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(wait_phase("susp", "Suspended"));
  ASSERT_TRUE(wait_pods("susp", 0));
  EXPECT_EQ((*condition(job("susp"), "Suspended"))["status"], "True");
  r = client_->patch(res::kTrainingJobs.path(ns_, "susp"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(wait_pods("susp", 2));
  EXPECT_TRUE(wait_phase("susp", "Pending"));
  EXPECT_EQ((*condition(job("susp"), "Suspended"))["status"], "False");
}

TEST_F(OperatorTest, ActiveDeadlineFailsTheJob) {
  create_job("late", 2, "  runPolicy: {activeDeadlineSeconds: 2}\n");
  ASSERT_TRUE(wait_pods("late", 2));
  run_all("late", 2);
  ASSERT_TRUE(wait_phase("late", "Failed", 15s));
  EXPECT_EQ((*condition(job("late"), "Failed"))["reason"], "DeadlineExceeded");
  EXPECT_TRUE(wait_pods("late", 0));
}

TEST_F(OperatorTest, TtlDeletesTheFinishedJob) {
  create_job("ttl", 1, "  runPolicy: {ttlSecondsAfterFinished: 1}\n");
  ASSERT_TRUE(wait_pods("ttl", 1));
  set_pod("ttl-0", "Succeeded", 0);
  ASSERT_TRUE(wait_phase("ttl", "Succeeded"));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kTrainingJobs.path(ns_, "ttl")).not_found(); }, 15s));
}

TEST_F(OperatorTest, DeletingTheJobRemovesEverythingItOwns) {
  create_job("gone", 2);
  ASSERT_TRUE(wait_pods("gone", 2));
  ASSERT_TRUE(eventually([&] { return client_->get(res::kPodGroups.path(ns_, "gone")).ok(); }));
  auto r = client_->remove(res::kTrainingJobs.path(ns_, "gone"));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(wait_pods("gone", 0));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kServices.path(ns_, "gone")).not_found(); }));
  EXPECT_TRUE(eventually([&] { return client_->get(res::kPodGroups.path(ns_, "gone")).not_found(); }));
}
