// The restart barrier's trust boundary: what a peer must prove to join, and what it may cost
// node 0's agent or put into a log, a termination message or the job's status. The server
// (server_loop.cpp) applies these bounds; the checks themselves are here.
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
//   * Straggler figures (barrier/figures.hpp; docs/agent.md, "Stragglers"). A member's
//     `FIGURES gen=G w<i>=S l<i>=S [t<i>=B]` (every kFiguresInterval, 5 s) is read only from a
//     joined member (a stranger's first line must be HELLO: its connection is closed) and kept
//     only for the generation that runs (another's is ignored). Every key is w<i>, l<i> or t<i>
//     with i in [0, nproc), w and l finite numbers of seconds in (0, 3600] with l <= w, every w
//     with its l, t an integer in [0, kThrottleAll], l and t beside their w (parse_figures);
//     one bad field and the line is ignored, counted in node 0's log at most once a minute; a
//     line longer than max_figures_bytes (64 + 60 x nproc) closes
//     the member's connection, as an oversized heartbeat does. The server keeps each member's
//     latest line alone, stamped with its own clock on receipt (GangFigures: at most nnodes x
//     nproc figures), and forgets a member's when it leaves, when a new generation starts and
//     when they are older than 3 x kFiguresInterval. The figures reach the score (and, through
//     it, node 0's series and log as numbers it formats itself), never a log or status as text.
#pragma once

#include <chrono>
#include <string>

#include "barrier/codec.hpp"

namespace lockstep::agent {

// See Note [Barrier trust]: the server's bounds.
inline constexpr size_t kMaxUnjoinedBytes = 4096;        // what a peer may send before it has joined
inline constexpr size_t kMaxLineBytes = 64 * 1024;       // one line of a member
inline constexpr size_t kMaxQueuedBytes = 256 * 1024;    // output waiting for one peer to read it
inline constexpr int kMaxUnjoined = 64;                  // connections that have not joined
inline constexpr std::chrono::seconds kHelloTimeout{10}; // from accept to a valid HELLO
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};  // at EMFILE / ENFILE
// See Note [Heartbeats]: the longest heartbeat line a member may send, and how much of a member's
// input the server reads a second (a burst of kMemberReadBurst). A member's own traffic is a
// few lines of at most ~40 KiB in a generation and 6 bytes a second.
inline constexpr size_t kMaxHeartbeatBytes = 64;
inline constexpr size_t kMemberReadRate = 256 * 1024;
inline constexpr size_t kMemberReadBurst = 256 * 1024;
// The one answer to a HELLO that does not prove membership.
inline constexpr const char* kRefusal =
    "refused by node 0's agent: this agent did not prove it belongs to the job's current gang attempt "
    "(LOCKSTEP_BARRIER_SECRET, the run id and LOCKSTEP_RESTART_ATTEMPT must be those of node 0's pod)";

// See Note [Barrier trust]: the challenge-response. The input is unambiguous (fixed fields first,
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

}  // namespace lockstep::agent
