#include "supervisor.hpp"

#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "barrier/client.hpp"
#include "barrier/server.hpp"
#include "barrier/trust.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/random.hpp"
#include "lockstep/time_text.hpp"
#include "lockstep/text.hpp"
#include "stall_watch.hpp"
#include "straggler_watch.hpp"
#include "termination_message.hpp"

namespace lockstep::agent {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// A verdict from node 0's agent, bounded before it reaches a log or the termination message
// (Note [Barrier trust]).
int verdict_code(const Message& m) {
  int code = m.get_int("exit", contract::kExitRendezvous);
  return code >= 0 && code <= 255 ? code : contract::kExitRendezvous;
}
std::string verdict_why(const Message& m) { return clean_text(m.get("why"), kVerdictWhyBytes); }

// The next message that matters at generation `gen`, waiting at most `wait` for the first:
// heartbeats and what is left of older generations are passed over, so a verdict that came
// just before the connection's end is seen before the end is (Note [Heartbeats]).
std::optional<Message> next_message(BarrierClient& barrier, std::chrono::milliseconds wait, int gen) {
  for (auto m = barrier.poll(wait);; m = barrier.poll(std::chrono::milliseconds(0)))
    if (!m || (m->verb != "ALIVE" && m->get_int("gen", gen) >= gen)) return m;
}

sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&s, sig);
  return s;
}

// Waits up to `timeout` for a stop signal (returned) or a child's exit (SIGCHLD, returns 0
// at once), so the first worker to die is seen before the peers it takes down with it.
int wait_for_event(std::chrono::milliseconds timeout) {
  sigset_t s = stop_signals();
  sigaddset(&s, SIGCHLD);
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000L};
  int sig = sigtimedwait(&s, nullptr, &ts);
  return sig == SIGCHLD || sig < 0 ? 0 : sig;
}

// A stop signal, if one is pending; 0 otherwise. Never blocks.
int pending_stop_signal() {
  sigset_t s = stop_signals();
  timespec zero{0, 0};
  int sig = sigtimedwait(&s, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

}  // namespace

Supervisor::Supervisor(const Config& cfg, Metrics* metrics, std::string metrics_dir)
    : cfg_(cfg), metrics_(metrics), group_(cfg_, metrics, std::move(metrics_dir), [this] { keep_alive(); }) {}

void Supervisor::block_signals() {
  sigset_t s = stop_signals();
  sigaddset(&s, SIGCHLD);  // taken with sigtimedwait in run()
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool Supervisor::wait_for_master() {
  auto start = std::chrono::steady_clock::now();
  auto next_note = start + std::chrono::seconds(10);
  while (true) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(cfg_.master_addr.c_str(), nullptr, &hints, &res);
    auto now = std::chrono::steady_clock::now();
    if (rc == 0) {  // said once, so a user (and the cluster tier) sees where the gang meets
      char host[NI_MAXHOST] = "?";
      if (res) ::getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
      LOCKSTEP_LOG(Info, "agent", "master address '" << cfg_.master_addr << "' resolved to " << host << " after "
                                  << std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count() / 1000.0
                                  << " s");
    }
    if (res) ::freeaddrinfo(res);
    if (rc == 0) return true;
    if (now - start >= cfg_.rendezvous_timeout) {
      LOCKSTEP_LOG(Error, "agent", "the master address '" << cfg_.master_addr << "' (LOCKSTEP_MASTER_ADDR) did not resolve within "
                                   << std::chrono::duration_cast<std::chrono::seconds>(cfg_.rendezvous_timeout).count()
                                   << " s (" << gai_strerror(rc) << "); is pod 0 running and the headless Service there? "
                                   << "(--rendezvous-timeout)");
      return false;
    }
    if (now >= next_note) {
      LOCKSTEP_LOG(Info, "agent", "waiting for the master address '" << cfg_.master_addr << "' to resolve ("
                                  << std::chrono::duration_cast<std::chrono::seconds>(now - start).count() << " s)");
      next_note += std::chrono::seconds(10);
    }
    if (int sig = pending_stop_signal()) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << " while waiting for the master address");
      ::_exit(128 + sig);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int Supervisor::finish(int code, const std::string& why, const Worker* culprit, const std::optional<Failure>& remote) {
  std::lock_guard<std::mutex> lock(group_.output_mutex());
  std::cout.flush();
  std::cerr << "\nlockstep-agent: " << why << "; exiting with code " << code << "\n";
  std::vector<std::string> tail;
  if (culprit) tail.assign(culprit->tail.begin(), culprit->tail.end());
  else if (remote) tail = split_lines(remote->tail);
  if (!tail.empty()) {
    std::cerr << "last lines of rank " << (culprit ? culprit->rank : remote->rank)
              << (culprit ? "" : " (node " + std::to_string(remote->node) + ")") << ":\n";
    for (const auto& l : tail) std::cerr << "  | " << l << "\n";
  }
  // What torch.distributed.elastic's @record wrote (TORCHELASTIC_ERROR_FILE), as torchrun
  // shows it: the exception and its traceback, bounded.
  if (culprit) {
    std::ifstream f(group_.error_file(culprit->local_rank));
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!text.empty()) {
      if (text.size() > 4000) text = lockstep::text::utf8_head(text, 4000) + "...";
      std::cerr << "error file of rank " << culprit->rank << " (TORCHELASTIC_ERROR_FILE):\n  " << text << "\n";
    }
  }
  std::cerr.flush();
  if (code != 0) write_termination_message(why, tail, silent_peer_);
  else if (cfg_.node_rank == 0 && metrics_) write_progress_summary(*metrics_);
  return code;
}

void Supervisor::note_silent_peer(const Message& verdict) {
  const int node = verdict.get_int("silent", -1);
  if (node >= 0 && node < cfg_.nnodes) silent_peer_ = node;
}

void Supervisor::linger_after_stall() {
  if (!metrics_ || metrics_->endpoint().empty() || cfg_.metrics_linger.count() <= 0) return;
  LOCKSTEP_LOG(Info, "agent", "keeping /metrics on " << metrics_->endpoint() << " up for "
                              << cfg_.metrics_linger.count() / 1000.0
                              << " s so the stall is scraped (--metrics-linger; SIGTERM ends it)");
  auto deadline = std::chrono::steady_clock::now() + cfg_.metrics_linger;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    if (int sig = wait_for_event(std::min(left, std::chrono::milliseconds(200)))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << ": leaving now");
      return;
    }
    group_.reap_orphans();
  }
}

void Supervisor::share_figures(BarrierClient& barrier, int gen) {
  const auto now = std::chrono::steady_clock::now();
  // Node 0's straggler watch shows its own ranks' scores as it judges the gang.
  if (!metrics_ || cfg_.node_rank == 0 || now < next_figures_) return;
  next_figures_ = now + kFiguresInterval;
  const auto figures = metrics_->figures(steady_seconds());
  metrics_->show_scores(barrier.reference(), figures);
  if (!figures.empty()) barrier.send(figures_message(gen, figures));
}

void Supervisor::keep_alive() {
  if (barrier_) barrier_->tick();
}

std::string Supervisor::own_silence(const BarrierClient& barrier) const {
  if (!cfg_.peer_checks()) return "";
  // Node 0's agent: its server's thread may have measured the freeze a little longer than this
  // thread did (Note [Heartbeats]).
  if (std::string why = server_ ? server_->fenced() : ""; !why.empty())
    return why + "; this agent stands down instead of carrying on";
  if (barrier.own_silence() <= cfg_.peer_timeout) return "";
  return "this agent was silent itself for " + time_text::seconds(barrier.own_silence(), 2) + " (more than " +
         cfg_.peer_timeout_from + ", " + time_text::setting_seconds(cfg_.peer_timeout) +
         "): its process or node was frozen, and its peers have given it up; it stands down instead of carrying on";
}

std::string Supervisor::server_gone(const BarrierClient& barrier) const {
  if (std::string why = server_ ? server_->fenced() : ""; !why.empty())  // node 0's own, after a freeze
    return why + "; this agent stands down instead of carrying on";
  if (barrier.lost())
    return "lost node 0's agent (the restart barrier at " + (barrier.peer().empty() ? cfg_.master_addr : barrier.peer()) +
           "): its pod was deleted or its node lost";
  if (!cfg_.peer_checks() || barrier.server_silence() <= cfg_.peer_timeout) return "";
  silent_peer_ = 0;  // Note [Silent peer]
  return "node 0's agent (" + barrier.peer() + ") said nothing for " + time_text::seconds(barrier.server_silence(), 2) +
         " (more than " + cfg_.peer_timeout_from + ", " + time_text::setting_seconds(cfg_.peer_timeout) +
         "); treating it as lost (its node frozen, powered off or cut off)";
}

// Joins the restart barrier (Note [Restart barrier]): connects to node 0's agent, retrying
// until the rendezvous timeout, says HELLO and waits for generation 0 to start. Returns the
// agent's exit code if it must stop instead (a refusal, a timeout, a stop signal), else -1.
int Supervisor::join_barrier(BarrierClient& barrier, const std::string& host, int port) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + cfg_.rendezvous_timeout + std::chrono::seconds(30);
  auto next_note = start + std::chrono::seconds(10);
  std::string error;
  bool connected = false;
  bool said_hello = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (int sig = pending_stop_signal()) return finish(128 + sig, std::string("stopped by ") + strsignal(sig) + " while joining the restart barrier", nullptr);
    if (!connected) {
      connected = barrier.connect(host, port, error);
      if (!connected) {
        if (std::chrono::steady_clock::now() >= next_note) {
          LOCKSTEP_LOG(Info, "agent", "waiting for node 0's agent at " << host << ":" << port << " (" << error
                                      << "; LOCKSTEP_AGENT_PORT)");
          next_note += std::chrono::seconds(10);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
    }
    auto m = barrier.poll(std::chrono::milliseconds(100));
    while (m && m->verb == "ALIVE") m = barrier.poll(std::chrono::milliseconds(0));
    if (said_hello) {  // Note [Heartbeats]: a member from here on
      if (std::string why = own_silence(barrier); !why.empty()) {
        barrier.close();
        return finish(contract::kExitRendezvous, why, nullptr);
      }
    }
    if (m && m->verb == "CHALLENGE" && !said_hello) {  // Note [Barrier trust]: prove membership
      Message hello{"HELLO", {{"node", std::to_string(cfg_.node_rank)}, {"run", cfg_.run_id},
                              {"attempt", std::to_string(cfg_.restart_attempt)}}};
      if (!cfg_.barrier_secret.empty())
        hello.fields["proof"] = barrier_proof(cfg_.barrier_secret, m->get("nonce"), cfg_.node_rank,
                                              cfg_.restart_attempt, cfg_.run_id);
      barrier.send(hello);
      said_hello = true;
      continue;
    }
    if (m && m->verb == "EXIT") {
      note_silent_peer(*m);
      return finish(verdict_code(*m), verdict_why(*m), nullptr);
    }
    // A START read together with the connection's end is not acted on (Note [Heartbeats]).
    if (m && m->verb == "START" && m->get_int("gen") == 0 && barrier.lost())
      return finish(contract::kExitRendezvous, server_gone(barrier), nullptr);
    if (said_hello && !barrier.lost())
      if (std::string why = server_gone(barrier); !why.empty()) return finish(contract::kExitRendezvous, why, nullptr);
    if (m && m->verb == "START" && m->get_int("gen") == 0) {
      if (cfg_.nnodes > 1)
        LOCKSTEP_LOG(Info, "agent", "all " << cfg_.nnodes << " agents joined the restart barrier after "
                                    << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count() / 1000.0
                                    << " s (in-place restarts: up to " << cfg_.max_restarts << ", restartPolicy "
                                    << cfg_.restart_policy << ")");
      return -1;
    }
    if (barrier.lost()) {  // node 0's agent restarted or refused us without a word: try again
      connected = said_hello = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return finish(contract::kExitRendezvous, "could not join the restart barrier of node 0's agent at " + host + ":" +
                                               std::to_string(port) + " within the rendezvous timeout (" + error +
                                               "; --rendezvous-timeout, LOCKSTEP_AGENT_PORT)",
                nullptr);
}

int Supervisor::run() {
  // See Note [The agent as init]: orphans below us come to us even when we are not PID 1.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (metrics_) {  // Note [Python probe]: said once, as the agent says what else it watches
    if (!cfg_.python_probe_dir.empty())
      LOCKSTEP_LOG(Info, "agent", "python probe: " << cfg_.python_probe_dir << " first on each worker's PYTHONPATH "
                                  "(PyTorch programs report their optimizer steps; LOCKSTEP_PYTHON_PROBE=0 turns it off)");
    else
      LOCKSTEP_LOG(Info, "agent", "python probe: " << cfg_.python_probe_note);
    // Note [NCCL profiler plugin]
    if (cfg_.nccl_profiler.empty())
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: " << cfg_.nccl_profiler_note);
    else if (const char* theirs = std::getenv(contract::kNcclProfilerPlugin))
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: the environment's NCCL_PROFILER_PLUGIN=" << theirs
                                  << " kept, so no lockstep_nccl_ series (unset it for the agent's plugin)");
    else
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: " << cfg_.nccl_profiler << " in each worker's NCCL_PROFILER_PLUGIN "
                                  "(every NCCL operation timed; LOCKSTEP_NCCL_PROFILER=0 turns it off)");
  }
  if (!wait_for_master()) return contract::kExitRendezvous;
  // See Note [Restart barrier]: node 0's agent serves it; a single node keeps it on loopback.
  std::unique_ptr<BarrierServer> server;
  // See Note [Barrier trust]: a single node is its own peer, so it can draw its own secret.
  if (cfg_.nnodes == 1 && cfg_.barrier_secret.empty()) cfg_.barrier_secret = random_hex(32);
  if (cfg_.node_rank == 0) {
    try {
      server = cfg_.nnodes == 1 ? std::make_unique<BarrierServer>(cfg_, "127.0.0.1", 0)
                                : std::make_unique<BarrierServer>(cfg_, "0.0.0.0", cfg_.barrier_port());
    } catch (const std::exception& e) {
      return finish(contract::kExitUsage, e.what(), nullptr);
    }
  }
  BarrierClient barrier;
  barrier.set_heartbeat_interval(cfg_.heartbeat_interval());
  // See Note [Heartbeats]: every loop below ticks the barrier, the WorkerGroup's stop included.
  struct Ticking {
    Supervisor& s;
    ~Ticking() {
      s.barrier_ = nullptr;
      s.server_ = nullptr;
    }
  } ticking{*this};
  barrier_ = &barrier;
  server_ = server.get();
  // Node 0's agent judges the gang's stragglers (docs/metrics.md, "Stragglers"), a single node
  // its own local ranks.
  std::unique_ptr<StragglerWatch> stragglers;
  if (server && metrics_) stragglers = std::make_unique<StragglerWatch>(cfg_, *metrics_, server->figures());
  if (int code = join_barrier(barrier, server ? "127.0.0.1" : cfg_.master_addr,
                              server ? server->port() : cfg_.barrier_port());
      code >= 0)
    return code;

  for (int gen = 0;;) {
    if (metrics_) metrics_->reset_progress(gen);
    group_.start(gen);
    Generation g = watch_generation(gen, barrier);
    if (g.exit) return *g.exit;
    if (auto code = await_verdict(gen, barrier, g)) return *code;
  }
}

// Watches the workers and the barrier until generation `gen` ends on this node: every worker
// finished, one failed or stalled (reported to the barrier), another node failed (STOP), or
// the agent itself must exit (`exit`: a signal, the barrier's EXIT, the barrier lost).
Supervisor::Generation Supervisor::watch_generation(int gen, BarrierClient& barrier) {
  Generation r;
  auto& mine = r.mine;
  auto& culprit = r.culprit;
  auto& done = r.done;
  // Watch the workers and the barrier until this generation ends here.
  while (true) {
    group_.pump_output();
    if (int sig = wait_for_event(std::chrono::milliseconds(20))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << ": stopping the workers (grace period "
                                                 << cfg_.grace_period.count() / 1000.0 << " s)");
      group_.stop();
      r.exit = finish(128 + sig, std::string("stopped by ") + strsignal(sig), nullptr);
      return r;
    }
    // See Note [Heartbeats]: a thawed agent acts on nothing it reads or sees after the freeze.
    barrier.tick();
    share_figures(barrier, gen);
    if (std::string why = own_silence(barrier); !why.empty()) {
      barrier.close();  // node 0's agent learns at once, if it is still there
      LOCKSTEP_LOG(Error, "agent", why << "; stopping the workers");
      group_.stop();
      r.exit = finish(contract::kExitRendezvous, why, nullptr);
      return r;
    }
    for (auto& w : group_.workers()) {
      if (w.exited) continue;
      if (auto st = w.process.try_wait()) {
        w.exited = true;
        w.status = *st;
        if (metrics_) metrics_->set_worker_up(w.local_rank, false);
        if (st->success()) ++done;
        // Of the workers found dead at once, one that is not a peer's consequence (a lost
        // collective: contract::kExitCollective) is the cause.
        else if (!culprit || (contract::exit_code_is_consequence(culprit->status.shell_code()) &&
                              !contract::exit_code_is_consequence(st->shell_code())))
          culprit = &w;
      }
    }
    if (culprit) {
      group_.pump_output();  // the culprit has exited: its last words are in the pipe now
      mine = Failure{cfg_.node_rank, culprit->rank, culprit->status.shell_code(), "WorkerFailed", unix_ms(),
                     "rank " + std::to_string(culprit->rank) + " (pid " + std::to_string(culprit->process.pid()) +
                         ") " + culprit->status.describe(), ""};
      for (const auto& l : culprit->tail) mine->tail += l + "\n";
      LOCKSTEP_LOG(Error, "agent", mine->what << " first; stopping the other workers");
      barrier.send(failure_message("FAILED", gen, mine));
      break;
    }
    if (done == cfg_.nproc_per_node) break;
    group_.reap_orphans();
    std::string stuck = check_stall(cfg_, metrics_, group_.workers());
    if (!stuck.empty()) {
      metrics_->count_stall();
      mine = Failure{cfg_.node_rank, std::atoi(stuck.c_str()), contract::kExitStall, "Stall", unix_ms(),
                     "stall detected on rank(s) " + stuck, ""};
      barrier.send(failure_message("FAILED", gen, mine));
      break;
    }
    auto m = next_message(barrier, std::chrono::milliseconds(0), gen);
    if (m && m->verb == "STOP" && m->get_int("gen") == gen) {
      LOCKSTEP_LOG(Info, "agent", "another node failed: stopping this node's workers for the restart barrier");
      break;
    }
    if (m && m->verb == "EXIT") {
      group_.stop();
      note_silent_peer(*m);
      r.exit = finish(verdict_code(*m), verdict_why(*m), nullptr);
      return r;
    }
    if (std::string why = server_gone(barrier); !why.empty()) {  // lost, or silent (Note [Heartbeats])
      LOCKSTEP_LOG(Error, "agent", why << "; stopping the workers");
      group_.stop();
      r.exit = finish(contract::kExitRendezvous, why, nullptr);
      return r;
    }
  }
  return r;
}

// After generation `gen` ended here: stops the workers, tells the barrier (DONE or STOPPED) and
// waits for its verdict. nullopt with `gen` advanced: the next generation starts; else the
// agent's exit code.
std::optional<int> Supervisor::await_verdict(int& gen, BarrierClient& barrier, const Generation& g) {
  const auto& mine = g.mine;
  const Worker* culprit = g.culprit;
  const bool finished = !mine && g.done == cfg_.nproc_per_node;
  group_.stop();  // collects output; for a finished node, everyone has exited already
  barrier.send(failure_message(finished ? "DONE" : "STOPPED", gen, mine));
  const std::string all_finished = "all " + std::to_string(cfg_.nproc_per_node) + " worker(s) finished";
  // Wait for the barrier's verdict: the next generation, or the end. A finished node may
  // wait as long as its peers train; a stopped one only as long as stopping can take.
  const auto deadline = std::chrono::steady_clock::now() + cfg_.grace_period + std::chrono::seconds(60);
  while (true) {
    if (int sig = wait_for_event(std::chrono::milliseconds(0))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << " while waiting at the restart barrier");
      return finish(128 + sig, std::string("stopped by ") + strsignal(sig), nullptr);
    }
    auto m = next_message(barrier, std::chrono::milliseconds(50), gen);
    group_.reap_orphans();
    // See Note [Heartbeats]: a thawed agent never starts workers again; a finished one has none
    // to stop and leaves as finished, as when the barrier is lost.
    if (std::string why = own_silence(barrier); !why.empty()) {
      barrier.close();
      if (finished) return finish(0, all_finished + "; " + why, nullptr);
      return finish(contract::kExitRendezvous, why, nullptr);
    }
    if (m && m->verb == "EXIT") {
      note_silent_peer(*m);
      int code = verdict_code(*m);
      auto cause = failure_of(*m);
      if (code == 0) return finish(0, all_finished, nullptr);
      if (mine && mine->reason == "Stall") linger_after_stall();
      const bool here = cause && cause->node == cfg_.node_rank;
      if (here && culprit) return finish(code, verdict_why(*m), culprit);
      // The cause ran on another node: quote its last words as that node's agent sent them,
      // so whichever pod the operator reads first tells the user what went wrong.
      return finish(code, verdict_why(*m), nullptr, cause ? std::optional<Failure>(cause) : std::nullopt);
    }
    // Lost or silent (Note [Heartbeats]), before a START or STOP that came with the end is
    // acted on.
    if (std::string why = server_gone(barrier); !why.empty()) {
      if (finished) {
        LOCKSTEP_LOG(Warn, "agent", why << "; this node's workers all finished, so it leaves without the barrier's verdict");
        return finish(0, all_finished + "; " + why, nullptr);
      }
      return finish(contract::kExitRendezvous, why, nullptr);
    }
    if (m && m->verb == "STOP" && m->get_int("gen") == gen) {  // after DONE: a peer failed
      barrier.send(failure_message("STOPPED", gen, std::nullopt));
      continue;
    }
    if (m && m->verb == "START" && m->get_int("gen") == gen + 1) {
      gen += 1;
      auto cause = failure_of(*m);
      LOCKSTEP_LOG(Warn, "agent", "restart barrier: " << verdict_why(*m) << "; starting generation " << gen
                                                      << " (TORCHELASTIC_RESTART_COUNT=" << cfg_.restart_attempt + gen << ")");
      if (metrics_) metrics_->count_in_place_restart(cause ? cause->reason : "WorkerFailed", cause ? cause->rank : -1,
                                                     cause ? cause->code : 0, gen, verdict_why(*m));
      return std::nullopt;
    }
    if (!finished && std::chrono::steady_clock::now() > deadline)
      return finish(contract::kExitRendezvous, "the restart barrier gave no verdict in time (a node could not stop its workers?)", nullptr);
  }
}

}  // namespace lockstep::agent
