"""Lockstep's Python probe, the part that runs once a program has imported torch.

lockstep/_probe.py, which every Python worker of the agent loads, imports this module when
the program imports torch, and ``_Probe.register_hooks`` puts the probe into PyTorch's own
hooks. What each figure means, and what is not measured: docs/metrics.md, "The Python
probe".

The probe is this package's modules, one concern each; this one puts them together:
  _pytorch.py       the probe of one process (``_Probe``): PyTorch's hooks into it, its life
                    (on, stopped, disabled) and each step's report, from the pieces below
  _steps.py         which optimizer steps are the program's steps (the "leader"'s)
  _ddp.py           DDP's all-reduce, from DDP's own statistics (Notes [DDP's statistics] and
                    [Late reads] there)
  _fsdp.py          FSDP2's all-gathers and reduce-scatters, timed (Note [FSDP2's collectives])
  _comm_figures.py  the arithmetic of the communication figures: DDPs' added, FSDP's combined
  _own_figures.py   the figures lockstep.report() adds to the step in progress
  _step_report.py   one step's report line, as the agent parses it
  _channel.py       the step socket: its claim, and the reports sent in batches (Note [Reports
                    in batches])
  _exit_wait.py     the wait at exit for c10d's threads (Note [Gloo's exit race])

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
from lockstep._channel import _SEND_EVERY_S, _Channel
from lockstep._comm_figures import _combine
from lockstep._ddp import _HELD, _DdpSource
from lockstep._exit_wait import _let_collective_threads_finish
from lockstep._fsdp import _FsdpSource
from lockstep._own_figures import _OwnFigures
from lockstep._steps import _Leader


class _Probe:
    """The probe of one process: its hooks, the step count, and the reports it sends."""

    def __init__(self, socket_path):
        self.enabled = True
        self._channel = _Channel(socket_path)
        self._pending = None  # this step's record while it waits for its communication (Note [Late reads])
        self._handles = []
        self._leader = _Leader()  # the optimizer whose steps are counted
        self._step = 0
        self._last_end = None
        self._silenced = False  # a forked child of the reporting process
        self._own = _OwnFigures(self)  # lockstep.report()'s figures
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
        channel = self._channel
        try:
            if self._pending is not None:  # without its communication figures
                channel.batch.append(self._pending)
                self._pending = None
            channel.flush()  # the steps reported before the error still count
        except Exception:
            channel.batch = []
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
            if self._leader.is_step(optimizer):
                self._report_step()
        except Exception as error:
            self.disable(error, "reporting an optimizer step")

    def _report_step(self):
        channel = self._channel
        if not channel.claimed and not self._claim():
            return
        # The step ends here, inside optimizer.step(), give or take the probe's own work.
        now = time.perf_counter()
        last_end, self._last_end = self._last_end, now
        step = self._own.take_step()
        self._step = int(step) if step is not None else self._step + 1
        step_s = now - last_end if last_end is not None else None
        extras = self._own.extras()
        self._busy = True
        try:
            # See Note [Late reads]: a fast step's last synced iteration is read at the next forward.
            late = step_s is not None and step_s < _SEND_EVERY_S
            held, ddp = self._ddp.end_step(late) if self._ddp.tracked else (None, None)
            pending = self._pending
            if pending is not None:  # the step before, whose DDP figures were held
                self._pending = None
                pending[2] = _combine(pending[2], held)
                channel.batch.append(pending)
            fsdp = self._fsdp.collect()
            record = [self._step, step_s, fsdp, extras]
            if ddp is _HELD:
                self._pending = record
            else:
                if ddp is not None:
                    record[2] = _combine(fsdp, ddp)
                channel.batch.append(record)
        finally:
            self._busy = False
        channel.flush_if_due(now)

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
                self._channel.batch.append(pending)
                self._channel.flush()
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
                self._channel.batch.append(pending)
            if self._channel.batch:
                self._channel.flush()
        except Exception:
            pass  # at exit, a probe never turns a clean exit into an error

    def _claim(self):
        """Note [The Python probe], one reporter per socket."""
        if self._channel.claim():
            return True
        self.stop()
        self.note_once("claim", "another process of this worker (%s) already reports its steps; this one (pid %d) "
                       "stays silent" % (self._channel.socket_path, os.getpid()))
        return False

    # -- lockstep.report() ----------------------------------------------------------------

    def add_figures(self, figures):
        self._own.add(figures)


def _silence(ref):
    probe = ref()
    if probe is not None:  # a forked child: the parent reports this worker's steps
        probe._silenced = True
        probe._channel.batch = []
        probe._pending = None
        probe.stop()
