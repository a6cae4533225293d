// operator_test, progress read from rank 0's agent (Note [Progress]): Step, Tok/s, ETA,
// in-place restarts, the final step.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "operator_fixture.hpp"

// #13 item 7, Note [Progress]: the operator reads rank 0's real agent (here on loopback, the
// pod's IP as the test's kubelet reports it) and kubectl get tj shows Step, Tok/s and ETA.
TEST_F(OperatorTest, KubectlGetShowsProgressReadFromRank0sAgent) {
  int metrics_port = lockstep::free_loopback_port();
  create_job("prog", 1, "  metrics: {port: " + std::to_string(metrics_port) + "}\n");
  ASSERT_TRUE(wait_pods("prog", 1));
  // Rank 0's agent: the job's 2 workers, each reporting 400 steps 50 ms apart (20 s),
  // total_steps=400.
  lockstep::SpawnOptions so;
  so.argv = {lockstep::test::env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--",
             lockstep::test::env_or("LOCKSTEP_TEST_WORKER_BIN", "lockstep-test-worker"), "steps", "400"};
  so.env = {{"LOCKSTEP_JOB_NAME", "prog"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_NNODES", "1"},
            {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "2"}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
            {"LOCKSTEP_METRICS_PORT", std::to_string(metrics_port)}};
  so.output_path = ::testing::TempDir() + "/prog-agent-" + std::to_string(::getpid()) + ".log";
  auto agent = lockstep::Process::spawn(so);
  set_pod("prog-0", "Running");
  auto ip = client_->patch(res::kPods.path(ns_, "prog-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
  ASSERT_TRUE(ip.ok()) << ip.message();
  ASSERT_TRUE(wait_phase("prog", "Running"));
  // Two readings a second apart give a rate: every column is filled.
  std::string row;
  bool shown = eventually([&] {
    auto r = kubectl({"get", "tj", "prog", "-n", ns_, "--no-headers", "-o",
                      "custom-columns=STEP:.status.progress.steps,TOK:.status.progress.tokensPerSecond,ETA:.status.progress.eta"});
    row = r.output;
    return r.status.success() && row.find("/400") != std::string::npos && row.find("<none>") == std::string::npos;
  }, 20s);
  EXPECT_TRUE(shown) << row << job("prog")["status"].dump();
  json p = job("prog")["status"]["progress"];
  EXPECT_EQ(p.value("totalSteps", -1), 400);
  EXPECT_GT(p.value("step", 0), 0);
  EXPECT_LT(p.value("step", 400), 400);
  // 512 tokens a step per rank, at most 20 steps a second, 2 ranks: up to 20480 tokens/s
  // for the gang (rank 0's rate times the world size), less on a loaded machine.
  EXPECT_GT(p.value("tokensPerSecond", 0), 4000) << p;
  EXPECT_LT(p.value("tokensPerSecond", 0), 24000) << p;
  // The default table has the columns too.
  auto table = kubectl({"get", "tj", "prog", "-n", ns_});
  EXPECT_NE(table.output.find("STEP"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("ETA"), std::string::npos) << table.output;
  agent.terminate(10s);
}

// #14, Note [In-place restarts]: the agents restart their workers in place and say so on rank
// 0's /metrics; the operator counts it into status (summed across gang attempts), the
// Restarted condition and Events, and its own gang restarts beside them.
TEST_F(OperatorTest, InPlaceRestartsFromRank0sAgentAreCountedAcrossGangRestarts) {
  const int metrics_port = lockstep::free_loopback_port();
  FakeAgent agent(metrics_port);
  // What node 0's agent serves in gang attempt `attempt` after `restarts` in-place restarts,
  // the last at `at` for `info` (the labels of lockstep_last_restart_info).
  auto agent_text = [&](int attempt, int restarts, std::chrono::system_clock::time_point at = {},
                        const std::string& info = "") {
    std::string labels = "namespace=\"" + ns_ + "\",node_rank=\"0\",trainingjob=\"inplace\"";
    std::string t = "# TYPE lockstep_restarts_total counter\nlockstep_restarts_total{kind=\"in_place\"," + labels + "} " +
                    std::to_string(restarts) + "\nlockstep_restart_attempt{" + labels + "} " + std::to_string(attempt) + "\n";
    if (restarts > 0)
      t += "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"," + labels + "} " +
           std::to_string(std::chrono::system_clock::to_time_t(at)) + "\nlockstep_last_restart_info{kind=\"in_place\"," +
           labels + "," + info + "} 1\n";
    return t;
  };
  auto status = [&] { return job("inplace")["status"]; };
  auto restarted = [&] {
    json s = status();
    for (const auto& c : s.value("conditions", json::array()))
      if (c["type"] == "Restarted") return c;
    return json();
  };
  // The messages of the job's Events with `reason`, oldest first.
  auto events = [&](const std::string& reason) {
    auto r = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=inplace,reason=" + reason,
                      "--sort-by=.metadata.creationTimestamp", "-o", "json"});
    std::vector<std::string> out;
    json list = json::parse(r.output, nullptr, false);
    if (!list.is_discarded())
      for (const auto& e : list["items"]) out.push_back(e.value("message", ""));
    return out;
  };
  auto start_attempt = [&](int attempt) {
    ASSERT_TRUE(wait_pods("inplace", 2, attempt));
    run_all("inplace", 2);
    auto ip = client_->patch(res::kPods.path(ns_, "inplace-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
    ASSERT_TRUE(ip.ok()) << ip.message();
    ASSERT_TRUE(wait_phase("inplace", "Running"));
  };

  agent.serve(agent_text(0, 0));
  create_job("inplace", 2, "  metrics: {port: " + std::to_string(metrics_port) + "}\n  runPolicy: {inPlaceRestarts: 3}\n");
  start_attempt(0);
  for (const auto& p : pods("inplace", 0))  // Note [Agent flags]: OnFailure is the agent's default
    EXPECT_EQ(p["spec"]["containers"][0]["command"][1], "--max-restarts=3") << p["spec"]["containers"][0];
  std::this_thread::sleep_for(1500ms);  // a reading of 0: nothing to count
  EXPECT_EQ(status().value("inPlaceRestarts", -1), 0) << status();
  EXPECT_TRUE(restarted().is_null()) << restarted();

  // Two in-place restarts between two readings (the poll runs every second here).
  auto first_at = std::chrono::system_clock::now() - 5s;
  agent.serve(agent_text(0, 2, first_at, "exit_code=\"137\",rank=\"3\",reason=\"WorkerFailed\""));
  ASSERT_TRUE(eventually([&] { return status().value("inPlaceRestarts", 0) == 2; }, 15s)) << status();
  json s = status();
  EXPECT_EQ(s["restarts"], 0);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 2);
  EXPECT_EQ(s["phase"], "Running");
  json c = restarted();
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "InPlaceRestart");
  EXPECT_EQ(c["message"], "rank 3 exited with code 137 (WorkerFailed); every worker restarted in place in the same pods "
                          "(2 of 3 in gang attempt 0)");
  EXPECT_EQ(c["lastTransitionTime"], rfc3339(first_at)) << "the restart's time, from the agent";
  ASSERT_TRUE(eventually([&] { return !events("InPlaceRestart").empty(); })) << operator_->log().substr(0, 2000);
  auto in_place_events = events("InPlaceRestart");
  ASSERT_EQ(in_place_events.size(), 1u) << testing::PrintToString(in_place_events);
  EXPECT_EQ(in_place_events[0].rfind("2 in-place restarts since the last reading; the last: rank 3 exited", 0), 0u)
      << in_place_events[0];
  auto type = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=inplace,reason=InPlaceRestart",
                       "-o", "jsonpath={.items[*].type}"});
  EXPECT_EQ(type.output, "Warning");
  // kubectl get tj: Restarts (gang) 0, In-Place 2.
  auto row = kubectl({"get", "tj", "inplace", "-n", ns_, "--no-headers"});
  EXPECT_TRUE(std::regex_search(row.output, std::regex(R"(^inplace\s+Running\s+2\s+2\s+0\s+2\s)"))) << row.output;
  EXPECT_NE(operator_->http("/metrics").find("lockstep_restarts_total{kind=\"gang\",namespace=\"" + ns_ +
                                              "\",trainingjob=\"inplace\"} 0"),
            std::string::npos);

  // Past the budget a pod fails: the operator restarts the gang.
  set_pod("inplace-1", "Failed", 137, "OOMKilled");
  ASSERT_TRUE(eventually([&] { return status().value("restarts", 0) == 1; })) << status();
  s = status();
  EXPECT_EQ(s["inPlaceRestarts"], 2);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 0);
  c = restarted();
  EXPECT_EQ(c["reason"], "GangRestart");
  EXPECT_NE(c["message"].get<std::string>().find("restarting the gang as attempt 1 of 3, after 2 in-place restarts in attempt 0"),
            std::string::npos) << c;
  ASSERT_TRUE(eventually([&] { return events("GangRestart").size() == 1; })) << testing::PrintToString(events("GangRestart"));
  ASSERT_TRUE(eventually([&] {
    return operator_->http("/metrics").find("lockstep_restarts_total{kind=\"gang\",namespace=\"" + ns_ +
                                            "\",trainingjob=\"inplace\"} 1") != std::string::npos;
  })) << operator_->http("/metrics");

  // Attempt 1 runs while the endpoint still shows attempt 0's agent: it counts for nothing.
  start_attempt(1);
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(status().value("inPlaceRestarts", -1), 2) << status();
  // The new pods' agent counts from 0: its first in-place restart makes 3 for the job.
  auto second_at = std::chrono::system_clock::now() - 1s;
  agent.serve(agent_text(1, 1, second_at, "rank=\"1\",reason=\"Stall\""));
  ASSERT_TRUE(eventually([&] { return status().value("inPlaceRestarts", 0) == 3; }, 15s)) << status();
  s = status();
  EXPECT_EQ(s["restarts"], 1);
  EXPECT_EQ(s["currentAttemptInPlaceRestarts"], 1);
  c = restarted();
  EXPECT_EQ(c["reason"], "InPlaceRestart");
  EXPECT_EQ(c["message"], "rank 1 reported no step in time (Stall); every worker restarted in place in the same pods "
                          "(1 of 3 in gang attempt 1)");
  EXPECT_EQ(c["lastTransitionTime"], rfc3339(second_at));
  ASSERT_TRUE(eventually([&] { return events("InPlaceRestart").size() == 2; })) << testing::PrintToString(events("InPlaceRestart"));
  EXPECT_EQ(events("InPlaceRestart").back(), c["message"]);
  EXPECT_EQ(events("GangRestart").size(), 1u);
}

// What a real agent of node 0 serves for its ranks 0 and 1 (trimmed to the progress series):
// every series from its start, at 0 until a step report says otherwise.
std::string agent_progress_page(const std::string& ns, const std::string& job, long long step, long long total,
                                long long reports, long long tokens) {
  std::string t;
  for (int rank : {0, 1}) {
    std::string l = "{namespace=\"" + ns + "\",node_rank=\"0\",rank=\"" + std::to_string(rank) + "\",trainingjob=\"" + job + "\"}";
    t += "lockstep_step" + l + " " + std::to_string(step) + "\nlockstep_total_steps" + l + " " + std::to_string(total) +
         "\nlockstep_steps_total" + l + " " + std::to_string(reports) + "\nlockstep_tokens_total" + l + " " +
         std::to_string(tokens) + "\n";
  }
  return t;
}

// #25, Note [Progress schedule]: at the default --progress-period (30 s), a job's first step
// shows within seconds, not a period later; Tok/s comes with the next reading moments after;
// then the readings go back to the period. Before the first step nothing shows (it was "0/0"),
// and a program that does not say its total shows the step alone.
TEST_F(OperatorTest, TheFirstStepShowsWithinSecondsAtTheDefaultProgressPeriod) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(), {"--namespace", ns_, "--leader-elect=false"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  const int metrics_port = lockstep::free_loopback_port();
  FakeAgent agent(metrics_port);
  agent.serve(agent_progress_page(ns_, "first", 0, 0, 0, 0));  // the agent before any step report
  create_job("first", 1, "  metrics: {port: " + std::to_string(metrics_port) + "}\n");
  ASSERT_TRUE(wait_pods("first", 1));
  set_pod("first-0", "Running");
  auto ip = client_->patch(res::kPods.path(ns_, "first-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
  ASSERT_TRUE(ip.ok()) << ip.message();
  ASSERT_TRUE(wait_phase("first", "Running"));
  auto progress = [&] { return job("first")["status"].value("progress", json::object()); };
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Read 2 s and 5 s after it runs (then 9.5 s, ...): no step yet, so nothing to show.
  ASSERT_TRUE(eventually([&] { return agent.gets() >= 2; }, 12s)) << agent.gets() << " readings\n" << op.log();
  std::this_thread::sleep_for(300ms);  // time for a (wrong) status write
  EXPECT_TRUE(progress().empty()) << progress();

  // The first step, from a program that does not say its total.
  agent.serve(agent_progress_page(ns_, "first", 12, 0, 12, 6144));
  auto first_step = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return progress().value("steps", "") == "12"; }, 25s)) << progress();
  double shown_after = since(first_step);
  std::cout << "[ the first step showed " << shown_after << " s after it was served; --progress-period 30s ]\n";
  EXPECT_LT(shown_after, 10.0) << "well under the 30 s period";
  EXPECT_FALSE(progress().contains("totalSteps")) << progress();
  // The next reading comes soon, for a rate: Tok/s, and still no ETA without a total.
  agent.serve(agent_progress_page(ns_, "first", 40, 0, 40, 20480));
  auto shown = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return progress().contains("tokensPerSecond"); }, 15s)) << progress();
  EXPECT_LT(since(shown), 8.0);
  json p = progress();
  EXPECT_EQ(p.value("steps", ""), "40");
  EXPECT_GT(p.value("tokensPerSecond", 0), 0) << p;
  EXPECT_FALSE(p.contains("eta")) << p;

  // With the columns filled, the period again: no reading for the next 6 s.
  int readings = agent.gets();
  agent.serve(agent_progress_page(ns_, "first", 90, 0, 90, 46080));
  std::this_thread::sleep_for(6s);
  EXPECT_EQ(agent.gets(), readings) << "read again within 6 s at a 30 s period";
  EXPECT_EQ(progress().value("steps", ""), "40");
}

// #25, Note [Final progress]: a job's pods and their /metrics are gone once it finished, so
// rank 0's real agent leaves the last step in its termination message; the kubelet (the test)
// puts that into the pod's status, and the Succeeded job keeps showing it. Here no reading is
// ever taken (the pod has no IP), so the step can only come from that message.
TEST_F(OperatorTest, ASucceededJobKeepsRank0sLastStepFromItsTerminationMessage) {
  create_job("final", 1);
  ASSERT_TRUE(wait_pods("final", 1));
  set_pod("final-0", "Running");
  ASSERT_TRUE(wait_phase("final", "Running"));
  // Rank 0's agent, its 2 workers run to the end: the termination message it leaves.
  auto run_agent = [&](const std::vector<std::string>& worker) {
    const std::string log = ::testing::TempDir() + "/final-termination-log-" + std::to_string(::getpid());
    std::filesystem::remove(log);
    lockstep::SpawnOptions so;
    so.argv = {lockstep::test::env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--",
               lockstep::test::env_or("LOCKSTEP_TEST_WORKER_BIN", "lockstep-test-worker")};
    so.argv.insert(so.argv.end(), worker.begin(), worker.end());
    so.env = {{"LOCKSTEP_JOB_NAME", "final"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_NNODES", "1"},
              {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "2"}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
              {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
              {"LOCKSTEP_METRICS_PORT", std::to_string(lockstep::free_loopback_port())},
              {"LOCKSTEP_TERMINATION_LOG", log}};
    so.output_path = ::testing::TempDir() + "/final-agent-" + std::to_string(::getpid()) + ".log";
    auto agent = lockstep::Process::spawn(so);
    auto st = agent.wait_for(120s);
    EXPECT_TRUE(st.has_value() && st->shell_code() == 0) << lockstep::test::read_file(so.output_path);
    return lockstep::test::read_file(log);
  };
  // Steps with a total (20 of 20), then steps without one (30, as a Python program's).
  EXPECT_EQ(run_agent({"steps", "20"}), "lockstep-progress step=20 total=20\n");
  const std::string message = run_agent({"compute", "30", "1"});
  EXPECT_EQ(message, "lockstep-progress step=30\n");
  set_pod("final-0", "Succeeded", 0, "Completed", rfc3339(std::chrono::system_clock::now()), message);
  ASSERT_TRUE(wait_phase("final", "Succeeded"));
  json p = job("final")["status"]["progress"];
  EXPECT_EQ(p.value("steps", ""), "30") << p;
  EXPECT_EQ(p.value("step", -1), 30) << p;
  EXPECT_FALSE(p.contains("totalSteps")) << p;
  auto row = kubectl({"get", "tj", "final", "-n", ns_, "--no-headers"});
  EXPECT_TRUE(std::regex_search(row.output, std::regex(R"(^final\s+Succeeded\s+1\s+0\s+0\s+0\s+30\s)"))) << row.output;
  std::this_thread::sleep_for(2s);  // and it stays
  EXPECT_EQ(job("final")["status"]["progress"], p);
}

// #25: what rank 0 ran to wins over the last reading (here an early stop at 180 of 200, read at
// 10); another rank's pod does not speak for the job, and a line that is not exactly the
// agent's changes nothing (the job then shows every step done, as it always did).
TEST_F(OperatorTest, OnlyRank0sOwnWellFormedLineGivesTheFinalStep) {
  const int port_early = lockstep::free_loopback_port(), port_forged = lockstep::free_loopback_port();
  FakeAgent early(port_early), forged(port_forged);
  early.serve(agent_progress_page(ns_, "early", 10, 200, 10, 5120));
  forged.serve(agent_progress_page(ns_, "forged", 10, 200, 10, 5120));
  create_job("early", 2, "  metrics: {port: " + std::to_string(port_early) + "}\n");
  create_job("forged", 1, "  metrics: {port: " + std::to_string(port_forged) + "}\n");
  for (const std::string name : {"early", "forged"}) {
    ASSERT_TRUE(wait_pods(name, name == "early" ? 2 : 1));
    run_all(name, name == "early" ? 2 : 1);
    auto ip = client_->patch(res::kPods.path(ns_, name + "-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
    ASSERT_TRUE(ip.ok()) << ip.message();
    ASSERT_TRUE(wait_phase(name, "Running"));
    ASSERT_TRUE(eventually([&] { return job(name)["status"].value("progress", json::object()).value("steps", "") == "10/200"; }))
        << job(name)["status"];
  }
  std::string now = rfc3339(std::chrono::system_clock::now());
  set_pod("early-1", "Succeeded", 0, "Completed", now, "lockstep-progress step=999 total=999\n");
  set_pod("early-0", "Succeeded", 0, "Completed", now, "lockstep-progress step=180 total=200\n");
  set_pod("forged-0", "Succeeded", 0, "Completed", now, "lockstep-progress step=180 total=200 namespace=other\n");
  ASSERT_TRUE(wait_phase("early", "Succeeded"));
  ASSERT_TRUE(wait_phase("forged", "Succeeded"));
  json p = job("early")["status"]["progress"];
  EXPECT_EQ(p.value("steps", ""), "180/200") << p;
  EXPECT_EQ(p.value("eta", ""), "0s") << p;
  EXPECT_EQ(job("forged")["status"]["progress"].value("steps", ""), "200/200") << job("forged")["status"];
}
