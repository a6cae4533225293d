// agent/protocol: the per-step datagram parser.
#include <gtest/gtest.h>

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
  auto r = parse_step_report("step=1 comm_s.allreduce=0.5 comm_bytes.allgather=1024 future_key=3");
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->comm_s_by_op.at("allreduce"), 0.5);
  EXPECT_DOUBLE_EQ(r->comm_bytes_by_op.at("allgather"), 1024);
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
