// Where the API server is and how to authenticate: from a kubeconfig file or from the pod's
// service account (in-cluster), the two ways client-go finds it.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lockstep::kube {

// A configuration problem; what() names the file, the field and what would be valid.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Strict padded standard base64 (RFC 4648, section 4), as a kubeconfig's *-data fields and a
// Secret's data hold it, decoded by OpenSSL; nullopt, with `why` set, for anything else.
std::optional<std::string> decode_base64(std::string_view text, std::string* why = nullptr);

struct RestConfig {
  std::string server;            // https://host:port
  std::string ca_pem;            // CA bundle (PEM); empty: the system roots
  std::string token;             // bearer token
  std::string token_file;        // re-read on each request when set (projected tokens rotate)
  std::string client_cert_pem;   // client certificate chain (PEM)
  std::string client_key_pem;    // its private key (PEM)
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  double qps = 50;               // client-side rate limit, requests per second
  int burst = 100;               // and burst
  // Bounds a request's connect and each of its reads and writes (the leader elector's client
  // uses its renew deadline: Note [Fenced writes] in kube/leader_election.hpp).
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};

  // kubeconfig at `path`; `context` empty means current-context.
  static RestConfig from_kubeconfig(const std::string& path, const std::string& context = "");
  // The pod's service account (KUBERNETES_SERVICE_HOST/PORT and the mounted token and CA).
  static RestConfig in_cluster(const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");
  // Resolution order: explicit path, $KUBECONFIG, in-cluster, ~/.kube/config.
  static RestConfig load(const std::string& kubeconfig_path = "", const std::string& context = "");

  std::string bearer_token() const;  // token, or token_file's current content
};

}  // namespace lockstep::kube
