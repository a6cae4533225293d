// What the operator suites and chart_test take from the Helm chart: helm itself; the
// operator's identity as the chart makes it, for the suites that run the operator under the
// chart's own RBAC (operator_hostile_test, kueue_test, tenant_hostile_test), with one source of
// truth for the rules, charts/lockstep/templates/rbac.yaml, rendered by helm as chart_test
// does; and the chart's memory limit, which the memory bounds of the hostile suites are
// measured against.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <sys/types.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kube_test_support.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"
#include "test_util.hpp"

namespace lockstep::test {

// helm with its caches in the test's temporary directory, against the suite's control plane.
inline RunResult helm(std::vector<std::string> args) {
  using namespace std::chrono_literals;
  args.insert(args.begin(), "helm");
  std::map<std::string, std::string> env;
  if (control_plane()) env["KUBECONFIG"] = control_plane()->kubeconfig();
  env["HELM_CACHE_HOME"] = ::testing::TempDir() + "/helm-cache";
  env["HELM_CONFIG_HOME"] = ::testing::TempDir() + "/helm-config";
  env["HELM_DATA_HOME"] = ::testing::TempDir() + "/helm-data";
  return run_capture(args, env, 120s);
}

struct ChartIdentity {
  std::string user;        // system:serviceaccount:<ns>:<release>-operator
  std::string kubeconfig;  // a kubeconfig with that ServiceAccount's token
  std::string release;
};

struct ChartIdentityOptions {
  std::vector<std::string> set;  // helm --set values, e.g. "kueue.enabled=true"
  std::string drop_resource;     // leave the ClusterRole's rules for this resource out (a negative control)
};

// The chart's ServiceAccount, ClusterRoles, Roles and their bindings for helm release `release`
// in namespace `ns` (created if missing), applied; and a kubeconfig that speaks as it.
inline ChartIdentity chart_identity(const std::string& release, const std::string& ns, const ChartIdentityOptions& o = {}) {
  std::vector<std::string> args = {"template", release, source_path("charts/lockstep"), "-n", ns};
  for (const auto& s : o.set) args.insert(args.end(), {"--set", s});
  auto t = helm(args);
  if (!t.status.success()) throw std::runtime_error("helm template: " + t.output);
  kubectl({"create", "namespace", ns});  // already there: fine
  std::string manifests;
  for (YAML::Node doc : YAML::LoadAll(t.output)) {
    if (!doc || !doc["kind"]) continue;
    const std::string kind = doc["kind"].as<std::string>();
    if (kind != "ServiceAccount" && kind.find("Role") == std::string::npos) continue;
    if (kind == "ClusterRole" && !o.drop_resource.empty()) {
      YAML::Node kept(YAML::NodeType::Sequence);
      for (const auto& rule : doc["rules"]) {
        bool drop = false;
        for (const auto& r : rule["resources"]) drop |= r.as<std::string>() == o.drop_resource;
        if (!drop) kept.push_back(rule);
      }
      doc["rules"] = kept;
    }
    YAML::Emitter out;
    out << doc;
    manifests += std::string("---\n") + out.c_str() + "\n";
  }
  auto a = kubectl({"apply", "-f", "-"}, manifests);
  if (!a.status.success()) throw std::runtime_error("kubectl apply of the chart's RBAC: " + a.output);
  const std::string sa = release + "-operator";
  ChartIdentity id{"system:serviceaccount:" + ns + ":" + sa, ::testing::TempDir() + "/" + release + "-kubeconfig", release};
  service_account_kubeconfig(ns, sa, id.kubeconfig);
  return id;
}

// The chart's memory limit for the operator (charts/lockstep/values.yaml), in bytes.
inline double chart_memory_limit() {
  YAML::Node values = YAML::LoadFile(source_path("charts/lockstep/values.yaml"));
  std::string v = values["resources"]["limits"]["memory"].as<std::string>();
  double n = std::stod(v);
  if (v.find("Gi") != std::string::npos) return n * 1024 * 1024 * 1024;
  if (v.find("Mi") != std::string::npos) return n * 1024 * 1024;
  throw std::runtime_error("values.yaml resources.limits.memory: unexpected unit in '" + v + "'");
}

// kB of a /proc/PID/status line (VmRSS, VmHWM), as bytes; -1 if absent.
inline double proc_status_bytes(pid_t pid, const std::string& field) {
  const long kib = proc_status(pid, field);
  return kib < 0 ? -1 : static_cast<double>(kib) * 1024;
}

}  // namespace lockstep::test
