// lockstep-controlplane: the test control plane for shell scripts.
//
//   lockstep-controlplane [--dir DIR] [--keep] -- COMMAND [ARGS...]
//       starts etcd and kube-apiserver, runs COMMAND with KUBECONFIG (and LOCKSTEP_TEST_*)
//       set, tears everything down and exits with COMMAND's exit code.
//   lockstep-controlplane [--dir DIR] [--keep]
//       starts them and waits for Ctrl-C, printing the variables to export.
//
// Exit codes: COMMAND's own; 2 bad usage; 3 the control plane did not start; 4 it died
// while COMMAND ran; 128+N when stopped by signal N.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>

#include "control_plane.hpp"

using namespace std::chrono_literals;
using lockstep::test::ControlPlane;

namespace {

void usage(std::ostream& out) {
  out << "usage: lockstep-controlplane [--dir DIR] [--keep] [--quiet] [-- COMMAND [ARGS...]]\n"
         "  Starts etcd and kube-apiserver (" << "from $LOCKSTEP_K8S_BIN) on loopback with TLS and token auth.\n"
         "  --dir DIR   keep state in DIR (created) instead of a temporary directory\n"
         "  --keep      keep the temporary directory (logs, certificates) after exit\n"
         "  --quiet     no start-up line\n"
         "  With COMMAND: runs it with KUBECONFIG set and exits with its code.\n"
         "  Without: prints the variables to export and waits for Ctrl-C.\n";
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::test::ControlPlaneOptions options;
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") { command.assign(argv + i + 1, argv + argc); break; }
    if (a == "--help" || a == "-h") { usage(std::cout); return 0; }
    if (a == "--keep") options.keep_dir = true;
    else if (a == "--quiet") options.quiet = true;
    else if (a == "--dir" && i + 1 < argc) options.dir = argv[++i];
    else if (a.rfind("--dir=", 0) == 0) options.dir = a.substr(6);
    else { std::cerr << "lockstep-controlplane: unknown argument '" << a << "'\n"; usage(std::cerr); return 2; }
  }

  // Signals are taken synchronously (sigwait) so teardown runs in normal code, not a handler.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<ControlPlane> cp;
  try {
    cp = ControlPlane::start(options);
  } catch (const std::exception& e) {
    std::cerr << "lockstep-controlplane: " << e.what() << "\n";
    return 3;
  }
  std::map<std::string, std::string> env = {
      {"KUBECONFIG", cp->kubeconfig()},
      {"LOCKSTEP_TEST_SERVER", cp->server()},
      {"LOCKSTEP_TEST_TOKEN", cp->token()},
      {"LOCKSTEP_TEST_CA", cp->ca_file()},
      {"LOCKSTEP_TEST_CONTROLPLANE_DIR", cp->dir()},
  };
  {
    std::ofstream pids(cp->dir() + "/pids");
    pids << cp->etcd_pid() << "\n" << cp->apiserver_pid() << "\n";
  }

  std::optional<lockstep::Process> child;
  if (!command.empty()) {
    lockstep::SpawnOptions so;
    so.argv = command;
    so.env = env;
    try {
      child = lockstep::Process::spawn(so);
    } catch (const std::exception& e) {
      std::cerr << "lockstep-controlplane: " << e.what() << "\n";
      return 127;
    }
  } else {
    for (const auto& [k, v] : env) std::cout << "export " << k << "=" << v << "\n";
    std::cout << "# control plane running; Ctrl-C stops it" << std::endl;
  }

  int rc = 0;
  timespec tick{1, 0};
  while (true) {
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (child) child->terminate(10s);
      rc = 128 + sig;
      break;
    }
    if (child) {
      if (auto st = child->try_wait()) { rc = st->shell_code(); break; }
    }
    if (!cp->healthy()) {
      std::cerr << "lockstep-controlplane: etcd or kube-apiserver died; logs in " << cp->dir() << "\n";
      if (child) child->terminate(10s);
      rc = 4;
      break;
    }
  }
  cp->stop();
  return rc;
}
