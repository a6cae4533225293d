#include "kube/rest_config.hpp"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace lockstep::kube {
namespace {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read " + what + " '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A kubeconfig's *-data field. Line breaks and spaces are ignored (a wrapped value);
// otherwise the encoding is strict (padded standard base64), as client-go's.
std::string base64_decode(const std::string& in, const std::string& field) {
  std::string compact;
  for (unsigned char c : in)
    if (!std::isspace(c)) compact += static_cast<char>(c);
  std::string why;
  auto bytes = decode_base64(compact, &why);
  if (!bytes)
    throw ConfigError(field + " is not valid base64 (" + why + "); expected the padded standard encoding, "
                      "as `base64 -w0 FILE` prints it");
  return *bytes;
}

// A file path in a kubeconfig is relative to the kubeconfig's directory.
std::string resolve_path(const std::string& p, const std::string& kubeconfig) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(kubeconfig).parent_path() / p).string();
}

YAML::Node find_named(const YAML::Node& list, const std::string& name, const std::string& what,
                      const std::string& path) {
  if (list && list.IsSequence())
    for (const auto& item : list)
      if (item["name"] && item["name"].as<std::string>() == name) return item;
  throw ConfigError(path + ": " + what + " '" + name + "' not found");
}

// PEM from `<field>-data` (base64) or `<field>` (a file path).
std::string pem(const YAML::Node& node, const std::string& field, const std::string& kubeconfig,
                const std::string& where) {
  if (node[field + "-data"])
    return base64_decode(node[field + "-data"].as<std::string>(), kubeconfig + ": " + where + "." + field + "-data");
  if (node[field]) return read_file(resolve_path(node[field].as<std::string>(), kubeconfig), where + "." + field);
  return "";
}

}  // namespace

std::optional<std::string> decode_base64(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<std::string> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text.size() % 4 != 0) return fail("its length, " + std::to_string(text.size()) + ", is not a multiple of 4");
  const size_t pad = text.size() >= 2 && text.substr(text.size() - 2) == "==" ? 2 : !text.empty() && text.back() == '=' ? 1 : 0;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (!std::isalnum(c) && c != '+' && c != '/')
      return fail(c == '=' ? "padding before the end" : "a character outside the alphabet at offset " + std::to_string(i));
  }
  // OpenSSL's decoder (the alphabet checked above): 3 bytes for each 4 characters, the padding
  // decoded as zero bytes, which are dropped.
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) != out.size()) return fail("OpenSSL could not decode it");
  out.resize(out.size() - pad);
  return out;
}

// A function-try-block: a field of the wrong shape (a list where a name belongs, a scalar
// document) makes yaml-cpp throw from any lookup below; it becomes a ConfigError naming the file.
RestConfig RestConfig::from_kubeconfig(const std::string& path, const std::string& context_name) try {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError("cannot read kubeconfig '" + path + "'");
  } catch (const YAML::Exception& e) {
    throw ConfigError("kubeconfig '" + path + "' is not valid YAML: " + e.what());
  }
  std::string ctx_name = context_name;
  if (ctx_name.empty()) {
    if (!root["current-context"]) throw ConfigError(path + ": no current-context and no --context given");
    ctx_name = root["current-context"].as<std::string>();
  }
  YAML::Node ctx = find_named(root["contexts"], ctx_name, "context", path)["context"];
  if (!ctx || !ctx["cluster"]) throw ConfigError(path + ": context '" + ctx_name + "' has no cluster");
  std::string cluster_name = ctx["cluster"].as<std::string>();
  YAML::Node cluster = find_named(root["clusters"], cluster_name, "cluster", path)["cluster"];
  RestConfig c;
  if (!cluster || !cluster["server"]) throw ConfigError(path + ": cluster '" + cluster_name + "' has no server");
  c.server = cluster["server"].as<std::string>();
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  c.ca_pem = pem(cluster, "certificate-authority", path, "clusters[" + cluster_name + "]");
  if (cluster["insecure-skip-tls-verify"]) c.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>();
  if (ctx["namespace"]) c.default_namespace = ctx["namespace"].as<std::string>();
  if (ctx["user"]) {
    std::string user_name = ctx["user"].as<std::string>();
    YAML::Node user = find_named(root["users"], user_name, "user", path)["user"];
    if (user) {
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) c.token_file = resolve_path(user["tokenFile"].as<std::string>(), path);
      c.client_cert_pem = pem(user, "client-certificate", path, "users[" + user_name + "]");
      c.client_key_pem = pem(user, "client-key", path, "users[" + user_name + "]");
      if (c.client_cert_pem.empty() != c.client_key_pem.empty())
        throw ConfigError(path + ": user '" + user_name + "' needs both client-certificate and client-key");
      if (user["exec"] || user["auth-provider"])
        throw ConfigError(path + ": user '" + user_name +
                          "' uses an exec or auth-provider plugin, which lockstep does not run; "
                          "use a token, tokenFile or client certificate");
    }
  }
  return c;
} catch (const YAML::Exception& e) {
  throw ConfigError("kubeconfig '" + path + "' line " + std::to_string(e.mark.line + 1) + ": " + e.msg +
                    " (expected the kubeconfig format: clusters, contexts and users lists of named entries)");
}

RestConfig RestConfig::in_cluster(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port)
    throw ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset");
  RestConfig c;
  std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_pem = read_file(sa_dir + "/ca.crt", "service-account CA");
  std::ifstream ns(sa_dir + "/namespace");
  if (ns) std::getline(ns, c.default_namespace);
  (void)c.bearer_token();  // fail now, not on the first request, if the token is missing
  return c;
}

RestConfig RestConfig::load(const std::string& kubeconfig_path, const std::string& context) {
  if (!kubeconfig_path.empty()) return from_kubeconfig(kubeconfig_path, context);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    std::string first = env;
    first = first.substr(0, first.find(':'));
    return from_kubeconfig(first, context);
  }
  if (std::getenv("KUBERNETES_SERVICE_HOST")) return in_cluster();
  const char* home = std::getenv("HOME");
  std::string def = std::string(home ? home : "") + "/.kube/config";
  if (fs::exists(def)) return from_kubeconfig(def, context);
  throw ConfigError("no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a pod, "
                    "or create ~/.kube/config");
}

std::string RestConfig::bearer_token() const {
  if (token_file.empty()) return token;
  std::string t = read_file(token_file, "token file");
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

}  // namespace lockstep::kube
