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
    """

    __slots__ = ("firsts", "size", "starts")

    def __init__(self, starts: np.ndarray, firsts: np.ndarray, size: int) -> None:
        self.starts = starts
        self.firsts = firsts
        self.size = int(size)

    @property
    def dtype(self) -> np.dtype:
        """The type of the ids given back (int64)."""
        return np.dtype(np.int64)

    @property
    def nbytes(self) -> int:
        """Host bytes held."""
        return int(self.starts.nbytes + self.firsts.nbytes)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: Any) -> np.ndarray:
        """The ids at a slice (step 1) or at an array of positions, as an int64 array."""
        if isinstance(key, slice):
            a, b, step = key.indices(self.size)
            if step != 1:
                return self[np.arange(a, b, step, dtype=np.int64)]
            return self._range(a, max(a, b))
        pos = np.asarray(key, np.int64)
        if pos.size and (int(pos.min()) < -self.size or int(pos.max()) >= self.size):
            raise IndexError(f"positions outside the {self.size} ids of the runs")
        pos = np.where(pos < 0, pos + self.size, pos)
        run = np.searchsorted(self.starts, pos, side="right") - 1
        return self.firsts[run] + (pos - self.starts[run])

    def _range(self, a: int, b: int) -> np.ndarray:
        if b <= a:
            return np.zeros(0, np.int64)
        r0 = int(np.searchsorted(self.starts, a, side="right")) - 1
        r1 = int(np.searchsorted(self.starts, b, side="left"))
        starts = self.starts[r0:r1].copy()
        firsts = self.firsts[r0:r1].copy()
        firsts[0] += a - starts[0]
        starts[0] = a
        ends = np.append(starts[1:], b)
        lengths = ends - starts
        offsets = np.cumsum(lengths) - lengths
        return np.repeat(firsts - offsets, lengths) + np.arange(b - a, dtype=np.int64)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._range(0, self.size)
        return out if dtype is None else out.astype(dtype)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"RunIds({self.starts.size} runs, {self.size} ids)"


def as_runs(ids: np.ndarray) -> RunIds | None:
    """``ids`` as :class:`RunIds` when they average at least
    :data:`MIN_ELEMENTS_PER_RUN` elements per run, else None (keep the array)."""
    ids = np.asarray(ids).reshape(-1)
    n = ids.size
    if n < 2 * MIN_ELEMENTS_PER_RUN:
        return None
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    if (breaks.size + 1) * MIN_ELEMENTS_PER_RUN > n:
        return None
    starts = np.concatenate(([0], breaks)).astype(np.int64)
    return RunIds(starts, ids[starts].astype(np.int64), n)
