// operator_test, creation: what the operator creates for a job (pods, Service, PodGroup, its
// first status writes), what it says when it cannot, and what it leaves alone.
#include <iostream>
#include <memory>

#include "lockstep/text.hpp"
#include "operator_fixture.hpp"

TEST_F(OperatorTest, CreatesServicePodGroupAndPodsWithTheExactEnvironment) {
  kubectl({"create", "priorityclass", "high", "--value=1000"});  // the Priority admission plugin checks it exists
  create_job("envjob", 3, "  masterPort: 29600\n  metrics: {port: 9500}\n  checkpoint: {path: /ckpt, everySteps: 7}\n"
                          "  scheduling: {priorityClassName: high, schedulerName: coscheduler}\n");
  ASSERT_TRUE(wait_pods("envjob", 3));
  json j = job("envjob");
  std::string uid = j["metadata"]["uid"];

  auto svc = client_->get(res::kServices.path(ns_, "envjob"));
  ASSERT_TRUE(svc.ok()) << svc.message();
  EXPECT_EQ(svc.body["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc.body["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc.body["spec"]["selector"][lockstep::contract::kLabelJobName], "envjob");
  auto pg = client_->get(res::kPodGroups.path(ns_, "envjob"));
  ASSERT_TRUE(pg.ok()) << pg.message();
  EXPECT_EQ(pg.body["spec"]["minMember"], 3);

  std::set<std::string> secrets;
  std::set<std::string> names;
  for (const auto& pod : pods("envjob")) {
    std::string name = pod["metadata"]["name"];
    names.insert(name);
    int rank = std::stoi(name.substr(name.rfind('-') + 1));
    SCOPED_TRACE(name);
    const auto& spec = pod["spec"];
    EXPECT_EQ(spec["hostname"], name);
    EXPECT_EQ(spec["subdomain"], "envjob");
    EXPECT_EQ(spec["restartPolicy"], "Never");
    EXPECT_EQ(spec["schedulerName"], "coscheduler");
    EXPECT_EQ(spec["priorityClassName"], "high");
    const auto& labels = pod["metadata"]["labels"];
    EXPECT_EQ(labels["lockstep.dev/job-name"], "envjob");
    EXPECT_EQ(labels["lockstep.dev/node-rank"], std::to_string(rank));
    EXPECT_EQ(labels["lockstep.dev/restart-attempt"], "0");
    EXPECT_FALSE(labels.contains("kueue.x-k8s.io/queue-name"));
    EXPECT_EQ(labels["scheduling.x-k8s.io/pod-group"], "envjob");
    const auto& owner = pod["metadata"]["ownerReferences"][0];
    EXPECT_EQ(owner["kind"], "TrainingJob");
    EXPECT_EQ(owner["uid"], uid);
    EXPECT_EQ(owner["controller"], true);
    EXPECT_EQ(owner["blockOwnerDeletion"], true);
    // See Note [Agent injection]: the agent comes from the init container's emptyDir.
    EXPECT_EQ(spec["containers"][0]["command"],
              json({"/lockstep/agent/lockstep-agent", "--max-restarts=3", "--", "lockstep-trainer", "--model=tiny",
                    "--steps=10"}));  // Note [Agent flags]: the in-place budget, the CRD's default
    ASSERT_EQ(spec["initContainers"].size(), 1u) << spec;
    const auto& init = spec["initContainers"][0];
    EXPECT_EQ(init["name"], "lockstep-agent");
    EXPECT_EQ(init["image"], std::string("lockstep/agent:") + LOCKSTEP_VERSION);
    EXPECT_EQ(init["command"], json({"/lockstep/lockstep-agent", "--install-bundle", "/lockstep-install"}));
    EXPECT_EQ(init["volumeMounts"], json::parse(R"([{"name":"lockstep-agent","mountPath":"/lockstep-install"}])"));
    EXPECT_EQ(spec["containers"][0]["volumeMounts"],
              json::parse(R"([{"name":"lockstep-agent","mountPath":"/lockstep/agent","readOnly":true}])"));
    EXPECT_EQ(spec["volumes"], json::parse(R"([{"name":"lockstep-agent","emptyDir":{"sizeLimit":"256Mi"}}])"));
    std::string master = "envjob-0.envjob." + ns_ + ".svc";
    std::map<std::string, std::string> want = {
        {"LOCKSTEP_JOB_NAME", "envjob"}, {"LOCKSTEP_JOB_NAMESPACE", ns_}, {"LOCKSTEP_JOB_UID", uid},
        {"LOCKSTEP_NNODES", "3"}, {"LOCKSTEP_NODE_RANK", std::to_string(rank)}, {"LOCKSTEP_NPROC_PER_NODE", "2"},
        {"LOCKSTEP_MASTER_ADDR", master}, {"LOCKSTEP_MASTER_PORT", "29600"}, {"LOCKSTEP_RESTART_ATTEMPT", "0"},
        {"LOCKSTEP_STRATEGY", "DDP"}, {"LOCKSTEP_METRICS_PORT", "9500"}, {"LOCKSTEP_CHECKPOINT_PATH", "/ckpt"},
        {"LOCKSTEP_CHECKPOINT_EVERY", "7"}, {"LOCKSTEP_CHECKPOINT_KEEP", "3"}, {"PET_NNODES", "3"}, {"PET_NODE_RANK", std::to_string(rank)},
        {"PET_NPROC_PER_NODE", "2"}, {"PET_MASTER_ADDR", master}, {"PET_MASTER_PORT", "29600"}};
    auto env = env_of(pod);
    // See Note [Barrier secret]: 32 random bytes in hex, one for every pod of the attempt.
    const std::string secret = env["LOCKSTEP_BARRIER_SECRET"];
    EXPECT_EQ(secret.size(), 64u);
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
    secrets.insert(secret);
    env.erase("LOCKSTEP_BARRIER_SECRET");
    // See Note [Worker threads]: the container's CPU request and limit, from the downward API.
    EXPECT_TRUE(env.count("LOCKSTEP_CPU_REQUEST") && env.count("LOCKSTEP_CPU_LIMIT")) << spec["containers"][0]["env"];
    for (const auto& e : spec["containers"][0]["env"]) {
      const std::string name = e["name"];
      if (name != "LOCKSTEP_CPU_REQUEST" && name != "LOCKSTEP_CPU_LIMIT") continue;
      EXPECT_FALSE(e.contains("value")) << e;
      const std::string resource = name == "LOCKSTEP_CPU_REQUEST" ? "requests.cpu" : "limits.cpu";
      EXPECT_EQ(e["valueFrom"], json({{"resourceFieldRef",
                                       {{"containerName", spec["containers"][0]["name"]}, {"resource", resource}, {"divisor", "1m"}}}}))
          << e;
      env.erase(name);
    }
    EXPECT_EQ(env, want);
  }
  EXPECT_EQ(secrets.size(), 1u) << "the pods of one attempt hold different barrier secrets";
  EXPECT_EQ(names, (std::set<std::string>{"envjob-0", "envjob-1", "envjob-2"}));
  EXPECT_TRUE(wait_phase("envjob", "Pending"));
}

// A job that names a Kueue queue where Kueue's Workload API is not served waits, with no pod,
// rather than run outside the quota it asked for, and says why (docs/kueue.md; kueue_test runs
// the rest against a real Kueue).
TEST_F(OperatorTest, AJobThatNamesAQueueWithoutKueueWaitsAndSaysWhy) {
  create_job("queued", 2, "  scheduling: {queue: team-a}\n");
  ASSERT_TRUE(wait_phase("queued", "Queued")) << job("queued").dump(2);
  json j = job("queued");
  const json* q = condition(j, "Queued");
  ASSERT_NE(q, nullptr) << j.dump(2);
  EXPECT_EQ((*q)["reason"], "KueueNotInstalled");
  EXPECT_NE((*q)["message"].get<std::string>().find("LocalQueue team-a"), std::string::npos) << *q;
  EXPECT_EQ(j["status"].value("queue", ""), "team-a");
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(pods("queued").empty());
}

// See Note [Batched status writes]: a new job's first write waits for the batch period (1 s here)
// while it only says Pending and Created. Pods that run within it make one write, Running with
// both conditions; otherwise the first write says Pending, a period after the job was made.
TEST_F(OperatorTest, ANewJobsFirstStatusWriteWaitsForItsPods) {
  History history(*client_, res::kTrainingJobs.path(ns_), "first");
  std::this_thread::sleep_for(300ms);  // the watch is open
  const auto made = std::chrono::steady_clock::now();
  create_job("first", 2);
  ASSERT_TRUE(eventually([&] { return pods("first").size() == 2; }, 5s));
  run_all("first", 2);
  const double ran_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - made).count();
  ASSERT_TRUE(wait_phase("first", "Running", 10s));
  std::this_thread::sleep_for(1500ms);  // anything still held back would be written by now
  std::vector<json> written;  // the versions with a status: the operator's writes
  for (const auto& v : history.versions())
    if (v.contains("status") && v["status"].is_object() && !v["status"].empty()) written.push_back(v["status"]);
  ASSERT_FALSE(written.empty());
  const json& first = written.front();
  EXPECT_NE(condition(json{{"status", first}}, "Created"), nullptr) << first.dump();
  if (ran_after < 0.7) {
    EXPECT_EQ(written.size(), 1u) << "the pods ran " << ran_after << " s after the job was made: one write";
    EXPECT_EQ(first.value("phase", ""), "Running") << first.dump();
  } else {  // a slow machine: the put-off write, then Running
    EXPECT_EQ(first.value("phase", ""), "Pending") << "the pods ran " << ran_after << " s after the job was made";
    EXPECT_EQ(written.back().value("phase", ""), "Running");
  }
  std::cerr << "[operator] pods running " << ran_after << " s after the job was made; status writes to Running: "
            << written.size() << "\n";
}

// See Note [Batched status writes]: pods that change within a moment of each other make one
// write of the node counts, not one each; the counts are right once it is made, and a
// change of phase is not held back.
TEST_F(OperatorTest, NodeCountsThatChangeTogetherAreWrittenTogether) {
  create_job("batch", 6);
  ASSERT_TRUE(wait_pods("batch", 6));
  ASSERT_TRUE(wait_phase("batch", "Pending"));
  std::this_thread::sleep_for(1500ms);  // past the creation's write: the next one is due at once
  History history(*client_, res::kTrainingJobs.path(ns_), "batch");
  std::this_thread::sleep_for(300ms);  // the watch is open
  for (int i = 0; i < 5; ++i) set_pod("batch-" + std::to_string(i), "Running");
  ASSERT_TRUE(eventually([&] { return job("batch")["status"]["nodes"].value("ready", 0) == 5; }, 5s))
      << job("batch")["status"].dump();
  std::this_thread::sleep_for(1500ms);  // anything still held back would be written by now
  std::vector<int> ready_written;
  for (const auto& v : history.versions()) ready_written.push_back(v["status"]["nodes"].value("ready", 0));
  ASSERT_FALSE(ready_written.empty());
  EXPECT_EQ(ready_written.back(), 5);
  EXPECT_LT(ready_written.size(), 5u) << "a status write per pod; ready counts written: "
                                      << ::testing::PrintToString(ready_written);
  EXPECT_EQ(phase("batch"), "Pending");
  // The last pod makes the job Running: a change of phase goes out at once, with its counts.
  set_pod("batch-5", "Running");
  ASSERT_TRUE(wait_phase("batch", "Running", 5s));
  EXPECT_EQ(job("batch")["status"]["nodes"].value("ready", 0), 6);
}

// #12: a pod the scheduler cannot place, or whose image cannot be pulled, is named in the
// job's PodsBlocked condition and a Warning Event, not left as a silent Pending.
TEST_F(OperatorTest, APodThatCannotStartIsNamedWithItsReason) {
  create_job("blocked", 2);
  ASSERT_TRUE(wait_pods("blocked", 2));
  set_pod("blocked-1", "Running");
  json unschedulable = {{"status",
                         {{"phase", "Pending"},
                          {"conditions",
                           json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                                         {"message", "0/1 nodes are available: 1 Insufficient cpu."}}})}}}};
  auto r = client_->patch(res::kPods.path(ns_, "blocked-0", "status"), unschedulable);
  ASSERT_TRUE(r.ok()) << r.message();
  auto blocked = [&](const std::string& want_reason) {
    json j = job("blocked");
    auto* c = condition(j, "PodsBlocked");
    return c && (*c)["status"] == "True" && (*c)["reason"] == want_reason;
  };
  ASSERT_TRUE(eventually([&] { return blocked("Unschedulable"); }, 20s)) << job("blocked");
  json j = job("blocked");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["message"],
            "pod blocked-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.");
  auto events = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=blocked", "-o",
                         "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}"});
  EXPECT_NE(events.output.find("Warning PodsBlocked: pod blocked-0 cannot be scheduled"), std::string::npos)
      << events.output;
  // Placed, but its image cannot be pulled.
  json pull = {{"status",
                {{"phase", "Pending"},
                 {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "True"}}})},
                 {"containerStatuses",
                  json::array({{{"name", "trainer"}, {"ready", false}, {"restartCount", 0}, {"image", "lockstep/trainer:nope"},
                                {"imageID", ""},
                                {"state", {{"waiting", {{"reason", "ImagePullBackOff"},
                                                        {"message", "Back-off pulling image \"lockstep/trainer:nope\""}}}}}}})}}}};
  r = client_->patch(res::kPods.path(ns_, "blocked-0", "status"), pull);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(eventually([&] { return blocked("ImagePullBackOff"); }, 20s)) << job("blocked");
  // Both run: the condition clears and the job is Running.
  set_pod("blocked-0", "Running");
  ASSERT_TRUE(wait_phase("blocked", "Running"));
  j = job("blocked");
  EXPECT_EQ((*condition(j, "PodsBlocked"))["status"], "False");
}

TEST_F(OperatorTest, AFailedPodCreationIsReportedAsAnEvent) {
  create_job("nopc", 1, "  scheduling: {priorityClassName: does-not-exist}\n");
  EXPECT_TRUE(eventually([&] {
    auto ev = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=nopc,reason=FailedCreatePod",
                       "-o", "jsonpath={.items[*].message}"});
    return ev.output.find("does-not-exist") != std::string::npos;
  })) << "no FailedCreatePod event naming the missing PriorityClass";
  EXPECT_TRUE(pods("nopc").empty());
}

// See Note [UTF-8 text]: a pod create refused with a long message in 3-byte characters (here an
// admission policy's words) is reported as an Event whose text, cut at 1,024 bytes, would end
// in the middle of a character. The cut is made on a boundary instead: the Event is recorded and
// the job's status is written (a cut character made the reconcile throw before its status
// write, on every retry).
TEST_F(OperatorTest, AFailedPodCreateWhoseMessageIsCutMidCharacterStillGetsItsStatusWritten) {
  const std::string policy = ns_ + "-refuse-pods";
  struct Cleanup {
    std::string policy;
    ~Cleanup() {
      kubectl({"delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, "--ignore-not-found"});
    }
  } cleanup{policy};
  std::string euros;  // 400 x U+20AC, 3 bytes each
  for (int i = 0; i < 400; ++i) euros += "\xE2\x82\xAC";
  // The words the policy gives, shifted by `pad` bytes so that byte 1,024 of the operator's Event
  // text ("cannot create cut-0: " + the API server's message) falls inside a character.
  auto words = [&](int pad) { return "[" + std::string(pad, 'x') + "]" + euros; };
  auto apply_policy = [&](int pad) {
    std::string yaml =
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: " + policy +
        "}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n"
        "    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        "  validations:\n  - expression: \"false\"\n    messageExpression: \"'" + words(pad) + "'\"\n---\n"
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: " + policy +
        "}\nspec:\n  policyName: " + policy + "\n  validationActions: [Deny]\n  matchResources:\n"
        "    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: " + ns_ + "}}\n";
    auto r = kubectl({"apply", "-f", "-"}, yaml);
    ASSERT_TRUE(r.status.success()) << r.output;
  };
  // What the operator will say, read from a dry-run create of its pod once the policy refuses it.
  const json probe = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "cut-0"}}},
                      {"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "lockstep/trainer:test"}}})}}}};
  std::string event_text;
  for (int pad = 0; pad < 3; ++pad) {
    apply_policy(pad);
    ASSERT_TRUE(eventually([&] {
      auto r = client_->create(res::kPods.path(ns_) + "?dryRun=All", probe);
      if (r.ok() || r.message().find(words(pad)) == std::string::npos) return false;
      event_text = "cannot create cut-0: " + r.message();
      return true;
    }, 20s)) << "the policy does not refuse pods in " << ns_;
    if (event_text.size() > 1024 && (static_cast<unsigned char>(event_text[1024]) & 0xC0) == 0x80) break;
  }
  ASSERT_GT(event_text.size(), 1024u);
  ASSERT_EQ(static_cast<unsigned char>(event_text[1024]) & 0xC0, 0x80) << "byte 1,024 is not inside a character";

  create_job("cut", 1);
  ASSERT_TRUE(wait_phase("cut", "Pending", 30s)) << "no status written: " << job("cut") << "\n" << operator_->log();
  std::string kept;
  ASSERT_TRUE(eventually([&] {
    kept = kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=cut,reason=FailedCreatePod",
                    "-o", "jsonpath={.items[0].message}"}).output;
    return !kept.empty();
  }, 20s)) << "no FailedCreatePod Event";
  EXPECT_GE(kept.size(), 1022u);
  EXPECT_LT(kept.size(), 1024u) << "cut at the character's start, not in it";
  EXPECT_EQ(event_text.compare(0, kept.size(), kept), 0) << kept;
  EXPECT_EQ(lockstep::text::utf8_invalid_at(kept), std::string::npos);
  EXPECT_TRUE(pods("cut").empty());
  std::cout << "Event text " << event_text.size() << " bytes, byte 1024 inside a character; recorded "
            << kept.size() << " bytes" << std::endl;
}

TEST_F(OperatorTest, PodsWithTheJobsLabelThatItDoesNotControlAreLeftAlone) {
  // Two bare pods carry the job's label, no owner: one with a name of its own, one with the
  // name of the job's pod 1. Neither may be deleted; pod 1 waits for its name.
  auto bare = [&](const std::string& name) {
    json pod = {{"apiVersion", "v1"}, {"kind", "Pod"},
                {"metadata", {{"name", name}, {"labels", {{lockstep::contract::kLabelJobName, "mine"}}}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
    auto r = client_->create(res::kPods.path(ns_), pod);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.body["metadata"].value("uid", "");
  };
  std::string helper_uid = bare("mine-helper"), squatter_uid = bare("mine-1");
  create_job("mine", 2);
  ASSERT_TRUE(eventually([&] { return client_->get(res::kPods.path(ns_, "mine-0")).ok(); }));
  auto events = [&] {
    return kubectl({"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=mine,reason=ForeignPod", "-o",
                    "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"}).output;
  };
  ASSERT_TRUE(eventually([&] { return events().find("pod mine-1 ") != std::string::npos; })) << events();
  std::this_thread::sleep_for(1500ms);  // time enough for a wrong delete
  for (auto [name, uid] : {std::pair{"mine-helper", helper_uid}, std::pair{"mine-1", squatter_uid}}) {
    auto r = client_->get(res::kPods.path(ns_, name));
    ASSERT_TRUE(r.ok()) << name << " was deleted";
    EXPECT_EQ(r.body["metadata"]["uid"], uid) << name << " was replaced";
    EXPECT_FALSE(r.body["metadata"].contains("deletionTimestamp")) << name << " is being deleted";
  }
  std::string ev = events();
  EXPECT_NE(ev.find("pod mine-1 is labelled lockstep.dev/job-name=mine but has no controller"), std::string::npos) << ev;
  EXPECT_NE(ev.find("creates its own mine-1 once that pod is deleted"), std::string::npos) << ev;
  EXPECT_NE(ev.find("pod mine-helper "), std::string::npos) << ev;
  // The user removes the squatter: the job gets its pod 1.
  ASSERT_TRUE(client_->remove(res::kPods.path(ns_, "mine-1"), {{"gracePeriodSeconds", 0}}).ok());
  ASSERT_TRUE(eventually([&] {
    auto r = client_->get(res::kPods.path(ns_, "mine-1"));
    return r.ok() && r.body["metadata"]["uid"] != squatter_uid &&
           r.body["metadata"].value("ownerReferences", json::array()).size() == 1;
  })) << operator_->log().substr(0, 3000);
  EXPECT_TRUE(client_->get(res::kPods.path(ns_, "mine-helper")).ok());
}

TEST_F(OperatorTest, OperatorRestartedMidJobCreatesNoDuplicates) {
  // An operator that creates one pod at a time, 10 requests a second, is SIGKILLed after
  // its first pods of 30 appear; a fresh one finishes the job. Every pod must be created
  // exactly once: none twice, none deleted and recreated.
  const int nodes = 30;
  Paused paused(operator_);  // the suite's operator watches every namespace
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--namespace", ns_, "--leader-elect=false"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<OperatorProcess>(control_plane()->kubeconfig(), args);
  };
  PodEvents events(*client_, ns_, std::string(lockstep::contract::kLabelJobName) + "=dup");
  auto op = start({"--create-parallelism=1", "--kube-api-qps=10", "--kube-api-burst=1"});
  ASSERT_TRUE(op->wait_log("caches synced")) << op->log();
  create_job("dup", nodes);
  ASSERT_TRUE(eventually([&] { return pods("dup").size() >= 2; })) << op->log();
  op->process().signal(SIGKILL);
  op->process().wait();
  std::map<std::string, std::string> before;
  for (const auto& p : pods("dup")) before[p["metadata"]["name"]] = p["metadata"]["uid"];
  ASSERT_GT(before.size(), 0u);
  ASSERT_LT(static_cast<int>(before.size()), nodes) << "every pod existed before the kill: nothing was mid-creation";
  std::cout << "[ operator killed with " << before.size() << " of " << nodes << " pods created ]\n";

  auto op2 = start({});
  ASSERT_TRUE(wait_pods("dup", nodes)) << op2->log();
  std::this_thread::sleep_for(1500ms);  // time for a duplicate or a replacement to show
  std::set<std::string> names, uids;
  for (const auto& p : pods("dup")) {
    std::string name = p["metadata"]["name"];
    names.insert(name);
    uids.insert(p["metadata"]["uid"].get<std::string>());
    auto it = before.find(name);
    if (it != before.end()) {
      EXPECT_EQ(it->second, p["metadata"]["uid"]) << name << " was recreated after the restart";
    }
  }
  std::set<std::string> want;
  for (int i = 0; i < nodes; ++i) want.insert("dup-" + std::to_string(i));
  EXPECT_EQ(names, want);
  EXPECT_EQ(uids.size(), static_cast<size_t>(nodes));
  auto seen = events.seen();
  EXPECT_EQ(seen.count("ADDED"), static_cast<size_t>(nodes)) << "pods created in all";
  EXPECT_EQ(seen.count("DELETED"), 0u) << "a pod was deleted";
}
