// The pod informer's one reader of pods (Note [Pod text] in controller/pod_event.hpp), from a
// list item's text and a watch event's alike, against an independent reading of the parsed
// pod (reference_raw_pod below), for pods as kubelets write them in every state decide() reads
// and pods of odd shapes; a pod's text that is not UTF-8 is not read. The Service and PodGroup
// informers' prune: child_prune_test.cpp.
#include <gtest/gtest.h>

#include "controller/controller.hpp"
#include "controller/pod_event.hpp"
#include "kube/prune.hpp"
#include "lockstep/contract.hpp"
#include "pod_text.hpp"
#include "reconcile/job.hpp"

using lockstep::reconcile::PodRecord;
using lockstep::reconcile::RawPod;
using lockstep::test::kubelet_pod;  // pod_text.hpp
using nlohmann::json;

namespace {

// The reference: what RawPod holds, read from the parsed pod with nlohmann's accessors, as the
// operator read pods before Note [Pod text]. Strings only where strings, numbers where numbers,
// a field's presence where presence counts.
template <class T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  const json& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) return v.is_string() ? v.get<std::string>() : fallback;
  else if constexpr (std::is_same_v<T, bool>) return v.is_boolean() ? v.get<bool>() : fallback;
  else return v.is_number() ? v.get<T>() : fallback;
}
const json& child(const json& j, const char* key) {
  static const json kEmpty = json::object();
  return j.is_object() && j.contains(key) && j[key].is_object() ? j[key] : kEmpty;
}

RawPod reference_raw_pod(const json& obj) {
  namespace c = lockstep::contract;
  RawPod r;
  const json& md = child(obj, "metadata");
  r.ns = get_or<std::string>(md, "namespace", "");
  r.name = get_or<std::string>(md, "name", "");
  r.uid = get_or<std::string>(md, "uid", "");
  r.deleting = md.contains("deletionTimestamp");
  r.deletion_timestamp = get_or<std::string>(md, "deletionTimestamp", "");
  if (md.contains("deletionGracePeriodSeconds") && md["deletionGracePeriodSeconds"].is_number())
    r.deletion_grace = md["deletionGracePeriodSeconds"].get<double>();
  if (md.contains("finalizers") && md["finalizers"].is_array())
    for (const auto& f : md["finalizers"])
      if (f.is_string()) r.finalizers.push_back(f.get<std::string>());
  const json& labels = child(md, "labels");
  r.job_label = get_or<std::string>(labels, c::kLabelJobName, "");
  r.rank_label = get_or<std::string>(labels, c::kLabelNodeRank, "");
  r.attempt_label = get_or<std::string>(labels, c::kLabelRestartAttempt, "");
  if (md.contains("ownerReferences") && md["ownerReferences"].is_array())
    for (const auto& o : md["ownerReferences"])
      r.owners.push_back({get_or<std::string>(o, "kind", ""), get_or<std::string>(o, "uid", ""), get_or(o, "controller", false)});
  const json& spec = child(obj, "spec");
  r.node_name = get_or<std::string>(spec, "nodeName", "");
  if (spec.contains("tolerations") && spec["tolerations"].is_array())
    for (const auto& t : spec["tolerations"]) {
      RawPod::Toleration k{get_or<std::string>(t, "key", ""), get_or<std::string>(t, "operator", ""),
                           get_or<std::string>(t, "value", ""), get_or<std::string>(t, "effect", ""), std::nullopt};
      if (t.is_object() && t.contains("tolerationSeconds") && t["tolerationSeconds"].is_number())
        k.seconds = t["tolerationSeconds"].get<double>();
      r.tolerations.push_back(std::move(k));
    }
  const json& st = child(obj, "status");
  if (st.contains("phase") && st["phase"].is_string()) r.phase = st["phase"].get<std::string>();
  r.reason = get_or<std::string>(st, "reason", "");
  r.pod_ip = get_or<std::string>(st, "podIP", "");
  if (st.contains("conditions") && st["conditions"].is_array())
    for (const auto& cond : st["conditions"]) {
      RawPod::Condition k{get_or<std::string>(cond, "type", ""), get_or<std::string>(cond, "status", ""),
                          get_or<std::string>(cond, "reason", ""), std::nullopt};
      if (cond.is_object() && cond.contains("message") && cond["message"].is_string())
        k.message = cond["message"].get<std::string>();
      r.conditions.push_back(std::move(k));
    }
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    if (!st.contains(list) || !st[list].is_array()) continue;
    for (const auto& cs : st[list]) {
      RawPod::Container k;
      k.init = list[0] == 'i';
      k.name = get_or<std::string>(cs, "name", "");
      const json& waiting = child(child(cs, "state"), "waiting");
      k.waiting = !waiting.empty();
      k.waiting_reason = get_or<std::string>(waiting, "reason", "");
      k.waiting_message = get_or<std::string>(waiting, "message", "");
      const json& term = child(child(cs, "state"), "terminated");
      k.terminated = !term.empty();
      k.exit_code = term.contains("exitCode") && term["exitCode"].is_number() ? term["exitCode"].get<int>() : -1;
      k.terminated_reason = get_or<std::string>(term, "reason", "");
      k.finished_at = get_or<std::string>(term, "finishedAt", "");
      k.terminated_message = get_or<std::string>(term, "message", "");
      r.containers.push_back(std::move(k));
    }
  }
  return r;
}

PodRecord reference(const json& pod) { return PodRecord::from_raw(reference_raw_pod(pod)); }

// The operator's reading of the pod's text, as a list item.
PodRecord read(const json& pod) {
  lockstep::kube::EventHead head;
  PodRecord r;
  EXPECT_TRUE(lockstep::controller::pod_from_text(pod.dump(), head, r)) << pod.dump();
  return r;
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

TEST(PodText, AListItemGivesTheRecordOfTheWholePodAndItsKeyAndVersion) {
  for (const auto& status : statuses()) {
    for (bool deleting : {false, true}) {
      json whole = kubelet_pod(status);
      if (deleting) {
        whole["metadata"]["deletionTimestamp"] = "2026-11-24T10:10:00Z";
        whole["metadata"]["deletionGracePeriodSeconds"] = 0;
      }
      lockstep::kube::EventHead head;
      PodRecord record;
      ASSERT_TRUE(lockstep::controller::pod_from_text(whole.dump(), head, record)) << whole.dump();
      EXPECT_TRUE(record == reference(whole)) << whole.dump();
      EXPECT_EQ(head.key, "team-a/train-1");
      EXPECT_EQ(head.resource_version, "4711");
      // Pretty-printed text (a list's items as some servers indent them) reads the same.
      PodRecord indented;
      ASSERT_TRUE(lockstep::controller::pod_from_text(whole.dump(2), head, indented));
      EXPECT_TRUE(indented == record);
    }
  }
  // A check that can fail: the record does read what the text holds.
  json running = kubelet_pod(statuses()[3]);
  json failed = kubelet_pod(statuses()[4]);
  EXPECT_FALSE(read(running) == read(failed));
  PodRecord record = read(running);
  EXPECT_EQ(record.view.node_name, "node-7");
  ASSERT_EQ(record.view.tolerations.size(), 2u);  // the NoSchedule one cannot tolerate a NoExecute taint
  EXPECT_EQ(record.view.tolerations[0].seconds, 300);
  EXPECT_EQ(record.view.tolerations[1].value, "planned");
  // Text that is not a pod object is refused, not read as an empty pod.
  lockstep::kube::EventHead head;
  for (const char* bad : {"", "[]", "\"pod\"", "{\"metadata\": {\"name\": \"a\"}", "{\"metadata\": {}} trailing"})
    EXPECT_FALSE(lockstep::controller::pod_from_text(bad, head, record)) << bad;
}

// See Note [Pod text]: the pod informer reads each watch event's text straight into the record;
// for every pod above, and for pods of odd shapes, that is the reference's record of the whole
// pod, with the event's type, key and version.
TEST(PodText, AWatchEventGivesTheRecordOfTheWholePod) {
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
      ASSERT_TRUE(lockstep::controller::pod_event_from_text(line, head, record)) << line;
      EXPECT_EQ(head.type, type);
      EXPECT_EQ(head.key, "team-a/train-1");
      EXPECT_EQ(head.resource_version, "4711");
      EXPECT_TRUE(record == reference(pod)) << line;
      EXPECT_TRUE(record == read(pod)) << line;
    }
  }
  // The shapes above do reach the record: the odd pod is Pending, its owner not a controller.
  PodRecord odd_record = read(odd);
  EXPECT_EQ(odd_record.view.phase, "Pending");
  EXPECT_TRUE(odd_record.view.deleting);
  EXPECT_EQ(odd_record.controller_uid, "");
  EXPECT_EQ(odd_record.view.exit_code, 3);
  EXPECT_EQ(odd_record.view.unschedulable_message, "no node fits the pod");
  PodRecord odd_spec_record = read(odd_spec);
  ASSERT_EQ(odd_spec_record.view.tolerations.size(), 4u);
  EXPECT_FALSE(odd_spec_record.view.tolerations[0].seconds.has_value());
  EXPECT_EQ(odd_spec_record.view.tolerations[2].seconds, 1000000000000000LL);
  EXPECT_FALSE(odd_spec_record.view.deleted_at_once);
  PodRecord keyed_record = read(keyed);
  EXPECT_TRUE(keyed_record.view.tolerations.empty());
  EXPECT_EQ(keyed_record.view.node_name, "");

  lockstep::kube::EventHead head;
  PodRecord record;
  EXPECT_TRUE(lockstep::controller::pod_event_from_text(
      R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9000"}}})", head, record));
  EXPECT_EQ(head.type, "BOOKMARK");
  EXPECT_EQ(head.resource_version, "9000");
  EXPECT_FALSE(lockstep::controller::pod_event_from_text(R"({"type":"MODIFIED","object":{"metadata":)", head, record));
  EXPECT_EQ(head.type, "");
}

// See Note [UTF-8 text]: a pod's text that is not UTF-8 is not read at all (the reader of pods
// refuses the document), so nothing of it reaches a cache, a status or an Event unchecked.
TEST(PodRecord, APodTextThatIsNotUtf8IsNotRead) {
  const std::string text = R"({"metadata": {"name": "tj-0", "namespace": "ns"}, "status": {"phase": "Failed",
      "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 1, "message": "bad )"
                           "\xC3\x28" R"("}}}]}})";
  lockstep::reconcile::RawPod raw;
  EXPECT_FALSE(lockstep::controller::raw_pod_from_text(text, raw));
  std::string fixed = text;
  fixed.replace(fixed.find("\xC3\x28"), 2, "\xC3\xA9");
  ASSERT_TRUE(lockstep::controller::raw_pod_from_text(fixed, raw)) << "the same document, valid";
  ASSERT_EQ(raw.containers.size(), 1u);
  EXPECT_EQ(raw.containers[0].terminated_message, "bad \xC3\xA9");
}
