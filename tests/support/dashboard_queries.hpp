// The PromQL of the Grafana dashboards (dashboards/*.json), as a test runs it against a real
// Prometheus: every query variable and every panel target, with Grafana's variables filled in
// and label_values() turned into PromQL Prometheus can run. Used by dashboards_test (a local
// run) and metrics_in_cluster_test (real pods).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::test {

struct DashboardQuery {
  std::string what;  // "variable NAME" or "panel 'TITLE'"
  std::string expr;  // as written in the dashboard
};

inline std::vector<DashboardQuery> dashboard_queries(const nlohmann::json& dashboard) {
  std::vector<DashboardQuery> out;
  for (const auto& v : dashboard["templating"]["list"])
    if (v.value("type", "") == "query") out.push_back({"variable " + v["name"].get<std::string>(), v["query"]["query"]});
  for (const auto& p : dashboard["panels"])
    for (const auto& t : p["targets"]) out.push_back({"panel '" + p["title"].get<std::string>() + "'", t["expr"]});
  return out;
}

// $__rate_interval as Grafana computes it for a Prometheus data source: max($__interval + the
// data source's scrape interval, 4 x the scrape interval). At Grafana's default scrape interval
// of 15 s, and $__interval at its floor (the scrape interval), that is 60 s: the window every
// rate() of the dashboards gets on a default install, and the one the tests run them with.
inline constexpr int kGrafanaScrapeIntervalS = 15;
inline constexpr int kGrafanaIntervalS = kGrafanaScrapeIntervalS;
inline int grafana_rate_interval_s(int interval_s, int scrape_interval_s) {
  return std::max(interval_s + scrape_interval_s, 4 * scrape_interval_s);
}

// Grafana's variables for one job, and label_values() as PromQL.
inline std::string fill_dashboard_query(std::string expr, const std::string& ns, const std::string& trainingjob) {
  const std::string rate = std::to_string(grafana_rate_interval_s(kGrafanaIntervalS, kGrafanaScrapeIntervalS)) + "s";
  const std::vector<std::pair<std::string, std::string>> vars = {{"$__rate_interval", rate},
                                                                 {"$__interval", std::to_string(kGrafanaIntervalS) + "s"},
                                                                 {"$namespace", ns},
                                                                 {"$trainingjob", trainingjob}, {"$rank", ".*"},
                                                                 {"$peak_tflops", "989"}};
  for (const auto& [k, v] : vars)
    for (size_t pos; (pos = expr.find(k)) != std::string::npos;) expr.replace(pos, k.size(), v);
  std::smatch m;
  if (std::regex_match(expr, m, std::regex(R"(label_values\((.*),\s*(\w+)\))")))
    return "count by (" + m[2].str() + ") (" + m[1].str() + ")";
  if (std::regex_match(expr, m, std::regex(R"(label_values\((\w+)\))"))) return "count(" + m[1].str() + ")";
  return expr;
}

}  // namespace lockstep::test
