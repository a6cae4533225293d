/* liblockstep-bundle-test-record.so: records every process it is loaded into, for
 * tests/agent/bundle_test.cpp, which names it in a root's LD_PRELOAD and LD_AUDIT. Each load
 * appends "pid=PID exe=EXE as=loaded" (its constructor ran) or "... as=audit" (the loader
 * took it as an audit module) to /lockstep-test-loads.log in that root. Built here but loaded
 * by an older glibc's programs too: it uses only functions as old as glibc 2.2.5, and no stdio. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static void put_number(char **at, long v) {
  char digits[24];
  int n = 0;
  do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
  while (n > 0) *(*at)++ = digits[--n];
}

static void record(const char *as) {
  char exe[512];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len < 0) len = 0;
  exe[len] = '\0';
  char line[700], *at = line;
  memcpy(at, "pid=", 4), at += 4;
  put_number(&at, (long)getpid());
  memcpy(at, " exe=", 5), at += 5;
  memcpy(at, exe, (size_t)len), at += len;
  memcpy(at, " as=", 4), at += 4;
  memcpy(at, as, strlen(as)), at += strlen(as);
  *at++ = '\n';
  int fd = open("/lockstep-test-loads.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, (size_t)(at - line));
  (void)ignored;
  close(fd);
}

__attribute__((constructor)) static void loaded(void) { record("loaded"); }

/* The rtld-audit interface's one required entry point, so LD_AUDIT accepts the library too. */
unsigned int la_version(unsigned int version) {
  record("audit");
  return version;
}
