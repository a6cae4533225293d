// agent/barrier/server: node 0's agent's server with real clients on loopback, through a
// generation's failure, restart, success and loss (Note [Restart barrier] in
// `agent/barrier/state.hpp`).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>

#include "barrier/client.hpp"
#include "barrier/server.hpp"
#include "barrier/trust.hpp"
#include "barrier_support.hpp"
#include "lockstep/contract.hpp"

using namespace lockstep::agent;
using lockstep::test::barrier_config;
using lockstep::test::failure;
using lockstep::test::join;
using lockstep::test::next;

TEST(Barrier, AFailureStopsEveryNodeAndTheNextGenerationStartsOnlyWhenAllHaveStopped) {
  BarrierServer server(barrier_config(2, 1), "127.0.0.1", 0);
  BarrierClient n0, n1;
  join(n0, server.port(), 0);
  EXPECT_FALSE(n0.poll(std::chrono::milliseconds(200)).has_value()) << "generation 0 waits for every node";
  join(n1, server.port(), 1);
  ASSERT_TRUE(next(n0, "START")) << "all joined";
  ASSERT_TRUE(next(n1, "START"));
  n1.send(failure_message("FAILED", 0, failure(1, 137, unix_ms())));
  ASSERT_TRUE(next(n0, "STOP"));
  ASSERT_TRUE(next(n1, "STOP"));
  n1.send(failure_message("STOPPED", 0, failure(1, 137, unix_ms())));
  EXPECT_FALSE(n1.poll(std::chrono::milliseconds(300)).has_value()) << "node 0 has not stopped yet";
  n0.send(failure_message("STOPPED", 0, failure(0, lockstep::contract::kExitCollective, unix_ms() - 5)));
  auto start = next(n0, "START");
  ASSERT_TRUE(start);
  EXPECT_EQ(start->get_int("gen"), 1);
  EXPECT_EQ(start->get_int("code"), 137) << "the peer's collective error was a consequence";
  ASSERT_TRUE(next(n1, "START"));
  // Generation 1 fails too: the budget of 1 is spent, and everyone is told to exit with 3.
  n0.send(failure_message("FAILED", 1, failure(0, 3, unix_ms())));
  ASSERT_TRUE(next(n1, "STOP"));
  n0.send(failure_message("STOPPED", 1, failure(0, 3, unix_ms())));
  n1.send(failure_message("STOPPED", 1, std::nullopt));
  auto exit = next(n1, "EXIT");
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->get_int("exit"), 3);
  EXPECT_NE(exit->get("why").find("in-place restarts spent (1 of 1"), std::string::npos) << exit->get("why");
}

TEST(Barrier, EveryNodeDoneIsExitZeroAndALostNodeEndsTheGeneration) {
  {
    BarrierServer server(barrier_config(2, 3), "127.0.0.1", 0);
    BarrierClient n0, n1;
    join(n0, server.port(), 0);
    join(n1, server.port(), 1);
    ASSERT_TRUE(next(n0, "START"));
    ASSERT_TRUE(next(n1, "START"));
    n1.send(failure_message("DONE", 0, std::nullopt));
    EXPECT_FALSE(n1.poll(std::chrono::milliseconds(300)).has_value()) << "node 0 still trains: no verdict yet";
    n0.send(failure_message("DONE", 0, std::nullopt));
    auto exit = next(n0, "EXIT");
    ASSERT_TRUE(exit);
    EXPECT_EQ(exit->get_int("exit"), 0);
  }
  BarrierServer server(barrier_config(3, 3), "127.0.0.1", 0);
  BarrierClient n0, n1;
  auto n2 = std::make_unique<BarrierClient>();
  join(n0, server.port(), 0);
  join(n1, server.port(), 1);
  join(*n2, server.port(), 2);
  ASSERT_TRUE(next(n0, "START"));
  n2.reset();  // node 2's pod is gone
  auto exit = next(n0, "EXIT");
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->get_int("exit"), lockstep::contract::kExitRendezvous);
  EXPECT_NE(exit->get("why").find("the agent of node 2 is gone"), std::string::npos) << exit->get("why");
  ASSERT_TRUE(next(n1, "EXIT"));
}

// See Note [Heartbeats]: members that tick say ALIVE and hear it; one that stops ticking is lost
// for everyone after the peer timeout, named with its address and its silence.
TEST(Barrier, AMemberSilentForThePeerTimeoutIsLostForEveryone) {
  Config cfg = barrier_config(3, 3);
  cfg.peer_timeout = std::chrono::seconds(2);
  BarrierServer server(cfg, "127.0.0.1", 0);
  BarrierClient n0, n1, n2;
  for (auto* c : {&n0, &n1, &n2}) c->set_heartbeat_interval(cfg.heartbeat_interval());
  join(n0, server.port(), 0);
  join(n1, server.port(), 1);
  join(n2, server.port(), 2);
  ASSERT_TRUE(next(n0, "START"));
  ASSERT_TRUE(next(n1, "START"));
  ASSERT_TRUE(next(n2, "START"));
  // Nodes 0 and 1 go on ticking (poll ticks); node 2 never ticks again.
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<Message> exit;
  for (int i = 0; i < 200 && !exit; ++i) {
    if (auto m = n0.poll(std::chrono::milliseconds(50)); m && m->verb == "EXIT") exit = m;
    n1.tick();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(exit) << "node 2's silence was not noticed";
  EXPECT_GE(took, 1.0);
  EXPECT_EQ(exit->get_int("exit"), lockstep::contract::kExitRendezvous);
  EXPECT_TRUE(std::regex_search(exit->get("why"), std::regex(R"(^node 2's agent \(127\.0\.0\.1:\d+\) said nothing for [0-9.]+ s )"
                                                              R"(\(more than --peer-timeout, 2 s\); treating it as lost)")))
      << exit->get("why");
  EXPECT_LT(n0.server_silence(), std::chrono::seconds(1)) << "the server said ALIVE to node 0 all along";
  EXPECT_EQ(n0.peer().rfind("127.0.0.1:", 0), 0u) << n0.peer();
  ASSERT_TRUE(next(n1, "EXIT"));
  // Node 2 finds its connection closed: the server is done with it.
  for (int i = 0; i < 40 && !n2.lost(); ++i) n2.poll(std::chrono::milliseconds(50));
  EXPECT_TRUE(n2.lost());
}

TEST(Barrier, AnAgentOfAnotherRunOrAttemptOrADuplicateNodeIsRefused) {
  BarrierServer server(barrier_config(2, 3), "127.0.0.1", 0);
  BarrierClient stale, other, n0, dup;
  join(stale, server.port(), 1, "run-1", 5);
  auto m = next(stale, "EXIT");
  ASSERT_TRUE(m);
  // See Note [Barrier trust]: one fixed answer that echoes neither the run id nor the attempt.
  EXPECT_EQ(m->get("why"), kRefusal);
  join(other, server.port(), 1, "run-2");
  m = next(other, "EXIT");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->get("why"), kRefusal);
  EXPECT_EQ(m->get("why").find("run-1"), std::string::npos);
  join(n0, server.port(), 0);
  join(dup, server.port(), 0);
  m = next(dup, "EXIT");
  ASSERT_TRUE(m);
  EXPECT_NE(m->get("why").find("node 0 has already joined"), std::string::npos) << m->get("why");
}

TEST(Barrier, APortInUseIsAClearError) {
  BarrierServer first(barrier_config(2, 0), "127.0.0.1", 0);
  try {
    BarrierServer second(barrier_config(2, 0), "127.0.0.1", first.port());
    ADD_FAILURE() << "a second server on one port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_AGENT_PORT"), std::string::npos) << e.what();
  }
}
