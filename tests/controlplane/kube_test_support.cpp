#include "kube_test_support.hpp"

#include "suite_result.hpp"
#include "test_util.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#ifndef LOCKSTEP_SOURCE_DIR
#error "LOCKSTEP_SOURCE_DIR must be defined"
#endif

namespace lockstep::test {
namespace {

std::unique_ptr<ControlPlane> g_control_plane;
std::string g_skip_reason;
std::atomic<int> g_namespace_counter{0};

class ControlPlaneEnvironment : public ::testing::Environment {
 public:
  explicit ControlPlaneEnvironment(ControlPlaneOptions options) : options_(std::move(options)) {}
  void SetUp() override {
    try {
      g_control_plane = ControlPlane::start(options_);
    } catch (const std::exception& e) {
      g_skip_reason = e.what();
      std::cerr << "[controlplane] not available: " << g_skip_reason << "\n";
    }
  }
  void TearDown() override {
    if (g_control_plane) g_control_plane->stop();
  }

 private:
  ControlPlaneOptions options_;
};

}  // namespace

ControlPlane* control_plane() { return g_control_plane.get(); }
const std::string& control_plane_skip_reason() { return g_skip_reason; }

bool require_all() {
  const char* v = std::getenv("LOCKSTEP_REQUIRE_ALL");
  return v && std::string(v) == "1";
}

RunResult kubectl(const std::vector<std::string>& args, const std::string& stdin_data) {
  std::vector<std::string> argv = {"kubectl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<std::string, std::string> env;
  if (g_control_plane) env["KUBECONFIG"] = g_control_plane->kubeconfig();
  return run_capture(argv, env, std::chrono::seconds(60), stdin_data);
}

std::string source_path(const std::string& relative) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/" + relative;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string create_namespace(const std::string& prefix) {
  std::string name = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++g_namespace_counter);
  auto r = kubectl({"create", "namespace", name});
  if (!r.status.success()) throw std::runtime_error("kubectl create namespace " + name + ": " + r.output);
  return name;
}

std::string service_account_kubeconfig(const std::string& ns, const std::string& sa, const std::string& path) {
  auto token = kubectl({"create", "token", sa, "-n", ns, "--duration=2h"});
  if (!token.status.success()) throw std::runtime_error("kubectl create token " + sa + " -n " + ns + ": " + token.output);
  std::string tok = token.output;
  while (!tok.empty() && (tok.back() == '\n' || tok.back() == ' ')) tok.pop_back();
  std::ofstream(path) << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
                      << control_plane()->server() << "\n    certificate-authority: " << control_plane()->ca_file()
                      << "\nusers:\n- name: sa\n  user:\n    token: " << tok
                      << "\ncontexts:\n- name: sa\n  context: {cluster: c, user: sa}\ncurrent-context: sa\n";
  return path;
}

int run_tests_with_control_plane(int argc, char** argv, ControlPlaneOptions options) {
  ::testing::InitGoogleTest(&argc, argv);
  // A Ctrl-C or a ctest timeout's SIGTERM still tears the control plane down.
  on_stop_signal([](int sig) {
    std::cerr << "\n[controlplane] " << strsignal(sig) << ": stopping etcd and kube-apiserver\n";
    if (g_control_plane) g_control_plane->stop();
  });
  ::testing::AddGlobalTestEnvironment(new ControlPlaneEnvironment(std::move(options)));
  int rc = RUN_ALL_TESTS();
  g_control_plane.reset();
  return suite_exit_code(rc);  // all skipped (no control plane): ctest shows Skipped
}

}  // namespace lockstep::test
