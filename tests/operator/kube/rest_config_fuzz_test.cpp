// Hostile kubeconfig and token files for the operator (operator/kube/rest_config.cpp), part of
// fuzz_test: each ends in a RestConfig or a ConfigError with a message; never a crash, a hang
// or another exception.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kube/rest_config.hpp"
#include "lockstep/process.hpp"
#include "fuzz_support.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

// kubeconfig (operator/kube/rest_config.cpp): hostile files end in a RestConfig or a ConfigError.
namespace {

using lockstep::test::billion_laughs;
using lockstep::test::mutate;

const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: Y2E=
    insecure-skip-tls-verify: false
contexts:
- name: c
  context: {cluster: k, user: u, namespace: ns}
users:
- name: u
  user: {token: abc}
)";

std::string kubeconfig_contract(const std::string& name, const std::string& text, const std::string& dir) {
  const std::string path = dir + "/kubeconfig";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  try {
    auto c = lockstep::kube::RestConfig::from_kubeconfig(path);
    (void)c.bearer_token();
    return "";
  } catch (const lockstep::kube::ConfigError& e) {
    return std::string(e.what()).empty() ? name + ": an empty ConfigError" : "";
  } catch (const std::exception& e) {
    return name + ": escaped as a " + typeid(e).name() + ", not a ConfigError: " + e.what();
  }
}

}  // namespace

TEST(FuzzKubeconfig, HostileCorpusEndsInAConfigOrAConfigError) {
  const std::string dir = ::testing::TempDir() + "/fuzz-kube-" + std::to_string(::getpid());
  fs::create_directories(dir);
  ASSERT_EQ(kubeconfig_contract("the valid one", kKubeconfig, dir), "");
  std::vector<std::pair<std::string, std::string>> corpus = {
      {"recursive alias", "clusters: &a [*a]\ncontexts: &b [{name: c, context: *b}]\ncurrent-context: c\n"},
      {"recursive context", "current-context: c\ncontexts: &x [{name: c, context: {cluster: *x}}]\n"},
      {"billion laughs", billion_laughs(9, 9) + "current-context: c\n"},
      {"100k deep", std::string(100000, '[') + std::string(100000, ']')},
      {"a scalar document", "just a string\n"},
      {"a list document", "- a\n- b\n"},
      {"clusters a mapping", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: {k: 1}\n"},
      {"names that are lists", "current-context: [c]\ncontexts: [{name: [c]}]\n"},
      {"server a list", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                        "clusters: [{name: k, cluster: {server: [1]}}]\n"},
      {"bad base64", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                     "clusters: [{name: k, cluster: {server: s, certificate-authority-data: \"%%%\"}}]\n"},
      {"insecure not a bool", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                              "clusters: [{name: k, cluster: {server: s, insecure-skip-tls-verify: maybe}}]\n"},
      {"certificate file is a directory", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
                                          "clusters: [{name: k, cluster: {server: s, certificate-authority: /}}]\n"},
      {"huge scalar", "current-context: " + std::string(4 * 1024 * 1024, 'c') + "\n"},
      {"binary", std::string("\x00\xff\xfe\x01[{", 6) + std::string(1000, '\x80')},
      {"invalid UTF-8", "current-context: \xc0\xaf\n"},
      {"empty", ""},
  };
  for (const auto& [name, text] : corpus) {
    SCOPED_TRACE(name);
    EXPECT_EQ(kubeconfig_contract(name, text, dir), "");
  }
  const std::string valid = kKubeconfig;
  for (size_t n = 0; n < valid.size(); ++n) {
    auto problem = kubeconfig_contract("cut at byte " + std::to_string(n), valid.substr(0, n), dir);
    EXPECT_EQ(problem, "");
    if (!problem.empty()) break;
  }
  std::mt19937 rng(7);
  int failures = 0;
  for (int i = 0; i < 2000 && failures < 5; ++i) {
    std::string text = mutate(valid, rng);
    auto problem = kubeconfig_contract("mutation " + std::to_string(i), text, dir);
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << problem << "\ninput:\n" << text;
    }
  }
  fs::remove_all(dir);
}

// Token files (a kubeconfig's tokenFile, the service account's token): read as bytes, so
// anything ends in a token or a ConfigError.
TEST(FuzzKubeconfig, HostileTokenFiles) {
  const std::string dir = ::testing::TempDir() + "/fuzz-token-" + std::to_string(::getpid());
  fs::create_directories(dir);
  lockstep::kube::RestConfig c;
  c.token_file = dir + "/token";
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"binary", std::string("\x00\x01\xff\n", 4)},
           {"invalid UTF-8", "\xc0\xaf\xed\xa0\x80"},
           {"only newlines", std::string(1000, '\n')},
           {"empty", ""},
           {"a megabyte", std::string(1 << 20, 't')}}) {
    SCOPED_TRACE(name);
    std::ofstream(c.token_file, std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_NO_THROW((void)c.bearer_token());
  }
  fs::remove(c.token_file);
  EXPECT_THROW((void)c.bearer_token(), lockstep::kube::ConfigError) << "a missing token file";
  fs::create_directories(c.token_file);  // a directory where the file should be
  try {
    std::string t = c.bearer_token();
    EXPECT_TRUE(t.empty()) << "a directory read as a token";
  } catch (const lockstep::kube::ConfigError&) {
  }
  fs::remove_all(dir);
}
