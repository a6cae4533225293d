// The contracts between components (docs/agent.md, "Each worker's environment"; docs/operator.md): environment variables from the operator to
// each pod and from the agent to each worker, labels on what the operator creates, and the
// agent's own exit codes. One definition here; operator, agent and tests use these names.
#pragma once

namespace lockstep::contract {

// Operator -> pod.
inline constexpr const char* kJobName = "LOCKSTEP_JOB_NAME";
inline constexpr const char* kJobNamespace = "LOCKSTEP_JOB_NAMESPACE";
inline constexpr const char* kJobUid = "LOCKSTEP_JOB_UID";
inline constexpr const char* kNnodes = "LOCKSTEP_NNODES";
inline constexpr const char* kNodeRank = "LOCKSTEP_NODE_RANK";
inline constexpr const char* kNprocPerNode = "LOCKSTEP_NPROC_PER_NODE";
inline constexpr const char* kMasterAddr = "LOCKSTEP_MASTER_ADDR";
inline constexpr const char* kMasterPort = "LOCKSTEP_MASTER_PORT";
inline constexpr const char* kRestartAttempt = "LOCKSTEP_RESTART_ATTEMPT";
inline constexpr const char* kStrategy = "LOCKSTEP_STRATEGY";
inline constexpr const char* kMetricsPort = "LOCKSTEP_METRICS_PORT";
inline constexpr const char* kCheckpointPath = "LOCKSTEP_CHECKPOINT_PATH";
inline constexpr const char* kCheckpointEvery = "LOCKSTEP_CHECKPOINT_EVERY";
inline constexpr const char* kCheckpointKeep = "LOCKSTEP_CHECKPOINT_KEEP";  // spec.checkpoint.keep
// spec.checkpoint.resumeFrom: where a job with no checkpoint of its own may start from
// (Note [Checkpoint owner] in trainer/checkpoint.hpp).
inline constexpr const char* kCheckpointResumeFrom = "LOCKSTEP_CHECKPOINT_RESUME_FROM";
// In-place gang restarts (docs/agent.md, "In-place restarts: the restart barrier"): the budget per gang attempt
// (spec.runPolicy.inPlaceRestarts; 0 when restartPolicy is Never), the policy the agents judge
// a worker's exit code by (OnFailure | ExitCode | Never), and the port node 0's agent serves
// the restart barrier on (default: the master port + 1). The agent reads the first two from
// the environment or its flags; the operator passes the flags (Note [Agent flags] in
// operator/reconcile/manifests.cpp) and removes the variables from a template.
inline constexpr const char* kInPlaceRestarts = "LOCKSTEP_IN_PLACE_RESTARTS";
inline constexpr const char* kRestartPolicy = "LOCKSTEP_RESTART_POLICY";
inline constexpr const char* kAgentPort = "LOCKSTEP_AGENT_PORT";
// The trainer container's CPU request and limit in millicores, from the downward API
// (resourceFieldRef; a container without a limit gets its node's allocatable CPU). The agent
// sizes each worker's OMP_NUM_THREADS by them (Note [Worker threads] in agent/worker_env.cpp).
inline constexpr const char* kCpuRequest = "LOCKSTEP_CPU_REQUEST";
inline constexpr const char* kCpuLimit = "LOCKSTEP_CPU_LIMIT";
// Straggler detection (Note [Straggler score] in lockstep/straggler.hpp): each rank's window, how
// long a rank must stay over the threshold for a verdict, and the threshold (docs/agent.md).
inline constexpr const char* kStragglerWindow = "LOCKSTEP_STRAGGLER_WINDOW";
inline constexpr const char* kStragglerHold = "LOCKSTEP_STRAGGLER_HOLD";
inline constexpr const char* kStragglerThreshold = "LOCKSTEP_STRAGGLER_THRESHOLD";
// The restart barrier's secret (Note [Barrier trust] in agent/barrier/trust.hpp): 32 random bytes in
// hex, drawn by the operator for each gang attempt; the agents prove they hold it. The agent
// removes it from its environment before any worker starts.
inline constexpr const char* kBarrierSecret = "LOCKSTEP_BARRIER_SECRET";
// torchrun's own, so a command that calls torchrun works unchanged.
inline constexpr const char* kPetNnodes = "PET_NNODES";
inline constexpr const char* kPetNodeRank = "PET_NODE_RANK";
inline constexpr const char* kPetNprocPerNode = "PET_NPROC_PER_NODE";
inline constexpr const char* kPetMasterAddr = "PET_MASTER_ADDR";
inline constexpr const char* kPetMasterPort = "PET_MASTER_PORT";

// Agent -> worker: the worker's own step socket (docs/metrics.md, "The step report").
inline constexpr const char* kMetricsSocket = "LOCKSTEP_METRICS_SOCKET";
// The agent's own settings a pod's env may carry (docs/agent.md, "Configuration"): the operator
// starts the agent with no flags but the in-place restart settings, so these are how a job
// changes them.
inline constexpr const char* kStallTimeout = "LOCKSTEP_STALL_TIMEOUT";
inline constexpr const char* kFirstStepTimeout = "LOCKSTEP_FIRST_STEP_TIMEOUT";
inline constexpr const char* kMetricsLinger = "LOCKSTEP_METRICS_LINGER";
inline constexpr const char* kPeerTimeout = "LOCKSTEP_PEER_TIMEOUT";        // Note [Heartbeats]
inline constexpr const char* kBarrierTimeout = "LOCKSTEP_BARRIER_TIMEOUT";  // its older name, still read
inline constexpr const char* kPythonProbe = "LOCKSTEP_PYTHON_PROBE";        // 1 (default) or 0
inline constexpr const char* kPythonProbeDir = "LOCKSTEP_PYTHON_PROBE_DIR";
// Note [NCCL profiler plugin] (agent/nccl_profiler/plugin.c): 1 (default: the agent's own
// plugin), 0 (off), or the absolute path of a plugin library to use instead.
inline constexpr const char* kNcclProfiler = "LOCKSTEP_NCCL_PROFILER";
// Read by the plugin itself (C, so spelt there too): 1 prints its totals on stderr at the end.
inline constexpr const char* kNcclProfilerDebug = "LOCKSTEP_NCCL_PROFILER_DEBUG";
// NCCL's own: the profiler plugin NCCL loads. The agent sets it for its workers unless the
// pod's env already does.
inline constexpr const char* kNcclProfilerPlugin = "NCCL_PROFILER_PLUGIN";
// Where the agent writes its termination message (the container's terminationMessagePath).
inline constexpr const char* kTerminationLog = "LOCKSTEP_TERMINATION_LOG";
// lockstep-trainer's collective timeouts, in seconds (docs/trainer.md).
inline constexpr const char* kRendezvousTimeoutS = "LOCKSTEP_RENDEZVOUS_TIMEOUT_S";
inline constexpr const char* kCollectiveTimeoutS = "LOCKSTEP_COLLECTIVE_TIMEOUT_S";

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr int kDefaultMetricsPort = 9400;

// Labels on every object the operator creates for a job.
inline constexpr const char* kLabelJobName = "lockstep.dev/job-name";
inline constexpr const char* kLabelNodeRank = "lockstep.dev/node-rank";
inline constexpr const char* kLabelRestartAttempt = "lockstep.dev/restart-attempt";
inline constexpr const char* kLabelPodGroup = "scheduling.x-k8s.io/pod-group";  // coscheduling plugin
inline constexpr const char* kLabelKueueQueue = "kueue.x-k8s.io/queue-name";
// The container that runs the agent: this name, or else the template's first container.
inline constexpr const char* kTrainerContainer = "trainer";

// Agent injection (Note [Agent injection] in operator/reconcile/manifests.hpp): the emptyDir
// the init container copies the agent bundle into, that init container, and where the trainer
// container sees the bundle (read-only). Names the operator reserves in a pod's template.
inline constexpr const char* kAgentVolume = "lockstep-agent";
inline constexpr const char* kAgentInitContainer = "lockstep-agent";
inline constexpr const char* kAgentMountPath = "/lockstep/agent";
// In the lockstep/agent image: the bundle's launcher, and where the init container mounts
// the emptyDir to install into.
inline constexpr const char* kAgentImageLauncher = "/lockstep/lockstep-agent";
inline constexpr const char* kAgentInstallPath = "/lockstep-install";

// Exit codes the agent itself uses (docs/exit-codes.md). A worker's own code passes through.
// These two are in 1..127 but retryable: the operator's ExitCode policy restarts on them.
inline constexpr int kExitStall = 75;        // no step reported in time: a hung collective or dead peer
inline constexpr int kExitRendezvous = 76;   // the master address never resolved / rendezvous timed out
// The trainer's own: a collective failed because a peer is gone (its connection closed, NCCL
// reported a remote error, a collective timed out). A consequence of another rank's failure,
// never its cause: retryable, and the operator judges the job by the failure that came first.
inline constexpr int kExitCollective = 77;
inline constexpr int kExitUsage = 64;        // bad flags or environment (permanent)

// The first line of an agent's termination message when its gang ended because another node's
// agent went silent (Note [Silent peer] in agent/barrier/state.hpp): `lockstep-silent-peer node=R`,
// R that node's rank. The operator reads it (Note [Lost nodes] in operator/reconcile/node.hpp).
inline constexpr const char* kSilentPeerLine = "lockstep-silent-peer";

// A collective or rendezvous failure, or a stall: what a rank does when another one died.
inline bool exit_code_is_consequence(int code) {
  return code == kExitStall || code == kExitRendezvous || code == kExitCollective;
}
// restartPolicy ExitCode (Note [Exit codes] in operator/reconcile/failure_policy.hpp): 128+
// (killed by a signal: OOM, preemption) and the codes above are retryable; any other code in
// 1..127 is the program's own verdict, permanent.
inline bool exit_code_retryable(int code) { return code <= 0 || code >= 128 || exit_code_is_consequence(code); }

// The step report, worker -> agent (docs/metrics.md, "The step report"): key=value pairs, one
// report a line. lockstep-trainer writes them (trainer/train.cpp), the agent parses them
// (agent/step_report.cpp) and keeps them, under the same names, in its step log
// (agent/metrics.cpp, Note [Step log]), which `lockstep run` follows and draws its report from
// (cli/run.cpp, cli/report.cpp). The Python probe writes the same names
// (agent/python/lockstep/_step_report.py); probe_test's runs read them back through the agent.
namespace report {
inline constexpr const char* kStep = "step";
inline constexpr const char* kStepSeconds = "step_s";
inline constexpr const char* kComputeSeconds = "compute_s";
inline constexpr const char* kCommSeconds = "comm_s";                 // also per collective: comm_s.<op>
inline constexpr const char* kExposedCommSeconds = "exposed_comm_s";  // also exposed_comm_s.<op>
inline constexpr const char* kCommBytes = "comm_bytes";               // per collective only: comm_bytes.<op>
inline constexpr const char* kTokens = "tokens";
inline constexpr const char* kFlops = "flops";
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kMemBytes = "mem_bytes";
inline constexpr const char* kTotalSteps = "total_steps";
// NCCL's own timing of every operation (Note [NCCL profiler plugin]), per op only, in reports
// of their own that carry no step: nccl_s.<op>, nccl_bytes.<op>, nccl_count.<op>, totals since
// the plugin's last report.
inline constexpr const char* kNcclSeconds = "nccl_s";
inline constexpr const char* kNcclBytes = "nccl_bytes";
inline constexpr const char* kNcclCount = "nccl_count";
// What the step log adds to each report: the rank, the gang attempt (LOCKSTEP_RESTART_ATTEMPT),
// the in-place generation, and the arrival's Unix time.
inline constexpr const char* kRank = "rank";
inline constexpr const char* kAttempt = "attempt";
inline constexpr const char* kGeneration = "generation";
inline constexpr const char* kTime = "time";
// The agent's event log beside the step log (Note [Event log] in agent/metrics.cpp), which
// `lockstep run` follows: an event's kind and its own keys; kAttempt, kGeneration, kRank and
// kTime as above.
inline constexpr const char* kNode = "node";
inline constexpr const char* kEvent = "event";
inline constexpr const char* kInPlaceRestart = "in_place_restart";
inline constexpr const char* kReason = "reason";
inline constexpr const char* kExitCode = "exit_code";
inline constexpr const char* kWhy = "why";
// Node 0's straggler verdicts (docs/metrics.md, "Stragglers"): raised, with the straggler's
// node, slowdown, window and GPU throttle reasons, and cleared.
inline constexpr const char* kStraggler = "straggler";
inline constexpr const char* kStragglerCleared = "straggler_cleared";
inline constexpr const char* kNodeRank = "node_rank";
inline constexpr const char* kSlowdown = "slowdown";
inline constexpr const char* kWindowSeconds = "window_s";
inline constexpr const char* kThrottle = "throttle";
}  // namespace report

}  // namespace lockstep::contract
