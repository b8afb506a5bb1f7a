"""Which references of an exchange cross IPUs, found from runs of element ids.

On a target of several IPUs, an exchange's references are runs of element ids bound
for receiving tiles (:meth:`~poplar_api.lowering.exchange.ExchangePlanner.add_pieces`).
A run whose elements all live on its receiving tile's own IPU is planned on chip, as
on one IPU, from the run itself; only the receiving tiles that get some element from
another IPU need the element-by-element planning that lands an element once per IPU
(:meth:`~poplar_api.lowering.exchange.ExchangePlanner.add`). In a sharded or
pipelined model the elements that cross IPUs are the few tensors copied between
stages, so telling the two apart without expanding the runs keeps the planning of
every other exchange of a multi-IPU graph at the cost of one IPU's.

The owning IPU of every id is looked up through the space's *IPU stretches*: the ids
where the owning tile's IPU changes, found once per element space from the ids where
the owning tile changes (:func:`ipu_stretches`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ipu_stretches", "receivers_from_other_ipus"]


def ipu_stretches(
    owner: np.ndarray, changes: np.ndarray, tiles_per_ipu: int, space: int
) -> tuple[np.ndarray, np.ndarray]:
    """Stretches of consecutive ids owned on one IPU.

    Parameters
    ----------
    owner
        Tile of each id of an element space (-1 where unmapped).
    changes
        Sorted ids where the owning tile changes
        (:func:`~poplar_api.lowering.runs.change_points` of ``owner``).
    tiles_per_ipu
        Tiles of one IPU.
    space
        Ids of the space.

    Returns
    -------
    tuple of numpy.ndarray
        ``(ends, ipu)``: int64 end (exclusive) of each stretch, ascending, the last
        one ``space``, and the IPU owning the stretch (-1 for unmapped ids).
    """
    starts = np.concatenate((np.zeros(1, np.int64), np.asarray(changes, np.int64)))
    ipu = np.asarray(owner[starts], np.int64) // tiles_per_ipu  # -1 stays -1
    new = np.ones(starts.size, bool)
    new[1:] = ipu[1:] != ipu[:-1]
    first = np.flatnonzero(new)
    ends = np.append(starts[first[1:]], np.int64(space))
    return ends, ipu[first]


def receivers_from_other_ipus(
    begin: np.ndarray,
    length: np.ndarray,
    dst: np.ndarray,
    stretches: tuple[np.ndarray, np.ndarray],
    tiles_per_ipu: int,
) -> np.ndarray:
    """Whether each run's receiving tile gets some element from another IPU.

    A run ``[begin, begin + length)`` bound for tile ``dst`` stays on chip when it
    lies within one IPU stretch owned by ``dst``'s IPU; a receiving tile with any
    other run is marked on all its runs (its references must be planned together).

    Parameters
    ----------
    begin, length, dst
        The runs and their receiving tiles (int arrays of one length).
    stretches
        :func:`ipu_stretches` of the runs' element space.
    tiles_per_ipu
        Tiles of one IPU.

    Returns
    -------
    numpy.ndarray
        bool per run: its receiving tile gets elements from another IPU.
    """
    ends, ipu = stretches
    begin = np.asarray(begin, np.int64)
    dst = np.asarray(dst, np.int64)
    k = np.searchsorted(ends, begin, side="right")  # the stretch holding each begin
    k = np.minimum(k, ends.size - 1)
    crossing = (ipu[k] != dst // tiles_per_ipu) | (begin + length > ends[k])
    if not crossing.any():
        return crossing
    far = np.zeros(int(dst.max()) + 1, bool)
    far[dst[crossing]] = True
    return far[dst]
