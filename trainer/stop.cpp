#include "stop.hpp"

#include <semaphore.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <thread>

namespace lockstep::trainer::stop {

namespace {

// What the handler touches: lock-free atomics, a semaphore and lines made beforehand (Note
// [Stop on request]).
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_signal_ns{0};
std::atomic<int64_t> g_deadline_ns{0};  // the step in progress must end by then; 0: no deadline
std::atomic<bool> g_stopping{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the signal handler needs lock-free atomics");
sem_t g_wake;
bool g_installed = false;
int64_t g_step_start_ns = 0, g_longest_step_ns = 0;  // the main loop's own

struct Line {
  char text[200] = {};
  size_t size = 0;
};
Line g_first[2], g_again[2];  // [0] SIGTERM, [1] SIGINT

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Line make_line(int rank, const char* what) {
  Line l;
  int n = std::snprintf(l.text, sizeof l.text, "lockstep-trainer: rank %d: %s\n", rank, what);
  l.size = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof l.text - 1);
  return l;
}

void say(const Line& l) {
  for (size_t done = 0; done < l.size;) {
    ssize_t n = ::write(STDERR_FILENO, l.text + done, l.size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void on_signal(int sig) {
  const int saved_errno = errno;
  const int which = sig == SIGINT ? 1 : 0;
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_signal_ns.store(now_ns());
    say(g_first[which]);
    ::sem_post(&g_wake);  // async-signal-safe: wakes the watchdog
  } else {
    say(g_again[which]);
  }
  errno = saved_errno;
}

// Note [Stop watchdog]
void watchdog() {
  while (::sem_wait(&g_wake) != 0 && errno == EINTR) {
  }
  while (!g_stopping.load()) {
    const int64_t deadline = g_deadline_ns.load();
    if (deadline != 0 && now_ns() > deadline) {
      const int sig = g_signal.load();
      char text[400];
      int n = std::snprintf(text, sizeof text,
                            "lockstep-trainer: the step in progress did not end by its deadline (4 x the longest step "
                            "so far, at least 10 s) after %s: blocked in a collective whose peer is gone or hung? "
                            "Nothing consistent can be saved; exiting with %d (Note [Stop watchdog])\n",
                            signal_name(sig), 128 + sig);
      if (n > 0) (void)!::write(STDERR_FILENO, text, std::min(static_cast<size_t>(n), sizeof text - 1));
      std::_Exit(128 + sig);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

void install(int rank) {
  if (g_installed) return;
  g_installed = true;
  g_first[0] = make_line(rank, "SIGTERM: stopping at the end of a step every rank agrees on, checkpointed there");
  g_first[1] = make_line(rank, "SIGINT: stopping at the end of a step every rank agrees on, checkpointed there");
  g_again[0] = make_line(rank, "SIGTERM again: already stopping; ignored, so the checkpoint is not cut short");
  g_again[1] = make_line(rank, "SIGINT again: already stopping; ignored, so the checkpoint is not cut short");
  ::sem_init(&g_wake, 0, 0);
  std::thread(watchdog).detach();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // Gloo's and the checkpoint writer's system calls carry on
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT}) ::sigaction(sig, &sa, nullptr);
}

int signal_received() { return g_signal.load(); }

double seconds_since_signal() {
  if (!g_signal.load()) return -1;
  return static_cast<double>(now_ns() - g_signal_ns.load()) / 1e9;
}

void step_begins() {
  g_step_start_ns = now_ns();
  g_deadline_ns.store(g_step_start_ns + std::max<int64_t>(10'000'000'000, 4 * g_longest_step_ns));
}

void step_ends() {
  g_deadline_ns.store(0);
  g_longest_step_ns = std::max(g_longest_step_ns, now_ns() - g_step_start_ns);
}

void stopping() {
  g_stopping.store(true);
  g_deadline_ns.store(0);
}

}  // namespace lockstep::trainer::stop
