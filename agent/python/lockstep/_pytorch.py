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
* Communication: only what a source measures is sent (Notes [DDP's statistics] and [FSDP2's
  collectives]). A program with neither sends step time and no communication figures at all,
  never zeros.
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
torch/csrc/distributed/c10d/reducer.cpp, logger.cpp): per synced iteration (a forward with
gradients enabled outside ``no_sync()``, then its backward) the reducer's timer records host
timestamps, or CUDA events on a GPU, for the backward's compute start and end and for the first
bucket's all-reduce launch and the last one's completion (after ``finalize_backward`` waited for
every bucket). ``Logger::set_runtime_stats_and_log()`` turns the timer's latest events into
durations, in ns: ``backward_comm_time`` (first launch to last completion),
``backward_compute_comm_overlap_time`` (first launch to the end of backward compute), the host
timestamps ``backward_comm_time_start`` etc., and ``iteration``, the reducer's count of synced
iterations so far, which is the number of the iteration those events belong to.
* When DDP computes them: in ``_pre_forward`` of the next synced forward (before that forward's
  ``prepare_for_forward`` counts it), and only on iterations 1-10 and every ``sample_rate``-th
  after (default 100). The probe sets the rate to 1 for each DDP it tracks
  (``DistributedDataParallel._set_ddp_runtime_logging_sample_rate``; no environment variable
  sets it in torch 2.11). The timer holds one iteration: the next synced forward's computation
  replaces the figures, so each iteration must be read before the one after it is computed.
* Read at every synced forward. A global module-registration hook sees ``self.module = ...`` in
  DDP's constructor and gives the new DDP a forward pre-hook (``_FirstForward``), which at its
  first forward, when its reducer and logger exist, sets the sample rate, puts a reader
  (``_LoggerReader``) in the place of its logger (``ddp.logger``: every attribute is the
  logger's) and removes itself. DDP calls ``self.logger.set_runtime_stats_and_log()`` in each
  synced forward; the reader lets the logger compute, then reads its figures, which describe
  the synced iteration before this one: a sample, counted once by its comm-start timestamp (an
  iteration without a backward has no reduction, and leaves the timer's older events, which are
  not counted again). The sample's ``iteration`` says which optimizer step it belongs to: the
  probe keeps, per DDP, the reducer's count at the last step's end (``boundary``); a sample of
  an iteration after it is the step in progress's, one at or before it the ended step's (held,
  below). So every synced iteration of every step is counted, however many a step has
  (gradient accumulation without ``no_sync()``, evaluation forwards under ``no_grad()``, which
  DDP neither counts nor computes at, forwards with gradients and no backward, which it counts
  but which reduce nothing), and whatever the bucket layout, ``find_unused_parameters`` or
  ``static_graph``. No hook stays on the DDP (a pickled or deep-copied DDP carries none; one
  copied before its first forward gets an inert ``_Inert`` in its place), and DDP pickles no
  logger. A DDP whose forward is not called through ``__call__`` (no hooks run) gets its reader
  at the end of the first step it took part in, and is measured from the next step on (said
  once).
* A step's last synced iteration is read at the next synced forward, which is in the next step:
  either the step's report waits for it (Note [Late reads]), or the probe computes it at the
  step's end itself, calling ``set_runtime_stats_and_log()`` in the leader's post-hook (steps of
  0.25 s or more). DDP's own call at the next forward then recomputes the same sample (the timer
  is unchanged until that forward records new events), which is not counted twice. On CUDA that
  call waits for the backward's events (``CudaTimer::measureDifference`` synchronizes them), as
  DDP itself does at the next forward at sample rate 1: the wait moves from the next forward to
  the end of the step, after the optimizer's kernels are queued.
* Not cumulative: the ``avg_*`` fields are running means kept in integer nanoseconds,
  ``avg = (d + avg * (n - 1)) / n`` truncated, so differencing ``avg * n`` would undercount each
  iteration by up to n ns. The probe reads the per-iteration fields, which hold a sample exactly.
* Figures per step, summed over its synced iterations: ``comm_s`` = ``backward_comm_time``;
  ``exposed_comm_s`` = the part after backward compute ended (``backward_comm_time -
  backward_compute_comm_overlap_time``, at least 0), so exposed <= comm always; ``compute_s`` =
  ``step_s - exposed_comm_s``, as lockstep-trainer defines it; per op, ``allreduce``;
  ``comm_bytes.allreduce`` = the sizes of DDP's gradient buckets times the iterations that
  reduced, sent only without a communication hook or DDP mixed precision (which change what goes
  on the wire). The span includes time a bucket waited for a slower rank: from this rank's side
  that is communication too. Several DDPs add up.
* Not read, each said once on stderr, the other figures kept: a DDP that keeps no statistics
  (compiled autograd's Python reducer, a DDP that delays every parameter's all-reduce, a module
  on several devices), and a step with no synced backward (every micro-batch under
  ``no_sync()``), which has no DDP reduction to report.

Note [Late reads]
-----------------
In a step shorter than 0.25 s, the probe does not compute the step's last synced iteration at
the step's end: DDP computes it itself at the next synced forward, where the probe's forward
hook reads it. Until then the step's report is held (``_Probe._pending``; each DDP keeps the
step's figures apart, ``_TrackedDdp.held``), and at the next step's end it goes with its own
step's figures complete (bench/agent/RESULTS.md: the per-step work 210 -> 140 us when this was
introduced). If no synced forward came in between (a step without one, or an evaluation pass
under ``no_grad()`` before the next step), the probe computes the held iteration then. A report
still held when its DDP is garbage collected (a model local to a function) is completed in a
weakref callback as the DDP goes, through DDP's logger, which the probe holds until then (the
logger holds the reducer, which the DDP's collection then frees); one held at exit, at exit
(atexit). On a GPU a late read leaves the wait for the backward's CUDA events where DDP puts it
at sample rate 1, in the next forward, not at the step's end.

Note [FSDP2's collectives]
--------------------------
``fully_shard`` (FSDP2) keeps no statistics of its own, but it runs every all-gather and
reduce-scatter through a communication object per parameter group, which PyTorch lets a program
replace (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``; the group's
``_all_gather_comm`` and ``_reduce_scatter_comm``). The probe replaces FSDP's own default
objects (``DefaultAllGather``, ``ProcessGroupAllocAllGather`` and the reduce-scatter pair) with
instances of subclasses of their own classes (so FSDP's own ``isinstance`` checks still hold)
whose ``__call__`` calls the original's and times it: the same collective on the same tensors,
in the same order. Objects a program set itself are left alone, and their collectives are not
measured (said once).
* Found: FSDP2 records every module's state in ``torch.distributed._composable_state``'s
  mapping; at each step's end the probe looks again when its size changed. So the collectives
  of the steps before the probe first looks (the first optimizer step of a program that
  ``fully_shard``s before training) are not measured: that step's report has no FSDP figures.
* Figures, per op (``allgather``, ``reduce_scatter``), summed over the step: ``comm_s`` the
  calls' wall time, host clock; ``exposed_comm_s`` the same for a synchronous call (FSDP's
  default on every device: Gloo completes the collective before the call returns, so the step
  waited for all of it); ``comm_bytes`` the unsharded tensor's bytes (the all-gather's output,
  the reduce-scatter's input), as lockstep-trainer's FSDP counts them. An asynchronous
  all-gather (``unshard(async_op=True)``, ``unshard_async_op``) counts from its call to its
  completion (its Work's future), and its exposed part is not measured: a step with one sends
  no ``exposed_comm_s`` at all (said once). On a GPU the host clock sees launches, not the
  collectives: the NCCL profiler plugin measures those (Note [Communication sources]).
* Not measured: HSDP's all-reduce and a program's ``set_all_reduce_hook`` (not through these
  objects), and collectives inside ``torch.compile``d regions (the wrapper steps aside while
  compiling).

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

Note [Communication sources]: the probe's per-step communication figures come from DDP's
statistics (``_DdpSource``) and FSDP2's communication objects (``_FsdpSource``), added up by op.
NCCL's own timing of every operation of any program does not come through the probe: the
agent's NCCL profiler plugin (Note [NCCL profiler plugin] in agent/nccl_profiler/plugin.c),
which NCCL loads into the worker, reports it to the agent itself, as series of their own
(docs/metrics.md).
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
        # Note [Communication sources]
        self._ddp = _DdpSource(self)
        self._fsdp = _FsdpSource(self)
        self._busy = False  # inside _report_step (a DDP collected meanwhile waits for it)
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
        self._ddp.stop()
        self._fsdp.stop()

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
        # The step ends here, inside optimizer.step(), give or take the probe's own work.
        now = time.perf_counter()
        last_end, self._last_end = self._last_end, now
        step = self._figures.pop("step", None) if self._figures else None
        self._step = int(step) if step is not None else self._step + 1
        step_s = now - last_end if last_end is not None else None
        extras = self._extras() if self._losses or self._figures else None
        self._busy = True
        try:
            # Note [Late reads]: a fast step's last synced iteration is read at the next forward.
            late = step_s is not None and step_s < _SEND_EVERY_S
            held, ddp = self._ddp.end_step(late) if self._ddp.tracked else (None, None)
            pending = self._pending
            if pending is not None:  # the step before, whose DDP figures were held
                self._pending = None
                pending[2] = _combine(pending[2], held)
                self._batch.append(pending)
            fsdp = self._fsdp.collect()
            record = [self._step, step_s, fsdp, extras]
            if ddp is _HELD:
                self._pending = record
            else:
                if ddp is not None:
                    record[2] = _combine(fsdp, ddp)
                self._batch.append(record)
        finally:
            self._busy = False
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

    def complete_pending(self):
        """Note [Late reads]: the held report gets its DDP figures now, as a DDP is collected (the
        step in progress completes it itself if the collection happens inside it)."""
        if self._busy:
            return
        try:
            pending = self._pending
            if pending is not None and self.enabled:
                self._pending = None
                pending[2] = _combine(pending[2], self._ddp.take_held())
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
                pending[2] = _combine(pending[2], self._ddp.take_held())
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
    communication as DDP's source gives it (a tuple) or per op ({op: {"comm_s"[, "exposed_s"][, "bytes"]}})."""
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
    elif comm:  # per op: FSDP's, or DDP's with FSDP's
        total = exposed = 0.0
        all_exposed = True
        for values in comm.values():
            total += values["comm_s"]
            if "exposed_s" in values:
                exposed += values["exposed_s"]
            else:
                all_exposed = False
        if all_exposed:
            if step_s is not None:
                parts.append("compute_s=%.9g" % max(0.0, step_s - exposed))
            parts.append("comm_s=%.9g" % total)
            parts.append("exposed_comm_s=%.9g" % exposed)
        else:  # Note [FSDP2's collectives]: an asynchronous all-gather's exposed part is unknown
            parts.append("comm_s=%.9g" % total)
        for op in sorted(comm):
            values = comm[op]
            parts.append("comm_s.%s=%.9g" % (op, values["comm_s"]))
            if "exposed_s" in values:
                parts.append("exposed_comm_s.%s=%.9g" % (op, values["exposed_s"]))
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


def _combine(ops, ddp):
    """A step's communication: FSDP's per-op figures (or None) with DDP's (comm_s, exposed_s, bytes)
    (or None); DDP's tuple alone when FSDP has none, the form _format takes fastest."""
    if not ops:
        return ddp
    if ddp is None:
        return ops
    comm_s, exposed_s, nbytes = ddp
    ops = dict(ops)
    ops["allreduce"] = {"comm_s": comm_s, "exposed_s": exposed_s}
    if nbytes is not None:
        ops["allreduce"]["bytes"] = nbytes
    return ops


def _number(value):
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


_HELD = object()  # a step's DDP figures wait for its last synced iteration (Note [Late reads])


class _DdpSource:
    """Note [DDP's statistics]: every DDP's gradient all-reduce, per optimizer step."""

    def __init__(self, probe):
        self._probe = probe
        self.tracked = []  # _TrackedDdp, one per DDP built since the probe started

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
                for tracked in self.tracked:
                    if tracked.ddp() is module:
                        return None  # `module` assigned again
                self.tracked.append(_TrackedDdp(module, self._probe))
        except Exception as error:
            self._probe.disable(error, "looking for DistributedDataParallel")
        return None

    def end_step(self, late):
        """At the leader's step end: (the held step's figures or None, this step's or None or _HELD),
        figures as (comm_s, exposed_s, bytes or None). late: hold this step's (Note [Late reads])."""
        tracked = self.tracked
        if len(tracked) == 1:  # one DDP, the usual case, without the loop's bookkeeping
            one = tracked[0]
            held, this = one.end_step(late)
            if one.gone:
                self.tracked = []
            return _seconds(held), this if this is _HELD else _seconds(this)
        held = this = None
        for one in tracked:
            h, t = one.end_step(late)
            held = _add(held, h)
            this = t if t is _HELD else _add(this, t)
        self.tracked = [one for one in tracked if not one.gone]
        return _seconds(held), this if this is _HELD else _seconds(this)

    def take_held(self):
        """The held step's figures, now (Note [Late reads]): at exit, or as a DDP is collected."""
        held = None
        for one in self.tracked:
            held = _add(held, one.take_held())
        self.tracked = [one for one in self.tracked if not one.gone]
        return _seconds(held)

    def stop(self):
        for one in self.tracked:
            one.stop()


def _add(a, b):
    """Two DDPs' figures (comm_ns, exposed_ns, bytes or None), either possibly None, added."""
    if a is None:
        return b
    if b is None:
        return a
    return a[0] + b[0], a[1] + b[1], a[2] + b[2] if a[2] is not None and b[2] is not None else None


def _seconds(figures):
    if figures is None:
        return None
    return figures[0] / 1e9, figures[1] / 1e9, figures[2]


class _TrackedDdp:
    """One DDP: its logger's samples, kept apart by optimizer step (Note [DDP's statistics])."""

    def __init__(self, ddp, probe):
        self._probe = probe
        # Called as the DDP is collected (Note [Late reads]).
        self.ddp = weakref.ref(ddp, self._on_collected)
        self.gone = False
        self._logger = None  # DDP's c10d Logger, once attached
        self._reader = None  # what DDP calls in its place (_LoggerReader)
        self._bucket_bytes = None
        self.last_start = 0  # comm-start timestamp (ns) of the last sample counted
        self.count = 0  # the reducer's synced iterations so far, as of the last sample DDP computed
        self.boundary = 0  # ... at the last optimizer step's end
        self.calls = 0  # DDP's statistics calls (its synced forwards) seen
        self.calls_before = 0  # ... at the last optimizer step's end
        # Samples of iterations after the boundary: [comm_ns, exposed_ns, iterations that reduced].
        self.open = [0, 0, 0]
        self.held = None  # the same, of the ended step whose report waits (Note [Late reads])
        # DDP.__init__ has run nn.Module.__init__, so the module's hook dicts exist already; the
        # logger does not yet: it is put in place at the first forward.
        hook = _FirstForward(self)
        hook.handle = ddp.register_forward_pre_hook(hook)
        self._first_forward = hook

    def attach(self, ddp):
        """Puts the reader in place of DDP's logger, once DDP has one: its sample rate, its buckets."""
        self._first_forward = None
        logger = ddp.__dict__.get("logger")
        if logger is None or isinstance(logger, _LoggerReader) or ddp.__dict__.get("_use_python_reducer"):
            why = "a DDP run by compiled autograd's Python reducer keeps no statistics"
        elif ddp.__dict__.get("_delay_all_reduce_all_params"):
            why = "a DDP that delays every parameter's all-reduce keeps no statistics"
        else:
            why = None
        if why is not None:
            self._probe.note_once("ddp-unsupported", why + "; its reductions are not in the step reports")
            return
        ddp._set_ddp_runtime_logging_sample_rate(1)
        strs = logger._get_ddp_logging_data().strs_map
        if not strs.get("comm_hook") and getattr(ddp, "mixed_precision", None) is None:
            sizes = [s for s in strs.get("bucket_sizes", "").replace(" ", "").split(",") if s]
            if sizes and all(s.isdigit() for s in sizes):
                self._bucket_bytes = sum(int(s) for s in sizes)
        self._logger = logger
        self._reader = _LoggerReader(logger, self)
        ddp.logger = self._reader

    def stop(self):
        hook, self._first_forward = self._first_forward, None
        if hook is not None:
            hook.handle.remove()
        ddp = self.ddp()
        if ddp is not None and self._reader is not None and ddp.__dict__.get("logger") is self._reader:
            ddp.logger = self._logger

    def take_latest(self):
        """Counts the figures DDP's logger computed last, once (by their comm-start timestamp), for
        the step their iteration belongs to; returns that iteration."""
        get = self._logger._get_ddp_logging_data().ints_map.get
        iteration = get("iteration", 0)
        start = get("backward_comm_time_start", 0)
        comm = get("backward_comm_time", 0)
        if start <= self.last_start or comm <= 0:
            return iteration  # nothing new: that iteration had no backward (or was counted already)
        self.last_start = start
        into = self.open if iteration > self.boundary else self.held
        if into is None:
            return iteration  # a step already reported (none in a DDP attached at its first forward)
        into[0] += comm
        exposed = comm - get("backward_compute_comm_overlap_time", 0)
        if exposed > 0:
            into[1] += exposed
        into[2] += 1
        return iteration

    def _compute(self):
        """DDP's figures of its latest iteration, computed now instead of at the next synced forward."""
        if self._logger is None:
            return
        self._logger.set_runtime_stats_and_log()
        self.take_latest()

    def end_step(self, late):
        if self._logger is None and not self.gone:  # (a collected DDP's last figures still count)
            self._attach_late()
            return None, None
        held = None
        if self.held is not None:
            if self.count == self.boundary:
                self._compute()  # no synced forward read the held step's last iteration
            held = self._figures(self.held, 0)
            self.held = None
        this = None
        calls, self.calls_before = self.calls - self.calls_before, self.calls
        if self.count > self.boundary or self.open[2]:
            if late and not self.gone:
                self.held = self.open
                this = _HELD
            else:
                if not self.gone:
                    self._compute()
                this = self._figures(self.open, calls)
            self.open = [0, 0, 0]
            self.boundary = self.count
        elif calls:
            self._figures(self.open, calls)  # says why there are none
        elif self._logger is not None:
            self._probe.note_once("ddp-no-sync", "an optimizer step with no synced DDP forward (every micro-batch "
                                  "under no_sync()) has no DDP reduction; such steps report no DDP figures")
        return held, this

    def _attach_late(self):
        """A DDP that ran no forward through __call__ (no hooks ran): its reader now, and its figures
        from the next step on (of this one's iterations DDP holds the last only)."""
        ddp = self.ddp()
        if self.gone or ddp is None or ddp.__dict__.get("logger") is None or self._first_forward is None:
            return  # not built yet, or gone, or attached before (unsupported)
        self.stop()
        self.attach(ddp)
        if self._logger is None:
            return
        self._logger.set_runtime_stats_and_log()
        get = self._logger._get_ddp_logging_data().ints_map.get
        self.last_start = get("backward_comm_time_start", 0)
        self.count = self.boundary = get("iteration", 0)
        self.calls_before = self.calls
        self._probe.note_once("ddp-late", "a DDP whose forward ran without its module hooks (not through __call__) is "
                              "measured from the optimizer step after the first it took part in")

    def take_held(self):
        held = self.held
        if held is None:
            return None
        if self.count == self.boundary and not self.gone:
            self._compute()
        self.held = None
        return self._figures(held, 0)

    def _figures(self, acc, calls):
        if not acc[2]:
            if calls:
                self._probe.note_once(
                    "ddp-unmeasured", "DDP ran %d synced forward(s) in an optimizer step and measured no reduction "
                    "(forwards with gradients and no backward, or a module on several devices, for which DDP keeps "
                    "no timer); such steps report no DDP figures" % calls)
            return None
        nbytes = None
        if self._bucket_bytes is not None:
            ddp = self.ddp()
            if ddp is None or not ddp.__dict__.get("_comm_hooks"):
                nbytes = self._bucket_bytes * acc[2]
        return acc[0], acc[1], nbytes

    def _on_collected(self, _ref):
        try:
            if self._logger is not None and (self.held is not None or self.count > self.boundary):
                self._compute()  # its last iteration, through the logger it leaves behind
        except Exception as error:
            self._probe.disable(error, "reading DDP's figures as it was collected")
        self.gone = True
        self._logger = self._reader = None  # frees the reducer
        if self.held is not None:
            self._probe.complete_pending()


class _LoggerReader:
    """DDP's c10d Logger as DDP sees it (``ddp.logger``): everything is the logger's, and each
    statistics computation DDP makes at a synced forward is read (Note [DDP's statistics])."""

    __slots__ = ("_logger", "_tracked")

    def __init__(self, logger, tracked):
        self._logger = logger
        self._tracked = tracked

    def set_runtime_stats_and_log(self):
        # DDP's call at each synced forward, before prepare_for_forward() counts its iteration: the
        # logger computes the previous synced iteration's figures, which are read here, once.
        self._logger.set_runtime_stats_and_log()
        tracked = self._tracked
        if not tracked._probe.enabled:
            return
        try:
            tracked.calls += 1
            tracked.count = tracked.take_latest() + 1  # this forward's own iteration, counted next
        except Exception as error:
            tracked._probe.disable(error, "reading DDP's statistics at its forward")

    def __getattr__(self, name):
        return getattr(self._logger, name)


class _FirstForward:
    """A forward pre-hook on a new DDP until its first forward, when its logger exists; returns
    None, so the forward runs unchanged. A copy of the DDP made before then (copy.deepcopy,
    pickle) gets an inert hook in its place."""

    __slots__ = ("_tracked", "handle")

    def __init__(self, tracked):
        self._tracked = tracked
        self.handle = None

    def __call__(self, ddp, args):
        tracked = self._tracked
        try:
            tracked.stop()  # this hook's one call
            if tracked._probe.enabled:
                tracked.attach(ddp)
        except Exception as error:
            tracked._probe.disable(error, "setting up DDP's statistics at its first forward")
        return None

    def __deepcopy__(self, memo):
        return _Inert()

    def __reduce__(self):
        return _Inert, ()


class _Inert:
    """What a copy of a DDP gets in place of _FirstForward: does nothing."""

    __slots__ = ()

    def __call__(self, *args):
        return None


class _FsdpSource:
    """Note [FSDP2's collectives]: fully_shard's all-gathers and reduce-scatters, per optimizer step."""

    _OWN = "torch.distributed.fsdp._fully_shard._fsdp_collectives"  # where FSDP's default comm classes live

    def __init__(self, probe):
        self._probe = probe
        self._mapping = None  # torch.distributed._composable_state's mapping of module states, once imported
        self._seen = 0  # its size when last looked at
        self._groups = []  # [weakref to an FSDPParamGroup, its original all-gather, its original reduce-scatter]
        self._classes = {}  # FSDP's comm class -> our timed subclass of it
        self._tally = {}  # op -> [comm_s, exposed_s, bytes]
        self._completed = []  # (op, seconds) of asynchronous all-gathers, appended as their Work completes
        self._asynchronous = False  # whether this step had one (no exposed figure)
        self._compiling = None

    def collect(self):
        """This step's figures per op, or None; called at every step's end, so cheap without FSDP2."""
        mapping = self._mapping
        if mapping is None:
            states = sys.modules.get("torch.distributed._composable_state")
            if states is None:
                return None
            mapping = self._mapping = states._module_state_mapping  # a module global, never replaced
        # Its dict's size (the WeakKeyDictionary's own len() is Python code): a change, even one
        # that a pending removal will undo, means a look.
        if len(mapping.data) != self._seen:
            self._seen = len(mapping.data)
            self._find(mapping)
        if not self._groups:
            return None  # a program without FSDP2 (DDP's imports that module too)
        self._check()
        completed, self._completed = self._completed, []
        tally, self._tally = self._tally, {}
        asynchronous, self._asynchronous = self._asynchronous, False
        for op, seconds in completed:
            figures = tally.setdefault(op, [0.0, 0.0, 0])
            figures[0] += seconds
        if not tally:
            return None
        ops = {}
        for op, (comm_s, exposed_s, nbytes) in tally.items():
            ops[op] = {"comm_s": comm_s, "bytes": nbytes} if asynchronous and op == "allgather" else \
                {"comm_s": comm_s, "exposed_s": exposed_s, "bytes": nbytes}
        return ops

    def _find(self, mapping):
        known = {id(g[0]()) for g in self._groups}
        for ref in list(mapping.values()):
            state = ref()
            group = getattr(state, "_fsdp_param_group", None)
            if group is not None and id(group) not in known:
                entry = [weakref.ref(group), None, None]
                self._groups.append(entry)
                self._wrap(group, entry)

    def _check(self):
        """Each group still runs our objects (a program may set its own, or FSDP new defaults)."""
        live = []
        for entry in self._groups:
            group = entry[0]()
            if group is None:
                continue
            live.append(entry)
            gather = group.__dict__.get("_all_gather_comm")
            scatter = group.__dict__.get("_reduce_scatter_comm")
            if type(gather) not in self._ours or type(scatter) not in self._ours:
                self._wrap(group, entry)
        self._groups = live

    @property
    def _ours(self):
        return self._classes.values()

    def _wrap(self, group, entry):
        for attribute, op, slot in (("_all_gather_comm", "allgather", 1), ("_reduce_scatter_comm", "reduce_scatter", 2)):
            comm = group.__dict__.get(attribute)
            if comm is None or type(comm) in self._ours:
                continue
            if type(comm).__module__ != self._OWN:
                self._probe.note_once("fsdp-custom:" + op, "an FSDP module runs its own %s object (%s); its %ss are not "
                                      "in the step reports" % (op, type(comm).__name__, op))
                continue
            timed = self._classes.get(type(comm))
            if timed is None:
                timed = self._classes[type(comm)] = _timed_comm_class(type(comm), op, self)
            # The same object's state in an instance of the timed subclass; the original kept, to
            # put back if the probe stops.
            wrapper = object.__new__(timed)
            wrapper.__dict__.update(comm.__dict__)
            entry[slot] = comm
            setattr(group, attribute, wrapper)

    def stop(self):
        for entry in self._groups:
            group = entry[0]()
            if group is None:
                continue
            for attribute, slot in (("_all_gather_comm", 1), ("_reduce_scatter_comm", 2)):
                if entry[slot] is not None and type(group.__dict__.get(attribute)) in self._ours:
                    setattr(group, attribute, entry[slot])
        self._groups = []

    def is_compiling(self):
        check = self._compiling
        if check is None:
            compiler = getattr(sys.modules.get("torch"), "compiler", None)
            check = self._compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        return check()

    def count(self, op, started, ended, work, full):
        """One collective, called synchronously (work None) or asynchronously."""
        try:
            figures = self._tally.get(op)
            if figures is None:
                figures = self._tally[op] = [0.0, 0.0, 0]
            if full is not None:
                figures[2] += full.nbytes
            if work is None:
                figures[0] += ended - started
                figures[1] += ended - started
                return
            self._asynchronous = True
            self._probe.note_once("fsdp-async", "FSDP ran an asynchronous all-gather: its time counts from its call to "
                                  "its completion, its exposed part is not measured, and such steps report no "
                                  "exposed_comm_s")

            def done(_future):
                self._completed.append((op, time.perf_counter() - started))

            work.get_future().add_done_callback(done)
        except Exception as error:
            self._probe.disable(error, "timing an FSDP collective")


def _timed_comm_class(base, op, source):
    """A subclass of FSDP's comm class `base` whose calls are timed (Note [FSDP2's collectives])."""
    call = base.__call__
    # The unsharded tensor: the all-gather's output, the reduce-scatter's input (FSDP passes both
    # by keyword; positionally they are output, input).
    keyword, position = ("output_tensor", 0) if op == "allgather" else ("input_tensor", 1)
    probe = source._probe
    perf_counter = time.perf_counter

    def __call__(self, *args, **kwargs):
        if not probe.enabled or source.is_compiling():
            return call(self, *args, **kwargs)
        started = perf_counter()
        work = call(self, *args, **kwargs)
        ended = perf_counter()
        full = kwargs.get(keyword)
        if full is None and len(args) > position:
            full = args[position]
        source.count(op, started, ended, work, full)
        return work

    return type(base.__name__, (base,), {"__call__": __call__, "__doc__": base.__doc__})
