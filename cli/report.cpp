#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "lockstep/contract.hpp"
#include "lockstep/straggler.hpp"
#include "lockstep/time_text.hpp"

#include "report_page.hpp"  // kReportPage: cli/report_page.html, embedded at build time

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace lockstep::cli {
namespace {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Six significant digits: what a chart can show, and a page a tenth the size of full doubles.
json figure(const std::optional<double>& v, double scale = 1) {
  if (!v) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", *v * scale);
  return std::stod(buf);
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

// The run's length: "12.3 s", or from a minute on as `lockstep run` says it, "3m20s".
std::string seconds_text(double s) {
  if (s >= 60) return time_text::compact_duration(static_cast<long long>(s));
  return time_text::seconds(s, 1);
}

// Replaces the one occurrence of `key` in `page`.
void fill(std::string& page, const std::string& key, const std::string& value) {
  auto at = page.find(key);
  if (at == std::string::npos) throw std::logic_error("report page template lacks " + key);
  page.replace(at, key.size(), value);
}

}  // namespace

std::vector<json> JsonLinesFollower::read() {
  std::vector<json> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  in.seekg(offset_);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += static_cast<std::streamoff>(chunk.size());
  partial_ += chunk;
  for (size_t pos; (pos = partial_.find('\n')) != std::string::npos;) {
    json j = json::parse(partial_.substr(0, pos), nullptr, false);
    partial_.erase(0, pos + 1);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

std::optional<StepRecord> step_record(const json& j) {
  auto number = [&](const char* key) -> std::optional<double> {
    if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
    return std::nullopt;
  };
  namespace report = lockstep::contract::report;
  auto step = number(report::kStep);
  if (!step) return std::nullopt;
  StepRecord r;
  r.rank = static_cast<int>(number(report::kRank).value_or(0));
  r.attempt = static_cast<int>(number(report::kAttempt).value_or(0));
  r.generation = static_cast<int>(number(report::kGeneration).value_or(0));
  r.step = static_cast<long long>(*step);
  r.step_s = number(report::kStepSeconds);
  r.compute_s = number(report::kComputeSeconds);
  r.comm_s = number(report::kCommSeconds);
  r.exposed_comm_s = number(report::kExposedCommSeconds);
  r.loss = number(report::kLoss);
  r.tokens = number(report::kTokens);
  r.total_steps = number(report::kTotalSteps);
  r.time = number(report::kTime);
  return r;
}

namespace {

namespace event = lockstep::contract::report;  // the keys of node 0's straggler events

std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// line[key] as a finite number in [lo, hi]; nullopt with *error naming the key and the range.
std::optional<double> bounded(const json& line, const char* key, double lo, double hi, std::string* error) {
  if (line.contains(key) && line[key].is_number()) {
    const double v = line[key].get<double>();
    if (std::isfinite(v) && v >= lo && v <= hi) return v;
  }
  *error = std::string(key) + ": expected a number in [" + shortest(lo) + ", " + shortest(hi) + "], got " +
           (line.contains(key) ? line[key].dump().substr(0, 40) : std::string("none"));
  return std::nullopt;
}

// line[key] as a whole number in [lo, hi).
std::optional<int> whole(const json& line, const char* key, int lo, int hi, std::string* error) {
  if (line.contains(key) && line[key].is_number_integer()) {
    const auto v = line[key].get<long long>();
    if (v >= lo && v < hi) return static_cast<int>(v);
  }
  *error = std::string(key) + ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "), got " +
           (line.contains(key) ? line[key].dump().substr(0, 40) : std::string("none"));
  return std::nullopt;
}

}  // namespace

std::optional<StragglerEvent> straggler_event(const json& line, int world, int procs_per_node, std::string* error) {
  error->clear();
  const json& kind = line.is_object() && line.contains(contract::report::kEvent) ? line[contract::report::kEvent] : json();
  if (!kind.is_string() || (kind != event::kStraggler && kind != event::kStragglerCleared)) return std::nullopt;
  StragglerEvent e;
  e.raised = kind == event::kStraggler;
  StragglerVerdict& v = e.verdict;
  const auto rank = whole(line, contract::report::kRank, 0, world, error);
  if (!rank) return std::nullopt;
  const auto node = whole(line, event::kNodeRank, 0, std::max(1, world / std::max(1, procs_per_node)), error);
  if (!node) return std::nullopt;
  if (*rank / std::max(1, procs_per_node) != *node) {
    *error = std::string(event::kNodeRank) + ": rank " + std::to_string(*rank) + " is on node " +
             std::to_string(*rank / std::max(1, procs_per_node)) + ", not " + std::to_string(*node);
    return std::nullopt;
  }
  const auto time = bounded(line, contract::report::kTime, 1, 1e11, error);
  if (!time) return std::nullopt;
  v.rank = *rank;
  v.node_rank = *node;
  v.raised_at = *time;
  if (!e.raised) return e;
  const auto slowdown = bounded(line, event::kSlowdown, 1, 1000, error);
  if (!slowdown) return std::nullopt;
  const auto window = bounded(line, event::kWindowSeconds, 1, 3600, error);
  if (!window) return std::nullopt;
  std::optional<unsigned> throttle = 0u;
  if (line.contains(event::kThrottle))
    throttle = line[event::kThrottle].is_string() ? straggler::parse_throttle_tokens(line[event::kThrottle]) : std::nullopt;
  if (!throttle) {
    *error = std::string(event::kThrottle) + ": expected comma-separated reasons of " +
             straggler::throttle_tokens(straggler::kThrottleAll) + ", got " + line[event::kThrottle].dump().substr(0, 40);
    return std::nullopt;
  }
  v.slowdown = *slowdown;
  v.window_s = *window;
  v.throttle = *throttle;
  return e;
}

std::string describe_verdict(const StragglerVerdict& v) {
  return "rank " + std::to_string(v.rank) + " (node " + std::to_string(v.node_rank) + "): " +
         straggler::verdict_words(v.slowdown, v.window_s, v.throttle);
}

std::string run_clock(double seconds) {
  const long long s = std::max(0LL, static_cast<long long>(std::floor(seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld", s / 60, s % 60);
  return buf;
}

std::vector<StepRecord> read_step_logs(const std::string& dir) {
  std::vector<StepRecord> out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".jsonl" && e.path().filename().string().rfind("rank-", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    for (const json& j : JsonLinesFollower(f.string()).read())
      if (auto r = step_record(j)) out.push_back(*r);
  return out;
}

namespace {

// Restarts, as the lowest rank saw them: where its attempt or generation changed.
json restart_marks(const std::vector<StepRecord>& records) {
  json restarts = json::array();
  if (records.empty()) return restarts;
  int first_rank = records.front().rank;
  for (const auto& r : records) first_rank = std::min(first_rank, r.rank);
  const StepRecord* prev = nullptr;
  for (const auto& r : records) {
    if (r.rank != first_rank) continue;
    if (prev && (r.attempt != prev->attempt || r.generation != prev->generation))
      restarts.push_back({{"step", r.step},
                          {"label", r.attempt != prev->attempt ? "gang restart (attempt " + std::to_string(r.attempt) + ")"
                                                               : "in-place restart (generation " + std::to_string(r.generation) + ")"}});
    prev = &r;
  }
  return restarts;
}

// The step a verdict is marked at: the first its rank reported at or after it (by the step
// log's arrival times), or the rank's last when it came after every step; none without times.
std::optional<long long> verdict_step(const StragglerVerdict& v, const std::vector<StepRecord>& records) {
  std::optional<long long> last;
  for (const auto& r : records) {
    if (r.rank != v.rank || !r.time) continue;
    if (*r.time >= v.raised_at) return r.step;
    last = r.step;
  }
  return last;
}

// The banner naming each verdict (html) and its marks on the step-time chart (data).
std::pair<std::string, json> straggler_parts(const RunSummary& run, const std::vector<StepRecord>& records) {
  std::string html;
  json marks = json::array();
  for (const auto& v : run.stragglers) {
    const auto step = verdict_step(v, records);
    std::string when = "raised at " + run_clock(v.raised_at - run.started_at) + " into the run" +
                       (step ? " (step " + std::to_string(*step) + ")" : "") + ", ";
    when += v.cleared_at ? "cleared at " + run_clock(*v.cleared_at - run.started_at) +
                               (v.cleared_by.empty() ? "" : " (" + v.cleared_by + ")")
                         : std::string("standing to the end");
    html += "<p class=\"straggler\" data-rank=\"" + std::to_string(v.rank) + "\" data-node=\"" + std::to_string(v.node_rank) +
            "\"><strong>Straggler:</strong> " + html_escape(describe_verdict(v)) + " &middot; " + html_escape(when) + "</p>\n";
    if (step) marks.push_back({{"step", *step}, {"rank", v.rank}, {"label", "straggler: rank " + std::to_string(v.rank)}});
  }
  if (!html.empty()) html = "<div class=\"stragglers\" id=\"stragglers\">\n" + html + "</div>";
  return {html, marks};
}

}  // namespace

std::string report_html(const RunSummary& run, const std::vector<StepRecord>& records) {
  // Per rank, the latest figures of each step (a restart from a checkpoint runs steps again).
  std::map<int, std::map<long long, StepRecord>> by_rank;
  for (const auto& r : records) by_rank[r.rank][r.step] = r;
  const json restarts = restart_marks(records);
  const auto [banner, straggler_marks] = straggler_parts(run, records);

  json ranks = json::array();
  std::string table;
  long long last_step = 0;
  std::optional<double> final_loss;
  for (const auto& [rank, steps] : by_rank) {
    json s = {{"rank", rank}, {"step", json::array()}, {"loss", json::array()}, {"step_ms", json::array()},
              {"compute_ms", json::array()}, {"exposed_ms", json::array()}};
    std::vector<double> step_ms;
    double sum_step = 0, sum_compute = 0, sum_exposed = 0, sum_comm = 0;
    for (const auto& [step, r] : steps) {
      std::optional<double> compute = r.compute_s;
      if (!compute && r.step_s && r.exposed_comm_s) compute = std::max(0.0, *r.step_s - *r.exposed_comm_s);
      s["step"].push_back(step);
      s["loss"].push_back(figure(r.loss));
      s["step_ms"].push_back(figure(r.step_s, 1000));
      s["compute_ms"].push_back(figure(compute, 1000));
      s["exposed_ms"].push_back(figure(r.exposed_comm_s, 1000));
      if (r.step_s) {
        step_ms.push_back(*r.step_s * 1000);
        sum_step += *r.step_s;
        sum_compute += compute.value_or(0);
        sum_exposed += r.exposed_comm_s.value_or(0);
        sum_comm += r.comm_s.value_or(0);
      }
    }
    ranks.push_back(s);
    if (rank == by_rank.begin()->first) {
      last_step = steps.rbegin()->first;
      final_loss = steps.rbegin()->second.loss;
    }
    std::sort(step_ms.begin(), step_ms.end());
    auto share = [&](double x) { return sum_step > 0 ? fixed(100 * x / sum_step, 1) + "%" : std::string("-"); };
    table += "<tr><td>" + std::to_string(rank) + "</td><td>" + std::to_string(steps.size()) + "</td><td>" +
             (step_ms.empty() ? "-" : fixed(step_ms[step_ms.size() / 2], 1)) + "</td><td>" + share(sum_compute) +
             "</td><td>" + share(sum_exposed) + "</td><td>" + share(sum_comm) + "</td></tr>\n";
  }

  const std::string job = html_escape(run.job);
  std::string facts = std::to_string(run.nodes) + " node(s) x " + std::to_string(run.procs_per_node) + " worker(s)";
  if (!run.strategy.empty()) facts += ", " + html_escape(run.strategy);
  facts += " &middot; " + std::to_string(last_step) + (run.total_steps > 0 ? " of " + std::to_string(run.total_steps) : "") +
           " steps &middot; final loss " + (final_loss ? fixed(*final_loss, 4) : std::string("-")) + " &middot; " +
           html_escape(run.outcome) + " in " + seconds_text(run.elapsed_s) + " &middot; restarts: " +
           std::to_string(run.in_place_restarts) + " in place, " + std::to_string(run.gang_restarts) + " gang";

  json data = {{"job", run.job}, {"world", run.nodes * run.procs_per_node}, {"totalSteps", run.total_steps},
               {"ranks", ranks}, {"restarts", restarts}, {"stragglers", straggler_marks}};
  std::string data_text = data.dump(-1, ' ', true);  // ASCII only
  for (size_t at = 0; (at = data_text.find("</", at)) != std::string::npos; at += 3) data_text.replace(at, 2, "<\\/");

  std::string page = kReportPage;
  fill(page, "{{title}}", job + " &middot; lockstep run");
  fill(page, "{{job}}", job);
  fill(page, "{{facts}}", facts);
  fill(page, "{{stragglers}}", banner);
  fill(page, "{{table}}", table.empty() ? "<tr><td colspan=\"6\">no step was reported</td></tr>" : table);
  fill(page, "{{data}}", data_text);
  return page;
}

void write_report(const std::string& path, const RunSummary& run, const std::vector<StepRecord>& records) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << report_html(run, records);
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, path);
}

}  // namespace lockstep::cli
