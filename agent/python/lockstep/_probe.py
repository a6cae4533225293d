"""Lockstep's Python probe: the part every Python worker of the agent loads.

The agent puts this directory first on every worker's PYTHONPATH; its ``sitecustomize``
calls ``install()`` when the worker has a step socket (LOCKSTEP_METRICS_SOCKET). It stays
small and imports nothing but ``os`` and ``sys`` (a worker that does not use torch compiles
and runs it at start-up, often without a bytecode cache): it installs a meta-path finder
that waits for ``import torch``, and once torch is imported loads the probe itself
(lockstep/_pytorch.py; Note [The Python probe] there). What each figure means:
docs/metrics.md, "The Python probe".
"""

import os
import sys

_SOCKET_ENV = "LOCKSTEP_METRICS_SOCKET"

# The probe (lockstep._pytorch._Probe) once the program has imported torch; lockstep.report()
# reads it. None before, without the agent, and when its set-up failed.
_probe = None
_installed = False


def install():
    """Installs the import hook in this process (the agent's sitecustomize calls it). Idempotent."""
    global _installed
    if _installed or not os.environ.get(_SOCKET_ENV):
        return
    _installed = True
    torch = sys.modules.get("torch")
    if torch is not None and not getattr(getattr(torch, "__spec__", None), "_initializing", False):
        _start(torch)  # imported already (a .pth file did)
    else:
        sys.meta_path.insert(0, _TorchImportFinder())


def _start(torch):
    """Starts the probe once torch is imported; never raises."""
    global _probe
    try:
        import importlib

        had_package = "lockstep" in sys.modules
        module = importlib.import_module("lockstep._pytorch")
        if not had_package:  # as sitecustomize leaves it: the program's `import lockstep` decides
            sys.modules.pop("lockstep", None)
        probe = module._Probe(os.environ[_SOCKET_ENV])
        try:
            probe.register_hooks(torch)
        except Exception:
            probe.stop()
            raise
        _probe = probe
    except Exception as error:
        say_disabled(error, "setting up after `import torch`")


def one_line(text):
    return " ".join(str(text).split())


def say_disabled(error, where):
    """The one line the probe says when it turns itself off; never raises."""
    try:
        message = one_line(error)
        sys.stderr.write("lockstep probe: disabled: %s%s (while %s); the program runs on without step reports\n"
                         % (type(error).__name__, ": " + message if message else "", where))
        sys.stderr.flush()
    except Exception:
        pass


class _TorchImportFinder:
    """A meta-path finder that wraps torch's loader so the probe starts after torch's import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        # One import of torch only: whatever happens next, this finder's work is done.
        self.remove()
        # The spec the finders after this one give, asked as the import system would ask them
        # (their own errors propagate, as they would have).
        spec = None
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        try:
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _AfterImportLoader(spec.loader)
        except Exception as error:  # the import goes on without the probe
            say_disabled(error, "hooking `import torch`")
        return spec

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def invalidate_caches(self):
        pass


class _AfterImportLoader:
    """Delegates to torch's own loader, then starts the probe once torch's import has run."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # The module keeps its own loader (torch and importlib.resources see the real one).
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        _start(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)
