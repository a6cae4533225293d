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
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <regex>
#include <thread>
#include <tuple>

#include "barrier.hpp"
#include "lockstep/contract.hpp"
#include "metrics.hpp"
#include "step_report.hpp"
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

// Note [NCCL profiler plugin]: NCCL's figures come in lines of their own, with no step.
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
  static std::string fresh_dir(const std::string& name) {
    std::string d = ::testing::TempDir() + "/agent-" + name + "-" + std::to_string(::getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }
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

// Note [Reports in batches] (agent/python/lockstep/_pytorch.py): a datagram may carry several
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

// Note [Step log]: every valid report of each rank, one JSON object a line, with the gang
// attempt and the in-place generation; malformed ones are left out; a new agent appends.
TEST(AgentMetrics, TheStepLogKeepsEveryValidReportPerRank) {
  std::string dir = ::testing::TempDir() + "/agent-steplog-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  cfg.node_rank = 1;
  cfg.nproc_per_node = 2;
  cfg.restart_attempt = 2;
  cfg.step_log_dir = dir + "/steps";
  const std::string rank3 = cfg.step_log_dir + "/rank-3.jsonl";
  auto lines = [&] {
    std::vector<nlohmann::json> out;
    std::ifstream in(rank3);
    for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
    return out;
  };
  for (int agent = 0; agent < 2; ++agent) {  // the second: a gang restart's new agent appends
    Metrics m(cfg, dir);
    m.reset_progress(agent == 0 ? 0 : 1);
    int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, m.socket_path(1).c_str(), sizeof addr.sun_path - 1);
    for (std::string d : {"step=oops", "step=4 step_s=0.5 compute_s=0.4 exposed_comm_s=0.1 loss=1.25 total_steps=9 "
                          "comm_s.allgather=0.25 exposed_comm_s.allgather=0.05 comm_bytes.allgather=4194304 "
                          "comm_bytes.reduce_scatter=1048576"})
      ::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (lines().size() < static_cast<size_t>(agent + 1) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
  }
  auto got = lines();
  ASSERT_EQ(got.size(), 2u) << "one line per valid report, the malformed ones left out";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i]["rank"], 3);
    EXPECT_EQ(got[i]["attempt"], 2);
    EXPECT_EQ(got[i]["generation"], i);
    EXPECT_EQ(got[i]["step"], 4);
    EXPECT_DOUBLE_EQ(got[i]["step_s"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(got[i]["exposed_comm_s"].get<double>(), 0.1);
    EXPECT_DOUBLE_EQ(got[i]["loss"].get<double>(), 1.25);
    EXPECT_EQ(got[i]["total_steps"], 9);
    EXPECT_DOUBLE_EQ(got[i]["comm_s.allgather"].get<double>(), 0.25);  // per collective, as sent
    EXPECT_DOUBLE_EQ(got[i]["exposed_comm_s.allgather"].get<double>(), 0.05);
    EXPECT_EQ(got[i]["comm_bytes.allgather"], 4194304);
    EXPECT_EQ(got[i]["comm_bytes.reduce_scatter"], 1048576);
    EXPECT_FALSE(got[i].contains("tokens")) << "absent figures stay absent";
    EXPECT_FALSE(got[i].contains("comm_s.reduce_scatter")) << "absent figures stay absent";
    EXPECT_GT(got[i]["time"].get<double>(), 1.7e9);
  }
  EXPECT_FALSE(std::filesystem::exists(cfg.step_log_dir + "/rank-2.jsonl") &&
               std::filesystem::file_size(cfg.step_log_dir + "/rank-2.jsonl") > 0)
      << "rank 2 reported nothing";
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

// Note [NCCL profiler plugin]: every worker with a step socket gets the plugin, unless its
// environment names a plugin of its own ("none" included).
TEST(WorkerEnv, TheNcclProfilerPluginUnlessThePodNamesOne) {
  Config c;
  c.nccl_profiler = "/opt/lockstep/lib/lockstep/libnccl-profiler-lockstep.so";
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {})["NCCL_PROFILER_PLUGIN"], c.nccl_profiler);
  EXPECT_EQ(worker_env(c, 0, 0, "", {}).count("NCCL_PROFILER_PLUGIN"), 0u) << "no socket: nowhere to report";
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {{"NCCL_PROFILER_PLUGIN", "none"}}).count("NCCL_PROFILER_PLUGIN"), 0u)
      << "the pod's own choice is inherited, not overridden";
  c.nccl_profiler.clear();
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {}).count("NCCL_PROFILER_PLUGIN"), 0u) << "off or not found";
}

TEST(Config, TheNcclProfilerIsFoundBesideTheAgentOrNamedOrOff) {
  namespace fs = std::filesystem;
  const std::string dir = fs::path(::testing::TempDir() + "/agent-nccl-find-" + std::to_string(::getpid())).lexically_normal().string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/lib/lockstep");
  const std::string exe = dir + "/bin/lockstep-agent";
  std::string note;
  EXPECT_EQ(find_nccl_profiler("", exe, &note), "");
  EXPECT_NE(note.find("not found"), std::string::npos) << note;
  std::ofstream(dir + "/lib/lockstep/libnccl-profiler-lockstep.so") << "x";
  EXPECT_EQ(find_nccl_profiler("1", exe), dir + "/lib/lockstep/libnccl-profiler-lockstep.so") << "an install";
  std::ofstream(dir + "/bin/libnccl-profiler-lockstep.so") << "x";
  EXPECT_EQ(find_nccl_profiler("", exe), dir + "/bin/libnccl-profiler-lockstep.so") << "beside the executable first";
  EXPECT_EQ(find_nccl_profiler("0", exe, &note), "");
  EXPECT_NE(note.find("off"), std::string::npos) << note;
  EXPECT_EQ(find_nccl_profiler(dir + "/lib/lockstep/libnccl-profiler-lockstep.so", exe),
            dir + "/lib/lockstep/libnccl-profiler-lockstep.so");
  for (const std::string& bad : std::vector<std::string>{"yes", "lib/x.so", dir + "/missing.so"}) {
    try {
      find_nccl_profiler(bad, exe);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_NCCL_PROFILER"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(load_config({{"LOCKSTEP_NCCL_PROFILER", "0"}}, {}, exe).nccl_profiler, "");
  EXPECT_EQ(load_config({}, {"--no-nccl-profiler"}, exe).nccl_profiler, "");
  EXPECT_EQ(load_config({}, {}, exe).nccl_profiler, dir + "/bin/libnccl-profiler-lockstep.so");
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

// Note [Worker threads]: the container's share of CPU, not the node's cores.
TEST(WorkerEnv, ThreadsFollowTheContainersCpuRequestThenItsLimit) {
  auto threads = [](int nproc, const std::map<std::string, std::string>& vars,
                    const std::map<std::string, std::string>& inherited = {}) {
    std::map<std::string, std::string> env = vars;
    env["LOCKSTEP_NPROC_PER_NODE"] = std::to_string(nproc);
    Config c = load_config(env, {});
    auto w = worker_env(c, 0, 0, "", inherited);
    return w.count("OMP_NUM_THREADS") ? w["OMP_NUM_THREADS"] : std::string("unset");
  };
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "500"}, {"LOCKSTEP_CPU_LIMIT", "2000"}}), "1")
      << "500m requested on a 2-core node: one thread, not two";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "4000"}, {"LOCKSTEP_CPU_LIMIT", "8000"}}), "4") << "the request, not the limit";
  EXPECT_EQ(threads(2, {{"LOCKSTEP_CPU_REQUEST", "7900"}, {"LOCKSTEP_CPU_LIMIT", "64000"}}), "3") << "shared by the workers, rounded down";
  EXPECT_EQ(threads(8, {{"LOCKSTEP_CPU_REQUEST", "2000"}}), "1") << "at least one";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "0"}, {"LOCKSTEP_CPU_LIMIT", "16000"}}), "16")
      << "no request: the limit (the node's allocatable CPU when the container has none)";
  EXPECT_EQ(threads(1, {}), "unset") << "outside Kubernetes, one worker: PyTorch's default";
  EXPECT_EQ(threads(2, {}), "1") << "outside Kubernetes, several workers: torchrun's rule";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "500"}}, {{"OMP_NUM_THREADS", "6"}}), "unset")
      << "the pod's own OMP_NUM_THREADS is inherited, not overridden";
  std::string why;
  Config c = load_config({{"LOCKSTEP_CPU_REQUEST", "2500"}}, {});
  EXPECT_EQ(c.worker_threads(&why), 2);
  EXPECT_EQ(why, "the container's CPU request 2500m over 1 worker(s)");
  for (const char* bad : {"abc", "-5", "1.5"}) {
    try {
      load_config({{"LOCKSTEP_CPU_REQUEST", bad}}, {});
      ADD_FAILURE() << "LOCKSTEP_CPU_REQUEST=" << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_CPU_REQUEST"), std::string::npos) << e.what();
    }
  }
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
}

TEST(Config, InPlaceRestartSettings) {
  auto c = load_config({{"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_IN_PLACE_RESTARTS", "3"}, {"LOCKSTEP_RESTART_POLICY", "ExitCode"},
                        {"LOCKSTEP_MASTER_PORT", "29600"}},
                       {});
  EXPECT_EQ(c.max_restarts, 3);  // multi-node jobs restart in place too (Note [Restart barrier])
  EXPECT_EQ(c.restart_policy, "ExitCode");
  EXPECT_EQ(c.barrier_port(), 29601);
  EXPECT_EQ(load_config({{"LOCKSTEP_AGENT_PORT", "4000"}}, {}).barrier_port(), 4000);
  EXPECT_EQ(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "3"}, {"LOCKSTEP_RESTART_POLICY", "Never"}}, {}).max_restarts, 0)
      << "Never restarts nothing, in place either";
  EXPECT_EQ(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "3"}}, {"--max-restarts", "1"}).max_restarts, 1);
  try {
    load_config({{"LOCKSTEP_RESTART_POLICY", "Always"}}, {});
    ADD_FAILURE() << "an unknown policy must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_RESTART_POLICY"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("OnFailure, ExitCode or Never"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "-1"}}, {}), ConfigError);
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

TEST(Config, PeerTimeoutFromFlagsAndTheEnvironment) {
  using std::chrono::seconds;
  auto c = load_config({{"LOCKSTEP_NNODES", "2"}}, {});
  EXPECT_EQ(c.peer_timeout, seconds(6)) << "Note [Heartbeats]: the default";
  EXPECT_EQ(c.heartbeat_interval(), seconds(1));
  EXPECT_TRUE(c.peer_checks());
  EXPECT_FALSE(load_config({}, {}).peer_checks()) << "a single node has no peer";
  c = load_config({{"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_PEER_TIMEOUT", "2s"}}, {});
  EXPECT_EQ(c.peer_timeout, seconds(2));
  EXPECT_EQ(c.heartbeat_interval(), std::chrono::milliseconds(500)) << "four heartbeats to a timeout";
  EXPECT_EQ(c.peer_timeout_from, "LOCKSTEP_PEER_TIMEOUT");
  EXPECT_EQ(load_config({{"LOCKSTEP_PEER_TIMEOUT", "2s"}}, {"--peer-timeout=30s"}).peer_timeout, seconds(30))
      << "a flag wins over the environment";
  c = load_config({{"LOCKSTEP_NNODES", "2"}}, {"--peer-timeout", "0"});
  EXPECT_FALSE(c.peer_checks()) << "0 switches the checks off";
  EXPECT_EQ(c.heartbeat_interval(), seconds(1)) << "heartbeats still go";
  // The older name, which bounded only a finished agent's wait, is the same setting; the newer
  // name wins where both are given.
  EXPECT_EQ(load_config({{"LOCKSTEP_BARRIER_TIMEOUT", "20s"}}, {}).peer_timeout, seconds(20));
  EXPECT_EQ(load_config({{"LOCKSTEP_BARRIER_TIMEOUT", "20s"}, {"LOCKSTEP_PEER_TIMEOUT", "9s"}}, {}).peer_timeout, seconds(9));
  EXPECT_EQ(load_config({}, {"--peer-timeout", "9s", "--barrier-timeout", "20s"}).peer_timeout, seconds(9));
  EXPECT_EQ(load_config({}, {"--barrier-timeout", "20s"}).peer_timeout_from, "--barrier-timeout");
  for (const auto& [env, args, named] :
       std::vector<std::tuple<std::map<std::string, std::string>, std::vector<std::string>, std::string>>{
           {{}, {"--peer-timeout", "1s"}, "--peer-timeout must be 0 (no heartbeat checks) or at least 2s"},
           {{{"LOCKSTEP_PEER_TIMEOUT", "1999ms"}}, {}, "LOCKSTEP_PEER_TIMEOUT must be 0 (no heartbeat checks) or at least 2s"},
           {{}, {"--barrier-timeout", "1s"}, "--barrier-timeout must be 0"},
           {{}, {"--peer-timeout", "off"}, "--peer-timeout: expected a duration"},
           {{{"LOCKSTEP_PEER_TIMEOUT", "-5s"}}, {}, "LOCKSTEP_PEER_TIMEOUT: expected a duration"}}) {
    try {
      load_config(env, args);
      ADD_FAILURE() << "accepted: " << named;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
}

// ---- The restart barrier (Note [Restart barrier]) ----

TEST(Barrier, MessagesRoundTripWhateverTheTextHolds) {
  Message m{"EXIT", {{"why", "rank 3 (pid 9) killed = bad; 100% gone\nnext line"}, {"exit", "137"}}};
  auto back = decode(encode(m));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->verb, "EXIT");
  EXPECT_EQ(back->fields, m.fields);
  EXPECT_EQ(encode(m).find('\n'), std::string::npos);
  EXPECT_FALSE(decode("").has_value());
  EXPECT_FALSE(decode("start gen=1").has_value());
  EXPECT_FALSE(decode("START gen").has_value());
  EXPECT_FALSE(decode("START gen=%zz").has_value());
  EXPECT_EQ(decode("START gen=x")->get_int("gen", -5), -5);
  // A failure travels with the failing rank's last lines, bounded, the newest kept.
  Failure f{1, 3, 64, "WorkerFailed", 1700000000123, "rank 3 (pid 9) exited with code 64",
            std::string(3000, 'x') + "\nlockstep-trainer: --steps must be an integer >= 1\n"};
  auto f2 = failure_of(*decode(encode(failure_message("FAILED", 0, f))));
  ASSERT_TRUE(f2.has_value());
  EXPECT_EQ(f2->what, f.what);
  EXPECT_EQ(f2->at_ms, f.at_ms);
  EXPECT_EQ(f2->tail.size(), kFailureTailBytes);
  EXPECT_EQ(f2->tail, f.tail.substr(f.tail.size() - kFailureTailBytes));
}

Failure failure(int node, int code, long long at, const std::string& reason = "WorkerFailed") {
  return Failure{node, node * 2, code, reason, at, "rank " + std::to_string(node * 2) + " failed", ""};
}

TEST(Barrier, TheCauseIsTheEarliestFailureThatIsNotAPeersConsequence) {
  // Node 0's rank lost its peer (77) a moment before node 1's OOM kill was seen: 137 is the cause.
  auto c = pick_cause({failure(0, lockstep::contract::kExitCollective, 1000), failure(1, 137, 1005)});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->node, 1);
  EXPECT_EQ(pick_cause({failure(1, 3, 2000), failure(0, 137, 1000)})->node, 0) << "earliest wins";
  EXPECT_EQ(pick_cause({failure(1, 77, 2000), failure(0, 75, 1000, "Stall")})->node, 0) << "only consequences: the earliest";
  EXPECT_FALSE(pick_cause({}).has_value());
}

TEST(Barrier, TheVerdictFollowsThePolicyAndTheBudget) {
  auto oom = failure(1, 137, 1000), bug = failure(1, 3, 1000);
  EXPECT_TRUE(decide(oom, 0, 3, "OnFailure").restart);
  EXPECT_TRUE(decide(bug, 2, 3, "OnFailure").restart);
  auto spent = decide(oom, 3, 3, "OnFailure");
  EXPECT_FALSE(spent.restart);
  EXPECT_EQ(spent.exit_code, 137);
  EXPECT_NE(spent.why.find("in-place restarts spent (3 of 3"), std::string::npos) << spent.why;
  EXPECT_TRUE(decide(oom, 0, 3, "ExitCode").restart);
  EXPECT_TRUE(decide(failure(1, lockstep::contract::kExitStall, 0, "Stall"), 0, 3, "ExitCode").restart);
  auto permanent = decide(bug, 0, 3, "ExitCode");
  EXPECT_FALSE(permanent.restart);
  EXPECT_NE(permanent.why.find("exit code 3 is permanent under restartPolicy ExitCode"), std::string::npos);
  EXPECT_FALSE(decide(oom, 0, 3, "Never").restart);
  EXPECT_NE(decide(oom, 0, 0, "OnFailure").why.find("in-place restarts are off"), std::string::npos);
}

namespace {
Config barrier_config(int nnodes, int budget) {
  Config c;
  c.nnodes = nnodes;
  c.max_restarts = budget;
  c.run_id = "run-1";
  c.grace_period = std::chrono::seconds(1);
  c.rendezvous_timeout = std::chrono::seconds(5);
  return c;
}
std::optional<Message> next(BarrierClient& c, const std::string& verb) {
  for (int i = 0; i < 100; ++i)
    if (auto m = c.poll(std::chrono::milliseconds(50)); m && m->verb == verb) return m;
  return std::nullopt;
}
// Joins as an agent does: takes the challenge, answers it (Note [Barrier trust]; these servers
// have no secret, so no proof).
void join(BarrierClient& c, int port, int node, const std::string& run = "run-1", int attempt = 0) {
  std::string err;
  ASSERT_TRUE(c.connect("127.0.0.1", port, err)) << err;
  ASSERT_TRUE(next(c, "CHALLENGE"));
  c.send({"HELLO", {{"node", std::to_string(node)}, {"run", run}, {"attempt", std::to_string(attempt)}}});
}
}  // namespace

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

// Note [Heartbeats]: members that tick say ALIVE and hear it; one that stops ticking is lost
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

// Note [Heartbeats]: an agent measures its own silence between ticks, from its HELLO on.
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

TEST(Barrier, AnAgentOfAnotherRunOrAttemptOrADuplicateNodeIsRefused) {
  BarrierServer server(barrier_config(2, 3), "127.0.0.1", 0);
  BarrierClient stale, other, n0, dup;
  join(stale, server.port(), 1, "run-1", 5);
  auto m = next(stale, "EXIT");
  ASSERT_TRUE(m);
  // Note [Barrier trust]: one fixed answer that echoes neither the run id nor the attempt.
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
