#include "barrier/server_loop.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "barrier/address.hpp"
#include "barrier/codec.hpp"
#include "barrier/state.hpp"
#include "barrier/trust.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/random.hpp"
#include "lockstep/time_text.hpp"

namespace lockstep::agent {
namespace {

using Clock = std::chrono::steady_clock;

// One peer of the server (Note [Barrier trust]).
struct Conn {
  int fd = -1;
  std::string peer;         // address:port, for node 0's log
  std::string in, out;      // unread input; output not yet taken by the peer
  size_t received = 0;      // bytes received in all
  int node = -1;            // its node rank once joined
  std::string nonce;        // the challenge it must answer
  Clock::time_point since;  // accepted
  Clock::time_point heard;  // a member's last complete line (Note [Heartbeats])
  double budget = kMemberReadBurst;  // bytes it may still be read this second (Note [Heartbeats])
  bool closing = false;     // refused: closed once `out` is written, or at its HELLO deadline
  bool dead = false;        // to be closed at the end of this round
};

// Refusals and dropped strangers in node 0's log: the first kFirst of each minute, then one
// line with how many more (Note [Barrier trust]: a stranger must not flood the log).
class RefusalLog {
 public:
  void note(const std::string& line) {
    roll();
    if (logged_ < kFirst) {
      ++logged_;
      LOCKSTEP_LOG(Warn, "barrier", line);
    } else {
      ++suppressed_;
    }
  }
  void roll() {
    auto now = Clock::now();
    if (now - window_ < kWindow) return;
    if (suppressed_ > 0)
      LOCKSTEP_LOG(Warn, "barrier", suppressed_ << " more refused or dropped connection(s) in the last "
                                    << std::chrono::duration_cast<std::chrono::seconds>(now - window_).count()
                                    << " s, not logged one by one");
    window_ = now;
    logged_ = suppressed_ = 0;
  }

 private:
  static constexpr int kFirst = 5;
  static constexpr auto kWindow = std::chrono::seconds(60);
  Clock::time_point window_ = Clock::now();
  int logged_ = 0;
  long suppressed_ = 0;
};


// BarrierServer's thread: the I/O of the restart barrier (accepting, reading every peer within
// Note [Barrier trust]'s bounds, writing without blocking, heartbeats, freezes), with the
// protocol's decisions left to BarrierState (Note [Barrier state]).
class ServerLoop {
 public:
  ServerLoop(const Config& cfg, int& listen_fd, const int* wake, std::mutex& mu, std::string& fenced,
             GangFigures& figures)
      : cfg_(cfg),
        listen_fd_(listen_fd),
        wake_(wake),
        mu_(mu),
        fenced_(fenced),
        figures_(figures),
        n(cfg.nnodes),
        node_conn(static_cast<size_t>(cfg.nnodes), nullptr),
        // Stopping takes the grace period and at most 10 s of SIGKILL (WorkerGroup::stop).
        state(cfg.nnodes, cfg.max_restarts, cfg.restart_policy, Clock::now(), cfg.rendezvous_timeout,
              cfg.grace_period + std::chrono::seconds(30)),
        interval(cfg.heartbeat_interval()),
        checks(cfg.peer_checks()),
        timeout_text("more than " + cfg.peer_timeout_from + ", " + time_text::setting_seconds(cfg.peer_timeout)),
        next_alive(Clock::now() + interval) {}

  void run();

 private:
  // The round (run): poll, stand down after a freeze, serve what the poll found, deadlines,
  // and the losses they make.
  // Waits (at most 200 ms) for the wake pipe, the listener and every connection that may be
  // read or written.
  void poll_round();
  // See Note [Heartbeats]: a round this late means this thread was frozen (or starved) longer
  // than the peer timeout: the members have given this server up. Before anything is read or
  // accepted, it closes every connection and its listener without a word, and serves no more.
  bool frozen();
  // What the poll found: output flushed, input read and handled, new connections accepted.
  void serve();
  // A HELLO within kHelloTimeout of the accept (a refusal delivered by then too); a member's
  // silence (Note [Heartbeats]); our own ALIVE.
  void check_deadlines();
  // Closes what is done with; a member's loss may end the generation.
  void close_dead();

  // Connections and members: written and read without blocking, within Note [Barrier trust]'s
  // bounds; a member's lines go to BarrierState.
  using Phase = BarrierState::Phase;
  // `verdict`: what the generation's end says of this member, if it ends it ("" for a plain
  // loss).
  void drop(Conn& c, const std::string& why, const std::string& verdict = "");
  void flush(Conn& c);
  void queue(Conn& c, const Message& m);
  void refuse(Conn& c, const std::string& text);
  void broadcast(const Message& m);
  // What the state machine asks for: its lines logged, its messages sent to every member.
  void apply(const BarrierState::Out& out);
  void hello(Conn& c, const Message& m);
  void handle(Conn& c, const Message& m);
  // See Note [Heartbeats]: a member's ALIVE, which carries nothing the server keeps. True when
  // `line` is one (handled: the member may be closed for its size).
  bool heartbeat(Conn& c, const char* line, size_t len);
  // See Note [Barrier trust]: a member's FIGURES, kept when valid and of the current generation.
  // True when `line` is one (handled: the member may be closed for its size).
  bool figures(Conn& c, const char* line, size_t len);
  void malformed_figures(int node, const std::string& error);
  // Reads what `c` sent (at most 64 KiB a round, so no peer starves the others, and no more of a
  // member than its budget, Note [Heartbeats]) and handles each complete line, within the
  // bounds of Note [Barrier trust].
  void receive(Conn& c);
  long unjoined();
  void drop_oldest_unjoined(const std::string& why);
  void accept_new();

  const Config& cfg_;
  int& listen_fd_;
  const int* wake_;
  std::mutex& mu_;
  std::string& fenced_;  // under mu_
  GangFigures& figures_;
  int figures_gen_ = 0;  // the generation the kept figures belong to
  // Malformed FIGURES: counted, and said in node 0's log at most once a minute.
  long malformed_ = 0;
  Clock::time_point malformed_said_{};
  std::vector<std::unique_ptr<Conn>> conns;
  const int n;
  std::vector<Conn*> node_conn;
  BarrierState state;  // Note [Barrier state]: the protocol's decisions; this loop does the I/O
  RefusalLog refusals;
  // Note [Heartbeats]
  const std::chrono::milliseconds interval;
  const bool checks;
  const std::string timeout_text;
  Clock::time_point listen_again{}, next_alive;
  // Members whose connection closed this round, with what the verdict says of each ("": the
  // connection ended).
  std::vector<std::pair<int, std::string>> lost_nodes;
  std::vector<pollfd> fds;
  bool leaving = false;
  Clock::time_point leave_by{}, last_round = Clock::now(), last_refill = Clock::now();
};

// ---- The round ----

void ServerLoop::run() {
  while (true) {
    poll_round();
    if (frozen()) return;
    last_round = Clock::now();
    if (fds[0].revents && !leaving) {  // BarrierServer's destructor: time to leave
      char c;
      while (::read(wake_[0], &c, 1) > 0) {}
      leaving = true;
      leave_by = Clock::now() + std::chrono::seconds(2);
    }
    // Node 0's agent leaves last: after the verdict, until every member has read it and
    // closed its side (or 2 s). Closing first, with a member's last line unread, would reset
    // the connection, and a verdict still in flight could be lost.
    if (leaving && (state.phase() != Phase::Finished || Clock::now() > leave_by ||
                    std::none_of(node_conn.begin(), node_conn.end(), [](Conn* p) { return p != nullptr; })))
      break;
    serve();
    check_deadlines();
    close_dead();
    BarrierState::Out out;
    state.tick(Clock::now(), out);  // the rendezvous or the stop out of time
    apply(out);
    if (state.generation() != figures_gen_) {  // a new generation: nobody is judged on the last one's
      figures_gen_ = state.generation();
      figures_.clear();
    }
  }
  for (auto& c : conns) ::close(c->fd);
}

void ServerLoop::poll_round() {
  const auto now = Clock::now();
  // See Note [Heartbeats]: each member's read budget refills at kMemberReadRate; one that has
  // spent it is not read (nor polled for input) until it has some again.
  const double refill = std::chrono::duration<double>(now - last_refill).count() * kMemberReadRate;
  last_refill = now;
  fds.clear();
  fds.push_back({leaving ? -1 : wake_[0], POLLIN, 0});
  fds.push_back({now >= listen_again ? listen_fd_ : -1, POLLIN, 0});
  for (auto& c : conns) {
    if (c->node >= 0) c->budget = std::min(static_cast<double>(kMemberReadBurst), c->budget + refill);
    const bool throttled = c->node >= 0 && c->budget < 1;
    fds.push_back({throttled && c->out.empty() ? -1 : c->fd,
                   static_cast<short>((c->closing || throttled ? 0 : POLLIN) | (c->out.empty() ? 0 : POLLOUT)), 0});
  }
  int timeout = now >= listen_again ? 200 : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(listen_again - now).count()) + 1;
  ::poll(fds.data(), fds.size(), std::min(timeout, 200));
}

bool ServerLoop::frozen() {
  const auto woke = Clock::now();
  if (!checks || leaving || state.phase() == Phase::Finished || woke - last_round <= cfg_.peer_timeout) return false;
  const std::string why = "the restart barrier's server was silent itself for " + time_text::seconds(woke - last_round, 2) +
                          " (" + timeout_text + "): this process or its node was frozen, and its members have given "
                          "it up";
  LOCKSTEP_LOG(Warn, "barrier", why << "; it closes every connection and serves no more");
  {
    std::lock_guard<std::mutex> lock(mu_);
    fenced_ = why;
  }
  for (auto& c : conns) ::close(c->fd);
  ::close(listen_fd_);
  listen_fd_ = -1;
  return true;
}

void ServerLoop::serve() {
  // conns may grow below: index by the poll set's own size.
  const size_t polled = fds.size() - 2;
  for (size_t i = 0; i < polled; ++i) {
    Conn& c = *conns[i];
    short ev = fds[i + 2].revents;
    if (!ev || c.dead) continue;
    if (ev & POLLOUT) flush(c);
    if (ev & (POLLIN | POLLHUP | POLLERR)) {
      if (c.closing && (ev & (POLLHUP | POLLERR))) c.dead = true;
      else receive(c);
    }
  }
  if (fds[1].revents & POLLIN) accept_new();
}

void ServerLoop::check_deadlines() {
  const auto t = Clock::now();
  for (auto& c : conns)
    if (c->node < 0 && !c->dead && t - c->since > kHelloTimeout) {
      if (c->closing) c->dead = true;
      else drop(*c, "no HELLO within " + std::to_string(kHelloTimeout.count()) + " s");
    }
  // See Note [Heartbeats]: a member silent for the peer timeout is lost, as if it had closed.
  if (checks && state.phase() != Phase::Finished)
    for (auto& c : conns)
      if (c->node >= 0 && !c->dead && node_conn[c->node] == c.get() && t - c->heard > cfg_.peer_timeout) {
        const std::string silence = "said nothing for " + time_text::seconds(t - c->heard, 2) + " (" + timeout_text + ")";
        state.silent(c->node);
        drop(*c, "it " + silence,
             "node " + std::to_string(c->node) + "'s agent (" + c->peer + ") " + silence +
                 "; treating it as lost (its node frozen, powered off or cut off)");
      }
  if (t >= next_alive) {
    next_alive = t + interval;
    // See Note [Heartbeats]: node 0's straggler reference, when it has one, goes with it.
    Message alive{"ALIVE", {}};
    if (auto ref = figures_.reference()) alive.fields["ref"] = figure_text(*ref);
    broadcast(alive);
  }
}

void ServerLoop::close_dead() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (!(*it)->dead) { ++it; continue; }
    Conn& c = **it;
    if (c.node >= 0 && node_conn[c.node] == &c) {
      node_conn[c.node] = nullptr;
      state.left(c.node);
      lost_nodes.emplace_back(c.node, "");
    }
    ::close(c.fd);
    it = conns.erase(it);
  }
  while (!lost_nodes.empty()) {  // lost() may close more members (their queues overflowing)
    auto [node, verdict] = lost_nodes.back();
    lost_nodes.pop_back();
    figures_.forget(node);
    BarrierState::Out out;
    state.lost(node, verdict, out);
    apply(out);
  }
  refusals.roll();
}

// ---- Connections and members ----

void ServerLoop::drop(Conn& c, const std::string& why, const std::string& verdict) {
  if (c.dead) return;
  c.dead = true;
  if (c.node >= 0) {
    LOCKSTEP_LOG(Warn, "barrier", "closing node " << c.node << "'s connection: " << why);
    if (node_conn[c.node] == &c) {
      node_conn[c.node] = nullptr;
      state.left(c.node);
      lost_nodes.emplace_back(c.node, verdict);
    }
  } else if (!c.closing) {
    refusals.note("closing a connection from " + c.peer + " that has not joined: " + why);
  }
}

void ServerLoop::flush(Conn& c) {
  while (!c.out.empty() && !c.dead) {
    ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) { c.out.erase(0, static_cast<size_t>(k)); continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    drop(c, "the connection broke");
  }
  if (c.out.empty() && c.closing && !c.dead) {  // a refusal, delivered
    // What the peer sent after its HELLO is read and dropped first: a close with unread
    // input resets the connection, and the peer could lose the refusal.
    char buf[4096];
    for (int k = 0; k < 16 && ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT) > 0; ++k) {}
    ::shutdown(c.fd, SHUT_WR);
    c.dead = true;
  }
}

void ServerLoop::queue(Conn& c, const Message& m) {
  if (c.dead) return;
  c.out += encode(m) + "\n";
  if (c.out.size() > kMaxQueuedBytes) {
    drop(c, "it does not read what it is sent (" + std::to_string(c.out.size()) + " bytes queued)");
    return;
  }
  flush(c);
}

void ServerLoop::refuse(Conn& c, const std::string& text) {
  queue(c, {"EXIT", {{"exit", std::to_string(contract::kExitRendezvous)}, {"why", text}}});
  c.closing = true;
  flush(c);
}

void ServerLoop::broadcast(const Message& m) {
  for (Conn* c : node_conn)
    if (c) queue(*c, m);
}

void ServerLoop::apply(const BarrierState::Out& out) {
  for (const auto& [warn, line] : out.log) {
    if (warn) LOCKSTEP_LOG(Warn, "barrier", line);
    else LOCKSTEP_LOG(Info, "barrier", line);
  }
  for (const auto& m : out.broadcast) broadcast(m);
}

void ServerLoop::hello(Conn& c, const Message& m) {
  const int node = m.get_int("node");
  const int attempt = m.get_int("attempt");
  // Which check failed goes to node 0's log only, never to the peer.
  std::string failed;
  if (node < 0 || node >= n) failed = "node rank '" + log_escape(m.get("node")) + "' is not one of this job's";
  else if (!cfg_.barrier_secret.empty()) {
    if (!proof_matches(barrier_proof(cfg_.barrier_secret, c.nonce, node, cfg_.restart_attempt, cfg_.run_id), m.get("proof")))
      failed = "no valid proof of the job's secret for node " + std::to_string(node) +
               " (another job, an older gang attempt, or not an agent)";
  } else if (m.get("run") != cfg_.run_id || attempt != cfg_.restart_attempt) {
    failed = "another run id or gang attempt (node " + std::to_string(node) + ")";
  }
  if (!failed.empty()) {
    refusals.note("refused a HELLO from " + c.peer + ": " + failed);
    refuse(c, kRefusal);
    return;
  }
  // A member from here on: it may be told more.
  BarrierState::Out out;
  const std::string refusal = state.join(node, out);
  if (!refusal.empty()) {
    LOCKSTEP_LOG(Warn, "barrier", "refusing the agent of node " << node << " at " << c.peer << ": " << refusal);
    refuse(c, "refused by node 0's agent: " + refusal);
    return;
  }
  c.node = node;
  c.heard = Clock::now();
  node_conn[node] = &c;
  apply(out);  // START, when it was the last to join
}

void ServerLoop::handle(Conn& c, const Message& m) {
  if (c.node < 0) {  // the first line must be a HELLO
    if (m.verb == "HELLO") hello(c, m);
    else drop(c, "it sent " + log_escape(m.verb, 16) + " before HELLO");
    return;
  }
  BarrierState::Out out;
  state.message(c.node, m, unix_ms(), Clock::now(), out);
  apply(out);
}

bool ServerLoop::heartbeat(Conn& c, const char* line, size_t len) {
  static constexpr char kAlive[] = "ALIVE";
  const size_t k = sizeof kAlive - 1;
  if (c.node < 0 || len < k || std::memcmp(line, kAlive, k) != 0 || (len > k && line[k] != ' ')) return false;
  if (len > kMaxHeartbeatBytes)
    drop(c, "a heartbeat of " + std::to_string(len) + " bytes (at most " + std::to_string(kMaxHeartbeatBytes) + ")");
  return true;
}

bool ServerLoop::figures(Conn& c, const char* line, size_t len) {
  static constexpr char kFigures[] = "FIGURES";
  const size_t k = sizeof kFigures - 1;
  if (c.node < 0 || len < k || std::memcmp(line, kFigures, k) != 0 || (len > k && line[k] != ' ')) return false;
  const size_t limit = max_figures_bytes(cfg_.nproc_per_node);
  if (len > limit) {
    drop(c, "a FIGURES line of " + std::to_string(len) + " bytes (at most " + std::to_string(limit) + ")");
    return true;
  }
  auto m = decode(std::string(line, len));
  std::string error = "not the barrier's line format";
  auto parsed = m ? parse_figures(*m, cfg_.nproc_per_node, error) : std::nullopt;
  if (!parsed) {
    malformed_figures(c.node, error);
    return true;
  }
  // Another generation's (late, or early) figures are no malformation: ignored.
  if (parsed->generation == state.generation() && state.phase() == Phase::Running)
    figures_.put(c.node, std::move(parsed->figures), steady_seconds());
  return true;
}

void ServerLoop::malformed_figures(int node, const std::string& error) {
  ++malformed_;
  const auto now = Clock::now();
  if (malformed_said_ != Clock::time_point{} && now - malformed_said_ < std::chrono::minutes(1)) return;
  LOCKSTEP_LOG(Warn, "barrier", "ignoring a malformed FIGURES line from node " << node << ": " << log_escape(error, 120)
                                << " (" << malformed_ << " malformed in the last minute; said at most once a minute)");
  malformed_said_ = now;
  malformed_ = 0;
}

void ServerLoop::receive(Conn& c) {
  char buf[4096];
  for (size_t round = 0; round < 16 && !c.dead && !c.closing; ++round) {
    size_t want = sizeof buf;
    if (c.node >= 0) {
      if (c.budget < 1) return;
      want = std::min(want, static_cast<size_t>(c.budget));
    }
    ssize_t k = ::recv(c.fd, buf, want, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k <= 0) {  // closed, or an error: a member's loss is judged when it is closed
      c.dead = true;
      return;
    }
    c.received += static_cast<size_t>(k);
    if (c.node >= 0) c.budget -= static_cast<double>(k);
    c.in.append(buf, static_cast<size_t>(k));
    // Lines are taken from the front and the buffer cut once: a flood of short lines costs
    // linear time.
    size_t start = 0;
    for (size_t pos; !c.dead && !c.closing && (pos = c.in.find('\n', start)) != std::string::npos;) {
      const char* line = c.in.data() + start;
      const size_t len = pos - start;
      start = pos + 1;
      if (c.node >= 0) c.heard = Clock::now();  // Note [Heartbeats]: a member said something
      if (heartbeat(c, line, len) || figures(c, line, len)) continue;
      auto m = decode(std::string(line, len));
      if (!m) {
        if (c.node < 0) drop(c, "it sent a line that is not the barrier's protocol: '" + log_escape(std::string(line, len)) + "'");
        continue;  // a member's garbled line: ignored, as before
      }
      handle(c, *m);
    }
    if (!c.dead) c.in.erase(0, start);
    if (c.node < 0 && c.received > kMaxUnjoinedBytes)
      drop(c, "it sent more than " + std::to_string(kMaxUnjoinedBytes) + " bytes without joining");
    else if (c.in.size() > kMaxLineBytes)
      drop(c, "a line longer than " + std::to_string(kMaxLineBytes) + " bytes");
  }
}

long ServerLoop::unjoined() {
  return static_cast<long>(std::count_if(conns.begin(), conns.end(), [](const auto& c) { return c->node < 0 && !c->dead; }));
}

void ServerLoop::drop_oldest_unjoined(const std::string& why) {
  for (auto& c : conns)  // accepted in order: the first is the oldest
    if (c->node < 0 && !c->dead) {
      c->closing ? void(c->dead = true) : drop(*c, why);
      return;
    }
}

void ServerLoop::accept_new() {
  for (int k = 0; k < 64; ++k) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the pending connection stays in the backlog, so polling the
        // listener again at once would spin. Rest, and free a stranger's descriptor.
        listen_again = Clock::now() + kAcceptBackoff;
        refusals.note(std::string("cannot accept connections: ") + std::strerror(errno) +
                      "; dropping the oldest connection that has not joined");
        drop_oldest_unjoined("the agent is out of file descriptors");
      }
      return;
    }
    if (unjoined() >= kMaxUnjoined)
      drop_oldest_unjoined(std::to_string(kMaxUnjoined) + " connections wait to join; the oldest goes");
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = peer_name(a);
    c->since = Clock::now();
    try {
      c->nonce = random_hex(32);
    } catch (const std::exception& e) {
      LOCKSTEP_LOG(Error, "barrier", e.what());
      ::close(fd);
      return;
    }
    Conn& ref = *c;
    conns.push_back(std::move(c));
    queue(ref, {"CHALLENGE", {{"nonce", ref.nonce}}});
  }
}

}  // namespace

void run_barrier_server(const Config& cfg, int& listen_fd, const int* wake, std::mutex& mu, std::string& fenced,
                        GangFigures& figures) {
  ServerLoop(cfg, listen_fd, wake, mu, fenced, figures).run();
}

}  // namespace lockstep::agent
