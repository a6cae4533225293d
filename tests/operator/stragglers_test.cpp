// operator_test, stragglers (#42; Note [Straggler condition], Note [Replacing a straggler]): node
// 0's verdict served on rank 0's /metrics (a stand-in agent: the agents' own tests check that
// they serve it) becomes the Straggler condition and its Events; hostile pages change nothing;
// Replace restarts the gang off the straggler's node with a required affinity the API server
// takes; Ignore sets nothing.
#include "operator_fixture.hpp"

namespace {

// Node 0's agent's straggler series for `job` (2 nodes x 2 ranks), as agent/metrics.cpp serves
// them: `verdict` a lockstep_straggler_slowdown line of rank `rank` (node rank rank / 2), or none.
std::string straggler_page(const std::string& ns, const std::string& job, int rank, double slowdown,
                           const std::string& throttle = "", int suspects = -1) {
  const std::string labels = "namespace=\"" + ns + "\",node_rank=\"0\",trainingjob=\"" + job + "\"";
  std::string t = "# TYPE lockstep_straggler_window_seconds gauge\nlockstep_straggler_window_seconds{" + labels + "} 30\n";
  const bool verdict = rank >= 0;
  t += "lockstep_stragglers{" + labels + "} " + std::to_string(verdict ? 1 : 0) + "\n";
  t += "lockstep_straggler_suspects{" + labels + "} " + std::to_string(suspects >= 0 ? suspects : verdict ? 1 : 0) + "\n";
  if (verdict) {
    char value[32];
    std::snprintf(value, sizeof value, "%.6g", slowdown);
    t += "lockstep_straggler_slowdown{namespace=\"" + ns + "\",node_rank=\"" + std::to_string(rank / 2) + "\",rank=\"" +
         std::to_string(rank) + "\",throttle=\"" + throttle + "\",trainingjob=\"" + job + "\"} " + value + "\n";
  }
  return t;
}

}  // namespace

class StragglerTest : public OperatorTest {
 protected:
  // A 2-node job whose rank 0 is read at `agent_`'s port, `policy_yaml` its
  // runPolicy.stragglers; attempt `attempt`'s pods bound to `node_a` and `node_b` and Running.
  void start(const std::string& name, const std::string& stragglers_yaml) {
    name_ = name;
    create_job(name, 2, "  metrics: {port: " + std::to_string(port_) + "}\n  runPolicy: {stragglers: " + stragglers_yaml +
                            "}\n");
  }
  void run_attempt(int attempt, const std::string& node0, const std::string& node1) {
    ASSERT_TRUE(wait_pods(name_, 2, attempt));
    bind(name_ + "-0", node0);
    bind(name_ + "-1", node1);
    run_all(name_, 2);
    auto ip = client_->patch(res::kPods.path(ns_, name_ + "-0", "status"), {{"status", {{"podIP", "127.0.0.1"}}}});
    ASSERT_TRUE(ip.ok()) << ip.message();
    ASSERT_TRUE(eventually([&] {
      json s = job(name_)["status"];
      return s.value("phase", "") == "Running" && s.value("restarts", -1) == attempt;
    }, 20s)) << job(name_)["status"].dump();
  }
  json straggler_condition() {
    json j = job(name_);
    const json* c = condition(j, "Straggler");
    return c ? *c : json::object();  // {}: none
  }
  // The job's Events of `reason`: their type and message, oldest first.
  std::vector<std::pair<std::string, std::string>> events(const std::string& reason) {
    auto r = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=" + name_ + ",reason=" + reason,
                      "--sort-by=.metadata.creationTimestamp", "-o", "json"});
    std::vector<std::pair<std::string, std::string>> out;
    json list = json::parse(r.output, nullptr, false);
    if (!list.is_discarded())
      for (const auto& e : list["items"]) out.emplace_back(e.value("type", ""), e.value("message", ""));
    return out;
  }
  // Waits for `n` more readings of the stand-in agent.
  void readings(int n) {
    const int from = agent_.gets();
    ASSERT_TRUE(eventually([&] { return agent_.gets() >= from + n; }, 20s)) << agent_.gets() - from << " readings";
    std::this_thread::sleep_for(500ms);  // time for a (wrong) status write
  }

  int port_ = lockstep::free_loopback_port();
  FakeAgent agent_{port_};
  std::string name_;
};

// Deliverable 2: the Straggler condition names rank, pod and node (the operator's own pod cache),
// with a Warning Event; the verdict gone, False/Recovered with a Normal Event.
TEST_F(StragglerTest, AVerdictOnRank0sPageNamesThePodAndNodeAndClears) {
  const std::string a = make_node("a"), b = make_node("b");
  agent_.serve(straggler_page(ns_, "slow", -1, 0));
  start("slow", "{}");
  run_attempt(0, a, b);
  readings(2);
  EXPECT_TRUE(straggler_condition().empty()) << "no verdict was ever seen: " << straggler_condition();

  agent_.serve(straggler_page(ns_, "slow", 3, 1.4249, "power"));
  const auto served = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return straggler_condition().value("status", "") == "True"; }, 15s))
      << job("slow")["status"].dump();
  std::cout << "[ the Straggler condition showed "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - served).count()
            << " s after the verdict was served; --progress-period 1s ]\n";
  json c = straggler_condition();
  EXPECT_EQ(c["reason"], "SlowRank");
  EXPECT_EQ(c["message"], "rank 3 (pod slow-1 on node " + b +
                              "): work 1.42x the gang's typical rank over the last 30 s; GPU clocks throttled: power cap");
  ASSERT_TRUE(eventually([&] { return events("Straggler").size() == 1; })) << events("Straggler").size();
  EXPECT_EQ(events("Straggler")[0], std::make_pair(std::string("Warning"), c["message"].get<std::string>()));
  // The slowdown drifting by less than 0.1 over several readings: no write, no Event.
  const std::string since = c["lastTransitionTime"];
  agent_.serve(straggler_page(ns_, "slow", 3, 1.47, "power"));
  readings(3);
  EXPECT_EQ(straggler_condition()["message"], c["message"]);
  EXPECT_EQ(events("Straggler").size(), 1u);

  agent_.serve(straggler_page(ns_, "slow", -1, 0));
  ASSERT_TRUE(eventually([&] { return straggler_condition().value("status", "") == "False"; }, 15s))
      << straggler_condition();
  c = straggler_condition();
  EXPECT_EQ(c["reason"], "Recovered");
  EXPECT_EQ(c["message"], "rank 3 (pod slow-1 on node " + b + ") is no longer slower than the gang's typical rank");
  ASSERT_TRUE(eventually([&] { return events("StragglerRecovered").size() == 1; }));
  EXPECT_EQ(events("StragglerRecovered")[0].first, "Normal");
  EXPECT_EQ(phase("slow"), "Running");
  EXPECT_EQ(job("slow")["status"].value("restarts", -1), 0) << "Report restarts nothing";
}

// See Note [Straggler condition]: the page is the pod's word; what is out of bounds changes nothing.
TEST_F(StragglerTest, HostileValuesOnThePageChangeNothing) {
  const std::string a = make_node("a"), b = make_node("b");
  agent_.serve("");
  start("hostile", "{policy: Replace, replaceAfterSeconds: 0}");
  run_attempt(0, a, b);
  const std::string l = "namespace=\"" + ns_ + "\",trainingjob=\"hostile\"";
  std::string page;
  for (const std::string& line : {
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"\"} NaN",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"\"} +Inf",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"\"} -2",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"\"} 0.5",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"\"} 1e300",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"0\",rank=\"3\",throttle=\"\"} 2",   // rank 3 is node 1's
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"7\",rank=\"15\",throttle=\"\"} 2",  // no node 7
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"-3\",throttle=\"\"} 2",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3\",throttle=\"rm -rf\"} 2",
           "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"3" + std::string(6000, '3') + "\",throttle=\"\"} 2",
           "lockstep_straggler_suspects{" + l + "} 1e12", "lockstep_stragglers{" + l + "} -4",
       })
    page += line + "\n";
  for (int i = 0; i < 5000; ++i)  // and 5,000 series of ranks the job does not have (under the 1 MiB read)
    page += "lockstep_straggler_slowdown{" + l + ",node_rank=\"1\",rank=\"" + std::to_string(100 + i) + "\"} 5\n";
  // A step, which shows the page was read and parsed.
  const std::string rank0 = "{" + l + ",node_rank=\"0\",rank=\"0\"}";
  page = "lockstep_step" + rank0 + " 7\nlockstep_steps_total" + rank0 + " 7\n" + page;
  ASSERT_LT(page.size(), 1000000u);
  agent_.serve(page);
  ASSERT_TRUE(eventually([&] {
    return job("hostile")["status"].value("progress", json::object()).value("step", -1) == 7;
  }, 15s)) << job("hostile")["status"].dump();
  readings(3);
  EXPECT_TRUE(straggler_condition().empty()) << straggler_condition();
  EXPECT_TRUE(events("Straggler").empty());
  json s = job("hostile")["status"];
  EXPECT_EQ(s.value("phase", ""), "Running");
  EXPECT_EQ(s.value("restarts", -1), 0);
  EXPECT_FALSE(s.contains("stragglers")) << s.dump();
}

// Deliverable 3, Note [Replacing a straggler]: Replace restarts the gang off the straggler's node
// (reason StragglerReplaced, not against backoffLimit), the next attempt's pods carry a required
// matchFields NotIn affinity the API server takes, and past maxReplacements the verdict is only
// reported.
TEST_F(StragglerTest, ReplaceRestartsTheGangOffTheNodeThenStopsAtMaxReplacements) {
  const std::string a = make_node("a"), b = make_node("b"), c = make_node("c");
  agent_.serve(straggler_page(ns_, "repl", -1, 0));
  start("repl", "{policy: Replace, replaceAfterSeconds: 2, maxReplacements: 1}");
  run_attempt(0, a, b);
  agent_.serve(straggler_page(ns_, "repl", 2, 1.8));  // rank 2: slow-1 on node b
  ASSERT_TRUE(eventually([&] { return job("repl")["status"].value("restarts", 0) == 1; }, 20s))
      << job("repl")["status"].dump() << operator_->log().substr(0, 3000);
  json s = job("repl")["status"];
  EXPECT_EQ(s["stragglers"], json({{"replacements", 1}, {"excludedNodes", {b}}})) << s.dump();
  EXPECT_EQ(s.value("nodeLostRestarts", -1), 0);
  const json repl = job("repl");
  const json* restarting = condition(repl, "Restarting");
  ASSERT_NE(restarting, nullptr);
  EXPECT_EQ((*restarting)["reason"], "StragglerReplaced");
  EXPECT_NE((*restarting)["message"].get<std::string>().find(
                "(0 of spec.runPolicy.backoffLimit=3; straggler replacements do not count)"),
            std::string::npos) << *restarting;
  EXPECT_EQ(straggler_condition()["reason"], "Replaced");
  ASSERT_TRUE(eventually([&] { return events("StragglerReplaced").size() == 1; }));
  EXPECT_EQ(events("StragglerReplaced")[0].first, "Warning");
  ASSERT_TRUE(eventually([&] {
    return operator_->http("/metrics").find("lockstep_restarts_total{kind=\"gang\",namespace=\"" + ns_ +
                                            "\",trainingjob=\"repl\"} 1") != std::string::npos;
  })) << operator_->http("/metrics");

  // Attempt 1 follows once the old pods are gone (the test plays the kubelet), with no backoff;
  // its pods, accepted by the API server, are required off node b.
  agent_.serve(straggler_page(ns_, "repl", -1, 0));
  confirm_graceful_delete("repl-0");
  confirm_graceful_delete("repl-1");
  ASSERT_TRUE(wait_pods("repl", 2, 1));
  for (json p : pods("repl", 1)) {
    json terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                  ["nodeSelectorTerms"];
    EXPECT_EQ(terms, json::parse(R"([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [")" + b +
                                 R"("]}]}])")) << p["spec"].dump();
  }
  run_attempt(1, a, c);
  // A straggler in attempt 1: the condition again, but maxReplacements=1 is reached.
  agent_.serve(straggler_page(ns_, "repl", 3, 1.6));
  ASSERT_TRUE(eventually([&] { return straggler_condition().value("status", "") == "True"; }, 15s))
      << straggler_condition();
  EXPECT_EQ(straggler_condition()["message"],
            "rank 3 (pod repl-1 on node " + c + "): work 1.60x the gang's typical rank over the last 30 s; not "
            "replaced: spec.runPolicy.stragglers.maxReplacements=1 reached");
  std::this_thread::sleep_for(3s);  // past replaceAfterSeconds
  s = job("repl")["status"];
  EXPECT_EQ(s.value("restarts", -1), 1) << s.dump();
  EXPECT_EQ(s["stragglers"]["replacements"], 1);
  EXPECT_EQ(s.value("phase", ""), "Running");
  EXPECT_EQ(events("Straggler").size(), 2u);
}

// Ignore: no condition, no Event, whatever the page says. (Not "Off": kubectl reads YAML 1.1,
// where a plain Off is the boolean false, which the API server refuses naming the field: the
// first apply shows it.)
TEST_F(StragglerTest, IgnoreSetsNoCondition) {
  const std::string a = make_node("a"), b = make_node("b");
  auto plain = kubectl({"apply", "-n", ns_, "-f", "-"},
                       "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: plain-off\nspec:\n"
                       "  runPolicy: {stragglers: {policy: Off}}\n  template:\n    spec:\n      containers:\n"
                       "      - {name: trainer, image: lockstep/trainer:test}\n");
  EXPECT_FALSE(plain.status.success()) << plain.output;
  EXPECT_NE(plain.output.find("spec.runPolicy.stragglers.policy"), std::string::npos) << plain.output;
  agent_.serve(straggler_page(ns_, "off-job", 3, 3.0));
  start("off-job", "{policy: Ignore}");
  run_attempt(0, a, b);
  EXPECT_EQ(job("off-job")["spec"]["runPolicy"]["stragglers"]["policy"], "Ignore");
  readings(3);
  EXPECT_TRUE(straggler_condition().empty()) << straggler_condition();
  EXPECT_TRUE(events("Straggler").empty());
}

// See Note [Straggler condition]: at the default --progress-period (30 s), a job whose reading shows a
// suspect is read every 5 s, and at the period again once none shows.
TEST_F(StragglerTest, ASuspectBringsTheNextReadingWithinFiveSeconds) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(), {"--namespace", ns_, "--leader-elect=false"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  const std::string a = make_node("a"), b = make_node("b");
  // Steps and a rate on the first readings: the schedule goes to the period (Note [Progress schedule]).
  auto page = [&](long long step, int suspects) {
    std::string l = "{namespace=\"" + ns_ + "\",node_rank=\"0\",rank=\"0\",trainingjob=\"sched\"}";
    return "lockstep_step" + l + " " + std::to_string(step) + "\nlockstep_steps_total" + l + " " + std::to_string(step) +
           "\n" + straggler_page(ns_, "sched", -1, 0, "", suspects);
  };
  auto steps = [&] { return job("sched")["status"].value("progress", json::object()).value("steps", ""); };
  agent_.serve(page(10, 0));
  start("sched", "{}");
  run_attempt(0, a, b);
  ASSERT_TRUE(eventually([&] { return steps() == "10"; }, 15s)) << job("sched")["status"].dump();
  agent_.serve(page(20, 0));
  ASSERT_TRUE(eventually([&] { return steps() == "20"; }, 15s)) << job("sched")["status"].dump();
  // That reading had a rate: the next comes a period later.
  const int at_rate = agent_.gets();
  agent_.serve(page(30, 1));
  std::this_thread::sleep_for(6s);
  EXPECT_EQ(agent_.gets(), at_rate) << "read again within 6 s at a 30 s period with no suspect";
  // The period's reading finds the suspect; from then on, every 5 s.
  ASSERT_TRUE(eventually([&] { return agent_.gets() > at_rate; }, 30s));
  const int at_suspect = agent_.gets();
  std::this_thread::sleep_for(11s);
  EXPECT_GE(agent_.gets() - at_suspect, 2) << "readings in 11 s after a suspect";
  // No suspect: the reading within 5 s finds none, and the period again.
  agent_.serve(page(40, 0));
  std::this_thread::sleep_for(6s);
  const int quiet = agent_.gets();
  std::this_thread::sleep_for(8s);
  EXPECT_EQ(agent_.gets(), quiet) << "read again within 8 s with no suspect";
}
