// API paths of the resources the operator touches.
#pragma once

#include <string>

namespace lockstep::kube {

struct Resource {
  std::string group;    // "" for the core group
  std::string version;  // v1, v1alpha1, ...
  std::string plural;   // pods, trainingjobs, ...
  std::string kind;
  bool namespaced = true;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // /api/v1/namespaces/ns/pods[/name[/sub]]; an empty namespace lists across all namespaces.
  std::string path(const std::string& ns = "", const std::string& name = "", const std::string& sub = "") const {
    std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
    if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
    p += "/" + plural;
    if (!name.empty()) p += "/" + name;
    if (!sub.empty()) p += "/" + sub;
    return p;
  }
};

namespace resources {
inline const Resource kTrainingJobs{"lockstep.dev", "v1alpha1", "trainingjobs", "TrainingJob"};
inline const Resource kPods{"", "v1", "pods", "Pod"};
inline const Resource kServices{"", "v1", "services", "Service"};
inline const Resource kEvents{"", "v1", "events", "Event"};
inline const Resource kPodGroups{"scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"};
inline const Resource kWorkloads{"kueue.x-k8s.io", "v1beta2", "workloads", "Workload"};
inline const Resource kResourceFlavors{"kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", false};
inline const Resource kWorkloadPriorityClasses{"kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses",
                                               "WorkloadPriorityClass", false};
inline const Resource kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false};
inline const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", "Lease"};
inline const Resource kNodes{"", "v1", "nodes", "Node", false};
}  // namespace resources

}  // namespace lockstep::kube
