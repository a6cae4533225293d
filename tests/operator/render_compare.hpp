// Comparing `lockstep render`'s objects with those the operator created on a real API server
// (#44): equal but for what the server adds. Shared by operator_test (render_test.cpp) and
// kueue_test (the Workload and a queued job's pods).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "render_stream.hpp"
#include "test_util.hpp"

namespace lockstep::test::render {

using json = nlohmann::json;

// The fields the API server writes into an object that its creator did not: its own metadata,
// status, and the defaults and admission plugins' additions of a pod (each pattern a path of
// keys and [i]; a pattern matches a path and everything under it).
inline const std::vector<std::regex>& server_fields() {
  static const std::vector<std::regex> fields = [] {
    std::vector<std::regex> out;
    for (const char* p : {
             R"(metadata\.(uid|resourceVersion|creationTimestamp|generation|managedFields)\b.*)",
             R"(status\b.*)",
             // Pods: core/v1 defaults and the DefaultTolerationSeconds, ServiceAccount and
             // Priority admission plugins.
             R"(spec\.(dnsPolicy|schedulerName|terminationGracePeriodSeconds|securityContext|enableServiceLinks|preemptionPolicy|priority|serviceAccountName|serviceAccount|automountServiceAccountToken)\b.*)",
             R"(spec\.(initContainers|containers)\[\d+\]\.(terminationMessagePath|terminationMessagePolicy|imagePullPolicy|resources)\b.*)",
             R"(spec\.(initContainers|containers)\[\d+\]\.env\[\d+\]\.valueFrom\.resourceFieldRef\.divisor)",
             R"(spec\.(initContainers|containers)\[\d+\]\.ports\[\d+\]\.protocol)",
             R"(spec\.(initContainers|containers)\[\d+\]\.volumeMounts\[\d+\]\..*)",  // the token's mount
             R"(spec\.volumes\[\d+\]\..*)",  // the token's projected volume
             // Services: the allocated IPs and the defaults of a headless Service.
             R"(spec\.(clusterIPs|ipFamilies|ipFamilyPolicy|internalTrafficPolicy|sessionAffinity|type)\b.*)",
             R"(spec\.ports\[\d+\]\.(protocol|targetPort)\b.*)",
             // NetworkPolicy ports' default protocol.
             R"(spec\.ingress\[\d+\]\.ports\[\d+\]\.protocol)",
         })
      out.emplace_back(p);
    return out;
  }();
  return fields;
}

// The DefaultTolerationSeconds admission plugin's two tolerations, added to a pod that has none
// of its own for these taints.
inline bool default_tolerations(const json& v) {
  const json list = v.is_array() ? v : json::array({v});
  for (const auto& t : list)
    if (!t.is_object() || t.value("effect", "") != "NoExecute" || t.value("tolerationSeconds", 0) != 300 ||
        (t.value("key", "") != "node.kubernetes.io/not-ready" && t.value("key", "") != "node.kubernetes.io/unreachable"))
      return false;
  return true;
}

inline bool server_field(const std::string& path, const json& value) {
  static const std::regex tolerations(R"(spec\.tolerations(\[\d+\])?)");
  if (std::regex_match(path, tolerations)) return default_tolerations(value);
  for (const auto& re : server_fields())
    if (std::regex_match(path, re)) return true;
  return false;
}

// What else a test knows the cluster adds (Kueue's admission: a flavor's nodeSelector and
// tolerations), by path and value.
using Allowed = std::function<bool(const std::string& path, const json& value)>;

// What of `live` differs from `rendered`: every rendered field must be in `live` with the same
// value (an array's elements matched in order; `live` may have more, which must be the
// server's), and every field `live` has beyond them must be the server's (or `allowed`).
inline void compare(const json& rendered, const json& live, const std::string& path, std::vector<std::string>& wrong,
                    const Allowed& allowed = {}) {
  auto added = [&](const std::string& at, const json& v) { return server_field(at, v) || (allowed && allowed(at, v)); };
  if (rendered.is_object() && live.is_object()) {
    for (const auto& [k, v] : rendered.items()) {
      const std::string at = path.empty() ? k : path + "." + k;
      if (!live.contains(k)) wrong.push_back(at + ": rendered " + v.dump() + ", not on the server");
      else compare(v, live[k], at, wrong, allowed);
    }
    for (const auto& [k, v] : live.items()) {
      const std::string at = path.empty() ? k : path + "." + k;
      if (!rendered.contains(k) && !added(at, v)) wrong.push_back(at + ": on the server (" + v.dump() + "), not rendered");
    }
  } else if (rendered.is_array() && live.is_array()) {
    for (size_t i = 0; i < live.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (i < rendered.size()) compare(rendered[i], live[i], at, wrong, allowed);
      else if (!added(at, live[i]) && !added(at + ".", live[i])) wrong.push_back(at + ": on the server (" + live[i].dump() + "), not rendered");
    }
    if (rendered.size() > live.size()) wrong.push_back(path + ": " + std::to_string(rendered.size()) + " rendered, " +
                                                       std::to_string(live.size()) + " on the server");
  } else if (rendered != live) {
    wrong.push_back(path + ": rendered " + rendered.dump() + ", on the server " + live.dump());
  }
}


// `lockstep render` of `job_json` (a job as the API server returns it) with `flags`: its
// documents (none when it failed); `output` gets what it said.
inline std::vector<json> rendered(const std::string& job_json, const std::vector<std::string>& flags, std::string& output) {
  std::vector<std::string> argv = {env_or("LOCKSTEP_CLI_BIN", "lockstep"), "render"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("-");
  auto r = lockstep::run_capture(argv, {}, std::chrono::seconds(60), job_json);
  output = r.output;
  return r.status.code == 0 ? read_render_stream(r.output) : std::vector<json>{};
}

// See Note [Barrier secret]: the operator draws it, render prints a placeholder of its form. The
// rendered pod's placeholder is replaced by the live pod's secret; false when the rendered pod
// has no placeholder there.
inline bool take_secret(json& rendered_pod, const json& live_pod) {
  bool placeholder = false;
  for (auto& e : rendered_pod["spec"]["containers"][0]["env"])
    if (e.value("name", "") == lockstep::contract::kBarrierSecret) {
      placeholder = e.value("value", "") == std::string(64, '0');
      for (const auto& l : live_pod["spec"]["containers"][0]["env"])
        if (l.value("name", "") == lockstep::contract::kBarrierSecret) e["value"] = l["value"];
    }
  return placeholder;
}

// The differences, one per line ("" when none).
inline std::string differences(const json& rendered_object, const json& live, const Allowed& allowed = {}) {
  std::vector<std::string> wrong;
  compare(rendered_object, live, "", wrong, allowed);
  std::string all;
  for (const auto& w : wrong) all += "  " + w + "\n";
  return all;
}

}  // namespace lockstep::test::render
