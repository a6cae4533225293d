"""Lockstep's Python probe, started by Python's `site` module in every worker of lockstep-agent.

The agent puts this file's directory first on each worker's PYTHONPATH (docs/agent.md, "The
Python probe"). Python imports the first `sitecustomize` on its path at start-up, so this one
does its own set-up and then runs the `sitecustomize` the image or the pod had (the next one
on sys.path after this directory) as Python would have: as the module `sitecustomize`, an
error in it reported as `site` reports it, and the program started either way.

Its own set-up is cheap and never imports torch: with a step socket (LOCKSTEP_METRICS_SOCKET)
and the probe not switched off (LOCKSTEP_PYTHON_PROBE=0), it installs an import hook that
starts the probe once the program has imported torch (lockstep/_probe.py, then
lockstep/_pytorch.py).
"""


def _lockstep_start():
    import os
    import sys

    if not os.environ.get("LOCKSTEP_METRICS_SOCKET") or os.environ.get("LOCKSTEP_PYTHON_PROBE", "1") == "0":
        return
    try:
        import importlib.util

        # lockstep/_probe.py alone, without its package: a program's own `import lockstep`
        # finds what its path gives it first (its own module of that name, or ours, whose
        # `_probe` is then this one, already in sys.modules).
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lockstep", "_probe.py")
        spec = importlib.util.spec_from_file_location("lockstep._probe", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["lockstep._probe"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["lockstep._probe"]
            raise
        module.install()
    except Exception as error:
        message = " ".join(str(error).split())
        sys.stderr.write("lockstep probe: disabled: %s%s (while starting); the program runs on without step reports\n"
                         % (type(error).__name__, ": " + message if message else ""))


def _lockstep_chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    def real(path):
        return os.path.realpath(path or os.curdir)

    here = real(os.path.dirname(os.path.abspath(__file__)))
    rest = list(sys.path)
    for i, entry in enumerate(sys.path):
        if real(entry) == here:
            rest = sys.path[i + 1:]
            break
    rest = [entry for entry in rest if real(entry) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    ours = sys.modules.get(__name__)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        # As site.execsitecustomize() reports an error in sitecustomize; the program starts.
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                             % (err.__class__.__name__, err))


try:
    _lockstep_start()
finally:
    _lockstep_chain()
