// A pod's watch event read straight from its text into the PodRecord the pod informer caches
// (Note [Visited parsing] in kube/prune.hpp): the same record PodRecord::from_json gives for the
// parsed object (child_prune_test checks both ways agree), without building the object.
#pragma once

#include <string_view>

#include "kube/informer.hpp"
#include "kube/prune.hpp"
#include "reconcile/job.hpp"

namespace lockstep::controller {

// False when `line` is not JSON; head.type is empty when it is not an event.
bool pod_event_from_text(std::string_view line, const kube::Prune* prune, kube::EventHead& head,
                         reconcile::PodRecord& out);

}  // namespace lockstep::controller
