/* A stand-in for NCCL's core, for agent_test's NCCL profiler case on a machine without NCCL
 * (the GPU tier runs the plugin under real NCCL): loads the library NCCL_PROFILER_PLUGIN names,
 * as NCCL does, and plays a fixed script of events through its ncclProfiler_v5 table (with
 * argv[2] "v4", its ncclProfiler_v4 table, as NCCL 2.27 would) in the
 * order NCCL 2.28 makes them (an operation's own event stopped on the host before its
 * channels' events come from the proxy thread), with known GPU timer values; hostile handles
 * too, and a forked child that must send its own figures and none of its parent's (those
 * pending at the fork). Then prints "nccl stub: played" and sleeps
 * argv[1] seconds so the agent's /metrics can be read.
 *
 * What the agent should then show (agent_test, NcclProfilerPluginFiguresReachMetrics):
 *   allreduce       3 ops, 7.5 us, 3 x 1 MiB
 *   allgather       1 op, 1 us, 2000 bytes
 *   send            1 op, 0.5 us, 10 bytes
 *   reduce_scatter  1 op, 3 us, 200 bytes: one of its two channels never reports, so it is
 *                   counted with that one at the end (finalize)
 *   other           1 op (a name NCCL does not have), 4 us, 0 bytes (unknown type)
 *   broadcast       1 op, 0.8 us, 4 bytes: the forked child's own
 *   scatter         1 op, 2 us, 200 bytes: one of its two channels never reports, and the ring
 *                   comes round to it 1,024 operations later (gather: 1,024 ops, 1.024 ms,
 *                   1,024 bytes), which counts it then, as incomplete */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../agent/nccl_profiler/nccl_profiler_v5.h"

static ncclProfiler_v5_t* p;
static ncclProfiler_v4_t* p4; /* argv[2] "v4": NCCL 2.27's interface instead */
static void* ctx;

/* Fills the fields an operation's descriptor has in either version's layout. */
#define FILL_OP(e, coll, func_, count_, type_, channels)   \
  do {                                                     \
    (e).type = (coll) ? ncclProfileColl : ncclProfileP2p;  \
    if (coll) {                                            \
      (e).coll.func = (func_);                             \
      (e).coll.count = (count_);                           \
      (e).coll.datatype = (type_);                         \
      (e).coll.nChannels = (uint8_t)(channels);            \
    } else {                                               \
      (e).p2p.func = (func_);                              \
      (e).p2p.count = (count_);                            \
      (e).p2p.datatype = (type_);                          \
      (e).p2p.nChannels = (uint8_t)(channels);             \
    }                                                      \
  } while (0)

static void stop_event(void* h) { if (p4) p4->stopEvent(h); else p->stopEvent(h); }
static void record_event(void* h, ncclProfilerEventState_v5_t st, ncclProfilerEventStateArgs_v5_t* a) {
  if (p4) p4->recordEventState(h, st, a);
  else p->recordEventState(h, st, a);
}
static void finalize(void) { if (p4) p4->finalize(ctx); else p->finalize(ctx); }

static void* start_op(int coll, const char* func, size_t count, const char* type, int channels) {
  void* h = NULL;
  if (p4) {
    ncclProfilerEventDescr_v4_t e;
    memset(&e, 0, sizeof e);
    FILL_OP(e, coll, func, count, type, channels);
    p4->startEvent(ctx, &h, &e);
  } else {
    ncclProfilerEventDescr_v5_t e;
    memset(&e, 0, sizeof e);
    FILL_OP(e, coll, func, count, type, channels);
    p->startEvent(ctx, &h, &e);
  }
  return h;
}

static void* start_channel(void* parent, uint64_t start) {
  void* h = NULL;
  if (p4) {
    ncclProfilerEventDescr_v4_t e;
    memset(&e, 0, sizeof e);
    e.type = ncclProfileKernelCh;
    e.parentObj = parent;
    e.kernelCh.pTimer = start;
    p4->startEvent(ctx, &h, &e);
  } else {
    ncclProfilerEventDescr_v5_t e;
    memset(&e, 0, sizeof e);
    e.type = ncclProfileKernelCh;
    e.parentObj = parent;
    e.kernelCh.pTimer = start;
    p->startEvent(ctx, &h, &e);
  }
  return h;
}

static void stop_channel(void* h, uint64_t stop) {
  ncclProfilerEventStateArgs_v5_t a;
  memset(&a, 0, sizeof a);
  a.kernelCh.pTimer = stop;
  record_event(h, ncclProfilerKernelChStop, &a);
  stop_event(h);
}

/* One operation as NCCL makes it: host start and stop, then each channel from the proxy. */
static void play(int coll, const char* func, size_t count, const char* type, int channels, uint64_t base,
                 uint64_t span) {
  void* op = start_op(coll, func, count, type, channels);
  stop_event(op);
  void* ch[8];
  for (int c = 0; c < channels; ++c) ch[c] = start_channel(op, base + 100 * (uint64_t)c);
  for (int c = 0; c < channels; ++c) stop_channel(ch[c], base + span - 500 * (uint64_t)(channels - 1 - c));
}

static void log_fn(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

int main(int argc, char** argv) {
  const char* path = getenv("NCCL_PROFILER_PLUGIN");
  if (!path) { fprintf(stderr, "nccl stub: NCCL_PROFILER_PLUGIN is not set\n"); return 2; }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "nccl stub: %s\n", dlerror()); return 2; }
  p = (ncclProfiler_v5_t*)dlsym(lib, "ncclProfiler_v5");
  if (!p) { fprintf(stderr, "nccl stub: no ncclProfiler_v5 in %s\n", path); return 2; }
  int mask = 0;
  ncclResult_t init = ncclSuccess;
  if (argc > 2 && strcmp(argv[2], "v4") == 0) {
    p4 = (ncclProfiler_v4_t*)dlsym(lib, "ncclProfiler_v4");
    if (!p4) { fprintf(stderr, "nccl stub: no ncclProfiler_v4 in %s\n", path); return 2; }
    init = p4->init(&ctx, &mask, "stub", 42, 1, 1, 0, log_fn);
  } else {
    init = p->init(&ctx, 42, &mask, "stub", 1, 1, 0, log_fn);
  }
  if (init != ncclSuccess || !ctx) {
    fprintf(stderr, "nccl stub: the plugin's init failed\n");
    return 3;
  }
  const int want = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;
  if ((mask & want) != want) { fprintf(stderr, "nccl stub: mask %d lacks Coll, P2p or KernelCh\n", mask); return 3; }

  for (int i = 0; i < 3; ++i) play(1, "AllReduce", 262144, "ncclFloat32", 2, 1000000 * (uint64_t)(i + 1), 2500);
  play(1, "AllGather", 1000, "ncclBfloat16", 1, 5000000, 1000);
  play(0, "Send", 10, "ncclInt8", 1, 6000000, 500);
  /* Channels before the host's stop, and a name and type NCCL does not have. */
  void* odd = start_op(1, "Shuffle", 7, "ncclQuaternion", 1);
  void* odd_ch = start_channel(odd, 7000000);
  stop_channel(odd_ch, 7004000);
  stop_event(odd);
  /* Two channels said, one reports, and 1,024 operations follow: the ring comes round to it,
   * and it is counted then with that one channel (and counted as incomplete). */
  void* sc = start_op(1, "Scatter", 50, "ncclInt32", 2);
  stop_event(sc);
  stop_channel(start_channel(sc, 8100000), 8102000);
  for (int i = 0; i < 1024; ++i) play(1, "Gather", 1, "ncclInt8", 1, 10000000 + 10000 * (uint64_t)i, 1000);
  /* Two channels said, one reports: counted at finalize with that one. */
  void* rs = start_op(1, "ReduceScatter", 100, "ncclFloat16", 2);
  stop_event(rs);
  void* rs_ch = start_channel(rs, 8000000);
  stop_channel(rs_ch, 8003000);
  /* Handles that are not the plugin's: ignored. */
  int stranger = 0;
  void* h = start_channel(&stranger, 1);
  if (h) { fprintf(stderr, "nccl stub: a channel of a stranger parent got a handle\n"); return 4; }
  stop_event(&stranger);
  stop_event((char*)&stranger + 1);
  record_event((char*)&stranger + 1, ncclProfilerKernelChStop, NULL);
  /* A fork's child: everything above is still pending in the parent (it sends at most every
   * 0.25 s); the child plays one operation of its own and exits, sending that alone. */
  pid_t child = fork();
  if (child == 0) {
    play(1, "Broadcast", 1, "ncclInt32", 1, 9000000, 800);
    exit(0);
  }
  waitpid(child, NULL, 0);
  finalize();
  printf("nccl stub: played\n");
  fflush(stdout);
  sleep(argc > 1 ? (unsigned)atoi(argv[1]) : 0);
  return 0;
}
