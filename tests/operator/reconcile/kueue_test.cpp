// Kueue's Workload, table by table (Note [One Workload per job] in operator/reconcile/kueue.hpp):
// what the operator reads of a Workload, the Workload it writes, and decide() from the
// Workload's states to what the gang does.
#include <gtest/gtest.h>

#include "decide_inputs.hpp"
#include "lockstep/contract.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/kueue.hpp"
#include "reconcile/manifests.hpp"

using namespace lockstep::reconcile;
using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::kNow;  // decide_inputs.hpp
using lockstep::test::pod;

namespace {

JobView queued_job(int nodes = 2) {
  JobView j;
  j.name = "tj";
  j.ns = "ns";
  j.uid = "uid-1";
  j.generation = 1;
  j.nodes = nodes;
  j.queue_label = "team-a";
  j.tmpl = json{{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "img"},
                                                         {"resources", {{"requests", {{"cpu", "1"}}}}}}})}}}};
  return j;
}

WorkloadView workload(const JobView& j, std::vector<Condition> conds = {}, bool admission = false) {
  WorkloadView w;
  w.ns = j.ns;
  w.name = workload_name(j);
  w.uid = "wl-uid";
  w.resource_version = "42";
  w.job = j.name;
  w.controller_uid = j.uid;
  w.has_finalizer = true;
  w.finalizer_index = 0;
  w.queue_name = "team-a";
  w.pod_set_hash = pod_set_hash(j);
  w.has_status = true;
  int i = 0;
  for (auto& c : conds) w.conditions.push_back({c, i++});
  w.condition_count = i;
  w.has_admission = admission;
  if (admission) w.cluster_queue = "cq";
  return w;
}

Condition cond(const std::string& type, const std::string& status, const std::string& reason = "R",
               const std::string& message = "") {
  return {type, status, reason, message, "2026-11-29T00:00:00Z"};
}

WorkloadView admitted(const JobView& j, std::vector<Condition> extra = {}) {
  std::vector<Condition> c = {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")};
  for (auto& e : extra) c.push_back(e);
  return workload(j, c, true);
}

Observed observed(JobView j, std::optional<WorkloadView> wl, std::vector<PodView> pods = {}) {
  Observed o = lockstep::test::observed(std::move(j), std::move(pods));
  o.kueue_served = true;
  o.workload = std::move(wl);
  return o;
}

const Condition* find(const std::vector<Condition>& cs, const std::string& type) {
  for (const auto& c : cs)
    if (c.type == type) return &c;
  return nullptr;
}

}  // namespace

// --- admission(): the Workload's state to what the gang does ------------------------------

TEST(KueueAdmission, FromTheWorkloadsState) {
  JobView j = queued_job();
  EXPECT_EQ(admission(j, std::nullopt, true), Admission::CreateWorkload);
  EXPECT_EQ(admission(j, std::nullopt, false), Admission::KueueMissing);
  EXPECT_EQ(admission(j, workload(j), true), Admission::Waiting);
  EXPECT_EQ(admission(j, workload(j, {cond("QuotaReserved", "False", "Pending", "insufficient quota")}), true),
            Admission::Waiting);
  EXPECT_EQ(admission(j, workload(j, {cond("QuotaReserved", "True")}, true), true), Admission::Waiting)
      << "quota reserved, admission checks pending: not yet";
  EXPECT_EQ(admission(j, admitted(j), true), Admission::Admitted);
  EXPECT_EQ(admission(j, admitted(j, {cond("Evicted", "True", "Preempted")}), true), Admission::Stopping);
  // Evicted, admission already given back: waiting again (Kueue resets Evicted on the next admission).
  EXPECT_EQ(admission(j, workload(j, {cond("Evicted", "True", "Preempted"), cond("QuotaReserved", "False")}), true),
            Admission::Waiting);

  JobView plain = j;
  plain.queue_label.clear();
  EXPECT_EQ(admission(plain, std::nullopt, true), Admission::NotQueued);
  EXPECT_EQ(admission(plain, std::nullopt, false), Admission::NotQueued);
  plain.queue = "team-a";  // spec.scheduling.queue is the same thing
  EXPECT_EQ(admission(plain, std::nullopt, true), Admission::CreateWorkload);

  JobView both = j;
  both.queue = "team-b";
  std::string why;
  EXPECT_EQ(admission(both, std::nullopt, true), Admission::QueueConflict);
  EXPECT_EQ(queue_of(both, &why), "");
  EXPECT_NE(why.find("spec.scheduling.queue=team-b"), std::string::npos) << why;
  both.queue = "team-a";
  EXPECT_EQ(admission(both, std::nullopt, true), Admission::CreateWorkload);

  // A Workload made for another shape (the job changed while suspended) is replaced once it
  // holds no quota, and not before.
  WorkloadView old = workload(j);
  old.pod_set_hash = "something-else";
  EXPECT_EQ(admission(j, old, true), Admission::Replace);
  old.has_admission = true;
  old.conditions.push_back({cond("QuotaReserved", "True"), 0});
  EXPECT_EQ(admission(j, old, true), Admission::Waiting);
}

// --- decide() under Kueue --------------------------------------------------------------------

TEST(KueueDecide, AQueuedJobGetsItsWorkloadAndNothingElse) {
  auto d = decide(observed(queued_job(3), std::nullopt));
  EXPECT_TRUE(d.workload.create);
  EXPECT_TRUE(d.create_pods.empty());
  EXPECT_FALSE(d.create_service);
  EXPECT_FALSE(d.create_podgroup);
  EXPECT_EQ(d.status.phase, "Queued");
  EXPECT_EQ(d.status.queue, "team-a");
  ASSERT_NE(d.status.condition("Queued"), nullptr);
  EXPECT_EQ(d.status.condition("Queued")->status, "True");
  EXPECT_TRUE(d.status.start_time.empty()) << "the deadline counts from admission, not from the queue";
}

TEST(KueueDecide, AWaitingJobQuotesKueuesReasonAndHasNoPods) {
  JobView j = queued_job(3);
  auto wl = workload(j, {cond("QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set node: insufficient quota for cpu in flavor default, "
                              "request > maximum capacity (6 > 4)")});
  auto d = decide(observed(j, wl));
  EXPECT_FALSE(d.workload.create);
  EXPECT_TRUE(d.create_pods.empty());
  EXPECT_EQ(d.status.phase, "Queued");
  const Condition* q = d.status.condition("Queued");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->reason, "Pending");
  EXPECT_NE(q->message.find("insufficient quota for cpu"), std::string::npos) << q->message;
  EXPECT_NE(q->message.find("LocalQueue team-a"), std::string::npos) << q->message;
}

TEST(KueueDecide, AnAdmittedJobGetsItsGangAndLeavesTheQueue) {
  JobView j = queued_job(3);
  j.status.phase = "Queued";
  j.status.conditions.push_back({"Queued", "True", "Pending", "", "2026-11-29T00:00:00Z"});
  auto in = observed(j, admitted(j));
  in.service_exists = false;
  auto d = decide(in);
  EXPECT_EQ(d.create_pods, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(d.create_service);
  EXPECT_EQ(d.status.phase, "Pending");
  EXPECT_EQ(d.status.condition("Queued")->status, "False");
  EXPECT_EQ(d.status.condition("Queued")->reason, "Admitted");
  EXPECT_FALSE(d.status.start_time.empty());
}

TEST(KueueDecide, NoPodRunsWithoutAdmissionWhateverIsThere) {
  JobView j = queued_job(2);
  auto d = decide(observed(j, workload(j), {pod(0, "Running"), pod(1, "Pending")}));
  EXPECT_EQ(d.delete_pods.size(), 2u);
  EXPECT_TRUE(d.create_pods.empty());
}

TEST(KueueDecide, AnEvictionStopsTheGangThenGivesTheQuotaBackCountingNoRestart) {
  JobView j = queued_job(2);
  j.status.phase = "Running";
  j.status.start_time = format_time(kNow - 60s);
  j.status.restarts = 1;
  j.status.current_attempt_in_place_restarts = 2;
  auto wl = admitted(j, {cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to prioritization in the ClusterQueue")});

  // Pods still there: they go; the admission stays until they are gone.
  auto d = decide(observed(j, wl, {pod(0, "Running", 1), pod(1, "Running", 1)}));
  EXPECT_EQ(d.delete_pods.size(), 2u);
  EXPECT_FALSE(d.workload.clear_admission);
  EXPECT_EQ(d.status.phase, "Queued");
  EXPECT_EQ(d.status.restarts, 1) << "an eviction is no failure";
  ASSERT_NE(d.status.condition("Evicted"), nullptr);
  EXPECT_EQ(d.status.condition("Evicted")->reason, "Preempted");
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].reason, "Evicted");
  EXPECT_NE(d.events[0].message.find("prioritization"), std::string::npos);

  // Gone: the admission is given back, as Kueue's own job reconciler does.
  JobView after = j;
  after.status = d.status;
  auto d2 = decide(observed(after, wl));
  EXPECT_TRUE(d2.delete_pods.empty());
  EXPECT_TRUE(d2.workload.clear_admission);
  EXPECT_EQ(find(d2.workload.conditions, "QuotaReserved")->status, "False");
  EXPECT_EQ(find(d2.workload.conditions, "Admitted")->status, "False");
  EXPECT_EQ(find(d2.workload.conditions, "Requeued")->status, "True") << "a preempted workload goes back in the queue";
  EXPECT_EQ(d2.status.restarts, 1);
  EXPECT_EQ(d2.status.current_attempt_in_place_restarts, 0) << "the next admission's agents count from 0";
  EXPECT_TRUE(d2.status.start_time.empty());
  EXPECT_TRUE(d2.events.empty()) << "one Event per eviction";

  // A PodsReady timeout: back in the queue after Kueue's backoff, which Requeued=False leaves to it.
  auto timeout = admitted(j, {cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout")});
  auto d3 = decide(observed(after, timeout));
  EXPECT_EQ(find(d3.workload.conditions, "Requeued")->status, "False");
  EXPECT_EQ(find(d3.workload.conditions, "Requeued")->reason, "PodsReadyTimeout");
}

TEST(KueueDecide, PodsReadyComesFromTheAgentsNotFromContainers) {
  JobView j = queued_job(2);
  j.status.phase = "Running";
  j.status.start_time = format_time(kNow - 60s);
  j.status.conditions.push_back({"Running", "True", "AllNodesRunning", "", format_time(kNow - 50s)});
  auto pods = std::vector<PodView>{pod(0, "Running"), pod(1, "Running")};
  auto in = observed(j, admitted(j), pods);
  in.gang_joined = false;  // every container ready, but the agents have not met yet
  EXPECT_EQ(find(decide(in).workload.conditions, "PodsReady"), nullptr);
  in.gang_joined = true;
  auto d = decide(in);
  ASSERT_NE(find(d.workload.conditions, "PodsReady"), nullptr);
  EXPECT_EQ(find(d.workload.conditions, "PodsReady")->status, "True");
  EXPECT_EQ(find(d.workload.conditions, "PodsReady")->reason, "Started");
  // Written once.
  in.workload = admitted(j, {cond("PodsReady", "True", "Started")});
  EXPECT_EQ(find(decide(in).workload.conditions, "PodsReady"), nullptr);
}

TEST(KueueDecide, AGangRestartIsWaitForRecoveryThenRecovered) {
  JobView j = queued_job(2);
  j.status.phase = "Running";
  j.status.start_time = format_time(kNow - 60s);
  j.status.conditions.push_back({"Running", "True", "AllNodesRunning", "", format_time(kNow - 50s)});
  PodView failed = pod(1, "Failed");
  failed.exit_code = 1;
  failed.finished_at = kNow - 10s;
  auto in = observed(j, admitted(j, {cond("PodsReady", "True", "Started")}), {pod(0, "Running"), failed});
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Restarting");
  ASSERT_NE(find(d.workload.conditions, "PodsReady"), nullptr);
  EXPECT_EQ(find(d.workload.conditions, "PodsReady")->reason, "WaitForRecovery");
  EXPECT_FALSE(d.workload.clear_admission) << "a gang restart keeps the admission";

  JobView again = j;
  again.status = d.status;
  again.status.phase = "Running";
  auto in2 = observed(again, admitted(j, {cond("PodsReady", "False", "WaitForRecovery")}),
                      {pod(0, "Running", 1), pod(1, "Running", 1)});
  in2.gang_joined = true;
  auto d2 = decide(in2);
  ASSERT_NE(find(d2.workload.conditions, "PodsReady"), nullptr);
  EXPECT_EQ(find(d2.workload.conditions, "PodsReady")->status, "True");
  EXPECT_EQ(find(d2.workload.conditions, "PodsReady")->reason, "Recovered");
}

TEST(KueueDecide, AFinishedJobFinishesItsWorkloadThenLetsItGo) {
  JobView j = queued_job(2);
  j.status.phase = "Succeeded";
  j.status.conditions.push_back({"Succeeded", "True", "AllNodesSucceeded", "all 2 pods succeeded", ""});
  auto d = decide(observed(j, admitted(j)));
  ASSERT_NE(find(d.workload.conditions, "Finished"), nullptr);
  EXPECT_EQ(find(d.workload.conditions, "Finished")->reason, "Succeeded");
  EXPECT_FALSE(d.workload.remove_finalizer);
  auto done = admitted(j, {cond("Finished", "True", "Succeeded")});
  auto d2 = decide(observed(j, done));
  EXPECT_TRUE(d2.workload.conditions.empty());
  EXPECT_TRUE(d2.workload.remove_finalizer);
  done.has_finalizer = false;
  EXPECT_FALSE(decide(observed(j, done)).workload.any());

  j.status.phase = "Failed";
  j.status.conditions = {{"Failed", "True", "BackoffLimitExceeded", "3 gang restarts", ""}};
  EXPECT_EQ(find(decide(observed(j, admitted(j))).workload.conditions, "Finished")->reason, "Failed");
}

TEST(KueueDecide, SuspendIsAnInactiveWorkloadAndResumeAnActiveOne) {
  JobView j = queued_job(2);
  j.status.phase = "Running";
  j.suspend = true;
  auto d = decide(observed(j, admitted(j), {pod(0, "Running"), pod(1, "Running")}));
  EXPECT_EQ(d.status.phase, "Suspended");
  ASSERT_TRUE(d.workload.set_active.has_value());
  EXPECT_FALSE(*d.workload.set_active);
  EXPECT_EQ(d.delete_pods.size(), 2u);

  // Kueue evicts it (Deactivated); once the pods are gone the quota goes back, still Suspended.
  JobView s = j;
  s.status = d.status;
  auto inactive = admitted(j, {cond("Evicted", "True", "Deactivated", "The workload is deactivated")});
  inactive.active = false;
  auto d2 = decide(observed(s, inactive));
  EXPECT_TRUE(d2.workload.clear_admission);
  EXPECT_EQ(d2.status.phase, "Suspended");
  EXPECT_FALSE(d2.workload.set_active.has_value());
  EXPECT_EQ(find(d2.workload.conditions, "Requeued")->status, "False");

  // Resumed: active again, and queued until Kueue admits it.
  JobView r = s;
  r.suspend = false;
  r.status = d2.status;
  auto idle = workload(j, {cond("QuotaReserved", "False", "Pending", "")});
  idle.active = false;
  idle.inactive_for_suspend = true;
  auto d3 = decide(observed(r, idle));
  ASSERT_TRUE(d3.workload.set_active.has_value());
  EXPECT_TRUE(*d3.workload.set_active);
  EXPECT_EQ(d3.status.phase, "Queued");
  EXPECT_TRUE(d3.create_pods.empty());
}

// See Note [Who deactivates]: a Workload Kueue deactivated (requeued too often) or an administrator
// did is not made active again behind their back; the job waits and says why.
TEST(KueueDecide, AWorkloadSomeoneElseDeactivatedStaysInactive) {
  JobView j = queued_job(2);
  j.status.phase = "Queued";
  auto wl = workload(j, {cond("QuotaReserved", "False", "Pending", ""),
                         cond("Evicted", "True", "Deactivated",
                              "The workload is deactivated due to exceeding the maximum number of re-queuing retries")});
  wl.active = false;
  auto d = decide(observed(j, wl));
  EXPECT_FALSE(d.workload.set_active.has_value());
  EXPECT_EQ(d.status.phase, "Queued");
  EXPECT_EQ(d.status.condition("Queued")->reason, "Inactive");
  EXPECT_NE(d.status.condition("Queued")->message.find("re-queuing retries"), std::string::npos)
      << d.status.condition("Queued")->message;
  EXPECT_TRUE(d.create_pods.empty());
}

TEST(KueueDecide, WithoutKueueAQueuedJobWaitsAndSaysWhy) {
  auto in = observed(queued_job(2), std::nullopt);
  in.kueue_served = false;
  auto d = decide(in);
  EXPECT_FALSE(d.workload.create);
  EXPECT_TRUE(d.create_pods.empty());
  EXPECT_EQ(d.status.phase, "Queued");
  EXPECT_EQ(d.status.condition("Queued")->reason, "KueueNotInstalled");
  EXPECT_NE(d.status.condition("Queued")->message.find("LocalQueue team-a"), std::string::npos);
}

TEST(KueueDecide, AJobWithoutAQueueIgnoresKueue) {
  JobView j = queued_job(2);
  j.queue_label.clear();
  auto d = decide(observed(j, std::nullopt));
  EXPECT_FALSE(d.workload.any());
  EXPECT_EQ(d.create_pods.size(), 2u);
  EXPECT_EQ(d.status.condition("Queued"), nullptr);
  EXPECT_TRUE(d.status.queue.empty());
}

// --- The Workload written ---------------------------------------------------------------------

TEST(KueueWorkload, OnePodSetOfThePodsOwnTemplateWithNoSecret) {
  JobView j = queued_job(4);
  j.kueue_priority_class = "high";
  AgentInjection agent;
  agent.image = "lockstep/agent:1";
  json wl = workload_manifest(j, agent, 1000);
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["metadata"]["name"], workload_name(j));
  EXPECT_LE(workload_name(j).size(), 63u);
  EXPECT_EQ(wl["metadata"]["finalizers"], json({kKueueFinalizer}));
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(wl["metadata"]["labels"][lockstep::contract::kLabelJobName], "tj");
  EXPECT_EQ(wl["spec"]["queueName"], "team-a");
  EXPECT_EQ(wl["spec"]["active"], true);
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["kind"], "WorkloadPriorityClass");
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["name"], "high");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 1u);
  const json& ps = wl["spec"]["podSets"][0];
  EXPECT_EQ(ps["name"], kWorkloadPodSet);
  EXPECT_EQ(ps["count"], 4);
  const json& spec = ps["template"]["spec"];
  EXPECT_EQ(spec["containers"][0]["resources"]["requests"]["cpu"], "1");
  ASSERT_TRUE(spec.contains("initContainers")) << "the agent's init container is part of what the pods request";
  EXPECT_EQ(spec["initContainers"][0]["resources"]["requests"], json({{"cpu", "10m"}}))
      << "only what the trainer container requests: a CPU-only ClusterQueue admits it";
  EXPECT_FALSE(spec.contains("hostname"));
  const std::string text = wl.dump();
  EXPECT_EQ(text.find(lockstep::contract::kBarrierSecret), std::string::npos) << "no secret in a Workload";
  EXPECT_EQ(text.find(lockstep::contract::kLabelNodeRank), std::string::npos);
  EXPECT_FALSE(ps["template"]["metadata"]["labels"].contains(lockstep::contract::kLabelKueueQueue));

  j.kueue_priority_class.clear();
  j.priority_class_name = "system-high";
  json pc = workload_manifest(j, agent, std::nullopt);
  EXPECT_EQ(pc["spec"]["priorityClassRef"]["kind"], "PriorityClass");
  EXPECT_FALSE(pc["spec"].contains("priority"));
  j.suspend = true;
  json suspended = workload_manifest(j, agent, std::nullopt);
  EXPECT_EQ(suspended["spec"]["active"], false);
  EXPECT_EQ(suspended["metadata"]["annotations"][kAnnotationSuspended], "true");
}

TEST(KueueWorkload, TheAgentInitContainerRequestsNoMoreThanTheTrainer) {
  JobView j = queued_job(1);
  AgentInjection agent;
  agent.image = "a";
  auto init_of = [&](const json& resources) {
    j.tmpl = json{{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", "i"}, {"resources", resources}}})}}}};
    return pod_manifest(j, 0, 0, agent)["spec"]["initContainers"][0]["resources"];
  };
  EXPECT_EQ(init_of(json::object()), json::object());
  EXPECT_EQ(init_of({{"requests", {{"cpu", "4"}, {"memory", "8Gi"}, {"nvidia.com/gpu", 8}}}}),
            json({{"requests", {{"cpu", "10m"}, {"memory", "16Mi"}}}}));
  EXPECT_EQ(init_of({{"requests", {{"cpu", "5m"}}}, {"limits", {{"cpu", "100m"}, {"memory", "32Mi"}}}}),
            json({{"requests", {{"cpu", "5m"}}}, {"limits", {{"cpu", "100m"}, {"memory", "32Mi"}}}}));
  EXPECT_EQ(init_of({{"limits", {{"cpu", "2"}}}}), json({{"limits", {{"cpu", "500m"}}}}));
}

TEST(KueueWorkload, AnAdmittedPodGetsItsFlavorsNodeLabelsTolerationsAndUpdates) {
  JobView j = queued_job(2);
  WorkloadView wl = admitted(j);
  wl.flavors = {"a100", "spot"};
  wl.updates.node_selector = {{"topology/block", "b1"}};
  wl.updates.labels = {{"extra", "1"}, {lockstep::contract::kLabelJobName, "not-this"}};
  FlavorView a100{"a100", {{"gpu", "a100"}}, json::array({{{"key", "gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})};
  FlavorView spot{"spot", {{"lifecycle", "spot"}}, json::array()};
  json p = pod_manifest(j, 1, 0);
  apply_admission(p, wl, {a100, spot});
  EXPECT_EQ(p["spec"]["nodeSelector"], json({{"gpu", "a100"}, {"lifecycle", "spot"}, {"topology/block", "b1"}}));
  EXPECT_EQ(p["spec"]["tolerations"].size(), 1u);
  EXPECT_EQ(p["metadata"]["labels"]["extra"], "1");
  EXPECT_EQ(p["metadata"]["labels"][lockstep::contract::kLabelJobName], "tj") << "the job's own labels stay";
}

// --- What the operator reads of a Workload ---------------------------------------------------

TEST(KueueWorkload, ReadsTheAdmissionAndBoundsWhatItKeeps) {
  json obj = {
      {"metadata", {{"name", "w"}, {"namespace", "ns"}, {"uid", "u"}, {"resourceVersion", "7"},
                    {"labels", {{lockstep::contract::kLabelJobName, "tj"}}},
                    {"finalizers", json::array({"other", kKueueFinalizer})},
                    {"ownerReferences", json::array({{{"kind", "TrainingJob"}, {"uid", "uid-1"}, {"controller", true}}})}}},
      {"spec", {{"queueName", "team-a"}, {"active", false}}},
      {"status",
       {{"conditions", json::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"},
                                     {"message", std::string(100000, 'x')}},
                                    {{"type", "Admitted"}, {"status", "True"}}})},
        {"admission", {{"clusterQueue", "cq"},
                       {"podSetAssignments", json::array({{{"name", "node"}, {"flavors", {{"cpu", "f1"}, {"memory", "f1"},
                                                                                           {"nvidia.com/gpu", "f2"}}}}})}}},
        {"admissionChecks", json::array({{{"name", "prov"}, {"podSetUpdates", json::array({{{"name", "node"},
                                                                                            {"nodeSelector", {{"k", "v"}}}}})}}})}}}};
  WorkloadView w = WorkloadView::from_json(obj);
  EXPECT_EQ(w.owner_key(), "ns/tj");
  EXPECT_EQ(w.controller_uid, "uid-1");
  EXPECT_TRUE(w.has_finalizer);
  EXPECT_EQ(w.finalizer_index, 1);
  EXPECT_FALSE(w.active);
  EXPECT_TRUE(w.admitted());
  EXPECT_TRUE(w.has_admission);
  EXPECT_EQ(w.cluster_queue, "cq");
  EXPECT_EQ(w.flavors, (std::vector<std::string>{"f1", "f2"}));
  EXPECT_EQ(w.updates.node_selector.at("k"), "v");
  EXPECT_LE(w.condition("QuotaReserved")->c.message.size(), kMaxConditionMessage);
  EXPECT_EQ(w.condition("Admitted")->index, 1);
}

TEST(KueueWorkload, TheStatusPatchRewritesOnlyItsOwnConditionsAndIsConditional) {
  JobView j = queued_job(1);
  WorkloadView w = admitted(j, {cond("Evicted", "True", "Preempted")});
  json ops = workload_status_patch(w, {cond("QuotaReserved", "False", "Pending"), cond("Requeued", "True", "Preempted")},
                                   /*clear_admission=*/true);
  ASSERT_GE(ops.size(), 5u);
  EXPECT_EQ(ops[0], json({{"op", "test"}, {"path", "/metadata/uid"}, {"value", "wl-uid"}}));
  EXPECT_EQ(ops[1]["path"], "/metadata/resourceVersion");
  EXPECT_EQ(ops[1]["value"], "42");
  EXPECT_EQ(ops[2]["op"], "replace");
  EXPECT_EQ(ops[2]["path"], "/status/conditions/0");
  EXPECT_EQ(ops[2]["value"]["status"], "False");
  EXPECT_EQ(ops[3]["op"], "add");
  EXPECT_EQ(ops[3]["path"], "/status/conditions/-");
  EXPECT_EQ(ops.back(), json({{"op", "remove"}, {"path", "/status/admission"}}));
  // Unchanged status: the transition time stays.
  json same = workload_status_patch(w, {cond("Admitted", "True", "Admitted")}, false);
  EXPECT_EQ(same[2]["value"]["lastTransitionTime"], "2026-11-29T00:00:00Z");
  // No status at all yet: the list is added with it.
  WorkloadView bare = workload(j);
  bare.has_status = false;
  json first = workload_status_patch(bare, {cond("PodsReady", "False", "WaitForStart")}, false);
  EXPECT_EQ(first[2]["path"], "/status");
}

TEST(KueueWorkload, TheFinalizerIsRemovedOnlyWhereItWasSeen) {
  WorkloadView w = workload(queued_job(1));
  w.finalizer_index = 2;
  EXPECT_EQ(finalizer_removal_patch(w),
            json::parse(R"([{"op":"test","path":"/metadata/finalizers/2","value":"kueue.x-k8s.io/resource-in-use"},
                            {"op":"remove","path":"/metadata/finalizers/2"}])"));
}

TEST(KueueAgents, WorkersStartedOnlyForThisAttempt) {
  const std::string text =
      "lockstep_restart_attempt 2\nlockstep_worker_up{rank=\"0\",local_rank=\"0\"} 1\n";
  EXPECT_TRUE(parse_workers_started(text, 2));
  EXPECT_FALSE(parse_workers_started(text, 1));
  EXPECT_FALSE(parse_workers_started("lockstep_restart_attempt 2\nlockstep_worker_up{rank=\"0\"} 0\n", 2));
  EXPECT_FALSE(parse_workers_started("lockstep_worker_up{rank=\"0\"} 1\n", 0)) << "no attempt said: not this one";
}
