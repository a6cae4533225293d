#include "controller/agent_reader.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include "lockstep/text.hpp"

namespace lockstep::controller {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHead = 16 << 10;  // a longer HTTP head is no agent's

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

struct Read {
  size_t index = 0;
  int fd = -1;
  enum State { Connecting, Sending, Receiving } state = Connecting;
  std::string request;
  size_t sent = 0;
  std::string data;
  size_t head_end = std::string::npos;  // where the head's blank line starts, once seen
  std::optional<size_t> content_length;
  Clock::time_point deadline;
  bool done = false;
  ~Read() {
    if (fd >= 0) ::close(fd);
  }
};

// The head of `r.data` once complete: status 200, and how long the body is. An error text
// (never quoting the peer beyond its status code) when the answer is not one to use.
std::string read_head(Read& r) {
  size_t end = r.data.find("\r\n\r\n");
  if (end == std::string::npos) return "";
  r.head_end = end;
  std::string_view head(r.data.data(), end);
  size_t eol = head.find("\r\n");
  std::string_view status = head.substr(0, eol);
  if (status.size() < 12 || (status.substr(0, 9) != "HTTP/1.0 " && status.substr(0, 9) != "HTTP/1.1 ") ||
      !std::all_of(status.begin() + 9, status.begin() + 12, [](char c) { return c >= '0' && c <= '9'; }) ||
      (status.size() > 12 && status[12] != ' '))
    return "the answer is not HTTP/1.x";
  if (status.substr(9, 3) != "200") return "answered HTTP " + std::string(status.substr(9, 3)) + ", not 200";
  while (eol != std::string_view::npos) {
    size_t start = eol + 2;
    eol = head.find("\r\n", start);
    std::string_view line = head.substr(start, eol == std::string_view::npos ? std::string_view::npos : eol - start);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return "a malformed header line";
    std::string_view name = line.substr(0, colon), value = text::trim(line.substr(colon + 1));
    if (iequals(name, "Transfer-Encoding") && !iequals(value, "identity"))
      return "a transfer encoding other than identity (the request was HTTP/1.0)";
    if (iequals(name, "Content-Length")) {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return "a malformed Content-Length";
      size_t n = std::stoull(std::string(value));
      if (r.content_length && *r.content_length != n) return "two different Content-Lengths";
      r.content_length = n;
    }
  }
  return "";
}

std::string describe_errno(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// Starts a read: a non-blocking connect to target's address. False (with the error set) when
// it cannot start.
bool start(Read& r, const AgentTarget& t, AgentAnswer& answer, const AgentLimits& limits) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string host;
  if (t.port < 1 || t.port > 65535) {
    answer.error = "port " + std::to_string(t.port) + " is not in 1..65535";
    return false;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (::inet_pton(AF_INET, t.ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(t.port));
    len = sizeof *v4;
    host = t.ip;
  } else if (::inet_pton(AF_INET6, t.ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(t.port));
    len = sizeof *v6;
    host = "[" + t.ip + "]";
  } else {
    answer.error = "the pod IP is not an IP address";
    return false;
  }
  r.fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (r.fd < 0) {
    answer.error = describe_errno("socket", errno);
    return false;
  }
  r.deadline = Clock::now() + limits.deadline;
  r.request = "GET /metrics HTTP/1.0\r\nHost: " + host + ":" + std::to_string(t.port) +
              "\r\nAccept: text/plain\r\nUser-Agent: lockstep-operator\r\n\r\n";
  if (::connect(r.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
    r.state = Read::Sending;
  } else if (errno != EINPROGRESS) {
    answer.error = describe_errno("connect", errno);
    return false;
  }
  return true;
}

// Moves a read on after poll() said its socket is ready; sets r.done (and the answer) at its end.
void advance(Read& r, AgentAnswer& answer, const AgentLimits& limits) {
  auto fail = [&](std::string why) {
    answer.error = std::move(why);
    r.done = true;
  };
  if (r.state == Read::Connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return fail(describe_errno("connect", errno));
    if (err == EINPROGRESS || err == EALREADY) return;
    if (err != 0) return fail(describe_errno("connect", err));
    r.state = Read::Sending;
  }
  if (r.state == Read::Sending) {
    while (r.sent < r.request.size()) {
      ssize_t n = ::send(r.fd, r.request.data() + r.sent, r.request.size() - r.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return fail(describe_errno("send", errno));
      }
      r.sent += static_cast<size_t>(n);
    }
    r.state = Read::Receiving;
    return;  // the answer comes with a later poll
  }
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(r.fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return fail(describe_errno("recv", errno));
    }
    if (n > 0 && r.data.size() + static_cast<size_t>(n) > limits.max_bytes)
      return fail("the answer exceeds " + std::to_string(limits.max_bytes) + " bytes");
    r.data.append(buf, static_cast<size_t>(n));
    if (r.head_end == std::string::npos) {
      std::string error = read_head(r);
      if (!error.empty()) return fail(error);
      if (r.head_end == std::string::npos && r.data.size() > kMaxHead)
        return fail("the HTTP head exceeds " + std::to_string(kMaxHead) + " bytes");
    }
    bool eof = n == 0;
    size_t have = r.head_end == std::string::npos ? 0 : r.data.size() - r.head_end - 4;
    bool whole = r.head_end != std::string::npos && (r.content_length ? have >= *r.content_length : eof);
    if (whole) {
      answer.body = r.data.substr(r.head_end + 4, r.content_length ? *r.content_length : std::string::npos);
      r.done = true;
      return;
    }
    if (eof) return fail(r.head_end == std::string::npos ? "the connection closed before a whole HTTP head"
                                                          : "the connection closed before the whole body");
  }
}

}  // namespace

std::vector<AgentAnswer> read_agents(const std::vector<AgentTarget>& targets, const AgentLimits& limits,
                                     const std::atomic<bool>* stop) {
  std::vector<AgentAnswer> out(targets.size());
  std::vector<std::unique_ptr<Read>> active;
  size_t next = 0;
  const size_t in_flight = std::max<size_t>(1, limits.max_in_flight);
  std::vector<pollfd> fds;
  while (true) {
    while (active.size() < in_flight && next < targets.size()) {
      auto r = std::make_unique<Read>();
      r->index = next;
      if (start(*r, targets[next], out[next], limits)) active.push_back(std::move(r));
      ++next;
    }
    if (active.empty()) break;
    if (stop && stop->load()) {
      for (const auto& r : active) out[r->index].error = "stopped";
      for (size_t i = next; i < targets.size(); ++i) out[i].error = "stopped";
      break;
    }
    auto now = Clock::now();
    auto wait = kStopLatency;  // stop is looked at this often
    fds.clear();
    for (const auto& r : active) {
      fds.push_back({r->fd, static_cast<short>(r->state == Read::Receiving ? POLLIN : POLLOUT), 0});
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - now) +
                                std::chrono::milliseconds(1));
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait.count())));
    if (n < 0 && errno != EINTR) {
      for (const auto& r : active) out[r->index].error = describe_errno("poll", errno);
      break;
    }
    now = Clock::now();
    for (size_t i = 0; i < active.size(); ++i) {
      Read& r = *active[i];
      if (n > 0 && fds[i].revents) advance(r, out[r.index], limits);
      if (!r.done && now >= r.deadline) {
        out[r.index].error = "no whole answer within " + std::to_string(limits.deadline.count()) + " ms";
        r.done = true;
      }
    }
    active.erase(std::remove_if(active.begin(), active.end(), [](const auto& r) { return r->done; }), active.end());
  }
  return out;
}

}  // namespace lockstep::controller
