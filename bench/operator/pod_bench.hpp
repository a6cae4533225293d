// The operator's pod as bench/operator's pod benchmarks create it (bench_pod_bytes.cpp,
// bench_pod_proto.cpp): an 8-node job's pod made by lockstep::reconcile::pod_manifest, created
// against the local control plane and read back as the server stores it.
#pragma once

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "control_plane.hpp"
#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube/rest_config.hpp"
#include "lockstep/process.hpp"
#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"

namespace lockstep::bench::pods {

// An 8-node job as examples/ddp.yaml writes one (its template: an image, CPU and memory).
inline lockstep::reconcile::JobView bench_job() {
  using json = nlohmann::json;
  json job = {{"metadata", {{"name", "tiny-ddp"}, {"namespace", "bench"}, {"uid", "6f1c1f7e-0d7a-4e55-9b1e-3c1a2b3c4d5e"}}},
              {"spec",
               {{"nodes", 8},
                {"procsPerNode", 8},
                {"strategy", "DDP"},
                {"checkpoint", {{"path", "/ckpt"}, {"everySteps", 100}}},
                {"template",
                 {{"spec",
                   {{"containers",
                     json::array({{{"name", "trainer"},
                                   {"image", "lockstep/trainer:0.1.0"},
                                   {"resources", {{"requests", {{"cpu", "500m"}, {"memory", "2Gi"}}},
                                                  {"limits", {{"memory", "4Gi"}}}}}}})}}}}},
                {"trainer", {{"command", json::array({"lockstep-trainer"})},
                             {"args", json::array({"--model=tiny", "--device=cpu", "--steps=200"})}}}}}};
  return lockstep::reconcile::JobView::from_json(job);
}

inline std::string random_secret() {
  std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 64; ++i) s += "0123456789abcdef"[rng() % 16];
  return s;
}

// Pod `index` of the job in namespace `ns`, with the agent injected or not.
inline nlohmann::json pod_of(const lockstep::reconcile::JobView& view, int index, bool inject, const std::string& ns) {
  lockstep::reconcile::AgentInjection agent;
  if (inject) agent.image = std::string("lockstep/agent:") + LOCKSTEP_VERSION;
  nlohmann::json pod = lockstep::reconcile::pod_manifest(view, index, 0, agent, random_secret());
  pod["metadata"]["namespace"] = ns;
  return pod;
}

struct Stored {
  size_t bytes = 0, without_managed = 0;
  nlohmann::json object;
};

// Pod `name` of `ns` as the server returns it, and its size with and without managedFields.
inline std::optional<Stored> read_back(lockstep::kube::Client& client, const std::string& ns, const std::string& name) {
  auto got = client.get(lockstep::kube::resources::kPods.path(ns, name));
  if (!got.ok()) return std::nullopt;
  Stored s;
  s.object = got.body;
  s.bytes = got.body.dump().size();
  nlohmann::json plain = got.body;
  plain["metadata"].erase("managedFields");
  s.without_managed = plain.dump().size();
  return s;
}

// Creates `pod` and reads it back: its size as the server returns it.
inline std::optional<Stored> store(lockstep::kube::Client& client, const std::string& ns, nlohmann::json pod,
                                   std::string* error = nullptr) {
  auto r = client.create(lockstep::kube::resources::kPods.path(ns), pod);
  if (!r.ok()) {
    if (error) *error = r.message();
    return std::nullopt;
  }
  return read_back(client, ns, pod["metadata"].value("name", ""));
}

inline void create_namespace(const lockstep::test::ControlPlane& cp, const std::string& ns) {
  lockstep::run_capture({"kubectl", "create", "namespace", ns}, {{"KUBECONFIG", cp.kubeconfig()}});
}

// The local control plane (etcd and kube-apiserver of the pinned release), with a progress line
// while it starts, and a client config for it that its own rate limit never holds back.
inline std::unique_ptr<lockstep::test::ControlPlane> start_control_plane() {
  std::cerr << "[bench] starting etcd and kube-apiserver ...\n";
  return lockstep::test::ControlPlane::start();
}
inline lockstep::kube::RestConfig unlimited_client(const lockstep::test::ControlPlane& cp) {
  auto config = lockstep::kube::RestConfig::from_kubeconfig(cp.kubeconfig());
  config.qps = 1000;
  config.burst = 1000;
  return config;
}

}  // namespace lockstep::bench::pods
