// lockstep/process.hpp: exit codes, signals, grace periods, and no child left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::Process;
using lockstep::SpawnOptions;

namespace {
bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }
SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}
// A file the child creates (atomically, by rename) once its set-up, such as a trap, is done:
// the test waits for that instead of guessing how long the shell takes to start.
std::string ready_file(const std::string& name) {
  std::string path = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid()) + ".ready";
  ::unlink(path.c_str());
  return path;
}
std::string signal_ready(const std::string& path) { return "echo ok > " + path + ".tmp && mv " + path + ".tmp " + path; }
bool wait_ready(const std::string& path) {
  return lockstep::test::eventually([&] { return ::access(path.c_str(), F_OK) == 0; }, 20s);
}
// The pid a child wrote to `path` (atomically), or 0 if it did not within 20 s.
pid_t wait_pid_file(const std::string& path) {
  pid_t pid = 0;
  lockstep::test::eventually([&] {
    std::ifstream(path) >> pid;
    return pid > 0;
  }, 20s);
  return pid;
}
}  // namespace

TEST(Process, ReportsExitCode) {
  auto p = Process::spawn(sh("exit 3"));
  auto st = p.wait();
  EXPECT_EQ(st.code, 3);
  EXPECT_EQ(st.signal, 0);
  EXPECT_EQ(st.shell_code(), 3);
  EXPECT_FALSE(st.success());
}

TEST(Process, ReportsSignalAs128PlusN) {
  auto p = Process::spawn(sh("kill -9 $$"));
  auto st = p.wait();
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_EQ(st.shell_code(), 137);
  EXPECT_NE(st.describe().find("signal 9"), std::string::npos) << st.describe();
}

TEST(Process, UnknownProgramIsAClearError) {
  SpawnOptions o;
  o.argv = {"lockstep-no-such-program-xyz"};
  try {
    Process::spawn(o);
    FAIL() << "spawn of a missing program did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("lockstep-no-such-program-xyz"), std::string::npos) << e.what();
  }
}

TEST(Process, TerminateEscalatesToKillAfterGrace) {
  // The child ignores SIGTERM, so only SIGKILL after the grace period ends it.
  auto ready = ready_file("ignores-term");
  auto p = Process::spawn(sh("trap '' TERM; " + signal_ready(ready) + "; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_ready(ready)) << "the child never installed its trap";
  auto t0 = std::chrono::steady_clock::now();
  auto st = p.terminate(300ms);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
}

TEST(Process, TerminateIsGracefulWhenTheChildHonoursSigterm) {
  auto ready = ready_file("honours-term");
  auto p = Process::spawn(sh("trap 'exit 7' TERM; " + signal_ready(ready) + "; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_ready(ready)) << "the child never installed its trap";
  auto st = p.terminate(5s);
  EXPECT_EQ(st.code, 7);
}

TEST(Process, ProcessGroupSignalReachesGrandchildren) {
  std::string pidfile = ::testing::TempDir() + "/grandchild.pid";
  ::unlink(pidfile.c_str());
  auto o = sh("sleep 30 & echo $! > " + pidfile + ".tmp && mv " + pidfile + ".tmp " + pidfile + "; wait");
  o.new_process_group = true;
  auto p = Process::spawn(o);
  pid_t grandchild = wait_pid_file(pidfile);
  ASSERT_GT(grandchild, 0);
  p.terminate(2s);
  // Killed, it is re-parented to init (or a subreaper) and may linger as a zombie briefly.
  EXPECT_TRUE(lockstep::test::eventually([&] { return !lockstep::test::is_running(grandchild); }, 5s)) << "grandchild " << grandchild << " outlived its group";
}

// A Process that was never started (a control plane whose etcd is missing stops both of
// its never-started servers) has nothing to wait for: it used to sit out the whole grace.
TEST(Process, TerminateOfANeverStartedProcessReturnsAtOnce) {
  Process p;
  auto t0 = std::chrono::steady_clock::now();
  p.terminate(3s);
  EXPECT_TRUE(p.wait_for(3s).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST(Process, DestructorKillsARunningChild) {
  pid_t pid;
  {
    auto p = Process::spawn(sh("exec sleep 30"));
    pid = p.pid();
    EXPECT_TRUE(alive(pid));
  }
  EXPECT_FALSE(alive(pid));
}

TEST(Process, ChildDiesWithItsParent) {
  // A middle process spawns a long sleeper through lockstep::Process and is then SIGKILLed:
  // the sleeper must die too (PR_SET_PDEATHSIG), though nobody ran a destructor.
  std::string pidfile = ::testing::TempDir() + "/orphan.pid";
  ::unlink(pidfile.c_str());  // a previous run's pid must not be taken for this one's
  pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    auto p = Process::spawn(sh("echo $$ > " + pidfile + ".tmp && mv " + pidfile + ".tmp " + pidfile + "; exec sleep 30"));
    ::pause();
    ::_exit(0);
  }
  pid_t sleeper = wait_pid_file(pidfile);
  ASSERT_GT(sleeper, 0);
  ::kill(middle, SIGKILL);
  int st;
  ::waitpid(middle, &st, 0);
  // The sleeper is re-parented and killed; it may linger as a zombie of init briefly.
  EXPECT_TRUE(lockstep::test::eventually([&] { return !lockstep::test::is_running(sleeper); }, 5s)) << "child " << sleeper << " outlived its SIGKILLed parent";
}

TEST(RunCapture, CapturesOutputStdinAndExitCode) {
  auto r = lockstep::run_capture({"/bin/sh", "-c", "cat; echo err >&2; exit 4"}, {}, 10s, "hello\n");
  EXPECT_EQ(r.status.code, 4);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("hello"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("err"), std::string::npos) << r.output;
}

TEST(RunCapture, PassesEnvironment) {
  auto r = lockstep::run_capture({"/bin/sh", "-c", "echo \"$LOCKSTEP_X\""}, {{"LOCKSTEP_X", "42"}});
  EXPECT_EQ(r.output, "42\n");
}

TEST(RunCapture, TimesOutAndKills) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = lockstep::run_capture({"/bin/sh", "-c", "sleep 30"}, {}, 300ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_FALSE(r.status.success());
}

TEST(FreeLoopbackPort, IsBindable) {
  int port = lockstep::free_loopback_port();
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);
  // Its promise is that a server can bind it next: do so, on the address the agents use.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "port " << port << ": " << std::strerror(errno);
  EXPECT_EQ(::listen(fd, 1), 0) << std::strerror(errno);
  ::close(fd);
}

TEST(ShellJoin, QuotesWhatNeedsIt) {
  EXPECT_EQ(lockstep::shell_join({"kubectl", "get", "tj", "-o", "jsonpath={.items}"}),
            "kubectl get tj -o 'jsonpath={.items}'");
  EXPECT_EQ(lockstep::shell_join({"echo", "it's"}), "echo 'it'\\''s'");
}

// support/suite_result.hpp: a binary whose every case skipped exits 77 (ctest's
// SKIP_RETURN_CODE: Skipped, not Passed); one that ran anything exits as GoogleTest says.
TEST(SuiteResult, AllSkippedExits77AndAnythingElseAsGoogleTestSays) {
  std::string probe = lockstep::test::env_or("LOCKSTEP_SUITE_PROBE", "");
  ASSERT_FALSE(probe.empty()) << "LOCKSTEP_SUITE_PROBE is not set (tests/CMakeLists.txt sets it)";
  auto all = lockstep::run_capture({probe}, {{"PROBE_MODE", "skip"}}, std::chrono::seconds(30));
  EXPECT_EQ(all.status.shell_code(), 77) << all.output;
  EXPECT_NE(all.output.find("SKIPPED: all 2 test(s) of this binary were skipped"), std::string::npos) << all.output;
  auto some = lockstep::run_capture({probe}, {{"PROBE_MODE", "some-skip"}}, std::chrono::seconds(30));
  EXPECT_EQ(some.status.shell_code(), 0) << some.output;
  auto pass = lockstep::run_capture({probe}, {{"PROBE_MODE", "pass"}}, std::chrono::seconds(30));
  EXPECT_EQ(pass.status.shell_code(), 0) << pass.output;
  auto fail = lockstep::run_capture({probe}, {{"PROBE_MODE", "fail"}}, std::chrono::seconds(30));
  EXPECT_EQ(fail.status.shell_code(), 1) << fail.output;
}
