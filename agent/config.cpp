#include "config.hpp"

#include <cstdlib>
#include <filesystem>

#include "lockstep/contract.hpp"
#include "lockstep/flags.hpp"

extern char** environ;

namespace lockstep::agent {
namespace c = lockstep::contract;

const char* kUsage = R"(usage: lockstep-agent [flags] [-- COMMAND [ARGS...]]
Launches nproc-per-node workers of COMMAND (default: lockstep-trainer) with torchrun's
environment, supervises them, and serves /metrics. Configuration comes from LOCKSTEP_*
variables (set by the operator), else torchrun's PET_* variables, else these flags:
  --nnodes N                 LOCKSTEP_NNODES / PET_NNODES (default 1)
  --node-rank R              LOCKSTEP_NODE_RANK / PET_NODE_RANK (default 0)
  --nproc-per-node P         LOCKSTEP_NPROC_PER_NODE / PET_NPROC_PER_NODE (default 1)
  --master-addr HOST         LOCKSTEP_MASTER_ADDR / PET_MASTER_ADDR (default 127.0.0.1)
  --master-port PORT         LOCKSTEP_MASTER_PORT / PET_MASTER_PORT (default 29500)
  --max-restarts N           LOCKSTEP_IN_PLACE_RESTARTS: in-place restarts of every worker of
                             the job, on all nodes together, before the agents give up and
                             exit (default 0; the operator passes spec.runPolicy.inPlaceRestarts)
  --restart-policy P         LOCKSTEP_RESTART_POLICY: OnFailure (any failure restarts in place),
                             ExitCode (worker codes 1..127 other than 75-77 are permanent), or
                             Never (default OnFailure)
  --agent-port PORT          LOCKSTEP_AGENT_PORT: node 0's agent serves the restart barrier
                             here (default: the master port + 1)
  --peer-timeout D           LOCKSTEP_PEER_TIMEOUT: the agents of a job heartbeat each other over
                             the restart barrier (every 1 s); one that says nothing this long is
                             lost (its node frozen, powered off or cut off): every agent stops its
                             workers and exits 76. An agent that was silent itself this long (its
                             node frozen, then thawed) stands down the same way. At least 2s, or
                             0 to switch the checks off (default 6s; older name --barrier-timeout,
                             LOCKSTEP_BARRIER_TIMEOUT)
  (LOCKSTEP_BARRIER_SECRET: the secret agents prove to node 0's agent to join the restart
                             barrier; the operator and lockstep run set it; docs/security.md)
  --run-id ID                TORCHELASTIC_RUN_ID (default: LOCKSTEP_JOB_UID, else the job name)
  --metrics-port PORT        LOCKSTEP_METRICS_PORT (default 9400; 0 disables /metrics)
  --metrics-address ADDR     address for /metrics (default 0.0.0.0)
  --no-metrics               no /metrics and no GPU series; the step sockets stay for stall
                             detection unless --stall-timeout is 0
  --stall-timeout D          LOCKSTEP_STALL_TIMEOUT: no step for this long after a rank's last
                             one is a stall (default 5m; 0 turns stall detection off entirely)
  --first-step-timeout D     LOCKSTEP_FIRST_STEP_TIMEOUT: no first step within this long of a
                             worker's start is a stall: a hang in rendezvous or the first
                             collective (default 30m for lockstep-trainer, off for other
                             commands, which may never report a step; 0 off)
  --metrics-linger D         LOCKSTEP_METRICS_LINGER: after a stall, keep serving /metrics this
                             long so the stall is scraped; a stop signal cuts it short (default
                             30s, at most 10m; it delays the gang restart by as much)
  --rendezvous-timeout D     wait this long for the master address to resolve (default 10m)
  --grace-period D           SIGTERM to SIGKILL for workers (default 25s)
  --log-dir DIR              worker output to DIR/rank-N.log instead of prefixed lines
  --step-log DIR             append each rank's step reports to DIR/rank-N.jsonl, one JSON
                             object a line (docs/metrics.md; lockstep run's report reads them)
  --no-python-probe          LOCKSTEP_PYTHON_PROBE=0: do not put the Python probe on the workers'
                             PYTHONPATH (default on: PyTorch programs report their optimizer
                             steps and DDP's communication; docs/agent.md, "The Python probe")
  --python-probe-dir DIR     LOCKSTEP_PYTHON_PROBE_DIR: where the probe is (default: python/
                             beside this executable, else ../share/lockstep/python from it)
  --no-nccl-profiler         LOCKSTEP_NCCL_PROFILER=0: do not give the workers NCCL_PROFILER_PLUGIN
                             (default: the agent's plugin, libnccl-profiler-lockstep.so, which
                             times every NCCL operation; LOCKSTEP_NCCL_PROFILER=/path uses another)
  --straggler-window D       LOCKSTEP_STRAGGLER_WINDOW: each rank's work (step time less exposed
                             communication) is judged by its median over this long (default
                             30s, from 5s to 10m; docs/metrics.md, "Stragglers")
  --straggler-hold D         LOCKSTEP_STRAGGLER_HOLD: a rank over the threshold this long is a
                             straggler, and one back under it this long is cleared (default
                             15s, from 0 to 10m)
  --straggler-threshold X    LOCKSTEP_STRAGGLER_THRESHOLD: a rank whose median is X times the
                             gang's typical rank's is a suspect (default 1.33, above 1, at most 10)
Exit codes: the failing worker's own code (128+N if killed by signal N); 64 bad
configuration; 75 stall; 76 rendezvous failure, or a lost or silent peer agent
(docs/exit-codes.md).
)";

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

namespace {

// The value of the first of `names` that is set, with the name it came from.
bool lookup(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names,
            std::string& value, std::string& from) {
  for (const char* n : names) {
    auto it = env.find(n);
    if (it != env.end() && !it->second.empty()) {
      value = it->second;
      from = n;
      return true;
    }
  }
  return false;
}

std::chrono::milliseconds env_duration(const std::map<std::string, std::string>& env, const char* name,
                                       std::chrono::milliseconds fallback) {
  std::string v, from;
  if (!lookup(env, {name}, v, from)) return fallback;
  try {
    return flags::to_duration(from, v);
  } catch (const flags::FlagError& e) {
    throw ConfigError(e.what());
  }
}

int env_int(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names, int fallback,
            int min, int max) {
  std::string v, from;
  if (!lookup(env, names, v, from)) return fallback;
  try {
    return flags::to_int(from, v, min, max);
  } catch (const flags::FlagError& e) {
    throw ConfigError(e.what());
  }
}

// The first of `relative` (paths from the directory of `self_exe`, or of /proc/self/exe when
// it is empty) that `found` accepts, made absolute and normal; "" when none does, with
// `looked` listing where it looked ("" when the agent's own path is unknown).
template <class Found>
std::string first_beside_exe(const std::string& self_exe, std::initializer_list<std::filesystem::path> relative,
                             Found&& found, std::string& looked) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = self_exe.empty() ? fs::read_symlink("/proc/self/exe", ec) : fs::path(self_exe);
  if (exe.empty()) return "";
  const fs::path here = fs::absolute(exe, ec).parent_path();
  for (const fs::path& rel : relative) {
    const fs::path normal = (here / rel).lexically_normal();
    if (found(normal)) return normal.string();
    looked += (looked.empty() ? "" : " and ") + normal.string();
  }
  return "";
}

bool holds_probe(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "sitecustomize.py", ec) &&
         std::filesystem::is_regular_file(dir / "lockstep" / "__init__.py", ec);
}

}  // namespace

// Note [Python probe]
// Python workers get the probe (agent/python: sitecustomize.py and the lockstep package,
// docs/agent.md "The Python probe") through PYTHONPATH: the agent puts its directory first,
// before whatever the image and the pod set (worker_env.cpp), for every worker that has a
// step socket. Python imports the first sitecustomize on its path at start-up; ours installs
// an import hook that starts the probe once the program imports torch, then runs the image's
// own sitecustomize. The directory is found at start: --python-probe-dir or
// LOCKSTEP_PYTHON_PROBE_DIR (the agent bundle's launcher sets it), else python/ beside the
// executable (the build tree: agent/CMakeLists.txt copies it there), else
// ../share/lockstep/python from it (`cmake --install --component agent`). Not found is not
// an error (the workers then report only what they send themselves); a directory given that
// lacks the probe is.
std::string find_python_probe_dir(const std::string& given, const std::string& given_by, const std::string& self_exe,
                                  std::string* note) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!given.empty()) {
    fs::path dir = fs::absolute(given, ec);
    if (ec || !holds_probe(dir))
      throw ConfigError(given_by + " '" + given + "' is not the Python probe's directory: it must hold sitecustomize.py and "
                        "lockstep/__init__.py (the agent's python/ directory: agent/python in a build tree, "
                        "<prefix>/share/lockstep/python in an install)");
    if (dir.string().find(':') != std::string::npos)
      throw ConfigError(given_by + " '" + dir.string() + "' contains ':', which PYTHONPATH cannot hold");
    return dir.lexically_normal().string();
  }
  std::string looked;
  const std::string dir = first_beside_exe(
      self_exe, {"python", fs::path("..") / "share" / "lockstep" / "python"},
      [](const fs::path& d) { return holds_probe(d) && d.string().find(':') == std::string::npos; }, looked);
  if (!dir.empty()) return dir;
  if (note)
    *note = "not found (looked in " + (looked.empty() ? std::string("no directory: the agent's own path is unknown") : looked) +
            "; --python-probe-dir or LOCKSTEP_PYTHON_PROBE_DIR names it)";
  return "";
}

std::string find_nccl_profiler(const std::string& given, const std::string& self_exe, std::string* note) {
  namespace fs = std::filesystem;
  constexpr const char* kName = "libnccl-profiler-lockstep.so";
  std::error_code ec;
  if (given == "0") {
    if (note) *note = "off (LOCKSTEP_NCCL_PROFILER=0 or --no-nccl-profiler)";
    return "";
  }
  if (!given.empty() && given != "1") {
    if (given.front() != '/')
      throw ConfigError("LOCKSTEP_NCCL_PROFILER must be 1 (the agent's NCCL profiler plugin, the default), 0 (off) or "
                        "the absolute path of a plugin library, got '" + given + "'");
    if (!fs::is_regular_file(given, ec))
      throw ConfigError("LOCKSTEP_NCCL_PROFILER '" + given + "' is not a file (give the plugin library's absolute path, "
                        "1 for the agent's own, or 0 for none)");
    return given;
  }
  std::string looked;
  const std::string file = first_beside_exe(
      self_exe, {kName, fs::path("..") / "lib" / "lockstep" / kName},
      [&ec](const fs::path& f) { return fs::is_regular_file(f, ec); }, looked);
  if (!file.empty()) return file;
  if (note)
    *note = "not found (looked for " + (looked.empty() ? std::string(kName) + ": the agent's own path is unknown" : looked) +
            "; LOCKSTEP_NCCL_PROFILER names one)";
  return "";
}

namespace {

// What the environment and the flags set that load_config settles after both are read.
struct Unsettled {
  std::string nccl_profiler;              // LOCKSTEP_NCCL_PROFILER as given; "0" after --no-nccl-profiler
  std::string probe_dir, probe_dir_from;  // the Python probe's directory, and what gave it
  bool first_step_set = false;            // a first-step timeout given, rather than the default
};

// A threshold in (1, 10]: at 1 every rank slower than the reference would be a suspect.
double straggler_threshold(const std::string& from, const std::string& v) {
  double x = 0;
  try {
    x = flags::to_double(from, v, 1, 10);
  } catch (const flags::FlagError&) {
    x = 0;
  }
  if (!(x > 1))  // NaN too
    throw ConfigError(from + " must be a slowdown above 1 and at most 10 (1.33: a rank a third slower than the "
                      "gang's typical rank), got '" + v + "'");
  return x;
}

// The pod's environment (the operator starts `lockstep-agent [--max-restarts=N]
// [--restart-policy=P] -- COMMAND`, Note [Agent flags], so a pod's env is how a job sets
// anything else), torchrun's PET_ names after ours.
void read_env(const std::map<std::string, std::string>& env, Config& cfg, Unsettled& u) {
  std::string v, from;
  cfg.nnodes = env_int(env, {c::kNnodes, c::kPetNnodes}, 1, 1, 100000);
  cfg.node_rank = env_int(env, {c::kNodeRank, c::kPetNodeRank}, 0, 0, 100000);
  cfg.nproc_per_node = env_int(env, {c::kNprocPerNode, c::kPetNprocPerNode}, 1, 1, 1024);
  cfg.master_port = env_int(env, {c::kMasterPort, c::kPetMasterPort}, 29500, 1, 65535);
  cfg.restart_attempt = env_int(env, {c::kRestartAttempt}, 0, 0, 1000000);
  cfg.metrics_port = env_int(env, {c::kMetricsPort}, 9400, 0, 65535);
  cfg.max_restarts = env_int(env, {c::kInPlaceRestarts}, 0, 0, 1000);
  cfg.agent_port = env_int(env, {c::kAgentPort}, 0, 1, 65535);
  cfg.cpu_request_millis = env_int(env, {c::kCpuRequest}, 0, 0, 100000000);
  cfg.cpu_limit_millis = env_int(env, {c::kCpuLimit}, 0, 0, 100000000);
  if (lookup(env, {c::kRestartPolicy}, v, from)) cfg.restart_policy = v;
  if (lookup(env, {c::kBarrierSecret}, v, from)) cfg.barrier_secret = v;
  // See Note [Heartbeats]: the older name first, so the newer wins where both are set.
  for (const char* name : {c::kBarrierTimeout, c::kPeerTimeout})
    if (lookup(env, {name}, v, from)) {
      cfg.peer_timeout = env_duration(env, name, cfg.peer_timeout);
      cfg.peer_timeout_from = name;
    }
  cfg.stall_timeout = env_duration(env, c::kStallTimeout, cfg.stall_timeout);
  u.first_step_set = env.count(c::kFirstStepTimeout) && !env.at(c::kFirstStepTimeout).empty();
  cfg.first_step_timeout = env_duration(env, c::kFirstStepTimeout, cfg.first_step_timeout);
  cfg.metrics_linger = env_duration(env, c::kMetricsLinger, cfg.metrics_linger);
  cfg.straggler_window = env_duration(env, c::kStragglerWindow, cfg.straggler_window);
  cfg.straggler_hold = env_duration(env, c::kStragglerHold, cfg.straggler_hold);
  if (lookup(env, {c::kStragglerThreshold}, v, from)) cfg.straggler_threshold = straggler_threshold(from, v);
  if (lookup(env, {c::kPythonProbe}, v, from)) {
    if (v != "0" && v != "1")
      throw ConfigError("LOCKSTEP_PYTHON_PROBE must be 1 (the Python probe on, the default) or 0 (off), got '" + v + "'");
    cfg.python_probe = v == "1";
  }
  if (lookup(env, {c::kNcclProfiler}, v, from)) u.nccl_profiler = v;
  if (lookup(env, {c::kPythonProbeDir}, v, from)) {
    u.probe_dir = v;
    u.probe_dir_from = from;
  }
  if (lookup(env, {c::kMasterAddr, c::kPetMasterAddr}, v, from)) cfg.master_addr = v;
  if (lookup(env, {c::kJobName}, v, from)) cfg.job_name = v;
  if (lookup(env, {c::kJobNamespace}, v, from)) cfg.job_namespace = v;
  if (lookup(env, {c::kJobUid}, v, from) || lookup(env, {c::kJobName}, v, from)) cfg.run_id = v;
}

// One flag at argv[i] (and its value), over what the environment set. False: not a flag of ours.
bool read_flag(int argc, char** argv, int& i, Config& cfg, Unsettled& u, bool& peer_timeout_flag_seen) {
  using namespace lockstep::flags;
  std::string v, a = argv[i];
  if (a == "--no-metrics") cfg.metrics = false;
  else if (a == "--no-python-probe") cfg.python_probe = false;
  else if (a == "--no-nccl-profiler") u.nccl_profiler = "0";
  else if (match(argc, argv, i, "--python-probe-dir", v)) {
    if (v.empty()) throw FlagError("--python-probe-dir needs a directory");
    u.probe_dir = v;
    u.probe_dir_from = "--python-probe-dir";
  }
  else if (match(argc, argv, i, "--nnodes", v)) cfg.nnodes = to_int("--nnodes", v, 1, 100000);
  else if (match(argc, argv, i, "--node-rank", v)) cfg.node_rank = to_int("--node-rank", v, 0, 100000);
  else if (match(argc, argv, i, "--nproc-per-node", v)) cfg.nproc_per_node = to_int("--nproc-per-node", v, 1, 1024);
  else if (match(argc, argv, i, "--master-addr", v)) cfg.master_addr = v;
  else if (match(argc, argv, i, "--master-port", v)) cfg.master_port = to_int("--master-port", v, 1, 65535);
  else if (match(argc, argv, i, "--max-restarts", v)) cfg.max_restarts = to_int("--max-restarts", v, 0, 1000);
  else if (match(argc, argv, i, "--restart-policy", v)) cfg.restart_policy = v;
  else if (match(argc, argv, i, "--agent-port", v)) cfg.agent_port = to_int("--agent-port", v, 1, 65535);
  else if (match(argc, argv, i, "--run-id", v)) cfg.run_id = v;
  else if (match(argc, argv, i, "--peer-timeout", v) || match(argc, argv, i, "--barrier-timeout", v)) {
    // Once --peer-timeout is seen, the older name no longer wins.
    const std::string flag = a.rfind("--peer-timeout", 0) == 0 ? "--peer-timeout" : "--barrier-timeout";
    if (flag == "--peer-timeout" || !peer_timeout_flag_seen) {
      cfg.peer_timeout = to_duration(flag, v);
      cfg.peer_timeout_from = flag;
    }
    if (flag == "--peer-timeout") peer_timeout_flag_seen = true;
  }
  else if (match(argc, argv, i, "--metrics-port", v)) cfg.metrics_port = to_int("--metrics-port", v, 0, 65535);
  else if (match(argc, argv, i, "--metrics-address", v)) cfg.metrics_address = v;
  else if (match(argc, argv, i, "--stall-timeout", v)) cfg.stall_timeout = to_duration("--stall-timeout", v);
  else if (match(argc, argv, i, "--first-step-timeout", v)) {
    cfg.first_step_timeout = to_duration("--first-step-timeout", v);
    u.first_step_set = true;
  }
  else if (match(argc, argv, i, "--metrics-linger", v)) cfg.metrics_linger = to_duration("--metrics-linger", v);
  else if (match(argc, argv, i, "--rendezvous-timeout", v)) cfg.rendezvous_timeout = to_duration("--rendezvous-timeout", v);
  else if (match(argc, argv, i, "--grace-period", v)) cfg.grace_period = to_duration("--grace-period", v);
  else if (match(argc, argv, i, "--straggler-window", v)) cfg.straggler_window = to_duration("--straggler-window", v);
  else if (match(argc, argv, i, "--straggler-hold", v)) cfg.straggler_hold = to_duration("--straggler-hold", v);
  else if (match(argc, argv, i, "--straggler-threshold", v)) cfg.straggler_threshold = straggler_threshold("--straggler-threshold", v);
  else if (match(argc, argv, i, "--log-dir", v)) cfg.log_dir = v;
  else if (match(argc, argv, i, "--step-log", v)) cfg.step_log_dir = v;
  else return false;
  return true;
}

// The flags before '--', and the worker command after it.
void read_args(const std::vector<std::string>& args, Config& cfg, Unsettled& u) {
  std::vector<std::string> copy = args;
  size_t dashdash = copy.size();
  for (size_t i = 0; i < copy.size(); ++i)
    if (copy[i] == "--") { dashdash = i; break; }
  std::string prog = "lockstep-agent";
  std::vector<char*> argv{prog.data()};
  for (size_t i = 0; i < dashdash; ++i) argv.push_back(copy[i].data());
  int argc = static_cast<int>(argv.size());
  bool peer_timeout_flag_seen = false;
  try {
    for (int i = 1; i < argc; ++i)
      if (!read_flag(argc, argv.data(), i, cfg, u, peer_timeout_flag_seen))
        throw flags::FlagError("unknown flag '" + std::string(argv[i]) + "' (see --help)");
  } catch (const flags::FlagError& e) {
    throw ConfigError(e.what());
  }
  if (dashdash < copy.size()) {
    std::vector<std::string> cmd(copy.begin() + static_cast<long>(dashdash) + 1, copy.end());
    if (cmd.empty()) throw ConfigError("nothing after '--': give the worker command, e.g. -- python train.py");
    cfg.command = cmd;
  }
}

// See Note [Straggler score]: a window long enough for a median of several steps, a hold and a
// window a person would still call recent.
void check_straggler_settings(const Config& cfg) {
  const auto text = [](std::chrono::milliseconds d) { return std::to_string(d.count() / 1000.0).substr(0, 8) + "s"; };
  if (cfg.straggler_window < std::chrono::seconds(5) || cfg.straggler_window > std::chrono::minutes(10))
    throw ConfigError("--straggler-window (LOCKSTEP_STRAGGLER_WINDOW) must be from 5s to 10m (each rank's median "
                      "needs several steps), got " + text(cfg.straggler_window));
  if (cfg.straggler_hold > std::chrono::minutes(10))
    throw ConfigError("--straggler-hold (LOCKSTEP_STRAGGLER_HOLD) must be from 0 to 10m, got " + text(cfg.straggler_hold));
}

// What needs both sources, and the checks across fields.
void settle(Config& cfg, const Unsettled& u, const std::string& self_exe) {
  if (!u.first_step_set) {
    const std::string& exe = cfg.command.front();
    std::string base = exe.substr(exe.find_last_of('/') == std::string::npos ? 0 : exe.find_last_of('/') + 1);
    if (base != "lockstep-trainer") cfg.first_step_timeout = std::chrono::milliseconds(0);
  }
  if (cfg.node_rank >= cfg.nnodes)
    throw ConfigError("node rank " + std::to_string(cfg.node_rank) + " (LOCKSTEP_NODE_RANK, PET_NODE_RANK or --node-rank) "
                      "must be below the number of nodes " + std::to_string(cfg.nnodes) +
                      " (LOCKSTEP_NNODES, PET_NNODES or --nnodes)");
  if (cfg.restart_policy != "OnFailure" && cfg.restart_policy != "ExitCode" && cfg.restart_policy != "Never")
    throw ConfigError("the restart policy (LOCKSTEP_RESTART_POLICY or --restart-policy) must be OnFailure, ExitCode or "
                      "Never, got '" + cfg.restart_policy + "'");
  if (cfg.restart_policy == "Never") cfg.max_restarts = 0;
  if (cfg.metrics_linger > std::chrono::minutes(10))
    throw ConfigError("--metrics-linger must be at most 10m (it delays the agent's exit after a stall), got " +
                      std::to_string(cfg.metrics_linger.count() / 1000) + "s");
  check_straggler_settings(cfg);
  if (!cfg.metrics) cfg.metrics_port = 0;  // --no-metrics: never an HTTP endpoint
  if (cfg.python_probe)  // Note [Python probe]; when off, a directory given is not even looked at
    cfg.python_probe_dir = find_python_probe_dir(u.probe_dir, u.probe_dir_from, self_exe, &cfg.python_probe_note);
  else
    cfg.python_probe_note = "off (LOCKSTEP_PYTHON_PROBE=0 or --no-python-probe)";
  cfg.nccl_profiler = find_nccl_profiler(u.nccl_profiler, self_exe, &cfg.nccl_profiler_note);
  if (cfg.peer_timeout.count() != 0 && cfg.peer_timeout < kMinPeerTimeout)
    throw ConfigError(cfg.peer_timeout_from + " must be 0 (no heartbeat checks) or at least " +
                      std::to_string(kMinPeerTimeout.count()) + "s (the agents heartbeat every second; a shorter "
                      "silence is no lost node), got " + std::to_string(cfg.peer_timeout.count()) + "ms");
  if (cfg.master_addr.empty()) throw ConfigError("the master address (LOCKSTEP_MASTER_ADDR or --master-addr) is empty");
}

}  // namespace

Config load_config(const std::map<std::string, std::string>& env, const std::vector<std::string>& args,
                   const std::string& self_exe) {
  Config cfg;
  Unsettled u;
  read_env(env, cfg, u);
  read_args(args, cfg, u);
  settle(cfg, u, self_exe);
  return cfg;
}

}  // namespace lockstep::agent
