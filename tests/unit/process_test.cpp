// lockstep/process.hpp: exit codes, signals, grace periods, and no child left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <fstream>
#include <thread>

#include "lockstep/process.hpp"

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
  auto p = Process::spawn(sh("trap '' TERM; while :; do sleep 0.05; done"));
  std::this_thread::sleep_for(100ms);
  auto t0 = std::chrono::steady_clock::now();
  auto st = p.terminate(300ms);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
}

TEST(Process, TerminateIsGracefulWhenTheChildHonoursSigterm) {
  auto p = Process::spawn(sh("trap 'exit 7' TERM; while :; do sleep 0.05; done"));
  std::this_thread::sleep_for(100ms);
  auto st = p.terminate(5s);
  EXPECT_EQ(st.code, 7);
}

TEST(Process, ProcessGroupSignalReachesGrandchildren) {
  std::string pidfile = ::testing::TempDir() + "/grandchild.pid";
  auto o = sh("sleep 30 & echo $! > " + pidfile + "; wait");
  o.new_process_group = true;
  auto p = Process::spawn(o);
  pid_t grandchild = 0;
  for (int i = 0; i < 100 && grandchild == 0; ++i) {
    std::this_thread::sleep_for(20ms);
    std::ifstream(pidfile) >> grandchild;
  }
  ASSERT_GT(grandchild, 0);
  p.terminate(2s);
  for (int i = 0; i < 100 && alive(grandchild); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(alive(grandchild)) << "grandchild " << grandchild << " outlived its group";
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
  pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    auto p = Process::spawn(sh("echo $$ > " + pidfile + ".tmp && mv " + pidfile + ".tmp " + pidfile + "; exec sleep 30"));
    ::pause();
    ::_exit(0);
  }
  pid_t sleeper = 0;
  for (int i = 0; i < 200 && sleeper == 0; ++i) {
    std::this_thread::sleep_for(20ms);
    std::ifstream(pidfile) >> sleeper;
  }
  ASSERT_GT(sleeper, 0);
  ::kill(middle, SIGKILL);
  int st;
  ::waitpid(middle, &st, 0);
  // The sleeper is re-parented and killed; it may linger as a zombie of init briefly.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(sleeper) + "/stat");
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone) << "child " << sleeper << " outlived its SIGKILLed parent";
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
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

TEST(ShellJoin, QuotesWhatNeedsIt) {
  EXPECT_EQ(lockstep::shell_join({"kubectl", "get", "tj", "-o", "jsonpath={.items}"}),
            "kubectl get tj -o 'jsonpath={.items}'");
  EXPECT_EQ(lockstep::shell_join({"echo", "it's"}), "echo 'it'\\''s'");
}
