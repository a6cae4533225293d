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
};

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
// restart is marked at the step where the new attempt or generation reported first.
std::string report_html(const RunSummary& run, const std::vector<StepRecord>& records);

// Writes report_html(...) to PATH through a temporary file; throws std::runtime_error.
void write_report(const std::string& path, const RunSummary& run, const std::vector<StepRecord>& records);

}  // namespace lockstep::cli
