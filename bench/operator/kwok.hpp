// KWOK for the benchmarks of bench/operator (bench_scale, bench_pod_bytes): fake Nodes and the
// Stages that play their kubelet, KWOK started against the local control plane until every
// node is Ready. Built from the Go module proxy by scripts/setup.sh (LOCKSTEP_KWOK_BIN).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench_util.hpp"
#include "control_plane.hpp"
#include "kube/client.hpp"
#include "lockstep/process.hpp"

namespace lockstep::bench::kwok {

using json = nlohmann::json;

// A pod with this label stays Running (the Succeeded Stage skips it). No dots or slashes:
// KWOK's selector reads it as .metadata.labels.<key>.
inline constexpr const char* kHoldLabel = "lockstep_bench_hold";
// The annotation of the Nodes this KWOK manages (--manage-nodes-with-annotation-selector).
inline constexpr const char* kNodeAnnotation = "kwok.x-k8s.io/node";

// The kwok binary: LOCKSTEP_KWOK_BIN, else where scripts/setup.sh builds it.
inline std::string binary() {
  const char* env = std::getenv("LOCKSTEP_KWOK_BIN");
  return env && *env ? std::string(env) : cache_dir() + "/kwok-" LOCKSTEP_KWOK_VERSION "/bin/kwok";
}

// The Stages of these benchmarks (KWOK's own kustomize/stage/ ones play a general kubelet;
// these do only what the benchmarks need): a Node becomes Ready; a bound pod becomes Running
// (no IP: nothing listens); a Running pod without the hold label becomes Succeeded with exit
// code 0 after `succeed_after`. A Failed pod matches none, so a storm's failures stay as the
// benchmark wrote them. A pod being deleted is removed by bench_scale's Reaper, not by a Stage.
inline std::string stages(std::chrono::milliseconds succeed_after) {
  std::ostringstream y;
  y << R"(apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: bench-node-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select(.type == "Ready") | .status', operator: NotIn, values: ["True"]}
  next:
    statusTemplate: |
      conditions:
      - {type: Ready, status: "True", reason: KubeletReady, message: kwok, lastHeartbeatTime: {{ Now | Quote }}, lastTransitionTime: {{ Now | Quote }}}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: bench-pod-running}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Pending]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: true, started: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: bench-pod-succeeded}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Running]}
    - {key: .metadata.labels.)"
    << kHoldLabel << R"(, operator: DoesNotExist}
  delay: {durationMilliseconds: )"
    << succeed_after.count() << R"(}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      conditions:
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: false, started: false, restartCount: 0, state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
      {{ end }}
)";
  return y.str();
}

// `nodes` fake Nodes kwok-node-0..N-1 (32 CPUs, 256 GiB, 110 pods each) for KWOK to manage.
inline void create_nodes(lockstep::kube::Client& client, int nodes) {
  std::atomic<int> node_errors{0};
  bench::parallel(nodes, 16, [&](int i) {
    json alloc = {{"cpu", "32"}, {"memory", "256Gi"}, {"pods", "110"}};
    json node = {{"apiVersion", "v1"}, {"kind", "Node"},
                 {"metadata", {{"name", "kwok-node-" + std::to_string(i)}, {"annotations", {{kNodeAnnotation, "fake"}}},
                               {"labels", {{"type", "kwok"}, {"kubernetes.io/hostname", "kwok-node-" + std::to_string(i)}}}}},
                 {"status", {{"allocatable", alloc}, {"capacity", alloc}}}};
    if (!client.create("/api/v1/nodes", node).ok()) ++node_errors;
    // Admission taints a new node not-ready; the node lifecycle controller, not run here, would
    // lift it once KWOK reports the node Ready.
    else if (!client.patch("/api/v1/nodes/" + node["metadata"]["name"].get<std::string>(), {{"spec", {{"taints", nullptr}}}}).ok())
      ++node_errors;
  });
  if (node_errors) throw std::runtime_error(std::to_string(node_errors) + " nodes could not be created");
}

// KWOK with `stages_yaml` (its log and config in the control plane's directory), returned once
// it reports `nodes` nodes Ready; throws when it exits, on Ctrl-C, or after 300 s.
inline lockstep::Process start(const std::string& bin, const lockstep::test::ControlPlane& cp, const std::string& stages_yaml,
                               int nodes, lockstep::kube::Client& client) {
  using namespace std::chrono_literals;
  const std::string dir = cp.dir();
  std::ofstream(dir + "/kwok.yaml") << stages_yaml;
  lockstep::SpawnOptions so;
  so.argv = {bin, "--kubeconfig", cp.kubeconfig(), "--config", dir + "/kwok.yaml", "--manage-all-nodes=false",
             "--manage-nodes-with-annotation-selector=" + std::string(kNodeAnnotation) + "=fake",
             "--server-address", "127.0.0.1:" + std::to_string(lockstep::free_loopback_port()),
             "--node-lease-duration-seconds", "3600"};  // no node controller here reads leases
  so.env = {{"HOME", dir}};                             // no ~/.kwok/kwok.yaml of this machine's
  so.output_path = dir + "/kwok.log";
  so.new_process_group = true;  // Ctrl-C reaches the benchmark, which stops everything in order
  lockstep::Process kwok = lockstep::Process::spawn(so);
  const auto t0 = std::chrono::steady_clock::now();
  for (int ready = 0; ready < nodes;) {
    if (g_stop || !kwok.running())
      throw std::runtime_error(g_stop ? "interrupted" : "kwok exited: " + lockstep::test::tail_file(dir + "/kwok.log"));
    if (std::chrono::steady_clock::now() - t0 > 300s) throw std::runtime_error("nodes not Ready within 300 s: " + std::to_string(ready));
    std::this_thread::sleep_for(1s);
    auto r = client.get("/api/v1/nodes");
    ready = 0;
    for (const auto& n : r.body["items"])
      for (const auto& c : n["status"].value("conditions", json::array()))
        ready += c.value("type", "") == "Ready" && c.value("status", "") == "True";
  }
  return kwok;
}

}  // namespace lockstep::bench::kwok
