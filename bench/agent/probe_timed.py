"""Runs a Python training script under the agent's probe with the probe's own work timed.

bench/agent's --python-probe compares whole runs with the probe on and off; on a 2-core
machine the rounds' step times and even their opt.step() calls spread by +-200 us from one
run to the next, more than the probe's work. This wrapper times that work where it happens,
in the probe's run itself:

  python3 bench/agent/probe_timed.py TIMING_DIR SCRIPT [ARGS...]

(under lockstep-agent with the probe on, so that the probe's directory leads PYTHONPATH). It
wraps, before the script imports torch:
  hook        the probe's optimizer step post-hook (_Probe._after_optimizer_step): all of its
              per-step work (the step's end for DDP and FSDP2, the report, the send)
  ddp_stats   at each synced forward, what DDP calls in place of its logger's
              set_runtime_stats_and_log() (_LoggerReader): DDP's own statistics computation,
              which the probe's sample rate of 1 causes (at the default rate DDP makes it on
              iterations 1-10 and every 100th), and the probe's read of its figures
and writes TIMING_DIR/timing-<RANK>.json at exit: wall time of each call ("hook_ns",
"ddp_stats_ns") and the calling thread's CPU time in it ("hook_cpu_ns", "ddp_stats_cpu_ns";
time.thread_time_ns, which a preempted call does not inflate). The wrapping itself adds four
clock reads per call (about 1 us, the CPU clock being a system call), which the figures then
include.
"""
import atexit
import json
import os
import runpy
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: probe_timed.py TIMING_DIR SCRIPT [ARGS...]\n")
        return 64
    timing_dir, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    from lockstep import _ddp, _pytorch  # the probe's modules; loading them imports no torch

    timing = {"hook_ns": [], "ddp_stats_ns": [], "hook_cpu_ns": [], "ddp_stats_cpu_ns": []}

    def timed(function, wall, cpu):
        def call(*args):
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            try:
                return function(*args)
            finally:
                timing[wall].append(time.perf_counter_ns() - t0)
                timing[cpu].append(time.thread_time_ns() - c0)

        return call

    _pytorch._Probe._after_optimizer_step = timed(_pytorch._Probe._after_optimizer_step, "hook_ns", "hook_cpu_ns")
    _ddp._LoggerReader.set_runtime_stats_and_log = timed(
        _ddp._LoggerReader.set_runtime_stats_and_log, "ddp_stats_ns", "ddp_stats_cpu_ns")

    def write():
        path = os.path.join(timing_dir, "timing-%s.json" % os.environ.get("RANK", "0"))
        with open(path, "w") as f:
            json.dump(timing, f)

    atexit.register(write)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
