#include "control_plane.hpp"

#include "kube/http.hpp"
#include "test_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace lockstep::test {
namespace {

std::string random_hex(size_t bytes) {
  std::ifstream in("/dev/urandom", std::ios::binary);
  std::ostringstream out;
  for (size_t i = 0; i < bytes; ++i)
    out << std::hex << std::setw(2) << std::setfill('0') << (in.get() & 0xff);
  return out.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string make_temp_dir(const std::string& parent) {
  std::string tmpl = parent + "/lockstep-controlplane-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a directory under " + parent);
  return tmpl;
}

}  // namespace

std::string tail_file(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "    " + l + "\n";
  return out;
}

std::unique_ptr<ControlPlane> ControlPlane::start(ControlPlaneOptions options) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ControlPlane> cp(new ControlPlane());
  cp->options_ = options;
  cp->bin_dir_ = options.bin_dir.empty() ? env_or("LOCKSTEP_K8S_BIN", "") : options.bin_dir;
  for (const char* bin : {"etcd", "kube-apiserver"}) {
    std::string p = cp->bin_dir_ + "/" + bin;
    if (cp->bin_dir_.empty() || ::access(p.c_str(), X_OK) != 0)
      throw std::runtime_error(std::string(bin) + " not found in LOCKSTEP_K8S_BIN='" + cp->bin_dir_ +
                               "'; run scripts/setup.sh, which builds it from the Go module proxy");
  }
  if (!options.dir.empty()) {
    fs::create_directories(options.dir);
    cp->dir_ = fs::absolute(options.dir).string();
  } else {
    cp->dir_ = make_temp_dir(options.parent_dir.empty() ? env_or("TMPDIR", "/tmp") : options.parent_dir);
  }
  try {
    cp->generate_pki();
    // A port taken between our probe and the server's bind makes it exit; try again then.
    for (int attempt = 1;; ++attempt) {
      try {
        auto deadline = std::chrono::steady_clock::now() + options.startup_timeout;
        cp->start_etcd();
        cp->start_apiserver();
        cp->wait_ready(cp->apiserver_, cp->apiserver_log_, deadline);
        break;
      } catch (const std::exception& e) {
        cp->apiserver_.terminate(2s);
        cp->etcd_.terminate(2s);
        if (attempt >= 3) throw;
        std::cerr << "[controlplane] start attempt " << attempt << " failed, retrying: "
                  << std::string(e.what()).substr(0, 200) << "\n";
        fs::remove_all(cp->dir_ + "/etcd");
      }
    }
  } catch (...) {
    cp->stop();
    throw;
  }
  cp->startup_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!options.quiet)
    std::cerr << "[controlplane] etcd and kube-apiserver ready at " << cp->server_ << " in "
              << std::fixed << std::setprecision(2) << cp->startup_seconds_ << " s (dir " << cp->dir_
              << ")\n";
  return cp;
}

void ControlPlane::generate_pki() {
  std::string pki = dir_ + "/pki";
  fs::create_directories(pki);
  write_file(pki + "/server.ext",
             "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
             "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
             "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n");
  write_file(pki + "/client.ext", "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n");
  // P-256 keys: fast to generate, and accepted by Go's TLS and service-account signing.
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string script =
      "set -e\n"
      "openssl req -x509 " + ec + " -keyout ca.key -out ca.crt -days 7 -subj /CN=lockstep-test-ca\n"
      "openssl req -new " + ec + " -keyout server.key -out server.csr -subj /CN=kube-apiserver\n"
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 "
      "-extfile server.ext -out server.crt\n"
      "openssl req -new " + ec + " -keyout admin.key -out admin.csr "
      "-subj /O=system:masters/CN=lockstep-admin\n"
      "openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 "
      "-extfile client.ext -out admin.crt\n"
      "openssl ecparam -name prime256v1 -genkey -noout -out sa.key\n"
      "openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null\n";
  SpawnOptions so;
  auto r = run_capture({"/bin/sh", "-c", "cd '" + pki + "' && " + script}, {}, 60s);
  if (!r.status.success())
    throw std::runtime_error("generating test certificates with openssl failed (" + r.status.describe() +
                             "):\n" + r.output);
  ca_file_ = pki + "/ca.crt";
  client_cert_ = pki + "/admin.crt";
  client_key_ = pki + "/admin.key";
  token_ = random_hex(24);
  write_file(pki + "/tokens.csv", token_ + ",lockstep-admin,lockstep-admin-uid,\"system:masters\"\n");
  ::chmod((pki + "/tokens.csv").c_str(), 0600);
}

void ControlPlane::start_etcd() {
  int client = free_loopback_port(), peer = free_loopback_port();
  etcd_url_ = "http://127.0.0.1:" + std::to_string(client);
  std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
  etcd_log_ = dir_ + "/etcd.log";
  SpawnOptions so;
  so.argv = {bin_dir_ + "/etcd",
             "--name=lockstep-test",
             "--data-dir=" + dir_ + "/etcd",
             "--listen-client-urls=" + etcd_url_,
             "--advertise-client-urls=" + etcd_url_,
             "--listen-peer-urls=" + peer_url,
             "--initial-advertise-peer-urls=" + peer_url,
             "--initial-cluster=lockstep-test=" + peer_url,
             "--unsafe-no-fsync=true",  // test data: speed over durability
             "--log-level=warn"};
  so.output_path = etcd_log_;
  so.new_process_group = true;
  etcd_ = Process::spawn(so);
}

void ControlPlane::start_apiserver() {
  if (apiserver_port_ == 0) apiserver_port_ = free_loopback_port();
  server_ = "https://127.0.0.1:" + std::to_string(apiserver_port_);
  apiserver_log_ = dir_ + "/kube-apiserver.log";
  std::string pki = dir_ + "/pki";
  SpawnOptions so;
  so.argv = {bin_dir_ + "/kube-apiserver",
             "--etcd-servers=" + etcd_url_,
             "--bind-address=127.0.0.1",
             "--advertise-address=127.0.0.1",
             "--secure-port=" + std::to_string(apiserver_port_),
             "--cert-dir=" + pki,
             "--tls-cert-file=" + pki + "/server.crt",
             "--tls-private-key-file=" + pki + "/server.key",
             "--client-ca-file=" + pki + "/ca.crt",
             "--token-auth-file=" + pki + "/tokens.csv",
             "--authorization-mode=RBAC",
             "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
             "--service-account-key-file=" + pki + "/sa.pub",
             "--service-account-signing-key-file=" + pki + "/sa.key",
             "--service-cluster-ip-range=10.96.0.0/16",
             // No controller-manager runs, so nobody creates the "default" ServiceAccount
             // that this admission plugin insists on for every pod.
             "--disable-admission-plugins=ServiceAccount",
             // Off by default upstream, on in OpenShift: a child that sets blockOwnerDeletion
             // needs update on its owner's finalizers (tests/chart/chart_test.cpp runs the
             // operator with the chart's RBAC, which must grant it).
             "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
             "--enable-priority-and-fairness=false",
             "--profiling=false",
             "--endpoint-reconciler-type=none",
             "--v=1"};
  if (options_.audit_writes) {
    write_file(pki + "/audit-policy.yaml",
               "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted, Panic]\n"
               "rules:\n- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n- level: None\n");
    so.argv.push_back("--audit-policy-file=" + pki + "/audit-policy.yaml");
    so.argv.push_back("--audit-log-path=" + audit_log());
    so.argv.push_back("--audit-log-mode=blocking");  // an event is in the file before its answer leaves
  }
  for (const auto& a : options_.extra_apiserver_args) so.argv.push_back(a);
  so.output_path = apiserver_log_;
  so.new_process_group = true;
  apiserver_ = Process::spawn(so);

  kubeconfig_ = dir_ + "/kubeconfig";
  write_file(kubeconfig_,
             "apiVersion: v1\nkind: Config\n"
             "clusters:\n- name: lockstep-test\n  cluster:\n    server: " + server_ +
             "\n    certificate-authority: " + ca_file_ + "\n"
             "users:\n- name: admin\n  user:\n    token: " + token_ + "\n"
             "- name: admin-cert\n  user:\n    client-certificate: " + client_cert_ +
             "\n    client-key: " + client_key_ + "\n"
             "contexts:\n- name: lockstep-test\n  context:\n    cluster: lockstep-test\n    user: admin\n"
             "- name: lockstep-test-cert\n  context:\n    cluster: lockstep-test\n    user: admin-cert\n"
             "current-context: lockstep-test\n");
  ::chmod(kubeconfig_.c_str(), 0600);
}

void ControlPlane::wait_ready(Process& proc, const std::string& log,
                              std::chrono::steady_clock::time_point deadline) {
  // The operator's own HTTP client (operator/kube/http.hpp), verifying the server against the CA.
  lockstep::kube::http::TlsConfig tls;
  tls.ca_pem = read_file(ca_file_);
  lockstep::kube::http::Transport client(server_, tls, 5s, "lockstep-controlplane");
  const std::string authorization = "Bearer " + token_;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!etcd_.running())
      throw std::runtime_error("etcd exited during start-up; last lines of " + etcd_log_ + ":\n" +
                               tail_file(etcd_log_));
    if (!proc.running())
      throw std::runtime_error("kube-apiserver exited during start-up; last lines of " + log + ":\n" +
                               tail_file(log));
    lockstep::kube::http::Request req;
    req.method = "GET";
    req.target = "/readyz";
    req.authorization = authorization;
    auto reply = client.round_trip(req);
    if (reply.status == 200) return;
    last = reply.status ? "HTTP " + std::to_string(reply.status) : reply.error;
    std::this_thread::sleep_for(100ms);
  }
  throw std::runtime_error("kube-apiserver not ready within " +
                           std::to_string(options_.startup_timeout.count()) + " s (last /readyz: " + last +
                           "); last lines of " + log + ":\n" + tail_file(log));
}

void ControlPlane::restart_apiserver() {
  apiserver_.terminate(5s);
  start_apiserver();
  wait_ready(apiserver_, apiserver_log_, std::chrono::steady_clock::now() + options_.startup_timeout);
}

bool ControlPlane::healthy() { return etcd_.running() && apiserver_.running(); }

void ControlPlane::stop() {
  if (stopped_) return;
  stopped_ = true;
  apiserver_.terminate(3s);
  etcd_.terminate(3s);
  if (!options_.keep_dir && options_.dir.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

ControlPlane::~ControlPlane() { stop(); }

}  // namespace lockstep::test
