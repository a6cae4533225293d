#include "barrier.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/random.hpp"
#include "lockstep/text.hpp"

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

namespace {
std::string to_hex(const unsigned char* p, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += hex[p[i] >> 4];
    out += hex[p[i] & 15];
  }
  return out;
}
}  // namespace

std::string barrier_proof_input(const std::string& nonce, int node, int attempt, const std::string& run_id) {
  return "lockstep-barrier-v1\n" + nonce + "\n" + std::to_string(node) + "\n" + std::to_string(attempt) + "\n" + run_id;
}

std::string barrier_proof(const std::string& secret, const std::string& nonce, int node, int attempt,
                          const std::string& run_id) {
  const std::string input = barrier_proof_input(nonce, node, attempt, run_id);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len))
    throw std::runtime_error("HMAC-SHA256 failed (OpenSSL)");
  return to_hex(mac, len);
}

bool proof_matches(const std::string& expected, const std::string& given) {
  // The length is public (64 hex digits); the bytes are compared in constant time.
  return !expected.empty() && expected.size() == given.size() &&
         CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

std::string clean_text(const std::string& s, size_t max_bytes, bool newlines, bool keep_end) {
  // Decoded strictly (Note [UTF-8 text]): no overlong forms, surrogates or code points past
  // U+10FFFF; each byte that begins no character becomes U+FFFD.
  std::string kept;
  kept.reserve(s.size());
  const std::string_view all(s);
  for (size_t i = 0; i < s.size();) {
    const size_t len = text::utf8_char_length(all.substr(i));
    const auto c = static_cast<unsigned char>(s[i]);
    if (len == 0) {
      kept += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (len == 1) {
      if (c == '\n' && newlines) kept += '\n';
      else if (c == '\t') kept += ' ';
      else if (c >= 0x20 && c != 0x7f) kept += static_cast<char>(c);
    } else if (!(len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0)) {  // C1 controls (U+0080..U+009F) dropped
      kept.append(s, i, len);
    }
    i += len;
  }
  return keep_end ? text::utf8_tail(kept, max_bytes) : text::utf8_head(kept, max_bytes);
}

std::string log_escape(const std::string& s, size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

Failure sanitize_failure(Failure f) {
  if (f.reason != "WorkerFailed" && f.reason != "Stall") f.reason = "WorkerFailed";
  if (f.code < 1 || f.code > 255) f.code = 1;  // a failure's shell code: 1..255
  f.what = clean_text(f.what, kFailureWhatBytes);
  f.tail = clean_text(f.tail, kFailureTailBytes, /*newlines=*/true, /*keep_end=*/true);
  return f;
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
      m.fields["tail"] = text::utf8_tail(f->tail, kFailureTailBytes);
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
  return sanitize_failure(std::move(f));
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

// ---- Note [Barrier state] ----

BarrierState::BarrierState(int nnodes, int max_restarts, std::string restart_policy, Clock::time_point now,
                           Clock::duration rendezvous_timeout, Clock::duration stop_limit)
    : n_(nnodes),
      max_restarts_(max_restarts),
      policy_(std::move(restart_policy)),
      stop_limit_(stop_limit),
      members_(static_cast<size_t>(nnodes), false),
      done_(static_cast<size_t>(nnodes), false),
      stopped_(static_cast<size_t>(nnodes), false),
      deadline_(now + rendezvous_timeout) {}

std::string BarrierState::join(int node, Out& out) {
  if (members_[static_cast<size_t>(node)])
    return "node " + std::to_string(node) + " has already joined (two pods with one node rank?)";
  if (phase_ != Phase::Gathering) return "the job has already started without it";
  members_[static_cast<size_t>(node)] = true;
  if (std::count(members_.begin(), members_.end(), true) == n_) {
    phase_ = Phase::Running;
    if (n_ > 1) out.info("all " + std::to_string(n_) + " agents joined; starting generation 0");
    out.broadcast.push_back({"START", {{"gen", "0"}}});
  }
  return "";
}

void BarrierState::message(int node, const Message& m, long long at_ms, Clock::time_point now, Out& out) {
  if (m.get_int("gen", -1) != gen_) return;  // about an older generation: ignore
  auto report = [&] {  // a member's report, as the server saw it (Note [Barrier trust])
    auto f = failure_of(m);
    if (!f || !reported_.insert(node).second) return;
    f->node = node;
    f->at_ms = at_ms;
    reports_.push_back(*f);
  };
  const auto i = static_cast<size_t>(node);
  if (m.verb == "FAILED") {
    report();
    if (phase_ == Phase::Running) begin_stop("node " + std::to_string(node) + " reports a failure", now, out);
  } else if (m.verb == "STOPPED") {
    report();
    if (phase_ == Phase::Stopping) stopped_[i] = true;
    maybe_decide(out);
  } else if (m.verb == "DONE") {
    done_[i] = true;
    if (phase_ == Phase::Stopping) {
      stopped_[i] = true;
      maybe_decide(out);
    } else if (phase_ == Phase::Running && std::count(done_.begin(), done_.end(), true) == n_) {
      finish(0, "all " + std::to_string(n_) + " node(s) finished", std::nullopt, out);
    }
  }
}

void BarrierState::lost(int node, const std::string& verdict, Out& out) {
  if (phase_ == Phase::Finished || node < 0) return;
  if (done_[static_cast<size_t>(node)] && phase_ == Phase::Running) return;  // it finished, then left: fine
  if (phase_ == Phase::Gathering) return;                                   // it may come back before the start
  finish(contract::kExitRendezvous,
         !verdict.empty() ? verdict
                          : "the agent of node " + std::to_string(node) +
                                " is gone (its pod deleted, its node lost or the agent killed)",
         std::nullopt, out);
}

void BarrierState::tick(Clock::time_point now, Out& out) {
  if (now <= deadline_ || (phase_ != Phase::Gathering && phase_ != Phase::Stopping)) return;
  std::vector<int> missing;
  for (int i = 0; i < n_; ++i)
    if (phase_ == Phase::Gathering ? !members_[static_cast<size_t>(i)] : !stopped_[static_cast<size_t>(i)])
      missing.push_back(i);
  finish(contract::kExitRendezvous,
         phase_ == Phase::Gathering
             ? "the agents of node(s) " + node_list(missing) + " did not join within the rendezvous timeout"
             : "node(s) " + node_list(missing) + " did not stop their workers in time",
         std::nullopt, out);
}

void BarrierState::finish(int code, const std::string& why, const std::optional<Failure>& cause, Out& out) {
  Message m = failure_message("EXIT", gen_, cause);
  m.fields["exit"] = std::to_string(code);
  m.fields["why"] = why;
  // Note [Silent peer]: the generation ends because that member went silent.
  if (code == contract::kExitRendezvous && silent_node_ >= 0) m.fields["silent"] = std::to_string(silent_node_);
  out.broadcast.push_back(std::move(m));
  phase_ = Phase::Finished;
  if (code == 0 && n_ > 1) out.info("generation " + std::to_string(gen_) + " ends for every node: " + why);
  else if (code != 0)
    out.warn("generation " + std::to_string(gen_) + " ends for every node: " + why + " (exit " + std::to_string(code) + ")");
}

void BarrierState::begin_stop(const std::string& why, Clock::time_point now, Out& out) {
  phase_ = Phase::Stopping;
  for (size_t i = 0; i < stopped_.size(); ++i) stopped_[i] = done_[i] && !members_[i];
  deadline_ = now + stop_limit_;
  out.info("generation " + std::to_string(gen_) + ": " + why + "; every node stops its workers");
  out.broadcast.push_back({"STOP", {{"gen", std::to_string(gen_)}}});
}

void BarrierState::maybe_decide(Out& out) {
  if (phase_ != Phase::Stopping || std::count(stopped_.begin(), stopped_.end(), true) < n_) return;
  auto cause = pick_cause(reports_);
  if (!cause) {  // every node finished while stopping: nothing failed after all
    finish(0, "all " + std::to_string(n_) + " node(s) finished", std::nullopt, out);
    return;
  }
  Verdict v = decide(*cause, gen_, max_restarts_, policy_);
  if (!v.restart) {
    finish(v.exit_code, v.why, cause, out);
    return;
  }
  ++gen_;
  reports_.clear();
  reported_.clear();
  std::fill(done_.begin(), done_.end(), false);
  phase_ = Phase::Running;
  Message m = failure_message("START", gen_, cause);
  m.fields["why"] = v.why;
  out.warn("every node has stopped; starting generation " + std::to_string(gen_) + ": " + v.why);
  out.broadcast.push_back(std::move(m));
}

// ---- server ----

BarrierServer::BarrierServer(const Config& cfg, const std::string& address, int port) : cfg_(cfg) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
  if (cfg_.barrier_secret.empty())
    LOCKSTEP_LOG(Warn, "barrier", "LOCKSTEP_BARRIER_SECRET is not set: the restart barrier on " << address << ":" << port_
                                  << " admits any peer that names this job's run id and gang attempt (the operator and "
                                     "`lockstep run` set it; agents started by hand need one random value on every node)");
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe failed");
  thread_ = std::thread([this] { loop(); });
}

std::string BarrierServer::fenced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
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

// Note [Heartbeats]'s messages: a measured silence ("6.03 s") and a setting ("6 s", "2.5 s").
std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}
std::string setting_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

std::string peer_name(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// BarrierServer's thread: the I/O of the restart barrier (accepting, reading every peer within
// Note [Barrier trust]'s bounds, writing without blocking, heartbeats, freezes), with the
// protocol's decisions left to BarrierState (Note [Barrier state]).
class ServerLoop {
 public:
  ServerLoop(const Config& cfg, int& listen_fd, const int* wake, std::mutex& mu, std::string& fenced)
      : cfg_(cfg),
        listen_fd_(listen_fd),
        wake_(wake),
        mu_(mu),
        fenced_(fenced),
        n(cfg.nnodes),
        node_conn(static_cast<size_t>(cfg.nnodes), nullptr),
        // Stopping takes the grace period and at most 10 s of SIGKILL (Supervisor::stop_group).
        state(cfg.nnodes, cfg.max_restarts, cfg.restart_policy, Clock::now(), cfg.rendezvous_timeout,
              cfg.grace_period + std::chrono::seconds(30)),
        interval(cfg.heartbeat_interval()),
        checks(cfg.peer_checks()),
        timeout_text("more than " + cfg.peer_timeout_from + ", " + setting_text(cfg.peer_timeout)),
        next_alive(Clock::now() + interval) {}

  void run() {
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
    }
    for (auto& c : conns) ::close(c->fd);
  }

 private:
  // Waits (at most 200 ms) for the wake pipe, the listener and every connection that may be
  // read or written.
  void poll_round() {
    const auto now = Clock::now();
    // Note [Heartbeats]: each member's read budget refills at kMemberReadRate; one that has
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

  // Note [Heartbeats]: a round this late means this thread was frozen (or starved) longer
  // than the peer timeout: the members have given this server up. Before anything is read or
  // accepted, it closes every connection and its listener without a word, and serves no more.
  bool frozen() {
    const auto woke = Clock::now();
    if (!checks || leaving || state.phase() == Phase::Finished || woke - last_round <= cfg_.peer_timeout) return false;
    const std::string why = "the restart barrier's server was silent itself for " + seconds_text(woke - last_round) +
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

  // What the poll found: output flushed, input read and handled, new connections accepted.
  void serve() {
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

  // A HELLO within kHelloTimeout of the accept (a refusal delivered by then too); a member's
  // silence (Note [Heartbeats]); our own ALIVE.
  void check_deadlines() {
    const auto t = Clock::now();
    for (auto& c : conns)
      if (c->node < 0 && !c->dead && t - c->since > kHelloTimeout) {
        if (c->closing) c->dead = true;
        else drop(*c, "no HELLO within " + std::to_string(kHelloTimeout.count()) + " s");
      }
    // Note [Heartbeats]: a member silent for the peer timeout is lost, as if it had closed.
    if (checks && state.phase() != Phase::Finished)
      for (auto& c : conns)
        if (c->node >= 0 && !c->dead && node_conn[c->node] == c.get() && t - c->heard > cfg_.peer_timeout) {
          const std::string silence = "said nothing for " + seconds_text(t - c->heard) + " (" + timeout_text + ")";
          state.silent(c->node);
          drop(*c, "it " + silence,
               "node " + std::to_string(c->node) + "'s agent (" + c->peer + ") " + silence +
                   "; treating it as lost (its node frozen, powered off or cut off)");
        }
    if (t >= next_alive) {
      next_alive = t + interval;
      broadcast({"ALIVE", {}});
    }
  }

  // Closes what is done with; a member's loss may end the generation.
  void close_dead() {
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
      BarrierState::Out out;
      state.lost(node, verdict, out);
      apply(out);
    }
    refusals.roll();
  }


 private:
  using Phase = BarrierState::Phase;

  // `verdict`: what the generation's end says of this member, if it ends it ("" for a plain
  // loss).
  void drop(Conn& c, const std::string& why, const std::string& verdict = "") {
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
  void flush(Conn& c) {
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
  void queue(Conn& c, const Message& m) {
    if (c.dead) return;
    c.out += encode(m) + "\n";
    if (c.out.size() > kMaxQueuedBytes) {
      drop(c, "it does not read what it is sent (" + std::to_string(c.out.size()) + " bytes queued)");
      return;
    }
    flush(c);
  }
  void refuse(Conn& c, const std::string& text) {
    queue(c, {"EXIT", {{"exit", std::to_string(contract::kExitRendezvous)}, {"why", text}}});
    c.closing = true;
    flush(c);
  }
  void broadcast(const Message& m) {
    for (Conn* c : node_conn)
      if (c) queue(*c, m);
  }
  // What the state machine asks for: its lines logged, its messages sent to every member.
  void apply(const BarrierState::Out& out) {
    for (const auto& [warn, line] : out.log) {
      if (warn) LOCKSTEP_LOG(Warn, "barrier", line);
      else LOCKSTEP_LOG(Info, "barrier", line);
    }
    for (const auto& m : out.broadcast) broadcast(m);
  }
  void hello(Conn& c, const Message& m) {
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
  void handle(Conn& c, const Message& m) {
    if (c.node < 0) {  // the first line must be a HELLO
      if (m.verb == "HELLO") hello(c, m);
      else drop(c, "it sent " + log_escape(m.verb, 16) + " before HELLO");
      return;
    }
    BarrierState::Out out;
    state.message(c.node, m, unix_ms(), Clock::now(), out);
    apply(out);
  }
  // Note [Heartbeats]: a member's ALIVE, which carries nothing the server keeps. True when
  // `line` is one (handled: the member may be closed for its size).
  bool heartbeat(Conn& c, const char* line, size_t len) {
    static constexpr char kAlive[] = "ALIVE";
    const size_t k = sizeof kAlive - 1;
    if (c.node < 0 || len < k || std::memcmp(line, kAlive, k) != 0 || (len > k && line[k] != ' ')) return false;
    if (len > kMaxHeartbeatBytes)
      drop(c, "a heartbeat of " + std::to_string(len) + " bytes (at most " + std::to_string(kMaxHeartbeatBytes) + ")");
    return true;
  }
  // Reads what `c` sent (at most 64 KiB a round, so no peer starves the others, and no more of a
  // member than its budget, Note [Heartbeats]) and handles each complete line, within the
  // bounds of Note [Barrier trust].
  void receive(Conn& c) {
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
        if (heartbeat(c, line, len)) continue;
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
  long unjoined() {
    return static_cast<long>(std::count_if(conns.begin(), conns.end(), [](const auto& c) { return c->node < 0 && !c->dead; }));
  }
  void drop_oldest_unjoined(const std::string& why) {
    for (auto& c : conns)  // accepted in order: the first is the oldest
      if (c->node < 0 && !c->dead) {
        c->closing ? void(c->dead = true) : drop(*c, why);
        return;
      }
  }
  void accept_new() {
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


  const Config& cfg_;
  int& listen_fd_;
  const int* wake_;
  std::mutex& mu_;
  std::string& fenced_;  // under mu_
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

}  // namespace

void BarrierServer::loop() { ServerLoop(cfg_, listen_fd_, wake_, mu_, fenced_).run(); }

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
  if (fd_ >= 0 && !eof_ && timeout.count() > 0) {
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout.count()));
  }
  tick();
  return take();
}

}  // namespace lockstep::agent
