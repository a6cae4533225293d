// The gang's straggler figures on the restart barrier (docs/agent.md, "Stragglers"): each member's
// FIGURES line to node 0's agent, node 0's reference back in its ALIVE, and what node 0's server
// keeps of them (Note [Barrier trust]: nothing unchecked). The score itself is
// common/include/lockstep/straggler.hpp (Note [Straggler score]).
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "barrier/codec.hpp"
#include "lockstep/straggler.hpp"

namespace lockstep::agent {

// How often every agent sends its ranks' medians to node 0's agent, and node 0 evaluates.
inline constexpr std::chrono::seconds kFiguresInterval{5};
// Figures (a member's, node 0's reference) older than this are forgotten: a member that went
// quiet is not judged on old news.
inline constexpr double kFiguresMaxAgeS = 3.0 * kFiguresInterval.count();
// The most stragglers node 0 lists as series (the worst first); lockstep_stragglers counts all.
inline constexpr size_t kMaxListedStragglers = 8;
// The largest work median a figure may carry, in seconds (an hour-long step is no step).
inline constexpr double kMaxFigureSeconds = 3600;

// Seconds on the monotonic clock: the straggler windows' and the figures' times.
double steady_seconds();

// One local rank's figure as a member sends it.
struct LocalFigure {
  int local_rank = 0;
  double median_s = 0;    // its work median over the window (straggler::RankWindow::figure)
  unsigned throttle = 0;  // straggler::Throttle bits of its GPU, 0: none or unknown
  double lower_s = 0;     // its lower quantile over the window (0, or over median_s: median_s)
};

// The longest FIGURES line node 0 reads from a member with `nproc` ranks a node; a longer one
// closes the member's connection, as an oversized heartbeat does (Note [Barrier trust]).
inline size_t max_figures_bytes(int nproc) { return 64 + 60 * static_cast<size_t>(nproc); }

// `FIGURES gen=G w<i>=<median, %.6g> l<i>=<lower quantile> [t<i>=<bits>]` for `figures` (t only
// when not 0).
Message figures_message(int generation, const std::vector<LocalFigure>& figures);
// A member's FIGURES, checked (Note [Barrier trust]): `gen` an integer, every other key w<i>,
// l<i> or t<i> with i in [0, nproc), w and l finite numbers in (0, kMaxFigureSeconds] with
// l <= w, t an integer in [0, straggler::kThrottleAll], every w with its l and every l or t
// beside its w. nullopt with `error` saying what is wrong.
struct MemberFigures {
  int generation = -1;
  std::vector<LocalFigure> figures;  // by local rank
};
std::optional<MemberFigures> parse_figures(const Message& m, int nproc, std::string& error);

// "%.6g": how a figure or a reference goes on the wire.
std::string figure_text(double seconds);
// Node 0's `ref=` as a member reads it from an ALIVE: finite, in (0, kMaxFigureSeconds]; nullopt
// when absent or not that.
std::optional<double> parse_reference(const Message& alive);

// What node 0's server keeps of its members' figures: bounded by the membership (nnodes entries
// of at most nproc figures each), each with its arrival time. Shared by the server's thread
// (put, forget) and node 0's straggler watch (fresh, reference): every call takes the lock only
// to copy.
class GangFigures {
 public:
  GangFigures(int nnodes, int nproc) : nproc_(nproc), nodes_(static_cast<size_t>(nnodes > 0 ? nnodes : 1)) {}
  // Member `node`'s latest figures (replacing what it sent before), at `at_s` (steady_seconds).
  void put(int node, std::vector<LocalFigure> figures, double at_s);
  void forget(int node);  // it left, or a new generation began
  void clear();
  // Every member's figures not older than kFiguresMaxAgeS at `now_s`, as the gang's figures
  // (rank = node * nproc + local rank), older ones dropped.
  std::vector<straggler::RankFigure> fresh(double now_s);
  // Node 0's reference (the gang's lower median of medians) for its ALIVE; nullopt: none.
  void set_reference(std::optional<double> seconds);
  std::optional<double> reference() const;
  // FIGURES lines accepted since the start (put calls): what a test counts.
  size_t accepted() const;

 private:
  struct Node {
    std::vector<LocalFigure> figures;
    double at_s = 0;
  };
  mutable std::mutex mu_;
  const int nproc_;
  std::vector<Node> nodes_;
  std::optional<double> reference_;
  size_t accepted_ = 0;
};

}  // namespace lockstep::agent
