"""FSDP2's all-gathers and reduce-scatters, per optimizer step: fully_shard's communication
objects, replaced by timed ones.

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
"""

import sys
import time
import weakref


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
