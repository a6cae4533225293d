// What the tests of decide() and its steps observe (operator/reconcile/decide.hpp): a fixed now,
// a pod of a gang, and a job's observed state (tests/operator/reconcile/decide_test.cpp,
// kueue_test.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "reconcile/decide.hpp"

namespace lockstep::test {

inline const reconcile::Time kNow = reconcile::Clock::from_time_t(1'800'000'000);

inline reconcile::PodView pod(int index, const std::string& phase, int attempt = 0, int exit_code = -1) {
  reconcile::PodView p;
  p.name = "tj-" + std::to_string(index);
  p.uid = "uid-" + std::to_string(index) + "-" + std::to_string(attempt);
  p.index = index;
  p.attempt = attempt;
  p.phase = phase;
  p.ready = phase == "Running";
  p.exit_code = exit_code;
  return p;
}

// The job `j` with its pods, its Service and PodGroup there, at kNow.
inline reconcile::Observed observed(reconcile::JobView j, std::vector<reconcile::PodView> pods = {}) {
  reconcile::Observed o;
  o.job = std::move(j);
  o.pods = std::move(pods);
  o.service_exists = true;
  o.podgroup_exists = true;
  o.now = kNow;
  return o;
}

}  // namespace lockstep::test
