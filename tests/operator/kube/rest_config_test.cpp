// kube::RestConfig: kubeconfig parsing, and errors that name what is wrong.
#include <gtest/gtest.h>

#include <fstream>

#include "kube/client.hpp"
#include "kube/rest_config.hpp"

using lockstep::kube::ConfigError;
using lockstep::kube::RestConfig;

namespace {
std::string write(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}
const char* kConfig = R"(apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443/", certificate-authority-data: "Q0EtUEVN"}
users:
- name: tok
  user: {token: secret}
- name: cert
  user: {client-certificate: client.crt, client-key-data: S0VZ}
contexts:
- name: a
  context: {cluster: c, user: tok, namespace: team}
- name: b
  context: {cluster: c, user: cert}
current-context: a
)";
}  // namespace

TEST(RestConfig, ReadsTheCurrentContext) {
  auto c = RestConfig::from_kubeconfig(write("kc1", kConfig));
  EXPECT_EQ(c.server, "https://10.0.0.1:6443");
  EXPECT_EQ(c.ca_pem, "CA-PEM");
  EXPECT_EQ(c.token, "secret");
  EXPECT_EQ(c.default_namespace, "team");
}

TEST(RestConfig, ResolvesCertificateFilesRelativeToTheKubeconfig) {
  write("client.crt", "CERT");
  auto c = RestConfig::from_kubeconfig(write("kc2", kConfig), "b");
  EXPECT_EQ(c.client_cert_pem, "CERT");
  EXPECT_EQ(c.client_key_pem, "KEY");
  EXPECT_EQ(c.default_namespace, "default");
}

TEST(RestConfig, AMissingContextIsNamed) {
  try {
    RestConfig::from_kubeconfig(write("kc3", kConfig), "nope");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("context 'nope' not found"), std::string::npos) << e.what();
  }
}

TEST(RestConfig, AnExecPluginIsRefusedWithAReason) {
  std::string text = std::string(kConfig) + "";
  text.replace(text.find("user: {token: secret}"), 21, "user: {exec: {command: aws}}");
  try {
    RestConfig::from_kubeconfig(write("kc4", text));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exec"), std::string::npos) << e.what();
  }
}

TEST(RestConfig, BrokenYamlIsAClearError) {
  EXPECT_THROW(RestConfig::from_kubeconfig(write("kc5", "clusters: [")), ConfigError);
  EXPECT_THROW(RestConfig::from_kubeconfig("/nonexistent/kubeconfig"), ConfigError);
}

TEST(RestConfig, Base64DataMayBeWrappedOverLines) {
  std::string text = kConfig;
  text.replace(text.find("\"Q0EtUEVN\""), 10, "\"Q0Et\\nUEVN\\r\\n\"");
  EXPECT_EQ(RestConfig::from_kubeconfig(write("kc6", text)).ca_pem, "CA-PEM");
}

TEST(RestConfig, InvalidBase64NamesTheField) {
  for (const char* bad : {"Q0EtUEV", "Q0Et*EVN", "Q0=tUEVN"}) {  // unpadded, a foreign character, padding inside
    SCOPED_TRACE(bad);
    std::string text = kConfig;
    text.replace(text.find("Q0EtUEVN"), 8, bad);
    try {
      RestConfig::from_kubeconfig(write("kc7", text));
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("clusters[c].certificate-authority-data is not valid base64"),
                std::string::npos) << e.what();
    }
  }
}
