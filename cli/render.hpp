// `lockstep render FILE.yaml`: the objects the operator would create for a TrainingJob, from
// the operator's own code (operator/reconcile/manifests.hpp, kueue.hpp), as YAML, so a user can
// review what will run and a platform team can put it through its policy checks.
//
// Note [What render cannot know]
// The operator decides a few things from the cluster, not from the job; render says so, in a
// comment at the top of the object they touch, and takes flags where a value is needed:
//   * the job's uid (every ownerReference's): metadata.uid when the file has one (`kubectl get
//     tj NAME -o yaml | lockstep render -`), else all zeros;
//   * the barrier secret (LOCKSTEP_BARRIER_SECRET, Note [Barrier secret]): drawn for each gang
//     attempt, so the value printed is a placeholder of its form, never a secret;
//   * the PodGroup: created only where the coscheduling plugin's CRD is installed;
//   * a Kueue job's pods: created once the Workload is admitted, with the assigned flavors'
//     nodeSelector and tolerations added; the Workload's priority, from its class's value
//     (--priority, else none is printed);
//   * the operator's flags: --agent-image (default lockstep/agent:VERSION, as the operator's),
//     --agent-image-pull-policy, --operator-namespace, --monitoring-namespace and
//     --default-isolation, which render takes with the same names and defaults.
// Pods are rendered for the first attempt (restart-attempt 0), as a new job's are created.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace lockstep::cli {

struct RenderOptions {
  std::string agent_image;  // "" : no injection (the operator's --agent-image '')
  std::string agent_pull_policy = "IfNotPresent";
  std::string namespace_name;        // "" : metadata.namespace, else "default"
  std::string operator_namespace;    // the NetworkPolicy's peers (Note [Job isolation])
  std::string monitoring_namespace;
  std::string default_isolation = "None";  // for a job whose spec.isolation is unset
  std::optional<int> priority;             // the Workload's spec.priority
};
// The operator's default agent image: lockstep/agent:VERSION.
std::string default_agent_image();

struct RenderedObject {
  nlohmann::json object;
  std::string note;  // what the operator decides of it from the cluster ("" when nothing)
};

// The objects for `job` (validated: the CRD's defaults filled in), in the order the operator
// creates them: the Workload (a job that names a queue), the Service, the NetworkPolicy, the
// PodGroup, then one pod per node.
std::vector<RenderedObject> render_job(const nlohmann::json& job, const RenderOptions& options);

// `objects` as a YAML stream: each a document, its note as comments above it. Every string
// that YAML would read as something else (a number, a boolean, null) is quoted, so the stream
// reads back as the same JSON.
std::string render_yaml(const std::vector<RenderedObject>& objects);

// The command: `lockstep render [flags] FILE.yaml` ("-": standard input). Exit 0, 1 invalid
// job, 2 usage, 3 unreadable, 4 not YAML (docs/exit-codes.md).
int render_command(const std::vector<std::string>& args);

}  // namespace lockstep::cli
