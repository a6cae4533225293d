// The agent's /metrics (docs/metrics.md, "The agent's /metrics"): training series fed by each worker's
// per-step datagrams (step_report.hpp) on its own Unix socket, agent series, and GPU series
// from NVML (nvml.hpp). Labels: trainingjob, namespace, node_rank, rank (and gpu).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "barrier/figures.hpp"
#include "config.hpp"
#include "lockstep/straggler.hpp"
#include "step_report.hpp"

namespace lockstep::agent {

struct RankProgress {
  int rank = 0;
  long long last_step = -1;                           // -1: no step yet
  std::chrono::steady_clock::time_point last_time{};  // when the last step arrived, else when the worker started
};

class Metrics {
 public:
  // Binds one datagram socket per local rank under `socket_dir`, and serves /metrics on
  // cfg.metrics_port unless it is 0; with cfg.step_log_dir, appends every valid report to
  // that directory's rank-N.jsonl (Note [Step log]). Throws std::runtime_error naming what failed.
  // Series: docs/metrics.md; lockstep_restart_attempt is cfg.restart_attempt,
  // the operator's gang restart this pod belongs to.
  Metrics(const Config& cfg, const std::string& socket_dir);
  ~Metrics();

  std::string socket_path(int local_rank) const;
  void set_worker_up(int local_rank, bool up);
  // An in-place restart of every worker (Note [Restart barrier]): lockstep_worker_restarts_total,
  // lockstep_restarts_total{kind="in_place"}, and the last one's time and cause; with
  // cfg.step_log_dir, also a line of this node's event log (Note [Event log]): `generation`
  // the worker group that starts now, `why` the barrier's verdict in words.
  void count_in_place_restart(const std::string& reason, int rank, int exit_code, int generation = 0,
                              const std::string& why = "");
  void count_stall();
  std::vector<RankProgress> progress() const;
  void reset_progress(int generation);  // worker group `generation` starts now, from nothing
  std::string endpoint() const { return endpoint_; }
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  prometheus::Labels base_labels() const { return base_; }

  // A step report's figures, and NCCL's (which may come in reports of their own, with no
  // step: those count no step and arm no stall watch). Exposed for tests.
  void record(int local_rank, const StepReport& r);
  // Collective names beyond this many (per agent) are dropped and counted as malformed: each
  // is a label value, and a broken sender must not grow the registry without end.
  static constexpr size_t kMaxOps = 32;

  // Straggler detection (Note [Straggler score]; docs/metrics.md, "Stragglers"). Each local
  // rank's work median over the window at `now_s` (steady_seconds), for the ranks that have one,
  // with their GPU's throttle bits.
  std::vector<LocalFigure> figures(double now_s);
  // The clock-throttle reasons of local rank `local_rank`'s GPU (straggler::Throttle bits), from NVML.
  void set_throttle(int local_rank, unsigned bits);
  // lockstep_straggler_score per local rank: its median / the gang's reference, for each rank in
  // `figures` while there is a reference; absent otherwise.
  void show_scores(std::optional<double> reference, const std::vector<LocalFigure>& figures);
  // One line of this node's event log (Note [Event log]), when --step-log keeps one.
  void log_event(const std::string& json_line);
  const straggler::Settings& straggler_settings() const { return straggler_; }

 private:
  struct Rank {
    prometheus::Labels labels;
    prometheus::Histogram* step_duration;
    prometheus::Counter *steps, *malformed;
    prometheus::Gauge *last_step_ts, *worker_up, *step;
    // Note [Measured series only] (metrics.cpp): null until a report carries the figure.
    prometheus::Counter *compute = nullptr, *exposed = nullptr, *tokens = nullptr, *flops = nullptr;
    prometheus::Gauge *loss = nullptr, *total_steps = nullptr;
    RankProgress progress;
    straggler::RankWindow window;  // under mu_: its work figures (Note [Straggler score])
    unsigned throttle = 0;         // under mu_: its GPU's clock-throttle bits
    prometheus::Gauge* score = nullptr;  // lockstep_straggler_score, while it has one
    int fd = -1;
    std::ofstream step_log;  // open when cfg.step_log_dir is set
  };
  struct RankFamilies;
  void register_measured_families();
  void register_job_series();
  void add_rank(int local_rank, RankFamilies& families);
  void log_step(Rank& r, const StepReport& s);
  std::ofstream event_log_;  // DIR/node-N.events.jsonl, open when cfg.step_log_dir is set
  std::mutex event_mu_;      // the supervisor and node 0's straggler watch both write it
  void receive_loop();

  Config cfg_;
  std::string dir_, endpoint_;
  prometheus::Labels base_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>*compute_family_, *exposed_family_, *tokens_family_, *flops_family_;
  prometheus::Family<prometheus::Gauge>*loss_family_, *total_steps_family_;
  prometheus::Family<prometheus::Counter>* comm_seconds_;
  prometheus::Family<prometheus::Counter>* comm_bytes_;
  prometheus::Family<prometheus::Counter>* comm_exposed_by_op_;
  // See Note [NCCL profiler plugin]: NCCL's own timing of every operation, by op.
  prometheus::Family<prometheus::Counter>*nccl_seconds_, *nccl_bytes_, *nccl_ops_;
  prometheus::Counter* restarts_;
  prometheus::Counter* in_place_;
  prometheus::Family<prometheus::Gauge>* last_restart_ts_family_;
  prometheus::Gauge* last_restart_ts_ = nullptr;
  prometheus::Family<prometheus::Gauge>* last_restart_info_;
  prometheus::Gauge* last_restart_cause_ = nullptr;
  prometheus::Counter* stalls_;
  straggler::Settings straggler_;
  prometheus::Family<prometheus::Gauge>* score_family_;
  std::set<std::string> ops_;  // collective names seen, bounded by kMaxOps
  std::vector<Rank> ranks_;
  std::atomic<int> generation_{0};  // the worker group now running (in-place restarts)
  mutable std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread receiver_;
};

}  // namespace lockstep::agent
