// Helpers the restart barrier's test suites share (tests/agent/barrier/): a barrier on loopback
// joined as an agent joins it, and the failures its agents report.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "barrier/client.hpp"
#include "barrier/codec.hpp"
#include "config.hpp"

namespace lockstep::test {

// The protocol they serve: Note [Restart barrier] in `agent/barrier/state.hpp`.

// A failure of node `node`'s rank node*2 at `at` (unix ms).
inline lockstep::agent::Failure failure(int node, int code, long long at, const std::string& reason = "WorkerFailed") {
  return lockstep::agent::Failure{node, node * 2, code, reason, at, "rank " + std::to_string(node * 2) + " failed", ""};
}

// A job of `nnodes` with `budget` in-place restarts, run id run-1, no secret.
inline lockstep::agent::Config barrier_config(int nnodes, int budget) {
  lockstep::agent::Config c;
  c.nnodes = nnodes;
  c.max_restarts = budget;
  c.run_id = "run-1";
  c.grace_period = std::chrono::seconds(1);
  c.rendezvous_timeout = std::chrono::seconds(5);
  return c;
}

// The next message with `verb` within 5 s, the others passed over.
inline std::optional<lockstep::agent::Message> next(lockstep::agent::BarrierClient& c, const std::string& verb) {
  for (int i = 0; i < 100; ++i)
    if (auto m = c.poll(std::chrono::milliseconds(50)); m && m->verb == verb) return m;
  return std::nullopt;
}

// Joins as an agent does: takes the challenge, answers it (Note [Barrier trust]; these servers
// have no secret, so no proof).
inline void join(lockstep::agent::BarrierClient& c, int port, int node, const std::string& run = "run-1", int attempt = 0) {
  std::string err;
  ASSERT_TRUE(c.connect("127.0.0.1", port, err)) << err;
  ASSERT_TRUE(next(c, "CHALLENGE"));
  c.send({"HELLO", {{"node", std::to_string(node)}, {"run", run}, {"attempt", std::to_string(attempt)}}});
}

}  // namespace lockstep::test
