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

Trimming is not free: ``malloc_trim`` walks the heap, and every page it returns is
faulted in again when the heap grows back. A heap with little free (under
:data:`MIN_FREE_BYTES`, as between the steps of a graph of 100 k vertices, 15 to 70
MiB) is left as it is: the pages kept are few, and the compile does not pay for
returning and re-faulting them. glibc's ``mallinfo2`` says how much is free.

The other way round, :func:`populate_for_writing` faults an array's pages in ahead of
its writes (Linux's ``MADV_POPULATE_WRITE``), keeping its contents: one fault per page
where a pass that reads and writes every element (to the same values) takes two on
pages never written (the read maps the shared zero page, the write then copies it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
from functools import cache

import numpy as np

__all__ = ["MIN_FREE_BYTES", "free_heap_bytes", "populate_for_writing", "release_free_heap"]

#: Free heap bytes below which :func:`release_free_heap` does not trim.
MIN_FREE_BYTES = 64 << 20

#: Linux's ``madvise`` advice that faults pages in writable, contents kept (5.14 on;
#: Python's ``mmap`` module names it from 3.13 only).
MADV_POPULATE_WRITE = 23


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (all fields ``size_t``)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


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


@cache
def _mallinfo2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``mallinfo2`` (glibc 2.33 on), or None where there is no such function."""
    if _malloc_trim() is None:
        return None
    try:
        info = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    info.argtypes = []
    info.restype = _MallInfo2
    return info


def free_heap_bytes() -> int | None:
    """Bytes of the C heap's free chunks (``mallinfo2().fordblks``), or None when the
    C library does not say (not glibc, or glibc before 2.33)."""
    info = _mallinfo2()
    return int(info().fordblks) if info is not None else None


def release_free_heap(min_free: int = MIN_FREE_BYTES) -> bool:
    """Return the pages of the C heap's free chunks to the operating system.

    Parameters
    ----------
    min_free
        Free heap bytes below which nothing is trimmed (when the C library says how
        much is free; else the heap is always trimmed).

    Returns
    -------
    bool
        Whether the C library has ``malloc_trim`` (glibc) and it released memory.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    free = free_heap_bytes()
    if free is not None and free < min_free:
        return False
    return bool(trim(0))


@cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The C library's ``madvise`` on Linux, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        advise = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").madvise
    except (OSError, AttributeError):
        return None
    advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advise.restype = ctypes.c_int
    return advise


def populate_for_writing(array: np.ndarray) -> bool:
    """Fault in every page of ``array``'s memory for writing, its values unchanged.

    The pages spanned are advised ``MADV_POPULATE_WRITE`` (whole pages: the first and
    last may hold other memory of the process, which is populated the same way and
    keeps its contents too). Each page not yet resident costs one fault, taken here
    rather than at the array's first writes.

    Parameters
    ----------
    array
        A C-contiguous, writeable array.

    Returns
    -------
    bool
        Whether the pages were populated; False (nothing done) off Linux, before
        Linux 5.14, or for an array that is not C-contiguous and writeable.
    """
    advise = _madvise()
    if advise is None or not (array.flags.c_contiguous and array.flags.writeable):
        return False
    if array.nbytes == 0:
        return True
    page = mmap.PAGESIZE
    begin = array.ctypes.data // page * page
    end = -(-(array.ctypes.data + array.nbytes) // page) * page
    return advise(begin, end - begin, MADV_POPULATE_WRITE) == 0
