// Node 0's agent's side of the restart barrier (Note [Restart barrier] in
// `agent/barrier/state.hpp`): a thread of its own (server_loop.cpp) that does the protocol's I/O
// and leaves its decisions to BarrierState.
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
//   * Node 0's ALIVE carries `ref=S` once node 0's straggler watch has a reading: the gang's
//     reference, its typical rank's work in seconds (Note [Straggler score]), from which each
//     agent scores its own ranks (lockstep_straggler_score). A member reads it strictly (finite,
//     in (0, 3600]: parse_reference; anything else is no reference) and forgets it 3 x
//     kFiguresInterval after the last ALIVE that carried one, so a score goes absent rather than
//     stale. A member's own ALIVE still carries nothing; its figures are a FIGURES line of their
//     own (Note [Barrier trust]).
#pragma once

#include <mutex>
#include <string>
#include <thread>

#include "barrier/figures.hpp"
#include "config.hpp"

namespace lockstep::agent {

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
  // See Note [Heartbeats]: why this server stopped serving after a freeze, or "" while it serves.
  std::string fenced() const;
  // See Note [Barrier trust]: the members' latest straggler figures, checked, and the reference
  // node 0's ALIVE carries (node 0's straggler watch reads the one and sets the other).
  GangFigures& figures() { return figures_; }

 private:
  void loop();
  Config cfg_;
  mutable std::mutex mu_;
  std::string fenced_;  // under mu_
  GangFigures figures_;
  int listen_fd_ = -1, port_ = 0, wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace lockstep::agent
