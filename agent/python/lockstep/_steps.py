"""Which optimizer steps are the program's steps, seen from torch.optim's global step post-hook
(Note [The Python probe] in `agent/python/lockstep/_pytorch.py`, "Steps")."""

import weakref


class _Leader:
    """The optimizer whose steps are counted, the first that steps; another optimizer that steps
    twice while it does not takes over, and so does the next to step once it is collected."""

    def __init__(self):
        self._leader = None  # weakref to the optimizer whose steps are counted
        self._others = weakref.WeakKeyDictionary()  # other optimizers' steps since the leader's
        self._others_seen = False  # whether _others may hold any

    def is_step(self, optimizer):
        """Whether this step of `optimizer` is one of the program's steps."""
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
