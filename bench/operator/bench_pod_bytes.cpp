// bench/operator: what one Lockstep pod costs the API server every team shares (#44 item 1).
// Against the local control plane (etcd and kube-apiserver of the pinned release):
//   1. the API server's (and etcd's) CPU per pod created, and one pod's size as stored (its
//      JSON as the server returns it, managedFields included and not), for the operator's pod
//      of an 8-node job, with the agent injected and without (the operator's --agent-image ''),
//      and as before #44's cuts (pod 0's ports on every pod; the CPU limit variable; the
//      restart settings as variables; the init container's runAsUser and runAsGroup), the
//      baselines of those cuts, rounds alternating so this shared machine's drift hits all;
//   2. the bytes each field group costs: the pod created without the group, against the whole
//      pod, both as stored, in the same run;
//   3. the defaults written out: each value the operator writes, left out in turn; where the
//      server stores the same value anyway, the operator need not write it (and its owner entry
//      in managedFields goes with it);
//   4. the pod watch in protobuf against JSON (#44 item 3): 8 watchers of each encoding (curl,
//      as a kubelet, the scheduler or an informer holds one), pods created under them, the API
//      server's CPU and the bytes per event, rounds alternating;
//   5. per pod Running: the pods of section 1 bound to KWOK's fake nodes, the API server's CPU
//      until every one is Running, and one Running pod as stored (its status included).
// Every round is printed; nothing is asserted (a benchmark, not a timed test).
// Usage: lockstep-bench-pod-bytes [--pods N] [--rounds R] [--clients C]
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "bench_util.hpp"
#include "control_plane.hpp"
#include "kwok.hpp"
#include "kube/client.hpp"
#include "kube/resource.hpp"
#include "kube/rest_config.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "pod_bench.hpp"
#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"

namespace bench = lockstep::bench;
using json = nlohmann::json;
namespace res = lockstep::kube::resources;
using namespace std::chrono_literals;
using namespace lockstep::bench::pods;  // the pod, its read-back, the control plane (pod_bench.hpp)

namespace {

json& trainer(json& pod) { return pod["spec"]["containers"][0]; }

// --- 1. CPU per pod created, with and without the agent -----------------------------------
// The pods measured: as the operator makes them (with the agent and without), and as it made
// them before #44's cuts, the baselines of those cuts in the same run: every pod listing pod 0's
// rendezvous and barrier ports (Note [Job ports]); LOCKSTEP_CPU_LIMIT beside the request the
// template sets (cpu_request_set in operator/reconcile/manifests.cpp); the in-place restart
// settings as LOCKSTEP_IN_PLACE_RESTARTS and LOCKSTEP_RESTART_POLICY rather than the agent's
// flags (Note [Agent flags]); and the agent's init container with runAsUser and runAsGroup
// 65532. The last two cuts each have a pod before it alone (the first two were measured so in
// the run before them, bench/operator/RESULTS.md).
struct Variant {
  const char* name;
  bool inject, all_ports, cpu_limit, restart_env, run_as;
};
constexpr Variant kVariants[] = {{"agent injected", true, false, false, false, false},
                                 {"agent, before #44's cuts", true, true, true, true, true},
                                 {"no agent", false, false, false, false, false},
                                 {"agent, before the flag cut", true, false, false, true, false},
                                 {"agent, before the user cut", true, false, false, false, true}};
constexpr size_t kNow = 0, kBefore = 1, kNoAgent = 2, kBeforeFlags = 3, kBeforeUser = 4;

// The pod's env entry `name`'s index, or the end.
size_t env_index(const json& env, const char* name) {
  for (size_t i = 0; i < env.size(); ++i)
    if (env[i].value("name", "") == name) return i;
  return env.size();
}

json variant_pod(const lockstep::reconcile::JobView& view, int index, const Variant& v, const std::string& ns) {
  namespace c = lockstep::contract;
  json pod = pod_of(view, index, v.inject, ns);
  json& env = trainer(pod)["env"];
  if (v.all_ports && index != 0) {
    json zero = pod_of(view, 0, v.inject, ns);
    trainer(pod)["ports"] = trainer(zero)["ports"];
  }
  if (v.cpu_limit) {
    const size_t i = env_index(env, c::kCpuRequest);
    json limit = env.at(i);
    limit["name"] = c::kCpuLimit;
    limit["valueFrom"]["resourceFieldRef"]["resource"] = "limits.cpu";
    env.insert(env.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(limit));
  }
  if (v.restart_env) {  // the flags out of the command, the variables back after the metrics port
    json& cmd = trainer(pod)["command"];
    while (cmd.size() > 1 && cmd[1] != "--") cmd.erase(1);
    const auto at = env.begin() + static_cast<std::ptrdiff_t>(env_index(env, c::kMetricsPort)) + 1;
    env.insert(at, {{{"name", c::kInPlaceRestarts}, {"value", std::to_string(view.in_place_budget())}},
                    {{"name", c::kRestartPolicy}, {"value", to_string(view.restart_policy)}}});
  }
  if (v.run_as && v.inject) {
    json& sc = pod["spec"]["initContainers"][0]["securityContext"];
    sc["runAsUser"] = 65532;
    sc["runAsGroup"] = 65532;
  }
  return pod;
}

// The agent's cost, and each cut's against its baseline: the pod now against the pod before all
// of them, and now against the pod before each of the last two alone (its own).
void print_cuts(const std::vector<std::vector<double>>& api_ms, const std::vector<Stored>& one) {
  auto line = [&](const char* what, size_t now, size_t before) {
    std::cout << "   " << what << ": x" << std::setprecision(2)
              << bench::percentile(api_ms[now], 0.5) / bench::percentile(api_ms[before], 0.5) << " API server CPU, x"
              << static_cast<double>(one[now].bytes) / static_cast<double>(one[before].bytes) << " bytes ("
              << static_cast<long>(one[before].bytes) - static_cast<long>(one[now].bytes) << " fewer)\n";
  };
  std::cout << "   agent injection: x" << std::setprecision(2)
            << bench::percentile(api_ms[kNow], 0.5) / bench::percentile(api_ms[kNoAgent], 0.5) << " API server CPU, x"
            << static_cast<double>(one[kNow].bytes) / static_cast<double>(one[kNoAgent].bytes) << " bytes\n";
  line("#44's cuts (now against before them)", kNow, kBefore);
  line("the flag cut (now against before it)", kNow, kBeforeFlags);
  line("the user cut (now against before it)", kNow, kBeforeUser);
}

void cpu_per_pod(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, int pods, int rounds, int clients) {
  const auto view = bench_job();
  std::cout << "1. the API server's CPU per pod created (" << pods << " pods a round by " << clients
            << " clients), and one pod (index 3 of 8) as stored\n";
  const size_t n = std::size(kVariants);
  std::vector<std::vector<double>> api_ms(n), etcd_ms(n);
  std::vector<Stored> one(n);
  for (int round = 1; round <= rounds && !bench::g_stop; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const Variant& v = kVariants[k];
      const std::string ns = "v" + std::to_string(k) + "-" + std::to_string(round);
      create_namespace(cp, ns);
      std::atomic<int> errors{0};
      const double api0 = bench::cpu_seconds(cp.apiserver_pid()), etcd0 = bench::cpu_seconds(cp.etcd_pid());
      const auto t0 = std::chrono::steady_clock::now();
      bench::parallel(pods, clients, [&](int i) {
        json pod = variant_pod(view, i % 8, v, ns);
        pod["metadata"]["name"] = "p-" + std::to_string(i);
        if (!client.create(res::kPods.path(ns), pod).ok()) ++errors;
      });
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double api = (bench::cpu_seconds(cp.apiserver_pid()) - api0) / pods * 1e3;
      const double etcd = (bench::cpu_seconds(cp.etcd_pid()) - etcd0) / pods * 1e3;
      api_ms[k].push_back(api);
      etcd_ms[k].push_back(etcd);
      json sample = variant_pod(view, 3, v, ns);
      sample["metadata"]["name"] = "sample";
      if (auto s = store(client, ns, sample)) one[k] = *s;
      std::cout << "   round " << round << " " << v.name << ": " << std::fixed << std::setprecision(3) << api
                << " ms API server CPU per pod, " << etcd << " ms etcd, " << std::setprecision(1) << pods / took
                << " pods/s, " << errors << " errors; one pod " << one[k].bytes << " bytes as stored ("
                << one[k].without_managed << " without managedFields)\n";
    }
  }
  for (size_t k = 0; k < n; ++k)
    std::cout << "   median " << kVariants[k].name << ": " << std::setprecision(3) << bench::percentile(api_ms[k], 0.5)
              << " ms API server CPU per pod, " << bench::percentile(etcd_ms[k], 0.5) << " ms etcd; " << one[k].bytes
              << " bytes stored\n";
  print_cuts(api_ms, one);
}

// --- 2. bytes per field group -----------------------------------------------------------
using Edit = std::function<void(json&)>;

void erase_env(json& pod, const std::function<bool(const std::string&)>& which) {
  json& env = trainer(pod)["env"];
  json kept = json::array();
  for (const auto& e : env)
    if (!which(e.value("name", ""))) kept.push_back(e);
  if (kept.empty()) trainer(pod).erase("env");
  else env = kept;
}

void field_groups(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, int rounds) {
  const auto view = bench_job();
  const std::vector<std::pair<std::string, Edit>> groups = {
      {"env: every variable", [](json& p) { trainer(p).erase("env"); }},
      {"env: PET_* (torchrun's, repeating LOCKSTEP_*)", [](json& p) { erase_env(p, [](const std::string& n) { return n.rfind("PET_", 0) == 0; }); }},
      {"env: LOCKSTEP_* but the barrier secret", [](json& p) {
         erase_env(p, [](const std::string& n) { return n.rfind("LOCKSTEP_", 0) == 0 && n != lockstep::contract::kBarrierSecret; });
       }},
      {"env: LOCKSTEP_CPU_* (downward API; the limit only without a request)", [](json& p) {
         erase_env(p, [](const std::string& n) { return n == "LOCKSTEP_CPU_REQUEST" || n == "LOCKSTEP_CPU_LIMIT"; });
       }},
      {"init container (the agent's)", [](json& p) { p["spec"].erase("initContainers"); }},
      {"the agent whole: init container, volume, mount", [](json& p) {
         p["spec"].erase("initContainers");
         p["spec"].erase("volumes");
         trainer(p).erase("volumeMounts");
       }},
      {"ports", [](json& p) { trainer(p).erase("ports"); }},
      {"securityContext (pod and containers)", [](json& p) {
         p["spec"].erase("securityContext");
         for (auto* list : {&p["spec"]["containers"], &p["spec"]["initContainers"]})
           if (list->is_array())
             for (auto& c : *list) c.erase("securityContext");
       }},
      {"labels", [](json& p) { p["metadata"].erase("labels"); }},
      {"annotations", [](json& p) { p["metadata"].erase("annotations"); }},
      {"ownerReferences", [](json& p) { p["metadata"].erase("ownerReferences"); }},
      {"hostname and subdomain", [](json& p) {
         p["spec"].erase("hostname");
         p["spec"].erase("subdomain");
       }},
      {"affinity", [](json& p) { p["spec"].erase("affinity"); }},
      {"command and args", [](json& p) {
         trainer(p).erase("command");
         trainer(p).erase("args");
       }},
  };
  std::cout << "2. bytes per field group: one pod as stored (managedFields included) without the group, against the whole pod\n";
  for (int round = 1; round <= rounds && !bench::g_stop; ++round) {
    const std::string ns = "groups-" + std::to_string(round);
    create_namespace(cp, ns);
    json whole = pod_of(view, 3, true, ns);
    whole["metadata"]["name"] = "whole";
    auto base = store(client, ns, whole);
    if (!base) {
      std::cout << "   round " << round << ": the whole pod was refused\n";
      continue;
    }
    std::cout << "   round " << round << ": the whole pod " << base->bytes << " bytes (" << base->without_managed
              << " without managedFields)\n";
    int i = 0;
    for (const auto& [name, edit] : groups) {
      json pod = whole;
      edit(pod);
      pod["metadata"]["name"] = "g-" + std::to_string(i++);
      std::string error;
      auto s = store(client, ns, pod, &error);
      if (!s) {
        std::cout << "     " << std::left << std::setw(48) << name << std::right << " refused: " << error << "\n";
        continue;
      }
      std::cout << "     " << std::left << std::setw(48) << name << std::right << std::setw(6)
                << static_cast<long>(base->bytes) - static_cast<long>(s->bytes) << " bytes (" << std::setw(5)
                << static_cast<long>(base->without_managed) - static_cast<long>(s->without_managed)
                << " of them outside managedFields), " << std::fixed << std::setprecision(1)
                << 100.0 * (static_cast<double>(base->bytes) - static_cast<double>(s->bytes)) / static_cast<double>(base->bytes)
                << "%\n";
    }
  }
}

// --- 3. defaults written out ------------------------------------------------------------
// Every leaf of `v` (objects by key, arrays by index), as a path of keys and indexes.
void leaves(const json& v, std::vector<json>& path, std::vector<std::vector<json>>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, x] : v.items()) {
      path.push_back(k);
      leaves(x, path, out);
      path.pop_back();
    }
  } else if (v.is_array() && !v.empty()) {
    for (size_t i = 0; i < v.size(); ++i) {
      path.push_back(i);
      leaves(v[i], path, out);
      path.pop_back();
    }
  } else {
    out.push_back(path);
  }
}

const json* at(const json& v, const std::vector<json>& path) {
  const json* cur = &v;
  for (const auto& k : path) {
    if (k.is_string()) {
      if (!cur->is_object() || !cur->contains(k.get<std::string>())) return nullptr;
      cur = &(*cur)[k.get<std::string>()];
    } else {
      const size_t i = k.get<size_t>();
      if (!cur->is_array() || i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    }
  }
  return cur;
}

std::string text(const std::vector<json>& path) {
  std::string s;
  for (const auto& k : path) {
    if (k.is_string()) {
      if (!s.empty()) s += '.';
      s += k.get<std::string>();
    } else {
      s += '[';
      s += std::to_string(k.get<size_t>());
      s += ']';
    }
  }
  return s;
}

void defaults_written(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client) {
  const auto view = bench_job();
  const std::string ns = "defaults";
  create_namespace(cp, ns);
  json whole = pod_of(view, 3, true, ns);
  whole["metadata"]["name"] = "whole";
  auto base = store(client, ns, whole);
  if (!base) return;
  std::vector<std::vector<json>> all;
  std::vector<json> path;
  leaves(whole["spec"], path, all);
  std::cout << "3. defaults written out: each of the " << all.size()
            << " values of the pod's spec left out in turn; those the server stores anyway\n";
  long total = 0;
  int n = 0, i = 0;
  for (const auto& p : all) {
    if (bench::g_stop) break;
    json pod = whole;
    // Erase the leaf (by key, or the array element).
    json* parent = &pod["spec"];
    for (size_t k = 0; k + 1 < p.size(); ++k) parent = p[k].is_string() ? &(*parent)[p[k].get<std::string>()] : &(*parent)[p[k].get<size_t>()];
    if (p.back().is_string()) parent->erase(p.back().get<std::string>());
    else parent->erase(p.back().get<size_t>());
    pod["metadata"]["name"] = "d-" + std::to_string(i++);
    auto s = store(client, ns, pod);
    if (!s) continue;  // required: not a default
    const json* want = at(whole["spec"], p);
    const json* got = at(s->object["spec"], p);
    if (!want || !got || *want != *got) continue;
    const long saved = static_cast<long>(base->bytes) - static_cast<long>(s->bytes);
    total += saved;
    ++n;
    std::cout << "   spec." << text(p) << " = " << want->dump() << ": the server's default; " << saved
              << " bytes as stored (managedFields included)\n";
  }
  std::cout << "   " << n << " defaults written out, " << total << " bytes together of the pod's " << base->bytes << "\n";
}

// --- 4. the pod watch in protobuf against JSON ---------------------------------------------
// `watchers` watches of one namespace's pods, each a curl asking for one encoding (what a
// kubelet, the scheduler or an informer would hold open), then `pods` pods created in it; the
// API server's CPU for the round, and the bytes each watcher received per pod. Rounds alternate.
struct WatchRound {
  double api_ms_per_pod = 0, bytes_per_event = 0;
};

WatchRound watch_round(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, const std::string& ns,
                       bool protobuf, int watchers, int pods) {
  const auto view = bench_job();
  create_namespace(cp, ns);
  const std::string accept = protobuf ? "application/vnd.kubernetes.protobuf;stream=watch" : "application/json";
  std::vector<std::unique_ptr<lockstep::Process>> curls;
  std::vector<std::string> files;
  for (int w = 0; w < watchers; ++w) {
    files.push_back(cp.dir() + "/watch-" + ns + "-" + std::to_string(w));
    lockstep::SpawnOptions so;
    so.argv = {"curl", "-sN", "--cacert", cp.ca_file(), "-H", "Authorization: Bearer " + cp.token(), "-H",
               "Accept: " + accept, "-o", files.back(), cp.server() + res::kPods.path(ns) + "?watch=1&timeoutSeconds=120"};
    curls.push_back(std::make_unique<lockstep::Process>(lockstep::Process::spawn(so)));
  }
  std::this_thread::sleep_for(1500ms);  // every watch open
  const double api0 = bench::cpu_seconds(cp.apiserver_pid());
  bench::parallel(pods, 4, [&](int i) {
    json pod = pod_of(view, i % 8, true, ns);
    pod["metadata"]["name"] = "w-" + std::to_string(i);
    client.create(res::kPods.path(ns), pod);
  });
  // Until every watcher has stopped receiving (its file no longer grows).
  auto total_bytes = [&] {
    size_t t = 0;
    for (const auto& f : files) {
      std::error_code ec;
      const auto n = std::filesystem::file_size(f, ec);
      if (!ec) t += static_cast<size_t>(n);
    }
    return t;
  };
  for (size_t last = 0, now = total_bytes();; last = now, now = total_bytes()) {
    if (now == last && now > 0) break;
    std::this_thread::sleep_for(500ms);
  }
  WatchRound r;
  r.api_ms_per_pod = (bench::cpu_seconds(cp.apiserver_pid()) - api0) / pods * 1e3;
  r.bytes_per_event = static_cast<double>(total_bytes()) / watchers / pods;
  for (auto& c : curls) c->signal(SIGTERM);
  curls.clear();
  return r;
}

void watch_encodings(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, int rounds, int watchers, int pods) {
  std::cout << "4. the pod watch: " << watchers << " watchers of one namespace in JSON against " << watchers
            << " in protobuf, " << pods << " pods created a round; the API server's CPU per pod created (the create and "
            << "every watcher's event), and the bytes a watcher receives per pod\n";
  std::map<bool, std::vector<double>> cpu, bytes;
  for (int round = 1; round <= rounds && !bench::g_stop; ++round)
    for (bool protobuf : {false, true}) {
      const auto r = watch_round(cp, client, std::string(protobuf ? "pb-" : "js-") + std::to_string(round), protobuf,
                                 watchers, pods);
      cpu[protobuf].push_back(r.api_ms_per_pod);
      bytes[protobuf].push_back(r.bytes_per_event);
      std::cout << "   round " << round << (protobuf ? " protobuf: " : " JSON:     ") << std::fixed << std::setprecision(3)
                << r.api_ms_per_pod << " ms API server CPU per pod, " << std::setprecision(0) << r.bytes_per_event
                << " bytes per event per watcher\n";
    }
  const double js = bench::percentile(cpu[false], 0.5), pb = bench::percentile(cpu[true], 0.5);
  std::cout << "   medians: JSON " << std::setprecision(3) << js << " ms, protobuf " << pb << " ms per pod (x" << std::setprecision(2)
            << pb / js << "); bytes per event x" << bench::percentile(bytes[true], 0.5) / bench::percentile(bytes[false], 0.5)
            << "\n";
}

}  // namespace

// --- 5. per pod Running, KWOK playing the kubelet -------------------------------------------
// The pods of section 1 bound straight to KWOK's fake nodes (spec.nodeName: no scheduler), each
// held Running (bench/operator/kwok.hpp): the API server's CPU from the first create until every
// pod of the round reports Running (the create, KWOK's status write, the watches both take),
// and one Running pod as stored, its status and KWOK's managedFields entry for it included.
// KWOK writes a smaller status than a kubelet does (no IPs, no image IDs, no init containers'
// statuses), so a real node's stored pod is larger by those.
int running_pods(lockstep::kube::Client& client, const std::string& ns) {
  auto r = client.get(res::kPods.path(ns) + "?fieldSelector=status.phase%3DRunning");
  return r.ok() ? static_cast<int>(r.body.value("items", json::array()).size()) : -1;
}

void per_pod_running(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, int pods, int rounds, int clients) {
  const std::string bin = bench::kwok::binary();
  std::cout << "5. the API server's CPU per pod created and Running (KWOK's fake kubelet, " << pods
            << " pods a round by " << clients << " clients), and one Running pod as stored\n";
  if (!std::filesystem::exists(bin)) {
    std::cout << "   SKIPPED: kwok not found at " << bin << " (LOCKSTEP_KWOK_BIN; scripts/setup.sh builds it)\n";
    return;
  }
  constexpr int kNodes = 4;
  lockstep::Process kwok;
  try {
    bench::kwok::create_nodes(client, kNodes);
    kwok = bench::kwok::start(bin, cp, bench::kwok::stages(std::chrono::hours(24)), kNodes, client);
  } catch (const std::exception& e) {
    std::cout << "   not measured: " << e.what() << "\n";
    return;
  }
  const auto view = bench_job();
  const size_t n = std::size(kVariants);
  std::vector<std::vector<double>> api_ms(n);
  std::vector<Stored> one(n);
  for (int round = 1; round <= rounds && !bench::g_stop; ++round) {
    for (size_t k = 0; k < n && !bench::g_stop; ++k) {
      const Variant& v = kVariants[k];
      const std::string ns = "run" + std::to_string(k) + "-" + std::to_string(round);
      create_namespace(cp, ns);
      std::atomic<int> errors{0};
      auto make = [&](int i) {
        json pod = variant_pod(view, i % 8, v, ns);
        pod["metadata"]["name"] = "p-" + std::to_string(i);
        pod["metadata"]["labels"][bench::kwok::kHoldLabel] = "true";
        pod["spec"]["nodeName"] = "kwok-node-" + std::to_string(i % kNodes);
        return pod;
      };
      const double api0 = bench::cpu_seconds(cp.apiserver_pid());
      const auto t0 = std::chrono::steady_clock::now();
      bench::parallel(pods, clients, [&](int i) {
        if (!client.create(res::kPods.path(ns), make(i)).ok()) ++errors;
      });
      int running = 0;
      while (!bench::g_stop && (running = running_pods(client, ns)) < pods - errors &&
             std::chrono::steady_clock::now() - t0 < 120s)
        std::this_thread::sleep_for(500ms);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double api = (bench::cpu_seconds(cp.apiserver_pid()) - api0) / pods * 1e3;
      api_ms[k].push_back(api);
      if (auto s = read_back(client, ns, "p-3")) one[k] = *s;
      std::cout << "   round " << round << " " << v.name << ": " << std::fixed << std::setprecision(3) << api
                << " ms API server CPU per pod created and Running, " << running << " of " << pods << " Running in "
                << std::setprecision(1) << took << " s, " << errors << " errors; one Running pod " << one[k].bytes
                << " bytes as stored (" << one[k].without_managed << " without managedFields)\n";
    }
  }
  for (size_t k = 0; k < n; ++k)
    std::cout << "   median " << kVariants[k].name << ": " << std::setprecision(3) << bench::percentile(api_ms[k], 0.5)
              << " ms API server CPU per pod created and Running; " << one[k].bytes << " bytes stored\n";
  print_cuts(api_ms, one);
  kwok.terminate(std::chrono::seconds(5));
}

int main(int argc, char** argv) {
  bench::catch_stop_signals();
  int pods = 400, rounds = 3, clients = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::stoi(argv[++i]);
    };
    if (a == "--pods") pods = value();
    else if (a == "--rounds") rounds = value();
    else if (a == "--clients") clients = value();
    else {
      std::cerr << "usage: lockstep-bench-pod-bytes [--pods N] [--rounds R] [--clients C]\n";
      return 2;
    }
  }
  auto cp = start_control_plane();
  lockstep::kube::Client client(unlimited_client(*cp));
  std::cout << "lockstep-bench-pod-bytes: the operator's pod of an 8-node job (examples/ddp.yaml's template), "
            << "kube-apiserver at " << cp->server() << "\n";
  cpu_per_pod(*cp, client, pods, rounds, clients);
  if (!bench::g_stop) field_groups(*cp, client, 2);
  if (!bench::g_stop) defaults_written(*cp, client);
  if (!bench::g_stop) watch_encodings(*cp, client, rounds, 8, pods / 2);
  if (!bench::g_stop) per_pod_running(*cp, client, pods / 2, rounds, clients);
  return bench::g_stop ? 130 : 0;
}
