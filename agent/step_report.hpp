// The step report from a worker to its agent (docs/metrics.md, "The step report"): one line of
// space-separated key=value pairs per step, e.g.
//   step=120 step_s=0.412 compute_s=0.301 comm_s=0.150 exposed_comm_s=0.041 tokens=65536
//   flops=4.1e13 loss=2.93 mem_bytes=812345344
// Per-collective figures may follow as comm_s.<op>=SECONDS, comm_bytes.<op>=BYTES and
// exposed_comm_s.<op>=SECONDS (op: allreduce, allgather, reduce_scatter, broadcast, ...). Unknown keys are ignored, so
// senders can add fields. NCCL's own timing (Note [NCCL profiler plugin] in
// nccl_profiler/plugin.c) comes as nccl_s.<op>, nccl_bytes.<op> and nccl_count.<op> in lines
// of their own with no step (a step report may carry them too). A line with neither a valid
// step nor an nccl_ figure is malformed, and so is one with a key
// given twice or not a name ([A-Za-z0-9_.]{1,64}), a value that is not a finite number within +-kMaxReportValue (negative only
// for loss), an op name outside [a-z0-9_]{1,32}, or more than kMaxReportBytes bytes.
// A datagram carries one report or several, one per line ('\n' between them; the Python
// probe sends a few steps' reports at once, Note [Reports in batches]), of at most
// kMaxDatagramBytes in all; each line is parsed, and rejected, on its own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace lockstep::agent {

inline constexpr size_t kMaxReportBytes = 4096;
inline constexpr size_t kMaxDatagramBytes = 32768;
inline constexpr double kMaxReportValue = 1e30;
inline constexpr size_t kMaxOpNameLength = 32;

struct StepReport {
  long long step = -1;  // -1: a report of NCCL figures alone
  bool has_step() const { return step >= 0; }
  std::optional<double> step_s, compute_s, comm_s, exposed_comm_s, tokens, flops, loss, mem_bytes;
  std::optional<double> total_steps;  // the run's planned steps, for progress and an ETA
  std::map<std::string, double> comm_s_by_op, comm_bytes_by_op, exposed_comm_s_by_op;
  std::map<std::string, double> nccl_s_by_op, nccl_bytes_by_op, nccl_count_by_op;
};

// nullopt (with `error` set) for a malformed line.
std::optional<StepReport> parse_step_report(const std::string& line, std::string* error = nullptr);

// The reports of one datagram, in order: each line goes to `report` or, malformed, to
// `malformed` with the reason. Empty lines are skipped. Returns the number of lines parsed.
template <class OnReport, class OnMalformed>
size_t for_each_step_report(std::string_view datagram, OnReport&& report, OnMalformed&& malformed) {
  size_t lines = 0;
  while (!datagram.empty()) {
    const size_t end = datagram.find('\n');
    std::string_view line = datagram.substr(0, end);
    datagram = end == std::string_view::npos ? std::string_view() : datagram.substr(end + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ++lines;
    std::string error;
    if (auto r = parse_step_report(std::string(line), &error)) report(*r);
    else malformed(error);
  }
  return lines;
}

}  // namespace lockstep::agent
