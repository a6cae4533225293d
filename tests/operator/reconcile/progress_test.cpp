// reconcile/progress: kubectl get tj's Step, Tok/s and ETA from rank 0's agent (Note [Progress]).
// How the agent is read: controller/agent_reader_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "agent_page.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/progress.hpp"
#include "reconcile/prometheus_text.hpp"

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
  job.status.conditions.push_back({"Created", "True", "PodsCreated", "pods of attempt 0 created", format_time(kT0)});
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
  in.job.status.isolation = "None";  // as the job's first status write left it (Note [Job isolation])
  in.job.status.conditions.push_back(*decide(in).status.condition("Isolated"));
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

using lockstep::test::agent_page;  // agent_page.hpp

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

// --- Note [Progress schedule] ---------------------------------------------------------------

TEST(ProgressSchedule, StartsSoonBacksOffToThePeriodAndResetsOnceForTheFirstStep) {
  using F = ReadingSchedule::Found;
  ReadingSchedule s(kFirstReading, 30s);
  EXPECT_EQ(s.interval(), 2000ms);
  std::vector<long long> waiting;
  for (int i = 0; i < 9; ++i) waiting.push_back(s.after(F::Nothing).count());
  EXPECT_EQ(waiting, (std::vector<long long>{3000, 4500, 6750, 10125, 15187, 22780, 30000, 30000, 30000}));
  // The first step: soon again, for a rate; a rate: the period.
  EXPECT_EQ(s.after(F::Step), 2000ms);
  EXPECT_EQ(s.after(F::Step), 3000ms);  // no rate yet (a slow step): backing off again
  EXPECT_EQ(s.after(F::Rate), 30000ms);
  EXPECT_EQ(s.after(F::Step), 30000ms);  // a later step without a rate (a restart went back): no reset
  EXPECT_EQ(s.after(F::Nothing), 30000ms);
  // A period shorter than the first interval (the tests' 1 s) is never exceeded.
  ReadingSchedule fast(kFirstReading, 1s);
  EXPECT_EQ(fast.interval(), 1000ms);
  EXPECT_EQ(fast.after(F::Nothing), 1000ms);
  EXPECT_EQ(fast.after(F::Step), 1000ms);
}

namespace {

// One job attempt under the schedule: its first step comes `first_step` after the operator
// sees it running, then a step every `step_every`; the run lasts `run`. The reading times.
std::vector<double> readings(double first_step, double step_every, double run, double period = 30) {
  using F = ReadingSchedule::Found;
  ReadingSchedule s(kFirstReading, std::chrono::milliseconds(static_cast<long long>(period * 1000)));
  std::vector<double> at;
  double t = s.interval().count() / 1000.0, last_step_seen = -1;
  while (t <= run) {
    at.push_back(t);
    double step = t < first_step ? -1 : std::floor((t - first_step) / step_every);
    F found = step < 0 ? F::Nothing : (last_step_seen >= 0 && step > last_step_seen) ? F::Rate : F::Step;
    if (step >= 0) last_step_seen = step;
    t += s.after(found).count() / 1000.0;
  }
  return at;
}

}  // namespace

TEST(ProgressSchedule, TheFirstStepShowsWithinSecondsAndTheCostIsAFewReadingsPerAttempt) {
  // The README's quick start: the first step 3 s in, 20 steps a second, done at 15 s. At the
  // period alone it was never read; now the step shows at 5 s and a rate at 7 s.
  auto quick = readings(3, 0.05, 15);
  EXPECT_EQ(quick, (std::vector<double>{2, 5, 7}));
  for (double first_step : {0.5, 3.0, 9.0, 20.0, 45.0, 100.0, 400.0})
    for (double step_every : {0.05, 1.0, 4.0, 20.0}) {
      auto at = readings(first_step, step_every, 3600);
      auto seen = std::find_if(at.begin(), at.end(), [&](double t) { return t >= first_step; });
      ASSERT_NE(seen, at.end());
      // The first step shows within about half the time the job has run, never a period late.
      EXPECT_LE(*seen - first_step, std::min(30.0, first_step / 2 + 3)) << first_step << " " << step_every;
      // And costs a few readings more than the period alone (120 in the hour) would take.
      EXPECT_LE(at.size(), 120u + 10u) << first_step << " " << step_every;
      EXPECT_GE(at.size(), 118u);
    }
  // A program that never reports a step: 7 readings in its first minute, then the period.
  auto silent = readings(1e9, 1, 3600);
  EXPECT_EQ(std::count_if(silent.begin(), silent.end(), [](double t) { return t < 64.5; }), 7);
  EXPECT_EQ(std::count_if(silent.begin(), silent.end(), [](double t) { return t >= 64.5; }), (3600 - 64) / 30);
}

namespace {
// A summary of a step and a total only.
FinalSummary steps(long long step, long long total) {
  FinalSummary s;
  s.step = step;
  s.total_steps = total;
  return s;
}
}  // namespace

TEST(FinalProgress, ParsesTheAgentsLine) {
  EXPECT_EQ(parse_final_summary("lockstep-progress step=200 total=200\n"), (steps(200, 200)));
  EXPECT_EQ(parse_final_summary("lockstep-progress step=57\n"), (steps(57, -1)));
  EXPECT_EQ(parse_final_summary("lockstep-progress step=57"), (steps(57, -1)));
  EXPECT_EQ(parse_final_summary("lockstep-progress total=9 step=3\n"), (steps(3, 9)));
  EXPECT_EQ(parse_final_summary("lockstep-progress step=0\n"), (steps(0, -1)));
  EXPECT_EQ(parse_final_summary("lockstep-progress step=1000000000000000 total=1000000000000000\n"),
            (steps(kMaxSteps, kMaxSteps)));
}

TEST(FinalProgress, ParsesTheInPlaceRestartsAndTheLastCause) {
  FinalSummary both = steps(960, -1);
  both.in_place_restarts = 1, both.reason = "WorkerFailed", both.rank = "1", both.exit_code = "137";
  EXPECT_EQ(parse_final_summary("lockstep-progress step=960 restarts=1 reason=WorkerFailed rank=1 exit=137\n"), both);
  FinalSummary signal = steps(12, 20);
  signal.in_place_restarts = 2, signal.reason = "WorkerFailed", signal.rank = "0", signal.exit_code = "-9";
  EXPECT_EQ(parse_final_summary("lockstep-progress step=12 total=20 restarts=2 reason=WorkerFailed rank=0 exit=-9"),
            signal);
  // A program that restarted in place but never reported a step: the restarts alone.
  FinalSummary no_step = steps(-1, -1);
  no_step.in_place_restarts = 3, no_step.reason = "Stall";
  EXPECT_EQ(parse_final_summary("lockstep-progress restarts=3 reason=Stall\n"), no_step);
  // ...which leaves the progress as it was.
  Progress last;
  last.step = 5;
  EXPECT_EQ(final_progress(last, no_step)->step, 5);
}

TEST(FinalProgress, ARestartCountOrCauseThatIsNotTheAgentsIsNotASummary) {
  for (const std::string& m : std::vector<std::string>{
           "lockstep-progress restarts=1001\n",                                 // past kMaxInPlaceReading
           "lockstep-progress step=3 restarts=-1\n",
           "lockstep-progress step=3 restarts=1 restarts=2\n",
           "lockstep-progress step=3 restarts=1 reason=workerFailed\n",         // not CamelCase
           "lockstep-progress step=3 restarts=1 reason=Worker-Failed\n",
           "lockstep-progress step=3 restarts=1 reason=" + std::string(65, 'A') + "\n",
           "lockstep-progress step=3 restarts=1 rank=1234567890\n",             // 10 digits
           "lockstep-progress step=3 restarts=1 exit=-\n",
           "lockstep-progress step=3 restarts=1 exit=1e3\n",
           "lockstep-progress step=3 reason=WorkerFailed\n",                    // a cause, no count
           "lockstep-progress total=9 restarts=1\n",                            // a total, no step
           "lockstep-progress step=3 restarts=1 reason=A\x1b[2J\n",
       })
    EXPECT_FALSE(parse_final_summary(m).has_value()) << ::testing::PrintToString(m);
}

TEST(FinalProgress, AnythingButTheAgentsExactLineIsNotASummary) {
  const std::string long_line = "lockstep-progress step=1 total=2" + std::string(300, ' ');
  for (const std::string& m : std::vector<std::string>{
           "",
           "lockstep-progress",
           "lockstep-progress \n",
           "lockstep-progress step=\n",
           "lockstep-progress total=200\n",                       // no step
           "lockstep-progress step=ten total=200\n",              // non-numeric
           "lockstep-progress step=-5 total=200\n",               // negative
           "lockstep-progress step=+5\n",                         // a sign
           "lockstep-progress step=NaN\n",
           "lockstep-progress step=inf\n",
           "lockstep-progress step=1e3\n",                        // an exponent
           "lockstep-progress step=0x10\n",
           "lockstep-progress step=12.0\n",
           "lockstep-progress step=12 total=0\n",                 // a total of 0 is "0/0"
           "lockstep-progress step=99999999999999999\n",          // 17 digits
           "lockstep-progress step=1000000000000001\n",           // past kMaxSteps
           "lockstep-progress step=1 step=2\n",                   // a key twice
           "lockstep-progress step=3 total=9 total=10\n",
           "lockstep-progress step=3 job=other namespace=x\n",    // another job's fields
           "lockstep-progress step=3 total=9 uid=0000\n",
           "lockstep-progress step=3  total=9\n",                 // two spaces
           "lockstep-progress step=3 \n",
           " lockstep-progress step=3\n",
           "Lockstep-progress step=3\n",
           "lockstep-progress: step=3\n",
           "lockstep-progress step=3\r\n",                        // control characters
           "lockstep-progress step=3\ttotal=9\n",
           std::string("lockstep-progress step=3\0 total=9\n", 34),
           "lockstep-progress step=3\x1b[2Jtotal=9\n",
           "lockstep-progress step=3\n\n",                        // a second line
           "lockstep-agent: rank 0 exited with code 1\nlockstep-progress step=3\n",
           "lockstep-progress step=3\nTraceback (most recent call last):\n",
           long_line,                                             // oversized
           "lockstep-progress step=" + std::string(5000, '9') + "\n",
       })
    EXPECT_FALSE(parse_final_summary(m).has_value()) << ::testing::PrintToString(m);
}

TEST(FinalProgress, TheSummaryWinsOverTheLastReadingAndTheTotalStandsInWithoutOne) {
  Progress last;
  last.step = 120;
  last.total_steps = 200;
  last.tokens_per_second = 4096;
  last.eta_seconds = 30;
  auto p = final_progress(last, steps(180, 200));  // an early stop at 180 of 200
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 180);
  EXPECT_EQ(p->total_steps, 200);
  EXPECT_EQ(p->tokens_per_second, 4096);
  EXPECT_EQ(p->eta_seconds, 0);
  p = final_progress(last, std::nullopt);  // no summary: every rank exited 0, all steps taken
  EXPECT_EQ(p->step, 200);
  EXPECT_EQ(p->eta_seconds, 0);
  // No reading at all (a short run): the summary alone; the step alone when there is no total.
  p = final_progress(std::nullopt, steps(57, -1));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 57);
  EXPECT_EQ(p->total_steps, -1);
  EXPECT_FALSE(p->eta_seconds.has_value());
  EXPECT_FALSE(p->tokens_per_second.has_value());
  EXPECT_FALSE(final_progress(std::nullopt, std::nullopt).has_value());
}

namespace {

// A job of `nodes` pods that all Succeeded, with these termination messages; rank 0 first.
Decision succeed(const std::vector<std::string>& messages, std::optional<Progress> status_progress,
                 std::optional<Progress> reading = std::nullopt) {
  JobView job;
  job.ns = "ns";
  job.name = "tj";
  job.nodes = static_cast<int>(messages.size());
  job.status.phase = "Running";
  job.status.start_time = format_time(kT0);
  job.status.progress = status_progress;
  Observed in;
  in.job = job;
  for (size_t i = 0; i < messages.size(); ++i) {
    PodView pod;
    pod.name = "tj-" + std::to_string(i);
    pod.index = static_cast<int>(i);
    pod.attempt = 0;
    pod.phase = "Succeeded";
    pod.exit_code = 0;
    pod.termination_message = messages[i];
    in.pods.push_back(pod);
  }
  std::reverse(in.pods.begin(), in.pods.end());  // the cache's order is no rank order
  in.service_exists = true;
  in.progress = reading;
  in.now = kT0 + 60s;
  return decide(in);
}

}  // namespace

TEST(FinalProgress, ASucceededJobShowsRank0sLastStepAndNobodyElsesSays) {
  Progress mid;
  mid.step = 10;  // a Python program: no total
  auto d = succeed({"lockstep-progress step=57\n", ""}, mid);
  EXPECT_EQ(d.status.phase, "Succeeded");
  ASSERT_TRUE(d.status.progress.has_value());
  EXPECT_EQ(d.status.to_json()["progress"]["steps"], "57");
  // No reading ever (the run ended before one): rank 0's line alone gives it.
  d = succeed({"lockstep-progress step=40 total=40\n", ""}, std::nullopt);
  EXPECT_EQ(d.status.to_json()["progress"]["steps"], "40/40");
  EXPECT_EQ(d.status.to_json()["progress"]["eta"], "0s");
  // Rank 1's pod says something else: it does not speak for the job.
  d = succeed({"", "lockstep-progress step=999999 total=999999\n"}, mid);
  EXPECT_EQ(d.status.progress->step, 10);
  // A forged or broken line on rank 0 changes nothing: the newest reading stays.
  Progress reading;
  reading.step = 190;
  reading.total_steps = 200;
  d = succeed({"lockstep-progress step=-5 total=NaN\n", ""}, mid, reading);
  EXPECT_EQ(d.status.to_json()["progress"]["steps"], "200/200");  // all steps taken, as before
  d = succeed({"lockstep-progress step=12 total=0\n"}, std::nullopt);
  EXPECT_FALSE(d.status.progress.has_value());
}

// See Note [Host-network readings]: only the lines naming the job are kept.
TEST(Progress, AHostNetworkReadingKeepsOnlyTheJobsOwnSeries) {
  const std::string text =
      "# TYPE lockstep_step gauge\n"
      "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 12\n"
      "lockstep_step{namespace=\"other\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 13\n"
      "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj2\"} 14\n"
      "lockstep_step{rank=\"0\"} 15\n"
      "lockstep_step{namespace=\"ns\",rank=\"0\",trainingjob=\"tj\",x=\"trainingjob=\\\"tj\\\"\"} 16\n"
      "lockstep_steps_total{trainingjob=\"tj\",namespace=\"ns\",rank=\"0\"} 5\n";
  const std::string kept = series_of_job(text, "ns", "tj");
  EXPECT_EQ(kept,
            "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 12\n"
            "lockstep_step{namespace=\"ns\",rank=\"0\",trainingjob=\"tj\",x=\"trainingjob=\\\"tj\\\"\"} 16\n"
            "lockstep_steps_total{trainingjob=\"tj\",namespace=\"ns\",rank=\"0\"} 5\n");
  EXPECT_EQ(series_of_job("lockstep_step{rank=\"0\"} 15\n", "ns", "tj"), "");
  auto s = parse_progress(kept, 0, Clock::from_time_t(0));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 16);
}
