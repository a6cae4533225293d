// The picture of a `lockstep run`: lockstep-runs/<job>/report.html, one self-contained page
// (no network, no external script) with the loss, the step time per rank, and compute against
// exposed communication per rank over the steps: the local counterpart of the Grafana
// training dashboard's headline panels (dashboards/lockstep-training.json). Drawn from the
// agents' step logs (agent --step-log, Note [Step log] in agent/metrics.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <ios>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::cli {

// One line of a step log: one step of one rank.
struct StepRecord {
  int rank = 0;
  int attempt = 0;     // the gang restart (LOCKSTEP_RESTART_ATTEMPT)
  int generation = 0;  // the in-place restart
  long long step = 0;
  std::optional<double> step_s, compute_s, comm_s, exposed_comm_s, loss, tokens, total_steps;
  std::optional<double> time;  // the report's arrival at its agent, Unix seconds
};

// A straggler verdict of node 0's agent as its event log records it (Note [Straggler score] in
// common/include/lockstep/straggler.hpp; docs/metrics.md, "The step log").
struct StragglerVerdict {
  int rank = -1, node_rank = -1;
  double slowdown = 1;               // the rank's work over the gang's typical rank's, at the verdict
  double window_s = 0;               // over the last this long
  unsigned throttle = 0;             // straggler::Throttle bits: the GPU clock-throttle reasons
  double raised_at = 0;              // Unix seconds
  std::optional<double> cleared_at;  // Unix seconds; nullopt: it stood to the end of the run
  std::string cleared_by;            // when cleared_at is not node 0's word: what ended it ("gang restart")
};

// One line of node 0's event log that is a straggler event, checked: rank in [0, world), its
// node_rank rank / procs_per_node, slowdown finite in [1, 1000], window_s finite in [1, 3600],
// throttle (optional) tokens straggler::parse_throttle_tokens knows, time finite and positive.
// A `straggler_cleared` line needs rank, node_rank and time only. `raised` tells the kinds apart.
struct StragglerEvent {
  bool raised = true;
  StragglerVerdict verdict;
};
// nullopt with *error empty: the line is another kind of event; with *error set: a straggler
// event that failed the check, *error naming the field and what is valid.
std::optional<StragglerEvent> straggler_event(const nlohmann::json& line, int world, int procs_per_node, std::string* error);

// "rank 5 (node 2): work 1.42x the gang's typical rank over the last 30 s[; GPU clocks
// throttled: power cap]": what `lockstep run` and report.html say of a verdict.
std::string describe_verdict(const StragglerVerdict& v);
// Seconds into a run as mm:ss ("07:05"; minutes past 59 go on counting: "75:03").
std::string run_clock(double seconds);

// What the page says about the run besides its steps.
struct RunSummary {
  std::string job;
  std::string strategy;
  int nodes = 1;
  int procs_per_node = 1;
  int total_steps = 0;       // planned; 0 when unknown
  std::string outcome;       // "finished", "FAILED: ...", "stopped by Interrupt"
  double elapsed_s = 0;
  int in_place_restarts = 0;
  int gang_restarts = 0;
  double started_at = 0;                   // Unix seconds: when the run began (verdicts are told from it)
  std::vector<StragglerVerdict> stragglers;  // every verdict of the run, in the order raised
};

// The lines appended to a JSON-lines file (a step log, an agent's event log) since the last
// read(), each parsed; a line not yet complete waits for the next read (the last one of a
// killed agent may stay cut short for good), and one that is not a JSON object is skipped.
class JsonLinesFollower {
 public:
  explicit JsonLinesFollower(std::string path) : path_(std::move(path)) {}
  std::vector<nlohmann::json> read();

 private:
  std::string path_;
  std::streamoff offset_ = 0;
  std::string partial_;
};

// A step log line as a record; nullopt when it carries no step.
std::optional<StepRecord> step_record(const nlohmann::json& line);

// Every record of DIR/rank-*.jsonl, in file order per rank; lines that are not records, or are
// cut short, are skipped (JsonLinesFollower).
std::vector<StepRecord> read_step_logs(const std::string& dir);

// The page. Per rank, a step run again after a restart shows its latest figures; each
// restart is marked at the step where the new attempt or generation reported first. Each
// straggler verdict is a banner naming the rank, and a mark on the step-time chart at the
// first step its rank reported at or after the verdict.
std::string report_html(const RunSummary& run, const std::vector<StepRecord>& records);

// Writes report_html(...) to PATH through a temporary file; throws std::runtime_error.
void write_report(const std::string& path, const RunSummary& run, const std::vector<StepRecord>& records);

}  // namespace lockstep::cli
