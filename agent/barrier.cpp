#include "barrier.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"

namespace lockstep::agent {
namespace {

std::string pct_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == '=' || c >= 0x7f) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::optional<std::string> pct_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') { out += s[i]; continue; }
    if (i + 2 >= s.size()) return std::nullopt;
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(s[i + 1]), lo = nib(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

void send_line(int fd, const Message& m) {
  std::string line = encode(m) + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // a full socket buffer: a few lines never fill it; wait briefly
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 1000) <= 0) return;
      continue;
    }
    if (n <= 0) return;  // the reader notices the broken connection
    off += static_cast<size_t>(n);
  }
}

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

std::string node_list(const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += (s.empty() ? "" : ", ") + std::to_string(n);
  return s;
}

}  // namespace

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Message::get(const std::string& k, const std::string& fallback) const {
  auto it = fields.find(k);
  return it == fields.end() ? fallback : it->second;
}

int Message::get_int(const std::string& k, int fallback) const {
  auto it = fields.find(k);
  if (it == fields.end()) return fallback;
  try {
    size_t used = 0;
    int v = std::stoi(it->second, &used);
    return used == it->second.size() ? v : fallback;
  } catch (...) {
    return fallback;
  }
}

std::string encode(const Message& m) {
  std::string s = m.verb;
  for (const auto& [k, v] : m.fields) s += " " + k + "=" + pct_encode(v);
  return s;
}

std::optional<Message> decode(const std::string& line) {
  std::istringstream in(line);
  Message m;
  if (!(in >> m.verb)) return std::nullopt;
  for (char c : m.verb)
    if (c < 'A' || c > 'Z') return std::nullopt;
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    auto v = pct_decode(tok.substr(eq + 1));
    if (!v) return std::nullopt;
    m.fields[tok.substr(0, eq)] = *v;
  }
  return m;
}

Message failure_message(const std::string& verb, int generation, const std::optional<Failure>& f) {
  Message m{verb, {{"gen", std::to_string(generation)}}};
  if (f) {
    m.fields["node"] = std::to_string(f->node);
    m.fields["rank"] = std::to_string(f->rank);
    m.fields["code"] = std::to_string(f->code);
    m.fields["reason"] = f->reason;
    m.fields["at"] = std::to_string(f->at_ms);
    m.fields["what"] = f->what;
    if (!f->tail.empty())
      m.fields["tail"] = f->tail.size() > kFailureTailBytes ? f->tail.substr(f->tail.size() - kFailureTailBytes) : f->tail;
  }
  return m;
}

std::optional<Failure> failure_of(const Message& m) {
  if (!m.fields.count("code")) return std::nullopt;
  Failure f;
  f.node = m.get_int("node");
  f.rank = m.get_int("rank");
  f.code = m.get_int("code", 1);
  f.reason = m.get("reason", "WorkerFailed");
  try {
    f.at_ms = std::stoll(m.get("at", "0"));
  } catch (...) {
    f.at_ms = 0;
  }
  f.what = m.get("what");
  f.tail = m.get("tail");
  return f;
}

bool restartable_in_place(const std::string& policy, int code) {
  if (policy == "Never") return false;
  if (policy == "OnFailure") return true;
  return contract::exit_code_retryable(code);  // ExitCode: Note [Exit codes] in the operator
}

std::optional<Failure> pick_cause(const std::vector<Failure>& reports) {
  if (reports.empty()) return std::nullopt;
  std::vector<Failure> order(reports);
  std::stable_sort(order.begin(), order.end(), [](const Failure& a, const Failure& b) {
    return a.at_ms != b.at_ms ? a.at_ms < b.at_ms : a.node < b.node;
  });
  for (const auto& f : order)
    if (!contract::exit_code_is_consequence(f.code)) return f;
  return order.front();
}

Verdict decide(const Failure& cause, int generation, int budget, const std::string& policy) {
  Verdict v;
  v.exit_code = cause.code;
  std::string what = cause.what.empty() ? "rank " + std::to_string(cause.rank) + " failed" : cause.what;
  what += " on node " + std::to_string(cause.node) + " first";
  if (!restartable_in_place(policy, cause.code)) {
    v.why = what + "; exit code " + std::to_string(cause.code) + " is permanent under restartPolicy " + policy +
            ", so no in-place restart";
  } else if (generation >= budget) {
    v.why = what + (budget == 0 ? "; in-place restarts are off (spec.runPolicy.inPlaceRestarts=0)"
                                : "; in-place restarts spent (" + std::to_string(generation) + " of " +
                                      std::to_string(budget) + ", spec.runPolicy.inPlaceRestarts)");
  } else {
    v.restart = true;
    v.why = what + "; every worker restarts in place (" + std::to_string(generation + 1) + " of " +
            std::to_string(budget) + ")";
  }
  return v;
}

// ---- server ----

BarrierServer::BarrierServer(const Config& cfg, const std::string& address, int port) : cfg_(cfg) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 1024) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("cannot serve the restart barrier on " + address + ":" + std::to_string(port) + " (" +
                             std::strerror(err) + "); choose another port with LOCKSTEP_AGENT_PORT or --agent-port");
  }
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe failed");
  thread_ = std::thread([this] { loop(); });
}

BarrierServer::~BarrierServer() {
  if (wake_[1] >= 0) {
    char c = 'x';
    (void)!::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void BarrierServer::loop() {
  using Clock = std::chrono::steady_clock;
  enum class Phase { Gathering, Running, Stopping, Finished };
  struct Conn {
    int fd;
    std::string buffer;
    int node = -1;
  };
  std::vector<Conn> conns;
  const int n = cfg_.nnodes;
  std::vector<int> node_fd(n, -1);
  std::vector<bool> done(n, false), stopped(n, false);
  std::vector<Failure> reports;
  std::set<int> reported;
  Phase phase = Phase::Gathering;
  int gen = 0;
  auto deadline = Clock::now() + cfg_.rendezvous_timeout;
  // Stopping takes the grace period and at most 10 s of SIGKILL (Supervisor::stop_group).
  const auto stop_limit = cfg_.grace_period + std::chrono::seconds(30);

  auto broadcast = [&](const Message& m) {
    for (int fd : node_fd)
      if (fd >= 0) send_line(fd, m);
  };
  auto finish = [&](int code, const std::string& why, const std::optional<Failure>& cause) {
    Message m = failure_message("EXIT", gen, cause);
    m.fields["exit"] = std::to_string(code);
    m.fields["why"] = why;
    broadcast(m);
    phase = Phase::Finished;
    if (code == 0 && n > 1) LOCKSTEP_LOG(Info, "barrier", "generation " << gen << " ends for every node: " << why);
    else if (code != 0) LOCKSTEP_LOG(Warn, "barrier", "generation " << gen << " ends for every node: " << why << " (exit " << code << ")");
  };
  auto begin_stop = [&](const std::string& why) {
    phase = Phase::Stopping;
    std::fill(stopped.begin(), stopped.end(), false);
    for (int i = 0; i < n; ++i) stopped[i] = done[i] && node_fd[i] < 0;
    deadline = Clock::now() + stop_limit;
    LOCKSTEP_LOG(Info, "barrier", "generation " << gen << ": " << why << "; every node stops its workers");
    broadcast({"STOP", {{"gen", std::to_string(gen)}}});
  };
  auto maybe_decide = [&] {
    if (phase != Phase::Stopping || std::count(stopped.begin(), stopped.end(), true) < n) return;
    auto cause = pick_cause(reports);
    if (!cause) {  // every node finished while stopping: nothing failed after all
      finish(0, "all " + std::to_string(n) + " node(s) finished", std::nullopt);
      return;
    }
    Verdict v = decide(*cause, gen, cfg_.max_restarts, cfg_.restart_policy);
    if (!v.restart) {
      finish(v.exit_code, v.why, cause);
      return;
    }
    ++gen;
    reports.clear();
    reported.clear();
    std::fill(done.begin(), done.end(), false);
    phase = Phase::Running;
    Message m = failure_message("START", gen, cause);
    m.fields["why"] = v.why;
    LOCKSTEP_LOG(Warn, "barrier", "every node has stopped; starting generation " << gen << ": " << v.why);
    broadcast(m);
  };
  auto lost = [&](int node) {
    if (phase == Phase::Finished || node < 0) return;
    if (done[node] && phase == Phase::Running) return;  // it finished, then left: fine
    if (phase == Phase::Gathering) return;            // it may come back before the start
    finish(contract::kExitRendezvous,
           "the agent of node " + std::to_string(node) + " is gone (its pod deleted, its node lost or the agent killed)",
           std::nullopt);
  };
  auto handle = [&](Conn& c, const Message& m) {
    const int g = m.get_int("gen", -1);
    if (m.verb == "HELLO") {
      const int node = m.get_int("node");
      std::string refuse;
      if (node < 0 || node >= n) refuse = "node rank " + m.get("node") + " is outside 0.." + std::to_string(n - 1);
      else if (m.get("run") != cfg_.run_id) refuse = "it belongs to run '" + m.get("run") + "', not '" + cfg_.run_id + "'";
      else if (m.get_int("attempt") != cfg_.restart_attempt)
        refuse = "it belongs to gang attempt " + m.get("attempt") + ", this is attempt " + std::to_string(cfg_.restart_attempt);
      else if (node_fd[node] >= 0) refuse = "node " + std::to_string(node) + " has already joined (two pods with one node rank?)";
      else if (phase != Phase::Gathering) refuse = "the job has already started without it";
      if (!refuse.empty()) {
        LOCKSTEP_LOG(Warn, "barrier", "refusing an agent: " << refuse);
        send_line(c.fd, {"EXIT", {{"exit", std::to_string(contract::kExitRendezvous)}, {"why", "refused by node 0's agent: " + refuse}}});
        return;
      }
      c.node = node;
      node_fd[node] = c.fd;
      int joined = static_cast<int>(std::count_if(node_fd.begin(), node_fd.end(), [](int fd) { return fd >= 0; }));
      if (joined == n) {
        phase = Phase::Running;
        if (n > 1) LOCKSTEP_LOG(Info, "barrier", "all " << n << " agents joined; starting generation 0");
        broadcast({"START", {{"gen", "0"}}});
      }
      return;
    }
    if (c.node < 0 || g != gen) return;  // not joined, or about an older generation: ignore
    if (m.verb == "FAILED") {
      if (auto f = failure_of(m); f && reported.insert(c.node).second) reports.push_back(*f);
      if (phase == Phase::Running) begin_stop("node " + std::to_string(c.node) + " reports a failure");
    } else if (m.verb == "STOPPED") {
      if (auto f = failure_of(m); f && reported.insert(c.node).second) reports.push_back(*f);
      if (phase == Phase::Stopping) stopped[c.node] = true;
      maybe_decide();
    } else if (m.verb == "DONE") {
      done[c.node] = true;
      if (phase == Phase::Stopping) {
        stopped[c.node] = true;
        maybe_decide();
      } else if (phase == Phase::Running && std::count(done.begin(), done.end(), true) == n) {
        finish(0, "all " + std::to_string(n) + " node(s) finished", std::nullopt);
      }
    }
  };

  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& c : conns) fds.push_back({c.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns.push_back({fd, "", -1});
      }
    }
    for (size_t i = 0; i < conns.size();) {
      if (!(fds.size() > i + 2 && fds[i + 2].fd == conns[i].fd && fds[i + 2].revents)) { ++i; continue; }
      std::vector<std::string> lines;
      bool open = read_lines(conns[i].fd, conns[i].buffer, lines);
      for (const auto& l : lines)
        if (auto m = decode(l)) handle(conns[i], *m);
      if (open) { ++i; continue; }
      int node = conns[i].node;
      ::close(conns[i].fd);
      if (node >= 0 && node_fd[node] == conns[i].fd) node_fd[node] = -1;
      fds.erase(fds.begin() + static_cast<long>(i) + 2);
      conns.erase(conns.begin() + static_cast<long>(i));
      lost(node);
    }
    if (Clock::now() > deadline && (phase == Phase::Gathering || phase == Phase::Stopping)) {
      std::vector<int> missing;
      for (int i = 0; i < n; ++i)
        if (phase == Phase::Gathering ? node_fd[i] < 0 : !stopped[i]) missing.push_back(i);
      finish(contract::kExitRendezvous,
             phase == Phase::Gathering
                 ? "the agents of node(s) " + node_list(missing) + " did not join within the rendezvous timeout"
                 : "node(s) " + node_list(missing) + " did not stop their workers in time",
             std::nullopt);
    }
  }
  for (auto& c : conns) ::close(c.fd);
}

// ---- client ----

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
  // Keepalive: a peer whose node vanished without a FIN is noticed in about a minute.
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 30, intvl = 5, cnt = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  lost_ = false;
  buffer_.clear();
  return true;
}

void BarrierClient::send(const Message& m) {
  if (fd_ >= 0) send_line(fd_, m);
}

std::optional<Message> BarrierClient::poll(std::chrono::milliseconds timeout) {
  auto take = [&]() -> std::optional<Message> {
    for (size_t pos; (pos = buffer_.find('\n')) != std::string::npos;) {
      std::string line = buffer_.substr(0, pos);
      buffer_.erase(0, pos + 1);
      if (auto m = decode(line)) return m;
    }
    return std::nullopt;
  };
  if (auto m = take()) return m;
  if (fd_ < 0 || lost_) return std::nullopt;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  std::vector<std::string> lines;
  std::string rest;
  bool open = read_lines(fd_, rest, lines);
  std::string joined;
  for (auto& l : lines) joined += l + "\n";
  buffer_ += joined + rest;
  if (!open) lost_ = true;
  return take();
}

}  // namespace lockstep::agent
