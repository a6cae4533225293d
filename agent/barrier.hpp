// The restart barrier: how the agents of one job restart every worker in place, together
// (docs/agent.md, "In-place restarts: the restart barrier").
//
// Note [Restart barrier]
// Node 0's agent serves the barrier (BarrierServer, on LOCKSTEP_AGENT_PORT, by default the
// master port + 1); every agent, node 0's included, is its client over TCP. The server keeps
// the job's generation g: the number of in-place restarts in this gang attempt.
//   * Join: each agent says HELLO with its node rank, the job's run id and its gang attempt.
//     Generation 0 starts (START gen=0) once all nnodes agents have joined: the agents'
//     rendezvous, before any worker exists.
//   * Failure: an agent whose worker exits non-zero, or which detects a stall, sends FAILED
//     and stops its workers. The server tells every agent to STOP generation g; each stops
//     all of its workers (SIGTERM, grace, SIGKILL, every descendant gone) and answers
//     STOPPED with its own first failure, if it had one before the STOP came.
//   * Decision, once every agent has stopped: the cause is the earliest failure that is not
//     a consequence of another (a collective or rendezvous error of a rank whose peer died:
//     contract::kExitCollective, kExitRendezvous), else the earliest. If the restart policy
//     retries it and fewer than the budget (LOCKSTEP_IN_PLACE_RESTARTS) restarts were done,
//     START gen=g+1 goes to all, and each agent starts its workers again in the same pod
//     (TORCHELASTIC_RESTART_COUNT says the generation); no worker of g is left anywhere
//     when any worker of g+1 starts. Otherwise EXIT with the cause's code goes to all, every
//     agent exits with it, and the operator's gang restart (pod recreation) or failure
//     follows, judging that code as it always has.
//   * Success: an agent whose workers all finished sends DONE; when every agent has, EXIT 0.
//     Node 0's agent, which serves the barrier, leaves last.
//   * Loss: an agent that disconnects before DONE (its pod deleted, its node lost, the agent
//     killed), or says nothing for the peer timeout (Note [Heartbeats]), ends the generation
//     for everyone with EXIT 76 (retryable): a lost pod is the operator's to replace. A client
//     that loses the server, or hears nothing from it for the peer timeout, does the same on
//     its own.
// Messages are lines of `VERB key=value ...`, values percent-encoded. Note [Barrier trust]
// says who may join and what a stranger can cost the server; Note [Heartbeats] how a silent
// node is noticed in seconds.
//
// Note [Heartbeats]
// A node that dies without a word (frozen, powered off, its traffic dropped) closes no
// connection: TCP would notice in minutes, a collective in up to 10 (NCCL). So the barrier's
// connections carry heartbeats both ways, and silence is loss (docs/agent.md, "A silent
// node"). T is the peer timeout (--peer-timeout, LOCKSTEP_PEER_TIMEOUT; default
// 6 s), I = min(1 s, T/4) the heartbeat interval (Config::heartbeat_interval).
//   * Both ways: the server says ALIVE to every joined member every I; every member, once it
//     has said HELLO, says ALIVE every I. Neither depends on the workers: the server is a
//     thread of its own, and the agent ticks its client (BarrierClient::tick, which sends the
//     heartbeat when due and reads what came, keeping it for poll) in every loop it runs once
//     joined, at most 100 ms apart: waiting to start, watching workers, stopping them through
//     the grace period and the SIGKILL rounds, and waiting for the verdict.
//   * Silence is loss. The server treats a member from which no complete line came for T as
//     it treats a disconnect (Loss, above: EXIT 76 for everyone; while gathering, the member
//     may join again; a member that finished, while the others run on, is no loss). Its
//     verdict names the node, its address and the silence ("node 2's agent (10.244.2.5:41234)
//     said nothing for 6.1 s ..."). A member that heard nothing from the server for T treats
//     it as lost: it stops its workers and exits 76; one whose workers all finished exits 0
//     without the verdict, as when the connection closes (the gang reruns whole in any case:
//     Note [Partly succeeded] in the operator). --barrier-timeout, which bounded only that
//     finished wait (60 s, when ALIVE came every 5 s), is now an older name of --peer-timeout.
//   * Fencing of a thawed agent. An agent that was silent itself for more than T (a gap between
//     two ticks of its own loop on CLOCK_MONOTONIC, which runs on across SIGSTOP and a cgroup
//     freeze) has been given up by its peers, or may have been: it closes its connection at
//     once, acts on nothing it reads afterwards (a START buffered before the freeze would start
//     workers of a generation the gang has left), stops its workers and exits 76 (0 if they had
//     all finished), saying why. So does a member whose connection ended: a START read together
//     with the end of the connection is not acted on. The server's thread measures the same
//     gap between its rounds: a server that was silent for more than T closes its listener and
//     every connection without a word, before it reads or accepts anything, and serves no more;
//     node 0's agent, frozen with it, stands down as above. It cannot tell an agent of a newer
//     gang attempt anything: that attempt has new pods (new addresses; pod 0's name is reused
//     only once the old pod is gone), and its secret is new (Note [Barrier secret] in the
//     operator), so a newer agent that reached the old server anyway would fail its proof there
//     and only be refused (kRefusal; it would exit 76), never admitted or given a verdict.
//   * Why these numbers. 1 s heartbeats cost nothing (6 bytes a second a member). T = 6 s
//     lets 5 heartbeats in a row be late or lost before a node is: TCP resends a lost segment
//     after 0.2, 0.4, 0.8, 1.6 s (3 s for four losses in a row), and a busy 2-core CI machine
//     delays a sleeping thread by far less than a second (agent_test runs 4 CPU-bound workers
//     on 2 cores with T = 2 s without a false loss). A silent node is noticed within T + I
//     (7 s), and everyone's workers stop within the grace period after that. The minimum is
//     2 s (with I = 0.5 s); 0 turns the checks off (heartbeats still go): for a debugger that
//     stops an agent, or `lockstep run` suspended with Ctrl-Z longer than T, where TCP
//     keepalive (about a minute) and the collectives' own timeouts remain. A single node has
//     no peer and no checks. CLOCK_MONOTONIC, not CLOCK_BOOTTIME: a machine suspended whole
//     (every agent of a `lockstep run`) resumes together; a node suspended alone finds its
//     connections closed by the peers that gave it up.
//   * Bounds (Note [Barrier trust]): a member's heartbeat is at most kMaxHeartbeatBytes and
//     carries nothing the server keeps (its fields are ignored); a longer one closes the
//     member's connection. The server reads at most kMemberReadRate bytes a second from a
//     member (a burst of kMemberReadBurst): a member that floods heartbeats keeps its seat (its
//     heartbeats are read, at that rate) but costs the server little; the rest waits in the
//     kernel's buffers, and TCP slows the sender.
//
// Note [Silent peer]
// A gang that ends because a node's agent went silent (Note [Heartbeats]; not one whose
// connection closed: a deleted pod closes it, a dead node does not) tells the operator which
// node: node 0's server puts `silent=R` into its EXIT, a member that hears nothing from node 0
// takes R = 0, and every agent that exits 76 so writes `lockstep-silent-peer node=R` as the
// first line of its termination message (contract::kSilentPeerLine; never cut, whatever the
// rest's length). The operator, seeing it on a failed pod of the attempt while pod R still
// runs in the API, takes pod R's node for lost before the node controller does (it is still
// Ready for up to its grace period): it force-deletes pod R and the next attempt prefers other
// nodes (Note [Lost nodes] in operator/reconcile/node.hpp). Only the first, silent, member is named.
//
// Note [Barrier trust]
// Any pod in the cluster can reach node 0's agent (docs/security.md, "The restart barrier"). So:
//   * Membership is proved, never claimed. On accept the server sends `CHALLENGE nonce=N`
//     (32 random bytes, hex); the client answers `HELLO node=R run=ID attempt=A proof=P`,
//     P = HMAC-SHA256(secret, barrier_proof_input(N, R, ID, A)) in hex, with the job's
//     secret (LOCKSTEP_BARRIER_SECRET: the operator draws one per gang attempt, `lockstep run`
//     one per run; docs/security.md). The server compares in constant time. Without a secret
//     (an agent started by hand) the server admits a HELLO whose run id and attempt match and
//     says so in its log, once.
//   * A refusal tells nothing: one fixed text (kRefusal), no run id, attempt or node echoed,
//     and the connection is closed. What is checked is said only in node 0's own log,
//     escaped (log_escape) and rate-limited.
//   * A stranger holds little, briefly: kMaxUnjoinedBytes before HELLO, kHelloTimeout to say
//     it, at most kMaxUnjoined such connections (the oldest is dropped for a new one: a real
//     agent says HELLO one round trip after connecting, so it is never the oldest for long,
//     while dropping the newest would let a stranger hold every seat by reconnecting). At the
//     fd limit the listener is left alone for kAcceptBackoff and the oldest stranger dropped.
//   * Nobody wedges the server: sockets are non-blocking, each with an output queue of at most
//     kMaxQueuedBytes; a peer that lets it overflow is closed (a member: lost, EXIT 76).
//   * What a member reports is bounded before it reaches a log, a termination message or the
//     job's status (sanitize_failure): valid UTF-8, no control characters (newlines only in a
//     tail), at most kFailureWhatBytes / kFailureTailBytes; its node is the connection's, its
//     time the server's clock on receipt (the sender's `at` is ignored).
//   * Liveness is Note [Heartbeats]: what a heartbeat may carry and how fast a member may send
//     are bounded there.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"

namespace lockstep::agent {

// One agent's first failure in a generation.
struct Failure {
  int node = -1;
  int rank = -1;
  int code = 0;               // the worker's shell code (128+N for signal N), or 75 for a stall
  std::string reason;         // "WorkerFailed" | "Stall"
  long long at_ms = 0;        // unix time it was seen, milliseconds
  std::string what;           // e.g. "rank 3 (pid 812) was killed by SIGKILL"
  std::string tail;           // the failing rank's last output lines ('\n'-separated, at most
                              // kFailureTailBytes): every node's agent can quote the cause's own words
};
inline constexpr size_t kFailureTailBytes = 2048;
inline constexpr size_t kFailureWhatBytes = 512;
inline constexpr size_t kVerdictWhyBytes = 1024;

// Note [Barrier trust]: the server's bounds.
inline constexpr size_t kMaxUnjoinedBytes = 4096;        // what a peer may send before it has joined
inline constexpr size_t kMaxLineBytes = 64 * 1024;       // one line of a member
inline constexpr size_t kMaxQueuedBytes = 256 * 1024;    // output waiting for one peer to read it
inline constexpr int kMaxUnjoined = 64;                  // connections that have not joined
inline constexpr std::chrono::seconds kHelloTimeout{10}; // from accept to a valid HELLO
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};  // at EMFILE / ENFILE
// Note [Heartbeats]: the longest heartbeat line a member may send, and how much of a member's
// input the server reads a second (a burst of kMemberReadBurst). A member's own traffic is a
// few lines of at most ~40 KiB in a generation and 6 bytes a second.
inline constexpr size_t kMaxHeartbeatBytes = 64;
inline constexpr size_t kMemberReadRate = 256 * 1024;
inline constexpr size_t kMemberReadBurst = 256 * 1024;
// The one answer to a HELLO that does not prove membership.
inline constexpr const char* kRefusal =
    "refused by node 0's agent: this agent did not prove it belongs to the job's current gang attempt "
    "(LOCKSTEP_BARRIER_SECRET, the run id and LOCKSTEP_RESTART_ATTEMPT must be those of node 0's pod)";

// Note [Barrier trust]: the challenge-response. The input is unambiguous (fixed fields first,
// the run id, which may hold anything, last).
std::string barrier_proof_input(const std::string& nonce, int node, int attempt, const std::string& run_id);
std::string barrier_proof(const std::string& secret, const std::string& nonce, int node, int attempt,
                          const std::string& run_id);  // hex HMAC-SHA256
bool proof_matches(const std::string& expected, const std::string& given);  // constant time

// Peer text made safe for status: valid UTF-8 (invalid sequences become U+FFFD), control
// characters dropped (a tab becomes a space; '\n' kept only if `newlines`), at most `max_bytes`
// (the start kept, or the end with `keep_end`), never a split character.
std::string clean_text(const std::string& s, size_t max_bytes, bool newlines = false, bool keep_end = false);
// Peer text for a log line: printable ASCII kept, every other byte as \xNN, at most `max` bytes
// of the input shown.
std::string log_escape(const std::string& s, size_t max = 64);
// A member's failure as it may reach status (Note [Barrier trust]).
Failure sanitize_failure(Failure f);

// The barrier's wire format.
struct Message {
  std::string verb;
  std::map<std::string, std::string> fields;
  std::string get(const std::string& k, const std::string& fallback = "") const;
  int get_int(const std::string& k, int fallback = -1) const;
};
std::string encode(const Message& m);                   // one line, no newline
std::optional<Message> decode(const std::string& line);  // nullopt if malformed
Message failure_message(const std::string& verb, int generation, const std::optional<Failure>& f);
std::optional<Failure> failure_of(const Message& m);

// Pure decisions (unit tested).
bool restartable_in_place(const std::string& policy, int code);  // policy: OnFailure | ExitCode | Never
// The cause among the agents' reports: the earliest non-consequence, else the earliest.
std::optional<Failure> pick_cause(const std::vector<Failure>& reports);
struct Verdict {
  bool restart = false;
  int exit_code = 0;
  std::string why;  // for logs, the termination message and the metrics' info
};
Verdict decide(const Failure& cause, int generation, int budget, const std::string& policy);

// Note [Barrier state]
// The server's generation protocol of Note [Restart barrier], as a state machine with no
// sockets, threads or clock of its own (the time is given to it), like decide(): BarrierServer's
// loop does the I/O (accepting, reading within Note [Barrier trust]'s bounds, heartbeats) and
// tells it what happened; it answers with the messages to broadcast to every member and the
// lines to log. Unit tested on its own (barrier_state_test).
class BarrierState {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Phase { Gathering, Running, Stopping, Finished };
  struct Out {
    std::vector<Message> broadcast;  // to every member, in order
    std::vector<std::pair<bool, std::string>> log;  // (warning?, line)
    void info(std::string s) { log.emplace_back(false, std::move(s)); }
    void warn(std::string s) { log.emplace_back(true, std::move(s)); }
  };
  // `rendezvous_timeout` from `now` for every member to join; `stop_limit` for every member to
  // stop its workers once a generation is being stopped.
  BarrierState(int nnodes, int max_restarts, std::string restart_policy, Clock::time_point now,
               Clock::duration rendezvous_timeout, Clock::duration stop_limit);

  // A HELLO that proved itself: "" (a member from now on) or why it is refused.
  std::string join(int node, Out& out);
  // Its connection is gone (closed, or dropped for its conduct): no longer a member. The
  // decision about it comes with lost(), once the round's reading is over.
  void left(int node) { members_[static_cast<size_t>(node)] = false; }
  // Note [Silent peer]: the member went silent; the first such one is named in the EXIT.
  void silent(int node) {
    if (silent_node_ < 0) silent_node_ = node;
  }
  // A member's FAILED, STOPPED or DONE (others, and other generations', are ignored); `at_ms`
  // stamps a failure report (Note [Barrier trust]: the server's time, not the member's).
  void message(int node, const Message& m, long long at_ms, Clock::time_point now, Out& out);
  // A member lost (`verdict`: what the generation's end says of it; "" for a plain loss).
  void lost(int node, const std::string& verdict, Out& out);
  // The rendezvous or the stop ran out of time.
  void tick(Clock::time_point now, Out& out);

  Phase phase() const { return phase_; }
  int generation() const { return gen_; }
  bool member(int node) const { return members_[static_cast<size_t>(node)]; }

 private:
  void finish(int code, const std::string& why, const std::optional<Failure>& cause, Out& out);
  void begin_stop(const std::string& why, Clock::time_point now, Out& out);
  void maybe_decide(Out& out);

  int n_, max_restarts_;
  std::string policy_;
  Clock::duration stop_limit_;
  Phase phase_ = Phase::Gathering;
  int gen_ = 0, silent_node_ = -1;
  std::vector<bool> members_, done_, stopped_;
  std::vector<Failure> reports_;
  std::set<int> reported_;
  Clock::time_point deadline_;
};

// Node 0's agent's server. Runs its own thread; the destructor stops it.
class BarrierServer {
 public:
  // Listens on `address`:`port` (port 0: any free one, see port()). Throws
  // std::runtime_error naming LOCKSTEP_AGENT_PORT when it cannot.
  BarrierServer(const Config& cfg, const std::string& address, int port);
  ~BarrierServer();
  BarrierServer(const BarrierServer&) = delete;
  BarrierServer& operator=(const BarrierServer&) = delete;
  int port() const { return port_; }
  // Note [Heartbeats]: why this server stopped serving after a freeze, or "" while it serves.
  std::string fenced() const;

 private:
  void loop();
  Config cfg_;
  mutable std::mutex mu_;
  std::string fenced_;  // under mu_
  int listen_fd_ = -1, port_ = 0, wake_[2] = {-1, -1};
  std::thread thread_;
};

// An agent's side of the barrier: a line-oriented connection, read and written without
// blocking.
class BarrierClient {
 public:
  using Clock = std::chrono::steady_clock;
  BarrierClient() = default;
  ~BarrierClient();
  BarrierClient(const BarrierClient&) = delete;
  BarrierClient& operator=(const BarrierClient&) = delete;
  // Note [Heartbeats]: how often this agent says ALIVE once it has said HELLO.
  void set_heartbeat_interval(std::chrono::milliseconds interval) { interval_ = interval; }
  // One attempt to connect; false (and `error` says why) if it failed.
  bool connect(const std::string& host, int port, std::string& error);
  // Queues `m` and writes what the socket takes now; the rest goes with the next tick. A
  // server that leaves kMaxQueuedBytes unread is lost. Saying HELLO makes this agent a member:
  // from then on it says ALIVE and its silence is measured.
  void send(const Message& m);
  // The next message, waiting at most `timeout`; nullopt if none. lost() once the server's
  // side is closed. Ticks (below).
  std::optional<Message> poll(std::chrono::milliseconds timeout);
  // Note [Heartbeats]: sends this agent's ALIVE when due, writes what is queued and reads what
  // the server sent (kept for poll), never blocking. Call at least every 100 ms once HELLO is
  // said, whatever else the agent is doing.
  void tick();
  // Closes the connection at once (a fenced agent: Note [Heartbeats]); lost() from then on.
  void close();
  bool lost() const { return lost_; }
  // Note [Heartbeats]: how long the server has said nothing (0 before HELLO), and the longest
  // this agent went between two ticks since it said HELLO (its own silence).
  std::chrono::milliseconds server_silence() const;
  std::chrono::milliseconds own_silence() const { return own_silence_; }
  // The server's address as connected, ip:port.
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_; }

 private:
  void read_available();
  void flush();
  int fd_ = -1;
  bool lost_ = false;     // the connection ended, broke, or was closed here
  bool eof_ = false;      // nothing more to read
  bool member_ = false;   // said HELLO on this connection
  std::string buffer_, out_, peer_;
  std::chrono::milliseconds interval_{1000};
  Clock::time_point last_heard_{}, last_tick_{}, next_beat_{};
  std::chrono::milliseconds own_silence_{0};
};

long long unix_ms();

}  // namespace lockstep::agent
