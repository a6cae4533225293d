// A real Kubernetes control plane for tests: etcd and kube-apiserver of the pinned release
// (scripts/versions.env), on free loopback ports, in a temporary directory, with TLS and
// real authentication (a bearer token and an admin client certificate, both in
// system:masters; RBAC authorization on).
//
//   auto cp = lockstep::test::ControlPlane::start();   // blocks until /readyz is 200
//   cp->kubeconfig();                                  // for kubectl and the operator
//   cp->stop();                                        // or let it go out of scope
//
// Teardown always happens: stop(), the destructor, and for a parent that dies without
// either, Note [Children die with their parent] in lockstep/process.hpp.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/process.hpp"

namespace lockstep::test {

struct ControlPlaneOptions {
  std::string bin_dir;                     // etcd and kube-apiserver; default: $LOCKSTEP_K8S_BIN
  std::string parent_dir;                  // default: $TMPDIR or /tmp
  std::string dir;                         // use exactly this directory (created); overrides parent_dir
  bool keep_dir = false;                   // leave the directory (logs, certs) after stop()
  std::chrono::seconds startup_timeout{120};
  std::vector<std::string> extra_apiserver_args;
  bool quiet = false;                      // no start-up line on stderr
  // Every write (create, update, patch, delete) is recorded, one JSON audit event a line at
  // ResponseComplete, in audit_log(): who sent it, when the server took it, what it answered.
  bool audit_writes = false;
};

class ControlPlane {
 public:
  // Starts etcd, then kube-apiserver, and waits for /readyz. Throws std::runtime_error with
  // the tail of the failing component's log if either cannot start.
  static std::unique_ptr<ControlPlane> start(ControlPlaneOptions options = {});
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  void stop();                                   // idempotent
  bool healthy();                                // both processes alive

  const std::string& dir() const { return dir_; }
  const std::string& kubeconfig() const { return kubeconfig_; }   // token user (current-context)
  const std::string& server() const { return server_; }           // https://127.0.0.1:PORT
  const std::string& token() const { return token_; }             // admin bearer token
  const std::string& ca_file() const { return ca_file_; }
  std::string audit_log() const { return dir_ + "/audit.log"; }  // with audit_writes
  const std::string& client_cert_file() const { return client_cert_; }  // admin, system:masters
  const std::string& client_key_file() const { return client_key_; }
  std::string etcd_endpoint() const { return etcd_url_; }
  pid_t etcd_pid() const { return etcd_.pid(); }
  pid_t apiserver_pid() const { return apiserver_.pid(); }
  double startup_seconds() const { return startup_seconds_; }

  // Restarts kube-apiserver on the same port and etcd data (to test watch survival).
  void restart_apiserver();

 private:
  ControlPlane() = default;
  void generate_pki();
  void start_etcd();
  void start_apiserver();
  void wait_ready(Process& proc, const std::string& log, std::chrono::steady_clock::time_point deadline);

  ControlPlaneOptions options_;
  std::string dir_, bin_dir_, kubeconfig_, server_, token_, ca_file_, client_cert_, client_key_;
  std::string etcd_url_, etcd_log_, apiserver_log_;
  int apiserver_port_ = 0;
  Process etcd_, apiserver_;
  double startup_seconds_ = 0;
  bool stopped_ = false;
};

// The last `max_lines` lines of a file, for error messages.
std::string tail_file(const std::string& path, size_t max_lines = 30);

}  // namespace lockstep::test
