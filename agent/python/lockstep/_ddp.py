"""DDP's gradient all-reduce, per optimizer step: what the probe reads of DistributedDataParallel's
own statistics, through a reader in front of each DDP's logger.

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
"""

import sys
import weakref

from lockstep._comm_figures import _add, _seconds

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
