// The restart barrier in a hostile shared cluster (Note [Barrier trust] in agent/barrier/trust.hpp;
// issue #26): strangers on loopback against the real BarrierServer and real lockstep-agent
// processes. A stranger learns nothing from a refusal, cannot join or report, cannot delay
// the start, cannot make the agent hold memory or spin at the fd limit, and its text never
// reaches a log or a termination message raw. Figures are printed for the report.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>

#include "agent_support.hpp"
#include "barrier/client.hpp"
#include "barrier/codec.hpp"
#include "barrier/server.hpp"
#include "barrier/trust.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace agent = lockstep::agent;
using lockstep::Process;
using lockstep::test::agent_bin;
using lockstep::test::eventually;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kRunId = "uid-7f3e-secret-run";
constexpr int kAttempt = 3;

std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("barrier-hostile-" + name); }


void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The next line from `fd` within `timeout` ("" at end of stream or timeout).
// One line, or what came of it within `timeout`. With `partial`, a line the timeout cuts stays
// there and the call returns "": the next call with it completes the line (a caller polling with
// short timeouts would otherwise get a line in two pieces, neither of which decodes).
std::string read_line(int fd, std::chrono::milliseconds timeout, bool* closed = nullptr, std::string* partial = nullptr) {
  std::string own;
  std::string& line = partial ? *partial : own;
  auto take = [&line] { return std::exchange(line, std::string()); };
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return take();
    }
    if (c == '\n') return take();
    line += c;
  }
  return partial ? std::string() : take();
}

bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  char buf[256];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

// A stranger's attempt: connect, take the challenge, say `hello` (a HELLO line), read the answer.
struct Attempt {
  std::string challenge, answer;
  bool closed = false;
};
Attempt try_hello(int port, const std::string& hello) {
  Attempt a;
  int fd = lockstep::test::dial_loopback(port);
  if (fd < 0) return a;
  a.challenge = read_line(fd, 5s);
  send_all(fd, hello + "\n");
  a.answer = read_line(fd, 5s);
  a.closed = closed_by_peer(fd, 3s);
  ::close(fd);
  return a;
}

struct Agent {
  Process proc;
  std::string log, termination;
  std::string output() const { return lockstep::test::read_file(log); }
};

// A real agent: node `node` of a job of `nnodes` running `command`, with the job's secret
// unless `secret` is empty.
Agent start_agent(const std::string& dir, int nnodes, int node, int master_port, int agent_port,
                  const std::vector<std::string>& command, const std::string& secret = kSecret,
                  std::map<std::string, std::string> extra = {}) {
  Agent a;
  a.log = dir + "/agent-" + std::to_string(node) + ".log";
  a.termination = dir + "/termination-" + std::to_string(node);
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--no-metrics", "--stall-timeout", "0", "--"};
  so.argv.insert(so.argv.end(), command.begin(), command.end());
  so.env = {{"LOCKSTEP_JOB_NAME", "tj"}, {"LOCKSTEP_JOB_NAMESPACE", "ns"}, {"LOCKSTEP_JOB_UID", kRunId},
            {"LOCKSTEP_NNODES", std::to_string(nnodes)}, {"LOCKSTEP_NODE_RANK", std::to_string(node)},
            {"LOCKSTEP_NPROC_PER_NODE", "1"}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", std::to_string(master_port)}, {"LOCKSTEP_AGENT_PORT", std::to_string(agent_port)},
            {"LOCKSTEP_RESTART_ATTEMPT", std::to_string(kAttempt)}, {"LOCKSTEP_TERMINATION_LOG", a.termination}};
  if (!secret.empty()) so.env[lockstep::contract::kBarrierSecret] = secret;
  so.unset_env = {"OMP_NUM_THREADS"};
  if (secret.empty()) so.unset_env.push_back(lockstep::contract::kBarrierSecret);
  for (const auto& [k, v] : extra) so.env[k] = v;
  so.output_path = a.log;
  a.proc = Process::spawn(so);
  return a;
}

bool listening(int port) {
  int fd = lockstep::test::dial_loopback(port);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

long rss_kb(pid_t pid) { return lockstep::test::proc_status(pid, "VmRSS"); }

double cpu_seconds(pid_t pid) {  // utime + stime of a process
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');
  std::istringstream in(s.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; in >> field; ++i) {
    if (i == 14) utime = std::atol(field.c_str());
    if (i == 15) { stime = std::atol(field.c_str()); break; }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool valid_utf8(const std::string& s) { return agent::clean_text(s, s.size() + 1, true) == s; }

agent::Config server_config(int nnodes, const std::string& secret = kSecret) {
  agent::Config cfg;
  cfg.nnodes = nnodes;
  cfg.run_id = kRunId;
  cfg.restart_attempt = kAttempt;
  cfg.barrier_secret = secret;
  cfg.rendezvous_timeout = 60s;
  return cfg;
}

// A member's HELLO: the proof for the challenge `challenge_line`.
std::string member_hello(const std::string& challenge_line, int node, const std::string& secret = kSecret) {
  auto c = agent::decode(challenge_line);
  std::string nonce = c ? c->get("nonce") : "";
  return agent::encode({"HELLO", {{"node", std::to_string(node)}, {"run", kRunId}, {"attempt", std::to_string(kAttempt)},
                                  {"proof", agent::barrier_proof(secret, nonce, node, kAttempt, kRunId)}}});
}

// A real client (BarrierClient) joining as `node`; returns once HELLO is said.
bool client_hello(agent::BarrierClient& c, int port, int node, const std::string& secret = kSecret) {
  std::string error;
  if (!c.connect("127.0.0.1", port, error)) return false;
  auto end = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < end) {
    auto m = c.poll(50ms);
    if (c.lost()) return false;  // dropped before its CHALLENGE was read
    if (m && m->verb == "CHALLENGE") {
      c.send({"HELLO", {{"node", std::to_string(node)}, {"run", kRunId}, {"attempt", std::to_string(kAttempt)},
                        {"proof", agent::barrier_proof(secret, m->get("nonce"), node, kAttempt, kRunId)}}});
      return true;
    }
  }
  return false;
}

std::optional<agent::Message> wait_for(agent::BarrierClient& c, const std::string& verb, std::chrono::milliseconds t) {
  auto end = std::chrono::steady_clock::now() + t;
  while (std::chrono::steady_clock::now() < end)
    if (auto m = c.poll(20ms); m && m->verb == verb) return m;
  return std::nullopt;
}

}  // namespace

// Wrong and missing secrets, strangers' guesses of the run id and attempt, a stranger's
// FAILED: all refused with one fixed text that echoes nothing, the connection closed, and the
// real job finishes as if nobody had come.
TEST(BarrierHostile, StrangersAreRefusedWithoutAWordAndTheJobFinishes) {
  std::string dir = temp_dir("refuse");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, master, port, {"sh", "-c", "sleep 1"});
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << a0.output();

  const std::vector<std::pair<std::string, std::string>> hellos = {
      {"no proof, right run and attempt (what the old protocol asked)",
       "HELLO node=1 run=" + kRunId + " attempt=" + std::to_string(kAttempt)},
      {"a wrong secret", ""},  // filled below: needs the challenge
      {"a probe for the run id", "HELLO node=1 run=guess attempt=0 proof=00"},
      {"a node outside the job", "HELLO node=7 run=x attempt=1"},
      {"no fields", "HELLO"},
  };
  for (const auto& [what, hello] : hellos) {
    Attempt a;
    if (hello.empty()) {
      int fd = lockstep::test::dial_loopback(port);
      ASSERT_GE(fd, 0);
      std::string challenge = read_line(fd, 5s);
      send_all(fd, member_hello(challenge, 1, std::string(64, 'f')) + "\n");
      a.challenge = challenge;
      a.answer = read_line(fd, 5s);
      a.closed = closed_by_peer(fd, 3s);
      ::close(fd);
    } else {
      a = try_hello(port, hello);
    }
    SCOPED_TRACE(what);
    EXPECT_EQ(a.challenge.rfind("CHALLENGE nonce=", 0), 0u) << a.challenge;
    auto m = agent::decode(a.answer);
    ASSERT_TRUE(m) << a.answer;
    EXPECT_EQ(m->verb, "EXIT");
    EXPECT_EQ(m->get("why"), agent::kRefusal);  // the same text whatever was wrong
    EXPECT_EQ(a.answer.find(kRunId), std::string::npos) << a.answer;
    EXPECT_EQ(m->get("why").find(std::to_string(kAttempt)), std::string::npos) << a.answer;
    EXPECT_TRUE(a.closed) << "the connection stays open after a refusal";
  }
  // A stranger's FAILED, before and after a refused HELLO: never a report.
  {
    int fd = lockstep::test::dial_loopback(port);
    ASSERT_GE(fd, 0);
    send_all(fd, "FAILED gen=0 node=1 rank=1 code=64 reason=WorkerFailed what=stranger-was-here\n");
    EXPECT_TRUE(closed_by_peer(fd, 3s));
    ::close(fd);
    fd = lockstep::test::dial_loopback(port);
    send_all(fd, "HELLO node=1 run=" + kRunId + " attempt=3\nFAILED gen=0 node=1 rank=1 code=64 what=stranger-was-here\n");
    EXPECT_TRUE(closed_by_peer(fd, 3s));
    ::close(fd);
  }
  // An agent without the secret (an old operator's pod, another job's) is refused too.
  auto intruder = start_agent(temp_dir("refuse-intruder"), 2, 1, master, port, {"true"}, "");
  auto si = intruder.proc.wait_for(30s);
  ASSERT_TRUE(si);
  EXPECT_EQ(si->shell_code(), lockstep::contract::kExitRendezvous);
  // The real node 1 joins, and the job ends as if nobody had come.
  auto a1 = start_agent(dir, 2, 1, master, port, {"sh", "-c", "sleep 1"});
  auto s0 = a0.proc.wait_for(60s), s1 = a1.proc.wait_for(60s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
  const std::string log0 = a0.output();
  EXPECT_EQ(log0.find("stranger-was-here"), std::string::npos) << log0;
  EXPECT_EQ(log0.find(kSecret), std::string::npos) << "the secret is logged";
  EXPECT_EQ(lockstep::test::read_file(a0.termination).find("stranger"), std::string::npos);
  // Refusals are logged, escaped and rate-limited: at most 5 a minute one by one.
  size_t lines = 0;
  for (size_t pos = 0; (pos = log0.find("refused a HELLO", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_GE(lines, 1u) << log0;
  EXPECT_LE(lines, 5u) << log0;
}

// The secret is the agent's alone: no worker sees it in its environment.
TEST(BarrierHostile, WorkersDoNotSeeTheSecret) {
  std::string dir = temp_dir("env");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 1, 0, master, port, {"sh", "-c", "env > " + dir + "/env; cat /proc/$PPID/environ | tr '\\0' '\\n' > " + dir + "/agent-environ"});
  auto s0 = a0.proc.wait_for(60s);
  ASSERT_TRUE(s0) << a0.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  std::string env = lockstep::test::read_file(dir + "/env");
  EXPECT_NE(env.find("LOCKSTEP_JOB_UID"), std::string::npos) << env;
  EXPECT_EQ(env.find(lockstep::contract::kBarrierSecret), std::string::npos) << env;
  EXPECT_EQ(env.find(kSecret), std::string::npos) << env;
  // The agent's own /proc/<pid>/environ no longer shows it either.
  EXPECT_EQ(lockstep::test::read_file(dir + "/agent-environ").find(kSecret), std::string::npos);
  EXPECT_EQ(a0.output().find(kSecret), std::string::npos);
}

// Strangers that never read and keep sending refused HELLOs do not delay the start: the old
// server wrote with a blocking wait of up to 1 s per line to each of them.
TEST(BarrierHostile, SlowReadersDoNotDelayTheStart) {
  agent::BarrierServer server(server_config(2), "127.0.0.1", 0);
  std::atomic<bool> stop{false};
  std::atomic<long> sent{0};
  std::vector<std::thread> attackers;
  for (int t = 0; t < 4; ++t)
    attackers.emplace_back([&] {
      std::string junk;
      for (int i = 0; i < 200; ++i) junk += "HELLO node=1 run=" + kRunId + " attempt=3\n";
      while (!stop) {
        std::vector<int> fds;
        for (int i = 0; i < 16; ++i)
          if (int fd = lockstep::test::dial_loopback(server.port()); fd >= 0) {
            // Never read; send until the socket would block.
            ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            fds.push_back(fd);
            ++sent;
          }
        std::this_thread::sleep_for(20ms);
        for (int fd : fds) ::close(fd);
      }
    });
  std::this_thread::sleep_for(300ms);  // the attack is on
  // Both nodes join as the agent does (supervisor.cpp's join loop): a connection the server
  // drops before its HELLO is read (the oldest of kMaxUnjoined strangers, Note [Barrier
  // trust]) is made again, 200 ms later, as many times as it takes.
  agent::BarrierClient clients[2];
  bool started[2] = {false, false}, hello[2] = {false, false};
  int joins[2] = {0, 0};
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + 10s;
  while (!(started[0] && started[1]) && std::chrono::steady_clock::now() < deadline)
    for (int node = 0; node < 2; ++node) {
      if (started[node]) continue;
      if (!hello[node] || clients[node].lost()) {
        if (joins[node] > 0) std::this_thread::sleep_for(200ms);
        ++joins[node];
        hello[node] = client_hello(clients[node], server.port(), node);
        if (!hello[node]) continue;
      }
      if (auto m = clients[node].poll(20ms); m && m->verb == "START") started[node] = true;
    }
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (auto& t : attackers) t.join();
  std::printf("START %.3f s after the first connect (joins: node 0 %d, node 1 %d), under %ld stranger connections "
              "that never read\n", took, joins[0], joins[1], sent.load());
  ASSERT_TRUE(started[0] && started[1]);
  EXPECT_LT(took, 2.0);
  EXPECT_GT(sent.load(), 50);
}

// A stranger that says nothing is closed at its HELLO deadline (kHelloTimeout, 10 s).
TEST(BarrierHostile, ASilentConnectionIsClosedAtItsHelloDeadline) {
  agent::BarrierServer server(server_config(2), "127.0.0.1", 0);
  int fd = lockstep::test::dial_loopback(server.port());
  ASSERT_GE(fd, 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_line(fd, 5s).rfind("CHALLENGE", 0), 0u);
  EXPECT_TRUE(closed_by_peer(fd, agent::kHelloTimeout + 3s));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a silent connection was closed after %.1f s\n", took);
  EXPECT_GE(took, 9.5);
  ::close(fd);
}

// Thousands of idle strangers, each holding as much as it may before HELLO: the agent stays
// small, and real agents still join.
TEST(BarrierHostile, ThousandsOfIdleConnectionsKeepTheAgentSmall) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 8192);
  ::setrlimit(RLIMIT_NOFILE, &lim);
  const int n = static_cast<int>(std::min<rlim_t>(4000, lim.rlim_cur - 100));
  ASSERT_GT(n, 500) << "RLIMIT_NOFILE hard limit " << lim.rlim_max << " is too low for this test";

  std::string dir = temp_dir("idle");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, master, port, {"sh", "-c", "sleep 1"});
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << a0.output();
  std::this_thread::sleep_for(500ms);
  long before = rss_kb(a0.proc.pid());
  std::vector<int> fds;
  const std::string almost = "HELLO " + std::string(agent::kMaxUnjoinedBytes - 10, 'x');  // no newline
  long peak = before;
  for (int i = 0; i < n; ++i) {
    int fd = lockstep::test::dial_loopback(port);
    if (fd < 0) break;
    ::send(fd, almost.data(), almost.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    fds.push_back(fd);
    if (i % 250 == 0) peak = std::max(peak, rss_kb(a0.proc.pid()));
  }
  std::this_thread::sleep_for(1s);
  peak = std::max(peak, rss_kb(a0.proc.pid()));
  std::printf("agent RSS %ld kB before, at most %ld kB with %zu idle connections of %zu bytes each\n", before, peak,
              fds.size(), almost.size());
  EXPECT_LT(peak, 50 * 1024);
  auto a1 = start_agent(dir, 2, 1, master, port, {"sh", "-c", "sleep 1"});
  auto s0 = a0.proc.wait_for(60s), s1 = a1.proc.wait_for(60s);
  for (int fd : fds) ::close(fd);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
  // Dropped strangers are logged at most 5 a minute one by one.
  auto log0 = a0.output();
  size_t lines = 0;
  for (size_t pos = 0; (pos = log0.find("closing a connection", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_LE(lines, 5u) << log0;
}

// At the fd limit the listener is rested, not polled in a loop. The server runs in this
// process: its descriptors are used up here, and a child process holds connections waiting in
// the backlog.
TEST(BarrierHostile, AtTheFdLimitTheServerStaysIdle) {
  agent::BarrierServer server(server_config(2), "127.0.0.1", 0);
  const int port = server.port();
  rlimit old{};
  ::getrlimit(RLIMIT_NOFILE, &old);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  int ready[2];
  ::close(filler.back());
  filler.pop_back();
  ::close(filler.back());
  filler.pop_back();
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    for (int fd : filler) ::close(fd);
    rlimit r = old;
    ::setrlimit(RLIMIT_NOFILE, &r);
    for (int i = 0; i < 100; ++i) lockstep::test::dial_loopback(port);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  timespec a{}, b{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  auto w0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(2s);
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  double cpu = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  std::printf("at EMFILE with 100 connections waiting: %.1f%% of a core over %.1f s\n", 100 * cpu / wall, wall);
  EXPECT_LT(cpu / wall, 0.20);
  // Descriptors back: the strangers go and real agents join.
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &old);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  agent::BarrierClient c0, c1;
  ASSERT_TRUE(client_hello(c0, port, 0));
  ASSERT_TRUE(client_hello(c1, port, 1));
  EXPECT_TRUE(wait_for(c0, "START", 15s));
}

// Hostile text: invalid UTF-8, a 1 MB line, newlines that would forge log lines, ANSI escapes.
// From a stranger it reaches node 0's log only escaped; from a member (which holds the secret)
// its FAILED reaches every termination message only cleaned and bounded.
TEST(BarrierHostile, HostileTextNeverAppearsRaw) {
  std::string dir = temp_dir("text");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  // Node 0's worker waits to be stopped; the "node 1" here is this test, with the secret.
  auto a0 = start_agent(dir, 2, 0, master, port, {"sh", "-c", "sleep 60"});
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << a0.output();
  const std::string forged = "\n[2099-01-01 00:00:00] [agent] INFO forged line\x1b[2J\x1b[31m\xff\xfe\xc0\xaf\xed\xa0\x80";
  // Strangers: each a refused or dropped connection, never raw in the log.
  try_hello(port, "HELLO node=" + forged.substr(1) + " run=x");
  try_hello(port, "HELLO node=1" + std::string(1 << 20, '\x1b'));
  try_hello(port, "\x1b[2J\xff\xfe" + forged);
  // A member's hostile report.
  int fd = lockstep::test::dial_loopback(port);
  ASSERT_GE(fd, 0);
  send_all(fd, member_hello(read_line(fd, 5s), 1) + "\n");
  std::string start;
  for (int i = 0; i < 10 && start.rfind("START", 0) != 0; ++i) start = read_line(fd, 5s);
  ASSERT_EQ(start.rfind("START", 0), 0u) << start << a0.output();
  std::string tail;
  for (int i = 0; i < 20000; ++i) tail += "line " + std::to_string(i) + forged + "\n";
  agent::Message failed{"FAILED", {{"gen", "0"}, {"node", "0"}, {"rank", "1"}, {"code", "3"}, {"reason", forged},
                                   {"at", "1"}, {"what", "rank 1 died" + forged + std::string(10000, 'w')},
                                   {"tail", tail.substr(0, 10000)}}};
  send_all(fd, agent::encode(failed) + "\n");
  for (std::string l; (l = read_line(fd, 15s)).rfind("STOP", 0) != 0;) ASSERT_FALSE(l.empty()) << a0.output();
  send_all(fd, "STOPPED gen=0\n");
  auto s0 = a0.proc.wait_for(60s);
  ::close(fd);
  ASSERT_TRUE(s0) << a0.output();
  EXPECT_EQ(s0->shell_code(), 3) << a0.output();
  const std::string log0 = a0.output(), term = lockstep::test::read_file(a0.termination);
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"node 0's log", log0}, {"termination message", term}}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text.substr(0, 4000);
    EXPECT_TRUE(valid_utf8(text)) << "invalid UTF-8 in " << name;
  }
  // In the log, a forged line never starts a line of its own (the cause's tail is quoted
  // behind "  | "); in the termination message, the why line holds the member's words on one
  // line, and only the tail (the failing program's own last lines) may span lines.
  EXPECT_EQ(log0.find("\n[2099-01-01"), std::string::npos) << log0.substr(0, 4000);
  EXPECT_LE(term.size(), 4096u);
  auto first_line = term.substr(0, term.find('\n'));
  EXPECT_EQ(first_line.rfind("lockstep-agent: rank 1 died", 0), 0u) << term.substr(0, 2000);
  EXPECT_NE(first_line.find("forged line"), std::string::npos) << first_line;
  // The cause is the connection's node, not what the member claimed (node=0).
  EXPECT_NE(log0.find("on node 1 first"), std::string::npos) << log0.substr(0, 4000);
  EXPECT_LT(log0.size(), 64u * 1024) << "the 1 MB line reached the log";
}

// ---- Note [Heartbeats]: a member's silence and its heartbeats ----

// Joins node 0's agent on `port` as member `node` with the job's secret, on a raw socket; the
// socket once START has come, else -1.
int join_as_member(int port, int node) {
  int fd = lockstep::test::dial_loopback(port);
  if (fd < 0) return -1;
  send_all(fd, member_hello(read_line(fd, 5s), node) + "\n");
  for (int i = 0; i < 20; ++i) {
    std::string line = read_line(fd, 5s);
    if (line.rfind("START", 0) == 0) return fd;
    if (line.empty()) break;
  }
  ::close(fd);
  return -1;
}

// A member that joins and then says nothing (it reads what node 0's agent says, so its
// connection looks fine to TCP) is dropped once the peer timeout has passed, and the job ends
// with 76 naming it.
TEST(BarrierHostile, AMemberThatJoinsAndThenSaysNothingIsDroppedAfterThePeerTimeout) {
  std::string dir = temp_dir("mute");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, master, port, {"sh", "-c", "sleep 60"}, kSecret, {{"LOCKSTEP_PEER_TIMEOUT", "2s"}});
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << a0.output();
  int fd = join_as_member(port, 1);
  ASSERT_GE(fd, 0) << a0.output();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(closed_by_peer(fd, 15s)) << a0.output();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  std::printf("a member that said nothing after START was dropped after %.1f s (--peer-timeout 2s)\n", took);
  EXPECT_GE(took, 1.8);
  EXPECT_LT(took, 6.0);
  auto s0 = a0.proc.wait_for(30s);
  ASSERT_TRUE(s0) << a0.output();
  EXPECT_EQ(s0->shell_code(), lockstep::contract::kExitRendezvous) << a0.output();
  const std::string why = R"(node 1's agent \(127\.0\.0\.1:\d+\) said nothing for [0-9.]+ s \(more than LOCKSTEP_PEER_TIMEOUT, )"
                          R"(2 s\); treating it as lost)";
  EXPECT_TRUE(std::regex_search(a0.output(), std::regex(why))) << a0.output();
  EXPECT_TRUE(std::regex_search(lockstep::test::read_file(a0.termination), std::regex(why)));
}

// A member may send heartbeats as fast as it can: node 0's agent reads them at kMemberReadRate
// at most, so the flood costs it little, and the member keeps its seat through to the job's
// end. A heartbeat longer than kMaxHeartbeatBytes is no heartbeat: the member is closed.
TEST(BarrierHostile, AMemberThatSendsOnlyHeartbeatsKeepsItsSeatButCannotFloodTheServer) {
  std::string dir = temp_dir("flood");
  int master = lockstep::free_loopback_port(), port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, master, port, {"sh", "-c", "sleep 8"}, kSecret, {{"LOCKSTEP_PEER_TIMEOUT", "2s"}});
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << a0.output();
  int fd = join_as_member(port, 1);
  ASSERT_GE(fd, 0) << a0.output();
  int small = 16 * 1024;  // what waits in this side's buffer when the flood ends: little
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  std::string chunk;
  for (int i = 0; i < 1024; ++i) chunk += "ALIVE\n";
  const double cpu0 = cpu_seconds(a0.proc.pid());
  const auto w0 = std::chrono::steady_clock::now();
  size_t sent = 0;
  while (std::chrono::steady_clock::now() - w0 < 3s) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double cpu = cpu_seconds(a0.proc.pid()) - cpu0;
  std::printf("a member flooding heartbeats got %.0f KiB into the connection in %.1f s; node 0's agent used %.1f%% of a "
              "core\n", static_cast<double>(sent) / 1024, wall, 100 * cpu / wall);
  EXPECT_LT(cpu / wall, 0.25);
  EXPECT_GT(sent, agent::kMemberReadRate) << "the flood hardly flowed: is the member still read?";
  // Its seat is kept: it heartbeats at a member's pace, says DONE, and both nodes finish with 0.
  send_all(fd, "DONE gen=0\n");
  std::optional<agent::Message> exit;
  // A line cut by a read's short timeout is kept for the next (`partial`): on a loaded machine
  // the EXIT line came in two pieces, neither of which decodes (a run of the suite here on
  // 2026-11-28, beside the cluster lane, waited 30 s for an EXIT the server had sent).
  std::string partial;
  bool closed = false;
  for (auto end = std::chrono::steady_clock::now() + 30s; !exit && !closed && std::chrono::steady_clock::now() < end;) {
    send_all(fd, "ALIVE\n");
    for (auto next = std::chrono::steady_clock::now() + 400ms; !exit && !closed && std::chrono::steady_clock::now() < next;)
      if (auto m = agent::decode(read_line(fd, 100ms, &closed, &partial)); m && m->verb == "EXIT") exit = m;
  }
  ::close(fd);
  ASSERT_TRUE(exit) << a0.output();
  EXPECT_EQ(exit->get_int("exit"), 0) << exit->get("why");
  auto s0 = a0.proc.wait_for(30s);
  ASSERT_TRUE(s0) << a0.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(a0.output().find("closing node 1"), std::string::npos) << a0.output();

  // A heartbeat that carries more than its bound.
  auto b0 = start_agent(temp_dir("fat-heartbeat"), 2, 0, master, port, {"sh", "-c", "sleep 60"}, kSecret);
  ASSERT_TRUE(eventually([&] { return listening(port); }, 20s)) << b0.output();
  fd = join_as_member(port, 1);
  ASSERT_GE(fd, 0) << b0.output();
  send_all(fd, "ALIVE pad=" + std::string(200, 'x') + "\n");
  EXPECT_TRUE(closed_by_peer(fd, 10s));
  ::close(fd);
  auto sb = b0.proc.wait_for(30s);
  ASSERT_TRUE(sb) << b0.output();
  EXPECT_EQ(sb->shell_code(), lockstep::contract::kExitRendezvous) << b0.output();
  EXPECT_NE(b0.output().find("closing node 1's connection: a heartbeat of 210 bytes (at most 64)"), std::string::npos)
      << b0.output();
}

// Sanitizing in isolation: the cases the suite above relies on.
TEST(BarrierHostile, CleanTextKeepsValidUtf8AndDropsControls) {
  EXPECT_EQ(agent::clean_text("a\x1b[31mb\nc\td", 100), "a[31mbc d");
  EXPECT_EQ(agent::clean_text("a\nb", 100, true), "a\nb");
  EXPECT_EQ(agent::clean_text("\xff" "a", 100), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(agent::clean_text("\xc0\xaf", 100), "\xEF\xBF\xBD\xEF\xBF\xBD");         // overlong '/'
  EXPECT_EQ(agent::clean_text("\xed\xa0\x80", 100), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(agent::clean_text("\xc2\x9b" "x", 100), "x");                            // C1 CSI
  EXPECT_EQ(agent::clean_text("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 100), "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(agent::clean_text("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac");         // never a split character
  EXPECT_EQ(agent::clean_text("abcdef", 3, false, true), "def");
  EXPECT_EQ(agent::log_escape("a\nb\x1b"), "a\\x0ab\\x1b");
  EXPECT_EQ(agent::log_escape(std::string(100, 'a'), 4), "aaaa...(100 bytes)");
  agent::Failure f{1, 2, 9999, "Evil\n", 5, std::string(5000, 'w'), std::string(5000, 't')};
  auto g = agent::sanitize_failure(f);
  EXPECT_EQ(g.reason, "WorkerFailed");
  EXPECT_EQ(g.code, 1);
  EXPECT_EQ(g.what.size(), agent::kFailureWhatBytes);
  EXPECT_EQ(g.tail.size(), agent::kFailureTailBytes);
}

TEST(BarrierHostile, ProofsDependOnEverythingTheyCover) {
  const std::string p = agent::barrier_proof(kSecret, "n", 1, 2, "run");
  EXPECT_EQ(p.size(), 64u);
  EXPECT_TRUE(agent::proof_matches(p, agent::barrier_proof(kSecret, "n", 1, 2, "run")));
  EXPECT_FALSE(agent::proof_matches(p, agent::barrier_proof(kSecret + "x", "n", 1, 2, "run")));
  EXPECT_FALSE(agent::proof_matches(p, agent::barrier_proof(kSecret, "m", 1, 2, "run")));
  EXPECT_FALSE(agent::proof_matches(p, agent::barrier_proof(kSecret, "n", 0, 2, "run")));
  EXPECT_FALSE(agent::proof_matches(p, agent::barrier_proof(kSecret, "n", 1, 3, "run")));
  EXPECT_FALSE(agent::proof_matches(p, agent::barrier_proof(kSecret, "n", 1, 2, "ru")));
  EXPECT_FALSE(agent::proof_matches(p, ""));
  EXPECT_FALSE(agent::proof_matches(p, p.substr(0, 63)));
}
