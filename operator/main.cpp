// lockstep-operator: watches TrainingJobs and runs each as a gang of pods.
// Flags: lockstep-operator --help. Exit codes: 0 after a graceful stop (SIGTERM/SIGINT),
// 1 on a fatal error (lost leadership, caches that never sync), 2 on bad flags or config.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "controller/controller.hpp"
#include "http_server.hpp"
#include "kube/leader_election.hpp"
#include "lockstep/flags.hpp"
#include "lockstep/log.hpp"

using namespace std::chrono_literals;

namespace {

struct Options {
  std::string kubeconfig, context, watch_namespace;
  int workers = 4;
  int create_parallelism = 8;
  int max_creates_per_pass = 256;
  double qps = 500;  // docs/operator.md, "Client rate limit": 100 jobs x 8 pods in one API-server-bound wave
  int burst = 1000;
  int http_port = 8080;
  std::string http_address = "0.0.0.0";
  bool leader_elect = true;
  std::string lease_namespace, lease_name = "lockstep-operator", identity;
  std::chrono::milliseconds lease_duration{15000}, renew_deadline{10000}, retry_period{2000};
  std::chrono::milliseconds restart_backoff{10000}, restart_backoff_max{300000}, restart_backoff_reset{600000};
  bool node_watch = true;
  std::chrono::milliseconds resync_period{300000};
  std::chrono::milliseconds status_batch_period{1000};
  std::chrono::milliseconds progress_period{30000};
  std::chrono::milliseconds podgroup_check_period{60000};
  // See Note [Agent injection]: the image the agent is copied from into every pod.
  std::string agent_image = std::string("lockstep/agent:") + LOCKSTEP_VERSION;
  std::string agent_image_pull_policy = "IfNotPresent";
  // See Note [Job isolation]: whom a job's NetworkPolicy admits on its metrics port.
  std::string operator_namespace, monitoring_namespace;
  lockstep::reconcile::Isolation default_isolation = lockstep::reconcile::Isolation::None;
};

const char* kUsage = R"(usage: lockstep-operator [flags]
  --kubeconfig PATH            kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)
  --context NAME               kubeconfig context (default: current-context)
  --namespace NS               watch only NS (default: all namespaces)
  --workers N                  concurrent reconciles (default 4)
  --create-parallelism N       concurrent pod creates or deletes per reconcile (default 8)
  --max-pod-creates-per-pass N pod creates one reconcile may send, in batches of 1, 2, 4, ... up to
                               --create-parallelism, stopping at the first refusal (default 256)
  --kube-api-qps Q             client-side request rate limit (default 500)
  --kube-api-burst B           and its burst (default 1000)
  --http-port P                /healthz, /readyz and /metrics port (default 8080; 0 disables)
  --http-address A             address to serve them on (default 0.0.0.0)
  --leader-elect BOOL          elect a leader through a Lease (default true)
  --leader-election-namespace  namespace of the Lease (default: the pod's, else default)
  --leader-election-id NAME    name of the Lease (default lockstep-operator)
  --lease-duration D           (default 15s)   --renew-deadline D (default 10s)   --retry-period D (default 2s)
  --restart-backoff D          first gang-restart delay, doubled per restart in a row (default 10s)
  --restart-backoff-max D      its cap (default 5m)
  --restart-backoff-reset D    an attempt that ran this long starts the doubling afresh, as the kubelet
                               does for a container (default 10m; 0 never)
  --node-watch BOOL            watch the nodes the jobs' pods run on, and restart a gang that loses one
                               (NotReady, gone, an untolerated NoExecute taint) at once, force-deleting
                               its pods there; needs list and watch on nodes (default true)
  --resync-period D            reconcile every job at least this often, events or not (default 5m; 0 never)
  --status-batch-period D      write a job's status no more often than this when only its node counts
                               changed; phase, conditions and restarts are written at once (default 1s; 0 off)
  --podgroup-check-period D    how often to look for the PodGroup API, to use one installed later (default 60s)
  --progress-period D          how often rank 0's agent of a running job is read for status.progress
                               (kubectl get tj: step, tokens/s, ETA; default 30s; 0 never); a new
                               job is read sooner, from 2 s after it runs, until its columns fill
  --agent-image IMAGE          the image every pod's init container copies lockstep-agent from into
                               the trainer container, so any image runs (default lockstep/agent:VERSION,
                               this operator's version; '' injects nothing: the image must then have
                               lockstep-agent on its PATH)
  --agent-image-pull-policy P  Always, IfNotPresent or Never (default IfNotPresent)
  --operator-namespace NS      the operator's namespace, whose pods a job with spec.isolation NetworkPolicy
                               admits on its metrics port (for status.progress; default $POD_NAMESPACE)
  --monitoring-namespace NS    the namespace whose pods (Prometheus) such a job admits on its metrics port
                               (default '': none)
  --default-isolation I        None or NetworkPolicy: what a job whose spec.isolation is unset gets
                               (default None; docs/security.md, "Network isolation")
  --log-level L                debug, info, warn or error (default info)
  --version, --help
)";

// A namespace name, or '' for none.
std::string dns_label(const char* what, const std::string& v) {
  if (auto error = lockstep::reconcile::namespace_flag_error(what, v); !error.empty())
    throw lockstep::flags::FlagError(error + "; '' for none");
  return v;
}

Options parse(int argc, char** argv) {
  using namespace lockstep::flags;
  Options o;
  bool seen_operator_namespace = false;  // an explicit '' overrides $POD_NAMESPACE
  for (int i = 1; i < argc; ++i) {
    std::string v, a = argv[i];
    if (a == "--help" || a == "-h") { std::cout << kUsage; std::exit(0); }
    if (a == "--version") { std::cout << "lockstep-operator " << LOCKSTEP_VERSION << "\n"; std::exit(0); }
    if (match(argc, argv, i, "--kubeconfig", v)) o.kubeconfig = v;
    else if (match(argc, argv, i, "--context", v)) o.context = v;
    else if (match(argc, argv, i, "--namespace", v)) o.watch_namespace = v;
    else if (match(argc, argv, i, "--workers", v)) o.workers = to_int("--workers", v, 1, 256);
    else if (match(argc, argv, i, "--create-parallelism", v)) o.create_parallelism = to_int("--create-parallelism", v, 1, 256);
    else if (match(argc, argv, i, "--max-pod-creates-per-pass", v)) o.max_creates_per_pass = to_int("--max-pod-creates-per-pass", v, 1, 100000);
    else if (match(argc, argv, i, "--kube-api-qps", v)) o.qps = to_double("--kube-api-qps", v, 0.1, 1e6);
    else if (match(argc, argv, i, "--kube-api-burst", v)) o.burst = to_int("--kube-api-burst", v, 1, 1000000);
    else if (match(argc, argv, i, "--http-port", v)) o.http_port = to_int("--http-port", v, 0, 65535);
    else if (match(argc, argv, i, "--http-address", v)) o.http_address = v;
    else if (match(argc, argv, i, "--leader-elect", v)) o.leader_elect = to_bool("--leader-elect", v);
    else if (match(argc, argv, i, "--leader-election-namespace", v)) o.lease_namespace = v;
    else if (match(argc, argv, i, "--leader-election-id", v)) o.lease_name = v;
    else if (match(argc, argv, i, "--lease-duration", v)) o.lease_duration = to_duration("--lease-duration", v);
    else if (match(argc, argv, i, "--renew-deadline", v)) o.renew_deadline = to_duration("--renew-deadline", v);
    else if (match(argc, argv, i, "--retry-period", v)) o.retry_period = to_duration("--retry-period", v);
    else if (match(argc, argv, i, "--restart-backoff", v)) o.restart_backoff = to_duration("--restart-backoff", v);
    else if (match(argc, argv, i, "--restart-backoff-max", v)) o.restart_backoff_max = to_duration("--restart-backoff-max", v);
    else if (match(argc, argv, i, "--restart-backoff-reset", v)) o.restart_backoff_reset = to_duration("--restart-backoff-reset", v);
    else if (match(argc, argv, i, "--node-watch", v)) o.node_watch = to_bool("--node-watch", v);
    else if (match(argc, argv, i, "--resync-period", v)) o.resync_period = to_duration("--resync-period", v);
    else if (match(argc, argv, i, "--status-batch-period", v)) o.status_batch_period = to_duration("--status-batch-period", v);
    else if (match(argc, argv, i, "--podgroup-check-period", v)) o.podgroup_check_period = to_duration("--podgroup-check-period", v);
    else if (match(argc, argv, i, "--progress-period", v)) o.progress_period = to_duration("--progress-period", v);
    else if (match(argc, argv, i, "--agent-image", v)) {
      if (auto error = lockstep::reconcile::agent_image_flag_error(v); !error.empty()) throw FlagError(error);
      o.agent_image = v;
    } else if (match(argc, argv, i, "--agent-image-pull-policy", v)) {
      if (auto error = lockstep::reconcile::pull_policy_flag_error(v); !error.empty()) throw FlagError(error);
      o.agent_image_pull_policy = v;
    } else if (match(argc, argv, i, "--operator-namespace", v)) {
      o.operator_namespace = dns_label("--operator-namespace", v);
      seen_operator_namespace = true;
    } else if (match(argc, argv, i, "--monitoring-namespace", v)) {
      o.monitoring_namespace = dns_label("--monitoring-namespace", v);
    } else if (match(argc, argv, i, "--default-isolation", v)) {
      if (auto error = lockstep::reconcile::isolation_flag_error(v); !error.empty()) throw FlagError(error);
      o.default_isolation = v == "NetworkPolicy" ? lockstep::reconcile::Isolation::NetworkPolicy : lockstep::reconcile::Isolation::None;
    } else if (match(argc, argv, i, "--log-level", v)) {
      lockstep::log::Level level;
      if (!lockstep::log::parse_level(v, level))
        throw FlagError("--log-level: expected debug, info, warn or error, got '" + v + "'");
      lockstep::log::set_level(level);
    } else {
      throw FlagError("unknown flag '" + a + "' (see --help)");
    }
  }
  if (!seen_operator_namespace)
    if (const char* env = std::getenv("POD_NAMESPACE")) o.operator_namespace = dns_label("POD_NAMESPACE", env);
  if (o.renew_deadline >= o.lease_duration)
    throw FlagError("--renew-deadline must be shorter than --lease-duration");
  if (o.identity.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    o.identity = std::string(host) + "_" + std::to_string(::getpid());
  }
  return o;
}

// Stop signals are taken on the main thread with sigwait, so shutdown runs as normal code.
sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

lockstep::controller::Config controller_config(const Options& opt) {
  lockstep::controller::Config cc;
  cc.workers = opt.workers;
  cc.create_parallelism = opt.create_parallelism;
  cc.max_creates_per_pass = opt.max_creates_per_pass;
  cc.watch_namespace = opt.watch_namespace;
  cc.decide.restart_backoff = opt.restart_backoff;
  cc.decide.restart_backoff_max = opt.restart_backoff_max;
  cc.decide.restart_backoff_reset = opt.restart_backoff_reset;
  cc.node_watch = opt.node_watch;
  cc.resync_period = opt.resync_period;
  cc.status_batch_period = opt.status_batch_period;
  cc.progress_period = opt.progress_period;
  cc.podgroup_check_period = opt.podgroup_check_period;
  cc.agent.image = opt.agent_image;
  cc.agent.pull_policy = opt.agent_image_pull_policy;
  if (cc.agent.image.empty())
    LOCKSTEP_LOG(Info, "operator", "--agent-image '': no agent injected; every pod's image must have lockstep-agent on its PATH");
  else
    LOCKSTEP_LOG(Info, "operator", "agent injected into every pod from " << cc.agent.image);
  cc.isolation = {opt.operator_namespace, opt.monitoring_namespace};
  cc.default_isolation = opt.default_isolation;
  LOCKSTEP_LOG(Info, "operator", "jobs with spec.isolation NetworkPolicy admit on their metrics port "
                                     << (opt.operator_namespace.empty() ? "no operator namespace (--operator-namespace, $POD_NAMESPACE unset: status.progress cannot be read where the policy is enforced)"
                                                                        : "namespace " + opt.operator_namespace + " (the operator's)")
                                     << (opt.monitoring_namespace.empty() ? "" : " and namespace " + opt.monitoring_namespace + " (monitoring)"));
  return cc;
}

// /healthz, /readyz and /metrics, or none with --http-port 0. Throws where it cannot listen.
std::unique_ptr<lockstep::op::HttpServer> serve_http(const Options& opt, lockstep::controller::Controller& controller,
                                                     lockstep::op::Metrics& metrics, const std::atomic<bool>& stopping,
                                                     const std::atomic<bool>& leading) {
  if (opt.http_port == 0) return nullptr;
  using lockstep::op::HttpAnswer;
  // See Note [Metrics page]: made at most once a second, shared by its readers, 8 of them at once.
  auto page = std::make_shared<lockstep::op::MetricsPage>([c = &controller, m = &metrics] {
    c->refresh_metrics();
    return m->render();
  });
  std::map<std::string, lockstep::op::HttpHandler> routes{
      {"/metrics", [page] {
         auto read = page->read();
         if (!read.text) return HttpAnswer{503, "busy: too many /metrics readers at once; retry\n"};
         HttpAnswer a{200, "", "text/plain; version=0.0.4"};
         a.shared_body = std::move(read.text);
         a.hold = std::move(read.slot);
         return a;
       }},
      {"/healthz", [] { return HttpAnswer{200, "ok"}; }},
      {"/readyz", [&] {
         // Ready when the caches are synced, or while waiting as a standby replica.
         bool ready = !stopping && (controller.synced() || !leading);
         return HttpAnswer{ready ? 200 : 503, ready ? "ok" : "not ready"};
       }},
  };
  auto server = std::make_unique<lockstep::op::HttpServer>(opt.http_address, opt.http_port, std::move(routes));
  LOCKSTEP_LOG(Info, "operator", "serving /healthz, /readyz and /metrics on " << server->url());
  return server;
}

// What the operator runs and shares between its main thread (signals, shutdown) and the thread
// that leads (elects, syncs the caches, starts the workers, watches the Lease).
struct Running {
  const Options& opt;
  lockstep::op::Metrics& metrics;
  lockstep::controller::Controller& controller;
  lockstep::kube::LeaderElector& elector;
  std::atomic<bool> stopping{false}, leading{false};
  std::atomic<int> exit_code{0};

  // Fatal: a stop signal to ourselves, so main shuts down as for any other.
  void fail() {
    exit_code = 1;
    ::kill(::getpid(), SIGTERM);
  }
  void lost() {  // another replica may already lead: stop at once
    metrics.leader.Set(0);
    fail();
  }
  void lead() {
    if (opt.leader_elect && !elector.acquire(stopping)) return;  // renewals run from here on
    leading = true;
    metrics.leader.Set(1);
    controller.start_informers();
    if (!controller.wait_for_sync(120s, [&] { return opt.leader_elect && !elector.leading(); })) {
      if (stopping) return;
      if (opt.leader_elect && !elector.leading()) return lost();
      LOCKSTEP_LOG(Error, "operator", "caches did not sync within 120 s");
      return fail();
    }
    LOCKSTEP_LOG(Info, "operator", "caches synced; starting " << opt.workers << " workers");
    controller.start_workers();
    if (opt.leader_elect && !elector.wait_while_leading(stopping)) lost();
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Fewer malloc arenas: with one per busy thread, freed JSON lingers in each (bench/operator).
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);   // big response bodies go straight back to the OS
  mallopt(M_TRIM_THRESHOLD, 256 * 1024);
  Options opt;
  lockstep::kube::RestConfig config;
  try {
    opt = parse(argc, argv);
    config = lockstep::kube::RestConfig::load(opt.kubeconfig, opt.context);
  } catch (const lockstep::flags::FlagError& e) {
    std::cerr << "lockstep-operator: " << e.what() << "\n";
    return 2;
  } catch (const lockstep::kube::ConfigError& e) {
    std::cerr << "lockstep-operator: " << e.what() << "\n";
    return 2;
  }
  sigset_t stop_signals = block_stop_signals();
  config.qps = opt.qps;
  config.burst = opt.burst;
  if (opt.lease_namespace.empty()) opt.lease_namespace = config.default_namespace;
  LOCKSTEP_LOG(Info, "operator", "lockstep-operator " << LOCKSTEP_VERSION << " against " << config.server
                                                      << (opt.watch_namespace.empty() ? " (all namespaces)" : " (namespace " + opt.watch_namespace + ")"));

  lockstep::op::Metrics metrics;
  auto observe = [&metrics](const std::string& verb, int code) { metrics.observe_request(verb, code); };
  lockstep::kube::Client client(config);
  client.set_observer(observe);
  lockstep::controller::Controller controller(client, controller_config(opt), metrics);

  // See Note [Fenced writes]: the Lease has a client of its own, each request bounded by the renew
  // deadline; the controller's client writes only while leading() holds.
  lockstep::kube::RestConfig lease_config = config;
  lease_config.request_timeout = opt.renew_deadline;
  lockstep::kube::Client lease_client(lease_config);
  lease_client.set_observer(observe);
  lockstep::kube::LeaderElector elector(lease_client, {opt.lease_namespace, opt.lease_name, opt.identity,
                                                       opt.lease_duration, opt.renew_deadline, opt.retry_period});
  Running run{opt, metrics, controller, elector};
  std::unique_ptr<lockstep::op::HttpServer> server;
  try {
    server = serve_http(opt, controller, metrics, run.stopping, run.leading);
  } catch (const std::exception& e) {
    std::cerr << "lockstep-operator: " << e.what() << "\n";
    return 2;
  }
  if (opt.leader_elect) client.set_write_gate([&elector] { return elector.leading(); });
  std::thread runner([&run] { run.lead(); });

  int sig = 0;
  sigwait(&stop_signals, &sig);
  LOCKSTEP_LOG(Info, "operator", (run.exit_code ? "stopping after a fatal error" : std::string("received ") + strsignal(sig) + ", shutting down"));
  run.stopping = true;
  controller.stop();  // in-flight reconciles finish; no new ones start
  runner.join();
  elector.stop_renewing();
  if (opt.leader_elect && run.leading && run.exit_code == 0) elector.release();
  server.reset();
  LOCKSTEP_LOG(Info, "operator", "stopped");
  std::fflush(nullptr);
  ::_exit(run.exit_code);  // watch streams may still be open; nothing else is left to flush
}
