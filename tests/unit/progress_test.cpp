// reconcile/progress: kubectl get tj's Step, Tok/s and ETA from rank 0's agent (Note [Progress]).
#include <gtest/gtest.h>

#include <sstream>

#include "reconcile/decide.hpp"
#include "reconcile/progress.hpp"

using namespace lockstep::reconcile;
using namespace std::chrono_literals;

namespace {

const Time kT0 = Clock::from_time_t(1'800'000'000);

// What an agent of node 0 with ranks 0 and 1 serves, trimmed to the series that matter.
std::string exposition(long long step0, double tokens0, long long step1, long long total = 200) {
  auto labels = [](int rank) {
    return "{namespace=\"ns\",node_rank=\"0\",rank=\"" + std::to_string(rank) + "\",trainingjob=\"tj\"}";
  };
  std::string t = "# HELP lockstep_step Step number of the last step report\n# TYPE lockstep_step gauge\n";
  // Rank 0 first, so a reader that also took node_rank="0" for rank="0" would end on rank 1's.
  t += "lockstep_step" + labels(0) + " " + std::to_string(step0) + "\n";
  t += "lockstep_step" + labels(1) + " " + std::to_string(step1) + "\n";
  t += "lockstep_steps_total" + labels(0) + " 999\n";  // another series sharing the prefix
  if (total >= 0) t += "lockstep_total_steps" + labels(0) + " " + std::to_string(total) + "\n";
  t += "lockstep_tokens_total" + labels(0) + " " + std::to_string(tokens0) + "\n";
  t += "lockstep_tokens_total" + labels(10) + " 5\n";  // rank 10 is neither rank 1 nor rank 0
  return t;
}

}  // namespace

TEST(Progress, ParsesRank0sSeriesOnly) {
  auto s = parse_progress(exposition(120, 61440, 119), 0, kT0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 120);
  EXPECT_EQ(s->total_steps, 200);
  EXPECT_DOUBLE_EQ(s->tokens, 61440);
  EXPECT_EQ(parse_progress(exposition(120, 1, 119), 1, kT0)->step, 119);
  EXPECT_FALSE(parse_progress("# nothing yet\n", 0, kT0).has_value());
  EXPECT_FALSE(parse_progress("lockstep_step{rank=\"0\"} NaN\n", 0, kT0).has_value());
  EXPECT_EQ(parse_progress(exposition(3, 0, 3, -1), 0, kT0)->total_steps, -1);
}

TEST(Progress, RatesAndEtaComeFromTwoReadings) {
  auto a = *parse_progress(exposition(100, 51200, 100), 0, kT0);
  auto b = *parse_progress(exposition(130, 66560, 130), 0, kT0 + 30s);
  auto first = progress_between(std::nullopt, a, 4);
  EXPECT_EQ(first.step, 100);
  EXPECT_EQ(first.total_steps, 200);
  EXPECT_FALSE(first.tokens_per_second.has_value());
  EXPECT_FALSE(first.eta_seconds.has_value());
  auto p = progress_between(a, b, 4);
  EXPECT_EQ(p.step, 130);
  ASSERT_TRUE(p.tokens_per_second.has_value());
  EXPECT_DOUBLE_EQ(*p.tokens_per_second, 15360.0 / 30 * 4);  // rank 0's rate times the world size
  ASSERT_TRUE(p.eta_seconds.has_value());
  EXPECT_EQ(*p.eta_seconds, 70);  // 70 steps left at 1 step/s
  // No step between the readings, or a restart that went back: no rate to give.
  EXPECT_FALSE(progress_between(b, b, 4).eta_seconds.has_value());
  EXPECT_FALSE(progress_between(b, a, 4).tokens_per_second.has_value());
}

TEST(Progress, DurationsReadBackAsTheyShow) {
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(200), "3m20s");
  EXPECT_EQ(format_duration(7523), "2h05m");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600 + 59), "3d04h");
  for (long long s : {0LL, 59LL, 61LL, 3599LL, 7500LL, 90000LL}) EXPECT_EQ(format_duration(*parse_duration(format_duration(s))), format_duration(s));
  EXPECT_FALSE(parse_duration("soon").has_value());
  EXPECT_FALSE(parse_duration("").has_value());
}

// The status carries it with kubectl's columns, and an unchanged reading writes nothing.
TEST(Progress, StatusCarriesItAndAnUnchangedReadingWritesNothing) {
  Progress p;
  p.step = 130;
  p.total_steps = 200;
  p.tokens_per_second = 2048;
  p.eta_seconds = 7500;
  JobStatus st;
  st.phase = "Running";
  st.progress = p;
  auto j = st.to_json();
  EXPECT_EQ(j["progress"]["steps"], "130/200");
  EXPECT_EQ(j["progress"]["tokensPerSecond"], 2048);
  EXPECT_EQ(j["progress"]["eta"], "2h05m");
  EXPECT_EQ(JobStatus::from_json(j), st);

  JobView job;
  job.name = "tj";
  job.nodes = 1;
  job.status = JobStatus::from_json(j);
  job.status.start_time = format_time(kT0);
  job.status.conditions.push_back({"Running", "True", "AllNodesRunning", "", format_time(kT0)});
  PodView pod;
  pod.name = "tj-0";
  pod.index = 0;
  pod.attempt = 0;
  pod.phase = "Running";
  pod.ready = true;
  Observed in;
  in.job = job;
  in.pods = {pod};
  in.service_exists = in.podgroup_exists = true;
  in.now = kT0 + 60s;
  job.status.nodes = {1, 1, 0, 0};
  in.job.status.nodes = {1, 1, 0, 0};
  in.progress = p;
  EXPECT_FALSE(decide(in).status_changed);
  in.progress->step = 131;
  auto d = decide(in);
  EXPECT_TRUE(d.status_changed);
  EXPECT_EQ(d.status.progress->step, 131);
  in.progress.reset();  // no reading (the poller has none yet): the last one stays
  EXPECT_EQ(decide(in).status.progress->step, 130);
}

// Every pod exited 0: the job shows all its steps done, not the last reading's step.
TEST(Progress, ASucceededJobShowsEveryStepDone) {
  JobView job;
  job.ns = "ns";
  job.name = "tj";
  job.nodes = 1;
  job.status.phase = "Running";
  job.status.start_time = format_time(kT0);
  Progress last;
  last.step = 180;
  last.total_steps = 200;
  last.tokens_per_second = 2048;
  last.eta_seconds = 10;
  job.status.progress = last;
  PodView pod;
  pod.name = "tj-0";
  pod.index = 0;
  pod.attempt = 0;
  pod.phase = "Succeeded";
  Observed in;
  in.job = job;
  in.pods = {pod};
  in.service_exists = true;
  in.now = kT0 + 60s;
  auto d = decide(in);
  EXPECT_EQ(d.status.phase, "Succeeded");
  ASSERT_TRUE(d.status.progress.has_value());
  EXPECT_EQ(d.status.progress->step, 200);
  EXPECT_EQ(d.status.progress->eta_seconds, 0);
  EXPECT_EQ(d.status.to_json()["progress"]["steps"], "200/200");
  // A program that never said its total: the step stays what it was.
  job.status.progress->total_steps = -1;
  in.job = job;
  EXPECT_EQ(decide(in).status.progress->step, 180);
}

// --- #25: nothing before the first step, never 0/0 ------------------------------------------

namespace {

// What a real agent serves for rank 0 (trimmed): every series exists from its start, at 0.
std::string agent_page(double step, double total, double reports, double tokens = 0) {
  const std::string l = "{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"}";
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  return "lockstep_step" + l + " " + num(step) + "\nlockstep_total_steps" + l + " " + num(total) +
         "\nlockstep_steps_total" + l + " " + num(reports) + "\nlockstep_tokens_total" + l + " " + num(tokens) + "\n";
}

std::string steps_column(const std::optional<ProgressSample>& s) {
  JobStatus st;
  st.progress = progress_between(std::nullopt, *s, 1);
  auto j = st.to_json();
  return j["progress"]["steps"];
}

}  // namespace

TEST(Progress, NothingBeforeTheFirstStepAndTheStepAloneWithoutATotal) {
  // The agent's page before any report: step 0 of total 0 is no step at all (it showed "0/0").
  EXPECT_FALSE(parse_progress(agent_page(0, 0, 0), 0, kT0).has_value());
  // A program that does not say its total (a Python program, the probe's steps): the step alone.
  auto s = parse_progress(agent_page(7, 0, 7, 3584), 0, kT0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 7);
  EXPECT_EQ(s->total_steps, -1);
  EXPECT_EQ(steps_column(s), "7");
  JobStatus st;
  st.progress = progress_between(std::nullopt, *s, 1);
  EXPECT_FALSE(st.to_json()["progress"].contains("totalSteps"));
  // Its ETA stays empty, its tokens/s comes from two readings as any program's.
  auto later = *parse_progress(agent_page(17, 0, 17, 8704), 0, kT0 + 10s);
  auto p = progress_between(s, later, 2);
  EXPECT_FALSE(p.eta_seconds.has_value());
  ASSERT_TRUE(p.tokens_per_second.has_value());
  EXPECT_DOUBLE_EQ(*p.tokens_per_second, 5120.0 / 10 * 2);
  // A step 0 that was reported (a program counting from 0) is a step.
  EXPECT_EQ(steps_column(parse_progress(agent_page(0, 50, 1), 0, kT0)), "0/50");
  EXPECT_EQ(steps_column(parse_progress(agent_page(12, 50, 12), 0, kT0)), "12/50");
}

TEST(Progress, ReadingsAPodCouldForgeAreNotBelieved) {
  for (const char* step : {"1e300", "-5", "NaN", "+Inf", "12.5", "1e16"})
    EXPECT_FALSE(parse_progress("lockstep_step{rank=\"0\"} " + std::string(step) + "\nlockstep_steps_total{rank=\"0\"} 3\n",
                                0, kT0).has_value())
        << step;
  for (const char* reports : {"0", "NaN", "-1", "0.5"})
    EXPECT_FALSE(parse_progress("lockstep_step{rank=\"0\"} 3\nlockstep_steps_total{rank=\"0\"} " + std::string(reports) +
                                "\n", 0, kT0).has_value())
        << reports;
  for (const char* total : {"1e300", "-3", "NaN", "2.5", "0"}) {
    auto s = parse_progress("lockstep_step{rank=\"0\"} 3\nlockstep_total_steps{rank=\"0\"} " + std::string(total) + "\n", 0, kT0);
    ASSERT_TRUE(s.has_value()) << total;
    EXPECT_EQ(s->total_steps, -1) << total;
  }
  auto s = parse_progress("lockstep_step{rank=\"0\"} 3\nlockstep_tokens_total{rank=\"0\"} NaN\n", 0, kT0);
  ASSERT_TRUE(s.has_value());
  EXPECT_LT(s->tokens, 0);
  // Another rank's (or another job's rank 1's) series never stands in for rank 0's.
  EXPECT_FALSE(parse_progress("lockstep_step{rank=\"1\"} 3\nlockstep_step{rank=\"00\"} 4\n", 0, kT0).has_value());
  // An absurd token count gives no rate rather than an overflow.
  auto a = *parse_progress("lockstep_step{rank=\"0\"} 1\nlockstep_tokens_total{rank=\"0\"} 0\n", 0, kT0);
  auto b = *parse_progress("lockstep_step{rank=\"0\"} 2\nlockstep_tokens_total{rank=\"0\"} 1e300\n", 0, kT0 + 1s);
  EXPECT_FALSE(progress_between(a, b, 8).tokens_per_second.has_value());
}
