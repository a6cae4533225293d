"""The arithmetic of a step's communication figures: DDP's (comm, exposed, bytes) tuples added in
ns and given in seconds, and combined with FSDP's per-op figures (where they come from:
Note [Communication sources] in `agent/python/lockstep/_pytorch.py`)."""


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
