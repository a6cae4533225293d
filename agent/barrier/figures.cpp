#include "barrier/figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "lockstep/text.hpp"

namespace lockstep::agent {
namespace {

// A non-negative decimal integer of at most 6 digits, no sign, no leading zero; -1 otherwise.
int small_index(const std::string& s) {
  if (s.size() > 1 && s[0] == '0') return -1;
  return text::small_decimal(s, 6);
}

// A finite number in (0, kMaxFigureSeconds], written in plain decimal or exponent form only.
std::optional<double> figure_seconds(const std::string& s) {
  if (s.empty() || s.size() > 32 || s.find_first_not_of("0123456789.eE+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0 || v > kMaxFigureSeconds) return std::nullopt;
  return v;
}

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string figure_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", seconds);
  return buf;
}

Message figures_message(int generation, const std::vector<LocalFigure>& figures) {
  Message m{"FIGURES", {{"gen", std::to_string(generation)}}};
  for (const auto& f : figures) {
    m.fields["w" + std::to_string(f.local_rank)] = figure_text(f.median_s);
    m.fields["l" + std::to_string(f.local_rank)] = figure_text(straggler::lower_or_median(f.lower_s, f.median_s));
    if (f.throttle) m.fields["t" + std::to_string(f.local_rank)] = std::to_string(f.throttle);
  }
  return m;
}

std::optional<MemberFigures> parse_figures(const Message& m, int nproc, std::string& error) {
  MemberFigures out;
  out.generation = small_index(m.get("gen"));
  if (out.generation < 0) {
    error = "gen must be a generation number";
    return std::nullopt;
  }
  std::vector<std::optional<double>> work(static_cast<size_t>(nproc)), lower(static_cast<size_t>(nproc));
  std::vector<unsigned> throttle(static_cast<size_t>(nproc), 0);
  std::vector<bool> has_throttle(static_cast<size_t>(nproc), false);
  for (const auto& [key, value] : m.fields) {
    if (key == "gen") continue;
    const int i = key.size() > 1 && (key[0] == 'w' || key[0] == 'l' || key[0] == 't') ? small_index(key.substr(1)) : -1;
    if (i < 0 || i >= nproc) {
      error = "key '" + key.substr(0, 16) + "' is not w<i>, l<i> or t<i> with i in [0, " + std::to_string(nproc) + ")";
      return std::nullopt;
    }
    const auto at = static_cast<size_t>(i);
    if (key[0] == 'w' || key[0] == 'l') {
      auto& slot = key[0] == 'w' ? work[at] : lower[at];
      slot = figure_seconds(value);
      if (!slot) {
        error = key + " must be a number of seconds in (0, " + figure_text(kMaxFigureSeconds) + "]";
        return std::nullopt;
      }
    } else {
      const int bits = small_index(value);
      if (bits < 0 || bits > static_cast<int>(straggler::kThrottleAll)) {
        error = key + " must be an integer in [0, " + std::to_string(straggler::kThrottleAll) + "]";
        return std::nullopt;
      }
      throttle[at] = static_cast<unsigned>(bits);
      has_throttle[at] = true;
    }
  }
  for (size_t i = 0; i < work.size(); ++i) {
    const std::string n = std::to_string(i);
    if ((has_throttle[i] || lower[i]) && !work[i]) {
      error = (lower[i] ? "l" : "t") + n + " without its w" + n;
      return std::nullopt;
    }
    if (!work[i]) continue;
    if (!lower[i]) {
      error = "w" + n + " without its l" + n;
      return std::nullopt;
    }
    if (*lower[i] > *work[i]) {
      error = "l" + n + " (a lower quantile) must be at most w" + n + " (the median)";
      return std::nullopt;
    }
    out.figures.push_back({static_cast<int>(i), *work[i], throttle[i], *lower[i]});
  }
  return out;
}

std::optional<double> parse_reference(const Message& alive) {
  auto it = alive.fields.find("ref");
  if (it == alive.fields.end()) return std::nullopt;
  return figure_seconds(it->second);
}

void GangFigures::put(int node, std::vector<LocalFigure> figures, double at_s) {
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size()) return;
  if (figures.size() > static_cast<size_t>(nproc_)) figures.resize(static_cast<size_t>(nproc_));
  std::lock_guard<std::mutex> lock(mu_);
  nodes_[static_cast<size_t>(node)] = {std::move(figures), at_s};
  ++accepted_;
}

size_t GangFigures::accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

void GangFigures::forget(int node) {
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size()) return;
  std::lock_guard<std::mutex> lock(mu_);
  nodes_[static_cast<size_t>(node)].figures.clear();
}

void GangFigures::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& n : nodes_) n.figures.clear();
}

std::vector<straggler::RankFigure> GangFigures::fresh(double now_s) {
  std::vector<straggler::RankFigure> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t node = 0; node < nodes_.size(); ++node) {
    auto& n = nodes_[node];
    if (now_s - n.at_s > kFiguresMaxAgeS) n.figures.clear();
    for (const auto& f : n.figures)
      out.push_back({static_cast<int>(node) * nproc_ + f.local_rank, static_cast<int>(node), f.median_s, f.throttle,
                     f.lower_s});
  }
  return out;
}

void GangFigures::set_reference(std::optional<double> seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  reference_ = seconds;
}

std::optional<double> GangFigures::reference() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reference_;
}

}  // namespace lockstep::agent
