#include "barrier/client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "barrier/address.hpp"
#include "barrier/trust.hpp"

namespace lockstep::agent {
namespace {

// Reads what is there; appends complete lines to `lines`. False when the peer closed.
bool read_lines(int fd, std::string& buffer, std::vector<std::string>& lines) {
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(buf, static_cast<size_t>(n));
      if (buffer.size() > (1 << 20)) return false;  // no line is this long: not our peer
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    // n == 0 (closed) or an error: deliver what came before it
    for (size_t pos; (pos = buffer.find('\n')) != std::string::npos;) {
      lines.push_back(buffer.substr(0, pos));
      buffer.erase(0, pos + 1);
    }
    return false;
  }
  for (size_t pos; (pos = buffer.find('\n')) != std::string::npos;) {
    lines.push_back(buffer.substr(0, pos));
    buffer.erase(0, pos + 1);
  }
  return true;
}

}  // namespace

BarrierClient::~BarrierClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool BarrierClient::connect(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    error = gai_strerror(rc);
    return false;
  }
  int fd = -1;
  for (addrinfo* r = res; r; r = r->ai_next) {
    fd = ::socket(r->ai_family, r->ai_socktype | SOCK_CLOEXEC, r->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, r->ai_addr, r->ai_addrlen) == 0) break;
    error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Keepalive: with the heartbeat checks off (Note [Heartbeats]), a peer whose node vanished
  // without a FIN is still noticed in about a minute.
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 30, intvl = 5, cnt = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);  // Note [Heartbeats]: nothing here blocks
  sockaddr_in a{};
  socklen_t len = sizeof a;
  peer_ = ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? peer_name(a) : host + ":" + std::to_string(port);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  lost_ = eof_ = member_ = false;
  buffer_.clear();
  out_.clear();
  last_heard_ = last_tick_ = Clock::now();
  own_silence_ = std::chrono::milliseconds(0);
  reference_.reset();
  return true;
}

void BarrierClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  lost_ = true;
  out_.clear();
}

void BarrierClient::flush() {
  while (fd_ >= 0 && !lost_ && !out_.empty()) {
    ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    lost_ = true;  // the connection broke
  }
  // A server that takes nothing for this long is not reading: lost (Note [Barrier trust]).
  if (out_.size() > kMaxQueuedBytes) lost_ = true;
}

void BarrierClient::send(const Message& m) {
  if (fd_ < 0 || lost_) return;
  if (m.verb == "HELLO") {  // a member from here on (Note [Heartbeats])
    member_ = true;
    last_heard_ = last_tick_ = Clock::now();
    next_beat_ = last_tick_ + interval_;
    own_silence_ = std::chrono::milliseconds(0);
  }
  out_ += encode(m) + "\n";
  flush();
}

void BarrierClient::read_available() {
  std::vector<std::string> lines;
  std::string rest;
  const bool open = read_lines(fd_, rest, lines);
  if (!lines.empty()) last_heard_ = Clock::now();
  for (auto& l : lines) buffer_ += l + "\n";
  buffer_ += rest;
  if (!open) lost_ = eof_ = true;
}

void BarrierClient::tick() {
  const auto now = Clock::now();
  if (member_) {  // Note [Heartbeats]: this agent's own silence
    own_silence_ = std::max(own_silence_, std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick_));
    last_tick_ = now;
    if (fd_ >= 0 && !lost_ && now >= next_beat_) {
      next_beat_ = now + interval_;
      out_ += "ALIVE\n";
    }
  }
  if (fd_ < 0) return;
  // Read first, and on to the end even once a write has failed: node 0's agent may have sent
  // its verdict and closed, and the verdict must still be read.
  if (!eof_) read_available();
  flush();
}

std::chrono::milliseconds BarrierClient::server_silence() const {
  if (!member_) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_heard_);
}

std::optional<double> BarrierClient::reference() const {
  if (!reference_ || steady_seconds() - reference_at_ > kFiguresMaxAgeS) return std::nullopt;
  return reference_;
}

std::optional<Message> BarrierClient::poll(std::chrono::milliseconds timeout) {
  auto take = [&]() -> std::optional<Message> {
    for (size_t pos; (pos = buffer_.find('\n')) != std::string::npos;) {
      std::string line = buffer_.substr(0, pos);
      buffer_.erase(0, pos + 1);
      auto m = decode(line);
      if (m && m->verb == "ALIVE" && m->fields.count("ref")) {  // Note [Heartbeats]: checked, kept
        if (auto ref = parse_reference(*m)) {
          reference_ = ref;
          reference_at_ = steady_seconds();
        }
      }
      if (m) return m;
    }
    return std::nullopt;
  };
  if (auto m = take()) return m;
  if (fd_ >= 0 && !eof_ && timeout.count() > 0) {
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout.count()));
  }
  tick();
  return take();
}

}  // namespace lockstep::agent
