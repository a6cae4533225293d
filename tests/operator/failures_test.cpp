// operator_test, failures: failed pods (gang restarts, the backoff limit, the exit-code policy,
// a restart racing a change of the job).
#include <memory>
#include <sstream>

#include "operator_fixture.hpp"

TEST_F(OperatorTest, ExitCode137RestartsTheWholeGang) {
  create_job("oom", 3);
  ASSERT_TRUE(wait_pods("oom", 3, 0));
  std::set<std::string> old_uids, old_secrets;
  for (const auto& p : pods("oom")) {
    old_uids.insert(p["metadata"]["uid"]);
    old_secrets.insert(env_of(p)["LOCKSTEP_BARRIER_SECRET"]);
  }
  run_all("oom", 3);
  ASSERT_TRUE(wait_phase("oom", "Running"));
  set_pod("oom-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return job("oom")["status"].value("restarts", 0) == 1; }));
  ASSERT_TRUE(wait_pods("oom", 3, 1)) << "no second attempt";
  EXPECT_TRUE(pods("oom", 0).empty()) << "pods of attempt 0 left behind";
  for (const auto& p : pods("oom", 1)) {
    EXPECT_EQ(env_of(p)["LOCKSTEP_RESTART_ATTEMPT"], "1");
    EXPECT_FALSE(old_uids.count(p["metadata"]["uid"])) << "pod not recreated";
    // See Note [Barrier secret]: a new attempt, a new secret, so attempt 0's ranks are fenced out.
    EXPECT_FALSE(old_secrets.count(env_of(p)["LOCKSTEP_BARRIER_SECRET"]));
  }
  json j = job("oom");
  EXPECT_EQ(j["status"]["restarts"], 1);
  EXPECT_EQ(j["status"]["phase"], "Restarting");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  EXPECT_NE((*c)["message"].get<std::string>().find("exit code 137"), std::string::npos) << *c;
  run_all("oom", 3);
  EXPECT_TRUE(wait_phase("oom", "Running"));
}

TEST_F(OperatorTest, BackoffLimitExhaustedGivesFailed) {
  create_job("flaky", 2, "  runPolicy: {backoffLimit: 1}\n");
  ASSERT_TRUE(wait_pods("flaky", 2, 0));
  set_pod("flaky-0", "Failed", 137);
  ASSERT_TRUE(wait_pods("flaky", 2, 1));
  set_pod("flaky-1", "Running");
  set_pod("flaky-0", "Failed", 139);
  ASSERT_TRUE(wait_phase("flaky", "Failed"));
  json j = job("flaky");
  EXPECT_EQ(j["status"]["restarts"], 1);
  auto* c = condition(j, "Failed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["reason"], "BackoffLimitExceeded");
  EXPECT_TRUE(j["status"].contains("completionTime"));
  // cleanPodPolicy Running removes the pod that was still running.
  EXPECT_TRUE(eventually([&] {
    for (const auto& p : pods("flaky"))
      if (p["status"].value("phase", "") == "Running") return false;
    return true;
  }));
}

TEST_F(OperatorTest, ExitCodePolicyFailsAtOnceOnAProgramError) {
  create_job("bug", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("bug", 2));
  run_all("bug", 2);
  set_pod("bug-1", "Failed", 1);
  ASSERT_TRUE(wait_phase("bug", "Failed"));
  json j = job("bug");
  EXPECT_EQ(j["status"]["restarts"], 0);
  EXPECT_EQ((*condition(j, "Failed"))["reason"], "NonRetryableExitCode");
}

TEST_F(OperatorTest, ExitCodePolicyRetriesTheAgentsStallCode) {
  create_job("stall", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("stall", 2));
  run_all("stall", 2);
  set_pod("stall-0", "Failed", lockstep::contract::kExitStall);
  ASSERT_TRUE(eventually([&] { return job("stall")["status"].value("restarts", 0) == 1; }));
  EXPECT_TRUE(wait_pods("stall", 2, 1));
}

// Pod 1 is OOM-killed; pod 0's collective then fails with exit 1, and its status reaches the
// API server first. Judged by index (or by arrival) the job would fail for good; judged by
// the first failure in time it restarts (Note [The first failure]).
TEST_F(OperatorTest, ExitCodePolicyJudgesTheFirstFailureInTimeNotTheFirstReported) {
  create_job("first", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("first", 2));
  run_all("first", 2);
  ASSERT_TRUE(wait_phase("first", "Running"));
  auto now = std::chrono::system_clock::now();
  set_pod("first-0", "Failed", 1, "Error", rfc3339(now));
  std::this_thread::sleep_for(1500ms);  // the operator sees pod 0's exit 1 alone first
  EXPECT_EQ(phase("first"), "Running") << "decided before pod 1 could report";
  set_pod("first-1", "Failed", 137, "OOMKilled", rfc3339(now - 3s));
  ASSERT_TRUE(eventually([&] { return job("first")["status"].value("restarts", 0) == 1; })) << job("first");
  json j = job("first");
  auto* c = condition(j, "Restarting");
  ASSERT_NE(c, nullptr);
  std::string msg = (*c)["message"];
  EXPECT_EQ(msg.rfind("pod first-1 failed with exit code 137 (OOMKilled), first; first-0 (exit 1) failed as well", 0), 0u)
      << msg;
  EXPECT_TRUE(wait_pods("first", 2, 1));
}

TEST_F(OperatorTest, ExitCodePolicyFailsOnAProgramErrorThatNoPeerContradicts) {
  create_job("alone", 2, "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 5}\n");
  ASSERT_TRUE(wait_pods("alone", 2));
  run_all("alone", 2);
  ASSERT_TRUE(wait_phase("alone", "Running"));
  auto t0 = std::chrono::steady_clock::now();
  set_pod("alone-0", "Failed", 1, "Error", rfc3339(std::chrono::system_clock::now()));
  ASSERT_TRUE(wait_phase("alone", "Failed", 20s));
  // It waited for the peer (about 5 s) before failing the job, and no longer.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(job("alone")["status"]["restarts"], 0);
}

TEST_F(OperatorTest, AJobChangedDuringAReconcileMakesItsStatusWriteConflictAndItsEventsWait) {
  // A gang restart deletes 40 pods one request at a time; the job's spec changes in the
  // middle. The status computed before the change must not be written (409, retried),
  // and the retried reconcile must not record a second GangRestart for the one restart.
  const int nodes = 40;
  Paused paused(operator_);
  // The race needs the spec change to land while the deletes are under way. Unthrottled,
  // 40 deletes take well under 100 ms on a fast machine (CI once raced three times in vain),
  // so the operator's client is held to 20 requests a second: the deletes take 2 s.
  OperatorProcess op(control_plane()->kubeconfig(),
                     {"--namespace", ns_, "--leader-elect=false", "--create-parallelism=1", "--kube-api-qps=20",
                      "--kube-api-burst=1"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  // On a loaded machine the test may still see the pods only after all 40 went and the
  // status was written. Such a try tests nothing, so it is made again with a new job
  // (three tries at most).
  std::string race;
  std::unique_ptr<History> history;
  bool raced = false;
  for (int attempt = 0; attempt < 3 && !raced; ++attempt) {
    race = "race" + std::to_string(attempt);
    create_job(race, nodes);
    ASSERT_TRUE(wait_pods(race, nodes));
    run_all(race, nodes);
    ASSERT_TRUE(wait_phase(race, "Running"));
    history = std::make_unique<History>(*client_, res::kTrainingJobs.path(ns_), race);
    set_pod(race + "-0", "Failed", 137);
    ASSERT_TRUE(eventually([&] { return static_cast<int>(pods(race, 0).size()) < nodes; }, 10s));
    auto r = client_->patch(res::kTrainingJobs.path(ns_, race), {{"spec", {{"runPolicy", {{"backoffLimit", 7}}}}}});
    ASSERT_TRUE(r.ok()) << r.message();
    raced = r.body["status"].value("restarts", -1) == 0;
    if (!raced) std::cerr << "[operator] " << race << ": the spec changed only after the status write; trying again\n";
  }
  ASSERT_TRUE(raced) << "three times the spec changed only after the status write: no race was tested";
  ASSERT_TRUE(eventually([&] { return job(race)["status"].value("restarts", 0) == 1; })) << op.log();
  ASSERT_TRUE(wait_pods(race, nodes, 1));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(job(race)["status"]["restarts"], 1);

  // Each status write carries the generation it was computed from, which is current.
  json prev;
  int status_writes = 0;
  for (const auto& v : history->versions()) {
    if (!prev.is_null() && v.value("status", json()) != prev.value("status", json())) {
      ++status_writes;
      EXPECT_EQ(v["status"].value("observedGeneration", 0), v["metadata"].value("generation", 0))
          << "a status computed from generation " << v["status"].value("observedGeneration", 0)
          << " was written over generation " << v["metadata"].value("generation", 0);
    }
    prev = v;
  }
  EXPECT_GE(status_writes, 1);
  EXPECT_NE(op.http("/metrics").find("lockstep_operator_api_requests_total{code=\"409\",verb=\"PATCH\"}"),
            std::string::npos) << "the status write did not conflict";
  auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=" + race + ",reason=GangRestart",
                     "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"});
  int events = 0;
  std::istringstream lines(ev.output);
  for (std::string line; std::getline(lines, line);) events += !line.empty();
  EXPECT_EQ(events, 1) << "GangRestart events for one restart:\n" << ev.output;
}
