// The control-plane fixture itself: TLS, real authentication, readiness, and teardown that
// leaves nothing behind, from GoogleTest and from the lockstep-controlplane CLI.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "control_plane.hpp"
#include "kube_test_support.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::run_capture;
using lockstep::test::ControlPlane;
using lockstep::test::require_all;

namespace {

#define START_OR_SKIP(var, ...)                                              \
  std::unique_ptr<ControlPlane> var;                                         \
  try {                                                                      \
    var = ControlPlane::start(__VA_ARGS__);                                  \
  } catch (const std::exception& e) {                                        \
    if (require_all()) { FAIL() << e.what(); }                               \
    GTEST_SKIP() << "SKIPPED: " << e.what();                                 \
  }

bool gone(pid_t pid) { return !lockstep::test::is_running(pid); }

bool wait_gone(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!gone(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The two pids the CLI writes once etcd and the apiserver are up; empty if it exits first
// (a missing etcd: the test then skips at once instead of waiting out the timeout).
std::vector<pid_t> wait_for_pids(const std::string& file, std::chrono::seconds timeout, lockstep::Process& cli_proc) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!lockstep::test::is_running(cli_proc.pid())) break;
    std::ifstream in(file);
    std::vector<pid_t> pids;
    for (pid_t p; in >> p;) pids.push_back(p);
    if (pids.size() == 2) return pids;
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

std::string cli() { return lockstep::test::env_or("LOCKSTEP_CONTROLPLANE_CLI", "lockstep-controlplane"); }

lockstep::RunResult kubectl(const ControlPlane& cp, std::vector<std::string> args) {
  args.insert(args.begin(), "kubectl");
  return run_capture(args, {{"KUBECONFIG", cp.kubeconfig()}}, 60s);
}

}  // namespace

TEST(ControlPlane, ServesTlsWithTokenAndCertificateAuth) {
  START_OR_SKIP(cp, lockstep::test::ControlPlaneOptions{});
  RecordProperty("startup_seconds", std::to_string(cp->startup_seconds()));
  std::cerr << "control plane start-up: " << cp->startup_seconds() << " s\n";
  EXPECT_LT(cp->startup_seconds(), 120);

  auto ready = kubectl(*cp, {"get", "--raw", "/readyz"});
  ASSERT_TRUE(ready.status.success()) << ready.output;
  EXPECT_EQ(ready.output, "ok");

  auto me = kubectl(*cp, {"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"});
  ASSERT_TRUE(me.status.success()) << me.output;
  EXPECT_EQ(me.output, "lockstep-admin");

  auto cert = kubectl(*cp, {"--context", "lockstep-test-cert", "auth", "whoami", "-o",
                            "jsonpath={.status.userInfo.groups}"});
  ASSERT_TRUE(cert.status.success()) << cert.output;
  EXPECT_NE(cert.output.find("system:masters"), std::string::npos) << cert.output;

  auto bad_token = kubectl(*cp, {"--token", "not-the-token", "get", "namespaces"});
  EXPECT_FALSE(bad_token.status.success());
  // kubectl words a 401 as "Unauthorized" or "asked for the client to provide credentials".
  EXPECT_TRUE(bad_token.output.find("Unauthorized") != std::string::npos ||
              bad_token.output.find("provide credentials") != std::string::npos)
      << bad_token.output;

  // The server certificate is signed by the fixture's own CA, so the system roots reject it.
  auto wrong_ca = kubectl(*cp, {"--certificate-authority", "/etc/ssl/certs/ca-certificates.crt", "get", "ns"});
  EXPECT_FALSE(wrong_ca.status.success());
  EXPECT_NE(wrong_ca.output.find("certificate"), std::string::npos) << wrong_ca.output;

  // RBAC is on: an authenticated user outside system:masters is forbidden.
  auto imp = kubectl(*cp, {"--as", "somebody", "get", "pods", "-n", "default"});
  EXPECT_FALSE(imp.status.success());
  EXPECT_NE(imp.output.find("forbidden"), std::string::npos) << imp.output;
}

TEST(ControlPlane, StopLeavesNoProcessAndNoDirectory) {
  START_OR_SKIP(cp, lockstep::test::ControlPlaneOptions{});
  pid_t etcd = cp->etcd_pid(), api = cp->apiserver_pid();
  std::string dir = cp->dir();
  ASSERT_TRUE(std::filesystem::exists(dir + "/kubeconfig"));
  auto t0 = std::chrono::steady_clock::now();
  cp->stop();
  std::cerr << "teardown: " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
  EXPECT_TRUE(gone(etcd));
  EXPECT_TRUE(gone(api));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(ControlPlaneCli, RunsACommandAgainstItAndReturnsItsExitCode) {
  if (::access(cli().c_str(), X_OK) != 0) GTEST_SKIP() << "SKIPPED: " << cli() << " not built";
  auto r = run_capture({cli(), "--", "/bin/sh", "-c",
                        "kubectl get namespace default -o name && test -n \"$LOCKSTEP_TEST_TOKEN\" && exit 5"},
                       {}, 180s);
  if (r.output.find("not found in LOCKSTEP_K8S_BIN") != std::string::npos && !require_all()) {
    GTEST_SKIP() << "SKIPPED: " << r.output;
  }
  EXPECT_EQ(r.status.code, 5) << r.output;
  EXPECT_NE(r.output.find("namespace/default"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ready at https://127.0.0.1:"), std::string::npos) << r.output;
}

namespace {

// Starts the CLI holding a control plane in `dir`, and returns it with etcd's and the
// apiserver's pids once they are up.
std::pair<lockstep::Process, std::vector<pid_t>> start_cli(const std::string& dir,
                                                           std::vector<std::string> command) {
  lockstep::SpawnOptions so;
  so.argv = {cli(), "--quiet", "--dir", dir};
  if (!command.empty()) {
    so.argv.push_back("--");
    so.argv.insert(so.argv.end(), command.begin(), command.end());
  }
  so.output_path = dir + ".log";
  so.die_with_parent = false;  // this test kills it on purpose and checks what is left
  auto proc = lockstep::Process::spawn(so);
  auto pids = wait_for_pids(dir + "/pids", 120s, proc);
  return {std::move(proc), pids};
}

}  // namespace

TEST(ControlPlaneCli, KilledWithSigkillLeavesNoStrayProcess) {
  if (::access(cli().c_str(), X_OK) != 0) GTEST_SKIP() << "SKIPPED: " << cli() << " not built";
  std::string dir = ::testing::TempDir() + "/cp-sigkill-" + std::to_string(::getpid());
  auto [proc, pids] = start_cli(dir, {"sleep", "300"});
  if (pids.empty()) {
    proc.terminate(5s);
    std::string log = lockstep::test::tail_file(dir + ".log");
    if (log.find("not found in LOCKSTEP_K8S_BIN") != std::string::npos && !require_all()) {
      GTEST_SKIP() << "SKIPPED: " << log;
    }
    FAIL() << "control plane did not come up:\n" << log;
  }
  proc.signal(SIGKILL);
  proc.wait();
  for (pid_t p : pids) EXPECT_TRUE(wait_gone(p, 5s)) << "pid " << p << " survived its parent's SIGKILL";
  std::filesystem::remove_all(dir);
}

TEST(ControlPlaneCli, CtrlCTearsDownAndExits130) {
  if (::access(cli().c_str(), X_OK) != 0) GTEST_SKIP() << "SKIPPED: " << cli() << " not built";
  std::string dir = ::testing::TempDir() + "/cp-sigint-" + std::to_string(::getpid());
  auto [proc, pids] = start_cli(dir, {});
  if (pids.empty()) {
    proc.terminate(5s);
    std::string log = lockstep::test::tail_file(dir + ".log");
    if (log.find("not found in LOCKSTEP_K8S_BIN") != std::string::npos && !require_all()) {
      GTEST_SKIP() << "SKIPPED: " << log;
    }
    FAIL() << "control plane did not come up:\n" << log;
  }
  proc.signal(SIGINT);
  auto st = proc.wait_for(30s);
  ASSERT_TRUE(st.has_value()) << "CLI did not exit within 30 s of SIGINT";
  EXPECT_EQ(st->shell_code(), 130);
  for (pid_t p : pids) EXPECT_TRUE(wait_gone(p, 5s)) << "pid " << p << " survived Ctrl-C";
  std::filesystem::remove_all(dir);
}
