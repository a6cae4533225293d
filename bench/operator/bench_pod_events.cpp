// The pod informer's cost per watch event, in one process: a pod's MODIFIED event as the API
// server sends it (4 to 5 KB: spec, managedFields, a kubelet's status), three ways:
// json::parse of the whole event (the baseline: a document built, not yet even converted),
// the pruned parse of it (Note [Pruned parsing], simdjson On-Demand building the kept part as
// nlohmann::json, what the other informers do), and the pod read straight from its text into
// the record the cache keeps (Note [Pod text], what the pod informer does). Prints microseconds
// per event, the ratios, and the rounds: three, alternating.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "controller/controller.hpp"
#include "controller/pod_event.hpp"
#include "kube/prune.hpp"
#include "reconcile/job.hpp"

using nlohmann::json;
using lockstep::reconcile::PodRecord;

namespace {

std::string event_text() {
  json containers = json::array();
  json statuses = json::array();
  for (const char* name : {"trainer", "sidecar"}) {
    containers.push_back({{"name", name},
                          {"image", "registry.example.com/team/lockstep-trainer:2026.11.24"},
                          {"command", {"lockstep-agent"}},
                          {"args", {"--nproc-per-node=8", "--", "lockstep-trainer", "--model=gpt-small", "--steps=20000"}},
                          {"env", json::array()},
                          {"resources", {{"limits", {{"nvidia.com/gpu", "8"}, {"memory", "512Gi"}}}}},
                          {"volumeMounts", {{{"name", "ckpt"}, {"mountPath", "/ckpt"}}, {{"name", "dshm"}, {"mountPath", "/dev/shm"}}}},
                          {"terminationMessagePolicy", "FallbackToLogsOnError"}});
    for (const char* e : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCKSTEP_JOB", "LOCKSTEP_RUN_ID"})
      containers.back()["env"].push_back({{"name", e}, {"value", std::string(e) + "-value-0123456789"}});
    statuses.push_back({{"name", name},
                        {"state", {{"running", {{"startedAt", "2026-11-24T10:00:02Z"}}}}},
                        {"lastState", json::object()},
                        {"ready", true},
                        {"restartCount", 0},
                        {"image", "registry.example.com/team/lockstep-trainer:2026.11.24"},
                        {"imageID", "registry.example.com/team/lockstep-trainer@sha256:0123456789abcdef0123456789abcdef"},
                        {"containerID", "containerd://0123456789abcdef0123456789abcdef0123456789abcdef"},
                        {"started", true}});
  }
  json conditions = json::array();
  for (const char* t : {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"})
    conditions.push_back({{"type", t}, {"status", "True"}, {"lastProbeTime", nullptr},
                          {"lastTransitionTime", "2026-11-24T10:00:03Z"}});
  json managed = json::array();
  for (const char* m : {"lockstep-operator", "kube-scheduler", "kubelet"})
    managed.push_back({{"manager", m}, {"operation", "Update"}, {"apiVersion", "v1"}, {"time", "2026-11-24T10:00:03Z"},
                       {"fieldsType", "FieldsV1"},
                       {"fieldsV1", {{"f:status", {{"f:conditions", json::object()}, {"f:containerStatuses", json::object()},
                                                   {"f:podIP", json::object()}, {"f:phase", json::object()}}}}}});
  json pod = {{"kind", "Pod"},
              {"apiVersion", "v1"},
              {"metadata",
               {{"name", "train-3"},
                {"namespace", "team-a"},
                {"uid", "0b7e4a52-5c5f-4b8e-9d55-1b0c7f3f6a11"},
                {"resourceVersion", "123456"},
                {"creationTimestamp", "2026-11-24T10:00:00Z"},
                {"labels", {{"lockstep.dev/job-name", "train"}, {"lockstep.dev/node-rank", "3"},
                            {"lockstep.dev/restart-attempt", "0"}, {"app.kubernetes.io/name", "lockstep"}}},
                {"annotations", {{"lockstep.dev/spec-hash", "8f3a9c"}}},
                {"ownerReferences", {{{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"name", "train"},
                                      {"uid", "5d0c1b8e-1111-2222-3333-444455556666"}, {"controller", true},
                                      {"blockOwnerDeletion", true}}}},
                {"managedFields", managed}}},
              {"spec", {{"containers", containers}, {"nodeName", "node-0042"}, {"subdomain", "train"},
                        {"hostname", "train-3"}, {"restartPolicy", "Never"}, {"schedulerName", "scheduler-plugins"}}},
              {"status", {{"phase", "Running"},
                          {"conditions", conditions},
                          {"hostIP", "10.0.0.42"},
                          {"hostIPs", {{{"ip", "10.0.0.42"}}}},
                          {"podIP", "10.1.42.3"},
                          {"podIPs", {{{"ip", "10.1.42.3"}}}},
                          {"startTime", "2026-11-24T10:00:01Z"},
                          {"containerStatuses", statuses},
                          {"qosClass", "Guaranteed"}}}};
  return json{{"type", "MODIFIED"}, {"object", pod}}.dump();
}

template <class F>
double micros_per_event(int n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 50000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: lockstep-bench-pod-events [EVENTS]  (default 50000)\n");
    return 2;
  }
  const std::string line = event_text();
  // What the pod informer's prune kept before pods were read from their text: the metadata
  // but managedFields and annotations, of the spec the node and tolerations, of the status
  // what PodRecord reads.
  const lockstep::kube::Prune prune{{{"metadata", "managedFields"}, {"metadata", "annotations"}, {"spec", "*"},
                                     {"status", "hostIPs"}, {"status", "podIPs"}, {"status", "qosClass"},
                                     {"status", "containerStatuses", "*", "image"},
                                     {"status", "containerStatuses", "*", "imageID"},
                                     {"status", "containerStatuses", "*", "containerID"}},
                                    false,
                                    {{"spec", "nodeName"}, {"spec", "tolerations"}}};
  PodRecord sink;
  volatile size_t keep = 0;
  auto whole = [&] {
    json e = json::parse(line);
    keep = keep + e["object"]["status"]["phase"].get_ref<const std::string&>().size();
  };
  auto pruned = [&] {
    json e = lockstep::kube::parse_pruned(line, &prune, lockstep::kube::PruneRoot::WatchObject);
    keep = keep + e["object"]["status"]["phase"].get_ref<const std::string&>().size();
  };
  auto text = [&] {
    lockstep::kube::EventHead head;
    lockstep::controller::pod_event_from_text(line, head, sink);
    keep = keep + sink.view.phase.size();
  };
  lockstep::kube::EventHead head;
  bool read = lockstep::controller::pod_event_from_text(line, head, sink) && head.type == "MODIFIED" &&
              head.key == "team-a/train-3" && head.resource_version == "123456" && sink.view.phase == "Running" &&
              sink.view.node_name == "node-0042" && sink.view.ip == "10.1.42.3" && sink.controller_uid.size() == 36;
  micros_per_event(n / 10, whole);  // warm-up
  micros_per_event(n / 10, pruned);
  micros_per_event(n / 10, text);
  std::printf("bench/operator pod events: one MODIFIED event of %zu bytes, %d times each per round, one thread\n",
              line.size(), n);
  double w = 1e300, p = 1e300, t = 1e300;
  for (int round = 1; round <= 3; ++round) {
    double rw = micros_per_event(n, whole), rp = micros_per_event(n, pruned), rt = micros_per_event(n, text);
    std::printf("  round %d: json::parse %.2f us, pruned parse %.2f us, pod read from its text %.2f us\n", round, rw, rp, rt);
    w = std::min(w, rw);
    p = std::min(p, rp);
    t = std::min(t, rt);
  }
  std::printf("  json::parse whole event:           %7.2f us per event (baseline; best of 3)\n", w);
  std::printf("  pruned parse (simdjson):           %7.2f us per event (%.2fx faster than the baseline)\n", p, w / p);
  std::printf("  pod read from its text (operator): %7.2f us per event (%.2fx faster than the baseline, %.2fx than pruned)\n",
              t, w / t, p / t);
  std::printf("  the record read: %s\n", read ? "as the event says" : "WRONG");
  return read ? 0 : 1;
}
