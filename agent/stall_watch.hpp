// The stall watch (docs/agent.md, "Supervision"): a rank with no step for --stall-timeout, or
// no first step within --first-step-timeout of its start, from the step reports in Metrics.
#pragma once

#include <string>
#include <vector>

#include "config.hpp"
#include "metrics.hpp"
#include "worker_group.hpp"

namespace lockstep::agent {

// The stuck ranks, logged, as "3 (last step 120), 5 (no first step)"; "" when none is stuck
// (or without metrics, or with stall detection off). Ranks that exited are not judged.
std::string check_stall(const Config& cfg, Metrics* metrics, const std::vector<Worker>& workers);

}  // namespace lockstep::agent
