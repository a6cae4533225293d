// Shared by the cluster tier's suites that run TrainingJobs (tests/cluster): reading jobs and
// pods through kubectl, and the checkpointed job the fault scenarios train (lockstep_cluster_test,
// nodes_in_cluster_test) with what bench/recovery reads of it.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::test {

std::string trim(std::string s);  // trailing newlines and spaces off

// `kubectl get OBJECT -o json` in `ns` ("" for a cluster-scoped object); null when it failed.
nlohmann::json get_json(const std::string& ns, const std::string& object);
std::string phase(const std::string& ns, const std::string& job);  // the TrainingJob's status.phase
const nlohmann::json* condition(const nlohmann::json& job, const std::string& type);
// The TrainingJob's status.restarts; -1 while it cannot be read (the operator restarting).
int job_restarts(const std::string& ns, const std::string& job);
// The job's Events as "reason: message", oldest first.
std::vector<std::string> job_events(const std::string& ns, const std::string& job);
// What a user would look at when a wait fails: the jobs described, the pods and nodes, the
// operator's last log lines.
std::string diagnose(const std::string& ns);

// Issue #42's "no false verdicts", one check for every healthy job of the tier: the job has no
// `Straggler` condition (the operator adds one only once it saw a verdict, and a cleared one
// stays False: any status means a verdict was raised) and no `Straggler` Event names it.
::testing::AssertionResult no_straggler_verdict(const std::string& ns, const std::string& job);
// Waits up to `timeout` for the TrainingJob's phase Succeeded (failing at once on Failed),
// then, unless `expect_straggler`, asserts no_straggler_verdict. Every test of the tier that
// waits for a job to succeed does it through here, so every future one keeps the check.
::testing::AssertionResult wait_succeeded(const std::string& ns, const std::string& job, std::chrono::seconds timeout,
                                          bool expect_straggler = false);

// The newest complete checkpoint's step in `dir` (its LATEST file); 0 when none.
int latest_checkpoint(const std::string& dir);
std::chrono::system_clock::time_point parse_rfc3339(const std::string& t);

// What rank 0's log says from `since` on: the step it resumed at (-1: none yet, 0: started
// afresh) and when it finished its first step after that (DDP steps only when every
// rank takes part, so that is when all ranks step again).
struct Resume {
  int step = -1;
  std::optional<std::chrono::system_clock::time_point> first_step_at;
};
Resume resume_of(const std::string& ns, const std::string& pod,
                 std::chrono::system_clock::time_point since = std::chrono::system_clock::time_point{});

// The step times rank 0 printed ("step  12/400  ...  123.4 ms/step ...", with --log-every=1 one
// per step) in the lines of `pod`'s log the kubelet stamped in [from, to): their median in
// milliseconds (0 when none) and how many.
struct StepTimes {
  double median_ms = 0;
  size_t steps = 0;
};
StepTimes step_times(const std::string& ns, const std::string& pod, std::chrono::system_clock::time_point from,
                     std::chrono::system_clock::time_point to = std::chrono::system_clock::time_point::max());

int last_logged_step(const std::string& loss_log);  // rank 0's last step in its loss log
double final_loss(const std::string& loss_log);
// The loss rank 0 last logged for `step` (a step redone after a resume is logged again), or
// -1 when it logged none.
double loss_at(const std::string& loss_log, int step);
// bench/recovery reads these: one line per fault (LOCKSTEP_RECOVERY_REPORT names the file).
bool recovery_bench();  // whether LOCKSTEP_RECOVERY_REPORT names one: bench/recovery runs this
void report_recovery(const std::string& fault, int checkpoint, int at_fault, int resumed, double seconds);

// examples/ddp-checkpoint.yaml, named `name`, with its hostPath at `dir` (in the tests' state
// directory: nothing of a test stays on the machine), rank 0's loss log and a step line per
// step in the checkpoint directory, and the agents' stall window shortened to 10 s. `cpu`, when
// not empty, is the trainer container's CPU request and limit both (a Kubernetes quantity).
std::string checkpoint_job(const std::string& name, const std::string& dir, int steps, int in_place_restarts = 3,
                           const std::string& cpu = "");

}  // namespace lockstep::test
