// Child processes that can never outlive us: spawn, wait, terminate with a grace period.
//
// Note [Children die with their parent]
// Every child is spawned with PR_SET_PDEATHSIG=SIGKILL, so a parent killed without a
// chance to clean up (SIGKILL, a crash, a ctest timeout) still takes its children with it.
// The kernel sends that signal when the *thread* that forked exits, so spawn from a thread
// that lives as long as the child should (the main thread, in practice).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

struct SpawnOptions {
  std::vector<std::string> argv;                 // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;        // set on top of the inherited environment
  std::vector<std::string> unset_env;            // removed from the inherited environment
  std::string cwd;                               // empty: inherit
  std::string output_path;                       // empty: inherit stdout/stderr; else append both here
  int output_fd = -1;                            // or send both to this descriptor (e.g. a pipe)
  bool new_process_group = false;                // so a terminal's Ctrl-C does not reach it directly
  bool die_with_parent = true;                   // Note [Children die with their parent]
};

// A child's end, as a shell reports it: exit code, or 128 + signal number.
struct ExitStatus {
  int code = 0;     // exit code when exited normally
  int signal = 0;   // terminating signal, 0 if none
  int shell_code() const { return signal ? 128 + signal : code; }
  bool success() const { return signal == 0 && code == 0; }
  std::string describe() const;
  static ExitStatus from_wait_status(int status);
};

struct RunResult;

class Process {
 public:
  // Starts the child; throws std::runtime_error naming argv[0] if it cannot be executed.
  static Process spawn(const SpawnOptions& options);

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // a child still running is killed (SIGKILL) and reaped

  pid_t pid() const { return pid_; }
  bool running();                                      // reaps if it has ended
  std::optional<ExitStatus> try_wait();                // non-blocking
  ExitStatus wait();                                   // blocking
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  void signal(int sig);                                // to the group if it has its own
  // SIGTERM, then SIGKILL after `grace`; returns how it ended.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  friend RunResult run_capture(const std::vector<std::string>&, const std::map<std::string, std::string>&,
                               std::chrono::milliseconds, const std::string&);
  explicit Process(pid_t pid, bool own_group) : pid_(pid), own_group_(own_group) {}
  pid_t pid_ = -1;
  bool own_group_ = false;
  std::optional<ExitStatus> status_;
};

struct RunResult {
  ExitStatus status;
  std::string output;  // stdout and stderr, interleaved as written
  bool timed_out = false;
};

// Runs a command to completion and captures its output; kills it after `timeout`.
RunResult run_capture(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env = {},
                      std::chrono::milliseconds timeout = std::chrono::minutes(2),
                      const std::string& stdin_data = "");

// A free TCP port on 127.0.0.1 at the time of the call (the OS picks it), whose next port is
// free on every address too (an agent's restart barrier takes its master port + 1).
int free_loopback_port();

// Shell-style quoting for messages that show a command.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace lockstep
