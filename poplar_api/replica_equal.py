"""Elements that every replica holds alike, known without reading them.

An effect that has just stored the same bits into every replica's copy of some elements
(the FLOAT all-reduce in place, :func:`poplar_api.lowering.collective._fused_sum`)
declares them as runs of element ids of one image (a ``Storage.full`` array); the next
effect the engine applies may rely on it, and no later one: any effect may write those
elements, and only the one right after is sure that none did. The record is the
images' own (:attr:`poplar_api.lowering.context.Storage.declared`, one per lowered
executable, not one per process): the engine's data plane calls
:meth:`DeclaredAlike.next_effect` before it applies each effect and
:meth:`DeclaredAlike.forget` when a run starts (the host may write the images between
runs). A kernel that reads such elements from every replica can then read replica 0's
once (:meth:`DeclaredAlike.holds_alike`), with the values it would have read.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DeclaredAlike"]

#: Answers of :meth:`DeclaredAlike.holds_alike` kept, at most.
KEPT = 1 << 8


class DeclaredAlike:
    """What the last effect applied declared alike in every replica, by image."""

    def __init__(self) -> None:
        #: image id -> (image, run starts, run ends): declared by the effect being applied
        self._declared: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: the same, declared by the effect applied just before the current one
        self._current: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: (ids, starts) by their ids -> whether every id lies in a run (the arrays are
        #: kept, so an entry is used only for the same objects)
        self._inside: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}

    def declare(self, image: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """Say that every replica's row of ``image`` (``[replicas, size]``) now holds
        the same bits at element ids ``starts[j]`` to ``ends[j]`` (sorted runs), for the
        next effect."""
        self._declared[id(image)] = (image, starts, ends)

    def next_effect(self) -> None:
        """Before an effect is applied: what the effect before it declared is what
        holds now."""
        self._current, self._declared = self._declared, {}

    def forget(self) -> None:
        """Nothing is known (a run starts)."""
        self._current.clear()
        self._declared.clear()

    def holds_alike(self, image: np.ndarray, ids: np.ndarray) -> bool:
        """Whether every replica's row of ``image`` is known to hold the same bits at
        every element id of ``ids`` (the last effect declared runs covering them)."""
        hit = self._current.get(id(image))
        if hit is None or hit[0] is not image or not ids.size:
            return False
        starts, ends = hit[1], hit[2]
        key = (id(ids), id(starts))
        kept = self._inside.get(key)
        if kept is not None and kept[0] is ids and kept[1] is starts:
            return kept[2]
        run = np.searchsorted(starts, ids, side="right") - 1
        inside = bool((run >= 0).all() and (ids < ends[np.maximum(run, 0)]).all())
        if len(self._inside) >= KEPT:
            self._inside.clear()
        self._inside[key] = (ids, starts, inside)
        return inside
