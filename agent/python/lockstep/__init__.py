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
"""

from lockstep import _probe

__all__ = ["report"]


def report(*, loss=None, tokens=None, flops=None, total_steps=None, step=None):
    """Adds figures to the current step's report; a no-op without lockstep-agent."""
    probe = _probe._probe
    if probe is None or not probe.enabled:
        return
    try:
        probe.add_figures({"loss": loss, "tokens": tokens, "flops": flops, "total_steps": total_steps, "step": step})
    except Exception as error:
        probe.disable(error, "lockstep.report()")
