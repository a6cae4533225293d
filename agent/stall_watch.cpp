#include "stall_watch.hpp"

#include <chrono>

#include "lockstep/log.hpp"

namespace lockstep::agent {

std::string check_stall(const Config& cfg, Metrics* metrics, const std::vector<Worker>& workers) {
  if (!metrics || !cfg.stall_detection()) return "";
  auto now = std::chrono::steady_clock::now();
  std::string quiet, never;
  auto progress = metrics->progress();
  for (size_t i = 0; i < progress.size() && i < workers.size(); ++i) {
    const auto& p = progress[i];
    if (workers[i].exited) continue;  // finished ranks report no more steps, rightly
    if (p.last_step >= 0 && now - p.last_time > cfg.stall_timeout)
      quiet += (quiet.empty() ? "" : ", ") + std::to_string(p.rank) + " (last step " + std::to_string(p.last_step) + ")";
    else if (p.last_step < 0 && cfg.first_step_detection() && now - p.last_time > cfg.first_step_timeout)
      never += (never.empty() ? "" : ", ") + std::to_string(p.rank);
  }
  if (!quiet.empty())
    LOCKSTEP_LOG(Error, "agent", "stall: no step for " << cfg.stall_timeout.count() / 1000.0 << " s from rank(s) " << quiet
                                 << "; a hung collective or a dead peer (--stall-timeout)");
  if (!never.empty())
    LOCKSTEP_LOG(Error, "agent", "stall: no first step within " << cfg.first_step_timeout.count() / 1000.0
                                 << " s of the start from rank(s) " << never
                                 << "; a hang in rendezvous or the first collective (--first-step-timeout, "
                                    "LOCKSTEP_FIRST_STEP_TIMEOUT; 0 for a program that reports no steps)");
  if (quiet.empty()) return never.empty() ? "" : never + " (no first step)";
  return never.empty() ? quiet : quiet + ", " + never + " (no first step)";
}

}  // namespace lockstep::agent
