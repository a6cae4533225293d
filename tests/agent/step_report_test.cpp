// agent/step_report: the step report's parser, and hostile reports on the agent's real socket.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent_support.hpp"
#include "metrics.hpp"
#include "step_report.hpp"

using namespace lockstep::agent;

TEST(StepReport, ParsesTheDesignExample) {
  auto r = parse_step_report(
      "step=120 step_s=0.412 compute_s=0.301 comm_s=0.150 exposed_comm_s=0.041 tokens=65536 flops=4.1e13 loss=2.93 "
      "mem_bytes=812345344");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 120);
  EXPECT_DOUBLE_EQ(*r->step_s, 0.412);
  EXPECT_DOUBLE_EQ(*r->flops, 4.1e13);
  EXPECT_DOUBLE_EQ(*r->loss, 2.93);
  EXPECT_TRUE(r->comm_s_by_op.empty());
}

TEST(StepReport, PerCollectiveKeysAndUnknownKeys) {
  auto r = parse_step_report(
      "step=1 comm_s.allreduce=0.5 comm_bytes.allgather=1024 exposed_comm_s.reduce_scatter=0.25 future_key=3");
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->comm_s_by_op.at("allreduce"), 0.5);
  EXPECT_DOUBLE_EQ(r->comm_bytes_by_op.at("allgather"), 1024);
  EXPECT_EQ(r->exposed_comm_s_by_op.size(), 1u);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s_by_op.at("reduce_scatter"), 0.25);
}

// See Note [NCCL profiler plugin]: NCCL's figures come in lines of their own, with no step.
TEST(StepReport, NcclFiguresComeWithoutAStep) {
  auto r = parse_step_report("nccl_s.allreduce=0.0125 nccl_bytes.allreduce=104857600 nccl_count.allreduce=25 nccl_s.send=1e-06");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->has_step());
  EXPECT_DOUBLE_EQ(r->nccl_s_by_op.at("allreduce"), 0.0125);
  EXPECT_DOUBLE_EQ(r->nccl_bytes_by_op.at("allreduce"), 104857600);
  EXPECT_DOUBLE_EQ(r->nccl_count_by_op.at("allreduce"), 25);
  EXPECT_DOUBLE_EQ(r->nccl_s_by_op.at("send"), 1e-6);
  std::string why;
  EXPECT_FALSE(parse_step_report("nccl_s.AllReduce=1", &why)) << "op names are lower case";
  EXPECT_NE(why.find("a-z"), std::string::npos) << why;
  EXPECT_FALSE(parse_step_report("nccl_s.allreduce=-1", &why));
  EXPECT_NE(why.find("negative"), std::string::npos) << why;
  EXPECT_FALSE(parse_step_report("nccl_other=1", &why)) << "an unknown key is no NCCL figure";
  EXPECT_NE(why.find("no step"), std::string::npos) << why;

  // On the agent: the figures by op, and no step counted.
  std::string dir = ::testing::TempDir() + "/agent-nccl-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  Metrics m(cfg, dir);
  m.record(0, *r);
  m.record(0, *r);
  std::string text = prometheus::TextSerializer().Serialize(m.registry()->Collect());
  const std::string labels = "{namespace=\"default\",node_rank=\"0\",op=\"allreduce\",rank=\"0\",trainingjob=\"local\"}";
  EXPECT_NE(text.find("lockstep_nccl_seconds_total" + labels + " 0.025"), std::string::npos) << text;
  EXPECT_NE(text.find("lockstep_nccl_bytes_total" + labels + " 209715200"), std::string::npos) << text;
  EXPECT_NE(text.find("lockstep_nccl_operations_total" + labels + " 50"), std::string::npos) << text;
  EXPECT_NE(text.find("lockstep_steps_total{namespace=\"default\",node_rank=\"0\",rank=\"0\",trainingjob=\"local\"} 0"),
            std::string::npos) << text;
  EXPECT_EQ(m.progress()[0].last_step, -1) << "NCCL's figures arm no stall watch";
}

TEST(StepReport, MalformedLinesSayWhy) {
  std::string why;
  EXPECT_FALSE(parse_step_report("hello", &why));
  EXPECT_NE(why.find("not key=value"), std::string::npos);
  EXPECT_FALSE(parse_step_report("step=x", &why));
  EXPECT_NE(why.find("not a number"), std::string::npos);
  EXPECT_FALSE(parse_step_report("step_s=1", &why));
  EXPECT_NE(why.find("no step"), std::string::npos);
  EXPECT_FALSE(parse_step_report("step=1.5", &why));
  EXPECT_FALSE(parse_step_report("step=1 step_s=-2", &why));
  EXPECT_TRUE(parse_step_report("step=1 loss=-0.5").has_value());  // a loss may be negative
}

// Every way a datagram can be wrong (item: fuzz the parsers of untrusted input). Each must be
// rejected with a reason, never crash, never yield a report outside the contract.
std::vector<std::string> hostile_corpus() {
  std::vector<std::string> c = {
      "", " ", "\n", "=", "==", "step", "step=", "=1", "step==1", "step=1=2", "step=1 =2", "step=1 x",
      "step=nan", "step=NaN", "step=inf", "step=-inf", "step=1 loss=nan", "step=1 step_s=inf", "step=1 tokens=-1",
      "step=1e300", "step=1e19", "step=9007199254740993", "step=-1", "step=1.5", "step=0x", "step=1 flops=1e31",
      "step=1 loss=-1e31", "step=1 step=2", "step=1 loss=1 loss=2", "step=1 comm_s.=1", "step=1 comm_bytes.=1",
      "step=1 exposed_comm_s.=1", "step=1 exposed_comm_s.Bad-Op=1",
      "step=1 comm_s.All-Reduce=1", "step=1 comm_s." + std::string(33, 'a') + "=1", "step=1 " + std::string(65, 'k') + "=1",
      "step=1 \xff\xfe=1", "step=1 loss=\xc3\x28", "\xff\xff\xff\xff", "step=\xe2\x82", "step=1 k\x01y=2",
      std::string("step=1\0garbage", 14), std::string("step=1 loss=2\0", 14), std::string(1, '\0'),
      "step=1 " + std::string(kMaxReportBytes, ' '), std::string(65536, 'x'), "step=" + std::string(5000, '9'),
      "step=1 loss=" + std::string(400, '1'),
  };
  std::string many;  // duplicate keys by the thousand
  for (int i = 0; i < 300; ++i) many += "loss=1 ";
  c.push_back("step=1 " + many);
  return c;
}

void expect_within_contract(const StepReport& r, const std::string& input) {
  EXPECT_GE(r.step, 0) << input;
  EXPECT_LT(r.step, 9007199254740992LL) << input;
  for (const auto& v : {r.step_s, r.compute_s, r.comm_s, r.exposed_comm_s, r.tokens, r.flops, r.loss, r.mem_bytes})
    if (v) {
      EXPECT_TRUE(std::isfinite(*v) && std::fabs(*v) <= kMaxReportValue) << input;
    }
  for (const auto* m : {&r.comm_s_by_op, &r.comm_bytes_by_op})
    for (const auto& [op, v] : *m) {
      EXPECT_TRUE(!op.empty() && op.size() <= kMaxOpNameLength && op.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos) << input;
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << input;
    }
}

TEST(StepReportFuzz, EveryHostileInputIsRejectedWithAReason) {
  int n = 0;
  for (const auto& input : hostile_corpus()) {
    std::string why;
    auto r = parse_step_report(input, &why);
    EXPECT_FALSE(r.has_value()) << "accepted: '" << input.substr(0, 80) << "'";
    EXPECT_FALSE(why.empty()) << input.substr(0, 80);
    EXPECT_LE(why.size(), 400u) << "a reason quotes the input bounded: " << why.substr(0, 80);
    for (char ch : why) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "a reason is printable ASCII: " << why.substr(0, 80);
    ++n;
  }
  EXPECT_GT(n, 40);
}

TEST(StepReportFuzz, SeededMutationsNeverCrashAndStayWithinTheContract) {
  const std::string valid =
      "step=120 step_s=0.412 compute_s=0.301 comm_s=0.150 exposed_comm_s=0.041 tokens=65536 flops=4.1e13 loss=2.93 "
      "mem_bytes=812345344 comm_s.allreduce=0.1 comm_bytes.allgather=4096";
  std::mt19937 rng(20261122);
  auto byte = [&] { return static_cast<char>(rng() & 0xff); };
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = valid;
    switch (i % 5) {
      case 0:  // random bytes, any length up to 64 KB
        s.assign(rng() % (i % 50 == 0 ? 65536 : 200), ' ');
        for (auto& ch : s) ch = byte();
        break;
      case 1:  // a few bytes flipped
        for (int k = rng() % 4 + 1; k > 0; --k) s[rng() % s.size()] = byte();
        break;
      case 2:  // cut anywhere
        s.resize(rng() % s.size());
        break;
      case 3:  // a chunk of random printable text inserted
        s.insert(rng() % s.size(), std::string(rng() % 30, "0123456789=.e-+ nainf"[rng() % 21]));
        break;
      case 4:  // tokens repeated or swapped in
        s += " " + s.substr(rng() % s.size());
        break;
    }
    std::string why;
    auto r = parse_step_report(s, &why);
    if (r) {
      ++accepted;
      expect_within_contract(*r, s);
    } else {
      ++rejected;
      EXPECT_FALSE(why.empty());
    }
  }
  EXPECT_GT(accepted, 100);  // the mutations do not only produce garbage
  EXPECT_GT(rejected, 5000);
}

namespace {
// A Metrics of one rank in a fresh directory, and a sender to its real step socket.
struct SocketUnderTest {
  explicit SocketUnderTest(const std::string& name) : dir(fresh_dir(name)), metrics(config(), dir) {
    fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    int sndbuf = 1 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, metrics.socket_path(0).c_str(), sizeof addr.sun_path - 1);
  }
  ~SocketUnderTest() { ::close(fd); }
  // The receiver drains as it goes; wait for room rather than lose a datagram.
  void send(const std::string& d) {
    while (::sendto(fd, d.data(), d.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double counter(const std::string& name) {
    for (const auto& f : metrics.registry()->Collect())
      if (f.name == name)
        for (const auto& metric : f.metric) return metric.counter.value;
    return -1.0;
  }
  // Waits up to 10 s for lockstep_steps_total to reach `steps`.
  void wait_for_steps(double steps) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (counter("lockstep_steps_total") < steps && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  static std::string fresh_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("agent-" + name); }
  static Config config() {
    Config cfg;
    cfg.metrics_port = 0;
    return cfg;
  }
  std::string dir;
  Metrics metrics;
  int fd = -1;
  sockaddr_un addr{};
};
}  // namespace

// The corpus through the agent's real socket: every malformed datagram is counted, a valid
// one still counts as a step, and a 64 KB datagram is rejected whole, never cut and parsed.
TEST(StepReportFuzz, HostileDatagramsAreCountedAsMalformedOnTheRealSocket) {
  SocketUnderTest s("fuzz");
  auto corpus = hostile_corpus();
  // A valid line padded past the limit: cut at 4096 bytes it would parse.
  corpus.push_back("step=7 loss=1" + std::string(65000, ' '));
  for (const auto& d : corpus) s.send(d);
  s.send("step=1 loss=2");
  s.wait_for_steps(1);
  EXPECT_EQ(s.counter("lockstep_steps_total"), 1);
  EXPECT_EQ(s.counter("lockstep_metrics_malformed_total"), static_cast<double>(corpus.size()));
  EXPECT_EQ(s.metrics.progress()[0].last_step, 1) << "the 64 KB datagram's step=7 must not have been parsed";
}

// Note [Reports in batches] (agent/python/lockstep/_channel.py): a datagram may carry several
// steps' reports, one a line; each line stands or falls on its own.
TEST(StepReport, ADatagramOfSeveralLinesIsOneReportALine) {
  std::vector<long long> steps;
  std::vector<std::string> errors;
  const size_t lines = for_each_step_report(
      "step=1 step_s=0.1\n\n  \nstep=2 step_s=0.2\nstep=x\n" + std::string("step=3 loss=1") + std::string(5000, ' ') +
          "\nstep=4 comm_s.allreduce=0.5\n",
      [&](const StepReport& r) { steps.push_back(r.step); }, [&](const std::string& e) { errors.push_back(e); });
  EXPECT_EQ(lines, 5u) << "blank lines are not reports";
  EXPECT_EQ(steps, (std::vector<long long>{1, 2, 4}));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("step"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("4096"), std::string::npos) << "one line over the limit is rejected alone: " << errors[1];
}

TEST(StepReportFuzz, ABatchOnTheRealSocketCountsEachLineAndAnOversizedOneIsRejectedWhole) {
  SocketUnderTest s("batch");
  // Valid lines filling a datagram one byte past the limit: never parsed, one malformed.
  std::string oversized;
  for (int k = 100; oversized.size() <= kMaxDatagramBytes; ++k) oversized += "step=" + std::to_string(k) + " step_s=0.01\n";
  s.send(oversized);
  s.send("step=1 step_s=0.1\nstep=2 step_s=0.1\nbad\nstep=3 step_s=0.1");
  s.wait_for_steps(3);
  EXPECT_EQ(s.counter("lockstep_steps_total"), 3);
  EXPECT_EQ(s.counter("lockstep_metrics_malformed_total"), 2) << "the oversized datagram once, the bad line once";
  EXPECT_EQ(s.metrics.progress()[0].last_step, 3);
}

TEST(StepReportFuzz, CollectiveNamesAreBoundedPerAgent) {
  std::string dir = ::testing::TempDir() + "/agent-ops-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  Metrics m(cfg, dir);
  for (int i = 0; i < 100; ++i) {
    StepReport r;
    r.step = i;
    r.comm_s_by_op["op" + std::to_string(i)] = 1;
    m.record(0, r);
  }
  size_t series = 0;
  double malformed = 0;
  for (const auto& f : m.registry()->Collect()) {
    if (f.name == "lockstep_comm_seconds_total") series = f.metric.size();
    if (f.name == "lockstep_metrics_malformed_total") malformed = f.metric.at(0).counter.value;
  }
  EXPECT_EQ(series, Metrics::kMaxOps);
  EXPECT_EQ(malformed, 100 - static_cast<double>(Metrics::kMaxOps));
}
