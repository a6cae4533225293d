// bench/goodput (#14): how much of the wall time a job spends on useful steps when a rank is
// SIGKILLed every K seconds of training (the first K s after the first step, each next one K s
// after every rank is stepping again: failures strike a job while it trains), for in-place restarts (the agents restart every worker in the same
// processes' pods: runPolicy.inPlaceRestarts) against pod recreation (inPlaceRestarts 0: every
// failure is a gang restart, as the operator recreates the pods), and a run without faults, all
// in the same run, on one tier:
//   --tier local    `lockstep run` (agents as local processes; the gang restart re-spawns them)
//   --tier cluster  the real-node cluster of scripts/cluster.sh, with the operator installed
//                   (bench/goodput/run.sh cluster sets it up)
// The job is examples/ddp-checkpoint.yaml (2 nodes x 1 rank, tiny GPT) with --steps and a
// checkpoint every --checkpoint-every steps. Rank 0 logs every step's loss to a file on the
// host; the bench timestamps each line as it appears (20 ms polls). Per failure: recovery =
// from the kill to rank 0's first step after the new rank 0 started (DDP steps only when every
// rank takes part, so that is every rank stepping again); steps redone = the last step before
// the kill less the step resumed from. Goodput = productive step time / wall time, where
// productive step time = the job's steps x the run's steady step time (the time per step over
// its stretches without a restart, its checkpoints included, as a run without faults has
// them), and wall time runs from the job's submission to its end (start-up included, for
// every mode alike). Steps redone, restarts and start-ups are what it loses.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "bench_util.hpp"
#include "lockstep/process.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

using lockstep::bench::g_stop;

struct Options {
  std::string tier = "local";
  double every_s = 60;
  int steps = 3000;
  int checkpoint_every = 20;
  unsigned seed = 1;
  std::string kubeconfig, volume_dir;  // cluster tier: where hostPath volumes may live
  std::string modes = "in-place,recreate,none";
};

[[noreturn]] void usage(const std::string& error) {
  std::cerr << "bench_goodput: " << error << "\n"
            << "usage: lockstep-bench-goodput [--tier local|cluster] [--every SECONDS] [--steps N]\n"
               "         [--checkpoint-every N] [--seed N] [--modes in-place,recreate,none]\n"
               "         [--kubeconfig FILE --volume-dir DIR]   (cluster tier)\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--tier") o.tier = value();
      else if (a == "--every") o.every_s = std::stod(value());
      else if (a == "--steps") o.steps = std::stoi(value());
      else if (a == "--checkpoint-every") o.checkpoint_every = std::stoi(value());
      else if (a == "--seed") o.seed = static_cast<unsigned>(std::stoul(value()));
      else if (a == "--modes") o.modes = value();
      else if (a == "--kubeconfig") o.kubeconfig = value();
      else if (a == "--volume-dir") o.volume_dir = value();
      else usage("unknown flag " + a);
    } catch (const std::invalid_argument&) {
      usage(a + " expects a number");
    }
  }
  if (o.tier != "local" && o.tier != "cluster") usage("--tier must be local or cluster, got " + o.tier);
  if (o.every_s < 5) usage("--every must be at least 5 seconds");
  if (o.steps < 50 || o.checkpoint_every < 1) usage("--steps must be at least 50 and --checkpoint-every at least 1");
  if (o.tier == "cluster" && (o.kubeconfig.empty() || o.volume_dir.empty()))
    usage("--tier cluster needs --kubeconfig and --volume-dir (bench/goodput/run.sh sets them)");
  return o;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The lockstep-trainer processes of job `name`, by RANK, seen from the host (on the cluster
// tier too: the containers' processes are this machine's).
std::map<int, pid_t> trainers(const std::string& name) {
  std::map<int, pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream c(e.path() / "cmdline");
    std::string argv0;
    std::getline(c, argv0, '\0');
    if (argv0.size() < 16 || argv0.compare(argv0.size() - 16, 16, "lockstep-trainer") != 0) continue;
    std::ifstream env(e.path() / "environ");
    std::string var;
    bool ours = false;
    int rank = -1;
    while (std::getline(env, var, '\0')) {
      if (var == "LOCKSTEP_JOB_NAME=" + name) ours = true;
      if (var.rfind("RANK=", 0) == 0) rank = std::atoi(var.c_str() + 5);
    }
    char state = 0;
    {
      std::ifstream st(e.path() / "stat");
      std::string s((std::istreambuf_iterator<char>(st)), {});
      auto close = s.rfind(')');
      if (close != std::string::npos && close + 2 < s.size()) state = s[close + 2];
    }
    if (ours && rank >= 0 && state != 'Z') out[rank] = static_cast<pid_t>(std::stol(pid));
  }
  return out;
}

// Rank 0's loss log, read as it grows: each new line's step and when it was seen.
struct LossTail {
  std::string path;
  std::streamoff offset = 0;
  std::string partial;
  std::vector<std::pair<int, Clock::time_point>> lines;
  void poll() {
    std::error_code ec;
    auto size = fs::file_size(path, ec);
    if (ec) return;
    if (static_cast<std::streamoff>(size) < offset) {  // a new rank 0 starts the file afresh
      offset = 0;
      partial.clear();
    }
    std::ifstream in(path);
    if (!in) return;
    in.seekg(offset);
    std::string chunk((std::istreambuf_iterator<char>(in)), {});
    offset += static_cast<std::streamoff>(chunk.size());
    partial += chunk;
    auto now = Clock::now();
    for (size_t pos; (pos = partial.find('\n')) != std::string::npos;) {
      int step = std::atoi(partial.substr(0, pos).c_str());
      partial.erase(0, pos + 1);
      if (step > 0) lines.emplace_back(step, now);
    }
  }
  int last_step() const { return lines.empty() ? 0 : lines.back().first; }
};

struct Failure {
  double at_s = 0;         // since submission
  int rank = -1;
  int step_at_kill = 0;
  int resumed_from = -1;   // the first step after recovery, less one
  double recovery_s = -1;
};

struct Result {
  std::string mode;
  double wall_s = 0, median_step_s = 0;  // the steady step time (run_mode says how)
  int steps = 0;
  std::vector<Failure> failures;
  bool ok = false;
  std::string error;
  double goodput() const { return wall_s > 0 ? steps * median_step_s / wall_s : 0; }
};

std::string job_yaml(const Options& o, const std::string& name, const std::string& dir, int in_place, bool cluster) {
  std::ifstream in(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/ddp-checkpoint.yaml");
  std::string y((std::istreambuf_iterator<char>(in)), {});
  auto replace = [&](const std::string& from, const std::string& to) {
    auto at = y.find(from);
    if (at == std::string::npos) throw std::runtime_error("examples/ddp-checkpoint.yaml has no '" + from + "'");
    y.replace(at, from.size(), to);
  };
  replace("name: tiny-ddp-ckpt", "name: " + name);
  replace("/var/lib/lockstep/checkpoints/tiny-ddp-ckpt", dir);
  // Locally the checkpoint path is mapped under lockstep-runs/, but flags are not: the loss
  // log gets the host path.
  replace("--steps=400", "--steps=" + std::to_string(o.steps) + ", --log-every=100, --loss-log=" +
                             (cluster ? std::string("/ckpt/loss.txt") : dir + "/loss.txt"));
  replace("everySteps: 20", "everySteps: " + std::to_string(o.checkpoint_every));
  replace("keep: 3", "keep: 2");
  // Two "nodes" share this machine's cores: one thread per rank, as each would have its own
  // cores on real nodes (two ranks of two threads each on two cores step 3x slower, unevenly).
  replace("        volumeMounts: [{name: checkpoints, mountPath: /ckpt}]\n      volumes:",
          "        volumeMounts: [{name: checkpoints, mountPath: /ckpt}]\n"
          "        env: [{name: OMP_NUM_THREADS, value: \"1\"}]\n"
          "      volumes:");
  replace("backoffLimit: 10", "backoffLimit: 1000");
  replace("inPlaceRestarts: 3", "inPlaceRestarts: " + std::to_string(in_place));
  return y;
}

lockstep::RunResult kubectl(const Options& o, std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), {"kubectl", "--kubeconfig", o.kubeconfig});
  return lockstep::run_capture(args, {}, 120s, input);
}

Result run_mode(const Options& o, const std::string& mode, const std::string& work) {
  Result r;
  r.mode = mode;
  const std::string name = "goodput-" + mode;
  const bool cluster = o.tier == "cluster";
  const int in_place = mode == "in-place" ? 100 : 0;  // the CRD's maximum
  const bool faults = mode != "none";
  // Cluster: a hostPath the pods share; local: lockstep run puts the checkpoints under
  // lockstep-runs/NAME/shared/ in the working directory, and the loss log goes to `dir`.
  const std::string dir = (cluster ? o.volume_dir : work) + "/" + name;
  fs::remove_all(dir);
  fs::remove_all(work + "/lockstep-runs/" + name);
  fs::create_directories(dir);
  if (cluster) ::chmod(dir.c_str(), 0777);
  const std::string yaml = job_yaml(o, name, dir, in_place, cluster);
  LossTail tail;
  tail.path = dir + "/loss.txt";
  std::mt19937 rng(o.seed);
  std::optional<lockstep::Process> local;
  auto t0 = Clock::now();
  if (cluster) {
    kubectl(o, {"delete", "trainingjob", name, "--ignore-not-found", "--wait=true"});
    auto a = kubectl(o, {"apply", "-f", "-"}, yaml);
    if (!a.status.success()) {
      r.error = "kubectl apply: " + a.output;
      return r;
    }
  } else {
    std::ofstream(work + "/" + name + ".yaml") << yaml;
    lockstep::SpawnOptions so;
    so.argv = {LOCKSTEP_CLI_BIN, "run", work + "/" + name + ".yaml"};
    so.output_path = work + "/" + name + ".out";
    so.new_process_group = true;
    ::chdir(work.c_str());
    local.emplace(lockstep::Process::spawn(so));
  }
  auto finished = [&]() -> std::optional<bool> {  // nullopt: still running; else success
    if (!cluster) {
      auto st = local->try_wait();
      if (!st) return std::nullopt;
      return st->success();
    }
    static auto last = Clock::now() - 10s;
    if (Clock::now() - last < 1s) return std::nullopt;
    last = Clock::now();
    auto p = kubectl(o, {"get", "trainingjob", name, "-o", "jsonpath={.status.phase}"});
    if (p.output == "Succeeded") return true;
    if (p.output == "Failed") return false;
    return std::nullopt;
  };
  std::optional<Clock::time_point> training_since, next_fault;
  Failure* pending = nullptr;   // a failure not yet recovered from
  pid_t old_rank0 = -1;
  bool new_rank0 = false;
  auto last_note = Clock::now();
  std::optional<bool> done;
  while (!(done = finished())) {
    if (g_stop) break;
    std::this_thread::sleep_for(20ms);
    size_t before = tail.lines.size();
    tail.poll();
    if (!training_since && !tail.lines.empty()) {
      training_since = Clock::now();
      next_fault = *training_since + std::chrono::milliseconds(static_cast<long>(o.every_s * 1000));
    }
    if (pending) {
      auto ranks = trainers(name);
      if (!new_rank0 && ranks.count(0) && ranks[0] != old_rank0) new_rank0 = true;
      for (size_t i = before; new_rank0 && i < tail.lines.size(); ++i) {
        if (std::chrono::duration<double>(tail.lines[i].second - t0).count() <= pending->at_s) continue;
        pending->resumed_from = tail.lines[i].first - 1;
        pending->recovery_s = std::chrono::duration<double>(tail.lines[i].second - t0).count() - pending->at_s;
        std::cout << "  " << mode << ": recovered from failure " << r.failures.size() << " in " << std::fixed
                  << std::setprecision(2) << pending->recovery_s << " s, resumed at step " << pending->resumed_from
                  << " (" << pending->step_at_kill - pending->resumed_from << " steps redone)" << std::endl;
        pending = nullptr;
        // Failures strike a job while it trains: the next one comes --every seconds after the
        // job is training again (else pod recreation's growing backoff would meet the next
        // fault at once, and a job that never gets to train would never finish).
        next_fault = Clock::now() + std::chrono::milliseconds(static_cast<long>(o.every_s * 1000));
        break;
      }
    }
    if (faults && !pending && next_fault && Clock::now() >= *next_fault) {
      auto ranks = trainers(name);
      if (ranks.size() == 2) {
        int victim = std::uniform_int_distribution<int>(0, static_cast<int>(ranks.size()) - 1)(rng);
        tail.poll();
        Failure f;
        f.rank = victim;
        f.step_at_kill = tail.last_step();
        old_rank0 = ranks[0];
        new_rank0 = false;
        ::kill(ranks[victim], SIGKILL);
        f.at_s = since(t0);
        r.failures.push_back(f);
        pending = &r.failures.back();
        std::cout << "  " << mode << ": failure " << r.failures.size() << " at " << std::fixed << std::setprecision(1)
                  << f.at_s << " s: SIGKILL of rank " << victim << " at step " << f.step_at_kill << std::endl;
        next_fault = *next_fault + std::chrono::milliseconds(static_cast<long>(o.every_s * 1000));
        if (*next_fault < Clock::now()) next_fault = Clock::now() + std::chrono::milliseconds(static_cast<long>(o.every_s * 1000));
      }
    }
    if (Clock::now() - last_note > 30s) {
      last_note = Clock::now();
      std::cout << "  " << mode << ": " << std::fixed << std::setprecision(0) << since(t0) << " s, step " << tail.last_step()
                << "/" << o.steps << ", " << r.failures.size() << " failure(s)" << std::endl;
    }
  }
  r.wall_s = since(t0);
  tail.poll();
  if (g_stop) {
    r.error = "interrupted";
    if (local) local->terminate(30s);
    if (cluster) kubectl(o, {"delete", "trainingjob", name, "--wait=false"});
    return r;
  }
  if (!*done) {
    r.error = "the job failed; see " + (cluster ? std::string("kubectl describe trainingjob ") + name : work + "/" + name + ".out");
    return r;
  }
  // The steady step time: over every stretch of consecutive steps (no restart inside), the
  // time from its first line to its last over the steps between, checkpoints included, as in
  // the same job without faults. Long stretches make the 20 ms polling negligible.
  double stretch_s = 0;
  long stretch_steps = 0;
  for (size_t i = 0, j; i < tail.lines.size(); i = j) {
    for (j = i + 1; j < tail.lines.size() && tail.lines[j].first == tail.lines[j - 1].first + 1; ++j) {
    }
    if (j - i < 2) continue;
    stretch_s += std::chrono::duration<double>(tail.lines[j - 1].second - tail.lines[i].second).count();
    stretch_steps += tail.lines[j - 1].first - tail.lines[i].first;
  }
  r.median_step_s = stretch_steps > 0 ? stretch_s / static_cast<double>(stretch_steps) : 0;
  r.steps = o.steps;
  r.ok = tail.last_step() == o.steps;
  if (!r.ok) r.error = "the loss log ends at step " + std::to_string(tail.last_step());
  if (cluster) kubectl(o, {"delete", "trainingjob", name, "--wait=true"});
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  lockstep::bench::catch_stop_signals();
  const std::string work = fs::temp_directory_path() / ("lockstep-goodput-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::cout << "bench/goodput: tier " << o.tier << ", 2 nodes x 1 rank (tiny GPT), " << o.steps << " steps, a checkpoint every "
            << o.checkpoint_every << " steps, SIGKILL of a random rank every " << o.every_s << " s; modes " << o.modes
            << "; " << std::thread::hardware_concurrency() << " cores" << std::endl;
  std::vector<Result> results;
  std::stringstream modes(o.modes);
  for (std::string mode; std::getline(modes, mode, ',');) {
    if (mode != "in-place" && mode != "recreate" && mode != "none") usage("--modes: in-place, recreate or none, got " + mode);
    std::cout << "bench/goodput: " << mode << (mode == "none" ? " (no faults)" : mode == "in-place" ? " (inPlaceRestarts 100)" : " (inPlaceRestarts 0: every failure recreates the gang)") << std::endl;
    results.push_back(run_mode(o, mode, work));
    if (g_stop) break;
  }
  std::cout << "\n" << std::left << std::setw(10) << "mode" << std::right << std::setw(9) << "failures" << std::setw(12)
            << "recovery50" << std::setw(12) << "recovery99" << std::setw(9) << "redone" << std::setw(10) << "step ms"
            << std::setw(10) << "wall s" << std::setw(10) << "goodput" << "\n";
  int rc = 0;
  std::map<std::string, double> goodput, p50;
  for (const auto& r : results) {
    if (!r.ok) {
      std::cout << std::left << std::setw(10) << r.mode << " FAILED: " << r.error << "\n";
      rc = 1;
      continue;
    }
    std::vector<double> rec;
    double redone = 0;
    for (const auto& f : r.failures)
      if (f.recovery_s >= 0) {
        rec.push_back(f.recovery_s);
        redone += f.step_at_kill - f.resumed_from;
      }
    goodput[r.mode] = r.goodput();
    p50[r.mode] = lockstep::bench::percentile(rec, 0.5);
    std::cout << std::left << std::setw(10) << r.mode << std::right << std::setw(9) << r.failures.size() << std::fixed
              << std::setprecision(2) << std::setw(11) << lockstep::bench::percentile(rec, 0.5) << "s" << std::setw(11)
              << lockstep::bench::percentile(rec, 0.99) << "s" << std::setprecision(1) << std::setw(9)
              << (rec.empty() ? 0.0 : redone / static_cast<double>(rec.size())) << std::setw(10) << r.median_step_s * 1000
              << std::setw(10) << r.wall_s << std::setprecision(1) << std::setw(9) << 100 * r.goodput() << "%\n";
  }
  if (goodput.count("in-place") && goodput.count("recreate"))
    std::cout << "\nin place against pod recreation: goodput " << std::setprecision(3) << goodput["in-place"] / goodput["recreate"]
              << "x, recovery p50 " << (p50["recreate"] > 0 ? p50["in-place"] / p50["recreate"] : 0) << "x\n";
  if (goodput.count("in-place"))
    std::cout << "targets (every " << o.every_s << " s): in-place goodput >= 90%: " << (goodput["in-place"] >= 0.9 ? "met" : "NOT met")
              << "; in-place recovery p50 < 3 s plus the checkpoint load: see recovery50\n";
  std::cout << "(redone: steps redone per failure, on average; step ms: the steady step time; goodput: steps x step / wall)\n";
  fs::remove_all(work);
  return g_stop ? 130 : rc;
}
