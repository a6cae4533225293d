// The informers' prunes (controller::child_prune) leave out only what the cached records
// never read: a pod, Service or PodGroup parsed pruned converts to exactly the record it
// converts to parsed whole, for pods as kubelets write them in every state decide() reads.
#include <gtest/gtest.h>

#include "controller/controller.hpp"
#include "controller/pod_event.hpp"
#include "kube/prune.hpp"
#include "reconcile/job.hpp"

using lockstep::kube::parse_pruned;
using lockstep::kube::PruneRoot;
using lockstep::reconcile::ChildRef;
using lockstep::reconcile::PodRecord;
using nlohmann::json;

namespace {

// A pod as the API server sends it, with the status a kubelet writes.
json kubelet_pod(const json& status) {
  json pod = json::parse(R"({
    "kind": "Pod", "apiVersion": "v1",
    "metadata": {
      "name": "train-1", "namespace": "team-a", "uid": "7f1c-pod", "resourceVersion": "4711",
      "creationTimestamp": "2026-11-24T10:00:00Z", "generation": 1,
      "labels": {"lockstep.dev/job-name": "train", "lockstep.dev/node-rank": "1",
                 "lockstep.dev/restart-attempt": "2", "app": "x"},
      "annotations": {"note": "a"},
      "ownerReferences": [{"apiVersion": "lockstep.dev/v1alpha1", "kind": "TrainingJob", "name": "train",
                           "uid": "job-uid", "controller": true, "blockOwnerDeletion": true}],
      "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    },
    "spec": {"nodeName": "node-7", "containers": [{"name": "trainer", "image": "lockstep/trainer:1"}],
             "volumes": [{"name": "ckpt", "emptyDir": {}}], "schedulerName": "default-scheduler",
             "tolerations": [
               {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
               {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
               {"key": "example.com/maintenance", "operator": "Equal", "value": "planned", "effect": "NoExecute"}]}
  })");
  pod["status"] = status;
  return pod;
}

json conditions(const std::string& ready) {
  return json::array({{{"type", "PodReadyToStartContainers"}, {"status", "True"}, {"lastProbeTime", nullptr},
                       {"lastTransitionTime", "2026-11-24T10:00:02Z"}},
                      {{"type", "Initialized"}, {"status", "True"}, {"lastTransitionTime", "2026-11-24T10:00:01Z"}},
                      {{"type", "Ready"}, {"status", ready}, {"lastTransitionTime", "2026-11-24T10:00:03Z"},
                       {"observedGeneration", 1}},
                      {{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", "2026-11-24T10:00:00Z"}}});
}

json container(const std::string& name, const json& state) {
  return {{"name", name},
          {"state", state},
          {"lastState", {{"terminated", {{"exitCode", 1}, {"reason", "Error"}}}}},
          {"ready", false},
          {"restartCount", 0},
          {"image", "lockstep/trainer:1"},
          {"imageID", "sha256:abc"},
          {"containerID", "containerd://123"},
          {"started", false},
          {"volumeMounts", json::array({{{"name", "ckpt"}, {"mountPath", "/ckpt"}}})},
          {"resources", {{"limits", {{"nvidia.com/gpu", "8"}}}}},
          {"user", {{"linux", {{"uid", 0}, {"gid", 0}}}}}};
}

json common(json status) {
  status.update({{"hostIP", "10.0.0.7"},
                 {"hostIPs", json::array({{{"ip", "10.0.0.7"}}})},
                 {"podIP", "10.1.7.3"},
                 {"podIPs", json::array({{{"ip", "10.1.7.3"}}})},
                 {"startTime", "2026-11-24T10:00:01Z"},
                 {"qosClass", "Guaranteed"}});
  return status;
}

std::vector<json> statuses() {
  return {
      json::object(),  // just created
      {{"phase", "Pending"},
       {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                                    {"message", "0/9 nodes are available: 9 Insufficient nvidia.com/gpu."}}})}},
      common({{"phase", "Pending"},
              {"conditions", conditions("False")},
              {"containerStatuses",
               json::array({container("trainer", {{"waiting", {{"reason", "ImagePullBackOff"},
                                                               {"message", "Back-off pulling image"}}}})})}}),
      common({{"phase", "Running"},
              {"conditions", conditions("True")},
              {"containerStatuses",
               json::array({container("sidecar", {{"running", {{"startedAt", "2026-11-24T10:00:02Z"}}}}),
                            container("trainer", {{"running", {{"startedAt", "2026-11-24T10:00:02Z"}}}})})}}),
      common({{"phase", "Failed"},
              {"reason", "Evicted"},
              {"conditions", conditions("False")},
              {"containerStatuses",
               json::array({container("trainer", {{"terminated", {{"exitCode", 137},
                                                                  {"reason", "OOMKilled"},
                                                                  {"message", "last words"},
                                                                  {"startedAt", "2026-11-24T10:00:02Z"},
                                                                  {"finishedAt", "2026-11-24T10:09:00Z"}}}})})}}),
      common({{"phase", "Succeeded"},
              {"conditions", conditions("False")},
              {"containerStatuses",
               json::array({container("other", {{"terminated", {{"exitCode", 3}, {"finishedAt", "2026-11-24T10:08:00Z"}}}}),
                            container("trainer", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"},
                                                                  {"finishedAt", "2026-11-24T10:09:00Z"}}}})})}}),
  };
}

}  // namespace

TEST(ChildPrune, APodParsedPrunedConvertsToTheRecordOfTheWholePod) {
  auto prune = lockstep::controller::child_prune(true);
  for (const auto& status : statuses()) {
    for (bool deleting : {false, true}) {
      json whole = kubelet_pod(status);
      if (deleting) {
        whole["metadata"]["deletionTimestamp"] = "2026-11-24T10:10:00Z";
        whole["metadata"]["deletionGracePeriodSeconds"] = 0;
      }
      std::string text = whole.dump();
      json pruned = parse_pruned(text, &prune, PruneRoot::Document);
      ASSERT_TRUE(pruned.is_object());
      EXPECT_TRUE(PodRecord::from_json(pruned) == PodRecord::from_json(whole)) << text;
      EXPECT_LT(pruned.dump().size(), text.size());
      // Of its spec, only the node and the tolerations are read (Note [Lost nodes]).
      EXPECT_EQ(pruned["spec"], json({{"nodeName", "node-7"}, {"tolerations", whole["spec"]["tolerations"]}}));
      // The informer still reads its key and version from what is left.
      EXPECT_EQ(pruned["metadata"]["resourceVersion"], "4711");
      EXPECT_EQ(pruned["metadata"]["namespace"], "team-a");
      // And it is read through a watch event or a list the same way.
      json event = parse_pruned("{\"type\":\"MODIFIED\",\"object\":" + text + "}", &prune, PruneRoot::WatchObject);
      EXPECT_EQ(event["object"], pruned);
    }
  }
  // A check that can fail: the record does read what the pruned parse keeps.
  json running = kubelet_pod(statuses()[3]);
  json failed = kubelet_pod(statuses()[4]);
  EXPECT_FALSE(PodRecord::from_json(parse_pruned(running.dump(), &prune, PruneRoot::Document)) ==
               PodRecord::from_json(parse_pruned(failed.dump(), &prune, PruneRoot::Document)));
  PodRecord record = PodRecord::from_json(parse_pruned(running.dump(), &prune, PruneRoot::Document));
  EXPECT_EQ(record.view.node_name, "node-7");
  ASSERT_EQ(record.view.tolerations.size(), 2u);  // the NoSchedule one cannot tolerate a NoExecute taint
  EXPECT_EQ(record.view.tolerations[0].seconds, 300);
  EXPECT_EQ(record.view.tolerations[1].value, "planned");
}

TEST(ChildPrune, AServiceOrPodGroupKeepsOnlyItsMetadata) {
  auto prune = lockstep::controller::child_prune(false);
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

// Note [Visited parsing]: the pod informer reads each watch event's text straight into the
// record; for every pod above, and for pods of odd shapes, that is the record of the whole
// pod parsed, with the event's type, key and version.
TEST(ChildPrune, APodEventReadFromItsTextGivesTheRecordOfTheWholePod) {
  auto prune = lockstep::controller::child_prune(true);
  std::vector<json> pods;
  for (const auto& status : statuses()) pods.push_back(kubelet_pod(status));
  json odd = kubelet_pod(statuses()[4]);
  odd["metadata"]["deletionTimestamp"] = nullptr;                         // present, though null
  odd["metadata"]["ownerReferences"].push_back("not an object");          // an element of another kind
  odd["metadata"]["ownerReferences"][0]["controller"] = "true";           // not a boolean
  odd["metadata"]["labels"]["lockstep.dev/node-rank"] = 3;                // not a string
  odd["status"]["phase"] = 7;                                             // not a string: Pending
  odd["status"]["conditions"].push_back({{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}});
  odd["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 3.9;  // truncated, as get<int>
  odd["status"]["containerStatuses"].push_back({{"name", "trainer"}, {"state", {{"waiting", json::array({1})}}}});
  pods.push_back(odd);
  json odd_spec = kubelet_pod(statuses()[3]);
  odd_spec["metadata"]["deletionTimestamp"] = "2026-11-24T10:10:00Z";
  odd_spec["metadata"]["deletionGracePeriodSeconds"] = 30.5;                 // a fraction
  odd_spec["spec"]["tolerations"][0]["tolerationSeconds"] = "300";           // not a number
  odd_spec["spec"]["tolerations"][1] = "Exists";                             // not an object
  odd_spec["spec"]["tolerations"][2]["tolerationSeconds"] = 1e300;           // out of any range
  odd_spec["spec"]["tolerations"].push_back({{"operator", 5}, {"effect", nullptr}});
  pods.push_back(odd_spec);
  json keyed = kubelet_pod(statuses()[3]);
  keyed["spec"]["tolerations"] = {{"*", {{"operator", "Exists"}}}};          // an object, not a list: none
  keyed["spec"]["nodeName"] = 7;                                              // not a string: unbound
  pods.push_back(keyed);
  json strange = kubelet_pod({{"phase", "Running"}, {"conditions", {{"Ready", {{"status", "True"}}}}},
                              {"containerStatuses", {{"name", "trainer"}, {"state", "running"}}}});
  strange["metadata"]["ownerReferences"] = {{"kind", "TrainingJob"}};  // an object, not a list: no owner
  pods.push_back(strange);
  for (const auto& pod : pods) {
    for (const char* type : {"ADDED", "MODIFIED", "DELETED"}) {
      std::string line = json{{"type", type}, {"object", pod}}.dump();
      lockstep::kube::EventHead head;
      PodRecord record;
      ASSERT_TRUE(lockstep::controller::pod_event_from_text(line, &prune, head, record)) << line;
      EXPECT_EQ(head.type, type);
      EXPECT_EQ(head.key, "team-a/train-1");
      EXPECT_EQ(head.resource_version, "4711");
      EXPECT_TRUE(record == PodRecord::from_json(pod)) << line;
      EXPECT_TRUE(record == PodRecord::from_json(parse_pruned(pod.dump(), &prune, PruneRoot::Document))) << line;
    }
  }
  // The shapes above do reach the record: the odd pod is Pending, its owner not a controller.
  PodRecord odd_record = PodRecord::from_json(odd);
  EXPECT_EQ(odd_record.view.phase, "Pending");
  EXPECT_TRUE(odd_record.ref.deleting);
  EXPECT_EQ(odd_record.ref.controller_uid, "");
  EXPECT_EQ(odd_record.view.exit_code, 3);
  EXPECT_EQ(odd_record.view.unschedulable_message, "no node fits the pod");
  PodRecord odd_spec_record = PodRecord::from_json(odd_spec);
  ASSERT_EQ(odd_spec_record.view.tolerations.size(), 4u);
  EXPECT_FALSE(odd_spec_record.view.tolerations[0].seconds.has_value());
  EXPECT_EQ(odd_spec_record.view.tolerations[2].seconds, 1000000000000000LL);
  EXPECT_FALSE(odd_spec_record.view.deleted_at_once);
  PodRecord keyed_record = PodRecord::from_json(keyed);
  EXPECT_TRUE(keyed_record.view.tolerations.empty());
  EXPECT_EQ(keyed_record.view.node_name, "");

  lockstep::kube::EventHead head;
  PodRecord record;
  EXPECT_TRUE(lockstep::controller::pod_event_from_text(
      R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9000"}}})", &prune, head, record));
  EXPECT_EQ(head.type, "BOOKMARK");
  EXPECT_EQ(head.resource_version, "9000");
  EXPECT_FALSE(lockstep::controller::pod_event_from_text(R"({"type":"MODIFIED","object":{"metadata":)", &prune,
                                                         head, record));
  EXPECT_EQ(head.type, "");
}
