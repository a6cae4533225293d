#include "straggler_watch.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/time_text.hpp"

using namespace prometheus;

namespace lockstep::agent {
namespace {

double hundredths(double x) { return std::round(x * 100) / 100; }

}  // namespace

StragglerWatch::StragglerWatch(const Config& cfg, Metrics& metrics, GangFigures& members,
                               std::chrono::milliseconds interval)
    : cfg_(cfg), metrics_(metrics), members_(members), detector_(cfg.straggler_settings()) {
  auto& reg = *metrics.registry();
  const auto base = metrics.base_labels();
  slowdown_ = &BuildGauge()
                   .Name("lockstep_straggler_slowdown")
                   .Help("Node 0's standing straggler verdicts: the rank's work over the gang's typical rank's, one "
                         "series per straggler (at most 8, the worst first; throttle: its GPU's clock-throttle reasons)")
                   .Register(reg);
  stragglers_ = &BuildGauge()
                     .Name("lockstep_stragglers")
                     .Help("Node 0's standing straggler verdicts (all of them, listed or not)")
                     .Register(reg)
                     .Add(base);
  suspects_ = &BuildGauge()
                   .Name("lockstep_straggler_suspects")
                   .Help("Straggler suspects at node 0's last evaluation (over the threshold and past the overlap test), verdict or not")
                   .Register(reg)
                   .Add(base);
  window_ = &BuildGauge()
                 .Name("lockstep_straggler_window_seconds")
                 .Help("The straggler window: each rank's figure is its work median over this long")
                 .Register(reg)
                 .Add(base);
  window_->Set(detector_.settings().window_s);
  if (interval.count() <= 0) return;
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, interval, [this] { return stop_; })) {
      lock.unlock();
      evaluate(steady_seconds());
      lock.lock();
    }
  });
}

StragglerWatch::~StragglerWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StragglerWatch::evaluate(double now_s) {
  // Copies, each under its own lock for as long as the copy takes: node 0's own ranks, then its
  // members' (as the gang numbers them).
  std::vector<straggler::RankFigure> all;
  const auto own = metrics_.figures(now_s);
  for (const auto& f : own)
    all.push_back({cfg_.node_rank * cfg_.nproc_per_node + f.local_rank, cfg_.node_rank, f.median_s, f.throttle, f.lower_s});
  for (auto& f : members_.fresh(now_s))
    if (f.node_rank != cfg_.node_rank) all.push_back(f);
  const auto reading = straggler::score(all);
  const auto reference = reading ? std::optional<double>(reading->reference_s) : std::nullopt;
  members_.set_reference(reference);  // for the members, on node 0's ALIVE
  metrics_.show_scores(reference, own);  // node 0's own ranks' scores, from this very reading
  for (const auto& change : detector_.update(now_s, reading)) announce(change);
  publish();
}

// The series: one per standing verdict (the worst kMaxListedStragglers), the count, the suspects.
void StragglerWatch::publish() {
  const auto& standing = detector_.stragglers();
  std::map<std::pair<int, unsigned>, Gauge*> listed;
  for (size_t i = 0; i < standing.size() && i < kMaxListedStragglers; ++i) {
    const auto& s = standing[i];
    const std::pair<int, unsigned> key{s.rank, s.throttle};
    auto it = listed_.find(key);
    Gauge* g = nullptr;
    if (it != listed_.end()) {
      g = it->second;
      listed_.erase(it);
    } else {
      auto labels = metrics_.base_labels();
      labels["node_rank"] = std::to_string(s.node_rank);
      labels["rank"] = std::to_string(s.rank);
      labels["throttle"] = straggler::throttle_tokens(s.throttle);
      g = &slowdown_->Add(labels);
    }
    g->Set(s.slowdown);
    listed[key] = g;
  }
  for (const auto& [key, g] : listed_) slowdown_->Remove(g);  // cleared, or no longer among the worst
  listed_ = std::move(listed);
  stragglers_->Set(static_cast<double>(standing.size()));
  suspects_->Set(static_cast<double>(detector_.suspects()));
}

// A verdict raised or cleared: node 0's log, and its event log (Note [Event log]).
void StragglerWatch::announce(const straggler::Detector::Change& change) {
  const auto& who = change.who;
  namespace report = lockstep::contract::report;
  nlohmann::json e = {{report::kNode, cfg_.node_rank},
                      {report::kAttempt, cfg_.restart_attempt},
                      {report::kTime, time_text::unix_seconds()},
                      {report::kEvent, change.raised ? report::kStraggler : report::kStragglerCleared},
                      {report::kRank, who.rank},
                      {report::kNodeRank, who.node_rank}};
  if (change.raised) {
    LOCKSTEP_LOG(Warn, "lockstep-agent", "straggler: " << straggler::describe(who, detector_.settings()));
    e[report::kSlowdown] = hundredths(who.slowdown);
    e[report::kWindowSeconds] = detector_.settings().window_s;
    e[report::kThrottle] = straggler::throttle_tokens(who.throttle);
  } else {
    LOCKSTEP_LOG(Info, "lockstep-agent", "straggler cleared: rank " << who.rank << " on node " << who.node_rank);
  }
  metrics_.log_event(e.dump());
}

}  // namespace lockstep::agent
