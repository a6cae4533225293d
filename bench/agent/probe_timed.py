"""Runs a Python training script under the agent's probe with the probe's own work timed.

bench/agent's --python-probe compares whole runs with the probe on and off; on a 2-core
machine the rounds' step times and even their opt.step() calls spread by +-200 us from one
run to the next, more than the probe's work. This wrapper times that work where it happens,
in the probe's run itself:

  python3 bench/agent/probe_timed.py TIMING_DIR SCRIPT [ARGS...]

(under lockstep-agent with the probe on, so that the probe's directory leads PYTHONPATH). It
wraps, before the script imports torch:
  hook        the probe's optimizer step post-hook (_Probe._after_optimizer_step): all of its
              per-step work (the DDP read, the report, the send)
  ddp_stats   DDP's own Logger.set_runtime_stats_and_log() at each synced forward, outside the
              hook: work the probe causes by setting DDP's sample rate to 1 (at the default
              rate DDP does it on iterations 1-10 and every 100th)
and writes TIMING_DIR/timing-<RANK>.json at exit: wall time of each call ("hook_ns",
"ddp_stats_ns") and the calling thread's CPU time in it ("hook_cpu_ns", "ddp_stats_cpu_ns";
time.thread_time_ns, which a preempted call does not inflate). The wrapping itself adds four
clock reads per call (about 1 us, the CPU clock being a system call) and, for DDP's logger,
one attribute look-up through a proxy per use, which the figures then include.
"""
import atexit
import json
import os
import runpy
import sys
import time


class _TimedLogger:
    """DDP's c10d Logger, its set_runtime_stats_and_log() timed when the probe's hook is not running."""

    def __init__(self, logger, timing):
        self._logger = logger
        self._timing = timing

    def set_runtime_stats_and_log(self):
        if self._timing["inside"]:
            return self._logger.set_runtime_stats_and_log()
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        try:
            return self._logger.set_runtime_stats_and_log()
        finally:
            self._timing["ddp_stats_ns"].append(time.perf_counter_ns() - t0)
            self._timing["ddp_stats_cpu_ns"].append(time.thread_time_ns() - c0)

    def __getattr__(self, name):
        return getattr(self._logger, name)


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: probe_timed.py TIMING_DIR SCRIPT [ARGS...]\n")
        return 64
    timing_dir, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    from lockstep import _pytorch  # the probe's module; loading it imports no torch

    timing = {"inside": False, "hook_ns": [], "ddp_stats_ns": [], "hook_cpu_ns": [], "ddp_stats_cpu_ns": []}
    hook = _pytorch._Probe._after_optimizer_step

    def timed_hook(self, optimizer, args, kwargs):
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        timing["inside"] = True
        try:
            return hook(self, optimizer, args, kwargs)
        finally:
            timing["inside"] = False
            timing["hook_ns"].append(time.perf_counter_ns() - t0)
            timing["hook_cpu_ns"].append(time.thread_time_ns() - c0)

    start = _pytorch._TrackedDdp.start

    def timed_start(ddp, probe):
        logger = getattr(ddp, "logger", None)
        if logger is not None and not isinstance(logger, _TimedLogger):
            ddp.logger = _TimedLogger(logger, timing)
        return start(ddp, probe)

    _pytorch._Probe._after_optimizer_step = timed_hook
    _pytorch._TrackedDdp.start = staticmethod(timed_start)

    def write():
        path = os.path.join(timing_dir, "timing-%s.json" % os.environ.get("RANK", "0"))
        with open(path, "w") as f:
            json.dump({k: v for k, v in timing.items() if k != "inside"}, f)

    atexit.register(write)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
