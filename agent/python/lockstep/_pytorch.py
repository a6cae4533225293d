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
* Per step, where the probe does not read late (Note [Late reads]: steps of 0.25 s or more,
  several DDPs, several synced iterations a step): at the leader's post-hook the probe calls
  ``set_runtime_stats_and_log()`` itself, so the step's own last backward is read now rather
  than at the next forward. DDP's call at
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
A step's report goes out when 0.25 s or more have passed since the probe last sent; otherwise
it waits to go with the next ones: one datagram per 0.25 s at most (16 KB at most each, one
line per step; agent/step_report.hpp), whatever the step rate. Each datagram wakes the agent's
receiver, which costs the sending worker about 40 us (60-175 us before the receiver ran as
SCHED_BATCH, Note [A receiver that never preempts a worker]), against 3 us when no one is woken;
and formatting several reports in a row costs less than one each step, cold. Steps of 0.25 s
or longer are each sent at their end. A faster program's reports reach the agent up to 0.25 s
and one step late (Note [Late reads]); if it then pauses (an evaluation, a checkpoint), the
agent shows the step reached up to that much before the pause until the next step; at exit
the held reports are sent (atexit), and a worker killed by a signal loses them.

Note [Late reads]
-----------------
With sample rate 1, DDP itself computes the figures of each synced iteration at the next
synced forward (``set_runtime_stats_and_log()`` in ``_pre_forward``). In a step shorter than
0.25 s, with one DDP and one synced iteration a step (``no_sync()`` accumulation, or none),
the probe reads those at the next step's end instead of computing them at this one's, and
holds this step's report until then: the report still carries its own step's figures, and the
probe's work per step is one read of DDP's data instead of a computation and a read
(bench/agent/RESULTS.md: the hook's median 210 -> 140 us). The held report of the last step
gets its figures computed by the probe: at exit (atexit), or, if the DDP is collected first (a
model local to ``main()``), in a weakref callback as it is, through DDP's logger, which the
probe holds until then (the logger holds the reducer, which the DDP's collection then frees).
Slower steps, several DDPs and several synced iterations a step are read at the step's end
(Note [DDP's statistics]). A late read that finds an iteration beyond the next one (a program
that all-reduces at every micro-batch) sends the held report without figures and reads at each
step's end from then on. On a GPU a late read also leaves the wait for the backward's CUDA
events where DDP puts it at sample rate 1, in the next forward, not at the step's end.

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

Note [Communication sources]: DDP's statistics are the probe's one source of per-step
communication figures (``_DdpSource``); another would be a class with the same ``collect()``
returning per-op figures for the step, added to ``_Probe._sources``. NCCL's own timing of every
operation of any program does not come through the probe: the agent's NCCL profiler plugin
(Note [NCCL profiler plugin] in agent/nccl_profiler/plugin.c), which NCCL loads into the
worker, reports it to the agent itself, as series of their own (docs/metrics.md).
"""

import atexit
import os
import sys
import time
import weakref

from lockstep import _probe as _entry

_MAX_VALUE = 1e30  # agent/step_report.hpp: kMaxReportValue
_SEND_EVERY_S = 0.25  # Note [Reports in batches]; also the longest step read late, Note [Late reads]
_MAX_BATCH_BYTES = 16384  # a datagram's size, well below agent/step_report.hpp's kMaxDatagramBytes (32768)
_MAX_BATCH_REPORTS = 64  # reports held at most before they are sent
_EXIT_GRACE_S = 0.05  # Note [Gloo's exit race]


class _Probe:
    """The probe of one process: its hooks, the step count, and the reports it sends."""

    def __init__(self, socket_path):
        self.socket_path = socket_path
        self.enabled = True
        self._sock = None
        self._batch = []  # reports not sent yet, as records (_format; Note [Reports in batches])
        self._pending = None  # this step's record while it waits for its communication (Note [Late reads])
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
        # Note [Communication sources]
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
            if self._pending is not None:  # without its communication figures
                self._batch.append(self._pending)
                self._pending = None
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
        ddp = self._ddp
        single = len(self._sources) == 1
        pending = self._pending
        if pending is not None:  # the step before, waiting for its communication (Note [Late reads])
            self._pending = None
            tracked = ddp.tracked
            pending[2] = tracked[0].collect_late() if len(tracked) == 1 else ddp.collect(late=True)
            self._batch.append(pending)
        # The step ends here, inside optimizer.step(), give or take the probe's own work.
        now = time.perf_counter()
        last_end, self._last_end = self._last_end, now
        step = self._figures.pop("step", None) if self._figures else None
        self._step = int(step) if step is not None else self._step + 1
        step_s = now - last_end if last_end is not None else None
        extras = self._extras() if self._losses or self._figures else None
        record = [self._step, step_s, None, extras]
        if single and ddp.late and step_s is not None and step_s < _SEND_EVERY_S:
            self._pending = record
        else:
            record[2] = ddp.collect() if single else _merge(source.collect() for source in self._sources)
            self._batch.append(record)
        if self._batch and (self._last_send is None or now - self._last_send >= _SEND_EVERY_S
                            or len(self._batch) >= _MAX_BATCH_REPORTS):
            self._last_send = now
            self._flush()

    def _extras(self):
        """What lockstep.report() gave for this step, as report parts."""
        parts = []
        if self._losses:
            parts.append("loss=%s" % _number(sum(self._losses) / len(self._losses)))
            self._losses = []
        if self._figures:
            for key in ("tokens", "flops", "total_steps"):
                if key in self._figures:
                    parts.append("%s=%s" % (key, _number(self._figures.pop(key))))
        return parts

    def ddp_gone(self, tracked):
        """Note [Late reads]: the DDP whose figures the held report waits for is being collected."""
        try:
            pending = self._pending
            if pending is not None and self.enabled:
                self._pending = None
                pending[2] = self._ddp.collect_final(tracked)
                self._batch.append(pending)
                self._flush()
        except Exception as error:
            self.disable(error, "reading DDP's figures as it was collected")

    def _flush_at_exit(self):
        try:
            if self._silenced:
                return
            pending = self._pending
            if pending is not None and self.enabled:
                self._pending = None
                pending[2] = self._ddp.collect()
                self._batch.append(pending)
            if self._batch:
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
        """Sends the reports not sent yet, as few datagrams as fit them."""
        records = self._batch
        if not records:
            return
        self._batch = []
        chunk = []
        size = 0
        for record in records:
            line = _format(record)
            if chunk and size + len(line) > _MAX_BATCH_BYTES:
                self._send("\n".join(chunk))
                chunk = []
                size = 0
            chunk.append(line)
            size += len(line) + 1
        self._send("\n".join(chunk))

    def _send(self, text):
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
            sock.send(text.encode("ascii"))
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


def _format(record):
    """One step's report line: record = [step, step_s or None, communication or None, extra parts or None],
    communication as DDP's source gives it (a tuple) or as _merge does ({op: {"comm_s", "exposed_s"[, "bytes"]}})."""
    # Times with 9 significant digits (1 ns in a second): "%.9g" costs half of repr()'s shortest
    # round trip, and rounding keeps order, so exposed <= comm holds in the text too.
    step, step_s, comm, extras = record
    parts = ["step=%d" % step]
    if step_s is not None:
        parts.append("step_s=%.9g" % step_s)
    if type(comm) is tuple:  # DDP's all-reduce, the usual case, straight from its tuple
        total, exposed, nbytes = comm
        total_text = "%.9g" % total
        exposed_text = "%.9g" % exposed
        if step_s is not None:
            parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
        parts.append("comm_s=" + total_text)
        parts.append("exposed_comm_s=" + exposed_text)
        parts.append("comm_s.allreduce=" + total_text)
        parts.append("exposed_comm_s.allreduce=" + exposed_text)
        if nbytes is not None:
            parts.append("comm_bytes.allreduce=%d" % nbytes)
    elif comm and len(comm) == 1:  # one collective kind: its figures are the totals
        for op, values in comm.items():
            total_text = "%.9g" % float(values.get("comm_s", 0))
            exposed = float(values.get("exposed_s", 0))
            exposed_text = "%.9g" % exposed
            if step_s is not None:
                parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
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
            parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
        parts.append("comm_s=%.9g" % total)
        parts.append("exposed_comm_s=%.9g" % exposed)
        for op in sorted(comm):
            values = comm[op]
            parts.append("comm_s.%s=%.9g" % (op, float(values.get("comm_s", 0))))
            parts.append("exposed_comm_s.%s=%.9g" % (op, float(values.get("exposed_s", 0))))
            if "bytes" in values:
                parts.append("comm_bytes.%s=%s" % (op, _number(values["bytes"])))
    if extras:
        parts.extend(extras)
    # A sum of reported figures could pass the protocol's bound; one such value would make
    # the agent reject the whole report, so it alone is left out. (Times are far below it.)
    line = " ".join(parts)
    if "e+" in line:
        line = " ".join(part for part in parts if abs(float(part.split("=", 1)[1])) <= _MAX_VALUE)
    return line


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
        probe._pending = None
        probe.stop()


def _as_ops(ddp_figures):
    """DDP's source's (comm_s, exposed_s, bytes or None) as per-op figures."""
    comm_s, exposed_s, nbytes = ddp_figures
    if nbytes is None:
        return {"allreduce": {"comm_s": comm_s, "exposed_s": exposed_s}}
    return {"allreduce": {"comm_s": comm_s, "exposed_s": exposed_s, "bytes": nbytes}}


def _merge(results):
    """The per-op figures of several sources, added up; None when none has any."""
    comm = {}
    for figures in results:
        if type(figures) is tuple:
            figures = _as_ops(figures)
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
        self.tracked = []
        # Whether a step's figures can be read at the next step (Note [Late reads]): one DDP,
        # one synced iteration a step. Kept up to date by every collect.
        self.late = False

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

    def _start_found(self):
        found, self._found = self._found, []
        for ref in found:
            ddp = ref()
            if ddp is not None:
                tracked = _TrackedDdp.start(ddp, self._probe)
                if tracked is not None:
                    self.tracked.append(tracked)

    def collect(self, late=False):
        """(comm_s, exposed_s, bytes or None) of DDP's all-reduce for the step, or None. late:
        the step before this one, whose figures DDP computed at this step's synced forward."""
        if self._found:
            self._start_found()
        tracked = self.tracked
        if not tracked:
            return None
        if len(tracked) == 1:  # one DDP, the usual case, without the loop's bookkeeping
            one = tracked[0]
            result = one.collect(late)
            if result is _GONE:
                self.tracked = []
                self.late = False
                return None
            self.late = not one.read_before
            return result if result is not _INCOMPLETE else None
        comm = exposed = 0.0
        nbytes = 0
        have_bytes = True
        sampled = False
        complete = True
        live = []
        for one in tracked:
            result = one.collect(False)
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
        self.tracked = live
        self.late = False
        if not complete or not sampled:
            return None
        return comm, exposed, nbytes if have_bytes else None

    def collect_final(self, tracked):
        """The last figures of a DDP being collected, read through the logger it leaves behind."""
        if tracked in self.tracked:
            self.tracked.remove(tracked)
        self.late = False
        result = tracked.collect_final()
        return result if result is not _INCOMPLETE else None


_GONE = object()
_INCOMPLETE = object()


class _TrackedDdp:
    def __init__(self, ddp, probe, bucket_bytes):
        self._probe = probe
        # Called as the DDP is collected (Note [Late reads]); the logger is held until then, so
        # a report waiting for the DDP's last figures can still read them.
        self._ref = weakref.ref(ddp, self._on_collected)
        self._logger = ddp.__dict__.get("logger")
        self._delayed = bool(ddp.__dict__.get("_delay_all_reduce_all_params"))  # set at construction
        self._bucket_bytes = bucket_bytes
        self._hooked = False  # a communication hook: bucket bytes are not what goes on the wire
        self._last_start = 0  # comm-start timestamp (ns) of the last sample counted
        self._last_iteration = 0
        self.read_before = False

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

    def _on_collected(self, _ref):
        self._probe.ddp_gone(self)
        self._logger = None

    def _read(self, logger):
        get = logger._get_ddp_logging_data().ints_map.get
        start = get("backward_comm_time_start", 0)
        comm = get("backward_comm_time", 0)
        if start <= self._last_start or comm <= 0:
            return None  # no new iteration with a measured reduction
        return get("iteration", 0), start, comm, get("backward_compute_comm_overlap_time", 0)

    def collect_late(self):
        """Note [Late reads]: collect(late=True) in its usual case, DDP's sample of the next
        iteration, in as few steps as it takes (this runs in every step of a fast program);
        anything else goes the general way."""
        ddp = self._ref()
        logger = self._logger
        if ddp is not None and logger is not None and not self._delayed and not self.read_before:
            get = logger._get_ddp_logging_data().ints_map.get
            start = get("backward_comm_time_start", 0)
            comm = get("backward_comm_time", 0)
            iteration = get("iteration", 0)
            if start > self._last_start and comm > 0 and iteration == self._last_iteration + 1:
                self._last_start = start
                self._last_iteration = iteration
                exposed = comm - get("backward_compute_comm_overlap_time", 0)
                nbytes = self._bucket_bytes
                if nbytes is not None and ddp.__dict__.get("_comm_hooks"):
                    nbytes = None
                return comm / 1e9, (exposed if exposed > 0 else 0) / 1e9, nbytes
        result = self._probe._ddp.collect(late=True)
        return result

    def collect(self, late):
        """(comm_s, exposed_s, bytes or None) of the iterations since the last call, None if
        there were none, _INCOMPLETE if some were missed, _GONE once the DDP is gone. late: read
        what DDP computed itself at its last synced forward (Note [Late reads])."""
        ddp = self._ref()
        if ddp is None:
            return _GONE
        # The DDP's own attributes are read from its __dict__: nn.Module.__getattr__ on a missing
        # name builds an AttributeError, which costs more than the rest of a step's read.
        logger = self._logger
        if logger is None:
            return _GONE
        if self._delayed:
            return None
        self._hooked = bool(ddp.__dict__.get("_comm_hooks"))
        if late and not self.read_before:
            sample = self._read(logger)
            if sample is not None:
                return self._count(None, sample, late=True)
            # DDP computed nothing new (no synced forward since): its timer still holds the step's.
        return self._sample(logger)

    def collect_final(self):
        logger = self._logger
        if logger is None:
            return None
        return self._sample(logger)

    def _sample(self, logger):
        before = self._read(logger) if self.read_before else None
        logger.set_runtime_stats_and_log()
        sample = self._read(logger)
        if sample is not None and before is not None and sample[1] <= before[1]:
            sample = None  # the same iteration read twice
        return self._count(before, sample)

    def _count(self, before, sample, late=False):
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
        if missed > 0 and late and not self.read_before:
            # Read late, this is the first reduction of the next step, not the last of the step
            # the report is for (whose last DDP recomputed over): that report goes without
            # figures, and the next step, read as it ends, counts this one too.
            self.read_before = True
            self._last_iteration = first[0] - 1
            return _INCOMPLETE
        self._last_iteration = sample[0]
        self._last_start = sample[1]
        if missed > 0:
            if not self.read_before:
                self.read_before = True  # more than one reduction per step: read both ends from now on
            else:
                self._probe.note_once(
                    "ddp-iterations",
                    "DDP ran %d synced iterations in one optimizer step and the probe could read %d of their "
                    "reductions (gradient accumulation without no_sync() over more than two micro-batches, or "
                    "forwards with gradients that had no backward); such steps report no communication figures"
                    % (missed + count, count))
            return _INCOMPLETE
        nbytes = None
        if self._bucket_bytes is not None and not self._hooked:
            nbytes = self._bucket_bytes * count
        return comm_ns / 1e9, exposed_ns / 1e9, nbytes
