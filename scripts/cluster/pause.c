// The pod sandbox's process (containerd's sandbox_image, scripts/cluster.sh): holds the
// pod's namespaces and does nothing else. As PID 1 of the pod it reaps whatever is
// re-parented to it and exits on SIGTERM or SIGINT, which a PID 1 without handlers ignores.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {}
}

int main(void) {
  struct sigaction quit = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGTERM, &quit, 0);
  sigaction(SIGINT, &quit, 0);
  sigaction(SIGCHLD, &child, 0);
  for (;;) pause();
}
