// agent/protocol: the per-step datagram parser.
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
#include <thread>

#include "metrics.hpp"
#include "protocol.hpp"
#include "worker_env.hpp"

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

// The corpus through the agent's real socket: every malformed datagram is counted, a valid
// one still counts as a step, and a 64 KB datagram is rejected whole, never cut and parsed.
TEST(StepReportFuzz, HostileDatagramsAreCountedAsMalformedOnTheRealSocket) {
  std::string dir = ::testing::TempDir() + "/agent-fuzz-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  Metrics m(cfg, dir);
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  int sndbuf = 1 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, m.socket_path(0).c_str(), sizeof addr.sun_path - 1);
  auto send = [&](const std::string& d) {
    // The receiver drains as it goes; wait for room rather than lose a datagram.
    while (::sendto(fd, d.data(), d.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  auto corpus = hostile_corpus();
  // A valid line padded past the limit: cut at 4096 bytes it would parse.
  corpus.push_back("step=7 loss=1" + std::string(65000, ' '));
  for (const auto& d : corpus) send(d);
  send("step=1 loss=2");
  auto value = [&](const std::string& name) {
    for (const auto& f : m.registry()->Collect())
      if (f.name == name)
        for (const auto& metric : f.metric) return metric.counter.value;
    return -1.0;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (value("lockstep_steps_total") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(value("lockstep_steps_total"), 1);
  EXPECT_EQ(value("lockstep_metrics_malformed_total"), static_cast<double>(corpus.size()));
  EXPECT_EQ(m.progress()[0].last_step, 1) << "the 64 KB datagram's step=7 must not have been parsed";
  ::close(fd);
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

TEST(AgentMetrics, TheGangRestartAttemptIsExported) {
  std::string dir = ::testing::TempDir() + "/agent-attempt-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  cfg.restart_attempt = 3;
  Metrics m(cfg, dir);
  std::string text = prometheus::TextSerializer().Serialize(m.registry()->Collect());
  EXPECT_NE(text.find("lockstep_restart_attempt{namespace=\"default\",node_rank=\"0\",trainingjob=\"local\"} 3"),
            std::string::npos)
      << text;
}

TEST(WorkerEnv, EveryVariableTorchrunSets) {
  // torchrun 2.11, LocalElasticAgent._start_workers and DefaultLogsSpecs.reify.
  Config c;
  c.nnodes = 3;
  c.node_rank = 1;
  c.nproc_per_node = 2;
  c.max_restarts = 0;
  c.run_id = "uid";
  auto env = worker_env(c, 1, 0, "/tmp/s", {}, "/tmp/d/rank-1-error.json");
  std::map<std::string, std::string> want = {
      {"LOCAL_RANK", "1"}, {"RANK", "3"}, {"GROUP_RANK", "1"}, {"ROLE_RANK", "3"}, {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", "2"}, {"WORLD_SIZE", "6"}, {"GROUP_WORLD_SIZE", "3"}, {"ROLE_WORLD_SIZE", "6"},
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RUN_ID", "uid"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCHELASTIC_ERROR_FILE", "/tmp/d/rank-1-error.json"},
      {"OMP_NUM_THREADS", "1"}};
  for (const auto& [k, v] : want) EXPECT_EQ(env[k], v) << k;
  EXPECT_EQ(env.count("TORCHELASTIC_TIMER_FILE"), 0u) << "no file-timer server runs here (docs/agent.md)";
  auto user = worker_env(c, 0, 0, "", {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  EXPECT_EQ(user["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3") << "the user's value, as torchrun keeps it";
  EXPECT_EQ(user["TORCHELASTIC_ERROR_FILE"], "") << "no error file: empty, as torchrun without a log directory";
}

TEST(WorkerEnv, RanksAcrossNodes) {
  Config c;
  c.nnodes = 4;
  c.node_rank = 2;
  c.nproc_per_node = 8;
  c.restart_attempt = 1;
  auto env = worker_env(c, 5, 2, "/tmp/s", {});
  EXPECT_EQ(env["RANK"], "21");
  EXPECT_EQ(env["WORLD_SIZE"], "32");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "3");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(worker_env(c, 0, 0, "", {{"OMP_NUM_THREADS", "4"}}).count("OMP_NUM_THREADS"), 0u)
      << "a user's OMP_NUM_THREADS is inherited, not overridden";
}

TEST(Config, FlagsOverrideEnvironmentAndPetIsTheFallback) {
  auto c = load_config({{"PET_NNODES", "3"}, {"PET_NODE_RANK", "1"}, {"LOCKSTEP_NPROC_PER_NODE", "4"},
                        {"PET_NPROC_PER_NODE", "9"}},
                       {"--master-port", "1234", "--", "python", "train.py"});
  EXPECT_EQ(c.nnodes, 3);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.nproc_per_node, 4);  // LOCKSTEP_* wins over PET_*
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_THROW(load_config({{"LOCKSTEP_NNODES", "2"}}, {"--max-restarts", "1"}), ConfigError);
}

TEST(Config, StallSettingsFromFlagsAndTheEnvironment) {
  auto c = load_config({}, {});
  EXPECT_EQ(c.stall_timeout, std::chrono::minutes(5));
  EXPECT_EQ(c.first_step_timeout, std::chrono::minutes(30)) << "lockstep-trainer reports steps: watched by default";
  EXPECT_EQ(load_config({}, {"--", "/opt/bin/lockstep-trainer", "--steps", "9"}).first_step_timeout, std::chrono::minutes(30));
  EXPECT_EQ(load_config({}, {"--", "python", "train.py"}).first_step_timeout.count(), 0)
      << "another program may never report a step: not watched unless asked";
  EXPECT_EQ(load_config({}, {"--first-step-timeout", "5m", "--", "python", "train.py"}).first_step_timeout, std::chrono::minutes(5));
  EXPECT_EQ(load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "7m"}}, {"--", "python", "train.py"}).first_step_timeout,
            std::chrono::minutes(7));
  EXPECT_EQ(c.metrics_linger, std::chrono::seconds(30));
  EXPECT_TRUE(c.first_step_detection());
  c = load_config({{"LOCKSTEP_STALL_TIMEOUT", "2m"}, {"LOCKSTEP_FIRST_STEP_TIMEOUT", "0"}, {"LOCKSTEP_METRICS_LINGER", "1s"}}, {});
  EXPECT_EQ(c.stall_timeout, std::chrono::minutes(2));
  EXPECT_EQ(c.metrics_linger, std::chrono::seconds(1));
  EXPECT_EQ(load_config({{"LOCKSTEP_METRICS_LINGER", "1s"}}, {"--metrics-linger", "5s"}).metrics_linger, std::chrono::seconds(5))
      << "a flag wins over the environment";
  EXPECT_FALSE(c.first_step_detection());
  c = load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "1h"}}, {"--first-step-timeout", "10s", "--stall-timeout", "0"});
  EXPECT_EQ(c.first_step_timeout, std::chrono::seconds(10));
  EXPECT_FALSE(c.first_step_detection()) << "--stall-timeout 0 turns stall detection off entirely";
  // --no-metrics keeps the step sockets while stall detection needs them, never an endpoint.
  c = load_config({{"LOCKSTEP_METRICS_PORT", "9400"}}, {"--no-metrics"});
  EXPECT_TRUE(c.step_sockets());
  EXPECT_EQ(c.metrics_port, 0);
  EXPECT_FALSE(load_config({}, {"--no-metrics", "--stall-timeout", "0"}).step_sockets());
  try {
    load_config({}, {"--metrics-linger", "11m"});
    ADD_FAILURE() << "an 11 minute linger was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-linger must be at most 10m"), std::string::npos) << e.what();
  }
  try {
    load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "soon"}}, {});
    ADD_FAILURE() << "a bad duration was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_FIRST_STEP_TIMEOUT"), std::string::npos) << e.what();
  }
}
