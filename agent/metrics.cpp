#include "metrics.hpp"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "lockstep/contract.hpp"
#include "lockstep/listener_limits.hpp"
#include "lockstep/log.hpp"
#include "lockstep/time_text.hpp"

using namespace prometheus;

namespace lockstep::agent {
namespace {

int bind_datagram_socket(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path)
    throw std::runtime_error("metrics socket path too long (" + path + "); use a shorter TMPDIR");
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot bind metrics socket " + path + ": " + std::strerror(err));
  }
  return fd;
}

}  // namespace

// The per-rank families every rank has a series of from the start.
struct Metrics::RankFamilies {
  Family<Histogram>& step_duration;
  Family<Counter>&steps, &malformed;
  Family<Gauge>&step, &last_step_ts, &worker_up;
};

Metrics::Metrics(const Config& cfg, const std::string& socket_dir)
    : cfg_(cfg), dir_(socket_dir), registry_(std::make_shared<Registry>()), straggler_(cfg.straggler_settings()) {
  base_ = {{"trainingjob", cfg.job_name.empty() ? "local" : cfg.job_name},
           {"namespace", cfg.job_namespace.empty() ? "default" : cfg.job_namespace},
           {"node_rank", std::to_string(cfg.node_rank)}};
  RankFamilies families{
      BuildHistogram().Name("lockstep_step_duration_seconds").Help("Training step time").Register(*registry_),
      BuildCounter().Name("lockstep_steps_total").Help("Training steps completed").Register(*registry_),
      BuildCounter()
          .Name("lockstep_metrics_malformed_total")
          .Help("Step reports that could not be parsed (ignored)")
          .Register(*registry_),
      BuildGauge().Name("lockstep_step").Help("Step number of the last step report").Register(*registry_),
      BuildGauge().Name("lockstep_last_step_timestamp_seconds").Help("Unix time of the last step report").Register(*registry_),
      BuildGauge().Name("lockstep_worker_up").Help("1 while the worker process runs").Register(*registry_)};
  register_measured_families();
  register_job_series();
  ranks_.resize(cfg.nproc_per_node);
  for (int i = 0; i < cfg.nproc_per_node; ++i) add_rank(i, families);
  if (!cfg.step_log_dir.empty()) {
    const std::string path = cfg.step_log_dir + "/node-" + std::to_string(cfg.node_rank) + ".events.jsonl";
    event_log_.open(path, std::ios::app);
    if (!event_log_) throw std::runtime_error("cannot append to the event log " + path + " (--step-log)");
  }
  if (cfg.metrics_port > 0) {
    endpoint_ = cfg.metrics_address + ":" + std::to_string(cfg.metrics_port);
    try {
      // See Note [Listener limits]: a few slow peers must not blind Prometheus and the operator.
      exposer_ = std::make_unique<Exposer>(civetweb_options(endpoint_, kAgentListener));
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot serve /metrics on " + endpoint_ + " (LOCKSTEP_METRICS_PORT or --metrics-port): " +
                               e.what());
    }
    exposer_->RegisterCollectable(registry_);
  }
  receiver_ = std::thread([this] { receive_loop(); });
}

// Note [Measured series only]: compute, exposed communication, tokens, FLOPs, loss and the
// planned total exist for a rank only once a report of it carries them, so a program that
// does not measure one (a Python script without DDP, one that never reports its loss) has no
// such series, never a zero that reads as a measurement. Likewise the per-op communication
// series, for the ops a report names.
void Metrics::register_measured_families() {
  compute_family_ = &BuildCounter().Name("lockstep_compute_seconds_total").Help("Seconds of computation").Register(*registry_);
  exposed_family_ = &BuildCounter()
                         .Name("lockstep_comm_exposed_seconds_total")
                         .Help("Communication seconds not hidden behind computation")
                         .Register(*registry_);
  tokens_family_ = &BuildCounter().Name("lockstep_tokens_total").Help("Tokens processed").Register(*registry_);
  flops_family_ = &BuildCounter().Name("lockstep_flops_total").Help("Floating-point operations done").Register(*registry_);
  loss_family_ = &BuildGauge().Name("lockstep_loss").Help("Training loss of the last step").Register(*registry_);
  total_steps_family_ = &BuildGauge()
                             .Name("lockstep_total_steps")
                             .Help("Steps the run plans in all (total_steps of the step report)")
                             .Register(*registry_);
  comm_seconds_ = &BuildCounter()
                       .Name("lockstep_comm_seconds_total")
                       .Help("Seconds in collective communication, by op")
                       .Register(*registry_);
  comm_bytes_ = &BuildCounter()
                     .Name("lockstep_comm_bytes_total")
                     .Help("Bytes moved by collective communication, by op")
                     .Register(*registry_);
  comm_exposed_by_op_ = &BuildCounter()
                            .Name("lockstep_comm_op_exposed_seconds_total")
                            .Help("Communication seconds not hidden behind computation, by op")
                            .Register(*registry_);
  nccl_seconds_ = &BuildCounter()
                       .Name("lockstep_nccl_seconds_total")
                       .Help("GPU seconds of NCCL operations (each from its first channel's start to its last "
                             "channel's end, NCCL's own timers), by op")
                       .Register(*registry_);
  nccl_bytes_ = &BuildCounter()
                     .Name("lockstep_nccl_bytes_total")
                     .Help("Bytes of NCCL operations (element count x type size), by op")
                     .Register(*registry_);
  nccl_ops_ = &BuildCounter().Name("lockstep_nccl_operations_total").Help("NCCL operations completed, by op").Register(*registry_);
}

// The agent's own series: restarts, stalls, the gang attempt.
void Metrics::register_job_series() {
  restarts_ = &BuildCounter()
                   .Name("lockstep_worker_restarts_total")
                   .Help("Restarts of this agent's workers, in place (the whole job's, through the restart barrier)")
                   .Register(*registry_)
                   .Add(base_);
  auto kind = base_;
  kind["kind"] = "in_place";
  in_place_ = &BuildCounter()
                   .Name("lockstep_restarts_total")
                   .Help("Restarts of the job by kind: in_place from the agents (this gang attempt), gang from the operator")
                   .Register(*registry_)
                   .Add(kind);
  last_restart_ts_family_ = &BuildGauge()
                                 .Name("lockstep_last_restart_timestamp_seconds")
                                 .Help("Unix time of the last in-place restart (absent until the first)")
                                 .Register(*registry_);
  last_restart_info_ = &BuildGauge()
                            .Name("lockstep_last_restart_info")
                            .Help("The last in-place restart's cause: reason, rank and exit code as labels (value 1)")
                            .Register(*registry_);
  score_family_ = &BuildGauge()
                       .Name("lockstep_straggler_score")
                       .Help("The rank's work median over the straggler window / the gang's typical rank's (1: "
                             "typical; 1.42: 42% slower); absent until both exist")
                       .Register(*registry_);
  stalls_ = &BuildCounter()
                 .Name("lockstep_stalls_total")
                 .Help("Stalls detected: no step reported within the stall timeout")
                 .Register(*registry_)
                 .Add(base_);
  BuildGauge()
      .Name("lockstep_restart_attempt")
      .Help("The operator's gang restart attempt this pod belongs to (LOCKSTEP_RESTART_ATTEMPT; 0: the first run)")
      .Register(*registry_)
      .Add(base_)
      .Set(cfg_.restart_attempt);
}

// Local rank i: its series, its report socket, its step log.
void Metrics::add_rank(int i, RankFamilies& families) {
  static const Histogram::BucketBoundaries buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  Rank& r = ranks_[i];
  r.labels = base_;
  r.labels["rank"] = std::to_string(cfg_.node_rank * cfg_.nproc_per_node + i);
  r.progress.rank = cfg_.node_rank * cfg_.nproc_per_node + i;
  r.step_duration = &families.step_duration.Add(r.labels, buckets);
  r.steps = &families.steps.Add(r.labels);
  r.malformed = &families.malformed.Add(r.labels);
  r.step = &families.step.Add(r.labels);
  r.last_step_ts = &families.last_step_ts.Add(r.labels);
  r.worker_up = &families.worker_up.Add(r.labels);
  r.fd = bind_datagram_socket(socket_path(i));
  if (!cfg_.step_log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg_.step_log_dir, ec);
    const std::string path = cfg_.step_log_dir + "/rank-" + std::to_string(r.progress.rank) + ".jsonl";
    r.step_log.open(path, std::ios::app);
    if (!r.step_log) throw std::runtime_error("cannot append to the step log " + path + " (--step-log)");
  }
}

Metrics::~Metrics() {
  stop_ = true;
  if (receiver_.joinable()) receiver_.join();
  for (auto& r : ranks_) {
    if (r.fd >= 0) ::close(r.fd);
    ::unlink(socket_path(static_cast<int>(&r - ranks_.data())).c_str());
  }
}

std::string Metrics::socket_path(int local_rank) const { return dir_ + "/rank-" + std::to_string(local_rank) + ".sock"; }

void Metrics::set_worker_up(int local_rank, bool up) { ranks_[local_rank].worker_up->Set(up ? 1 : 0); }
// Note [Event log]
// `--step-log DIR` also keeps what this node's agent did that a step report cannot say, one JSON
// object a line in DIR/node-N.events.jsonl (N the node rank), flushed at once. An in-place
// restart, and on node 0 each straggler verdict and its clearing (straggler_watch.cpp; their
// lines: docs/metrics.md, "Stragglers"):
//   {"node":0,"attempt":0,"time":1764000000.123,"event":"in_place_restart","generation":1,
//    "reason":"WorkerFailed","rank":3,"exit_code":1,"why":"rank 3 exited with code 1"}
// `lockstep run` follows node 0's to say and count in-place restarts, rather than reading the
// agent's log sentences, whose wording may change (docs/metrics.md, "The step log").
void Metrics::count_in_place_restart(const std::string& reason, int rank, int exit_code, int generation,
                                     const std::string& why) {
  const double now = time_text::unix_seconds();
  {
    namespace report = lockstep::contract::report;
    nlohmann::json e = {{report::kNode, cfg_.node_rank},
                        {report::kAttempt, cfg_.restart_attempt},
                        {report::kTime, now},
                        {report::kEvent, report::kInPlaceRestart},
                        {report::kGeneration, generation},
                        {report::kReason, reason},
                        {report::kRank, rank},
                        {report::kExitCode, exit_code},
                        {report::kWhy, why}};
    // A peer's words reach `why`: bytes that are not UTF-8 are replaced, never thrown on.
    log_event(e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  restarts_->Increment();
  in_place_->Increment();
  if (!last_restart_ts_) {
    auto kind = base_;
    kind["kind"] = "in_place";
    last_restart_ts_ = &last_restart_ts_family_->Add(kind);
  }
  last_restart_ts_->Set(now);
  // One series: the last cause only, so its labels never pile up.
  if (last_restart_cause_) last_restart_info_->Remove(last_restart_cause_);
  auto labels = base_;
  labels["kind"] = "in_place";
  labels["reason"] = reason;
  labels["rank"] = std::to_string(rank);
  labels["exit_code"] = std::to_string(exit_code);
  last_restart_cause_ = &last_restart_info_->Add(labels);
  last_restart_cause_->Set(1);
}
void Metrics::count_stall() { stalls_->Increment(); }

void Metrics::log_event(const std::string& json_line) {
  std::lock_guard<std::mutex> lock(event_mu_);
  if (event_log_.is_open()) event_log_ << json_line << std::endl;
}

std::vector<LocalFigure> Metrics::figures(double now_s) {
  std::vector<LocalFigure> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (auto f = ranks_[i].window.figure(now_s, straggler_))
      out.push_back({static_cast<int>(i), f->median_s, ranks_[i].throttle, f->lower_s});
  return out;
}

void Metrics::set_throttle(int local_rank, unsigned bits) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ranks_[static_cast<size_t>(local_rank)].throttle = bits & straggler::kThrottleAll;
}

void Metrics::show_scores(std::optional<double> reference, const std::vector<LocalFigure>& figures) {
  std::vector<Gauge*> keep(ranks_.size(), nullptr);
  std::lock_guard<std::mutex> lock(mu_);  // one caller per agent (the supervisor, or node 0's watch); the lock orders it
  for (const auto& f : figures) {
    if (!reference || f.local_rank < 0 || static_cast<size_t>(f.local_rank) >= ranks_.size()) continue;
    Rank& r = ranks_[static_cast<size_t>(f.local_rank)];
    if (!r.score) r.score = &score_family_->Add(r.labels);
    r.score->Set(f.median_s / *reference);
    keep[static_cast<size_t>(f.local_rank)] = r.score;
  }
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].score && !keep[i]) {  // no figure, or no reference: absent again
      score_family_->Remove(ranks_[i].score);
      ranks_[i].score = nullptr;
    }
}

std::vector<RankProgress> Metrics::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RankProgress> out;
  for (const auto& r : ranks_) out.push_back(r.progress);
  return out;
}

void Metrics::reset_progress(int generation) {
  generation_ = generation;
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  for (auto& r : ranks_) {
    r.progress.last_step = -1;
    r.progress.last_time = now;  // the first-step window counts from here
    r.window.clear();            // Note [Straggler score]: a new generation is judged afresh
  }
}

void Metrics::record(int local_rank, const StepReport& s) {
  Rank& r = ranks_[local_rank];
  // Admit each collective name once, up to kMaxOps; the rest are dropped and counted.
  bool dropped = false;
  auto admitted = [&](const std::string& op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ops_.count(op)) return true;
    if (ops_.size() >= kMaxOps) { dropped = true; return false; }
    ops_.insert(op);
    return true;
  };
  auto by_op = [&](Family<Counter>* family, const std::map<std::string, double>& values) {
    for (const auto& [op, v] : values) {
      if (!admitted(op)) continue;
      auto labels = r.labels;
      labels["op"] = op;
      family->Add(labels).Increment(v);
    }
  };
  by_op(nccl_seconds_, s.nccl_s_by_op);
  by_op(nccl_bytes_, s.nccl_bytes_by_op);
  by_op(nccl_ops_, s.nccl_count_by_op);
  if (!s.has_step()) {  // NCCL's figures alone: no step, no progress
    if (dropped) r.malformed->Increment();
    return;
  }
  if (s.step_s) r.step_duration->Observe(*s.step_s);
  // See Note [Measured series only]: made on first use.
  auto counter = [&](Counter*& c, Family<Counter>* f) -> Counter& { return c ? *c : *(c = &f->Add(r.labels)); };
  auto gauge = [&](Gauge*& g, Family<Gauge>* f) -> Gauge& { return g ? *g : *(g = &f->Add(r.labels)); };
  if (s.compute_s) counter(r.compute, compute_family_).Increment(*s.compute_s);
  if (s.exposed_comm_s) counter(r.exposed, exposed_family_).Increment(*s.exposed_comm_s);
  if (s.tokens) counter(r.tokens, tokens_family_).Increment(*s.tokens);
  if (s.flops) counter(r.flops, flops_family_).Increment(*s.flops);
  if (s.loss) gauge(r.loss, loss_family_).Set(*s.loss);
  r.step->Set(static_cast<double>(s.step));
  if (s.total_steps) gauge(r.total_steps, total_steps_family_).Set(*s.total_steps);
  r.steps->Increment();
  if (s.comm_s_by_op.empty() && s.comm_s) {
    auto labels = r.labels;
    labels["op"] = "all";
    comm_seconds_->Add(labels).Increment(*s.comm_s);
  }
  by_op(comm_seconds_, s.comm_s_by_op);
  by_op(comm_bytes_, s.comm_bytes_by_op);
  by_op(comm_exposed_by_op_, s.exposed_comm_s_by_op);
  if (dropped) r.malformed->Increment();
  r.last_step_ts->Set(time_text::unix_seconds());
  const auto work = straggler::work_seconds(s.step_s, s.compute_s, s.exposed_comm_s);
  std::lock_guard<std::mutex> lock(mu_);
  r.progress.last_step = s.step;
  r.progress.last_time = std::chrono::steady_clock::now();
  if (work) r.window.add(steady_seconds(), *work, straggler_.max_samples);  // at its arrival
}

// Note [Step log]: `--step-log DIR` keeps every step of every local rank, for what /metrics
// cannot give after the run: `lockstep run` draws its report.html from these files. One JSON
// object a line, appended (a gang restart's new agent adds to the same file), flushed per
// line so a crash loses at most the step in flight:
//   {"rank":0,"attempt":0,"generation":0,"time":1764000000.123,"step":12,"step_s":0.05,...}
// attempt is the operator's gang restart (LOCKSTEP_RESTART_ATTEMPT), generation the in-place
// restart, time the arrival's Unix time; then the report's own figures, each only when sent:
// step_s, compute_s, comm_s, exposed_comm_s, tokens, flops, loss, total_steps, and per
// collective comm_s.<op>, exposed_comm_s.<op>, comm_bytes.<op>.
void Metrics::log_step(Rank& r, const StepReport& s) {
  if (!r.step_log.is_open()) return;
  auto& o = r.step_log;
  namespace report = lockstep::contract::report;
  auto key = [&o](const char* name) -> std::ostream& { return o << ",\"" << name << "\":"; };
  o << std::setprecision(10) << "{\"" << report::kRank << "\":" << r.progress.rank;
  key(report::kAttempt) << cfg_.restart_attempt;
  key(report::kGeneration) << generation_.load();
  key(report::kTime) << std::fixed << std::setprecision(3) << time_text::unix_seconds() << std::defaultfloat << std::setprecision(9);
  key(report::kStep) << s.step;
  const std::pair<const char*, const std::optional<double>*> fields[] = {
      {report::kStepSeconds, &s.step_s},     {report::kComputeSeconds, &s.compute_s},
      {report::kCommSeconds, &s.comm_s},     {report::kExposedCommSeconds, &s.exposed_comm_s},
      {report::kTokens, &s.tokens},          {report::kFlops, &s.flops},
      {report::kLoss, &s.loss},              {report::kTotalSteps, &s.total_steps}};
  for (const auto& [name, value] : fields)
    if (*value) key(name) << **value;  // finite: the parser admits nothing else
  // Per collective, as sent: the parser admits op names of [a-z0-9_] only, so they need no
  // escaping in a key.
  const std::pair<const char*, const std::map<std::string, double>*> per_op[] = {
      {report::kCommSeconds, &s.comm_s_by_op},
      {report::kExposedCommSeconds, &s.exposed_comm_s_by_op},
      {report::kCommBytes, &s.comm_bytes_by_op}};
  for (const auto& [name, ops] : per_op)
    for (const auto& [op, value] : *ops) {
      o << ",\"" << name << "." << op << "\":";
      if (ops == &s.comm_bytes_by_op && value < 9007199254740992.0 && std::trunc(value) == value)  // every digit
        o << static_cast<long long>(value);
      else
        o << value;
    }
  o << "}\n";  // flushed once per datagram, by receive_loop
}

// Note [A receiver that never preempts a worker]
// ----------------------------------------------
// Each step report wakes this thread. As an ordinary thread that mostly sleeps, the
// scheduler lets it preempt the task on the core it wakes on at once, and on a machine whose
// cores the workers fill, that is often the worker that sent the report: the worker's
// send() then returned only after this thread had parsed, recorded and logged the report.
// Measured inside the Python probe's send() (tests/agent/python/ddp_train.py, 2 workers on
// 2 cores, 24 ms steps, median of 63 steps per rank): 60-175 us a step as SCHED_OTHER, 40 us
// as SCHED_BATCH, which the scheduler never lets preempt on wake-up; about 5 us when no one
// is woken at all. Reports wait for the next scheduling tick instead (a few ms at most),
// which nothing downstream of them notices. SCHED_BATCH needs no privilege; if the kernel
// refuses it, the thread runs as before.
void Metrics::receive_loop() {
  sched_param batch{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch);
  std::vector<pollfd> fds;
  for (const auto& r : ranks_) fds.push_back({r.fd, POLLIN, 0});
  // One byte more than the largest valid datagram, so that MSG_TRUNC tells a longer one (up
  // to 64 KB on a Unix socket) from one that fits; a truncated one is never parsed.
  std::vector<char> buf(kMaxDatagramBytes + 1);
  std::vector<bool> warned(ranks_.size(), false);
  while (!stop_) {
    int n = ::poll(fds.data(), fds.size(), 200);
    if (n <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      ssize_t len;
      while ((len = ::recv(fds[i].fd, buf.data(), buf.size(), MSG_TRUNC)) >= 0) {
        auto malformed = [&](const std::string& error) {
          ranks_[i].malformed->Increment();
          if (!warned[i]) {  // once per rank: a broken sender must not flood the log
            LOCKSTEP_LOG(Warn, "agent", "ignoring malformed step report from rank " << ranks_[i].progress.rank << ": "
                                                                                   << error << " (further ones are counted in lockstep_metrics_malformed_total)");
            warned[i] = true;
          }
        };
        if (static_cast<size_t>(len) > kMaxDatagramBytes) {
          malformed("datagram of " + std::to_string(len) + " bytes exceeds the " + std::to_string(kMaxDatagramBytes) +
                    "-byte limit");
          continue;
        }
        const size_t lines = for_each_step_report(
            std::string_view(buf.data(), static_cast<size_t>(len)),
            [&](const StepReport& report) {
              record(static_cast<int>(i), report);
              if (report.has_step()) log_step(ranks_[i], report);
            },
            malformed);
        if (lines == 0) malformed("empty datagram");
        if (ranks_[i].step_log.is_open()) ranks_[i].step_log.flush();
      }
    }
  }
}

}  // namespace lockstep::agent
