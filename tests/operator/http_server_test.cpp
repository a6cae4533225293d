// operator/http_server.cpp: the operator's :8080 on real loopback sockets, in-process, under
// small limits so each bound of Note [Listener limits] shows in a second or two: the routes,
// a trickled head cut at its deadline, a head too big for the pool, an endless body, an answer
// nobody reads, many connections and no thread for any, and the connection limit.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http_server.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::EventListenerLimits;
using lockstep::op::HttpAnswer;
using lockstep::op::HttpServer;
using lockstep::test::dial_loopback;
using lockstep::test::http_get;
using lockstep::test::send_all;
using Clock = std::chrono::steady_clock;

namespace {

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Reads until the server closes or `timeout`; the text read.
std::string read_to_close(int fd, std::chrono::milliseconds timeout) {
  std::string data;
  auto t0 = Clock::now();
  while (ms_since(t0) < timeout.count()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

// True once the server has closed `fd` (a read gives 0 or an error).
bool closed_by_server(int fd) {
  char c;
  ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

constexpr EventListenerLimits kSmall{2, 64, 300, 1, 4096, 128};

HttpServer serve(std::map<std::string, lockstep::op::HttpHandler> routes, const EventListenerLimits& limits = kSmall) {
  return HttpServer("127.0.0.1", 0, std::move(routes), limits);
}

TEST(HttpServer, ServesItsRoutesAndNothingElse) {
  HttpServer s("127.0.0.1", 0,
               {{"/a", [] { return HttpAnswer{200, "alpha\n"}; }},
                {"/boom", []() -> HttpAnswer { throw std::runtime_error("handler failed"); }}},
               kSmall);
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(s.url(), "http://127.0.0.1:" + std::to_string(s.port()));
  auto a = http_get(s.port(), "/a");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "alpha\n");
  EXPECT_EQ(http_get(s.port(), "/b").status, 404);
  auto boom = http_get(s.port(), "/boom");
  EXPECT_EQ(boom.status, 500);
  EXPECT_EQ(boom.body, "handler failed\n");

  int fd = dial_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string head = read_to_close(fd, 2000ms);
  ::close(fd);
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 6"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "HEAD answered with a body";

  fd = dial_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "DELETE /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string del = read_to_close(fd, 2000ms);
  ::close(fd);
  EXPECT_EQ(del.rfind("HTTP/1.1 405", 0), 0u) << del;
}

TEST(HttpServer, ListensOnIpv6AndSaysWhichAddressIsWrong) {
  HttpServer v6("::1", 0, {{"/a", [] { return HttpAnswer{200, "x"}; }}}, kSmall);
  EXPECT_EQ(v6.url(), "http://[::1]:" + std::to_string(v6.port()));
  // "::" takes IPv4 too, as a civetweb "[::]" port did.
  HttpServer any("::", 0, {{"/a", [] { return HttpAnswer{200, "x"}; }}}, kSmall);
  EXPECT_EQ(http_get(any.port(), "/a").status, 200) << "no IPv4 on ::";
  try {
    HttpServer bad("10.0.0.300", 0, {}, kSmall);
    FAIL() << "an address that is not one was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("10.0.0.300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--http-address"), std::string::npos) << e.what();
  }
  HttpServer first("127.0.0.1", 0, {}, kSmall);
  EXPECT_THROW(HttpServer("127.0.0.1", first.port(), {}, kSmall), std::runtime_error);
}

// A head that trickles a byte every 50 ms is never silent, so libmicrohttpd's idle timeout
// never closes it; the sweeper cuts it at head_timeout_ms from the connection's start.
TEST(HttpServer, ATrickledHeadIsCutAtItsDeadline) {
  auto s = serve({{"/a", [] { return HttpAnswer{200, "x"}; }}});
  int fd = dial_loopback(s.port());
  ASSERT_GE(fd, 0);
  auto t0 = Clock::now();
  ASSERT_TRUE(send_all(fd, "GET /a HTTP/1.1\r\nX-Drip: "));
  long long cut_ms = -1;
  while (ms_since(t0) < 3000) {
    if (closed_by_server(fd)) {
      cut_ms = ms_since(t0);
      break;
    }
    if (::send(fd, "a", 1, MSG_NOSIGNAL) <= 0) {
      cut_ms = ms_since(t0);
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  ::close(fd);
  std::cout << "figure: a trickled head cut after " << cut_ms << " ms (head_timeout_ms " << kSmall.head_timeout_ms
            << ")\n";
  EXPECT_GE(cut_ms, kSmall.head_timeout_ms);
  EXPECT_LT(cut_ms, kSmall.head_timeout_ms + 400);
  EXPECT_EQ(s.heads_cut(), 1);
  EXPECT_EQ(http_get(s.port(), "/a").status, 200);
  EXPECT_EQ(s.heads_cut(), 1) << "a whole head was cut";
}

// The pool (memory_per_connection, 4 KiB here) holds the head: a 1 KiB header is answered, a
// 16 KiB one is refused with a 4xx and the connection closed, having held at most the pool.
TEST(HttpServer, AHeadBiggerThanThePoolIsRefused) {
  auto s = serve({{"/a", [] { return HttpAnswer{200, "x"}; }}});
  int fd = dial_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(1024, 'f') + "\r\n\r\n"));
  std::string ok = read_to_close(fd, 2000ms);
  ::close(fd);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok.substr(0, 200);

  fd = dial_loopback(s.port());
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(16384, 'f') + "\r\n\r\n");
  std::string refused = read_to_close(fd, 2000ms);
  ::close(fd);
  ASSERT_GE(refused.size(), 12u) << "closed without an answer";
  int status = std::atoi(refused.c_str() + 9);
  std::cout << "figure: a 16 KiB head against a 4 KiB pool: " << refused.substr(0, refused.find("\r\n")) << "\n";
  EXPECT_GE(status, 400);
  EXPECT_LT(status, 500);
}

// A POST announcing 10 GB: answered 405 at once and closed, long before the body is in.
TEST(HttpServer, AnEndlessBodyIsAnsweredAndClosedUnread) {
  auto s = serve({{"/a", [] { return HttpAnswer{200, "x"}; }}});
  int fd = dial_loopback(s.port(), true);
  ASSERT_GE(fd, 0);
  const std::string head = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n";
  const std::string chunk(64 << 10, 'b');
  std::string answer;
  long long sent = 0;
  bool closed = false;
  auto t0 = Clock::now();
  size_t head_sent = 0;
  while (ms_since(t0) < 3000 && !closed) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) answer.append(buf, static_cast<size_t>(n));
      else if (n == 0 || errno != EAGAIN) closed = true;
      continue;
    }
    const std::string& out = head_sent < head.size() ? head : chunk;
    size_t from = head_sent < head.size() ? head_sent : 0;
    ssize_t n = ::send(fd, out.data() + from, out.size() - from, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) closed = true;
    if (n > 0) {
      if (head_sent < head.size()) head_sent += static_cast<size_t>(n);
      else sent += n;
    }
  }
  long long took = ms_since(t0);
  ::close(fd);
  std::cout << "figure: a 10 GB POST answered \"" << answer.substr(0, answer.find("\r\n")) << "\" and closed after "
            << took << " ms and " << sent / 1024 << " KiB of body sent\n";
  EXPECT_EQ(answer.rfind("HTTP/1.1 405", 0), 0u) << answer.substr(0, 200);
  EXPECT_TRUE(closed);
  EXPECT_LT(took, 2000);
  EXPECT_LT(sent, 256LL << 20) << "the body was read";
}

// An 8 MiB answer its peer never reads: the reader's hold goes after idle_timeout_s (1 s here,
// in whole seconds), and the text is the handler's, not copied per connection.
TEST(HttpServer, AnAnswerNobodyReadsLetsGoOfItsHold) {
  auto text = std::make_shared<const std::string>(8 << 20, 'm');
  std::atomic<int> held{0};
  auto s = serve({{"/big", [&] {
    HttpAnswer a{200, ""};
    a.shared_body = text;
    ++held;
    a.hold = std::shared_ptr<void>(nullptr, [&](void*) { --held; });
    return a;
  }}});
  int fd = dial_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(lockstep::test::eventually([&] { return held == 1; }, 2s));
  auto t0 = Clock::now();
  ASSERT_TRUE(lockstep::test::eventually([&] { return held == 0; }, 5s)) << "the hold was kept";
  long long let_go = ms_since(t0);
  std::cout << "figure: an unread 8 MiB answer let go " << let_go << " ms after it was made (idle timeout "
            << kSmall.idle_timeout_s << " s)\n";
  EXPECT_LT(let_go, (kSmall.idle_timeout_s + 2) * 1000);
  EXPECT_EQ(text.use_count(), 1) << "the connection kept the text";
  ::close(fd);
}

// 50 connections with half a head each hold no thread, and the probe is answered beside them.
TEST(HttpServer, ConnectionsHoldNoThread) {
  auto s = serve({{"/healthz", [] { return HttpAnswer{200, "ok"}; }}});
  long before = lockstep::test::proc_status(0, "Threads");
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    int fd = dial_loopback(s.port());
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost:");
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  long during = lockstep::test::proc_status(0, "Threads");
  auto g = http_get(s.port(), "/healthz", 1000ms);
  for (int fd : fds) ::close(fd);
  std::cout << "figure: threads " << before << " before 50 half heads, " << during << " with them; /healthz in "
            << g.ms << " ms\n";
  EXPECT_EQ(during, before);
  EXPECT_EQ(g.status, 200);
  EXPECT_LT(g.ms, 500);
}

// At `connections` held (8 here, 4 a loop), one more is not served until the sweeper frees a
// slot: the limit is the bound, and the head deadline is what frees it.
TEST(HttpServer, TheConnectionLimitHoldsAndTheDeadlineFreesIt) {
  EventListenerLimits limits = kSmall;
  limits.connections = 8;
  limits.head_timeout_ms = 1000;
  auto s = serve({{"/healthz", [] { return HttpAnswer{200, "ok"}; }}}, limits);
  std::vector<int> fds;
  for (int i = 0; i < 16; ++i) {  // twice the limit: every loop's share is full
    int fd = dial_loopback(s.port());
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost:");
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(200ms);
  auto blocked = http_get(s.port(), "/healthz", 300ms);
  auto t0 = Clock::now();
  bool answered = lockstep::test::eventually([&] { return http_get(s.port(), "/healthz", 300ms).status == 200; }, 5s);
  long long after = ms_since(t0);
  for (int fd : fds) ::close(fd);
  std::cout << "figure: at the limit /healthz got " << blocked.status << "; answered " << after
            << " ms later, once the deadline cut the held heads (" << s.heads_cut() << " cut)\n";
  EXPECT_NE(blocked.status, 200) << "more than `connections` were served at once";
  EXPECT_TRUE(answered);
  EXPECT_GE(s.heads_cut(), 8);
}

}  // namespace
