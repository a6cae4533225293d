"""Lockstep's Python module: figures of your own for the step reports of lockstep-agent.

Under lockstep-agent, the Python probe reports every optimizer step of a PyTorch program
(step time, and DDP's communication) on its own (docs/metrics.md, "The Python probe"). What
only the program knows it adds with ``report``::

    import lockstep
    ...
    loss.backward()
    optimizer.step()
    lockstep.report(loss=loss.item(), tokens=batch_tokens)

``report`` adds its figures to the report of the step in progress, the one the next
optimizer step ends (so calling it just after ``optimizer.step()`` counts for the step
after): ``tokens`` and ``flops`` add up over the calls of a step (one per micro-batch is
fine), ``loss`` is the mean of a step's calls, ``total_steps`` (the steps the run plans, for
progress and an ETA) and ``step`` (this step's number, e.g. after resuming from a
checkpoint; later steps count on from it) the last given. A value that is not a finite
number (or is negative, but for ``loss``) is left out, said once on stderr; ``report`` never
raises for a value. Each figure is converted with ``float()``, so a CUDA tensor waits for the
GPU: pass ``loss.item()`` where you already have it.

Without the agent (no LOCKSTEP_METRICS_SOCKET), with the probe switched off
(LOCKSTEP_PYTHON_PROBE=0) or disabled, ``report`` does nothing and costs a function call;
it looks at none of its arguments. The module needs nothing but the standard library and
never imports torch.

``stopping()`` is True once the agent has asked this worker to stop (SIGTERM: the job is
preempted, its pod deleted, or another rank failed), so the program can checkpoint and exit
within the agent's grace period; False before, and always False without the agent. The first
call (from the main thread) installs the SIGTERM handler that records it; a program that never
calls it keeps SIGTERM's default (Note [Stopping in Python] in lockstep/_stop.py)::

    for step in range(start, steps):
        train_one_step()
        flag = torch.tensor([float(lockstep.stopping())])
        torch.distributed.all_reduce(flag)  # the same sum on every rank
        if flag.item() > 0:
            save_checkpoint(step + 1)
            sys.exit(143)
"""

from lockstep import _probe
from lockstep._stop import stopping

__all__ = ["report", "stopping"]


def report(*, loss=None, tokens=None, flops=None, total_steps=None, step=None):
    """Adds figures to the current step's report; a no-op without lockstep-agent."""
    probe = _probe._probe
    if probe is None or not probe.enabled:
        return
    try:
        probe.add_figures({"loss": loss, "tokens": tokens, "flops": flops, "total_steps": total_steps, "step": step})
    except Exception as error:
        probe.disable(error, "lockstep.report()")
