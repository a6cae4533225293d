// The progress thread (Note [Progress] in reconcile/progress.hpp): reads the running jobs' rank 0
// agents on each job's schedule (Note [Progress schedule]) and keeps the latest reading of each
// for the reconcile (read_agent). It sees the jobs and their pods only through the lookups it is
// given (the controller's caches), and queues a job whose reading changed through `queue`.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/agent_reader.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/progress.hpp"

namespace lockstep::controller {

class ProgressPoller {
 public:
  struct Sources {
    std::function<std::vector<std::shared_ptr<const reconcile::JobRecord>>()> jobs;  // every cached job
    // The cached pod `name` of namespace `ns`; null when the cache has none.
    std::function<std::shared_ptr<const reconcile::PodRecord>(const std::string& ns, const std::string& name)> pod;
    std::function<void(const std::string& key)> queue;  // reconcile job `key` (ns/name)
  };

  // `period`: --progress-period, the longest between two readings of a job; 0: never read.
  ProgressPoller(std::chrono::milliseconds period, Sources sources)
      : period_(period), sources_(std::move(sources)) {}
  ~ProgressPoller() { stop(); }

  void start();  // the progress thread, unless the period is 0
  void stop();   // ends the round in flight within kStopLatency and joins the thread
  // The latest reading of job `key`'s rank 0 agent, into in.progress, in.in_place, in.stragglers
  // and in.gang_joined.
  void read_agent(const std::string& key, reconcile::Observed& in);

 private:
  struct DueReading {  // a running job whose rank 0 is due a reading
    std::string key, pod_uid;
    int attempt, world, nodes, procs_per_node;
    // See Note [Host-network readings]: rank 0 has its node's address; only the job's series count.
    bool host_network = false;
    std::string ns, name;
  };
  struct JobProgress {
    JobProgress(std::string pod, reconcile::ReadingSchedule s, std::chrono::steady_clock::time_point at)
        : attempt_pod(std::move(pod)), schedule(s), due(at + s.interval()) {}
    // The pod uid the samples came from; another one starts afresh. "" while the job's rank 0
    // cannot be read (no IP yet): then `due` is when to look at it again.
    std::string attempt_pod;
    std::optional<reconcile::ProgressSample> last;
    std::optional<reconcile::Progress> progress;
    std::optional<reconcile::InPlaceReading> in_place;  // Note [In-place restarts]
    std::optional<reconcile::StragglerReading> stragglers;  // Note [Straggler condition]
    reconcile::ReadingSchedule schedule;                // Note [Progress schedule]
    // Rank 0's agent of this attempt has started its workers: the gang is together (Kueue's
    // PodsReady, Note [One Workload per job]); once seen, kept for the attempt's pod.
    bool workers_started = false;
    int attempt = -1;
    std::chrono::steady_clock::time_point due;          // the next reading
    unsigned long seen = 0;                             // the last scan that found the job running
  };

  void poll();  // the progress thread
  void find_due_readings(unsigned long scan, std::vector<DueReading>& due, std::vector<AgentTarget>& targets);
  void take_readings(const std::vector<DueReading>& due, const std::vector<AgentAnswer>& answers);

  const std::chrono::milliseconds period_;
  const Sources sources_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, JobProgress> progress_;  // by job key, under mu_
};

}  // namespace lockstep::controller
