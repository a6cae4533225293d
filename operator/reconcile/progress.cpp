#include "reconcile/progress.hpp"

#include <cctype>
#include <cmath>

#include "reconcile/exposition.hpp"

namespace lockstep::reconcile {

std::optional<ProgressSample> parse_progress(const std::string& text, int rank, Time at) {
  ProgressSample s;
  s.at = at;
  const std::string want = std::to_string(rank);
  for (const auto& x : samples_of(text, {"lockstep_step", "lockstep_total_steps", "lockstep_tokens_total"})) {
    if (x.label("rank") != want || !std::isfinite(x.value)) continue;
    if (x.name == "lockstep_step") s.step = static_cast<long long>(x.value);
    else if (x.name == "lockstep_total_steps") s.total_steps = static_cast<long long>(x.value);
    else s.tokens = x.value;
  }
  if (s.step < 0) return std::nullopt;
  return s;
}

Progress progress_between(const std::optional<ProgressSample>& before, const ProgressSample& now, int world_size) {
  Progress p;
  p.step = now.step;
  p.total_steps = now.total_steps;
  if (!before) return p;
  double dt = std::chrono::duration<double>(now.at - before->at).count();
  long long steps = now.step - before->step;
  if (dt <= 0 || steps <= 0) return p;  // no step since (or a restart went back): no rate
  if (now.tokens >= 0 && before->tokens >= 0 && now.tokens >= before->tokens)
    p.tokens_per_second = std::round((now.tokens - before->tokens) / dt * world_size);
  if (now.total_steps > now.step) p.eta_seconds = std::llround((now.total_steps - now.step) * dt / steps);
  else if (now.total_steps >= 0) p.eta_seconds = 0;
  if (p.eta_seconds) p.eta_seconds = parse_duration(format_duration(*p.eta_seconds));
  return p;
}

std::string format_duration(long long s) {
  if (s < 0) s = 0;
  auto two = [](long long v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + two(s % 60) + "s";
  if (s < 86400) return std::to_string(s / 3600) + "h" + two(s / 60 % 60) + "m";
  return std::to_string(s / 86400) + "d" + two(s / 3600 % 24) + "h";
}

std::optional<long long> parse_duration(const std::string& text) {
  long long total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i || j == text.size() || j - i > 12) return std::nullopt;
    long long v = std::stoll(text.substr(i, j - i));
    switch (text[j]) {
      case 'd': total += v * 86400; break;
      case 'h': total += v * 3600; break;
      case 'm': total += v * 60; break;
      case 's': total += v; break;
      default: return std::nullopt;
    }
    any = true;
    i = j + 1;
  }
  if (!any) return std::nullopt;
  return total;
}

}  // namespace lockstep::reconcile
