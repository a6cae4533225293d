// The HTTP edges against hostile peers, over real loopback sockets (Note [Reading agents],
// Note [Listener limits]):
//   - the operator's reads of rank 0's agent (controller/agent_reader.hpp) against fake agents
//     that redirect, answer without end, trickle, never answer, and a stop mid-round;
//   - the real lockstep-operator's :8080 and the real lockstep-agent's /metrics under hundreds
//     of connections that trickle a head without end, send 10 MB heads and endless bodies, and
//     never read their answer: the probe and the scrape still answer within 1 s, and the
//     process's memory stays bounded (and the operator's threads do not grow).
// Figures are printed ("figure: ...") for docs/operator.md.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent_support.hpp"
#include "controller/agent_reader.hpp"
#include "lockstep/listener_limits.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::controller::AgentAnswer;
using lockstep::controller::AgentLimits;
using lockstep::controller::AgentTarget;
using lockstep::controller::read_agents;
using lockstep::test::env_or;
using lockstep::test::proc_status;
using Clock = std::chrono::steady_clock;

namespace {

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

int listen_loopback(int backlog = 128) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

using lockstep::test::send_all;  // test_util.hpp

// A fake agent: accepts on loopback and runs `serve` on each connection in its own thread
// until the peer is gone or the fake is destroyed.
class FakeAgent {
 public:
  explicit FakeAgent(std::function<void(int fd, const std::atomic<bool>& stop)> serve) : serve_(std::move(serve)) {
    fd_ = listen_loopback();
    port = port_of(fd_);
    acceptor_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        ++accepted;
        std::lock_guard<std::mutex> lock(mu_);
        conns_.emplace_back([this, c] {
          // Read the request head first, as a server would.
          char buf[4096];
          std::string head;
          pollfd p{c, POLLIN, 0};
          while (head.find("\r\n\r\n") == std::string::npos && ::poll(&p, 1, 1000) > 0) {
            ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0) break;
            head.append(buf, static_cast<size_t>(n));
          }
          serve_(c, stop_);
          ::close(c);
        });
      }
    });
  }
  ~FakeAgent() {
    stop_ = true;
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }
  int port = 0;
  std::atomic<int> accepted{0};

 private:
  std::function<void(int, const std::atomic<bool>&)> serve_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

const std::string kMetrics = "lockstep_step{rank=\"0\"} 12\n";

TEST(AgentReader, AnswersOneWellFormedAgent) {
  FakeAgent ok([](int fd, const std::atomic<bool>&) {
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kMetrics.size()) + "\r\n\r\n" + kMetrics);
  });
  auto answers = read_agents({{"127.0.0.1", ok.port}});
  ASSERT_TRUE(answers[0].body) << answers[0].error;
  EXPECT_EQ(*answers[0].body, kMetrics);
}

TEST(AgentReader, FollowsNoRedirect) {
  FakeAgent target([](int fd, const std::atomic<bool>&) {
    send_all(fd, "HTTP/1.0 200 OK\r\n\r\n" + kMetrics);
  });
  FakeAgent redirecting([&](int fd, const std::atomic<bool>&) {
    send_all(fd, "HTTP/1.0 302 Found\r\nLocation: http://127.0.0.1:" + std::to_string(target.port) +
                     "/metrics\r\nContent-Length: 0\r\n\r\n");
  });
  auto answers = read_agents({{"127.0.0.1", redirecting.port}});
  EXPECT_FALSE(answers[0].body);
  EXPECT_NE(answers[0].error.find("302"), std::string::npos) << answers[0].error;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(redirecting.accepted, 1);
  EXPECT_EQ(target.accepted, 0) << "the redirect was followed";
}

TEST(AgentReader, ReadsOnlyIpLiterals) {
  FakeAgent ok([](int fd, const std::atomic<bool>&) { send_all(fd, "HTTP/1.0 200 OK\r\n\r\n" + kMetrics); });
  auto answers = read_agents({{"localhost", ok.port}, {"127.1", ok.port}, {"127.0.0.1 ", ok.port}});
  for (const auto& a : answers) {
    EXPECT_FALSE(a.body);
    EXPECT_NE(a.error.find("not an IP address"), std::string::npos) << a.error;
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ok.accepted, 0);
}

// 16 agents (max_in_flight) answering 200 and then bytes without end, as fast as loopback
// takes them: every answer is dropped at max_bytes, and the memory held is bounded by
// max_in_flight x max_bytes whatever they send.
TEST(AgentReader, EndlessBodiesAreDroppedInBoundedMemory) {
  std::atomic<long long> sent{0};
  FakeAgent endless([&](int fd, const std::atomic<bool>& stop) {
    if (!send_all(fd, "HTTP/1.0 200 OK\r\n\r\n")) return;
    const std::string chunk(64 << 10, 'x');
    while (!stop && send_all(fd, chunk)) sent += static_cast<long long>(chunk.size());
  });
  AgentLimits limits;  // the defaults: 1 MiB, 16 at once, 2 s
  std::vector<AgentTarget> targets(16, AgentTarget{"127.0.0.1", endless.port});
  long rss0 = proc_status(0, "VmRSS"), hwm0 = proc_status(0, "VmHWM");
  auto t0 = Clock::now();
  auto answers = read_agents(targets, limits);
  long long took = ms_since(t0);
  long hwm1 = proc_status(0, "VmHWM");
  for (const auto& a : answers) {
    EXPECT_FALSE(a.body);
    EXPECT_NE(a.error.find("exceeds"), std::string::npos) << a.error;
  }
  // The peak can only be measured against the process's earlier peak: growth beyond it.
  long growth_kib = std::max(0L, hwm1 - std::max(hwm0, rss0));
  std::cout << "figure: 16 endless answers dropped in " << took << " ms after " << sent / 1024
            << " KiB sent; peak RSS growth " << growth_kib << " KiB (bound: 16 x 1 MiB, with string growth 2x)\n";
  EXPECT_LT(took, limits.deadline.count() + 500);
  EXPECT_LT(growth_kib, 2 * 16 * 1024 + 8 * 1024);
}

// A 200 head, then one byte every 100 ms for ever: cut off at the total deadline.
TEST(AgentReader, TrickleIsCutAtTheTotalDeadline) {
  FakeAgent drip([](int fd, const std::atomic<bool>& stop) {
    if (!send_all(fd, "HTTP/1.0 200 OK\r\nContent-Length: 1000000\r\n\r\n")) return;
    while (!stop && send_all(fd, "x")) std::this_thread::sleep_for(100ms);
  });
  AgentLimits limits;
  limits.deadline = 1000ms;
  auto t0 = Clock::now();
  auto answers = read_agents({{"127.0.0.1", drip.port}}, limits);
  long long took = ms_since(t0);
  std::cout << "figure: a 1 byte / 100 ms trickle cut after " << took << " ms (deadline 1000 ms)\n";
  EXPECT_FALSE(answers[0].body);
  EXPECT_NE(answers[0].error.find("within 1000 ms"), std::string::npos) << answers[0].error;
  EXPECT_GE(took, 1000);
  EXPECT_LT(took, 1000 + 300);
}

// 40 agents whose connection is accepted (by the kernel) and never answered: a round costs a
// deadline per max_in_flight of them.
TEST(AgentReader, SilentAgentsCostADeadlinePerMaxInFlight) {
  int silent = listen_loopback(256);  // never accepted: the kernel completes the connects
  ASSERT_GE(silent, 0);
  AgentLimits limits;
  limits.deadline = 500ms;
  limits.max_in_flight = 8;
  const size_t n = 40;
  std::vector<AgentTarget> targets(n, AgentTarget{"127.0.0.1", port_of(silent)});
  auto t0 = Clock::now();
  auto answers = read_agents(targets, limits);
  long long took = ms_since(t0);
  ::close(silent);
  const long long rounds = static_cast<long long>((n + limits.max_in_flight - 1) / limits.max_in_flight);
  std::cout << "figure: " << n << " silent agents, " << limits.max_in_flight << " at once, deadline 500 ms: round "
            << took << " ms (bound " << rounds * 500 << " ms + margin)\n";
  for (const auto& a : answers) EXPECT_FALSE(a.body);
  EXPECT_GE(took, rounds * 500);
  EXPECT_LT(took, rounds * 500 + 500);
}

// A replica that loses its lease or is asked to stop sets the controller's stopping flag,
// which the progress thread passes to read_agents (ProgressPoller::poll): the round ends
// within kStopLatency of it, whatever the agents do.
TEST(AgentReader, StopEndsARoundPromptly) {
  int silent = listen_loopback(256);
  ASSERT_GE(silent, 0);
  FakeAgent drip([](int fd, const std::atomic<bool>& stop) {
    if (!send_all(fd, "HTTP/1.0 200 OK\r\n\r\n")) return;
    while (!stop && send_all(fd, "x")) std::this_thread::sleep_for(10ms);
  });
  AgentLimits limits;
  limits.deadline = 10s;
  std::vector<AgentTarget> targets;
  for (int i = 0; i < 40; ++i) targets.push_back({"127.0.0.1", i % 2 ? port_of(silent) : drip.port});
  std::atomic<bool> stop{false};
  Clock::time_point stopped_at;
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    stopped_at = Clock::now();
    stop = true;
  });
  auto answers = read_agents(targets, limits, &stop);
  auto returned = Clock::now();
  stopper.join();
  ::close(silent);
  long long after_stop = std::chrono::duration_cast<std::chrono::milliseconds>(returned - stopped_at).count();
  std::cout << "figure: read_agents returned " << after_stop << " ms after stop was set (bound "
            << lockstep::controller::kStopLatency.count() << " ms)\n";
  for (const auto& a : answers) EXPECT_FALSE(a.body);
  EXPECT_EQ(answers.back().error, "stopped");
  EXPECT_LT(after_stop, lockstep::controller::kStopLatency.count() + 100);
}

// --- The listeners ----------------------------------------------------------------------------

using lockstep::test::Get;
using lockstep::test::http_get;  // test_util.hpp

// Hostile peers against one port, from one thread: each kind keeps its number of connections
// open, reconnecting as the server drops them.
class Attack {
 public:
  struct Mix {
    int drip_heads = 0;   // a head that never ends, one byte every 100 ms
    int huge_heads = 0;   // a 10 MB head as fast as it goes
    int huge_bodies = 0;  // a small head announcing a 10 GB body, then the body as fast as it goes
    int non_readers = 0;  // a GET of `path` whose answer is never read
  };
  Attack(int port, Mix mix, std::string path) : port_(port), path_(std::move(path)) {
    auto add = [this](Kind kind, int n) {
      for (int i = 0; i < n; ++i) conns_.emplace_back().kind = kind;
    };
    add(Kind::Drip, mix.drip_heads);
    add(Kind::HugeHead, mix.huge_heads);
    add(Kind::HugeBody, mix.huge_bodies);
    add(Kind::NonReader, mix.non_readers);
    thread_ = std::thread([this] { run(); });
  }
  ~Attack() { stop(); }
  void stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
    for (auto& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
  }
  long long bytes_sent() const { return bytes_; }
  long long connections() const { return connects_; }

 private:
  enum class Kind { Drip, HugeHead, HugeBody, NonReader };
  struct Conn {
    Kind kind = Kind::Drip;
    int fd = -1;
    std::string pending;
    long long left = 0;  // bytes of the endless part still to send on this connection
    Clock::time_point next_drip{};
  };
  void open(Conn& c) {
    c.fd = lockstep::test::dial_loopback(port_, true);
    ++connects_;
    switch (c.kind) {
      case Kind::Drip: c.pending = "GET " + path_ + " HTTP/1.1\r\nHost: x\r\nX-Drip: "; c.left = 1LL << 40; break;
      case Kind::HugeHead: c.pending = "GET " + path_ + " HTTP/1.1\r\nX-Huge: "; c.left = 10'000'000; break;
      case Kind::HugeBody:
        c.pending = "POST " + path_ + " HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n";
        c.left = 10'000'000'000LL;
        break;
      case Kind::NonReader: c.pending = "GET " + path_ + " HTTP/1.1\r\nHost: x\r\n\r\n"; c.left = 0; break;
    }
  }
  void run() {
    static const std::string filler(64 << 10, 'a');
    for (auto& c : conns_) open(c);
    while (!stop_) {
      auto now = Clock::now();
      for (auto& c : conns_) {
        if (c.fd < 0) {
          open(c);
          continue;
        }
        char buf[4096];
        ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_PEEK);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != ENOTCONN)) {  // closed by the server
          ::close(c.fd);
          c.fd = -1;
          continue;
        }
        if (c.kind != Kind::NonReader && r > 0) ::recv(c.fd, buf, sizeof buf, 0);  // an answer: 413, 408...
        std::string_view out;
        if (!c.pending.empty()) {
          out = c.pending;
        } else if (c.left > 0) {
          if (c.kind == Kind::Drip) {
            if (now < c.next_drip) continue;
            c.next_drip = now + 100ms;
            out = std::string_view(filler.data(), 1);
          } else {
            out = std::string_view(filler.data(), static_cast<size_t>(std::min<long long>(c.left, filler.size())));
          }
        } else {
          continue;
        }
        ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != ENOTCONN) {
          ::close(c.fd);
          c.fd = -1;
          continue;
        }
        if (n <= 0) continue;
        bytes_ += n;
        if (!c.pending.empty()) c.pending.erase(0, static_cast<size_t>(n));
        else c.left -= n;
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  int port_;
  std::string path_;
  std::vector<Conn> conns_;
  std::atomic<bool> stop_{false};
  std::atomic<long long> bytes_{0}, connects_{0};
  std::thread thread_;
};

// Runs `attack` for `duration` against `port`, asking `path` every 100 ms meanwhile with a
// fresh connection; the slowest answer and the process's RSS are what counts.
struct Siege {
  long long slowest_ms = 0, answered = 0, asked = 0, connections = 0;
  long rss_before_kib = 0, rss_peak_kib = 0;
  long threads_before = 0, threads_most = 0;
};
Siege besiege(pid_t pid, int port, Attack::Mix mix, const std::string& attacked_path, const std::string& path,
              std::chrono::seconds duration) {
  Siege s;
  s.rss_before_kib = proc_status(pid, "VmRSS");
  s.threads_before = s.threads_most = proc_status(pid, "Threads");
  Attack attack(port, mix, attacked_path);
  std::this_thread::sleep_for(500ms);  // every attacker in place
  auto t0 = Clock::now();
  while (Clock::now() - t0 < duration) {
    Get g = http_get(port, path, 3000ms);
    ++s.asked;
    if (g.status == 200) ++s.answered;
    s.slowest_ms = std::max(s.slowest_ms, g.ms);
    s.rss_peak_kib = std::max(s.rss_peak_kib, proc_status(pid, "VmRSS"));
    s.threads_most = std::max(s.threads_most, proc_status(pid, "Threads"));
    std::this_thread::sleep_for(100ms);
  }
  s.rss_peak_kib = std::max(s.rss_peak_kib, proc_status(pid, "VmRSS"));
  s.connections = attack.connections();
  std::cout << "figure: " << attack.connections() << " hostile connections made (" << mix.drip_heads
            << " trickling heads, " << mix.huge_heads << " 10 MB heads, " << mix.huge_bodies << " endless bodies, "
            << mix.non_readers << " non-readers at a time), " << attack.bytes_sent() / (1 << 20) << " MiB sent; "
            << path << " answered " << s.answered << "/" << s.asked << ", slowest " << s.slowest_ms
            << " ms; RSS " << s.rss_before_kib << " KiB before, " << s.rss_peak_kib << " KiB at most; threads "
            << s.threads_before << " before, " << s.threads_most << " at most\n";
  attack.stop();
  return s;
}

bool wait_for_200(int port, const std::string& path, std::chrono::seconds timeout) {
  return lockstep::test::eventually([&] { return http_get(port, path, 1000ms).status == 200; }, timeout);
}

std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("http-hostile-" + name); }

// The real lockstep-operator, whose HTTP part needs no API server: a kubeconfig pointing at
// a closed port leaves it waiting to lead, serving /healthz meanwhile.
TEST(OperatorListener, HealthzAnswersUnderAttackInBoundedMemory) {
  std::string dir = temp_dir("operator");
  std::ofstream(dir + "/kubeconfig") << "apiVersion: v1\nkind: Config\n"
                                        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                                        "users: [{name: u, user: {token: t}}]\n"
                                        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                                        "current-context: x\n";
  int port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {env_or("LOCKSTEP_OPERATOR_BIN", "lockstep-operator"), "--kubeconfig", dir + "/kubeconfig",
             "--http-address", "127.0.0.1", "--http-port", std::to_string(port), "--leader-election-namespace",
             "default"};
  so.output_path = dir + "/operator.log";
  auto op = lockstep::Process::spawn(so);
  ASSERT_TRUE(wait_for_200(port, "/healthz", 20s)) << lockstep::test::read_file(so.output_path);

  // 600 slow heads (more than twice the 256 threads the civetweb listener had; fewer than
  // kOperatorListener.connections) and the other kinds beside them, for 3 head timeouts, so the
  // cut ones come back. The attackers' sockets and the operator's need descriptors.
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = std::max<rlim_t>(lim.rlim_cur, std::min<rlim_t>(lim.rlim_max, 4096));
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ASSERT_GE(lim.rlim_cur, 1024u) << "RLIMIT_NOFILE's hard limit is too low for 600 attackers";
  Attack::Mix mix{600, 8, 8, 8};
  static_assert(600 + 24 < lockstep::kOperatorListener.connections);
  auto s = besiege(op.pid(), port, mix, "/metrics", "/healthz", 6s);
  EXPECT_EQ(s.answered, s.asked);
  EXPECT_LT(s.slowest_ms, 1000);
  // Each connection holds at most the pool (16 KiB) and its share of an answer: 600 x 16 KiB
  // is under 10 MiB.
  EXPECT_LT(s.rss_peak_kib - s.rss_before_kib, 32 * 1024) << "KiB";
  // No thread per connection: the listener's loops and sweeper are there before the attack
  // (2 more allowed for whatever else the process starts meanwhile; civetweb had 257).
  EXPECT_LE(s.threads_most, s.threads_before + 2);
  // The trickling heads were cut at the head deadline (2 s) and came back: at least twice each.
  EXPECT_GE(s.connections, 2 * mix.drip_heads);
  EXPECT_EQ(http_get(port, "/metrics").status, 200);

  ::kill(op.pid(), SIGTERM);
  auto st = op.wait_for(20s);
  ASSERT_TRUE(st);
}

// The real lockstep-agent: Prometheus's scrape of /metrics answers while 24 peers trickle
// heads (the agent had 2 threads and a 30 s timeout: two such peers blinded it).
TEST(AgentListener, ScrapeAnswersUnderAttackInBoundedMemory) {
  std::string dir = temp_dir("agent");
  int port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--", "sleep", "60"};
  so.env = {{"LOCKSTEP_JOB_NAME", "tj"}, {"LOCKSTEP_JOB_NAMESPACE", "ns"}, {"LOCKSTEP_JOB_UID", "uid-1"},
            {"LOCKSTEP_NNODES", "1"}, {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "1"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"}, {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
            {"LOCKSTEP_AGENT_PORT", std::to_string(lockstep::free_loopback_port())},
            {"LOCKSTEP_RESTART_ATTEMPT", "0"}, {"LOCKSTEP_METRICS_PORT", std::to_string(port)}};
  so.output_path = dir + "/agent.log";
  auto agent = lockstep::Process::spawn(so);
  ASSERT_TRUE(wait_for_200(port, "/metrics", 20s)) << lockstep::test::read_file(so.output_path);

  Attack::Mix mix{24, 2, 2, 2};
  auto s = besiege(agent.pid(), port, mix, "/metrics", "/metrics", 6s);
  EXPECT_EQ(s.answered, s.asked);
  EXPECT_LT(s.slowest_ms, 1000);
  EXPECT_LT(s.rss_peak_kib - s.rss_before_kib, 32 * 1024) << "KiB";
  EXPECT_NE(http_get(port, "/metrics").body.find("lockstep_worker_up"), std::string::npos);

  ::kill(agent.pid(), SIGTERM);
  ASSERT_TRUE(agent.wait_for(20s));
}

}  // namespace
