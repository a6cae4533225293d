// A pod a test builds as JSON, read the way the operator reads every pod: from its text
// (Note [Pod text] in operator/controller/pod_event.hpp); and a whole pod as the API server sends it.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "controller/pod_event.hpp"
#include "reconcile/job.hpp"

namespace lockstep::test {

inline reconcile::RawPod raw_pod(const nlohmann::json& pod) {
  reconcile::RawPod raw;
  if (!controller::raw_pod_from_text(pod.dump(), raw)) throw std::invalid_argument("not a pod object: " + pod.dump());
  return raw;
}

// What the pod informer caches of the pod (messages bounded), and the view before that bound.
inline reconcile::PodRecord pod_record(const nlohmann::json& pod) { return reconcile::PodRecord::from_raw(raw_pod(pod)); }
inline reconcile::PodView pod_view(const nlohmann::json& pod) { return reconcile::PodView::from_raw(raw_pod(pod)); }

// A pod as the API server sends it, with the status a kubelet writes.
inline nlohmann::json kubelet_pod(const nlohmann::json& status) {
  nlohmann::json pod = nlohmann::json::parse(R"({
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

}  // namespace lockstep::test
