// A pod a test builds as JSON, read the way the operator reads every pod: from its text
// (Note [Pod text] in operator/controller/pod_event.hpp).
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

}  // namespace lockstep::test
