"""ipusim: a cycle-approximate discrete-event simulator of the Graphcore IPU."""

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

__version__ = "0.1.0"

#: Linux's transparent-hugepage defrag policy; with these, a page fault in a region
#: advised for huge pages compacts memory synchronously.
THP_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
_STALLING_DEFRAG = ("madvise", "defer+madvise")


def _numpy_hugepages() -> None:
    """Stop numpy advising huge pages where that stalls page faults.

    numpy advises huge pages for large arrays; under a ``madvise`` defrag policy each
    first touch of such memory may then compact memory synchronously. The simulator
    makes many large short-lived arrays (element ids, tables), and on such a host this
    made compiling and running a 10 M-element graph about 1.5x slower. Huge pages stay
    advised when the policy does not stall, and ``NUMPY_MADVISE_HUGEPAGE`` set by the
    user always wins (numpy reads it).
    """
    if sys.platform != "linux" or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:
        text = THP_DEFRAG.read_text()
    except OSError:
        return
    selected = text[text.find("[") + 1 : text.find("]")] if "[" in text else ""
    if selected in _STALLING_DEFRAG:
        import numpy as np

        setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
        if setter is not None:
            setter(False)


_numpy_hugepages()


class _AfterNumba(importlib.abc.MetaPathFinder):
    """Stamps the package kernels' cache entries once Numba is imported.

    :mod:`ipusim.kernel_cache` must put its locators in Numba's list before the first
    ``cache=True`` kernel is decorated, but importing Numba here would make every
    ``import ipusim`` (the command line, configs) pay for it. So this finder, first on
    ``sys.meta_path``, lets the ``numba`` package load as usual and installs the
    locators as soon as its ``__init__`` has run, before any code that imported it
    goes on; then it removes itself.
    """

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != "numba":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: object) -> None:
            run(module)
            # installs the locators when imported (this may be within its own import)
            importlib.import_module("ipusim.kernel_cache")

        loader.exec_module = exec_module
        return spec


def _stamp_kernels() -> None:
    """Install :mod:`ipusim.kernel_cache` now if Numba is loaded, else when it is."""
    if "numba" in sys.modules:
        importlib.import_module("ipusim.kernel_cache")  # installs the locators
    elif not any(isinstance(f, _AfterNumba) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterNumba())


_stamp_kernels()
