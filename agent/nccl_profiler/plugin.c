/* lockstep's NCCL profiler plugin (docs/metrics.md, "NCCL's own timing"): the GPU time of every
 * collective and point-to-point operation of any program on NCCL, reported to the agent.
 *
 * Note [NCCL profiler plugin]
 * The agent names this library in each worker's NCCL_PROFILER_PLUGIN (agent/worker_env.cpp),
 * so NCCL loads it into every worker, Python or C++, with no code change: NCCL 2.28 and later
 * as interface version 5 (ncclProfiler_v5), NCCL 2.27 as version 4 (ncclProfiler_v4, the same
 * events in another layout). Older NCCL stamps no GPU timer on its channels: it loads neither.
 * It asks NCCL for three kinds of events (init's activation mask):
 *   - Coll and P2p: one per collective (or send, or receive) as NCCL hands it to the GPU, with
 *     its name, element count, data type and the number of channels it runs on;
 *   - KernelCh: one per channel of it, started and stopped by NCCL's proxy thread with the
 *     GPU's global timer (ns) read by the kernel itself as the channel began and ended the
 *     operation.
 * An operation's time is its channels' span on the GPU: the last channel's end less the first
 * channel's start. It includes the time a channel waits for a peer, as any communication time
 * measured from one rank does. Its bytes are count x the type's size (a bucket's bytes for
 * DDP's all-reduce; a rank's part for all-gather and reduce-scatter).
 *
 * The KernelCh events come from NCCL's proxy thread after NCCL has stopped the operation's own
 * event, so an operation is kept (`struct op` in a ring of kRing) until NCCL has stopped it
 * and as many channels as it said it runs on; a slot still waiting when the ring comes round
 * to it again (kRing operations later) is counted with the channels it has. Figures add up
 * per op name in this process (every communicator together) and go to the agent's step socket
 * (LOCKSTEP_METRICS_SOCKET) as one line, at most every kFlushSeconds, from whichever NCCL
 * thread ends an operation, and at the end (NCCL's finalize, or the process's exit):
 *   nccl_s.allreduce=0.0123 nccl_bytes.allreduce=104857600 nccl_count.allreduce=25 ...
 * (the step report's syntax with no step: agent/step_report.hpp). Without that variable the
 * plugin declines (init fails) and NCCL runs without it, at no cost.
 *
 * Not measured: operations captured in a CUDA graph are counted when captured, not at each
 * replay. A forked child (a data loader's worker) starts from nothing: it never sends its
 * parent's figures, only its own, should it run NCCL itself.
 *
 * Loaded into the user's process, so plain C, no allocation after the first init, no
 * threads of its own, only libc calls that glibc 2.17 has (bundle_test checks its symbol
 * versions), and every NCCL call returns ncclSuccess whatever happens (NCCL's rule for
 * plugins). LOCKSTEP_NCCL_PROFILER_DEBUG=1 prints a summary line to stderr at the end. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_v5.h"

#define EXPORT __attribute__((visibility("default")))

enum { kRing = 1024, kMaxLine = 4096 };
static const double kFlushSeconds = 0.25;

/* The op names of the step report (docs/metrics.md): NCCL's function names in lower case, with
 * "other" for any name this table does not know. */
static const char* const kNcclNames[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll",
                                         "Gather",    "Scatter",   "Send",          "Recv",      "SendRecv"};
static const char* const kOpNames[] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",   "alltoall",
                                       "gather",    "scatter",   "send",           "recv",      "sendrecv", "other"};
enum { kOps = sizeof(kOpNames) / sizeof(kOpNames[0]) };

struct op {
  int busy;         /* between NCCL's start of it and its accounting */
  int name;         /* index into kOpNames */
  int expected;     /* channels NCCL said it runs on */
  int started;      /* KernelCh events started */
  int stopped;      /* KernelCh events stopped */
  int host_stopped; /* NCCL stopped the operation's own event */
  unsigned long long bytes;
  uint64_t first_start, last_stop; /* GPU global timer, ns */
};

struct totals {
  double seconds[kOps];
  unsigned long long bytes[kOps], count[kOps];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct op g_ring[kRing];
static unsigned g_next;
static struct totals g_pending;  /* not yet sent */
static struct totals g_all;      /* since the start, for the debug summary */
static unsigned long long g_incomplete, g_send_errors;
static double g_last_flush;
static pid_t g_owner;            /* the process that loaded the plugin; a fork's child sends nothing */
static int g_fd = -1;
static struct sockaddr_un g_addr;
static socklen_t g_addr_len;
static int g_contexts;
static int g_debug;
static int g_rank = -1;

/* Around fork: the lock is taken so the child's copy is consistent, and the child starts from
 * nothing, with no communicator of its own (NCCL's are unusable after a fork). */
static void before_fork(void) { pthread_mutex_lock(&g_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void after_fork_child(void) {
  memset(g_ring, 0, sizeof g_ring);
  memset(&g_pending, 0, sizeof g_pending);
  memset(&g_all, 0, sizeof g_all);
  g_next = 0;
  g_incomplete = g_send_errors = 0;
  g_contexts = 0;
  g_owner = getpid();
  pthread_mutex_unlock(&g_lock);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int name_index(const char* func) {
  if (func)
    for (int i = 0; i < (int)(sizeof(kNcclNames) / sizeof(kNcclNames[0])); ++i)
      if (strcmp(func, kNcclNames[i]) == 0) return i;
  return kOps - 1;
}

/* Bytes of one element of NCCL's data type names; 0 for a name not known here. */
static unsigned type_size(const char* datatype) {
  static const struct {
    const char* name;
    unsigned size;
  } kTypes[] = {{"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},    {"ncclUint32", 4},
                {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},  {"ncclFloat32", 4},
                {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};
  if (datatype)
    for (size_t i = 0; i < sizeof(kTypes) / sizeof(kTypes[0]); ++i)
      if (strcmp(datatype, kTypes[i].name) == 0) return kTypes[i].size;
  return 0;
}

/* Appends "key.op=value" for every op with figures; returns the line's length, 0 when none. */
static size_t format_line(const struct totals* t, char* line, size_t size) {
  size_t n = 0;
  for (int i = 0; i < kOps; ++i) {
    if (t->count[i] == 0) continue;
    int w = snprintf(line + n, size - n, "%snccl_s.%s=%.9g nccl_bytes.%s=%llu nccl_count.%s=%llu", n ? " " : "",
                     kOpNames[i], t->seconds[i], kOpNames[i], t->bytes[i], kOpNames[i], t->count[i]);
    if (w < 0 || (size_t)w >= size - n) break; /* cannot happen: 12 ops fit in kMaxLine */
    n += (size_t)w;
  }
  return n;
}

/* Sends what is pending, under g_lock. A full socket buffer (the agent is behind) keeps the
 * figures for the next try: they are totals, so nothing is lost or counted twice. */
static void flush_locked(double now) {
  g_last_flush = now;
  if (g_fd < 0 || getpid() != g_owner) return;
  char line[kMaxLine];
  size_t n = format_line(&g_pending, line, sizeof line);
  if (n == 0) return;
  if (sendto(g_fd, line, n, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr*)&g_addr, g_addr_len) == (ssize_t)n) {
    memset(&g_pending, 0, sizeof g_pending);
  } else {
    ++g_send_errors;
  }
}

/* Counts a finished (or evicted) operation, under g_lock. */
static void account_locked(struct op* o) {
  if (o->stopped > 0 && o->last_stop >= o->first_start) {
    double s = (double)(o->last_stop - o->first_start) * 1e-9;
    g_pending.seconds[o->name] += s;
    g_pending.bytes[o->name] += o->bytes;
    g_pending.count[o->name] += 1;
    g_all.seconds[o->name] += s;
    g_all.bytes[o->name] += o->bytes;
    g_all.count[o->name] += 1;
  }
  o->busy = 0;
}

static void maybe_done_locked(struct op* o) {
  if (!o->host_stopped || o->stopped < o->expected || o->stopped < o->started) return;
  account_locked(o);
  double now = now_seconds();
  if (now - g_last_flush >= kFlushSeconds) flush_locked(now);
}

static struct op* ring_op(void* handle) {
  /* A handle NCCL passes back is one this plugin returned: an address in the ring, tagged
   * with 1 for a channel's event. Anything else is ignored. */
  uintptr_t h = (uintptr_t)handle & ~(uintptr_t)1, base = (uintptr_t)g_ring;
  if (h < base || h >= base + sizeof g_ring || (h - base) % sizeof(struct op) != 0) return NULL;
  return (struct op*)h;
}

static ncclResult_t on_init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int nodes, int nranks,
                            int rank, ncclDebugLogger_t log) {
  (void)comm_id, (void)comm_name, (void)nodes, (void)nranks, (void)log;
  *context = NULL;
  const char* path = getenv("LOCKSTEP_METRICS_SOCKET");
  if (!path || !*path || strlen(path) >= sizeof g_addr.sun_path) return ncclInvalidUsage; /* NCCL goes on without us */
  pthread_mutex_lock(&g_lock);
  if (g_fd < 0) {
    g_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    memset(&g_addr, 0, sizeof g_addr);
    g_addr.sun_family = AF_UNIX;
    memcpy(g_addr.sun_path, path, strlen(path) + 1);
    g_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);
    g_owner = getpid();
    g_last_flush = now_seconds();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    const char* debug = getenv("LOCKSTEP_NCCL_PROFILER_DEBUG");
    g_debug = debug && strcmp(debug, "1") == 0;
  }
  const int ok = g_fd >= 0;
  if (ok) {
    ++g_contexts;
    if (g_rank < 0) g_rank = rank;
  }
  pthread_mutex_unlock(&g_lock);
  if (!ok) return ncclSystemError;
  *mask = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;
  *context = &g_contexts; /* any non-NULL value: every communicator shares the one set of totals */
  return ncclSuccess;
}

static ncclResult_t on_start(void* context, void** handle, ncclProfilerEventDescr_v5_t* e) {
  *handle = NULL;
  if (!context || !e) return ncclSuccess;
  pthread_mutex_lock(&g_lock);
  if (e->type == ncclProfileColl || e->type == ncclProfileP2p) {
    struct op* o = &g_ring[g_next++ % kRing];
    if (o->busy) {  /* still waiting for channels kRing operations later: counted with what it has */
      ++g_incomplete;
      account_locked(o);
    }
    memset(o, 0, sizeof *o);
    o->busy = 1;
    const int coll = e->type == ncclProfileColl;
    o->name = name_index(coll ? e->coll.func : e->p2p.func);
    o->expected = coll ? e->coll.nChannels : e->p2p.nChannels;
    o->bytes = (unsigned long long)(coll ? e->coll.count : e->p2p.count) * type_size(coll ? e->coll.datatype : e->p2p.datatype);
    *handle = o;
  } else if (e->type == ncclProfileKernelCh) {
    struct op* o = ring_op(e->parentObj);
    if (o && o->busy && !((uintptr_t)e->parentObj & 1)) {
      if (o->started == 0 || e->kernelCh.pTimer < o->first_start) o->first_start = e->kernelCh.pTimer;
      ++o->started;
      *handle = (char*)o + 1;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t on_record(void* handle, ncclProfilerEventState_v5_t state, ncclProfilerEventStateArgs_v5_t* args) {
  if (state != ncclProfilerKernelChStop || !args || !((uintptr_t)handle & 1)) return ncclSuccess;
  pthread_mutex_lock(&g_lock);
  struct op* o = ring_op(handle);
  if (o && o->busy && args->kernelCh.pTimer > o->last_stop) o->last_stop = args->kernelCh.pTimer;
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static ncclResult_t on_stop(void* handle) {
  pthread_mutex_lock(&g_lock);
  struct op* o = ring_op(handle);
  if (o && o->busy) {
    if ((uintptr_t)handle & 1) ++o->stopped;
    else o->host_stopped = 1;
    maybe_done_locked(o);
  }
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

static void summary_locked(const char* when) {
  if (!g_debug || getpid() != g_owner) return;
  char line[kMaxLine];
  size_t n = format_line(&g_all, line, sizeof line);
  fprintf(stderr, "lockstep nccl profiler (rank %d, %s): %.*s incomplete=%llu send_errors=%llu\n", g_rank, when, (int)n,
          line, g_incomplete, g_send_errors);
}

static ncclResult_t on_finalize(void* context) {
  if (!context) return ncclSuccess;
  pthread_mutex_lock(&g_lock);
  if (g_contexts > 0 && --g_contexts == 0) {
    /* The last communicator is gone: operations still waiting for channels are counted now. */
    for (int i = 0; i < kRing; ++i)
      if (g_ring[i].busy) account_locked(&g_ring[i]);
    summary_locked("finalize");
  }
  flush_locked(now_seconds());
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

/* A program that exits without destroying its communicators (most do) still sends the rest. */
__attribute__((destructor)) static void at_exit(void) {
  pthread_mutex_lock(&g_lock);
  if (g_fd >= 0) {
    flush_locked(now_seconds());
    if (g_contexts > 0) summary_locked("exit");
    close(g_fd);
    g_fd = -1;
  }
  pthread_mutex_unlock(&g_lock);
}

/* Version 4 (NCCL 2.27): the same work, its arguments and descriptor read into version 5's. */
static ncclResult_t on_init_v4(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int nodes,
                               int nranks, int rank, ncclDebugLogger_t log) {
  return on_init(context, comm_hash, mask, comm_name, nodes, nranks, rank, log);
}

static ncclResult_t on_start_v4(void* context, void** handle, ncclProfilerEventDescr_v4_t* e4) {
  *handle = NULL;
  if (!e4) return ncclSuccess;
  ncclProfilerEventDescr_v5_t e;
  memset(&e, 0, sizeof e);
  e.type = e4->type;
  e.parentObj = e4->parentObj;
  e.rank = e4->rank;
  if (e4->type == ncclProfileColl) {
    e.coll.func = e4->coll.func;
    e.coll.count = e4->coll.count;
    e.coll.datatype = e4->coll.datatype;
    e.coll.nChannels = e4->coll.nChannels;
  } else if (e4->type == ncclProfileP2p) {
    e.p2p.func = e4->p2p.func;
    e.p2p.count = e4->p2p.count;
    e.p2p.datatype = e4->p2p.datatype;
    e.p2p.nChannels = e4->p2p.nChannels;
  } else if (e4->type == ncclProfileKernelCh) {
    e.kernelCh.channelId = e4->kernelCh.channelId;
    e.kernelCh.pTimer = e4->kernelCh.pTimer;
  } else {
    return ncclSuccess;
  }
  return on_start(context, handle, &e);
}

EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "lockstep",
    .init = on_init_v4,
    .startEvent = on_start_v4,
    .stopEvent = on_stop,
    .recordEventState = on_record,
    .finalize = on_finalize,
};

EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "lockstep",
    .init = on_init,
    .startEvent = on_start,
    .stopEvent = on_stop,
    .recordEventState = on_record,
    .finalize = on_finalize,
};
