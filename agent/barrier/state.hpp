// The restart barrier: how the agents of one job restart every worker in place, together
// (docs/agent.md, "In-place restarts: the restart barrier"). Its parts, in agent/barrier/:
// codec (the wire format), trust (proof of membership and the sanitising of a peer's text:
// Note [Barrier trust]), verdict (the decision), state (the protocol: this file), server and
// server_loop (node 0's agent's side, Note [Heartbeats]), client (every agent's side).
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
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "barrier/codec.hpp"

namespace lockstep::agent {

// Note [Barrier state]
// The server's generation protocol of Note [Restart barrier], as a state machine with no
// sockets, threads or clock of its own (the time is given to it), like decide(): BarrierServer's
// loop does the I/O (accepting, reading within Note [Barrier trust]'s bounds, heartbeats) and
// tells it what happened; it answers with the messages to broadcast to every member and the
// lines to log. Unit tested on its own (tests/agent/barrier/state_test.cpp).
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
  // See Note [Silent peer]: the member went silent; the first such one is named in the EXIT.
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

}  // namespace lockstep::agent
