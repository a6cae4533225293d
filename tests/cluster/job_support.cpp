#include "job_support.hpp"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using json = nlohmann::json;

namespace lockstep::test {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

json get_json(const std::string& ns, const std::string& object) {
  std::vector<std::string> args = {"get", object, "-o", "json"};
  if (!ns.empty()) args.insert(args.begin(), {"-n", ns});
  auto r = cluster_kubectl(args);
  if (!r.status.success()) return json();
  // The object alone: kubectl's warnings (stderr) share the output.
  size_t from = r.output.find('{'), to = r.output.rfind('}');
  if (from == std::string::npos || to == std::string::npos || to < from) return json();
  try {
    return json::parse(r.output.substr(from, to - from + 1));
  } catch (const json::exception&) {
    std::cerr << "[cluster] kubectl get " << object << ": not JSON: " << r.output.substr(0, 500) << "\n";
    return json();
  }
}

std::string phase(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
}

const json* condition(const json& job, const std::string& type) {
  if (!job.is_object() || !job.contains("status") || !job["status"].contains("conditions")) return nullptr;
  for (const auto& c : job["status"]["conditions"])
    if (c.value("type", "") == type) return &c;
  return nullptr;
}

int job_restarts(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  return j.is_object() && j.contains("status") && j["status"].is_object() ? j["status"].value("restarts", -1) : -1;
}

std::vector<std::string> job_events(const std::string& ns, const std::string& job) {
  std::vector<std::string> out;
  json events = get_json(ns, "events");
  for (const auto& e : events.value("items", json::array()))
    if (e["involvedObject"].value("name", "") == job) out.push_back(e.value("reason", "") + ": " + e.value("message", ""));
  return out;
}

::testing::AssertionResult no_straggler_verdict(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  if (!j.is_object()) return ::testing::AssertionFailure() << "trainingjob/" << job << " in " << ns << " cannot be read";
  std::string found;
  if (const json* c = condition(j, "Straggler")) found += "  condition " + c->dump() + "\n";
  json events = get_json(ns, "events");
  for (const auto& e : events.value("items", json::array()))
    if (e["involvedObject"].value("name", "") == job && e["involvedObject"].value("kind", "") == "TrainingJob" &&
        e.value("reason", "").rfind("Straggler", 0) == 0)
      found += "  Event " + e.value("reason", "") + ": " + e.value("message", "") + "\n";
  if (found.empty()) return ::testing::AssertionSuccess();
  // What node 0's agent said when it judged (its pod is the job's pod 0).
  std::istringstream log(cluster_kubectl({"-n", ns, "logs", "--timestamps", job + "-0"}).output);
  for (std::string line; std::getline(log, line);)
    if (line.find("straggler") != std::string::npos) found += "  " + job + "-0: " + line + "\n";
  return ::testing::AssertionFailure() << "a false straggler verdict on the healthy job " << ns << "/" << job << ":\n"
                                       << found;
}

::testing::AssertionResult wait_succeeded(const std::string& ns, const std::string& job, std::chrono::seconds timeout,
                                          bool expect_straggler) {
  std::string now;
  bool ended = eventually([&] {
    now = phase(ns, job);
    if (now == "Succeeded" || now == "Failed") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // kubectl is a process: spare the CPU
    return false;
  }, timeout);
  if (!ended || now != "Succeeded")
    return ::testing::AssertionFailure() << ns << "/" << job << " is " << (now.empty() ? "(no phase)" : now)
                                         << (ended ? "" : " after " + std::to_string(timeout.count()) + " s")
                                         << ", not Succeeded\n" << diagnose(ns);
  return expect_straggler ? ::testing::AssertionSuccess() : no_straggler_verdict(ns, job);
}

std::string diagnose(const std::string& ns) {
  std::string out = cluster_kubectl({"-n", ns, "describe", "trainingjobs"}).output;
  out += cluster_kubectl({"-n", ns, "get", "pods", "-o", "wide"}).output;
  out += cluster_kubectl({"get", "nodes"}).output;
  out += cluster_kubectl({"-n", kOperatorNamespace, "logs", "deploy/lockstep-operator", "--tail", "40"}).output;
  return out;
}

int latest_checkpoint(const std::string& dir) {
  std::string latest = trim(read_file(dir + "/LATEST"));
  return latest.rfind("step-", 0) == 0 ? std::atoi(latest.c_str() + 5) : 0;
}

std::chrono::system_clock::time_point parse_rfc3339(const std::string& t) {
  std::tm tm{};
  if (!strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return {};
  auto tp = std::chrono::system_clock::from_time_t(timegm(&tm));
  size_t dot = t.find('.');
  if (dot != std::string::npos) {
    size_t end = t.find_first_not_of("0123456789", dot + 1);
    std::string frac = t.substr(dot + 1, end - dot - 1).substr(0, 9);
    frac.resize(9, '0');
    tp += std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(std::stoll(frac)));
  }
  return tp;
}

Resume resume_of(const std::string& ns, const std::string& pod, std::chrono::system_clock::time_point since) {
  Resume r;
  auto logs = cluster_kubectl({"-n", ns, "logs", "--timestamps", pod});
  if (!logs.status.success()) return r;
  static const std::regex resumed(R"(lockstep-trainer: resumed from \S+ at step (\d+))");
  // Each line: the kubelet's timestamp, the agent's "[rank 0] " prefix, the trainer's text.
  static const std::regex stepped(R"(^(\S+) (\[rank \d+\] )?step +(\d+)/)");
  std::istringstream in(logs.output);
  bool started = false;
  for (std::string line; std::getline(in, line);) {
    // An in-place restart keeps the pod, so its log holds the generations before the fault too.
    if (parse_rfc3339(line.substr(0, line.find(' '))) < since) continue;
    std::smatch m;
    if (std::regex_search(line, m, resumed)) r.step = std::stoi(m[1]);
    else if (line.find("lockstep-trainer: tiny") != std::string::npos || line.find("parameters),") != std::string::npos)
      started = true;
    // A step counts only after the new generation said how it started: a step line of the old
    // one can carry a timestamp just after `since` (rank 0 printing a step whose all-reduce
    // finished just before its peer was killed).
    else if (std::regex_search(line, m, stepped) && !r.first_step_at && (r.step >= 0 || started)) {
      if (r.step < 0) r.step = 0;
      r.first_step_at = parse_rfc3339(m[1]);
    }
  }
  return r;
}

StepTimes step_times(const std::string& ns, const std::string& pod, std::chrono::system_clock::time_point from,
                     std::chrono::system_clock::time_point to) {
  auto logs = cluster_kubectl({"-n", ns, "logs", "--timestamps", pod});
  static const std::regex timed(R"(^(\S+) (\[rank \d+\] )?step +\d+/.* ([0-9.]+) ms/step)");
  std::vector<double> ms;
  std::istringstream in(logs.output);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, timed)) continue;
    auto at = parse_rfc3339(m[1]);
    if (at >= from && at < to) ms.push_back(std::stod(m[3]));
  }
  if (ms.empty()) return {};
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return {ms[ms.size() / 2], ms.size()};
}

// The last step rank 0 finished, from its loss log (one line per step, flushed as written).
int last_logged_step(const std::string& loss_log) {
  std::istringstream in(read_file(loss_log));
  int last = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    int step;
    if (f >> step) last = step;
  }
  return last;
}

bool recovery_bench() {
  const char* path = std::getenv("LOCKSTEP_RECOVERY_REPORT");
  return path && *path;
}

void report_recovery(const std::string& fault, int checkpoint, int at_fault, int resumed, double seconds) {
  if (!recovery_bench()) return;
  std::ofstream out(std::getenv("LOCKSTEP_RECOVERY_REPORT"), std::ios::app);
  out << fault << "\t" << checkpoint << "\t" << at_fault << "\t" << resumed << "\t" << seconds << "\n";
}

namespace {
// The loss of the last line of rank 0's loss log whose step `wanted` accepts, or -1.
double last_loss(const std::string& loss_log, const std::function<bool(long long)>& wanted) {
  std::istringstream in(read_file(loss_log));
  double loss = -1;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    long long step;
    double l;
    if (f >> step >> l && wanted(step)) loss = l;
  }
  return loss;
}
}  // namespace

double final_loss(const std::string& loss_log) {
  return last_loss(loss_log, [](long long) { return true; });
}

double loss_at(const std::string& loss_log, int step) {
  return last_loss(loss_log, [step](long long s) { return s == step; });
}

std::string checkpoint_job(const std::string& name, const std::string& dir, int steps, int in_place_restarts,
                           const std::string& cpu) {
  std::string yaml = read_file(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/ddp-checkpoint.yaml");
  auto replace = [&](const std::string& from, const std::string& to) {
    size_t at = yaml.find(from);
    if (at == std::string::npos) throw std::runtime_error("examples/ddp-checkpoint.yaml has no '" + from + "'");
    yaml.replace(at, from.size(), to);
  };
  replace("name: tiny-ddp-ckpt", "name: " + name);
  replace("/var/lib/lockstep/checkpoints/tiny-ddp-ckpt", dir);
  replace("--steps=400", "--steps=" + std::to_string(steps) + ", --log-every=1, --loss-log=/ckpt/loss.txt");
  replace("inPlaceRestarts: 3", "inPlaceRestarts: " + std::to_string(in_place_restarts));
  if (!cpu.empty()) {
    replace("requests: {cpu: 500m, memory: 2Gi}", "requests: {cpu: " + cpu + ", memory: 2Gi}");
    replace("limits: {memory: 4Gi}", "limits: {cpu: " + cpu + ", memory: 4Gi}");
  }
  replace("        volumeMounts: [{name: checkpoints, mountPath: /ckpt}]\n      volumes:",
          "        volumeMounts: [{name: checkpoints, mountPath: /ckpt}]\n"
          "        env: [{name: LOCKSTEP_STALL_TIMEOUT, value: 10s}, {name: LOCKSTEP_METRICS_LINGER, value: 1s}]\n"
          "      volumes:");
  return yaml;
}

}  // namespace lockstep::test
