// The operator's Prometheus metrics (docs/operator.md, "Endpoints"). Base units, _total on
// counters.
//
// Note [Restarts by kind]
// lockstep_restarts_total counts a job's restarts by kind: the agents serve kind="in_place"
// (each pod's own, so it starts from 0 in every gang attempt; Note [In-place restarts]), the
// operator kind="gang", one series per job labelled namespace and trainingjob as the agents'
// are. The operator's follows status.restarts of the jobs in its cache, brought up to date
// on every scrape: created when a job is first seen, at its count so far (0 for a new job;
// after an operator restart or a leader change, where the last leader's series left off,
// so neither a reset nor a jump shows), raised with each gang restart, removed with the
// job. A job recreated under the same name (another uid) starts a new series at its own
// count. Only the leader serves them: a standby has no jobs in its cache.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::op {

struct Metrics {
  Metrics();
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Histogram& reconcile_duration;                 // lockstep_operator_reconcile_duration_seconds
  prometheus::Counter& reconcile_errors;                     // lockstep_operator_reconcile_errors_total
  prometheus::Gauge& queue_depth;                            // lockstep_operator_workqueue_depth
  prometheus::Gauge& queue_depth_max;                        // lockstep_operator_workqueue_depth_max
  prometheus::Family<prometheus::Counter>& api_requests;     // lockstep_operator_api_requests_total{verb,code}
  prometheus::Family<prometheus::Gauge>& jobs_by_phase;      // lockstep_operator_trainingjobs{phase}
  prometheus::Counter& pods_created;                         // lockstep_operator_pods_created_total
  prometheus::Counter& gang_restarts;                        // lockstep_operator_gang_restarts_total
  prometheus::Gauge& leader;                                 // lockstep_operator_leader
  prometheus::Gauge& node_watch;                             // lockstep_operator_node_watch
  // lockstep_restarts_total{kind="gang",namespace,trainingjob}: Note [Restarts by kind]
  prometheus::Family<prometheus::Counter>& restarts;

  void observe_request(const std::string& verb, int code);
  void set_phase_counts(const std::map<std::string, int>& counts);

  struct JobRestarts {
    std::string ns, name, uid;
    int gang = 0;  // status.restarts
  };
  // Every job the operator knows, with its gang restarts; the series of jobs not listed are
  // removed.
  void set_job_restarts(const std::vector<JobRestarts>& jobs);

  std::string render() const;  // Prometheus text format

 private:
  struct JobSeries {
    std::string uid;
    prometheus::Counter* counter;
  };
  std::mutex job_series_mu_;
  std::map<std::string, JobSeries> job_series_;  // by namespace/name
};

}  // namespace lockstep::op
