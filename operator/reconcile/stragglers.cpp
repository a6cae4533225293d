#include "reconcile/stragglers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "lockstep/straggler.hpp"
#include "lockstep/text.hpp"
#include "reconcile/prometheus_text.hpp"

namespace lockstep::reconcile {
namespace {

// A label value as a small decimal integer (no sign, at most 9 digits), else -1.
int small_int(const std::optional<std::string>& v) { return v ? text::small_decimal(*v) : -1; }

// A gauge's value as a whole number in [0, max], else -1.
int count_in(double v, int max) {
  if (!std::isfinite(v) || v < 0 || v > max || std::floor(v) != v) return -1;
  return static_cast<int>(v);
}

// One lockstep_straggler_slowdown sample as a verdict of this job, or nullopt (Note [Straggler
// condition]: anything else is as if not served).
std::optional<StragglerVerdict> verdict_of(const Sample& x, int nodes, int procs) {
  StragglerVerdict v;
  v.node_rank = small_int(x.label("node_rank"));
  v.rank = small_int(x.label("rank"));
  if (v.node_rank < 0 || v.node_rank >= nodes || v.rank < 0 || v.rank / procs != v.node_rank) return std::nullopt;
  if (!std::isfinite(x.value) || x.value < 1 || x.value > 1000) return std::nullopt;
  auto bits = straggler::parse_throttle_tokens(x.label("throttle").value_or(""));
  if (!bits) return std::nullopt;
  v.slowdown = x.value;
  v.throttle = *bits;
  return v;
}

constexpr const char* kWork = ": work ";

}  // namespace

StragglerReading parse_stragglers(const std::string& text, int nodes, int procs, int attempt) {
  StragglerReading r;
  r.attempt = attempt;
  if (nodes < 1 || procs < 1) return r;
  const int world = nodes * procs;  // both CRD-bounded: no overflow
  std::set<int> ranks;
  int standing = -1;
  for (const auto& x : samples_of(text, {"lockstep_straggler_slowdown", "lockstep_stragglers",
                                         "lockstep_straggler_suspects", "lockstep_straggler_window_seconds"})) {
    if (x.name == "lockstep_straggler_slowdown") {
      auto v = verdict_of(x, nodes, procs);
      if (v && ranks.insert(v->rank).second) r.stragglers.push_back(*v);  // a rank given twice: the first
    } else if (x.name == "lockstep_stragglers") {
      standing = count_in(x.value, world);
    } else if (x.name == "lockstep_straggler_suspects") {
      r.suspects = std::max(count_in(x.value, world), 0);
    } else if (std::isfinite(x.value) && x.value >= 1 && x.value <= 3600) {
      r.window_s = x.value;
    }
  }
  // samples_of keeps at most kMaxSamples: the sort is bounded whatever the page holds.
  std::sort(r.stragglers.begin(), r.stragglers.end(), [](const auto& a, const auto& b) {
    return a.slowdown != b.slowdown ? a.slowdown > b.slowdown : a.rank < b.rank;
  });
  if (r.stragglers.size() > kMaxStragglersRead) r.stragglers.resize(kMaxStragglersRead);
  r.standing = std::max(standing, static_cast<int>(r.stragglers.size()));
  return r;
}

std::string straggler_message(const StragglerReading& r, const std::string& pod, const std::string& node) {
  if (r.stragglers.empty()) return "";
  const StragglerVerdict& v = r.stragglers.front();
  // kWork's ": work " is where verdict_subject and same_verdict cut the message.
  std::string out = "rank " + std::to_string(v.rank) + " (pod " + pod + (node.empty() ? ", node unknown" : " on node " + node) +
                    "): " + straggler::verdict_words(v.slowdown, r.window_s, v.throttle);
  if (r.standing > 1) out += " (and " + std::to_string(r.standing - 1) + " more)";
  return out;
}

std::string verdict_subject(const std::string& message) {
  size_t at = message.find(kWork);
  return at == std::string::npos ? message : message.substr(0, at);
}

bool same_verdict(const std::string& a, const std::string& b) {
  // "<subject>: work <slowdown>x<rest>": the same subject and rest, slowdowns less than 0.1 apart.
  size_t ia = a.find(kWork), ib = b.find(kWork);
  if (ia == std::string::npos || ib == std::string::npos) return a == b;
  if (a.compare(0, ia, b, 0, ib) != 0) return false;
  const char* sa = a.c_str() + ia + std::char_traits<char>::length(kWork);
  const char* sb = b.c_str() + ib + std::char_traits<char>::length(kWork);
  char *ea = nullptr, *eb = nullptr;
  const double xa = std::strtod(sa, &ea), xb = std::strtod(sb, &eb);
  if (ea == sa || eb == sb || !std::isfinite(xa) || !std::isfinite(xb)) return a == b;
  return std::string(ea) == std::string(eb) && std::fabs(xa - xb) < 0.1 - 1e-9;
}

}  // namespace lockstep::reconcile
