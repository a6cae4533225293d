#include "run.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "lockstep/contract.hpp"
#include "lockstep/random.hpp"
#include "lockstep/process.hpp"
#include "lockstep/time_text.hpp"
#include "reconcile/failure_policy.hpp"
#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"
#include "report.hpp"
#include "validate.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace lockstep::cli {
namespace {

// A container's CPU quantity under resources.<which>.cpu in millicores ("500m", "2", "1.5"),
// rounded up as the downward API rounds; 0 when there is none or it is not one of those forms.
int cpu_millis(const json& ctr, const char* which) {
  if (!ctr.contains("resources") || !ctr["resources"].is_object()) return 0;
  const json& group = ctr["resources"].value(which, json::object());
  if (!group.is_object() || !group.contains("cpu")) return 0;
  const json& q = group["cpu"];
  double cores = 0;
  if (q.is_number()) {
    cores = q.get<double>();
  } else if (q.is_string()) {
    std::string text = q.get<std::string>();
    const bool milli = !text.empty() && text.back() == 'm';
    if (milli) text.pop_back();
    if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return 0;
    try {
      cores = std::stod(text) / (milli ? 1000.0 : 1.0);
    } catch (const std::exception&) {
      return 0;
    }
  }
  if (!(cores > 0) || cores > 1e5) return 0;
  return static_cast<int>(std::ceil(cores * 1000.0 - 1e-9));
}

// Where lockstep-agent and lockstep-trainer are: beside this binary (installed), or in the
// build tree's agent/ and trainer/ directories.
std::string tool_path() {
  fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  std::string path;
  for (const fs::path& d : {self, self.parent_path() / "agent", self.parent_path() / "trainer"})
    if (fs::exists(d / "lockstep-agent") || fs::exists(d / "lockstep-trainer")) path += d.string() + ":";
  const char* env = std::getenv("PATH");
  return path + (env ? env : "/usr/bin:/bin");
}

// The ETA and the run's length as the operator writes a job's ETA: "45s", "3m20s", "2h05m".
std::string fmt_duration(double s) { return time_text::compact_duration(std::llround(s)); }

// Where the pod path `path` lives, judged as the cluster would: the volume mounted at the
// longest mountPath containing it. Anything but an emptyDir (a persistentVolumeClaim,
// hostPath, nfs, csi, ...) is taken to be storage every pod of the job shares; an emptyDir,
// or no volume at all (the container's own filesystem), is each pod's own.
struct Storage {
  bool shared = false;
  std::string why;  // for the start-up line
};

Storage storage_of(const json& pod_spec, const json& container, const std::string& path) {
  std::string volume, mount;
  for (const auto& m : container.value("volumeMounts", json::array())) {
    std::string mp = m.value("mountPath", "");
    while (mp.size() > 1 && mp.back() == '/') mp.pop_back();
    const bool contains = path == mp || (path.rfind(mp == "/" ? mp : mp + "/", 0) == 0);
    if (contains && mp.size() >= mount.size()) {
      mount = mp;
      volume = m.value("name", "");
    }
  }
  if (volume.empty())
    return {false, "no volume is mounted at " + path + ", so each pod writes to its own container filesystem"};
  for (const auto& v : pod_spec.value("volumes", json::array())) {
    if (v.value("name", "") != volume) continue;
    std::string kind = "a volume";
    for (const auto& [k, _] : v.items())
      if (k != "name") kind = k;
    if (kind == "emptyDir") return {false, "volume '" + volume + "' is an emptyDir, which each pod has its own of"};
    return {true, "volume '" + volume + "' is a " + kind + ", which every pod shares"};
  }
  return {false, "volume '" + volume + "' is not among the template's volumes"};
}

// One `lockstep run`: the job's gang as process trees on this machine (one agent per node, as
// the operator makes one pod per node), node 0's output and the agents' logs followed into a
// live line, in-place and gang restarts as on a cluster, and the summary with report.html.
class LocalRun {
 public:
  LocalRun(reconcile::JobView view, std::string name)
      : view_(std::move(view)),
        name_(std::move(name)),
        run_dir_((fs::current_path() / "lockstep-runs" / name_).string()),
        steps_dir_(run_dir_ + "/steps"),
        path_(tool_path()),
        nodes_(view_.nodes),
        world_(view_.nodes * view_.procs_per_node),
        tty_(::isatty(STDOUT_FILENO)),
        step_log_(steps_dir_ + "/rank-0.jsonl"),
        events_(steps_dir_ + "/node-0.events.jsonl") {
    fs::create_directories(run_dir_);
    // Every agent appends its ranks' steps here (agent --step-log); report.html is drawn from it.
    fs::remove_all(steps_dir_);
    master_port_ = free_loopback_port();
    if (auto steps = arg_value(view_.args, "--steps")) total_steps_ = std::atoi(steps->c_str());  // --steps=N or --steps N
    for (int i = 0; i < nodes_; ++i) metrics_ports_.push_back(free_loopback_port());
    agent_port_ = free_loopback_port();
    // Stop signals are taken synchronously so Ctrl-C runs the normal shutdown below.
    sigemptyset(&stop_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_, s);
    pthread_sigmask(SIG_BLOCK, &stop_, nullptr);
    node0_log_.open(run_dir_ + "/node-0.log");
  }

  int run() {
    start_ = Clock::now();
    start_unix_ = time_text::unix_seconds();
    for (int attempt = 0;; ++attempt) {
      int out_fd = start_gang(attempt);
      if (attempt == 0) {
        std::cout << "lockstep run: " << name_ << ": " << nodes_ << " node(s) x " << view_.procs_per_node
                  << " worker(s), strategy " << view_.strategy << "; in-place restarts up to " << view_.in_place_budget()
                  << ", gang restarts up to " << view_.backoff_limit << "; logs in " << run_dir_ << std::endl;
        if (!checkpoint_note_.empty()) std::cout << "lockstep run: " << checkpoint_note_ << std::endl;
      }
      pump(out_fd);
      follow_logs(true);  // node 0's agent has gone: its last reports are in the files
      wait_gang();
      if (interrupted_ || code_ == 0 || !restart_gang(attempt)) break;
    }
    if (tty_ && !last_status_.empty()) std::cout << "\n";
    summarize();
    return interrupted_ ? 128 + interrupted_ : code_;
  }

 private:
  // The gang as the operator makes it (one "pod" per node, each an agent process tree), for
  // gang attempt `attempt`. Returns node 0's output pipe; the other nodes log to files.
  int start_gang(int attempt) {
    agents_.clear();
    int out_fd = -1;
    // See Note [Barrier secret]: one per gang attempt, as the operator draws it.
    const std::string secret = lockstep::random_hex(32);
    for (int i = 0; i < nodes_; ++i) {
      SpawnOptions so = node_process(i, attempt, secret);
      if (i == 0) {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        so.output_fd = p[1];
        agents_.push_back(Process::spawn(so));
        ::close(p[1]);
        out_fd = p[0];
      } else {
        so.output_path =
            run_dir_ + "/node-" + std::to_string(i) + (attempt ? "-attempt-" + std::to_string(attempt) : "") + ".log";
        fs::remove(so.output_path);
        agents_.push_back(Process::spawn(so));
      }
    }
    return out_fd;
  }

  // Node i's agent: the trainer container of the pod the operator would make, with loopback
  // addresses, free ports, and pod paths mapped under this run's directory.
  SpawnOptions node_process(int i, int attempt, const std::string& secret) {
    json pod = reconcile::pod_manifest(view_, i, attempt, {}, secret);
    json ctr;
    for (const auto& c : pod["spec"]["containers"])
      if (c.value("name", "") == contract::kTrainerContainer || ctr.is_null()) ctr = c;
    SpawnOptions so;
    for (const auto& a : ctr["command"]) so.argv.push_back(a);
    for (const auto& e : ctr["env"]) so.env[e["name"]] = e.value("value", "");
    // Loopback instead of the pod DNS names, and ports that are free here.
    for (const char* k : {contract::kMasterAddr, contract::kPetMasterAddr}) so.env[k] = "127.0.0.1";
    for (const char* k : {contract::kMasterPort, contract::kPetMasterPort}) so.env[k] = std::to_string(master_port_);
    so.env[contract::kMetricsPort] = std::to_string(metrics_ports_[i]);
    so.env[contract::kAgentPort] = std::to_string(agent_port_);
    // See Note [Worker threads]: what the downward API gives a pod, with this machine shared by
    // the job's nodes: the container's CPU request, and its limit or, without one, this
    // machine's cores over the nodes (a node's allocatable CPU on a cluster).
    so.env[contract::kCpuRequest] = std::to_string(cpu_millis(ctr, "requests"));
    const int limit = cpu_millis(ctr, "limits");
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    so.env[contract::kCpuLimit] = std::to_string(limit > 0 ? limit : std::max(1, cores * 1000 / nodes_));
    // The pod path, under this run's directory: as on the cluster, each node gets its own
    // directory unless the path is on a volume every pod shares, so a job that needs shared
    // storage and lacks it fails here as it would there.
    if (so.env.count(contract::kCheckpointPath)) {
      const std::string pod_path = so.env[contract::kCheckpointPath];
      const Storage st = storage_of(pod["spec"], ctr, pod_path);
      const std::string dir = run_dir_ + (st.shared ? "/shared" : "/node-" + std::to_string(i)) + pod_path;
      so.env[contract::kCheckpointPath] = dir;
      if (i == 0)
        checkpoint_note_ = st.shared ? "checkpoints in " + dir + " for every node (" + st.why + ")"
                                     : "checkpoints in " + run_dir_ + "/node-N" + pod_path + ", one per node (" + st.why + ")";
    }
    if (so.env.count(contract::kCheckpointResumeFrom)) {  // a pod path too, mapped the same way
      const std::string pod_path = so.env[contract::kCheckpointResumeFrom];
      const Storage st = storage_of(pod["spec"], ctr, pod_path);
      so.env[contract::kCheckpointResumeFrom] = run_dir_ + (st.shared ? "/shared" : "/node-" + std::to_string(i)) + pod_path;
    }
    so.env["GLOO_SOCKET_IFNAME"] = "lo";
    so.env["PATH"] = path_;
    so.new_process_group = true;
    so.argv.insert(so.argv.begin() + 1, {"--metrics-address", "127.0.0.1", "--step-log", steps_dir_});
    return so;
  }

  // Node 0's output until it closes, the logs followed meanwhile; a stop signal stops every node.
  void pump(int out_fd) {
    std::string partial;
    char buf[8192];
    while (out_fd >= 0) {
      pollfd pfd{out_fd, POLLIN, 0};
      ::poll(&pfd, 1, 200);
      timespec zero{0, 0};
      if (int sig = sigtimedwait(&stop_, nullptr, &zero); sig > 0 && !interrupted_) {
        interrupted_ = sig;
        std::cout << (tty_ ? "\n" : "") << "lockstep run: " << strsignal(sig) << ": stopping " << nodes_ << " node(s)..."
                  << std::endl;
        for (auto& a : agents_) a.signal(SIGTERM);
      }
      follow_logs(false);
      if (!(pfd.revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(out_fd, buf, sizeof buf);
      if (n <= 0) break;
      partial.append(buf, static_cast<size_t>(n));
      for (size_t pos; (pos = partial.find('\n')) != std::string::npos;) {
        echo(partial.substr(0, pos));
        partial.erase(0, pos + 1);
      }
    }
    if (out_fd >= 0) ::close(out_fd);
  }

  // A line of node 0's output: into node-0.log; on the screen the agents' own lines and
  // errors, and a rank's lines but its progress lines (which the live line shows; one reworded
  // is echoed, never lost) and the agent's straggler lines (said from the event log).
  void echo(const std::string& line) {
    node0_log_ << line << "\n";
    const bool rank_line = line.rfind("[rank ", 0) == 0;
    const bool progress_line = rank_line && line.find("] step ") != std::string::npos;
    // A straggler verdict is said once, from the event log (on_event), not in the agent's words too.
    if (line.find("lockstep-agent: straggler") != std::string::npos) return;
    if ((rank_line && !progress_line) || line.find("lockstep-agent:") != std::string::npos ||
        line.find("ERROR") != std::string::npos || line.find("error") != std::string::npos)
      say(line);
  }

  void say(const std::string& line) {
    std::cout << (tty_ && !last_status_.empty() ? "\r\033[K" : "") << line << "\n";
    if (tty_ && !last_status_.empty()) std::cout << last_status_ << std::flush;
  }

  // Note [Live line from the logs]
  // What `lockstep run` shows while a job trains comes from the agents' own records, not from
  // anyone's wording: the live line from rank 0's step log (every report its agent took,
  // docs/metrics.md, "The step log"), in-place restarts from node 0's agent's event log
  // (Note [Event log] in agent/metrics.cpp). Node 0's output goes to node-0.log; of it, only the
  // agents' own lines and errors are echoed (the trainer's progress lines are in the log).
  void follow_logs(bool last_call) {
    for (const json& e : events_.read()) on_event(e);
    std::optional<StepRecord> last;
    for (const json& j : step_log_.read())
      if (auto r = step_record(j)) last = r;
    bool at_end = false;  // the planned last step: printed at once
    if (last) {
      last_status_ = live_line(*last, &at_end);
      if (tty_) std::cout << "\r\033[K" << last_status_ << std::flush;
    }
    // A file or pipe: a line each half second, the planned last step's at once, and at the end
    // whatever the half second held back.
    if (!tty_ && !last_status_.empty() && printed_ != last_status_ &&
        (last_call || at_end || Clock::now() - last_printed_ >= std::chrono::milliseconds(500))) {
      std::cout << last_status_ << std::endl;
      last_printed_ = Clock::now();
      printed_ = last_status_;
    }
  }

  // One event of node 0's agent: an in-place restart, or a straggler verdict raised or cleared
  // (checked: straggler_event; one that fails the check is said once, and otherwise ignored).
  void on_event(const json& e) {
    namespace report = lockstep::contract::report;
    auto field = [&](const char* key) { return e.contains(key) ? e[key] : json(); };  // value() throws on a wrong type
    if (field(report::kEvent) == report::kInPlaceRestart) {
      ++in_place_restarts_;
      const json generation = field(report::kGeneration), why = field(report::kWhy);
      say("lockstep run: restarted in place (generation " + (generation.is_number_integer() ? generation.dump() : "?") +
          "): " + (why.is_string() ? why.get<std::string>() : std::string("a worker failed")));
      return;
    }
    std::string error;
    const auto s = straggler_event(e, world_, view_.procs_per_node, &error);
    if (!error.empty() && bad_events_++ < 3)
      say("lockstep run: ignored a straggler event of node 0's event log (" + error + ")");
    if (!s) return;
    auto standing = std::find_if(verdicts_.begin(), verdicts_.end(), [&](const StragglerVerdict& v) {
      return v.rank == s->verdict.rank && !v.cleared_at;
    });
    if (s->raised && standing == verdicts_.end()) {
      verdicts_.push_back(s->verdict);
      say("lockstep run: straggler: " + describe_verdict(s->verdict));
    } else if (!s->raised && standing != verdicts_.end()) {
      standing->cleared_at = std::max(s->verdict.raised_at, standing->raised_at);
      say("lockstep run: straggler cleared: rank " + std::to_string(standing->rank) + " (node " +
          std::to_string(standing->node_rank) + "), after " + fmt_duration(*standing->cleared_at - standing->raised_at));
    }
  }

  // A gang restart ends every verdict that stands: node 0's agent that judged them is gone.
  void end_verdicts(const std::string& why) {
    for (auto& v : verdicts_)
      if (!v.cleared_at) {
        v.cleared_at = std::max(v.raised_at, time_text::unix_seconds());
        v.cleared_by = why;
      }
  }

  std::string live_line(const StepRecord& last, bool* at_end) const {
    const long long step = last.step;
    const double total = last.total_steps.value_or(0) > 0 ? *last.total_steps : total_steps_;
    const double step_s = last.step_s.value_or(-1);
    *at_end = total > 0 && step >= total;
    std::ostringstream s;
    s << std::fixed << "step " << step;
    if (total > 0) s << "/" << static_cast<long long>(total);
    if (last.loss) s << std::setprecision(4) << "  loss " << *last.loss;
    if (step_s > 0 && last.tokens.value_or(0) > 0)  // a rank's tokens a step, every rank alike
      s << std::setprecision(0) << "  " << *last.tokens * world_ / step_s << " tok/s";
    if (step_s > 0) s << std::setprecision(1) << "  " << step_s * 1000 << " ms/step";
    if (step_s > 0 && last.comm_s)
      s << std::setprecision(0) << "  comm " << 100 * *last.comm_s / step_s << "% (exposed "
        << 100 * std::max(0.0, last.exposed_comm_s.value_or(0)) / step_s << "%)";
    if (total > 0 && step > 0) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
      s << "  ETA " << fmt_duration(std::max(0.0, elapsed / static_cast<double>(step) * (total - static_cast<double>(step))));
    }
    if (in_place_restarts_ + gang_restarts_ > 0)
      s << "  restarts " << in_place_restarts_ << " in place, " << gang_restarts_ << " gang";
    return s.str();
  }

  // Everyone ends: node 0 has; the rest follow (the restart barrier ends them together) or are
  // stopped. The first node to fail, in node order, names the outcome.
  void wait_gang() {
    code_ = 0;
    culprit_.clear();
    for (int i = 0; i < nodes_; ++i) {
      auto st = agents_[i].wait_for(std::chrono::seconds(interrupted_ ? 40 : 120));
      if (!st) {
        agents_[i].terminate(std::chrono::seconds(30));
        st = agents_[i].try_wait();
      }
      if (st && !st->success() && code_ == 0) {
        code_ = st->shell_code();
        culprit_ = "node " + std::to_string(i) + " " + st->describe();
      }
    }
  }

  // The operator's gang restart, locally: every agent anew, as attempt + 1 (Note [Exit codes]).
  // False when the failure is not retryable or the backoff limit is reached.
  bool restart_gang(int attempt) {
    reconcile::PodView failed;
    failed.exit_code = code_;
    const bool retryable = reconcile::is_retryable(view_.restart_policy, failed);
    if (!retryable || gang_restarts_ >= view_.backoff_limit) {
      if (retryable)
        culprit_ += "; " + std::to_string(gang_restarts_) + " gang restart(s) reached spec.runPolicy.backoffLimit=" +
                    std::to_string(view_.backoff_limit);
      return false;
    }
    ++gang_restarts_;
    end_verdicts("gang restart");
    say("lockstep run: " + culprit_ + "; restarting the gang as attempt " + std::to_string(attempt + 1) + " of " +
        std::to_string(view_.backoff_limit) + " (every node anew, as the operator recreates the pods)");
    return true;
  }

  // Every straggler verdict of the run, as node 0's agent raised and cleared it; nothing when none.
  void print_verdicts() const {
    if (verdicts_.empty()) return;
    std::cout << "\n  stragglers: " << verdicts_.size() << " verdict(s) of node 0's agent";
    for (const auto& v : verdicts_) {
      std::cout << "\n    straggler: " << describe_verdict(v) << "; raised at " << run_clock(v.raised_at - start_unix_);
      if (!v.cleared_at) std::cout << ", standing to the end";
      else std::cout << ", cleared at " << run_clock(*v.cleared_at - start_unix_) << (v.cleared_by.empty() ? "" : " (" + v.cleared_by + ")");
    }
  }

  // The last lines, from the steps as the ranks reported them (the agents' step logs: the
  // lowest rank's last step, and its first and last loss when it reports one), and report.html.
  void summarize() {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const auto records = read_step_logs(steps_dir_);
    int last_step = 0;
    std::optional<double> first_loss, last_loss;
    if (!records.empty()) {
      int lowest = records.front().rank;
      for (const auto& r : records) lowest = std::min(lowest, r.rank);
      for (const auto& r : records) {
        if (r.rank != lowest) continue;
        last_step = static_cast<int>(r.step);
        if (r.total_steps && total_steps_ == 0) total_steps_ = static_cast<int>(*r.total_steps);
        if (r.loss) {
          if (!first_loss) first_loss = r.loss;
          last_loss = r.loss;
        }
      }
    }
    std::cout << "\nlockstep run: " << name_ << " ";
    if (interrupted_) std::cout << "stopped by " << strsignal(interrupted_) << " after " << fmt_duration(elapsed);
    else if (code_ == 0) std::cout << "finished: " << last_step << " steps in " << fmt_duration(elapsed);
    else std::cout << "FAILED: " << culprit_;
    if (first_loss) std::cout << "; loss " << *first_loss << " -> " << *last_loss;
    std::cout << "\n  restarts: " << in_place_restarts_ << " in place, " << gang_restarts_ << " gang";
    print_verdicts();
    std::cout << "\n  metrics were served while it ran at";
    for (int p : metrics_ports_) std::cout << " http://127.0.0.1:" << p << "/metrics";
    std::cout << "\n  logs: " << run_dir_ << "/node-*.log";
    // The picture of the run: whatever steps exist, a failed or interrupted run's too.
    RunSummary summary;
    summary.job = name_;
    summary.strategy = view_.strategy;
    summary.nodes = nodes_;
    summary.procs_per_node = view_.procs_per_node;
    summary.total_steps = total_steps_;
    summary.outcome = interrupted_ ? std::string("stopped by ") + strsignal(interrupted_) : code_ == 0 ? "finished" : "FAILED";
    summary.elapsed_s = elapsed;
    summary.in_place_restarts = in_place_restarts_;
    summary.gang_restarts = gang_restarts_;
    summary.started_at = start_unix_;
    summary.stragglers = verdicts_;
    const std::string report_path = run_dir_ + "/report.html";
    try {
      write_report(report_path, summary, records);
      std::cout << "\n  report: " << report_path;
    } catch (const std::exception& e) {
      std::cout << "\n  report: not written (" << e.what() << ")";
    }
    std::cout << std::endl;
  }

  reconcile::JobView view_;
  std::string name_, run_dir_, steps_dir_, path_, checkpoint_note_;
  int nodes_, world_, master_port_ = 0, agent_port_ = 0, total_steps_ = 0;
  std::vector<int> metrics_ports_;
  std::vector<Process> agents_;
  sigset_t stop_{};
  bool tty_;
  std::ofstream node0_log_;
  std::string last_status_, printed_;  // the live line; the one last printed on a file or pipe
  Clock::time_point start_{}, last_printed_{};
  int in_place_restarts_ = 0, gang_restarts_ = 0, interrupted_ = 0, code_ = 0, bad_events_ = 0;
  double start_unix_ = 0;
  std::vector<StragglerVerdict> verdicts_;  // every straggler verdict of the run, in the order raised
  std::string culprit_;
  JsonLinesFollower step_log_, events_;
};

}  // namespace

int run_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: lockstep run FILE.yaml\n  Runs the TrainingJob locally: spec.nodes agents on loopback, "
                 "each launching spec.procsPerNode workers.\n  Checkpoints go under ./lockstep-runs/JOB/: one directory "
                 "per node (node-N/PATH) unless the checkpoint path\n  is on a volume every pod shares (anything but an "
                 "emptyDir), then one for all (shared/PATH).\n  At the end, ./lockstep-runs/JOB/report.html pictures the run: loss, step time, and compute "
                 "against\n  exposed communication per rank, from the agents' step logs (./lockstep-runs/JOB/steps/).\n"
                 "  A straggler named by node 0's agent (LOCKSTEP_STRAGGLER_WINDOW, _HOLD, _THRESHOLD) is said as it is\n"
                 "  judged, listed in the summary and flagged in report.html.\n";
    return args.empty() ? 2 : 0;
  }
  const std::string file = args[0];
  json job;
  try {
    job = load_yaml_file(file);
  } catch (const InputError& e) {
    std::cerr << "lockstep run: " << e.what() << "\n";
    return e.exit_code;
  }
  auto errors = validate_trainingjob(job);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << file << ": " << e << "\n";
    std::cerr << "lockstep run: " << file << " is not a valid TrainingJob (" << errors.size() << " error(s))\n";
    return 1;
  }
  // The operator's view of the job; locally the "pods" are process trees on this machine.
  const std::string name = job["metadata"]["name"];
  job["metadata"]["namespace"] = job["metadata"].value("namespace", "default");
  job["metadata"]["uid"] = "local-" + std::to_string(::getpid());
  return LocalRun(reconcile::JobView::from_json(job), name).run();
}

}  // namespace lockstep::cli
