// The operator's Prometheus metrics (docs/operator.md, "Endpoints"). Base units, _total on
// counters.
//
// Note [Restarts by kind]
// lockstep_restarts_total counts a job's restarts by kind: the agents serve kind="in_place"
// (each pod's own, so it starts from 0 in every gang attempt; Note [In-place restarts]), the
// operator kind="gang", one series per job labelled namespace and trainingjob as the agents'
// are. The operator's follows status.restarts of the jobs in its cache, brought up to date
// whenever the page is made (at most once a second, Note [Metrics page]): created when a job is first seen, at its count so far (0 for a new job;
// after an operator restart or a leader change, where the last leader's series left off,
// so neither a reset nor a jump shows), raised with each gang restart, removed with the
// job. A job recreated under the same name (another uid) starts a new series at its own
// count. Only the leader serves them: a standby has no jobs in its cache.
//
// Note [Metrics page]
// Any pod can reach the operator's :8080 unless its NetworkPolicy is on (the chart's default,
// docs/security.md), and a page of /metrics holds a series per TrainingJob, so it must cost the
// same however many peers ask (#40: 3,000 jobs and 256 looping readers took the operator from
// 13.5 to 188.8 MiB, past the chart's limit, when each request rendered its own copy). So:
//   - the page is rendered at most once per `max_age` (1 s): the job series are brought up to
//     date (Controller::refresh_metrics, O(jobs)) and the text made once, and every reader in
//     that second is answered from that one text, shared, never copied; readers that come
//     while it is being made wait for it rather than make their own;
//   - at most `max_readers` (8) answers of it are under way at once, each holding its slot
//     until its last byte is written or given up (a peer that does not read holds it for at
//     most the listener's idle timeout, Note [Listener limits]); one more gets 503 at once.
//     A listener loop waits only while the page is made (once a second at most), so /healthz
//     and /readyz, which cost nothing, are answered meanwhile by the other loops; Prometheus,
//     which scrapes every 15 to 60 s, retries on the next scrape when it meets a 503 during
//     an attack.
// The memory /metrics may hold is then two texts (the one being read, the one being made),
// whatever the number of peers.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <functional>
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

// See Note [Metrics page]: the /metrics text, made at most once per `max_age` and shared by its
// readers, at most `max_readers` of them at once.
class MetricsPage {
 public:
  MetricsPage(std::function<std::string()> render, std::chrono::milliseconds max_age = std::chrono::seconds(1),
              int max_readers = 8);
  struct Answer {
    std::shared_ptr<const std::string> text;  // null: too many readers already (answer 503)
    std::shared_ptr<void> slot;               // the reader's slot: held until the text is written
  };
  Answer read();
  int readers() const { return readers_.load(); }
  long long renders() const { return renders_.load(); }  // texts made so far

 private:
  std::function<std::string()> render_;
  std::chrono::milliseconds max_age_;
  int max_readers_;
  std::atomic<int> readers_{0};
  std::atomic<long long> renders_{0};
  std::mutex mu_;  // one render at a time; readers meanwhile wait for it
  std::shared_ptr<const std::string> text_;
  std::chrono::steady_clock::time_point made_;
};

}  // namespace lockstep::op
