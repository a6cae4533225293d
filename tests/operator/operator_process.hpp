// The operator suites' shared parts (operator_test, operator_hostile_test, kueue_test): a
// lockstep-operator process with its log in a file, and a stand-in for rank 0's agent.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <iomanip>
#include <ctime>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_server.hpp"
#include "kube/client.hpp"
#include "kube_test_support.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace lockstep::test {

struct OperatorOptions {
  std::string log_prefix = "operator";  // the log: TempDir()/<prefix>-<pid>-<n>.log
  bool http = true;  // serve /metrics, /healthz, /readyz on a free loopback port (else --http-port=0)
  std::vector<std::string> defaults;  // flags before the caller's (a flag given twice: the last wins)
};

// The TrainingJob CRD (crds/, or the text `trainingjob_crd` when a test needs another) and the
// coscheduling plugin's PodGroup CRD on the suite's control plane, established (a fatal failure
// if not).
inline void apply_crds(const std::string& trainingjob_crd = "") {
  auto r = trainingjob_crd.empty() ? kubectl({"apply", "-f", source_path("crds/lockstep.dev_trainingjobs.yaml")})
                                   : kubectl({"apply", "-f", "-"}, trainingjob_crd);
  ASSERT_TRUE(r.status.success()) << r.output;
  r = kubectl({"apply", "-f", source_path("tests/crds/podgroup.yaml")});
  ASSERT_TRUE(r.status.success()) << r.output;
  auto w = kubectl({"wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev",
                    "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s"});
  ASSERT_TRUE(w.status.success()) << w.output;
}

// A suite's start: the CRDs on its control plane (apply_crds) and a client of it; nullptr
// without a control plane or when the CRDs were not established (apply_crds' fatal failure).
inline kube::Client* apply_crds_and_connect() {
  if (!control_plane()) return nullptr;
  apply_crds();
  if (::testing::Test::HasFatalFailure()) return nullptr;
  return new kube::Client(kube::RestConfig::from_kubeconfig(control_plane()->kubeconfig()));
}

// One request in namespace `ns` as the API server's audit log recorded it (the suites that run
// their control plane with ControlPlaneOptions::audit_writes): who sent it, what it did, with
// what answer, and when the server took it.
struct AuditWrite {
  std::string user, verb, resource, subresource, ns, name;
  int code = 0;
  std::chrono::system_clock::time_point at;  // requestReceivedTimestamp: when the server took it
};

inline std::chrono::system_clock::time_point parse_micro_time(const std::string& s) {  // 2025-01-02T03:04:05.123456Z
  std::tm tm{};
  std::istringstream in(s.substr(0, 19));
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  auto t = std::chrono::system_clock::from_time_t(timegm(&tm));
  if (s.size() > 20 && s[19] == '.') {
    std::string frac = s.substr(20, s.find('Z') - 20);
    frac.resize(6, '0');
    t += std::chrono::microseconds(std::stol(frac));
  }
  return t;
}

inline std::vector<AuditWrite> audit_writes(const std::string& ns) {
  std::ifstream in(control_plane()->audit_log());
  std::vector<AuditWrite> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("stage", "") != "ResponseComplete") continue;
    const nlohmann::json& obj = e.value("objectRef", nlohmann::json::object());
    if (obj.value("namespace", "") != ns) continue;
    AuditWrite w;
    w.user = e["user"].value("username", "");
    w.verb = e.value("verb", "");
    w.resource = obj.value("resource", "");
    w.subresource = obj.value("subresource", "");
    w.ns = ns;
    w.name = obj.value("name", "");
    w.code = e.value("responseStatus", nlohmann::json::object()).value("code", 0);
    w.at = parse_micro_time(e.value("requestReceivedTimestamp", ""));
    out.push_back(w);
  }
  return out;
}

// A ResourceQuota `name` in `ns` of at most `hard` pods, made or changed, with `used` pods
// counted. No controller-manager runs beside the suites' control plane: the test fills in the
// quota's status, as its quota controller would, for the admission plugin to enforce it (which
// then counts the pods it admits).
inline void pod_quota(const std::string& ns, const std::string& name, int hard, int used) {
  const std::string pods = std::to_string(hard);
  auto q = kubectl({"apply", "-n", ns, "-f", "-"},
                   "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: " + name + "}\nspec: {hard: {pods: \"" + pods + "\"}}\n");
  ASSERT_TRUE(q.status.success()) << q.output;
  q = kubectl({"patch", "resourcequota", name, "-n", ns, "--subresource=status", "--type=merge", "-p",
               "{\"status\": {\"hard\": {\"pods\": \"" + pods + "\"}, \"used\": {\"pods\": \"" + std::to_string(used) + "\"}}}"});
  ASSERT_TRUE(q.status.success()) << q.output;
}

// lockstep-operator ($LOCKSTEP_OPERATOR_BIN) against `kubeconfig`, at --log-level=debug.
class OperatorProcess {
 public:
  OperatorProcess(const std::string& kubeconfig, const std::vector<std::string>& extra, const OperatorOptions& o) {
    using namespace std::chrono_literals;
    static int n = 0;
    log_ = ::testing::TempDir() + "/" + o.log_prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n) + ".log";
    SpawnOptions so;
    so.argv = {env_or("LOCKSTEP_OPERATOR_BIN", "lockstep-operator"), "--kubeconfig", kubeconfig, "--log-level=debug"};
    if (o.http) {
      port_ = free_loopback_port();
      so.argv.insert(so.argv.end(), {"--http-address=127.0.0.1", "--http-port=" + std::to_string(port_)});
    } else {
      so.argv.push_back("--http-port=0");
    }
    so.argv.insert(so.argv.end(), o.defaults.begin(), o.defaults.end());
    so.argv.insert(so.argv.end(), extra.begin(), extra.end());
    so.output_path = log_;
    proc_ = Process::spawn(so);
  }
  ~OperatorProcess() {
    using namespace std::chrono_literals;
    proc_.signal(SIGCONT);  // one a test paused still ends
    proc_.terminate(10s);
  }
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;

  bool wait_log(const std::string& needle, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    return eventually([&] { return log().find(needle) != std::string::npos; }, timeout);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // GET `path` of its HTTP server: the body, a newline and the status code.
  std::string http(const std::string& path) const {
    using namespace std::chrono_literals;
    auto r = run_capture({"curl", "-s", "-o", "-", "-w", "\n%{http_code}", "http://127.0.0.1:" + std::to_string(port_) + path},
                         {}, 10s);
    return r.output;
  }
  Process& process() { return proc_; }
  int port() const { return port_; }  // its HTTP server's loopback port; 0 when off
  const std::string& identity_hint() const { return log_; }

 private:
  std::string log_;
  int port_ = 0;
  Process proc_;
};

// A stand-in for rank 0's agent: serves on 127.0.0.1:port/metrics whatever text the test sets,
// so a test can say what the agents did (their own tests check that they say it).
class FakeAgent {
 public:
  explicit FakeAgent(int port)
      : server_("127.0.0.1", port, {{"/metrics", [this] {
                  std::lock_guard<std::mutex> lock(mu_);
                  ++gets_;
                  return op::HttpAnswer{200, text_, "text/plain; version=0.0.4"};
                }}}) {}
  void serve(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    text_ = text;
  }
  int gets() {  // the operator's readings so far
    std::lock_guard<std::mutex> lock(mu_);
    return gets_;
  }

 private:
  std::mutex mu_;
  std::string text_;
  int gets_ = 0;
  op::HttpServer server_;  // last: it stops before the members its handler reads
};

// A watch of a list path (a collection, perhaps with a selector) from now on: from the list's
// resourceVersion, each event handed to `on_event` on a thread of its own, until destroyed. A
// class that owns one declares it last, so the thread ends before the members it writes.
class Watch {
 public:
  using OnEvent = std::function<void(const std::string& type, nlohmann::json& obj)>;
  Watch(kube::Client& client, const std::string& path, int timeout_seconds, OnEvent on_event) {
    auto list = client.get(path);
    std::string rv = list.ok() ? list.body["metadata"].value("resourceVersion", "") : "";
    thread_ = std::thread([this, &client, path, rv, timeout_seconds, on_event = std::move(on_event)] {
      client.watch(path, rv, timeout_seconds, on_event, cancel_);
    });
  }
  ~Watch() {
    cancel_.cancel();
    thread_.join();
  }

 private:
  kube::Cancellation cancel_;
  std::thread thread_;
};

// Every version of the objects a list path (a collection, perhaps with a selector) shows from
// now on, through a watch: each ADDED, MODIFIED and DELETED object, in order.
class History {
 public:
  History(kube::Client& client, const std::string& path)
      : watch_(client, path, 300, [this](const std::string& type, nlohmann::json& obj) {
          std::lock_guard<std::mutex> lock(mu_);
          if (type != "BOOKMARK") versions_.push_back(obj);
        }) {}
  // The versions of object `name` of `collection`.
  History(kube::Client& client, const std::string& collection, const std::string& name)
      : History(client, collection + "?fieldSelector=" + kube::url_encode("metadata.name=" + name)) {}
  std::vector<nlohmann::json> versions() {
    std::lock_guard<std::mutex> lock(mu_);
    return versions_;
  }

 private:
  std::mutex mu_;
  std::vector<nlohmann::json> versions_;
  Watch watch_;  // last (see Watch)
};

}  // namespace lockstep::test
