#include "reconcile/progress.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "lockstep/time_text.hpp"
#include "reconcile/prometheus_text.hpp"
#include "reconcile/in_place.hpp"

namespace lockstep::reconcile {
namespace {

// A gauge's value as a step count: a whole number in [0, kMaxSteps].
std::optional<long long> whole(double v) {
  if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxSteps) || std::floor(v) != v) return std::nullopt;
  return static_cast<long long>(v);
}

}  // namespace

std::optional<ProgressSample> parse_progress(const std::string& text, int rank, Time at) {
  ProgressSample s;
  s.at = at;
  const std::string want = std::to_string(rank);
  std::optional<double> reports;  // lockstep_steps_total: how many step reports came
  bool bad_step = false;
  for (const auto& x : samples_of(text, {"lockstep_step", "lockstep_total_steps", "lockstep_tokens_total",
                                         "lockstep_steps_total"})) {
    if (x.label("rank") != want) continue;
    if (x.name == "lockstep_step") {
      auto v = whole(x.value);
      bad_step = !v;
      s.step = v.value_or(-1);
    } else if (x.name == "lockstep_total_steps") {
      auto v = whole(x.value);
      s.total_steps = v && *v >= 1 ? *v : -1;  // 0: the program has not said
    } else if (x.name == "lockstep_tokens_total") {
      s.tokens = std::isfinite(x.value) && x.value >= 0 ? x.value : -1;
    } else {
      reports = x.value;
    }
  }
  if (bad_step || s.step < 0) return std::nullopt;
  // The agent serves every series from its start, at 0: no report yet is no step yet. (An
  // exporter without the counter is taken at its lockstep_step.)
  if (reports && !(*reports >= 1)) return std::nullopt;
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
  if (now.tokens >= 0 && before->tokens >= 0 && now.tokens >= before->tokens) {
    double rate = std::round((now.tokens - before->tokens) / dt * world_size);
    if (std::isfinite(rate) && rate <= 9e15) p.tokens_per_second = rate;  // an int64 in the status
  }
  if (now.total_steps > now.step) p.eta_seconds = std::llround(std::min((now.total_steps - now.step) * dt / steps, 1e12));
  else if (now.total_steps >= 0) p.eta_seconds = 0;
  if (p.eta_seconds) p.eta_seconds = parse_duration(format_duration(*p.eta_seconds));
  return p;
}

ReadingSchedule::ReadingSchedule(ms first, ms period)
    : first_(std::min(first, period)), period_(period), interval_(first_) {}

ReadingSchedule::ms ReadingSchedule::after(Found found) {
  if (found == Found::Rate) {
    stepped_ = true;
    interval_ = period_;
  } else if (found == Found::Step && !stepped_) {
    stepped_ = true;
    interval_ = first_;  // the first step: read again soon for a rate
  } else {
    interval_ = std::min(period_, interval_ + interval_ / 2);
  }
  return interval_;
}

std::optional<FinalSummary> parse_final_summary(const std::string& message) {
  if (message.size() > kMaxSummaryBytes) return std::nullopt;
  std::string line = message;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  const std::string prefix = std::string(kSummaryPrefix) + " ";
  if (line.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  auto digits = [](const std::string& v, size_t max) {
    return !v.empty() && v.size() <= max && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  auto integer = [&](const std::string& v) {  // what in_place.cpp takes for a rank or an exit code
    return digits(v[0] == '-' ? v.substr(1) : v, 9);
  };
  auto word = [](const std::string& v) {
    return v.size() <= kMaxReasonBytes && std::isupper(static_cast<unsigned char>(v[0])) &&
           std::all_of(v.begin(), v.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  };
  FinalSummary out;
  std::set<std::string> seen;
  size_t i = prefix.size();
  while (true) {
    // key=value, then one space or the end; nothing else, not even a second space.
    size_t eq = line.find('=', i);
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = line.substr(i, eq - i);
    size_t end = line.find(' ', eq + 1);
    if (end == std::string::npos) end = line.size();
    const std::string value = line.substr(eq + 1, end - eq - 1);
    if (value.empty() || !seen.insert(key).second) return std::nullopt;  // no value, a key given twice
    if (key == "step" || key == "total") {
      if (!digits(value, 16)) return std::nullopt;
      const long long v = std::stoll(value);  // at most 16 digits: no overflow
      if (v > kMaxSteps || (key == "total" && v < 1)) return std::nullopt;
      (key == "step" ? out.step : out.total_steps) = v;
    } else if (key == "restarts") {
      if (!digits(value, 9) || std::stoll(value) > kMaxInPlaceReading) return std::nullopt;
      out.in_place_restarts = std::stoi(value);
    } else if (key == "reason") {
      if (!word(value)) return std::nullopt;
      out.reason = value;
    } else if (key == "rank" || key == "exit") {
      if (!integer(value)) return std::nullopt;
      (key == "rank" ? out.rank : out.exit_code) = value;
    } else {
      return std::nullopt;  // an unknown key
    }
    if (end == line.size()) break;
    i = end + 1;
    if (i == line.size()) return std::nullopt;  // a trailing space
  }
  if (out.step < 0 && out.in_place_restarts < 0) return std::nullopt;  // neither a step nor a restart
  if (out.total_steps >= 1 && out.step < 0) return std::nullopt;      // a total with no step
  if (out.in_place_restarts < 0 && (seen.count("reason") || seen.count("rank") || seen.count("exit")))
    return std::nullopt;  // a cause with no restart
  return out;
}

std::optional<Progress> final_progress(std::optional<Progress> last, const std::optional<FinalSummary>& summary) {
  if (summary && summary->step >= 0) {
    Progress p = last.value_or(Progress{});
    p.step = summary->step;
    if (summary->total_steps >= 1) p.total_steps = summary->total_steps;
    last = p;
  } else if (last && last->total_steps >= 1) {
    last->step = last->total_steps;  // every rank exited 0: the run took all its steps
  }
  if (last) last->eta_seconds = last->total_steps >= 1 ? std::optional<long long>(0) : std::nullopt;
  return last;
}

// One compact duration for the status, the messages and the command line (lockstep/time_text.hpp).
std::string format_duration(long long s) { return time_text::compact_duration(s); }

std::optional<long long> parse_duration(const std::string& text) { return time_text::parse_compact_duration(text); }

}  // namespace lockstep::reconcile
