// agent/barrier/client: an agent's side of the restart barrier.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "barrier/client.hpp"
#include "barrier/server.hpp"
#include "barrier_support.hpp"

using namespace lockstep::agent;
using lockstep::test::barrier_config;
using lockstep::test::next;

// See Note [Heartbeats]: an agent measures its own silence between ticks, from its HELLO on.
TEST(Barrier, AnAgentMeasuresItsOwnSilenceBetweenTicks) {
  BarrierServer server(barrier_config(2, 0), "127.0.0.1", 0);
  BarrierClient c;
  std::string err;
  ASSERT_TRUE(c.connect("127.0.0.1", server.port(), err)) << err;
  ASSERT_TRUE(next(c, "CHALLENGE"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.tick();
  EXPECT_EQ(c.own_silence().count(), 0) << "not a member before HELLO";
  c.send({"HELLO", {{"node", "0"}, {"run", "run-1"}, {"attempt", "0"}}});
  c.tick();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  c.tick();
  c.tick();
  EXPECT_GE(c.own_silence(), std::chrono::milliseconds(400));
  EXPECT_LT(c.own_silence(), std::chrono::milliseconds(2000));
  c.close();  // fenced
  EXPECT_TRUE(c.lost());
  EXPECT_FALSE(c.poll(std::chrono::milliseconds(10)).has_value());
}
