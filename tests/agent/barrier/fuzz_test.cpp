// Hostile input for the restart barrier (Note [Barrier trust] in agent/barrier/trust.hpp), as
// fuzz_test.cpp does for the CLI's and operator's parsers: the line decoder, what a member's
// report becomes after sanitizing, and the server's line handling fed seeded random streams
// over real connections. Never a crash or a hang; what reaches status is always valid UTF-8,
// free of control characters and bounded; and the server still starts a real job afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <thread>

#include "barrier/client.hpp"
#include "barrier/codec.hpp"
#include "barrier/figures.hpp"
#include "barrier/server.hpp"
#include "barrier/trust.hpp"
#include "barrier/verdict.hpp"
#include "test_util.hpp"

namespace agent = lockstep::agent;
using namespace std::chrono_literals;

namespace {

std::string random_bytes(std::mt19937& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(len(rng), '\0');
  for (auto& c : s) c = static_cast<char>(byte(rng));
  return s;
}

// Lines near the protocol: real verbs and keys, mutated.
std::string near_protocol(std::mt19937& rng) {
  static const std::vector<std::string> seeds = {
      "HELLO node=1 run=uid attempt=0 proof=" + std::string(64, 'a'),
      "FAILED gen=0 node=1 rank=3 code=1 reason=WorkerFailed at=12 what=rank%203%20died tail=a%0Ab",
      "STOPPED gen=0", "DONE gen=0", "EXIT exit=76 why=x", "START gen=1 why=%FF%FE%1B%5B2J",
      "HELLO node=-1", "HELLO node=99999999999999999999", "HELLO =x", "HELLO a==b", "HELLO a=%", "HELLO a=%G0",
      // See Note [Heartbeats]: a member's heartbeat, and what it may not carry.
      "ALIVE", "ALIVE gen=0", "ALIVE pad=" + std::string(100, 'x'), "ALIVEALIVE", "ALIVE\rx",
      // See Note [Barrier trust]: a member's straggler figures, and node 0's reference.
      "FIGURES gen=0 w0=0.0215 l0=0.01 w1=0.043 l1=0.03 t1=1", "FIGURES gen=3 w7=3600 l7=3600 t7=31",
      "FIGURES gen=0 w0=1e-300 l0=1e-300",
      "ALIVE ref=0.0215", "ALIVE ref=nan",
  };
  std::string s = seeds[rng() % seeds.size()];
  std::uniform_int_distribution<int> byte(0, 255);
  for (int k = static_cast<int>(rng() % 6); k > 0 && !s.empty(); --k) {
    size_t at = rng() % s.size();
    switch (rng() % 3) {
      case 0: s[at] = static_cast<char>(byte(rng)); break;
      case 1: s.erase(at, 1); break;
      default: s.insert(at, 1, static_cast<char>(byte(rng)));
    }
  }
  return s;
}

bool clean(const std::string& s, bool newlines) {
  if (agent::clean_text(s, s.size() + 1, newlines) != s) return false;  // valid UTF-8, no controls
  for (unsigned char c : s)
    if (c < 0x20 && !(newlines && c == '\n')) return false;
  return true;
}


}  // namespace

TEST(FuzzBarrier, DecodeNeverCrashesAndRoundTrips) {
  std::mt19937 rng(26);
  for (int i = 0; i < 20000; ++i) {
    std::string line = i % 2 ? random_bytes(rng, 300) : near_protocol(rng);
    auto m = agent::decode(line);
    if (!m) continue;
    for (char c : m->verb) ASSERT_TRUE(c >= 'A' && c <= 'Z') << line;
    // Whatever decodes encodes to one line that decodes to the same message.
    std::string again = agent::encode(*m);
    ASSERT_EQ(again.find('\n'), std::string::npos);
    auto m2 = agent::decode(again);
    ASSERT_TRUE(m2) << again;
    EXPECT_EQ(m2->verb, m->verb);
    EXPECT_EQ(m2->fields, m->fields);
    (void)m->get_int("gen");
    (void)m->get_int("node");
  }
}

// What parse_figures admits is always in range, whatever the line (Note [Barrier trust]).
TEST(FuzzBarrier, FiguresAndReferencesAreInRangeOrRefused) {
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    auto m = agent::decode(i % 4 ? near_protocol(rng) : random_bytes(rng, 200));
    if (!m) continue;
    std::string error;
    const int nproc = 1 + static_cast<int>(rng() % 8);
    if (auto f = agent::parse_figures(*m, nproc, error)) {
      ASSERT_GE(f->generation, 0);
      ASSERT_LE(f->figures.size(), static_cast<size_t>(nproc));
      for (const auto& x : f->figures) {
        ASSERT_TRUE(x.local_rank >= 0 && x.local_rank < nproc);
        ASSERT_TRUE(std::isfinite(x.median_s) && x.median_s > 0 && x.median_s <= agent::kMaxFigureSeconds) << x.median_s;
        ASSERT_TRUE(std::isfinite(x.lower_s) && x.lower_s > 0 && x.lower_s <= x.median_s) << x.lower_s;
        ASSERT_LE(x.throttle, static_cast<unsigned>(lockstep::straggler::kThrottleAll));
      }
    } else {
      ASSERT_FALSE(error.empty());
    }
    if (auto ref = agent::parse_reference(*m)) {
      ASSERT_TRUE(std::isfinite(*ref) && *ref > 0 && *ref <= agent::kMaxFigureSeconds) << *ref;
    }
  }
}

TEST(FuzzBarrier, WhatAMemberReportsIsCleanAndBoundedAfterSanitizing) {
  std::mt19937 rng(15);
  for (int i = 0; i < 5000; ++i) {
    agent::Message m{"FAILED", {{"gen", "0"}}};
    for (const char* k : {"node", "rank", "code", "reason", "at", "what", "tail"})
      if (rng() % 4) m.fields[k] = random_bytes(rng, k == std::string("tail") ? 6000 : 900);
    if (rng() % 2) m.fields["code"] = std::to_string(static_cast<int>(rng()));
    auto f = agent::failure_of(m);
    if (!f) continue;
    ASSERT_TRUE(clean(f->what, false));
    ASSERT_TRUE(clean(f->tail, true));
    ASSERT_LE(f->what.size(), agent::kFailureWhatBytes);
    ASSERT_LE(f->tail.size(), agent::kFailureTailBytes);
    ASSERT_TRUE(f->reason == "WorkerFailed" || f->reason == "Stall") << f->reason;
    ASSERT_TRUE(f->code >= 1 && f->code <= 255) << f->code;
    // The verdict built from it is clean too.
    auto v = agent::decide(*f, 0, 1, "OnFailure");
    ASSERT_TRUE(clean(v.why, false)) << v.why;
  }
}

TEST(FuzzBarrier, TheServerSurvivesRandomStreamsAndStillStartsAJob) {
  agent::Config cfg;
  cfg.nnodes = 2;
  cfg.run_id = "uid";
  cfg.barrier_secret = std::string(64, 'b');
  cfg.rendezvous_timeout = 60s;
  agent::BarrierServer server(cfg, "127.0.0.1", 0);
  std::mt19937 rng(2026);
  for (int i = 0; i < 400; ++i) {
    int fd = lockstep::test::dial_loopback(server.port());
    ASSERT_GE(fd, 0);
    // Lines and fragments, split at random points, with and without newlines.
    std::string stream;
    for (int k = static_cast<int>(rng() % 5); k >= 0; --k)
      stream += (rng() % 2 ? near_protocol(rng) : random_bytes(rng, 200)) + (rng() % 4 ? "\n" : "");
    for (size_t off = 0; off < stream.size();) {
      size_t n = 1 + rng() % 64;
      if (::send(fd, stream.data() + off, std::min(n, stream.size() - off), MSG_NOSIGNAL) <= 0) break;
      off += n;
    }
    if (rng() % 3 == 0) std::this_thread::sleep_for(1ms);
    ::close(fd);
  }
  // Real members still get in and start.
  std::vector<std::unique_ptr<agent::BarrierClient>> clients;
  for (int node = 0; node < 2; ++node) {
    auto c = std::make_unique<agent::BarrierClient>();
    std::string error;
    ASSERT_TRUE(c->connect("127.0.0.1", server.port(), error)) << error;
    bool said = false;
    for (int t = 0; t < 100 && !said; ++t)
      if (auto m = c->poll(50ms); m && m->verb == "CHALLENGE") {
        c->send({"HELLO", {{"node", std::to_string(node)}, {"run", "uid"}, {"attempt", "0"},
                           {"proof", agent::barrier_proof(cfg.barrier_secret, m->get("nonce"), node, 0, "uid")}}});
        said = true;
      }
    ASSERT_TRUE(said);
    clients.push_back(std::move(c));
  }
  bool started = false;
  for (int t = 0; t < 200 && !started; ++t)
    if (auto m = clients[0]->poll(50ms); m && m->verb == "START") started = true;
  EXPECT_TRUE(started);
}

// See Note [Heartbeats]: a joined member's random stream (heartbeats of every size among near-protocol
// lines and bytes): the server never crashes or stalls, and goes on saying ALIVE to the other
// member until the stream has ended the job.
TEST(FuzzBarrier, TheServerSurvivesAMembersRandomStream) {
  agent::Config cfg;
  cfg.nnodes = 2;
  cfg.run_id = "uid";
  cfg.barrier_secret = std::string(64, 'b');
  cfg.rendezvous_timeout = 60s;
  cfg.grace_period = 1s;
  cfg.peer_timeout = 2s;
  std::mt19937 rng(28);
  for (int trial = 0; trial < 20; ++trial) {
    agent::BarrierServer server(cfg, "127.0.0.1", 0);
    agent::BarrierClient n0;
    n0.set_heartbeat_interval(cfg.heartbeat_interval());
    std::string error;
    ASSERT_TRUE(n0.connect("127.0.0.1", server.port(), error)) << error;
    bool said = false;
    for (int t = 0; t < 100 && !said; ++t)
      if (auto m = n0.poll(50ms); m && m->verb == "CHALLENGE") {
        n0.send({"HELLO", {{"node", "0"}, {"run", "uid"}, {"attempt", "0"},
                           {"proof", agent::barrier_proof(cfg.barrier_secret, m->get("nonce"), 0, 0, "uid")}}});
        said = true;
      }
    ASSERT_TRUE(said);
    // Node 1 joins on a raw socket, then sends a random stream.
    int fd = lockstep::test::dial_loopback(server.port());
    ASSERT_GE(fd, 0);
    std::string challenge;
    for (char c; challenge.find('\n') == std::string::npos && ::recv(fd, &c, 1, 0) == 1;) challenge += c;
    auto m = agent::decode(challenge.substr(0, challenge.find('\n')));
    ASSERT_TRUE(m) << challenge;
    std::string hello = agent::encode({"HELLO", {{"node", "1"}, {"run", "uid"}, {"attempt", "0"},
                                                 {"proof", agent::barrier_proof(cfg.barrier_secret, m->get("nonce"), 1, 0, "uid")}}});
    std::string stream = hello + "\n";
    for (int k = 0; k < 200; ++k)
      stream += (rng() % 3 ? near_protocol(rng) : random_bytes(rng, 100)) + (rng() % 8 ? "\n" : "");
    ::send(fd, stream.data(), stream.size(), MSG_NOSIGNAL);
    // Whatever the stream did to the job, the server goes on: node 0 hears from it within the
    // heartbeat interval, or has its verdict.
    bool verdict = false;
    for (int t = 0; t < 20 && !verdict; ++t)
      if (auto r = n0.poll(50ms); r && r->verb == "EXIT") verdict = true;
    if (!verdict) {
      EXPECT_LT(n0.server_silence(), 1500ms) << "trial " << trial;
    }
    ::close(fd);
  }
}
