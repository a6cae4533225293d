"""Lockstep's Python probe, the part that runs once a program has imported torch.

lockstep/_probe.py, which every Python worker of the agent loads, imports this module when
the program imports torch, and ``_Probe.register_hooks`` puts the probe into PyTorch's own
hooks. What each figure means, and what is not measured: docs/metrics.md, "The Python
probe".

Note [The Python probe]
-----------------------
* Activation (lockstep/_probe.py). ``install()`` imports nothing heavy and never torch: a
  Python program that does not import torch pays for one small module and one meta-path
  finder, which looks at the name of each new top-level import and steps aside. When
  ``torch`` is imported, the finder wraps its loader for that one import, removes itself, and
  once ``torch/__init__`` has finished it loads this module, which registers PyTorch's own
  global hooks (below). Nothing is imported that ``import torch`` has not already imported.
* Steps. A step is an optimizer step: ``torch.optim.optimizer``'s global step post-hook, so
  micro-batches of gradient accumulation are not steps. With several optimizers the probe
  counts the steps of one, the first that steps (the "leader"); another optimizer that steps
  twice while the leader does not takes over (a program that moved on to a new optimizer),
  and so does the next to step once the leader is garbage collected. A step the AMP
  GradScaler skips (inf/NaN gradients) never calls ``step()``, so it is not counted.
* Step time. From the end of the previous step to the end of this one, on
  ``time.perf_counter``, where a step ends as the leader's post-hook returns (with the
  probe's own work for the step done, so when ``optimizer.step()`` returns to the program):
  everything between two steps counts (data loading, logging, a checkpoint), and the step
  times add up to the wall time from the first step's end. The first step has no
  ``step_s``: nothing the probe hooks marks where it begins, and it holds one-time costs
  (DDP's bucket rebuild, lazy init, compilation) that would skew the histogram. On a GPU
  the hook runs when ``step()`` returns, i.e. when the step is queued; see the DDP note for
  the one wait the probe adds.
* Communication: only what a source measures is sent (Note [DDP's statistics]). A program
  without DDP sends step time and no communication figures at all, never zeros.
* Failure. Any exception inside the probe disables it for the rest of the process with
  exactly one line on stderr (``lockstep probe: disabled: ...``); the program runs on and
  computes what it computes without the probe. KeyboardInterrupt and SystemExit pass.
* One reporter per socket. The first process that reaches a step takes an flock on
  ``<socket>.lock``; another process of the same worker (``torchrun`` run under the agent,
  ``mp.spawn``) that steps too stays silent and says so once, so one rank's series never
  mixes two processes' steps. A forked child (DataLoader workers) is silent from the fork.

Note [DDP's statistics]
-----------------------
DistributedDataParallel times its own gradient reduction (c10d ``Reducer`` and ``Logger``,
torch/csrc/distributed/c10d/reducer.cpp, logger.cpp): per iteration (a forward with gradient
sync, then its backward) it records host timestamps, and on CUDA events, for the backward's
compute start and end and for the first bucket's all-reduce launch and the last one's
completion (after ``finalize_backward`` waited for every bucket). ``Logger::
set_runtime_stats_and_log()`` turns one iteration's events into durations, in ns:
``backward_comm_time`` (first launch to last completion), ``backward_compute_comm_overlap_time``
(first launch to the end of backward compute) and the host timestamps
``backward_comm_time_start`` etc.; it also folds them into the ``avg_*`` running means.
* When sampled: DDP calls it at the start of the *next* synced forward, and only on
  iterations 1-10 and every ``sample_rate``-th after (default 100). No environment variable
  changes the rate in torch 2.11; ``DistributedDataParallel._set_ddp_runtime_logging_sample_rate``
  does, and the probe sets it to 1 for each DDP it tracks.
* Not cumulative: the ``avg_*`` fields are running means kept in integer nanoseconds,
  ``avg = (d + avg * (n - 1)) / n`` truncated, so differencing ``avg * n`` would undercount
  each iteration by up to n ns (1 ms per step at a million iterations). The probe reads the
  per-iteration fields instead, which hold the latest sample exactly.
* Per step: at the leader's post-hook the probe calls ``set_runtime_stats_and_log()`` itself,
  so the step's own last backward is read now rather than at the next forward. DDP's call at
  the next forward then recomputes the same sample (the timer's events are unchanged until
  the forward records new ones); the probe counts a sample once, by its comm-start timestamp,
  and the ``avg_*`` means are unchanged by the repeat (every sample is counted twice alike).
  On CUDA this call waits for the backward's events (``CudaTimer::measureDifference``
  synchronizes them), which DDP itself does at the next forward at sample rate 1: the wait
  moves from the next forward to the end of the step, after the optimizer's kernels are
  queued.
* Gradient accumulation with ``no_sync()`` (the usual way): the synced micro-batch is DDP's
  only iteration in the step. Without ``no_sync()`` every micro-batch all-reduces; the
  probe then also reads the sample DDP computed at the step's last forward, which covers
  two iterations per step. A step with more iterations than it read (by DDP's iteration
  number) reports no communication figures rather than part of them, and the probe says
  so once.
* Figures: ``comm_s`` = the sum of ``backward_comm_time``; ``exposed_comm_s`` = the part
  after backward compute ended (``backward_comm_time - backward_compute_comm_overlap_time``,
  at least 0), so exposed <= comm always; ``compute_s`` = ``step_s - exposed_comm_s``, as
  lockstep-trainer defines it; per op, ``allreduce``; ``comm_bytes.allreduce`` = the sizes
  of DDP's gradient buckets per iteration, sent only without a communication hook or DDP
  mixed precision (which change what goes on the wire). The span includes time a bucket
  waited for a slower rank: from this rank's side that is communication too.

Note [Reports in batches]
-------------------------
A step's report goes out at once when 0.1 s or more have passed since the probe last sent;
otherwise it waits to go with the next ones: one datagram per 0.1 s at most (16 KB at most,
one line per step; agent/protocol.hpp), whatever the step rate. Each datagram wakes the
agent's receiver, and waking it costs the sending worker 40 us a send cold (60-175 us before
the receiver ran as SCHED_BATCH, Note [A receiver that never preempts a worker]) against 5 us
when no one is woken (tests/agent/python/ddp_train.py, 2 workers on 2 cores, 24 ms steps).
Steps of 0.1 s or longer are therefore each sent at once, as before; a program stepping faster
pays one wake-up per 0.1 s, and its reports reach the agent up to 0.1 s late. The reports
held when the program pauses after such steps (an evaluation, a checkpoint) go with the next
step, so during the pause the agent shows the step reached up to 0.1 s before it; at exit
they are sent (atexit), and a worker killed by a signal loses them (0.1 s of steps at most).

Note [Gloo's exit race]
-----------------------
A textbook script that ends with ``dist.barrier(); dist.destroy_process_group()`` and returns
aborted at exit in about 1 run in 17 on a busy 2-core machine (4 of 70 runs of
tests/agent/python/ddp_train.py with no Lockstep at all; PyTorch 2.11, Gloo, Python 3.11):
"terminate called without an active exception", exit 134, after its last line was printed.
The core shows why: DDP still holds the process group, so its Gloo worker threads outlive
``destroy_process_group``, and one of them was still dropping its last finished work (whose
tensors Python created) when the main thread had begun ``Py_FinalizeEx``; freeing such a
tensor takes the GIL, and a thread that takes the GIL during finalization is ended with a
forced unwind, which ``std::terminate`` stops (upstream: pytorch/pytorch#179291, abandoned).
Under an agent that exit is a failed rank: the gang restarts and trains again. So the probe
registers, at ``import torch``, an ``atexit`` function that runs before finalization (after
the program's own, which were registered later) and, if the process has any thread besides
the main one, sleeps 50 ms with the GIL free, time for those threads to finish. It changes
nothing the program computes and costs a torch program 50 ms at exit; with the probe off
(``LOCKSTEP_PYTHON_PROBE=0``) the race is PyTorch's as it is. (A first version waited only if
c10d's ``_world.group_count`` was non-zero: ``destroy_process_group()`` resets it, so it never
waited, and 5 of 80 runs aborted. With the thread test: 0 of 80, the machine at load 12.)

Note [Communication sources]: DDP's statistics are one source of per-step communication
figures (``_DdpSource``). A NCCL profiler plugin that times every collective of any program
will be another: a class with the same ``collect()`` returning per-op figures for the step,
added to ``_Probe._sources``; no code for it exists yet.
"""

import atexit
import os
import sys
import time
import weakref

from lockstep import _probe as _entry

_MAX_VALUE = 1e30  # agent/protocol.hpp: kMaxReportValue
_SEND_EVERY_S = 0.1  # Note [Reports in batches]
_MAX_BATCH_BYTES = 16384  # well below agent/protocol.hpp's kMaxDatagramBytes (32768)
_EXIT_GRACE_S = 0.05  # Note [Gloo's exit race]


class _Probe:
    """The probe of one process: its hooks, the step count, and the reports it sends."""

    def __init__(self, socket_path):
        self.socket_path = socket_path
        self.enabled = True
        self._sock = None
        self._batch = []  # report lines not sent yet (Note [Reports in batches])
        self._batch_bytes = 0
        self._last_send = None
        self._lock_fd = None
        self._claimed = False
        self._handles = []
        self._leader = None  # weakref to the optimizer whose steps are counted
        self._others = weakref.WeakKeyDictionary()  # other optimizers' steps since the leader's
        self._others_seen = False  # whether _others may hold any
        self._step = 0
        self._last_end = None
        self._silenced = False  # a forked child of the reporting process
        self._figures = {}
        self._losses = []
        self._notes = set()
        self._ddp = _DdpSource(self)
        # Note [Communication sources]: the NCCL profiler plugin's source joins this list.
        self._sources = [self._ddp]
        if hasattr(os, "register_at_fork"):
            me = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _silence(me))

    # -- activation -------------------------------------------------------------------

    def register_hooks(self, torch):
        """Puts the probe into PyTorch's global hooks; raises if this torch lacks them."""
        optimizer = sys.modules.get("torch.optim.optimizer")
        register_step = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if register_step is None:
            raise RuntimeError("torch %s has no global optimizer step hooks (torch 2.0 or later is needed)"
                               % getattr(torch, "__version__", "?"))
        self._handles.append(register_step(self._after_optimizer_step))
        module = sys.modules.get("torch.nn.modules.module")
        register_module = getattr(module, "register_module_module_registration_hook", None)
        if register_module is not None:  # torch 2.0+: how DDP instances are found
            self._handles.append(register_module(self._ddp.on_module_registered))
        atexit.register(_let_collective_threads_finish)
        # Registered after the wait, so it runs before it (atexit runs last in, first out).
        atexit.register(self._flush_at_exit)

    def stop(self):
        """Turns the probe off for good, silently: its hooks removed."""
        self.enabled = False
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles = []

    def disable(self, error, where):
        """Turns the probe off for good with one line on stderr; never raises."""
        if not self.enabled:
            return
        self.stop()
        try:
            self._flush()  # the steps reported before the error still count
        except Exception:
            self._batch = []
        _entry.say_disabled(error, where)

    def note_once(self, key, text):
        if key in self._notes:
            return
        self._notes.add(key)
        try:
            sys.stderr.write("lockstep probe: %s\n" % _entry.one_line(text))
            sys.stderr.flush()
        except Exception:
            pass

    # -- steps ------------------------------------------------------------------------

    def _after_optimizer_step(self, optimizer, args, kwargs):
        if not self.enabled:
            return
        try:
            if self._is_step(optimizer):
                self._report_step()
        except Exception as error:
            self.disable(error, "reporting an optimizer step")

    def _is_step(self, optimizer):
        leader_ref = self._leader
        if leader_ref is not None and leader_ref() is optimizer:
            # The usual case, every step of a one-optimizer program: no mapping touched (an
            # empty WeakKeyDictionary's clear() raises and catches a KeyError).
            if self._others_seen:
                self._others.clear()
                self._others_seen = False
            return True
        leader = leader_ref() if leader_ref is not None else None
        if leader is None:
            self._leader = weakref.ref(optimizer)
            self._others.clear()
            self._others_seen = False
            return True
        seen = self._others.get(optimizer, 0) + 1
        if seen >= 2:  # the leader stopped stepping; this one carries on
            self._leader = weakref.ref(optimizer)
            self._others.clear()
            self._others_seen = False
            return True
        self._others[optimizer] = seen
        self._others_seen = True
        return False

    def _report_step(self):
        if not self._claimed and not self._claim():
            return
        sources = self._sources
        comm = sources[0].collect() if len(sources) == 1 else _merge(source.collect() for source in sources)
        # The step ends here, with the probe's own work for it done: the moment optimizer.step()
        # returns to the program, give or take the return itself.
        now = time.perf_counter()
        last_end, self._last_end = self._last_end, now
        step = self._figures.pop("step", None) if self._figures else None
        self._step = int(step) if step is not None else self._step + 1
        # The report, built as one list of "key=value" strings: this runs inside every
        # optimizer.step(), so no intermediate structures (bench/agent/probe_pieces.py times it).
        parts = ["step=%d" % self._step]
        if last_end is not None:
            step_s = now - last_end
            parts.append("step_s=%r" % step_s)
        else:
            step_s = None
        if comm and len(comm) == 1:  # one collective kind (DDP's all-reduce): its figures are the totals
            for op, values in comm.items():
                total_text = repr(float(values.get("comm_s", 0)))
                exposed = float(values.get("exposed_s", 0))
                exposed_text = repr(exposed)
                if step_s is not None:
                    parts.append("compute_s=%r" % max(0.0, step_s - exposed))
                parts.append("comm_s=" + total_text)
                parts.append("exposed_comm_s=" + exposed_text)
                parts.append("comm_s.%s=%s" % (op, total_text))
                parts.append("exposed_comm_s.%s=%s" % (op, exposed_text))
                if "bytes" in values:
                    parts.append("comm_bytes.%s=%s" % (op, _number(values["bytes"])))
        elif comm:
            total = exposed = 0.0
            for values in comm.values():
                total += values.get("comm_s", 0)
                exposed += values.get("exposed_s", 0)
            if step_s is not None:
                parts.append("compute_s=%r" % max(0.0, step_s - exposed))
            parts.append("comm_s=%r" % total)
            parts.append("exposed_comm_s=%r" % exposed)
            for op in sorted(comm):
                values = comm[op]
                parts.append("comm_s.%s=%r" % (op, float(values.get("comm_s", 0))))
                parts.append("exposed_comm_s.%s=%r" % (op, float(values.get("exposed_s", 0))))
                if "bytes" in values:
                    parts.append("comm_bytes.%s=%s" % (op, _number(values["bytes"])))
        if self._losses:
            parts.append("loss=%s" % _number(sum(self._losses) / len(self._losses)))
            self._losses = []
        if self._figures:
            for key in ("tokens", "flops", "total_steps"):
                if key in self._figures:
                    parts.append("%s=%s" % (key, _number(self._figures.pop(key))))
        # A sum of reported figures could pass the protocol's bound; one such value would make
        # the agent reject the whole report, so it alone is left out. (Times are far below it.)
        line = " ".join(parts)
        if "e+" in line:
            line = " ".join(part for part in parts if abs(float(part.split("=", 1)[1])) <= _MAX_VALUE)
        self._batch.append(line)
        self._batch_bytes += len(line) + 1
        if self._last_send is None or now - self._last_send >= _SEND_EVERY_S or self._batch_bytes >= _MAX_BATCH_BYTES:
            self._last_send = now
            self._flush()

    def _flush_at_exit(self):
        try:
            if self._batch and not self._silenced:
                self._flush()
        except Exception:
            pass  # at exit, a probe never turns a clean exit into an error

    def _claim(self):
        """Note [The Python probe], one reporter per socket."""
        import fcntl

        self._claimed = True
        try:
            fd = os.open(self.socket_path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return True  # nowhere to coordinate: report
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self.stop()
            self.note_once("claim", "another process of this worker (%s) already reports its steps; this one (pid %d) "
                           "stays silent" % (self.socket_path, os.getpid()))
            return False
        self._lock_fd = fd
        return True

    def _flush(self):
        """Sends the lines not sent yet as one datagram."""
        if not self._batch:
            return
        line = "\n".join(self._batch) if len(self._batch) > 1 else self._batch[0]
        self._batch = []
        self._batch_bytes = 0
        sock = self._sock
        if sock is None:
            import socket

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            # Connected once: a send then skips the kernel's look-up of the socket's path that
            # sendto() makes each time (a third of the send's cost, bench/agent/probe_pieces.py).
            sock.connect(self.socket_path)
            self._sock = sock
        try:
            sock.send(line.encode("ascii"))
        except BlockingIOError:
            pass  # the agent's queue is full: these steps' reports are dropped, training never waits

    # -- lockstep.report() ----------------------------------------------------------------

    def add_figures(self, figures):
        for key, value in figures.items():
            if value is None:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.note_once("report:" + key, "lockstep.report(%s=...) ignored a value that is not a number: %r"
                               % (key, value))
                continue
            if number != number or number in (float("inf"), float("-inf")) or abs(number) > _MAX_VALUE:
                self.note_once("report:" + key, "lockstep.report(%s=...) ignores values that are not finite numbers "
                               "within 1e30 (got %r)" % (key, value))
                continue
            if key == "loss":
                self._losses.append(number)
                continue
            if number < 0:
                self.note_once("report:" + key, "lockstep.report(%s=...) ignores negative values (got %r)" % (key, value))
                continue
            if key == "step":
                if number != int(number) or number >= 2 ** 53:
                    self.note_once("report:step", "lockstep.report(step=...) needs a whole number below 2**53 (got %r)"
                                   % (value,))
                    continue
                # The number of the step in progress; later steps count on from it.
                self._figures["step"] = int(number)
            elif key in ("tokens", "flops"):
                self._figures[key] = self._figures.get(key, 0) + number
            else:
                self._figures[key] = number


def _let_collective_threads_finish():
    """Note [Gloo's exit race]: at exit, a moment with the GIL free for c10d's worker threads."""
    try:
        # Threads besides this one (c10d's, Gloo's, OpenMP's: native threads, so counted from
        # /proc): the wait is for them. destroy_process_group() resets c10d's own records, so
        # they cannot say whether a process group existed.
        if len(os.listdir("/proc/self/task")) > 1:
            time.sleep(_EXIT_GRACE_S)
    except Exception:
        pass  # at exit, a probe never turns a clean exit into an error


def _silence(ref):
    probe = ref()
    if probe is not None:  # a forked child: the parent reports this worker's steps
        probe._silenced = True
        probe._batch = []
        probe.stop()


def _merge(results):
    """The per-op figures of several sources, added up; None when none has any."""
    comm = {}
    for figures in results:
        if figures:
            for op, values in figures.items():
                into = comm.setdefault(op, {})
                for key, value in values.items():
                    into[key] = into.get(key, 0) + value
    return comm or None


def _number(value):
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


class _DdpSource:
    """Note [DDP's statistics]: per-step gradient all-reduce figures of every live DDP."""

    def __init__(self, probe):
        self._probe = probe
        self._found = []  # weakrefs to DDP instances seen under construction
        self._tracked = []

    def on_module_registered(self, module, name, submodule):
        # DistributedDataParallel.__init__ assigns self.module = the wrapped model before it
        # builds its reducer; this global hook sees that assignment (and every other one, at
        # model construction only). Returns None: the submodule is registered unchanged.
        if not self._probe.enabled or name != "module":
            return None
        try:
            ddp_module = sys.modules.get("torch.nn.parallel.distributed")
            ddp_class = getattr(ddp_module, "DistributedDataParallel", None)
            if ddp_class is not None and isinstance(module, ddp_class):
                self._found.append(weakref.ref(module))
        except Exception as error:
            self._probe.disable(error, "looking for DistributedDataParallel")
        return None

    def collect(self):
        """{"allreduce": {"comm_s", "exposed_s"[, "bytes"]}} for this step, or None."""
        if self._found:
            found, self._found = self._found, []
            for ref in found:
                ddp = ref()
                if ddp is not None:
                    tracked = _TrackedDdp.start(ddp, self._probe)
                    if tracked is not None:
                        self._tracked.append(tracked)
        tracked = self._tracked
        if not tracked:
            return None
        if len(tracked) == 1:  # one DDP, the usual case, without the loop's bookkeeping
            result = tracked[0].collect()
            if result is _GONE:
                self._tracked = []
                return None
            if result is None or result is _INCOMPLETE:
                return None
            figures = {"comm_s": result[0], "exposed_s": result[1]}
            if result[2] is not None:
                figures["bytes"] = result[2]
            return {"allreduce": figures}
        comm = exposed = 0.0
        nbytes = 0
        have_bytes = True
        sampled = False
        complete = True
        live = []
        for one in tracked:
            result = one.collect()
            if result is _GONE:
                continue
            live.append(one)
            if result is None:
                continue
            if result is _INCOMPLETE:
                complete = False
                continue
            sampled = True
            comm += result[0]
            exposed += result[1]
            if result[2] is None:
                have_bytes = False
            else:
                nbytes += result[2]
        self._tracked = live
        if not complete or not sampled:
            return None
        figures = {"comm_s": comm, "exposed_s": exposed}
        if have_bytes:
            figures["bytes"] = nbytes
        return {"allreduce": figures}


_GONE = object()
_INCOMPLETE = object()


class _TrackedDdp:
    def __init__(self, ddp, probe, bucket_bytes):
        self._ref = weakref.ref(ddp)
        self._probe = probe
        self._bucket_bytes = bucket_bytes
        self._last_start = 0  # comm-start timestamp (ns) of the last sample counted
        self._last_iteration = 0
        self._read_before = False

    @staticmethod
    def start(ddp, probe):
        logger = getattr(ddp, "logger", None)
        if logger is None or getattr(ddp, "_use_python_reducer", False):
            return None  # compiled DDP's Python reducer keeps no statistics
        ddp._set_ddp_runtime_logging_sample_rate(1)
        strs = logger._get_ddp_logging_data().strs_map
        bucket_bytes = None
        if not strs.get("comm_hook") and getattr(ddp, "mixed_precision", None) is None:
            sizes = [s for s in strs.get("bucket_sizes", "").replace(" ", "").split(",") if s]
            if sizes and all(s.isdigit() for s in sizes):
                bucket_bytes = sum(int(s) for s in sizes)
        return _TrackedDdp(ddp, probe, bucket_bytes)

    def _read(self, logger):
        get = logger._get_ddp_logging_data().ints_map.get
        start = get("backward_comm_time_start", 0)
        comm = get("backward_comm_time", 0)
        if start <= self._last_start or comm <= 0:
            return None  # no new iteration with a measured reduction
        return get("iteration", 0), start, comm, get("backward_compute_comm_overlap_time", 0)

    def collect(self):
        """(comm_s, exposed_s, bytes or None) of the iterations since the last call, None if
        there were none, _INCOMPLETE if some were missed, _GONE once the DDP is gone."""
        ddp = self._ref()
        if ddp is None:
            return _GONE
        # The DDP's own attributes, read from its __dict__: nn.Module.__getattr__ on a missing
        # name builds an AttributeError, which costs more than the rest of a step's read.
        attrs = ddp.__dict__
        if attrs.get("_delay_all_reduce_all_params"):
            return None
        logger = attrs.get("logger")
        if logger is None:
            return _GONE
        before = self._read(logger) if self._read_before else None
        logger.set_runtime_stats_and_log()
        sample = self._read(logger)
        if sample is not None and before is not None and sample[1] <= before[1]:
            sample = None  # the same iteration read twice
        if before is None:
            if sample is None:
                return None
            first, count = sample, 1
            comm_ns = sample[2]
            exposed_ns = max(0, sample[2] - sample[3])
        elif sample is None:
            first = sample = before
            count = 1
            comm_ns = before[2]
            exposed_ns = max(0, before[2] - before[3])
        else:
            first, count = before, 2
            comm_ns = before[2] + sample[2]
            exposed_ns = max(0, before[2] - before[3]) + max(0, sample[2] - sample[3])
        missed = first[0] - self._last_iteration - 1
        self._last_iteration = sample[0]
        self._last_start = sample[1]
        if missed > 0:
            if not self._read_before:
                self._read_before = True  # more than one reduction per step: read both ends from now on
            else:
                self._probe.note_once(
                    "ddp-iterations",
                    "DDP ran %d synced iterations in one optimizer step and the probe could read %d of their "
                    "reductions (gradient accumulation without no_sync() over more than two micro-batches, or "
                    "forwards with gradients that had no backward); such steps report no communication figures"
                    % (missed + count, count))
            return _INCOMPLETE
        nbytes = None
        if self._bucket_bytes is not None and not attrs.get("_comm_hooks"):
            nbytes = self._bucket_bytes * count
        return comm_ns / 1e9, exposed_ns / 1e9, nbytes
