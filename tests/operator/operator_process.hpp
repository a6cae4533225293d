// The operator suites' shared parts (operator_test, operator_hostile_test, kueue_test): a
// lockstep-operator process with its log in a file, and a stand-in for rank 0's agent.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
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

// The TrainingJob CRD and the coscheduling plugin's PodGroup CRD on the suite's control plane,
// established (a fatal failure if not).
inline void apply_crds() {
  for (const char* f : {"crds/lockstep.dev_trainingjobs.yaml", "tests/crds/podgroup.yaml"}) {
    auto r = kubectl({"apply", "-f", source_path(f)});
    ASSERT_TRUE(r.status.success()) << r.output;
  }
  auto w = kubectl({"wait", "--for=condition=Established", "crd/trainingjobs.lockstep.dev",
                    "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s"});
  ASSERT_TRUE(w.status.success()) << w.output;
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

// Every version of the objects a list path (a collection, perhaps with a selector) shows from
// now on, through a watch: each ADDED, MODIFIED and DELETED object, in order.
class History {
 public:
  History(kube::Client& client, const std::string& path) {
    auto list = client.get(path);
    std::string rv = list.ok() ? list.body["metadata"].value("resourceVersion", "") : "";
    thread_ = std::thread([this, &client, path, rv] {
      client.watch(path, rv, 300, [this](const std::string& type, nlohmann::json& obj) {
        std::lock_guard<std::mutex> lock(mu_);
        if (type != "BOOKMARK") versions_.push_back(obj);
      }, cancel_);
    });
  }
  // The versions of object `name` of `collection`.
  History(kube::Client& client, const std::string& collection, const std::string& name)
      : History(client, collection + "?fieldSelector=" + kube::url_encode("metadata.name=" + name)) {}
  ~History() {
    cancel_.cancel();
    thread_.join();
  }
  std::vector<nlohmann::json> versions() {
    std::lock_guard<std::mutex> lock(mu_);
    return versions_;
  }

 private:
  std::mutex mu_;
  std::vector<nlohmann::json> versions_;
  kube::Cancellation cancel_;
  std::thread thread_;
};

}  // namespace lockstep::test
