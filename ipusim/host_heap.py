"""The simulator's own host memory: give freed heap pages back to the operating system.

Compiling a large graph makes and drops many temporary numpy arrays between a few
hundred KiB and tens of MiB (the pieces every tile reads while the exchanges are
planned, sort keys, per-compute-set plans). glibc's ``malloc`` serves arrays of that
size from its heap once a freed one has raised its mmap threshold, and keeps the
pages of freed chunks resident for reuse: after the ResNet-50 inference compile 1.5
of the heap's 4.5 GB were free but resident, so the process's peak resident set was
about a third above what it held. :func:`release_free_heap` (glibc's ``malloc_trim``)
returns those pages between the compile's steps; the memory stays the process's to
reuse, only its resident pages go. Elsewhere (another C library, another system) it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache

__all__ = ["release_free_heap"]


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``malloc_trim``, or None where there is no such function."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return the pages of the C heap's free chunks to the operating system.

    Returns
    -------
    bool
        Whether the C library has ``malloc_trim`` (glibc) and it released memory.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
