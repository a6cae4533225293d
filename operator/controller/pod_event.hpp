// A pod's JSON text read straight into the PodRecord the pod informer caches, from a list's
// item or a watch event alike.
//
// Note [Pod text]
// A pod as the API server sends it is 4 to 6 KB of JSON, most of it spec and managedFields, and
// the informer gets it again with every change; the cache keeps a few strings of it (Note [Lean
// caches] in kube/informer.hpp). So a pod is never built as a document: its text is read with
// simdjson's On-Demand API (kube/json_text.hpp), and the one reader here (read_pod in
// pod_event.cpp) takes what RawPod holds and steps over the rest. A field of a pod the operator
// starts to read is one edit there (and its place in RawPod), for lists and events alike.
#pragma once

#include <string>
#include <string_view>

#include "kube/informer.hpp"
#include "reconcile/job.hpp"

namespace lockstep::controller {

// A pod object's text into `out`, its resourceVersion into `resource_version` (optional).
// False when the text is not a JSON object.
bool raw_pod_from_text(std::string_view object, reconcile::RawPod& out, std::string* resource_version = nullptr);

// A list item: the pod's record, head.key and head.resource_version; false when not an object.
bool pod_from_text(std::string_view object, kube::EventHead& head, reconcile::PodRecord& out);

// A watch event's line: false when `line` is not JSON; head.type is empty when it is not an event.
bool pod_event_from_text(std::string_view line, kube::EventHead& head, reconcile::PodRecord& out);

}  // namespace lockstep::controller
