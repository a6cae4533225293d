/* lockstep-agent, as the bundle's entry point (docs/agent.md, "The bundle"):
 *
 *   <bundle>/lockstep-agent [FLAGS] -- COMMAND [ARGS...]   run the agent
 *   <bundle>/lockstep-agent --install-bundle DIR           copy the whole bundle into DIR
 *
 * The agent proper is <bundle>/libexec/lockstep-agent, a dynamically linked program whose
 * every library, glibc and its loader included, is in <bundle>/lib. This launcher starts it
 * through that loader,
 *
 *   <bundle>/lib/ld-linux-x86-64.so.2 --inhibit-cache --library-path <bundle>/lib
 *       --argv0 ARGV0 <bundle>/libexec/lockstep-agent ARGS...
 *
 * so nothing is taken from the image it runs in, whatever its glibc (or none). Before that it
 * sets aside the loader variables of the image and pod (saved_env.h), which the agent puts
 * back for its workers, and sets LOCKSTEP_PYTHON_PROBE_DIR to <bundle>/python and
 * LOCKSTEP_NCCL_PROFILER to <bundle>/nccl/libnccl-profiler-lockstep.so (when there) unless set.
 *
 * --install-bundle is the init container's job: its image can then be the bundle alone (FROM
 * scratch), with no shell and no cp. It copies files, directories and symbolic links with
 * their modes, replacing what DIR already holds by rename, so a copy into a DIR that has an
 * older bundle (even a running one) is never half old, half new for a file.
 *
 * Statically linked, and uses no NSS (no user or host look-ups), so it runs in any x86-64
 * Linux root. Exit codes of its own: 64 bad usage, 1 the copy failed, 127 the bundle's loader
 * could not be run; otherwise the agent's. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "saved_env.h"

#define LOADER "/lib/ld-linux-x86-64.so.2"
#define LIBDIR "/lib"
#define AGENT "/libexec/lockstep-agent"
#define PYTHON_DIR "/python"
#define NCCL_PLUGIN "/nccl/libnccl-profiler-lockstep.so"

enum { EXIT_COPY = 1, EXIT_USAGE = 64, EXIT_NO_LOADER = 127 };

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("lockstep-agent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(code);
}

/* "A" + "B" into a new string; the launcher is short-lived, nothing is freed. */
static char *concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 1);
  if (!s) die(EXIT_USAGE, "out of memory");
  memcpy(s, a, la);
  memcpy(s + la, b, lb + 1);
  return s;
}

/* The bundle's directory: where this program's file is (symbolic links resolved), from
 * /proc/self/exe, or where /proc is not mounted, from the path it was executed by. "" when it
 * is the root directory, so that bundle + "/lib" is always right. */
static char *bundle_dir(void) {
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
  } else {
    const char *execfn = (const char *)getauxval(AT_EXECFN);
    if (!execfn || !realpath(execfn, path))
      die(EXIT_NO_LOADER, "cannot tell where the bundle is: /proc/self/exe is unreadable (%s) and the path it was run by (%s) does not resolve",
          strerror(errno), execfn ? execfn : "none");
  }
  char *slash = strrchr(path, '/');
  if (!slash) die(EXIT_NO_LOADER, "cannot tell where the bundle is from '%s'", path);
  *slash = '\0';
  return path;
}

/* --- running the agent ---------------------------------------------------------------------- */

static void set_aside_loader_variables(void) {
  static const char *names[] = LOCKSTEP_BUNDLE_SAVED_NAMES;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char *value = getenv(names[i]);
    char *saved = value ? concat(LOCKSTEP_BUNDLE_SET, value) : LOCKSTEP_BUNDLE_UNSET;
    char *key = concat(LOCKSTEP_BUNDLE_SAVED_PREFIX, names[i]);
    if (setenv(key, saved, 1) != 0 || unsetenv(names[i]) != 0)
      die(EXIT_USAGE, "cannot set %s aside: %s", names[i], strerror(errno));
  }
}

static int run_agent(const char *bundle, int argc, char **argv) {
  set_aside_loader_variables();
  char *python = concat(bundle, PYTHON_DIR);
  if (!getenv(LOCKSTEP_BUNDLE_PYTHON_PROBE_DIR) && setenv(LOCKSTEP_BUNDLE_PYTHON_PROBE_DIR, python, 0) != 0)
    die(EXIT_USAGE, "cannot set %s: %s", LOCKSTEP_BUNDLE_PYTHON_PROBE_DIR, strerror(errno));
  char *plugin = concat(bundle, NCCL_PLUGIN);
  if (!getenv(LOCKSTEP_BUNDLE_NCCL_PROFILER) && access(plugin, R_OK) == 0 &&
      setenv(LOCKSTEP_BUNDLE_NCCL_PROFILER, plugin, 0) != 0)
    die(EXIT_USAGE, "cannot set %s: %s", LOCKSTEP_BUNDLE_NCCL_PROFILER, strerror(errno));
  char *loader = concat(bundle, LOADER);
  char **args = calloc((size_t)argc + 8, sizeof *args);
  if (!args) die(EXIT_USAGE, "out of memory");
  int n = 0;
  args[n++] = loader;
  args[n++] = "--inhibit-cache";     /* never the image's /etc/ld.so.cache */
  args[n++] = "--library-path";      /* instead of LD_LIBRARY_PATH, which was set aside */
  args[n++] = concat(bundle, LIBDIR);
  args[n++] = "--argv0";             /* the agent's argv[0] stays the name it was run by */
  args[n++] = argc > 0 && argv[0] ? argv[0] : "lockstep-agent";
  args[n++] = concat(bundle, AGENT);
  for (int i = 1; i < argc; ++i) args[n++] = argv[i];
  args[n] = NULL;
  execv(loader, args);
  die(EXIT_NO_LOADER, "cannot run the bundle's loader %s: %s (is the bundle in %s complete?)", loader, strerror(errno),
      *bundle ? bundle : "/");
}

/* --- --install-bundle DIR -------------------------------------------------------------------- */

struct install {
  const char *dest;  /* DIR as given, for messages */
  unsigned long files, dirs, links;
  unsigned long long bytes;
};

static void copy_failed(const struct install *in, const char *what, const char *path, int err) __attribute__((noreturn));
static void copy_failed(const struct install *in, const char *what, const char *path, int err) {
  die(EXIT_COPY, "--install-bundle %s: cannot %s %s: %s", in->dest, what, path, strerror(err));
}

static char *join(const char *dir, const char *name) { return concat(concat(dir, "/"), name); }

/* A name beside `dst` to write first and rename over it. */
static char *temporary_for(const char *dst) {
  char suffix[48];
  snprintf(suffix, sizeof suffix, ".lockstep-install-%ld", (long)getpid());
  return concat(dst, suffix);
}

static void copy_file(struct install *in, const char *src, const char *dst, mode_t mode) {
  int from = open(src, O_RDONLY | O_CLOEXEC);
  if (from < 0) copy_failed(in, "read", src, errno);
  char *tmp = temporary_for(dst);
  unlink(tmp);
  int to = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (to < 0) copy_failed(in, "create", tmp, errno);
  static char buf[1 << 16];
  for (;;) {
    ssize_t got = read(from, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) { int e = errno; unlink(tmp); copy_failed(in, "read", src, e); }
    if (got == 0) break;
    for (ssize_t done = 0; done < got;) {
      ssize_t put = write(to, buf + done, (size_t)(got - done));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) { int e = errno; unlink(tmp); copy_failed(in, "write", dst, e); }
      done += put;
    }
    in->bytes += (unsigned long long)got;
  }
  close(from);
  if (fchmod(to, mode & 07777) != 0) { int e = errno; unlink(tmp); copy_failed(in, "set the mode of", dst, e); }
  if (close(to) != 0) { int e = errno; unlink(tmp); copy_failed(in, "write", dst, e); }
  if (rename(tmp, dst) != 0) { int e = errno; unlink(tmp); copy_failed(in, "replace", dst, e); }
  in->files++;
}

static void copy_link(struct install *in, const char *src, const char *dst) {
  char target[PATH_MAX];
  ssize_t n = readlink(src, target, sizeof target - 1);
  if (n < 0) copy_failed(in, "read the link", src, errno);
  target[n] = '\0';
  char *tmp = temporary_for(dst);
  unlink(tmp);
  if (symlink(target, tmp) != 0) copy_failed(in, "create the link", tmp, errno);
  if (rename(tmp, dst) != 0) { int e = errno; unlink(tmp); copy_failed(in, "replace", dst, e); }
  in->links++;
}

/* Copies the directory `src` into `dst`, which exists; `dst` gets `src`'s mode last (so a
 * read-only directory is filled first) unless `keep_mode` (DIR itself, which may be a volume
 * we may not chmod). */
static void copy_dir(struct install *in, const char *src, const char *dst, mode_t mode, int keep_mode, int depth) {
  if (depth > 32) die(EXIT_COPY, "--install-bundle %s: %s is nested too deep", in->dest, src);
  DIR *d = opendir(src);
  if (!d) copy_failed(in, "read the directory", src, errno);
  struct dirent *e;
  while ((errno = 0, e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *from = join(src, e->d_name), *to = join(dst, e->d_name);
    struct stat st;
    if (lstat(from, &st) != 0) copy_failed(in, "read", from, errno);
    if (S_ISDIR(st.st_mode)) {
      if (mkdir(to, 0700) != 0) {  /* one there already (an older copy) is filled in */
        int err = errno;
        struct stat have;
        if (err != EEXIST) copy_failed(in, "create the directory", to, err);
        if (lstat(to, &have) != 0 || !S_ISDIR(have.st_mode)) copy_failed(in, "create the directory", to, ENOTDIR);
        if (chmod(to, have.st_mode | 0700) != 0) copy_failed(in, "write into", to, errno);
      }
      copy_dir(in, from, to, st.st_mode, 0, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      copy_file(in, from, to, st.st_mode);
    } else if (S_ISLNK(st.st_mode)) {
      copy_link(in, from, to);
    } else {
      die(EXIT_COPY, "--install-bundle %s: %s is neither a file, a directory nor a symbolic link", in->dest, from);
    }
  }
  if (errno != 0) copy_failed(in, "read the directory", src, errno);
  closedir(d);
  if (!keep_mode && chmod(dst, mode & 07777) != 0) copy_failed(in, "set the mode of", dst, errno);
  in->dirs++;
}

/* `path` with symbolic links resolved, also when its last components do not exist yet. */
static char *resolve(const char *path) {
  char *head = concat(path, ""), *tail = concat("", "");
  for (;;) {
    char real[PATH_MAX];
    if (realpath(*head ? head : "/", real)) return concat(real, tail);
    char *slash = strrchr(head, '/');
    if (!slash) return concat(path, "");  /* nothing of it exists: relative, and new */
    tail = concat(slash, tail);
    *slash = '\0';
  }
}

/* mkdir -p; returns 1 when it created the last component. */
static int make_dirs(struct install *in, const char *path, mode_t mode) {
  char *p = concat(path, "");
  for (char *s = p + 1; *s; ++s) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) copy_failed(in, "create the directory", p, errno);
    *s = '/';
  }
  if (mkdir(p, mode) == 0) return 1;
  struct stat st;
  if (errno != EEXIST) copy_failed(in, "create the directory", p, errno);
  if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) copy_failed(in, "use", p, ENOTDIR);
  return 0;
}

static int install_bundle(const char *bundle, const char *dest) {
  struct install in = {.dest = dest};
  const char *src = *bundle ? bundle : "/";
  char *real_dest = resolve(dest);
  size_t lb = strlen(bundle);
  if (!strcmp(real_dest, src))
    die(EXIT_USAGE, "--install-bundle %s: that is the bundle itself; name a directory outside it", dest);
  if (!strncmp(real_dest, bundle, lb) && real_dest[lb] == '/')
    die(EXIT_USAGE, "--install-bundle %s: that is inside the bundle (%s); name a directory outside it", dest, src);
  struct stat st;
  if (stat(src, &st) != 0) copy_failed(&in, "read", src, errno);
  if (make_dirs(&in, dest, st.st_mode & 07777) && chmod(dest, st.st_mode & 07777) != 0)
    copy_failed(&in, "set the mode of", dest, errno);
  copy_dir(&in, src, dest, st.st_mode, 1, 0);
  printf("lockstep-agent: installed the bundle from %s into %s: %lu files, %lu directories, %lu links, %.1f MB\n", src,
         dest, in.files, in.dirs, in.links, (double)in.bytes / 1e6);
  return fflush(stdout) == 0 ? 0 : EXIT_COPY;
}

int main(int argc, char **argv) {
  const char *bundle = bundle_dir();
  if (argc > 1 && !strcmp(argv[1], "--install-bundle")) {
    if (argc != 3 || !*argv[2]) die(EXIT_USAGE, "usage: lockstep-agent --install-bundle DIR (copies the agent's bundle into DIR)");
    return install_bundle(bundle, argv[2]);
  }
  return run_agent(bundle, argc, argv);
}
