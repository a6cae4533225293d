// The operator's reads of rank 0's agent (controller/agent_reader.hpp, Note [Reading agents]):
// one HTTP/1.0 GET per agent, bounded in size and time, many at once, against loopback peers.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent_page.hpp"
#include "controller/agent_reader.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::test::agent_page;  // agent_page.hpp

namespace {

using lockstep::controller::AgentLimits;
using lockstep::controller::AgentTarget;
using lockstep::controller::read_agents;

// A loopback TCP server that hands each connection to `serve` on a thread of its own.
class Peer {
 public:
  explicit Peer(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] {
      while (true) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // shut down
        std::lock_guard<std::mutex> lock(mu_);
        conns_.push_back(c);
        threads_.emplace_back([this, c] { serve_(c); });
      }
    });
  }
  ~Peer() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    accepter_.join();
    ::close(fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : threads_) t.join();
    for (int c : conns_) ::close(c);
  }
  int port() const { return port_; }
  bool stopping() const { return stopping_; }

  // Reads the request's head, then writes `answer` and closes its side.
  static std::function<void(int)> answers(std::string answer) {
    return [answer](int fd) {
      read_head(fd);
      write_all(fd, answer);
      ::shutdown(fd, SHUT_WR);
    };
  }
  static std::string read_head(int fd) {
    std::string got;
    char b[1024];
    while (got.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n <= 0) break;
      got.append(b, static_cast<size_t>(n));
    }
    return got;
  }
  static bool write_all(int fd, const std::string& s) { return lockstep::test::send_all(fd, s); }

 private:
  std::function<void(int)> serve_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
};

std::string ok(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(AgentReader, ReadsAnAgentsPageWithOneHttp10Get) {
  std::mutex mu;
  std::string request;
  const std::string page = agent_page(12, 200, 12, 6144);
  Peer peer([&](int fd) {
    std::string head = Peer::read_head(fd);
    {
      std::lock_guard<std::mutex> lock(mu);
      request = head;
    }
    Peer::write_all(fd, ok(page));
    // and keeps the connection open, as a keep-alive server would: the length ends the answer
    while (!peer.stopping()) std::this_thread::sleep_for(10ms);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto a = read_agents({{"127.0.0.1", peer.port()}});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_TRUE(a[0].body.has_value()) << a[0].error;
  EXPECT_EQ(*a[0].body, page);
  EXPECT_LT(seconds_since(t0), 1.0) << "waited for the connection to close";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(request.rfind("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(peer.port()) + "\r\n", 0), 0u)
      << request;
}

TEST(AgentReader, ABodyWithoutALengthEndsWithTheConnection) {
  Peer peer(Peer::answers("HTTP/1.0 200 OK\r\n\r\nlockstep_step{rank=\"0\"} 3\n"));
  auto a = read_agents({{"127.0.0.1", peer.port()}});
  ASSERT_TRUE(a[0].body.has_value()) << a[0].error;
  EXPECT_EQ(*a[0].body, "lockstep_step{rank=\"0\"} 3\n");
}

TEST(AgentReader, AnythingButAWhole200IsNoAnswer) {
  struct Case {
    std::string answer, error;
  };
  for (const auto& c : std::vector<Case>{
           {"HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/metrics\r\nContent-Length: 0\r\n\r\n", "302"},  // not followed
           {"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno", "500"},
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "transfer encoding"},
           {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "before the whole body"},
           {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"},
           {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "Content-Length"},
           {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header"},
           {"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not HTTP"},
           {"HTTP/1.1 20 OK\r\n\r\n", "not HTTP"},
           {"HTTP/1.1 200 OK", "before a whole HTTP head"},
           {"", "before a whole HTTP head"},
       }) {
    Peer peer(Peer::answers(c.answer));
    auto a = read_agents({{"127.0.0.1", peer.port()}});
    EXPECT_FALSE(a[0].body.has_value()) << c.answer;
    EXPECT_NE(a[0].error.find(c.error), std::string::npos) << c.answer << " -> " << a[0].error;
  }
}

TEST(AgentReader, ALongAnswerIsCutAtTheLimitAndNeverKept) {
  std::atomic<size_t> written{0};
  Peer peer([&](int fd) {
    Peer::read_head(fd);
    std::string chunk(64 << 10, 'x');
    if (!Peer::write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")) return;
    while (Peer::write_all(fd, chunk) && written < (64u << 20)) written += chunk.size();
  });
  AgentLimits limits;
  limits.max_bytes = 256 << 10;
  auto a = read_agents({{"127.0.0.1", peer.port()}}, limits);
  EXPECT_FALSE(a[0].body.has_value());
  EXPECT_NE(a[0].error.find("exceeds 262144 bytes"), std::string::npos) << a[0].error;
  // A head that never ends is cut too, long before the byte limit.
  Peer endless_head([&](int fd) {
    Peer::read_head(fd);
    Peer::write_all(fd, "HTTP/1.1 200 OK\r\n");
    while (Peer::write_all(fd, "X-Padding: " + std::string(1000, 'p') + "\r\n")) {}
  });
  a = read_agents({{"127.0.0.1", endless_head.port()}}, limits);
  EXPECT_NE(a[0].error.find("HTTP head exceeds"), std::string::npos) << a[0].error;
}

TEST(AgentReader, ASilentOrTricklingPeerIsCutOffAtTheDeadline) {
  Peer silent([&](int fd) {
    Peer::read_head(fd);
    while (!silent.stopping()) std::this_thread::sleep_for(10ms);
  });
  Peer trickle([&](int fd) {
    Peer::read_head(fd);
    std::string answer = ok(std::string(100000, 'x'));
    for (char c : answer) {  // a byte every 20 ms: every single read is quick, the whole is not
      if (trickle.stopping() || !Peer::write_all(fd, std::string(1, c))) return;
      std::this_thread::sleep_for(20ms);
    }
  });
  AgentLimits limits;
  limits.deadline = 400ms;
  for (int port : {silent.port(), trickle.port()}) {
    auto t0 = std::chrono::steady_clock::now();
    auto a = read_agents({{"127.0.0.1", port}}, limits);
    double took = seconds_since(t0);
    EXPECT_FALSE(a[0].body.has_value());
    EXPECT_NE(a[0].error.find("within 400 ms"), std::string::npos) << a[0].error;
    EXPECT_GE(took, 0.35);
    EXPECT_LT(took, 1.5);
  }
}

TEST(AgentReader, ManyPeersAreReadTogetherAtMostMaxInFlightAtOnce) {
  // The reader's connections open at once, counted by the kernel's state of the peer's end:
  // one the reader has closed is in CLOSE_WAIT at once, however late this side's thread gets
  // to it (a count of handlers not yet past their read of EOF saw 10 of 8 on a busy machine).
  std::mutex mu;
  std::set<int> fds;
  int most = 0;
  auto count_open = [&] {
    int n = 0;
    for (int f : fds) {
      tcp_info info{};
      socklen_t len = sizeof info;
      n += ::getsockopt(f, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_ESTABLISHED;
    }
    most = std::max(most, n);
  };
  Peer silent([&](int fd) {
    {
      std::lock_guard<std::mutex> lock(mu);
      fds.insert(fd);
      count_open();
    }
    Peer::read_head(fd);
    char b;
    while (::recv(fd, &b, 1, 0) > 0) {}  // silent until the reader gives up and closes
    std::lock_guard<std::mutex> lock(mu);
    fds.erase(fd);
  });
  const std::string page = agent_page(5, 10, 5);
  Peer good(Peer::answers(ok(page)));
  std::vector<AgentTarget> targets;
  for (int i = 0; i < 24; ++i) targets.push_back({"127.0.0.1", i % 3 == 0 ? good.port() : silent.port()});
  AgentLimits limits;
  limits.deadline = 300ms;
  limits.max_in_flight = 8;
  auto t0 = std::chrono::steady_clock::now();
  auto a = read_agents(targets, limits);
  double took = seconds_since(t0);
  // 16 silent peers, 8 at a time: about two deadlines, not sixteen.
  EXPECT_LT(took, 1.5);
  EXPECT_LE(most, 8);
  EXPECT_GE(most, 2) << "no two reads at once";
  for (size_t i = 0; i < targets.size(); ++i)
    EXPECT_EQ(a[i].body.has_value(), i % 3 == 0) << i << ": " << a[i].error;
  EXPECT_EQ(a[0].body.value_or(""), page);
}

TEST(AgentReader, OnlyIpLiteralsAndRealPortsAreDialled) {
  auto a = read_agents({{"tj-0.tj.ns.svc", 9400}, {"", 9400}, {"127.0.0.1", 0}, {"127.0.0.1", 70000},
                        {"10.0.0.1/../x", 9400}});
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FALSE(a[i].body.has_value()) << i;
  EXPECT_NE(a[0].error.find("not an IP address"), std::string::npos) << a[0].error;
  EXPECT_NE(a[2].error.find("not in 1..65535"), std::string::npos) << a[2].error;
  // A closed port is a quick refusal.
  int closed = lockstep::free_loopback_port();
  auto t0 = std::chrono::steady_clock::now();
  a = read_agents({{"127.0.0.1", closed}, {"::1", closed}});
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_NE(a[0].error.find("connect"), std::string::npos) << a[0].error;
  EXPECT_FALSE(a[1].body.has_value());
}

TEST(AgentReader, StopEndsARoundAtOnce) {
  Peer silent([&](int fd) {
    Peer::read_head(fd);
    while (!silent.stopping()) std::this_thread::sleep_for(10ms);
  });
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  auto a = read_agents(std::vector<AgentTarget>(40, {"127.0.0.1", silent.port()}), AgentLimits{}, &stop);
  stopper.join();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(a.back().error, "stopped");
}

// --- Note [Final progress] ------------------------------------------------------------------
