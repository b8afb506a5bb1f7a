"""ipusim: a cycle-approximate discrete-event simulator of the Graphcore IPU."""

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
