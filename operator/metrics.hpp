// The operator's Prometheus metrics (DESIGN.md, "Operator /metrics"). Base units, _total on
// counters.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

namespace lockstep::op {

struct Metrics {
  Metrics();
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Histogram& reconcile_duration;                 // lockstep_operator_reconcile_duration_seconds
  prometheus::Counter& reconcile_errors;                     // lockstep_operator_reconcile_errors_total
  prometheus::Gauge& queue_depth;                            // lockstep_operator_workqueue_depth
  prometheus::Family<prometheus::Counter>& api_requests;     // lockstep_operator_api_requests_total{verb,code}
  prometheus::Family<prometheus::Gauge>& jobs_by_phase;      // lockstep_operator_trainingjobs{phase}
  prometheus::Counter& pods_created;                         // lockstep_operator_pods_created_total
  prometheus::Counter& gang_restarts;                        // lockstep_operator_gang_restarts_total
  prometheus::Gauge& leader;                                 // lockstep_operator_leader

  void observe_request(const std::string& verb, int code);
  void set_phase_counts(const std::map<std::string, int>& counts);
  std::string render() const;  // Prometheus text format
};

}  // namespace lockstep::op
