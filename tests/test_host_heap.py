"""The host heap's trim between compile steps (skipped when little of the heap is free)
and the population of an array's pages ahead of its writes."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from ipusim import host_heap


def _heap_arrays(megabytes: int) -> list[np.ndarray]:
    """``2 * megabytes`` arrays of 1 MB from glibc's heap (not mmapped)."""
    big = np.ones(20_000_000 // 8)  # mmapped; freeing it raises the mmap threshold (to 20 MB)
    del big
    return [np.ones(1_000_000 // 8) for _ in range(2 * megabytes)]


def test_free_heap_bytes_counts_freed_chunks():
    """Freeing 120 chunks of 1 MB between live ones adds about 120 MB of free heap.

    The free bytes are read once every array is allocated and again after half of them
    are freed: allocating may take chunks the process freed earlier (a test run before
    this one in the same worker), so only the freeing is compared.
    """
    if host_heap.free_heap_bytes() is None:
        pytest.skip("this C library does not report its free heap (mallinfo2)")
    arrays = _heap_arrays(120)
    before = host_heap.free_heap_bytes()
    del arrays[::2]
    after = host_heap.free_heap_bytes()
    assert after is not None and before is not None
    assert after - before > 100e6, f"{(after - before) / 1e6:.0f} MB more free"
    assert all(float(a[0]) == 1.0 for a in arrays)


def test_small_free_heap_is_not_trimmed(monkeypatch):
    """Below ``min_free`` free bytes the trim is not called; at or above it, it is."""
    free = host_heap.free_heap_bytes()
    if free is None or host_heap._malloc_trim() is None:
        pytest.skip("this C library has no malloc_trim or mallinfo2")
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    monkeypatch.setattr(host_heap, "_malloc_trim", lambda: trim)
    monkeypatch.setattr(host_heap, "free_heap_bytes", lambda: 10 << 20)
    assert host_heap.release_free_heap(min_free=11 << 20) is False
    assert calls == []
    assert host_heap.release_free_heap(min_free=10 << 20) is True
    assert calls == [0]
    assert host_heap.MIN_FREE_BYTES == 64 << 20


def test_populate_for_writing_takes_the_faults_and_keeps_the_values():
    """A fresh 32 MB array populated for writing is then written page by page with
    (almost) no page fault, and holds the values it held before."""
    import resource

    pages = (32 << 20) // mmap.PAGESIZE
    array = np.zeros(32 << 20, np.uint8)  # mmapped, no page resident yet
    array[:: 3 * mmap.PAGESIZE + 1] = 7  # a few pages written
    before = array.copy()
    if not host_heap.populate_for_writing(array):
        pytest.skip("no MADV_POPULATE_WRITE here (not Linux, or Linux before 5.14)")
    assert np.array_equal(array, before)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    array[:: mmap.PAGESIZE] += 1  # one write to every page
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    assert faults < pages // 20, f"{faults} page faults writing {pages} populated pages"
    before[:: mmap.PAGESIZE] += 1
    assert np.array_equal(array, before)


def test_populate_for_writing_refuses_a_strided_view():
    """A view that is not C-contiguous is left alone (False), as the caller then
    writes its elements itself."""
    array = np.zeros(1 << 20, np.uint8)
    assert host_heap.populate_for_writing(array[::2]) is False
