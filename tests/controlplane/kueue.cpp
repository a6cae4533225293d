#include "kueue.hpp"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "control_plane.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace lockstep::test {
namespace {

std::string env_dir(const std::string& given) {
  if (!given.empty()) return given;
  const char* d = std::getenv("LOCKSTEP_KUEUE_DIR");
  return d ? d : "";
}

std::string base64_file(const std::string& path) {
  auto r = run_capture({"base64", "-w0", path});
  if (!r.status.success()) throw std::runtime_error("base64 " + path + ": " + r.output);
  return r.output;
}

RunResult kubectl_at(const std::string& kubeconfig, std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), "kubectl");
  return run_capture(args, {{"KUBECONFIG", kubeconfig}}, 2min, input);
}

// A string list of a webhook's YAML, as JSON.
json strings(const YAML::Node& n) {
  json out = json::array();
  if (n && n.IsSequence())
    for (const auto& v : n) out.push_back(v.as<std::string>());
  return out;
}

// Kueue's webhook configurations (config/components/webhook/manifests.yaml) with only the
// webhooks of its own kinds, each called by URL on loopback with our CA. Every field is
// rebuilt with its JSON type (a YAML scalar does not say whether "10" is a number).
std::vector<json> webhook_configurations(const std::string& manifests, const std::string& prefix, int port,
                                         const std::string& ca_bundle) {
  std::vector<json> out;
  for (const auto& doc : YAML::LoadAllFromFile(manifests)) {
    if (!doc || !doc["kind"]) continue;
    json cfg = {{"apiVersion", "admissionregistration.k8s.io/v1"},
                {"kind", doc["kind"].as<std::string>()},
                {"metadata", {{"name", prefix + doc["metadata"]["name"].as<std::string>()}}},
                {"webhooks", json::array()}};
    for (const auto& w : doc["webhooks"]) {
      bool kueue_kind = false;
      json rules = json::array();
      for (const auto& r : w["rules"]) {
        json rule = {{"apiGroups", strings(r["apiGroups"])}, {"apiVersions", strings(r["apiVersions"])},
                     {"operations", strings(r["operations"])}, {"resources", strings(r["resources"])}};
        for (const auto& g : rule["apiGroups"]) kueue_kind |= g == "kueue.x-k8s.io";
        rules.push_back(std::move(rule));
      }
      if (!kueue_kind) continue;
      const std::string path = w["clientConfig"]["service"]["path"].as<std::string>();
      cfg["webhooks"].push_back({{"name", w["name"].as<std::string>()},
                                 {"admissionReviewVersions", strings(w["admissionReviewVersions"])},
                                 {"clientConfig", {{"url", "https://127.0.0.1:" + std::to_string(port) + path},
                                                   {"caBundle", ca_bundle}}},
                                 {"failurePolicy", w["failurePolicy"] ? w["failurePolicy"].as<std::string>() : "Fail"},
                                 {"sideEffects", w["sideEffects"] ? w["sideEffects"].as<std::string>() : "None"},
                                 {"timeoutSeconds", 10},
                                 {"rules", rules}});
    }
    if (!cfg["webhooks"].empty()) out.push_back(std::move(cfg));
  }
  return out;
}

}  // namespace

std::string Kueue::missing(const std::string& kueue_dir) {
  std::string dir = env_dir(kueue_dir);
  if (dir.empty()) return "LOCKSTEP_KUEUE_DIR is not set (scripts/test.sh sets it; scripts/setup.sh builds Kueue)";
  if (access((dir + "/bin/kueue").c_str(), X_OK) != 0) return dir + "/bin/kueue is not built (scripts/setup.sh)";
  if (!fs::exists(dir + "/config/webhooks.yaml")) return dir + "/config is incomplete (scripts/setup.sh)";
  if (!fs::exists("/etc/kueue/metrics/certs/tls.crt"))
    return "/etc/kueue/metrics/certs/tls.crt is missing (scripts/setup.sh puts it there: Note [Kueue's fixed "
           "certificate path])";
  return "";
}

std::unique_ptr<Kueue> Kueue::start(const std::string& kubeconfig, KueueOptions o) {
  const std::string kdir = env_dir(o.kueue_dir);
  if (auto why = missing(kdir); !why.empty()) throw std::runtime_error("Kueue: " + why);
  std::unique_ptr<Kueue> k(new Kueue());
  static int started = 0;
  k->kubeconfig_ = kubeconfig;
  k->webhook_prefix_ = "lockstep-test-" + std::to_string(::getpid()) + "-" + std::to_string(++started) + "-";
  if (o.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = (tmp && *tmp ? tmp : "/tmp") + std::string("/lockstep-kueue.XXXXXX");
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("Kueue: cannot make a directory under " + t);
    o.dir = buf.data();
  }
  fs::create_directories(o.dir + "/certs");
  k->dir_ = o.dir;
  k->log_ = o.dir + "/kueue.log";
  const std::string certs = o.dir + "/certs";

  // The webhooks' serving certificate, for 127.0.0.1, from a CA of our own.
  auto pki = run_capture(
      {"sh", "-ec",
       "cd '" + certs + "'\n"
       "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt "
       "-days 2 -subj /CN=lockstep-test-kueue-ca 2>/dev/null\n"
       "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout tls.key -out tls.csr "
       "-subj /CN=127.0.0.1 2>/dev/null\n"
       "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.cnf\n"
       "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.cnf "
       "-out tls.crt 2>/dev/null\n"});
  if (!pki.status.success()) throw std::runtime_error("Kueue: making its webhook certificate failed: " + pki.output);
  const std::string ca_bundle = base64_file(certs + "/ca.crt");
  const int webhook_port = free_loopback_port(), health_port = free_loopback_port();

  // Its CRDs (server-side: the Workload CRD is too big for kubectl's last-applied annotation),
  // then the conversion webhook on those that serve more than one version.
  auto crds = kubectl_at(kubeconfig, {"apply", "--server-side", "--force-conflicts", "-f", kdir + "/config/crd"});
  if (!crds.status.success()) throw std::runtime_error("Kueue: applying its CRDs failed: " + crds.output);
  for (const auto& entry : fs::directory_iterator(kdir + "/config/crd")) {
    YAML::Node crd = YAML::LoadFile(entry.path().string());
    if (!crd["spec"] || crd["spec"]["versions"].size() < 2) continue;
    json patch = {{"spec", {{"conversion", {{"strategy", "Webhook"},
                                             {"webhook", {{"conversionReviewVersions", {"v1"}},
                                                          {"clientConfig", {{"url", "https://127.0.0.1:" + std::to_string(webhook_port) + "/convert"},
                                                                            {"caBundle", ca_bundle}}}}}}}}}};
    auto r = kubectl_at(kubeconfig, {"patch", "crd", crd["metadata"]["name"].as<std::string>(), "--type=merge", "-p",
                                     patch.dump()});
    if (!r.status.success()) throw std::runtime_error("Kueue: setting the conversion webhook failed: " + r.output);
  }
  auto established = kubectl_at(kubeconfig, {"wait", "--for=condition=Established", "--timeout=60s",
                                             "crd/workloads.kueue.x-k8s.io", "crd/clusterqueues.kueue.x-k8s.io",
                                             "crd/localqueues.kueue.x-k8s.io", "crd/resourceflavors.kueue.x-k8s.io"});
  if (!established.status.success()) throw std::runtime_error("Kueue: its CRDs are not established: " + established.output);

  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  for (auto& cfg : webhook_configurations(kdir + "/config/webhooks.yaml", k->webhook_prefix_, webhook_port, ca_bundle))
    list["items"].push_back(std::move(cfg));
  auto hooks = kubectl_at(kubeconfig, {"apply", "-f", "-"}, list.dump());
  if (!hooks.status.success()) throw std::runtime_error("Kueue: registering its webhooks failed: " + hooks.output);

  std::ofstream(o.dir + "/config.yaml")
      << "apiVersion: config.kueue.x-k8s.io/v1beta2\n"
         "kind: Configuration\n"
         "health:\n  healthProbeBindAddress: 127.0.0.1:" << health_port << "\n"
         "metrics:\n  bindAddress: \"0\"\n"
         "webhook:\n  host: 127.0.0.1\n  port: " << webhook_port << "\n  certDir: " << certs << "\n"
         "leaderElection:\n  leaderElect: false\n"
         "internalCertManagement:\n  enable: false\n"
         "manageJobsWithoutQueueName: false\n"
         "waitForPodsReady:\n"
         "  timeout: " << o.pods_ready_timeout.count() << "s\n"
         "  blockAdmission: false\n"
         "  requeuingStrategy:\n"
         "    timestamp: Eviction\n"
         "    backoffBaseSeconds: " << o.requeue_backoff_base_seconds << "\n"
         "    backoffMaxSeconds: " << o.requeue_backoff_max_seconds << "\n"
         "integrations:\n"
         "  frameworks: []\n"
         "  externalFrameworks:\n  - \"TrainingJob.v1alpha1.lockstep.dev\"\n";

  SpawnOptions so;
  so.argv = {kdir + "/bin/kueue", "--config=" + o.dir + "/config.yaml", "--feature-gates=VisibilityOnDemand=false"};
  so.env = {{"KUBECONFIG", kubeconfig}};
  so.output_path = k->log_;
  so.new_process_group = true;
  k->proc_ = Process::spawn(so);

  // Ready: its probe answers, and a dry-run create goes through its webhooks.
  const auto deadline = std::chrono::steady_clock::now() + o.startup_timeout;
  const std::string probe = "http://127.0.0.1:" + std::to_string(health_port) + "/readyz";
  const std::string flavor = R"({"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"lockstep-readiness-probe"}})";
  for (;;) {
    if (!k->proc_.running())
      throw std::runtime_error("Kueue exited at start; the end of its log (" + k->log_ + "):\n" + tail_file(k->log_));
    auto ready = run_capture({"curl", "-sf", "-o", "/dev/null", probe}, {}, 5s);
    if (ready.status.success()) {
      auto dry = kubectl_at(kubeconfig, {"create", "--dry-run=server", "-f", "-"}, flavor);
      if (dry.status.success()) break;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("Kueue was not ready within " + std::to_string(o.startup_timeout.count()) +
                               " s; the end of its log (" + k->log_ + "):\n" + tail_file(k->log_));
    std::this_thread::sleep_for(250ms);
  }
  return k;
}

bool Kueue::running() { return proc_.running(); }

void Kueue::stop() {
  if (stopped_) return;
  stopped_ = true;
  proc_.terminate(10s);
  for (const char* kind : {"mutatingwebhookconfiguration", "validatingwebhookconfiguration"}) {
    std::string name = webhook_prefix_ + (std::string(kind)[0] == 'm' ? "mutating" : "validating") +
                       "-webhook-configuration";
    kubectl_at(kubeconfig_, {"delete", kind, name, "--ignore-not-found", "--wait=false"});
  }
}

Kueue::~Kueue() { stop(); }

}  // namespace lockstep::test
