"""Elements every replica holds alike for as long as the executable runs: constants
that nothing writes.

A replicated graph is lowered once, and loading it writes every constant's initial
value into every replica's image (``Storage._write_initial``), so right after loading
every replica holds the same bits at every element of a constant. Copies, collectives,
stream copies and remote-buffer copies into a constant are refused when the program is
lowered; what may still write one is a vertex whose writing field (``Output`` or
``InOut``) is connected to it, and the host through a ``createHostWrite`` handle on it.
Where neither does, the elements stay alike in every replica for every run of every
engine of the executable, and a kernel that asks whether every replica holds the same
values there (the worklists and parameters of the convolution partials, asked on every
run: :meth:`poplar_api.field_images.ImageField.first_replica`) needs the answer once.

One record per replicated :class:`~poplar_api.lowering.context.Storage` (its images):
the lowering notes every compute set's table as it makes the set's effect
(:meth:`ConstantsAlike.note_writes`); the question is answered when first asked, at
run time, when every compute set of the program is noted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.lowering.runs import union_sorted

__all__ = ["ConstantsAlike"]


class ConstantsAlike:
    """Which element ids lie in constants that no vertex and no host write reaches.

    Parameters
    ----------
    state
        The graph's state (its variables, element spaces and host-write handles), as
        the lowering holds it.
    """

    def __init__(self, state: Any) -> None:
        self._state = state
        #: element size -> written fields of compute sets: ``(begin, end)`` runs, or
        #: the field table (its ids made only when a question reaches them)
        self._writes: dict[int, list[Any]] = {}
        #: element size -> ``(what they were made from, begin, end)`` (:meth:`_unsure`)
        self._kept: dict[int, tuple[tuple[int, ...], np.ndarray, np.ndarray]] = {}

    def note_writes(self, table: Any) -> None:
        """Note the writing fields of a compute set's table (``ComputeSetTable``)."""
        for group in table.groups:
            for ft in group.fields:
                if ft.spec.writes:
                    self._writes.setdefault(ft.type.size, []).append(ft)

    def never_written(self, size: int, ids: np.ndarray) -> bool:
        """Whether every id of ``ids`` (element ids of the ``size``-byte space) lies in
        a constant and no noted compute set and no host-write handle writes any of
        them: then every replica holds the same bits there whenever the program runs.
        False says nothing."""
        ids = np.asarray(ids)
        if self._state.spaces.get(size) is None or ids.size == 0:
            return False
        lo, hi = int(ids.min()), int(ids.max()) + 1
        begin, end = self._unsure(size)
        first = int(np.searchsorted(end, lo, side="right"))  # runs that end above lo
        last = int(np.searchsorted(begin, hi, side="left"))  # and begin below hi
        if first >= last:
            return True
        hit = np.zeros(hi - lo, bool)
        hit[ids - lo] = True
        marked = np.zeros(hi - lo + 1, np.int64)  # marked ids below each position
        np.cumsum(hit, out=marked[1:])
        return not self._reaches((begin[first:last], end[first:last]), lo, hi, marked)

    def _unsure(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the ``size``-byte space that may differ between replicas, as
        sorted, disjoint ``(begin, end)`` runs: every variable's that is not a constant,
        and every writer's (:meth:`_written`). Made once and kept while the space, the
        writers noted and the host-write handles are the same, so that a question
        reads the few runs near its ids (not every writer's, each asked in turn, nor
        every variable's base)."""
        state = self._state
        space = state.spaces[size]
        made_from = (
            space.size,
            len(space.var_bases),
            len(self._writes.get(size, ())),
            *map(id, state.host_writes.values()),
        )
        kept = self._kept.get(size)
        if kept is not None and kept[0] == made_from:
            return kept[1], kept[2]
        bases = np.asarray(space.var_bases, np.int64)
        ends = np.append(bases[1:], space.size)
        variable = ~state.variables.constant_flags()[np.asarray(space.var_ids, np.int64)]
        held = [(bases[variable], ends[variable])]
        held += [_disjoint(b, e) for b, e in self._written(size)]
        begin, end = _disjoint(*(np.concatenate(x) for x in zip(*held, strict=True)))
        self._kept[size] = (made_from, begin, end)
        return begin, end

    def _written(self, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each writer's element ids of the ``size``-byte space as ``(begin, end)``
        runs: the noted fields', then the host-write handles' (a tensor whose element
        type has that size; its ids one-element runs)."""
        out = []
        for ft in self._writes.get(size, []):
            held = ft.runs if ft.runs is not None else ft.ref_runs
            if held is None:
                ids = np.asarray(ft.ids, np.int64)
                held = (ids, ids + 1)
            out.append(held)
        for t in self._state.host_writes.values():
            if t.elementType().size == size:
                ids = np.asarray(t.flat_index(), np.int64).reshape(-1)
                out.append((ids, ids + 1))
        return out

    @staticmethod
    def _reaches(held: tuple[np.ndarray, np.ndarray], lo: int, hi: int, marked: np.ndarray) -> bool:
        """Whether any id of the runs ``held`` is one of the asked ids (``marked[k]``:
        how many of them lie below id ``lo + k``, ``k`` up to ``hi - lo``)."""
        begin = np.maximum(np.asarray(held[0], np.int64), lo)
        end = np.minimum(np.asarray(held[1], np.int64), hi)
        inside = end > begin
        if not inside.any():
            return False
        return bool((marked[end[inside] - lo] > marked[begin[inside] - lo]).any())


def _disjoint(begin: Any, end: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(begin, end)`` runs of ids (int64, any order, empty ones allowed) as the
    sorted, disjoint runs of the same ids, runs that meet joined
    (:func:`~poplar_api.lowering.runs.union_sorted`). A writer's runs usually come
    sorted already, and then are not sorted again."""
    begin = np.asarray(begin, np.int64).reshape(-1)
    end = np.asarray(end, np.int64).reshape(-1)
    inside = end > begin
    if not inside.all():
        begin, end = begin[inside], end[inside]
    if (begin[1:] < begin[:-1]).any():
        order = np.argsort(begin, kind="stable")
        begin, end = begin[order], end[order]
    return union_sorted(begin, end)
