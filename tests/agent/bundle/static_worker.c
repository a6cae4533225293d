/* lockstep-bundle-test-worker: a statically linked worker for roots with no libc
 * (tests/agent/bundle_test.cpp):
 *
 *   worker STEPS RELEASE_FILE
 *
 * prints its environment ("env NAME=VALUE" lines), sends STEPS step reports 20 ms apart to
 * LOCKSTEP_METRICS_SOCKET (docs/metrics.md), says so, then waits for RELEASE_FILE to exist
 * (the test scrapes /metrics meanwhile) and exits 0; exit 3 if it never appears (2 minutes). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {}
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: worker STEPS RELEASE_FILE\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (char **e = environ; *e; ++e) printf("env %s\n", *e);
  int steps = atoi(argv[1]);
  const char *sock = getenv("LOCKSTEP_METRICS_SOCKET");
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (sock) strncpy(addr.sun_path, sock, sizeof addr.sun_path - 1);
  for (int i = 1; i <= steps; ++i) {
    char line[256];
    int len = snprintf(line, sizeof line, "step=%d step_s=0.02 compute_s=0.015 comm_s=0.005 tokens=256 loss=%.3f", i, 4.0 / i);
    if (sock && fd >= 0) sendto(fd, line, (size_t)len, 0, (struct sockaddr *)&addr, sizeof addr);
    sleep_ms(20);
  }
  printf("rank %s reported %d steps%s\n", getenv("RANK") ? getenv("RANK") : "?", steps, sock ? "" : " (no LOCKSTEP_METRICS_SOCKET)");
  for (int waited = 0; access(argv[2], F_OK) != 0; waited += 50) {
    if (waited > 120000) {
      printf("%s never appeared\n", argv[2]);
      return 3;
    }
    sleep_ms(50);
  }
  return 0;
}
