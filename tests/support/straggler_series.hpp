// A recorded run's step series for replaying through the straggler judge
// (common/include/lockstep/straggler.hpp): tests/common/data/straggler_*.csv, each line
// `arrival_ms,rank,step,step_us,exposed_comm_us` ('#' lines are comments). Shared by
// straggler_test and bench/straggler.
#pragma once

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/straggler.hpp"

namespace lockstep::test {

struct RecordedStep {
  double at_s = 0;
  int rank = -1;
  long long step = -1;
  double step_s = 0, exposed_s = 0;
};

inline std::vector<RecordedStep> load_recorded_steps(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<RecordedStep> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    long long at_ms = 0, step_us = 0, exposed_us = 0;
    RecordedStep s;
    char c1, c2, c3, c4;
    if (!(f >> at_ms >> c1 >> s.rank >> c2 >> s.step >> c3 >> step_us >> c4 >> exposed_us))
      throw std::runtime_error(path + ": bad line: " + line);
    s.at_s = at_ms / 1000.0;
    s.step_s = step_us / 1e6;
    s.exposed_s = exposed_us / 1e6;
    out.push_back(s);
  }
  return out;
}

// The samples the judge sees (one rank per node, as recorded), each rank's work multiplied by
// `factor(rank, at_s)`: a slowdown injected into a real series. A slowed rank's steps also
// take longer, so the gang's later steps arrive later: arrival times are stretched by the
// extra time the slowed rank spends, as a synchronous gang would.
template <class Factor>
std::vector<straggler::Sample> samples_of(const std::vector<RecordedStep>& steps, Factor factor) {
  std::vector<straggler::Sample> out;
  double shift = 0, extra = 0;  // the time the slowdown added before this step, and in it
  long long current = steps.empty() ? -1 : steps.front().step;
  for (const auto& s : steps) {
    if (s.step != current) {
      shift += extra;
      extra = 0;
      current = s.step;
    }
    const double work = s.step_s - s.exposed_s;
    if (work <= 0) continue;
    const double f = factor(s.rank, s.at_s + shift);
    extra = std::max(extra, work * (f - 1));
    out.push_back({s.rank, s.rank, s.at_s + shift, work * f});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.at_s < b.at_s; });
  return out;
}

// The recording repeated end to end until it lasts `seconds`, steps renumbered.
inline std::vector<RecordedStep> tiled(const std::vector<RecordedStep>& one, double seconds) {
  std::vector<RecordedStep> out;
  if (one.empty()) return out;
  const double span = one.back().at_s - one.front().at_s + 0.03;
  const long long steps = one.back().step;
  for (int copy = 0; out.empty() || out.back().at_s < seconds; ++copy)
    for (auto s : one) {
      s.at_s += copy * span;
      s.step += copy * steps;
      out.push_back(s);
    }
  return out;
}

inline std::string recorded_series_path() {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/common/data/straggler_healthy_2ranks.csv";
}

}  // namespace lockstep::test
