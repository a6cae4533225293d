#include "metrics.hpp"

#include <prometheus/text_serializer.h>

namespace lockstep::op {

using namespace prometheus;

Metrics::Metrics()
    : registry(std::make_shared<Registry>()),
      reconcile_duration(BuildHistogram()
                             .Name("lockstep_operator_reconcile_duration_seconds")
                             .Help("Time to reconcile one TrainingJob")
                             .Register(*registry)
                             .Add({}, Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                  0.5, 1, 2.5, 5, 10})),
      reconcile_errors(BuildCounter()
                           .Name("lockstep_operator_reconcile_errors_total")
                           .Help("Reconciles that failed and were retried")
                           .Register(*registry)
                           .Add({})),
      queue_depth(BuildGauge()
                      .Name("lockstep_operator_workqueue_depth")
                      .Help("TrainingJobs waiting to be reconciled")
                      .Register(*registry)
                      .Add({})),
      queue_depth_max(BuildGauge()
                          .Name("lockstep_operator_workqueue_depth_max")
                          .Help("The most TrainingJobs that waited to be reconciled at once since the operator started")
                          .Register(*registry)
                          .Add({})),
      api_requests(BuildCounter()
                       .Name("lockstep_operator_api_requests_total")
                       .Help("Kubernetes API requests by HTTP verb and status code (0: no answer)")
                       .Register(*registry)),
      jobs_by_phase(BuildGauge()
                        .Name("lockstep_operator_trainingjobs")
                        .Help("TrainingJobs by status.phase")
                        .Register(*registry)),
      pods_created(BuildCounter()
                       .Name("lockstep_operator_pods_created_total")
                       .Help("Pods created")
                       .Register(*registry)
                       .Add({})),
      gang_restarts(BuildCounter()
                        .Name("lockstep_operator_gang_restarts_total")
                        .Help("Gang restarts started")
                        .Register(*registry)
                        .Add({})),
      leader(BuildGauge()
                 .Name("lockstep_operator_leader")
                 .Help("1 while this replica holds the leader lease")
                 .Register(*registry)
                 .Add({})),
      node_watch(BuildGauge()
                     .Name("lockstep_operator_node_watch")
                     .Help("1 while the operator watches nodes and restarts a gang that lost one at once; 0 when "
                           "--node-watch=false or its RBAC does not let it list and watch nodes")
                     .Register(*registry)
                     .Add({})),
      restarts(BuildCounter()
                   .Name("lockstep_restarts_total")
                   .Help("Restarts of a TrainingJob by kind; the operator counts the gang restarts (pods recreated), "
                         "the agents the in-place ones")
                   .Register(*registry)) {}

void Metrics::observe_request(const std::string& verb, int code) {
  api_requests.Add({{"verb", verb}, {"code", std::to_string(code)}}).Increment();
}

void Metrics::set_phase_counts(const std::map<std::string, int>& counts) {
  for (const char* phase : {"Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"}) {
    auto it = counts.find(phase);
    jobs_by_phase.Add({{"phase", phase}}).Set(it == counts.end() ? 0 : it->second);
  }
}

void Metrics::set_job_restarts(const std::vector<JobRestarts>& jobs) {
  std::lock_guard<std::mutex> lock(job_series_mu_);
  std::map<std::string, JobSeries> now;
  for (const auto& j : jobs) {
    std::string key = j.ns + "/" + j.name;
    auto it = job_series_.find(key);
    if (it != job_series_.end() && it->second.uid != j.uid) {  // another job of the same name
      restarts.Remove(it->second.counter);
      job_series_.erase(it);
      it = job_series_.end();
    }
    Counter* c = it != job_series_.end()
                     ? it->second.counter
                     : &restarts.Add({{"kind", "gang"}, {"namespace", j.ns}, {"trainingjob", j.name}});
    if (j.gang > c->Value()) c->Increment(j.gang - c->Value());  // a counter: it never goes down
    now[key] = {j.uid, c};
    if (it != job_series_.end()) job_series_.erase(it);
  }
  for (auto& [key, series] : job_series_) restarts.Remove(series.counter);  // jobs gone
  job_series_ = std::move(now);
}

std::string Metrics::render() const { return TextSerializer().Serialize(registry->Collect()); }

MetricsPage::MetricsPage(std::function<std::string()> render, std::chrono::milliseconds max_age, int max_readers)
    : render_(std::move(render)), max_age_(max_age), max_readers_(max_readers) {}

MetricsPage::Answer MetricsPage::read() {
  if (readers_.fetch_add(1) >= max_readers_) {
    readers_.fetch_sub(1);
    return {};
  }
  // The slot goes back when the last copy of the answer's `slot` goes (after the write).
  Answer a;
  a.slot = std::shared_ptr<void>(nullptr, [this](void*) { readers_.fetch_sub(1); });
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!text_ || now - made_ >= max_age_) {
    text_.reset();  // its readers keep it while they write; the new one is made without it
    text_ = std::make_shared<const std::string>(render_());
    made_ = std::chrono::steady_clock::now();
    ++renders_;
  }
  a.text = text_;
  return a;
}

}  // namespace lockstep::op
