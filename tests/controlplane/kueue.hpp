// Kueue beside the test control plane (or the real-node cluster's API server): its manager
// (built from the Go module proxy by scripts/setup.sh, $LOCKSTEP_KUEUE_DIR/bin/kueue) as a host
// process, its CRDs, and its webhooks and conversion webhook served on loopback with a
// certificate authority this fixture makes, registered by URL (https://127.0.0.1:PORT/...).
//
// Its configuration is the one docs/kueue.md gives a Lockstep user:
//   integrations.externalFrameworks: ["TrainingJob.v1alpha1.lockstep.dev"] (no built-in
//   integration: a Lockstep pod must never be a Workload of its own), manageJobsWithoutQueueName
//   false, and waitForPodsReady set explicitly (KueueOptions says how).
// Only the webhooks of Kueue's own kinds (kueue.x-k8s.io) are registered: the others serve its
// built-in integrations, which are off. Leader election is off (one manager per API server), and
// so are its metrics server and its on-demand visibility server (VisibilityOnDemand=false): the
// tests read Kueue's objects.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lockstep/process.hpp"

namespace lockstep::test {

struct KueueOptions {
  std::string kueue_dir;  // bin/kueue and config/ (crd/, webhooks.yaml); default $LOCKSTEP_KUEUE_DIR
  std::string dir;        // state: certificates, configuration, log; created (default under TMPDIR)
  // waitForPodsReady: how long an admitted Workload may go without PodsReady before Kueue evicts
  // it, and the requeue backoff after such an eviction (Kueue's default base is 60 s).
  std::chrono::seconds pods_ready_timeout{300};
  int requeue_backoff_base_seconds = 1;
  int requeue_backoff_max_seconds = 10;
  std::chrono::seconds startup_timeout{120};
};

class Kueue {
 public:
  // Installs Kueue's CRDs and webhooks into the API server `kubeconfig` names and starts the
  // manager; returns once it is ready and its webhooks answer. Throws std::runtime_error with the
  // tail of its log when it cannot.
  static std::unique_ptr<Kueue> start(const std::string& kubeconfig, KueueOptions options = {});
  ~Kueue();
  Kueue(const Kueue&) = delete;
  Kueue& operator=(const Kueue&) = delete;

  void stop();  // the manager, and its webhook registrations (so nothing waits on a dead one)
  bool running();
  const std::string& log_path() const { return log_; }
  const std::string& dir() const { return dir_; }

  // "" when Kueue is built (the directory $LOCKSTEP_KUEUE_DIR, or `kueue_dir`, holds it), else why not.
  static std::string missing(const std::string& kueue_dir = "");

 private:
  Kueue() = default;
  std::string kubeconfig_, dir_, log_, webhook_prefix_;
  Process proc_;
  bool stopped_ = false;
};

}  // namespace lockstep::test
