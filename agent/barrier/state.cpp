#include "barrier/state.hpp"

#include <algorithm>

#include "barrier/verdict.hpp"
#include "lockstep/contract.hpp"

namespace lockstep::agent {
namespace {

std::string node_list(const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += (s.empty() ? "" : ", ") + std::to_string(n);
  return s;
}

}  // namespace

// ---- Note [Barrier state] ----

BarrierState::BarrierState(int nnodes, int max_restarts, std::string restart_policy, Clock::time_point now,
                           Clock::duration rendezvous_timeout, Clock::duration stop_limit)
    : n_(nnodes),
      max_restarts_(max_restarts),
      policy_(std::move(restart_policy)),
      stop_limit_(stop_limit),
      members_(static_cast<size_t>(nnodes), false),
      done_(static_cast<size_t>(nnodes), false),
      stopped_(static_cast<size_t>(nnodes), false),
      deadline_(now + rendezvous_timeout) {}

std::string BarrierState::join(int node, Out& out) {
  if (members_[static_cast<size_t>(node)])
    return "node " + std::to_string(node) + " has already joined (two pods with one node rank?)";
  if (phase_ != Phase::Gathering) return "the job has already started without it";
  members_[static_cast<size_t>(node)] = true;
  if (std::count(members_.begin(), members_.end(), true) == n_) {
    phase_ = Phase::Running;
    if (n_ > 1) out.info("all " + std::to_string(n_) + " agents joined; starting generation 0");
    out.broadcast.push_back({"START", {{"gen", "0"}}});
  }
  return "";
}

void BarrierState::message(int node, const Message& m, long long at_ms, Clock::time_point now, Out& out) {
  if (m.get_int("gen", -1) != gen_) return;  // about an older generation: ignore
  auto report = [&] {  // a member's report, as the server saw it (Note [Barrier trust])
    auto f = failure_of(m);
    if (!f || !reported_.insert(node).second) return;
    f->node = node;
    f->at_ms = at_ms;
    reports_.push_back(*f);
  };
  const auto i = static_cast<size_t>(node);
  if (m.verb == "FAILED") {
    report();
    if (phase_ == Phase::Running) begin_stop("node " + std::to_string(node) + " reports a failure", now, out);
  } else if (m.verb == "STOPPED") {
    report();
    if (phase_ == Phase::Stopping) stopped_[i] = true;
    maybe_decide(out);
  } else if (m.verb == "DONE") {
    done_[i] = true;
    if (phase_ == Phase::Stopping) {
      stopped_[i] = true;
      maybe_decide(out);
    } else if (phase_ == Phase::Running && std::count(done_.begin(), done_.end(), true) == n_) {
      finish(0, "all " + std::to_string(n_) + " node(s) finished", std::nullopt, out);
    }
  }
}

void BarrierState::lost(int node, const std::string& verdict, Out& out) {
  if (phase_ == Phase::Finished || node < 0) return;
  if (done_[static_cast<size_t>(node)] && phase_ == Phase::Running) return;  // it finished, then left: fine
  if (phase_ == Phase::Gathering) return;                                   // it may come back before the start
  finish(contract::kExitRendezvous,
         !verdict.empty() ? verdict
                          : "the agent of node " + std::to_string(node) +
                                " is gone (its pod deleted, its node lost or the agent killed)",
         std::nullopt, out);
}

void BarrierState::tick(Clock::time_point now, Out& out) {
  if (now <= deadline_ || (phase_ != Phase::Gathering && phase_ != Phase::Stopping)) return;
  std::vector<int> missing;
  for (int i = 0; i < n_; ++i)
    if (phase_ == Phase::Gathering ? !members_[static_cast<size_t>(i)] : !stopped_[static_cast<size_t>(i)])
      missing.push_back(i);
  finish(contract::kExitRendezvous,
         phase_ == Phase::Gathering
             ? "the agents of node(s) " + node_list(missing) + " did not join within the rendezvous timeout"
             : "node(s) " + node_list(missing) + " did not stop their workers in time",
         std::nullopt, out);
}

void BarrierState::finish(int code, const std::string& why, const std::optional<Failure>& cause, Out& out) {
  Message m = failure_message("EXIT", gen_, cause);
  m.fields["exit"] = std::to_string(code);
  m.fields["why"] = why;
  // See Note [Silent peer]: the generation ends because that member went silent.
  if (code == contract::kExitRendezvous && silent_node_ >= 0) m.fields["silent"] = std::to_string(silent_node_);
  out.broadcast.push_back(std::move(m));
  phase_ = Phase::Finished;
  if (code == 0 && n_ > 1) out.info("generation " + std::to_string(gen_) + " ends for every node: " + why);
  else if (code != 0)
    out.warn("generation " + std::to_string(gen_) + " ends for every node: " + why + " (exit " + std::to_string(code) + ")");
}

void BarrierState::begin_stop(const std::string& why, Clock::time_point now, Out& out) {
  phase_ = Phase::Stopping;
  for (size_t i = 0; i < stopped_.size(); ++i) stopped_[i] = done_[i] && !members_[i];
  deadline_ = now + stop_limit_;
  out.info("generation " + std::to_string(gen_) + ": " + why + "; every node stops its workers");
  out.broadcast.push_back({"STOP", {{"gen", std::to_string(gen_)}}});
}

void BarrierState::maybe_decide(Out& out) {
  if (phase_ != Phase::Stopping || std::count(stopped_.begin(), stopped_.end(), true) < n_) return;
  auto cause = pick_cause(reports_);
  if (!cause) {  // every node finished while stopping: nothing failed after all
    finish(0, "all " + std::to_string(n_) + " node(s) finished", std::nullopt, out);
    return;
  }
  Verdict v = decide(*cause, gen_, max_restarts_, policy_);
  if (!v.restart) {
    finish(v.exit_code, v.why, cause, out);
    return;
  }
  ++gen_;
  reports_.clear();
  reported_.clear();
  std::fill(done_.begin(), done_.end(), false);
  phase_ = Phase::Running;
  Message m = failure_message("START", gen_, cause);
  m.fields["why"] = v.why;
  out.warn("every node has stopped; starting generation " + std::to_string(gen_) + ": " + v.why);
  out.broadcast.push_back(std::move(m));
}

}  // namespace lockstep::agent
