#include "controller/progress_poller.hpp"

#include <algorithm>

#include "lockstep/log.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/manifests.hpp"
#include "reconcile/prometheus_text.hpp"
#include "reconcile/stragglers.hpp"

using lockstep::reconcile::JobView;
using lockstep::reconcile::PodView;

namespace lockstep::controller {

void ProgressPoller::start() {
  if (period_.count() > 0) thread_ = std::thread([this] { poll(); });
}

void ProgressPoller::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

// Note [Progress], Note [Progress schedule]: a scan every second (or every period, when
// shorter) finds the running jobs whose rank 0 is due a reading; they are read together
// (Note [Reading agents]). A reading is kept with the one before it, and the job is queued
// only when it changed what the reconcile reads; the reconcile writes the status only when
// what `kubectl get tj` shows changed. The same text carries the agents' in-place restarts
// (Note [In-place restarts]) and node 0's straggler verdict (Note [Straggler condition]), kept
// for the reconcile; a reading with a suspect or a straggler brings the next within
// kStragglerReading.
//   A scan costs a map lookup per running job (0.5 ms for 1,250), and a pod lookup for each one
// due; a reading, one HTTP GET and the parse of its page (0.2 ms of CPU for an agent of 8
// ranks, docs/operator.md).
void ProgressPoller::poll() {
  const auto tick = std::min<std::chrono::milliseconds>(period_, std::chrono::seconds(1));
  std::vector<DueReading> due;
  std::vector<AgentTarget> targets;
  unsigned long scan = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, tick, [this] { return stopping_.load(); });
    if (stopping_) break;
    lock.unlock();
    due.clear();
    targets.clear();
    find_due_readings(++scan, due, targets);
    auto answers = read_agents(targets, AgentLimits{}, &stopping_);
    take_readings(due, answers);
    lock.lock();
  }
}

// Scan `scan`: the running jobs whose rank 0 is due a reading, and where to read it; and the
// schedule of those that cannot be read yet, or whose attempt's pod is new.
void ProgressPoller::find_due_readings(unsigned long scan, std::vector<DueReading>& due, std::vector<AgentTarget>& targets) {
  auto jobs = sources_.jobs();
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& obj : jobs) {
    const JobView& job = obj->view;
    if (job.status.phase != "Running") continue;
    std::string key = job.ns + "/" + job.name;
    auto it = progress_.find(key);
    if (it != progress_.end()) {
      it->second.seen = scan;
      if (now < it->second.due) continue;
    }
    auto pod = sources_.pod(job.ns, reconcile::pod_name(job, 0));
    // Only the job's own rank 0 of its current attempt speaks for it.
    bool readable = pod && pod->controller_uid == job.uid && !pod->view.ip.empty() &&
                    pod->view.phase == "Running" && pod->view.attempt == job.status.restarts;
    if (!readable) {
      // Looked at again on the job's schedule, so a pod that never gets an IP (KWOK's) costs a
      // pod lookup per period, not one per scan.
      if (it == progress_.end())
        it = progress_.emplace(key, JobProgress("", reconcile::ReadingSchedule(reconcile::kFirstReading,
                                                                               period_),
                                                now)).first;
      else
        it->second.due = now + it->second.schedule.after(reconcile::ReadingSchedule::Found::Nothing);
      it->second.seen = scan;
      continue;
    }
    const PodView& view = pod->view;
    if (it == progress_.end() || it->second.attempt_pod != view.uid) {
      // Newly running, or a new attempt's pod: afresh, its first reading soon.
      it = progress_.insert_or_assign(key, JobProgress(view.uid, reconcile::ReadingSchedule(reconcile::kFirstReading,
                                                                                            period_),
                                                       now)).first;
      it->second.seen = scan;
      continue;
    }
    due.push_back({key, view.uid, view.attempt, job.nodes * job.procs_per_node, job.nodes, job.procs_per_node,
                   view.host_network, job.ns, job.name});
    targets.push_back({view.ip, job.metrics_port});
  }
  for (auto it = progress_.begin(); it != progress_.end();)  // jobs no longer running
    it = it->second.seen == scan ? std::next(it) : progress_.erase(it);
}

// The answers of the agents read, kept beside the reading before; a job is queued only when its
// reading changed what the reconcile reads.
void ProgressPoller::take_readings(const std::vector<DueReading>& due, const std::vector<AgentAnswer>& answers) {
  const auto now = std::chrono::steady_clock::now();
  const auto at = reconcile::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < due.size(); ++i) {
    const DueReading& d = due[i];
    // See Note [Host-network readings]: of such a rank 0 only the job's own series are read; any
    // other answer is read where it lies.
    std::optional<std::string> own_series;
    if (answers[i].body && d.host_network) own_series = reconcile::series_of_job(*answers[i].body, d.ns, d.name);
    const std::optional<std::string>& body = d.host_network ? own_series : answers[i].body;
    if (!body) LOCKSTEP_LOG(Debug, "progress", d.key << ": no reading of rank 0's agent: " << answers[i].error);
    auto sample = body ? reconcile::parse_progress(*body, 0, at) : std::nullopt;
    auto in_place = body ? reconcile::parse_in_place(*body, d.attempt) : std::nullopt;
    auto it = progress_.find(d.key);
    if (it == progress_.end() || it->second.attempt_pod != d.pod_uid) continue;  // gone meanwhile
    JobProgress& jp = it->second;
    bool changed = false;
    auto found = reconcile::ReadingSchedule::Found::Nothing;
    if (sample) {
      if (jp.last && sample->step < jp.last->step) jp.last.reset();  // it went back to a checkpoint
      bool rate = jp.last && sample->step > jp.last->step && sample->at > jp.last->at;
      found = rate ? reconcile::ReadingSchedule::Found::Rate : reconcile::ReadingSchedule::Found::Step;
      auto p = reconcile::progress_between(jp.last, *sample, d.world);
      changed |= !(jp.progress == p);
      jp.progress = p;
      jp.last = sample;
    }
    if (in_place && !(jp.in_place == in_place)) {
      jp.in_place = in_place;
      changed = true;
    }
    // A reading that did not come changes nothing (Note [Straggler condition]).
    auto stragglers = body ? std::optional(reconcile::parse_stragglers(*body, d.nodes, d.procs_per_node, d.attempt))
                           : std::nullopt;
    if (stragglers && !(jp.stragglers == stragglers)) {
      jp.stragglers = std::move(stragglers);
      changed = true;
    }
    if (body && !jp.workers_started && reconcile::parse_workers_started(*body, d.attempt)) {
      jp.workers_started = true;
      jp.attempt = d.attempt;
      changed = true;
    }
    auto next = jp.schedule.after(found);
    if (jp.stragglers && jp.stragglers->active()) next = std::min(next, reconcile::kStragglerReading);
    jp.due = now + next;
    if (changed) sources_.queue(d.key);
  }
}

void ProgressPoller::read_agent(const std::string& key, reconcile::Observed& in) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = progress_.find(key);
  if (it == progress_.end()) return;
  in.progress = it->second.progress;
  in.in_place = it->second.in_place;
  in.stragglers = it->second.stragglers;
  in.gang_joined = it->second.workers_started && it->second.attempt == in.job.status.restarts;
}

}  // namespace lockstep::controller
