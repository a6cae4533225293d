#include "lockstep_install.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "cluster_test_support.hpp"
#include "job_support.hpp"

using namespace std::chrono_literals;

namespace lockstep::test {
RunResult cluster_helm(std::vector<std::string> args) {
  args.insert(args.begin(), "helm");
  args.push_back("--kubeconfig");
  args.push_back(real_cluster()->kubeconfig());
  std::map<std::string, std::string> env;
  for (const char* d : {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"})
    env[d] = ::testing::TempDir() + "/cluster-helm/" + d;
  return run_capture(args, env, 300s);
}

std::string import_image(const std::string& name) {
  if (!real_cluster()) return "no cluster: " + real_cluster_problem();
  const std::string source = LOCKSTEP_SOURCE_DIR;
  auto path = run_capture({source + "/scripts/images.sh", "path", name}, {}, 60s);
  std::string archive = trim(path.output);
  if (!path.status.success() || !std::filesystem::exists(archive))
    return "the " + name + " image is not built (scripts/images.sh build; scripts/test.sh does it): " + path.output;
  auto imported = real_cluster()->script({"import", archive}, 5min);
  if (!imported.status.success()) return "cannot import " + archive + ": " + imported.output;
  return "";
}

std::string install_lockstep(const std::vector<std::string>& helm_sets, double* seconds) {
  if (!real_cluster()) return "no cluster: " + real_cluster_problem();
  const std::string source = LOCKSTEP_SOURCE_DIR;
  // The agent image: the operator's init container copies the agent from it into every pod
  // (Note [Agent injection]).
  for (const char* name : {"operator", "trainer", "agent"})
    if (std::string why = import_image(name); !why.empty()) return why;
  std::vector<std::string> args = {"install", "lockstep", source + "/charts/lockstep", "-n", kOperatorNamespace,
                                   "--create-namespace", "--wait", "--timeout", "180s"};
  for (const auto& s : helm_sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = cluster_helm(args);
  if (!r.status.success())
    return "helm install failed: " + r.output +
           cluster_kubectl({"-n", kOperatorNamespace, "describe", "pods"}).output;
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return "";
}

}  // namespace lockstep::test
