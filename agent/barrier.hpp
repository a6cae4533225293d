// The restart barrier: how the agents of one job restart every worker in place, together
// (DESIGN.md, "Restarts: in place first, then the gang"; docs/agent.md).
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
//     killed) ends the generation for everyone with EXIT 76 (retryable): a lost pod is the
//     operator's to replace. A client that loses the server does the same on its own.
// Messages are lines of `VERB key=value ...`, values percent-encoded.
#pragma once

#include <chrono>
#include <map>
#include <optional>
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

 private:
  void loop();
  Config cfg_;
  int listen_fd_ = -1, port_ = 0, wake_[2] = {-1, -1};
  std::thread thread_;
};

// An agent's side of the barrier: a line-oriented connection, read without blocking.
class BarrierClient {
 public:
  BarrierClient() = default;
  ~BarrierClient();
  BarrierClient(const BarrierClient&) = delete;
  BarrierClient& operator=(const BarrierClient&) = delete;
  // One attempt to connect; false (and `error` says why) if it failed.
  bool connect(const std::string& host, int port, std::string& error);
  void send(const Message& m);  // a write to a lost server is noticed by the next poll()
  // The next message, waiting at most `timeout`; nullopt if none. lost() once the server's
  // side is closed.
  std::optional<Message> poll(std::chrono::milliseconds timeout);
  bool lost() const { return lost_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool lost_ = false;
  std::string buffer_;
};

long long unix_ms();

}  // namespace lockstep::agent
