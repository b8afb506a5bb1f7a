"""Element ids held as runs: the VectorList connections of library-built graphs.

A bulk-connected VectorList keeps the element ids of all its vectors in one array
(:class:`~poplar_api.vertices.ListBlock`). A convolution's partial vertices read their
operands as a few long runs of consecutive elements once the operands are laid out as
the plan wants (Poplibs' ``convolutionPreprocess`` copies), so one id per element read
is mostly redundant: a ResNet-50 training step's fields held hundreds of millions of
them. :class:`RunIds` keeps the same sequence as the start of each run and its first
id, and gives back plain id arrays for any slice or positions asked for, so the code
that reads a list block (the compile's field tables, a vertex's connections) sees the
ids it saw before.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = ["RunIds", "as_runs"]

#: Runs are kept only when there are at most this many elements per run on average
#: fewer (16 bytes per run against 4 per element: below 8 the runs would save little).
MIN_ELEMENTS_PER_RUN = 8


class RunIds:
    """A read-only 1-D sequence of element ids stored as runs of consecutive ids.

    Attributes
    ----------
    starts
        int64, the position in the sequence where each run begins (ascending, the
        first 0).
    firsts
        int64, the id at each run's start.
    size
        The length of the sequence.
    dtype
        The integer type of the ids given back (that of the array they came from:
        int32 where every id fits, as the graph keeps them).
    """

    __slots__ = ("dtype", "firsts", "size", "starts")

    def __init__(
        self, starts: np.ndarray, firsts: np.ndarray, size: int, dtype: Any = np.int64
    ) -> None:
        self.starts = starts
        self.firsts = firsts
        self.size = int(size)
        self.dtype = np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        """Host bytes held."""
        return int(self.starts.nbytes + self.firsts.nbytes)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: Any) -> np.ndarray:
        """The ids at a slice (step 1) or at an array of positions, as an array of
        :attr:`dtype`."""
        if isinstance(key, slice):
            a, b, step = key.indices(self.size)
            if step != 1:
                return self[np.arange(a, b, step, dtype=np.int64)]
            return self._range(a, max(a, b))
        pos = np.asarray(key, np.int64).reshape(-1)
        if pos.size and (int(pos.min()) < -self.size or int(pos.max()) >= self.size):
            raise IndexError(f"positions outside the {self.size} ids of the runs")
        pos = np.where(pos < 0, pos + self.size, pos)
        out = np.empty(pos.size, self.dtype)
        _ids_at(self.starts, self.firsts, pos, out)
        return out.reshape(np.shape(key))

    def _range(self, a: int, b: int) -> np.ndarray:
        out = np.empty(max(b - a, 0), self.dtype)
        if b > a:
            r0 = int(np.searchsorted(self.starts, a, side="right")) - 1
            _fill_range(self.starts, self.firsts, self.size, r0, a, out)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._range(0, self.size)
        return out if dtype is None else out.astype(dtype)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"RunIds({self.starts.size} runs, {self.size} ids of {self.dtype})"


def as_runs(ids: np.ndarray) -> RunIds | None:
    """``ids`` as :class:`RunIds` when they average at least
    :data:`MIN_ELEMENTS_PER_RUN` elements per run, else None (keep the array)."""
    ids = np.asarray(ids).reshape(-1)
    n = ids.size
    if n < 2 * MIN_ELEMENTS_PER_RUN:
        return None
    # C-contiguous (a copy of a strided view) and read-only, as a tensor's index is:
    # Numba compiles _run_starts once per layout and writability, so one signature
    ids = np.ascontiguousarray(ids)
    if ids.flags.writeable:
        ids = ids.view()
        ids.flags.writeable = False
    limit = n // MIN_ELEMENTS_PER_RUN  # more runs than this: not worth it
    starts = np.empty(limit, np.int64)
    count = _run_starts(ids, starts)
    if count < 0:
        return None
    starts = starts[:count].copy()
    return RunIds(starts, ids[starts].astype(np.int64), n, ids.dtype)


@numba.njit(cache=True, nogil=True)
def _run_starts(ids, starts):  # pragma: no cover - compiled
    """Write where each run of consecutive ids begins into ``starts`` and return how
    many there are, or -1 as soon as there are more than ``starts`` holds."""
    limit = starts.shape[0]
    count = 1
    starts[0] = 0
    for i in range(1, ids.shape[0]):
        if ids[i] != ids[i - 1] + 1:
            if count == limit:
                return -1
            starts[count] = i
            count += 1
    return count


@numba.njit(cache=True, nogil=True)
def _fill_range(starts, firsts, size, r, a, out):  # pragma: no cover - compiled
    """``out[j]`` = the id at position ``a + j``, walking the runs from run ``r`` (the
    run holding position ``a``)."""
    nruns = starts.shape[0]
    p = a
    n = out.shape[0]
    j = 0
    while j < n:
        end = starts[r + 1] if r + 1 < nruns else size
        base = firsts[r] - starts[r]
        stop = min(end, a + n)
        while p < stop:
            out[j] = base + p
            p += 1
            j += 1
        r += 1


@numba.njit(cache=True, nogil=True)
def _ids_at(starts, firsts, pos, out):  # pragma: no cover - compiled
    """``out[k]`` = the id at position ``pos[k]`` (positions within the runs)."""
    nruns = starts.shape[0]
    r = 0
    for k in range(pos.shape[0]):
        p = pos[k]
        # positions mostly ascend: walk forward from the last run, else search
        if r >= nruns or starts[r] > p or (r + 1 < nruns and starts[r + 1] <= p):
            r = np.searchsorted(starts, p, side="right") - 1
        out[k] = firsts[r] + (p - starts[r])
