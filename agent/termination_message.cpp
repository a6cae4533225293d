#include "termination_message.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/text.hpp"

namespace lockstep::agent {
namespace {

// The container's termination message file (Note [Termination message]): written whole, when
// there is one.
void write_termination_log(const std::string& text) {
  const char* env = std::getenv(contract::kTerminationLog);
  std::string path = env && *env ? env : "/dev/termination-log";
  if (!env && ::access(path.c_str(), W_OK) != 0) return;
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) LOCKSTEP_LOG(Warn, "agent", "cannot write the termination message to " << path);
}

// A gauge or counter as a step count: a whole number in [0, 1e15] (what the operator believes).
std::optional<long long> step_count(double v) {
  if (!std::isfinite(v) || v < 0 || v > 1e15 || std::floor(v) != v) return std::nullopt;
  return static_cast<long long>(v);
}

}  // namespace

// Rank 0's progress line for a run that succeeded (Note [Termination message]); nothing when
// rank 0 reported no step.
void write_progress_summary(const Metrics& metrics) {
  std::optional<long long> step, total, reports, in_place;
  std::string reason, rank, exit_code;  // the last in-place restart's cause (the agent's own labels)
  for (const auto& family : metrics.registry()->Collect()) {
    const bool is_step = family.name == "lockstep_step", is_total = family.name == "lockstep_total_steps",
               is_reports = family.name == "lockstep_steps_total";
    if (family.name == "lockstep_restarts_total" || family.name == "lockstep_last_restart_info") {
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> l;
        for (const auto& p : m.label) l[p.name] = p.value;
        if (l["kind"] != "in_place") continue;
        if (family.name == "lockstep_restarts_total") {
          in_place = step_count(m.counter.value);
        } else if (m.gauge.value == 1) {
          reason = l["reason"], rank = l["rank"], exit_code = l["exit_code"];
        }
      }
      continue;
    }
    if (!is_step && !is_total && !is_reports) continue;
    for (const auto& m : family.metric) {
      bool rank0 = false;
      for (const auto& l : m.label) rank0 |= l.name == "rank" && l.value == "0";
      if (!rank0) continue;
      if (is_step) step = step_count(m.gauge.value);
      else if (is_total) total = step_count(m.gauge.value);
      else reports = step_count(m.counter.value);
    }
  }
  const bool restarted = in_place && *in_place >= 1;
  const bool stepped = step && reports && *reports >= 1;
  if (!stepped && !restarted) return;
  std::string line = "lockstep-progress";
  if (stepped) line += " step=" + std::to_string(*step);
  if (stepped && total && *total >= 1) line += " total=" + std::to_string(*total);
  // The in-place restarts of this attempt and the last one's cause: the operator counts those
  // made after its last reading of /metrics from here (Note [Final progress]).
  if (restarted) {
    line += " restarts=" + std::to_string(*in_place);
    if (!reason.empty()) line += " reason=" + reason;
    if (!rank.empty() && rank != "-1") line += " rank=" + rank;
    if (!exit_code.empty() && exit_code != "-1") line += " exit=" + exit_code;
  }
  write_termination_log(line + "\n");
}

void write_termination_message(const std::string& why, const std::vector<std::string>& tail, int silent_peer) {
  std::string text = "lockstep-agent: " + why + "\n";
  for (const auto& l : tail) text += l + "\n";
  // See Note [Silent peer]: the operator's line first, and never cut: the rest keeps its end. A
  // worker's output is any bytes: made UTF-8 before the cut (Note [UTF-8 text]).
  const std::string first = silent_peer >= 0 ? std::string(contract::kSilentPeerLine) + " node=" + std::to_string(silent_peer) + "\n" : "";
  write_termination_log(first + lockstep::text::utf8_tail(lockstep::text::utf8_valid(text), 4096 - first.size()));
}

}  // namespace lockstep::agent
