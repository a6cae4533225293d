"""The probe's wait at exit, a moment for c10d's worker threads to finish.

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
"""

import os
import time

_EXIT_GRACE_S = 0.05  # Note [Gloo's exit race]


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
