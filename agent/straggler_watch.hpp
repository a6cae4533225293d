// Node 0's agent's straggler verdict (docs/metrics.md, "Stragglers"; Note [Straggler score] in
// common/include/lockstep/straggler.hpp): every kFiguresInterval, its own ranks' medians and the
// figures its members sent over the restart barrier (barrier/figures.hpp) are scored, the
// Detector's verdicts published as series, log lines and event-log lines. A thread of its own,
// so that neither the barrier's thread nor the supervisor's waits on it: it copies the figures
// out under their locks and computes outside them.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "barrier/figures.hpp"
#include "config.hpp"
#include "lockstep/straggler.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

class StragglerWatch {
 public:
  // Evaluates every `interval` on a thread of its own (0: only when evaluate() is called).
  StragglerWatch(const Config& cfg, Metrics& metrics, GangFigures& members,
                 std::chrono::milliseconds interval = kFiguresInterval);
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;
  // One evaluation at `now_s` (steady_seconds): the reference goes to `members` for node 0's
  // ALIVE; the verdicts to the series, the log and the event log.
  void evaluate(double now_s);
  const straggler::Detector& detector() const { return detector_; }

 private:
  void publish();
  void announce(const straggler::Detector::Change& change);

  Config cfg_;
  Metrics& metrics_;
  GangFigures& members_;
  straggler::Detector detector_;
  prometheus::Family<prometheus::Gauge>* slowdown_;
  prometheus::Gauge *stragglers_, *suspects_, *window_;
  std::map<std::pair<int, unsigned>, prometheus::Gauge*> listed_;  // (rank, throttle) -> its series
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lockstep::agent
