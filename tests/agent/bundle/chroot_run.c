/* lockstep-bundle-test-chroot: runs a program in a root file system as a container runtime
 * would, for tests/agent/bundle_test.cpp:
 *
 *   lockstep-bundle-test-chroot [--overlay LOWER:UPPER:WORK] [--env NAME=VALUE]... ROOT PROGRAM [ARGS...]
 *
 * In a mount namespace of its own (so nothing it mounts outlives it or shows outside), it
 * mounts an overlay of LOWER (read-only: a cached root is never written) and UPPER on ROOT
 * when asked, a fresh proc on ROOT/proc and the host's /dev on ROOT/dev, chroots into ROOT
 * and executes PROGRAM with exactly the --env variables: nothing of the test's environment
 * reaches it, and no host program ever sees an LD_PRELOAD meant for the root. The network is
 * the host's (loopback /metrics). The process keeps its pid through the exec. Exit 125 when
 * it cannot set the root up. Needs root. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what, const char *path) {
  fprintf(stderr, "lockstep-bundle-test-chroot: %s %s: %s\n", what, path, strerror(errno));
  exit(125);
}

static char *join(const char *a, const char *b) {
  char *s = malloc(strlen(a) + strlen(b) + 1);
  if (!s) exit(125);
  strcpy(s, a);
  strcat(s, b);
  return s;
}

int main(int argc, char **argv) {
  char *overlay = NULL;
  char **env = calloc((size_t)argc + 1, sizeof *env);
  int n_env = 0, i = 1;
  for (; i < argc; ++i) {
    if (!strcmp(argv[i], "--overlay") && i + 1 < argc) overlay = argv[++i];
    else if (!strcmp(argv[i], "--env") && i + 1 < argc) env[n_env++] = argv[++i];
    else break;
  }
  if (argc - i < 2) {
    fprintf(stderr, "usage: lockstep-bundle-test-chroot [--overlay LOWER:UPPER:WORK] [--env NAME=VALUE]... ROOT PROGRAM [ARGS...]\n");
    return 125;
  }
  const char *root = argv[i];
  if (unshare(CLONE_NEWNS) != 0) fail("unshare", "CLONE_NEWNS");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("make private", "/");
  if (overlay) {
    char *lower = strdup(overlay), *upper = strchr(lower, ':'), *work = upper ? strchr(upper + 1, ':') : NULL;
    if (!upper || !work) { errno = EINVAL; fail("--overlay LOWER:UPPER:WORK, not", overlay); }
    *upper++ = '\0';
    *work++ = '\0';
    char *opts = join(join(join("lowerdir=", lower), join(",upperdir=", upper)), join(",workdir=", work));
    if (mount("overlay", root, "overlay", 0, opts) != 0) fail("mount an overlay on", root);
  }
  char *proc = join(root, "/proc"), *dev = join(root, "/dev");
  mkdir(proc, 0555);
  mkdir(dev, 0755);
  if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) fail("mount proc on", proc);
  if (mount("/dev", dev, NULL, MS_BIND, NULL) != 0) fail("bind /dev on", dev);
  if (chroot(root) != 0) fail("chroot", root);
  if (chdir("/") != 0) fail("chdir", "/");
  execve(argv[i + 1], argv + i + 1, env);
  fail("execute (in the root)", argv[i + 1]);
  return 125;
}
