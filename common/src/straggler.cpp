#include "lockstep/straggler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

namespace lockstep::straggler {

std::optional<double> work_seconds(std::optional<double> step_s, std::optional<double> compute_s,
                                   std::optional<double> exposed_comm_s) {
  std::optional<double> work;
  if (step_s && exposed_comm_s) work = *step_s - *exposed_comm_s;
  else if (compute_s) work = *compute_s;
  if (!work || !std::isfinite(*work) || *work <= 0) return std::nullopt;
  return work;
}

void RankWindow::add(double at_s, double work_s, size_t max_samples) {
  if (!std::isfinite(at_s) || !std::isfinite(work_s) || work_s <= 0) return;
  if (!first_at_s_) first_at_s_ = at_s;
  samples_.push_back({at_s, work_s});
  while (samples_.size() > std::max<size_t>(max_samples, 1)) samples_.pop_front();
}

std::optional<RankWindow::Figure> RankWindow::figure(double now_s, const Settings& settings) {
  if (!first_at_s_) return std::nullopt;
  // See Note [Straggler score]: the warm-up's steps left out, and half a window after it.
  const double warm_at = *first_at_s_ + settings.window_s / 3;
  const double oldest = std::max(now_s - settings.window_s, warm_at);
  while (!samples_.empty() && samples_.front().at_s < oldest) samples_.pop_front();
  if (now_s - warm_at < settings.window_s / 2) return std::nullopt;
  if (samples_.size() < std::max<size_t>(settings.min_samples, 1)) return std::nullopt;
  std::vector<double> work;
  work.reserve(samples_.size());
  for (const auto& s : samples_) work.push_back(s.work_s);
  const size_t n = work.size(), mid = n / 2;
  Figure f;
  std::nth_element(work.begin(), work.begin() + mid, work.end());
  f.median_s = work[mid];
  if (n % 2 == 0) f.median_s = (f.median_s + *std::max_element(work.begin(), work.begin() + mid)) / 2;
  // The lower quantile: the smallest sample that at least that share of the samples is not
  // above (the 20th percentile of 10 samples is the 2nd smallest, of 20 the 4th, of 8 the
  // 2nd); at or over a half, the median itself. Under the middle, so the partition above
  // leaves it in the lower half.
  f.lower_s = f.median_s;
  const double q = std::max(settings.lower_quantile, 0.0);
  if (q < 0.5) {
    const size_t at = std::min(mid, static_cast<size_t>(std::max(std::ceil(q * static_cast<double>(n)), 1.0)) - 1);
    std::nth_element(work.begin(), work.begin() + at, work.begin() + mid);
    f.lower_s = std::min(work[at], f.median_s);
  }
  return f;
}

namespace {
bool usable(const RankFigure& f) { return std::isfinite(f.median_s) && f.median_s > 0 && std::isfinite(f.lower_s); }

// The lower median: for an even count the smaller of the two middle figures, so that two ranks
// are measured against the faster one (Note [Straggler score]).
double lower_median(std::vector<double>& v) {
  const size_t lower_mid = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + lower_mid, v.end());
  return v[lower_mid];
}
}  // namespace

std::optional<Reading> score(const std::vector<RankFigure>& figures) {
  std::vector<double> medians;
  medians.reserve(figures.size());
  for (const auto& f : figures)
    if (usable(f)) medians.push_back(f.median_s);
  if (medians.size() < 2) return std::nullopt;
  Reading r;
  r.reference_s = lower_median(medians);
  r.scores.reserve(figures.size());
  for (const auto& f : figures)
    if (usable(f))
      r.scores.push_back({f.rank, f.node_rank, f.median_s / r.reference_s, f.throttle, lower_or_median(f.lower_s, f.median_s)});
  return r;
}

bool suspect(const Score& s, const Reading& reading, const Settings& settings) {
  return s.slowdown >= settings.threshold && (s.slowdown - 1) * reading.reference_s >= settings.min_excess_s &&
         s.lower_s > reading.reference_s;
}

size_t Detector::suspects() const {
  return static_cast<size_t>(std::count_if(tracks_.begin(), tracks_.end(), [](const Track& t) { return t.over_since >= 0; }));
}

void Detector::reset() {
  tracks_.clear();
  standing_.clear();
}

std::vector<Detector::Change> Detector::update(double now_s, const std::optional<Reading>& reading) {
  std::vector<Change> changes;
  std::vector<Track> next;
  if (reading) {
    next.reserve(reading->scores.size());
    for (const auto& s : reading->scores) {
      auto old = std::lower_bound(tracks_.begin(), tracks_.end(), s.rank,
                                  [](const Track& t, int rank) { return t.rank < rank; });
      Track t = (old != tracks_.end() && old->rank == s.rank && old->node_rank == s.node_rank) ? *old : Track{};
      t.rank = s.rank;
      t.node_rank = s.node_rank;
      t.slowdown = s.slowdown;
      t.throttle = s.throttle;
      if (suspect(s, *reading, settings_)) {
        if (t.over_since < 0) t.over_since = now_s;
        t.under_since = -1;
        if (!t.straggler && now_s - t.over_since >= settings_.hold_s) {
          t.straggler = true;
          t.since = now_s;
          changes.push_back({{t.rank, t.node_rank, t.slowdown, t.throttle, t.since}, true, now_s});
        }
      } else {
        t.over_since = -1;
        if (t.straggler) {
          if (t.under_since < 0) t.under_since = now_s;
          if (now_s - t.under_since >= settings_.hold_s) {
            t.straggler = false;
            t.under_since = -1;
            changes.push_back({{t.rank, t.node_rank, t.slowdown, t.throttle, t.since}, false, now_s});
          }
        }
      }
      next.push_back(t);
    }
    std::sort(next.begin(), next.end(), [](const Track& a, const Track& b) { return a.rank < b.rank; });
    next.erase(std::unique(next.begin(), next.end(), [](const Track& a, const Track& b) { return a.rank == b.rank; }),
               next.end());
  }
  // A rank no longer judged (no figure) loses its verdict with it (Note [Straggler score]).
  for (const auto& t : tracks_) {
    if (!t.straggler) continue;
    auto now = std::lower_bound(next.begin(), next.end(), t.rank, [](const Track& x, int rank) { return x.rank < rank; });
    if (now == next.end() || now->rank != t.rank || now->node_rank != t.node_rank)
      changes.push_back({{t.rank, t.node_rank, t.slowdown, t.throttle, t.since}, false, now_s});
  }
  tracks_ = std::move(next);
  standing_.clear();
  for (const auto& t : tracks_)
    if (t.straggler) standing_.push_back({t.rank, t.node_rank, t.slowdown, t.throttle, t.since});
  std::stable_sort(standing_.begin(), standing_.end(),
                   [](const Straggler& a, const Straggler& b) { return a.slowdown > b.slowdown; });
  return changes;
}

std::vector<Detector::Change> replay(const std::vector<Sample>& samples, const Settings& settings,
                                     double interval_s) {
  std::vector<Detector::Change> changes;
  if (samples.empty() || !(interval_s > 0)) return changes;
  std::map<int, std::pair<int, RankWindow>> windows;  // rank -> (node rank, window)
  Detector detector(settings);
  size_t next = 0;
  for (double now = samples.front().at_s;; now += interval_s) {
    for (; next < samples.size() && samples[next].at_s <= now; ++next) {
      auto& [node_rank, window] = windows[samples[next].rank];
      node_rank = samples[next].node_rank;
      window.add(samples[next].at_s, samples[next].work_s, settings.max_samples);
    }
    std::vector<RankFigure> figures;
    for (auto& [rank, w] : windows)
      if (auto f = w.second.figure(now, settings)) figures.push_back({rank, w.first, f->median_s, 0, f->lower_s});
    for (auto& c : detector.update(now, score(figures))) changes.push_back(c);
    if (next >= samples.size()) break;
  }
  return changes;
}

namespace {
struct ThrottleName {
  unsigned bit;
  const char* token;
  const char* words;
};
constexpr ThrottleName kThrottleNames[] = {
    {kThrottlePower, "power", "power cap"},
    {kThrottleThermal, "thermal", "thermal slowdown"},
    {kThrottleHwSlowdown, "hw_slowdown", "hardware slowdown"},
    {kThrottleHwThermal, "hw_thermal", "hardware thermal slowdown"},
    {kThrottleHwPowerBrake, "hw_power_brake", "hardware power brake"},
};
}  // namespace

std::string throttle_words(unsigned bits) {
  std::string out;
  for (const auto& n : kThrottleNames)
    if (bits & n.bit) out += (out.empty() ? "" : ", ") + std::string(n.words);
  return out;
}

std::string throttle_tokens(unsigned bits) {
  std::string out;
  for (const auto& n : kThrottleNames)
    if (bits & n.bit) out += (out.empty() ? "" : ",") + std::string(n.token);
  return out;
}

std::optional<unsigned> parse_throttle_tokens(const std::string& tokens) {
  unsigned bits = 0;
  if (tokens.empty()) return bits;
  size_t start = 0;
  while (true) {
    const size_t comma = tokens.find(',', start);
    const std::string token = tokens.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto* n = std::find_if(std::begin(kThrottleNames), std::end(kThrottleNames),
                                 [&](const ThrottleName& x) { return token == x.token; });
    if (n == std::end(kThrottleNames)) return std::nullopt;
    bits |= n->bit;
    if (comma == std::string::npos) return bits;
    start = comma + 1;
  }
}

std::string verdict_words(double slowdown, double window_s, unsigned throttle) {
  char ratio[32], window[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", slowdown);
  std::snprintf(window, sizeof window, "%g", window_s);
  std::string out = std::string("work ") + ratio + "x the gang's typical rank over the last " + window + " s";
  if (throttle) out += "; GPU clocks throttled: " + throttle_words(throttle);
  return out;
}

std::string describe(const Straggler& s, const Settings& settings) {
  return "rank " + std::to_string(s.rank) + " on node " + std::to_string(s.node_rank) + ": " +
         verdict_words(s.slowdown, settings.window_s, s.throttle);
}

}  // namespace lockstep::straggler
