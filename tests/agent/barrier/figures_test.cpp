// agent/barrier/figures: the straggler figures on the restart barrier (docs/agent.md,
// "Stragglers"): the FIGURES line and node 0's ALIVE ref, checked as Note [Barrier trust] asks,
// and what node 0's real server keeps of them, against members that send anything.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "barrier/client.hpp"
#include "barrier/figures.hpp"
#include "barrier/server.hpp"
#include "barrier_support.hpp"
#include "test_util.hpp"

using namespace lockstep::agent;
namespace straggler = lockstep::straggler;
using lockstep::test::barrier_config;
using lockstep::test::eventually;
using lockstep::test::join;
using lockstep::test::next;

namespace {

std::optional<MemberFigures> parse_line(const std::string& line, int nproc, std::string& error) {
  auto m = decode(line);
  if (!m) {
    error = "undecodable";
    return std::nullopt;
  }
  return parse_figures(*m, nproc, error);
}

// A raw line, as a hostile member would write it (BarrierClient::send encodes a Message).
void send_line(BarrierClient& c, const std::string& line) {
  const std::string s = line + "\n";
  ASSERT_EQ(::send(c.fd(), s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

}  // namespace

TEST(Figures, ALineRoundTripsAndStaysUnderItsBound) {
  const std::vector<LocalFigure> sent = {
      {0, 0.0123456789, 0, 0.00654321987}, {3, 2.5, 17, 2.5}, {7, 3599.99, straggler::kThrottleAll, 0.000123456789}};
  const std::string line = encode(figures_message(4, sent));
  EXPECT_LE(line.size(), max_figures_bytes(8)) << line;
  EXPECT_EQ(line.find("t0="), std::string::npos) << "no throttle key for no throttle: " << line;
  std::string error;
  auto got = parse_line(line, 8, error);
  ASSERT_TRUE(got) << error;
  EXPECT_EQ(got->generation, 4);
  ASSERT_EQ(got->figures.size(), 3u);
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got->figures[i].local_rank, sent[i].local_rank);
    EXPECT_NEAR(got->figures[i].median_s, sent[i].median_s, sent[i].median_s * 1e-5);  // %.6g
    EXPECT_NEAR(got->figures[i].lower_s, sent[i].lower_s, sent[i].lower_s * 1e-5);
    EXPECT_EQ(got->figures[i].throttle, sent[i].throttle);
  }
  // A figure with no lower quantile (or one over its median) sends its median as both.
  auto lone = parse_line(encode(figures_message(0, {{1, 0.5, 0}})), 2, error);
  ASSERT_TRUE(lone) << error;
  EXPECT_EQ(lone->figures.at(0).lower_s, 0.5);
  auto over = parse_line(encode(figures_message(0, {{1, 0.5, 0, 0.7}})), 2, error);
  ASSERT_TRUE(over) << error;
  EXPECT_EQ(over->figures.at(0).lower_s, 0.5);
  // The longest line a node of 1024 ranks can send (every figure and throttle key at its widest).
  std::vector<LocalFigure> widest;
  for (int i = 0; i < 1024; ++i) widest.push_back({i, 1234.56789, straggler::kThrottleAll, 1.23456789e-05});
  EXPECT_LE(encode(figures_message(999999, widest)).size(), max_figures_bytes(1024));
}

// See Note [Barrier trust]: each field is checked; one bad field and the whole line is ignored.
TEST(Figures, EveryBadFieldRejectsTheLineAndSaysWhich) {
  const std::pair<const char*, const char*> bad[] = {
      {"FIGURES w0=0.02 l0=0.01", "gen"},
      {"FIGURES gen=-1 w0=0.02 l0=0.01", "gen"},
      {"FIGURES gen=01 w0=0.02 l0=0.01", "gen"},
      {"FIGURES gen=abc w0=0.02 l0=0.01", "gen"},
      {"FIGURES gen=0 w2=0.02", "w2"},          // local rank out of [0, nproc)
      {"FIGURES gen=0 w-1=0.02", "w-1"},
      {"FIGURES gen=0 w01=0.02", "w01"},
      {"FIGURES gen=0 x0=0.02", "x0"},          // unknown key
      {"FIGURES gen=0 w=0.02", "'w'"},
      {"FIGURES gen=0 w0=nan", "w0"},
      {"FIGURES gen=0 w0=NaN", "w0"},
      {"FIGURES gen=0 w0=inf", "w0"},
      {"FIGURES gen=0 w0=1e400", "w0"},
      {"FIGURES gen=0 w0=0", "w0"},
      {"FIGURES gen=0 w0=-0.02", "w0"},
      {"FIGURES gen=0 w0=3600.5", "w0"},
      {"FIGURES gen=0 w0=0x10", "w0"},
      {"FIGURES gen=0 w0=0.02abc", "w0"},
      {"FIGURES gen=0 w0=", "w0"},
      {"FIGURES gen=0 w0=0.02 l0=0.01 t0=32", "t0"},   // beyond kThrottleAll
      {"FIGURES gen=0 w0=0.02 l0=0.01 t0=-1", "t0"},
      {"FIGURES gen=0 w0=0.02 l0=0.01 t0=1.5", "t0"},
      {"FIGURES gen=0 w0=0.02 l0=0.01 t1=1", "t1"},  // a throttle without its figure
      {"FIGURES gen=0 w0=0.02 l0=0.01 w1=0.03 w2=0.04 w3=0.05 w4=0.06 w5=0.07 w6=0.08 w7=0.09 w8=0.1 w9=0.11", "w2"},
      {"FIGURES gen=0 w0=0.02", "l0"},                 // a median without its lower quantile
      {"FIGURES gen=0 l0=0.02", "l0"},                 // a lower quantile without its median
      {"FIGURES gen=0 w0=0.02 l0=0.03", "l0"},         // over its median
      {"FIGURES gen=0 w0=0.02 l0=nan", "l0"},
      {"FIGURES gen=0 w0=0.02 l0=0", "l0"},
      {"FIGURES gen=0 w0=0.02 l0=3601", "l0"},
      {"FIGURES gen=0 w0=0.02 l0=0.01 l2=0.01", "l2"},
      {"FIGURES gen=0 w0=0.02 l0=0.01 u0=0.03", "u0"},  // unknown key (an upper quantile)
  };
  for (const auto& [line, named] : bad) {
    std::string error;
    EXPECT_FALSE(parse_line(line, 2, error)) << line;
    EXPECT_NE(error.find(named), std::string::npos) << line << ": " << error;
  }
  std::string error;
  auto ok = parse_line("FIGURES gen=0", 2, error);  // no rank has a median yet: nothing, validly
  ASSERT_TRUE(ok) << error;
  EXPECT_TRUE(ok->figures.empty());
  ok = parse_line("FIGURES gen=3 w1=3600 l1=3600 t1=31", 2, error);  // the edges are in
  ASSERT_TRUE(ok) << error;
  ASSERT_EQ(ok->figures.size(), 1u);
  EXPECT_EQ(ok->figures[0].local_rank, 1);
  EXPECT_EQ(ok->figures[0].median_s, 3600);
  EXPECT_EQ(ok->figures[0].lower_s, 3600);
  EXPECT_EQ(ok->figures[0].throttle, 31u);
}

TEST(Figures, AReferenceIsReadOnlyWhenFiniteAndInRange) {
  EXPECT_EQ(parse_reference({"ALIVE", {{"ref", "0.025"}}}), 0.025);
  EXPECT_EQ(parse_reference({"ALIVE", {{"ref", "3600"}}}), 3600);
  for (const char* v : {"nan", "inf", "0", "-1", "3601", "abc", "", "1e999", "0x1p-3"})
    EXPECT_FALSE(parse_reference({"ALIVE", {{"ref", v}}})) << v;
  EXPECT_FALSE(parse_reference({"ALIVE", {}}));
}

// The server's store is bounded by the membership and forgets what went quiet.
TEST(Figures, TheGangsFiguresAreBoundedAndAgeOut) {
  GangFigures g(2, 2);
  g.put(2, {{0, 0.5, 0}}, 100);   // no such node: ignored
  g.put(-1, {{0, 0.5, 0}}, 100);
  g.put(1, {{0, 0.02, 0, 0.015}, {1, 0.04, 3, 0.03}, {0, 0.09, 0}}, 100);  // more than nproc: cut
  auto f = g.fresh(100 + kFiguresMaxAgeS);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].rank, 2);
  EXPECT_EQ(f[0].node_rank, 1);
  EXPECT_EQ(f[1].rank, 3);
  EXPECT_EQ(f[1].throttle, 3u);
  EXPECT_EQ(f[0].lower_s, 0.015);
  EXPECT_EQ(f[1].lower_s, 0.03);
  EXPECT_EQ(g.accepted(), 1u);
  EXPECT_TRUE(g.fresh(100 + kFiguresMaxAgeS + 0.1).empty()) << "older than 3 x kFiguresInterval: dropped";
  g.put(0, {{1, 0.03, 0}}, 200);
  g.forget(0);
  EXPECT_TRUE(g.fresh(200).empty());
}

// A real server and members on loopback: only a member's valid figures of the current generation
// are kept; each bad line is ignored (the connection kept), an oversized one closes it.
TEST(Figures, TheServerKeepsOnlyAMembersValidFiguresOfTheCurrentGeneration) {
  auto cfg = barrier_config(2, 0);
  cfg.nproc_per_node = 2;
  BarrierServer server(cfg, "127.0.0.1", 0);
  BarrierClient n0, n1;
  join(n0, server.port(), 0);
  join(n1, server.port(), 1);
  ASSERT_TRUE(next(n0, "START"));
  ASSERT_TRUE(next(n1, "START"));
  for (const char* bad : {"FIGURES gen=1 w0=0.5 l0=0.5", "FIGURES gen=0 w0=nan l0=1", "FIGURES gen=0 w0=-1 l0=1",
                          "FIGURES gen=0 w0=1e9 l0=1e9", "FIGURES gen=0 w5=0.5 l5=0.5", "FIGURES gen=0 q0=0.5",
                          "FIGURES gen=0 w0=0.5 l0=0.5 t0=99", "FIGURES gen=0 w0=0.5 l0=0.5 w1=0.5 l1=0.5 w2=0.5 w3=0.5",
                          "FIGURES gen=0 w0", "FIGURES gen=0 w0=%zz", "FIGURES gen=0 w0=0.5", "FIGURES gen=0 w0=0.5 l0=0.6"})
    send_line(n1, bad);
  send_line(n1, "FIGURES gen=0 w0=0.02 l0=0.01 w1=0.04 l1=0.03 t1=1");  // the one valid line, last
  ASSERT_TRUE(eventually([&] { return server.figures().accepted() >= 1; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(server.figures().accepted(), 1u) << "every bad line was ignored";
  auto kept = server.figures().fresh(steady_seconds());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].rank, 2);
  EXPECT_EQ(kept[0].median_s, 0.02);
  EXPECT_EQ(kept[0].lower_s, 0.01);
  EXPECT_EQ(kept[1].rank, 3);
  EXPECT_EQ(kept[1].throttle, 1u);
  EXPECT_FALSE(n1.lost()) << "a bad FIGURES line costs the member nothing but the line";
  // Node 0's reference reaches the members with its next ALIVE, and they read it checked.
  server.figures().set_reference(0.025);
  EXPECT_TRUE(eventually([&] {
    n1.poll(std::chrono::milliseconds(50));
    return n1.reference() == 0.025;
  }, std::chrono::seconds(5)));
  // A line one byte over the bound closes the member's connection, and its figures go with it.
  std::string oversized = "FIGURES gen=0 w0=0.02";
  oversized += std::string(max_figures_bytes(2) + 1 - oversized.size() - 7, ' ') + "w1=0.03";
  ASSERT_EQ(oversized.size(), max_figures_bytes(2) + 1);
  send_line(n1, oversized);
  EXPECT_TRUE(eventually([&] {
    n1.poll(std::chrono::milliseconds(50));
    return n1.lost();
  }, std::chrono::seconds(5)));
  EXPECT_TRUE(eventually([&] { return server.figures().fresh(steady_seconds()).empty(); }, std::chrono::seconds(5)));
  EXPECT_EQ(server.figures().accepted(), 1u);
}

// A stranger's FIGURES, before (or instead of) HELLO, closes its connection: nothing is kept.
TEST(Figures, FiguresBeforeHelloCloseTheConnection) {
  auto cfg = barrier_config(2, 0);
  cfg.nproc_per_node = 2;
  BarrierServer server(cfg, "127.0.0.1", 0);
  BarrierClient stranger;
  std::string err;
  ASSERT_TRUE(stranger.connect("127.0.0.1", server.port(), err)) << err;
  ASSERT_TRUE(next(stranger, "CHALLENGE"));
  send_line(stranger, "FIGURES gen=0 w0=0.02 w1=9");
  EXPECT_TRUE(eventually([&] {
    stranger.poll(std::chrono::milliseconds(50));
    return stranger.lost();
  }, std::chrono::seconds(5)));
  EXPECT_EQ(server.figures().accepted(), 0u);
  EXPECT_TRUE(server.figures().fresh(steady_seconds()).empty());
}
