// The objects the operator creates for a TrainingJob, built from the JobView alone.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reconcile/job.hpp"

namespace lockstep::reconcile {

// Stable DNS name of pod `index`: <job>-<index>.<job>.<ns>.svc (hostname + subdomain).
std::string pod_name(const JobView& job, int index);
std::string master_addr(const JobView& job);

// Pod <job>-<index> of attempt `attempt`: the template with the agent as the trainer
// container's entrypoint, the full LOCKSTEP_* and PET_* environment, labels, hostname and
// subdomain, restartPolicy Never, scheduling fields and a controller owner reference.
nlohmann::json pod_manifest(const JobView& job, int index, int attempt);
// Headless Service <job> (publishNotReadyAddresses: rendezvous happens before readiness).
nlohmann::json service_manifest(const JobView& job);
// PodGroup <job> with minMember = nodes, for the coscheduling plugin.
nlohmann::json podgroup_manifest(const JobView& job);
// A core/v1 Event about the job.
nlohmann::json event_manifest(const JobView& job, const std::string& type, const std::string& reason,
                              const std::string& message, const std::string& now, const std::string& component);

nlohmann::json owner_reference(const JobView& job);

}  // namespace lockstep::reconcile
