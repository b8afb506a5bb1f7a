"""Liveness: the program points of a lowered program and the live range of each variable.

The executed IR steps of every entry program, in order (entry 0 first), are program
points; a function's steps are walked where it is called (through
:func:`ipusim.ir.children`). A variable is live from the first to the last point that
touches it, widened to the whole of any loop (``Repeat``, ``RepeatWhile``) it is
touched in. It is *always live* when it is a constant, has an initial value, has a
host read/write handle, or is touched by more than one entry program. A
``WriteUndef`` covering all of a variable's elements ends its live range there: the
next access starts a new one. A range in a loop is widened to the whole loop unless
a ``WriteUndef`` of the variable in the loop precedes the range (then its value
does not carry over to the next iteration).

A variable a function touches keeps one address over all calls (the function's code
exists once, compiled for that address), but need not hold it between its live
ranges: without an undef it is live from the first point of its first call to the
last point of its last call; with undefs its ranges are split as any variable's and
listed in :attr:`Liveness.joint`, so that the allocator places them at one address
free over all of them and lets other variables use it in the gaps (as Poplar's
allocator, which works on the interference of whole live intervals, may).

Which variable owns an element is looked up by :class:`VariableIndex`: each element
space's variable bases as arrays made once per lowering, and every access of a node
(or every initial value of the graph) marked in one pass per element space, however
many small tensors it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipusim import ir
from poplar_api.lowering import variable_marks

__all__ = ["Accesses", "Liveness", "ProgramPoints", "VariableIndex", "liveness", "program_points"]

#: What a node's steps access: (element type, element ids or a pair ``(begin, end)`` of
#: arrays of id runs), as lowering records them.
Parts = list[tuple[Any, Any]]


class VariableIndex:
    """Which variable owns each element id, for one lowering (the graph does not change
    while it is lowered).

    Parameters
    ----------
    state
        The graph state (its variables and element spaces).
    """

    def __init__(self, state: Any) -> None:
        self.state = state
        #: number of variables (and constants) of the graph
        self.count = len(state.variables)
        #: element size -> (variable bases, variable ids, whether each has elements)
        self._spaces: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def arrays(self, t: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(bases, variable ids, non-empty)`` of the element space of type ``t``
        (None when the graph has no element of its size)."""
        return self.arrays_of_size(t.size)

    def arrays_of_size(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`arrays` of the space of elements of ``size`` bytes."""
        space = self.state.spaces.get(size)
        if space is None:
            return None
        found = self._spaces.get(size)
        if found is None or found[0].size != len(space.var_bases):
            bases = np.asarray(space.var_bases, np.int64)
            var_ids = np.asarray(space.var_ids, np.int64)
            found = self._spaces[size] = (bases, var_ids, np.diff(bases, append=space.size) > 0)
        return found

    def in_one_variable(self, t: Any, lo: int, hi: int) -> bool:
        """Whether the ids ``lo .. hi - 1`` (of a tensor of type ``t``, ``lo < hi``) lie
        in one variable: :meth:`mark` of that run marking one variable, from two
        bases (a run marks each variable with elements from its first id's to its last
        id's), with no mask over every variable made."""
        arrays = self.arrays(t)
        if arrays is None:
            return False
        bases = arrays[0]
        j = int(np.searchsorted(bases, lo, side="right")) - 1
        return j >= 0 and (j + 1 == bases.size or hi <= int(bases[j + 1]))

    def variables_of(self, t: Any, ids: np.ndarray) -> np.ndarray:
        """Variable id owning each element id of type ``t``."""
        arrays = self.arrays(t)
        if arrays is None:
            return np.zeros(0, np.int64)
        bases, var_ids, _ = arrays
        return var_ids[np.searchsorted(bases, ids, side="right") - 1]

    def counts_of(self, t: Any, ids: np.ndarray | range) -> tuple[np.ndarray, np.ndarray]:
        """The variables owning elements of ``ids`` (sorted, distinct ids of type
        ``t``, or a ``range`` of step 1), sorted, and how many of the ids each owns.

        Each variable's first position in ``ids`` is found by a binary search of its
        base (one search per variable, not one per id: an undef of a large tensor
        lists millions of ids), or for a range by subtracting its start, over only
        the variables between the first and the last id (an undef of one small tensor
        among many variables stays cheap).
        """
        arrays = self.arrays(t)
        n = len(ids)
        if arrays is None or n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        bases, var_ids, _ = arrays
        first = max(int(np.searchsorted(bases, ids[0], side="right")) - 1, 0)
        within = isinstance(ids, range) and bases[first] <= ids.start
        if within and (first + 1 == bases.size or ids.stop <= bases[first + 1]):
            # (a range within one variable, as a whole variable's undef is: no pass)
            return var_ids[first : first + 1].copy(), np.array([n], np.int64)
        last = int(np.searchsorted(bases, ids[-1], side="right"))
        bases, var_ids = bases[first:last], var_ids[first:last]
        if isinstance(ids, range):
            edges = bases - ids.start  # (clipped to [0, n] in place: np.clip's wrapper
            np.maximum(edges, 0, out=edges)  # costs more than these few variables)
            np.minimum(edges, n, out=edges)
        else:
            edges = np.searchsorted(ids, bases, side="left")
        per_base = np.diff(edges, append=n)
        held = np.flatnonzero(per_base)
        vids, where = np.unique(var_ids[held], return_inverse=True)
        counts = np.bincount(where.reshape(-1), weights=per_base[held], minlength=vids.size)
        return vids, counts.astype(np.int64)

    def mark(self, parts: Iterable[tuple[Any, Any]]) -> np.ndarray:
        """Ids of the variables owning any element of ``parts`` (sorted): each part an
        element type and an id array, a ``range`` or a pair ``(begin, end)`` of arrays
        of id runs. Runs of one element size are marked together, in one pass."""
        mask = np.zeros(self.count, bool)
        by_size: dict[int, tuple[Any, list[np.ndarray], list[np.ndarray]]] = {}
        for t, ids in parts:
            if isinstance(ids, range) and ids.step == 1:
                ids = (np.array([ids.start], np.int64), np.array([ids.stop], np.int64))
            if isinstance(ids, tuple):
                entry = by_size.setdefault(t.size, (t, [], []))
                entry[1].append(ids[0])
                entry[2].append(ids[1])
                continue
            ids = np.asarray(ids)
            arrays = self.arrays(t) if ids.size else None
            if arrays is not None:
                variable_marks.mark_variables_in(arrays[0], arrays[1], ids, mask)
        for t, begins, ends in by_size.values():
            arrays = self.arrays(t)
            if arrays is not None:
                begin = begins[0] if len(begins) == 1 else np.concatenate(begins)
                end = ends[0] if len(ends) == 1 else np.concatenate(ends)
                variable_marks.mark_runs_in(*arrays, begin, end, mask)
        return np.flatnonzero(mask)


@dataclass(frozen=True)
class Accesses:
    """What lowering recorded for liveness, by ``id`` of IR node (the program keeps
    the nodes alive).

    Attributes
    ----------
    touches
        Node -> the elements its steps read or write (see :data:`Parts`).
    undefs
        Node of a ``WriteUndef`` -> the elements it makes undefined (an id array or,
        for consecutive ids, a ``range``).
    executes
        Nodes of ``Execute`` programs (their exchange buffers live while they run).
    """

    touches: Mapping[int, Parts] = field(default_factory=dict)
    undefs: Mapping[int, Parts] = field(default_factory=dict)
    executes: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ProgramPoints:
    """Program points of a lowered program and where the recorded accesses are."""

    #: the executed steps in order; point ``p`` is ``steps[p]``
    steps: tuple[ir.Step, ...]
    #: (id of the touching node, first point, last point, entry, inside a function)
    touched: tuple[tuple[int, int, int, int, bool], ...]
    #: (first point, last point) of every loop
    loops: tuple[tuple[int, int], ...]
    #: (first point, last point) of every Execute occurrence
    executes: tuple[tuple[int, int], ...]
    #: (id of a WriteUndef node, position, entry, inside a function): the undef sits
    #: just before program point ``position``
    undefs: tuple[tuple[int, int, int, bool], ...]
    #: points of the second and later calls of a function (their code is stored once)
    repeated: frozenset[int]


class _PointWalk(ir.Visitor):
    """Walks a program into program points (:func:`program_points`)."""

    def __init__(self, program: ir.Program, accesses: Accesses) -> None:
        self.functions = program.functions
        self.accesses = accesses
        self.steps: list[ir.Step] = []
        self.touched: list[tuple[int, int, int, int, bool]] = []
        self.loops: list[tuple[int, int]] = []
        self.executes: list[tuple[int, int]] = []
        self.undefs: list[tuple[int, int, int, bool]] = []
        self.repeated: set[int] = set()
        self.called: set[int] = set()

    def visit(self, node: Any, entry: int, in_fn: bool, calls: tuple[int, ...]) -> None:
        """Walk ``node`` and record where it touches, loops or runs a compute set."""
        lo = len(self.steps)
        super().visit(node, entry, in_fn, calls)
        hi = len(self.steps) - 1
        key = id(node)
        if key in self.accesses.undefs:
            self.undefs.append((key, lo, entry, in_fn))
        if hi < lo:
            return
        if isinstance(node, ir.Repeat | ir.RepeatWhile):
            self.loops.append((lo, hi))
        if key in self.accesses.touches:
            self.touched.append((key, lo, hi, entry, in_fn))
        if key in self.accesses.executes:
            self.executes.append((lo, hi))

    def visit_step(self, node: ir.Step, *args: Any) -> None:
        self.steps.append(node)

    def visit_call(self, node: ir.Call, entry: int, in_fn: bool, calls: tuple[int, ...]) -> None:
        # a function's steps are walked at every call; a recursive call is not followed
        fn = node.function
        if fn in calls or not 0 <= fn < len(self.functions):
            return
        lo = len(self.steps)
        again = fn in self.called
        self.called.add(fn)
        self.visit(self.functions[fn], entry, True, (*calls, fn))
        if again:  # its code is stored at the first call
            self.repeated.update(range(lo, len(self.steps)))


def program_points(program: ir.Program, accesses: Accesses) -> ProgramPoints:
    """Walk ``program``'s entries in order (functions where called) into program points."""
    walk = _PointWalk(program, accesses)
    for entry, node in enumerate(program.entries):
        walk.visit(node, entry, False, ())
    return ProgramPoints(
        tuple(walk.steps), tuple(walk.touched), tuple(walk.loops), tuple(walk.executes),
        tuple(walk.undefs), frozenset(walk.repeated),
    )  # fmt: skip


@dataclass(frozen=True)
class Liveness:
    """Live ranges of the graph's variables over the program points.

    Attributes
    ----------
    points
        The program points.
    first, last
        Per variable: first and last live point (``last < 0``: touched by no program).
    always
        Per variable: whether it is live at every point.
    ranges
        Variables whose live range a ``WriteUndef`` splits: variable id -> inclusive
        ``(first, last)`` ranges, in order.
    joint
        Variables of :attr:`ranges` that a function touches: their ranges keep one
        address.
    """

    points: ProgramPoints
    first: np.ndarray
    last: np.ndarray
    always: np.ndarray
    ranges: Mapping[int, tuple[tuple[int, int], ...]]
    joint: frozenset[int] = frozenset()

    def ranges_of(self, vid: int) -> list[tuple[int, int] | None]:
        """Live ranges of variable ``vid``: ``[None]`` when always live, ``[(0, -1)]``
        when touched by no program."""
        split = self.ranges.get(vid)
        if split:
            return list(split)
        if self.always[vid]:
            return [None]
        first, last = int(self.first[vid]), int(self.last[vid])
        return [(0, -1) if last < 0 else (first, last)]


def _held_parts(state: Any) -> Parts:
    """The elements held from load to the end: initial values and host handles."""
    parts: Parts = []
    begins: dict[int, tuple[Any, list[int], list[int]]] = {}
    for t, ids, _ in state.initial_parts:
        if isinstance(ids, range) and ids.step == 1:
            entry = begins.setdefault(t.size, (t, [], []))
            entry[1].append(ids.start)
            entry[2].append(ids.stop)
        else:
            parts.append((t, np.asarray(ids, np.int64)))
    for t, starts, stops in begins.values():
        parts.append((t, (np.asarray(starts, np.int64), np.asarray(stops, np.int64))))
    for handles in (state.host_writes, state.host_reads):
        parts += [(t.elementType(), t._flat_ids()) for t in handles.values()]
    return parts


def liveness(
    state: Any, program: ir.Program, accesses: Accesses, index: VariableIndex | None = None
) -> Liveness:
    """First and last live point of every variable, whether it is always live, and the
    ranges a ``WriteUndef`` splits (see the module docstring)."""
    index = index or VariableIndex(state)
    points = program_points(program, accesses)
    nv = len(state.variables)
    first = np.full(nv, np.iinfo(np.int64).max, np.int64)
    last = np.full(nv, -1, np.int64)
    entry_of = np.full(nv, -1, np.int64)
    always = np.zeros(nv, bool)
    cache: dict[int, np.ndarray] = {}
    # nodes whose parts are the same objects (a copy in two programs) are marked once
    by_parts: dict[tuple[int, ...], np.ndarray] = {}
    in_fn_vars = np.zeros(nv, bool)  # touched by a function: one address, one range
    for nid, lo, hi, entry, in_fn in points.touched:
        vids = cache.get(nid)
        if vids is None:
            parts = accesses.touches[nid]
            key = tuple(x for t, ids in parts for x in (t.size, id(ids)))
            vids = by_parts.get(key)
            if vids is None:
                vids = by_parts[key] = index.mark(parts)
            cache[nid] = vids
        in_fn_vars[vids] |= in_fn
        np.minimum.at(first, vids, lo)
        np.maximum.at(last, vids, hi)
        prev = entry_of[vids]
        always[vids[(prev >= 0) & (prev != entry)]] = True
        entry_of[vids] = entry
    used = last >= 0
    for _ in range(2):  # loops nest or are disjoint: a second pass settles any order
        for lo, hi in points.loops:
            m = used & (first <= hi) & (last >= lo)
            first[m] = np.minimum(first[m], lo)
            last[m] = np.maximum(last[m], hi)
    always |= state.variables.constant_flags()
    always[index.mark(_held_parts(state))] = True
    ranges = _undef_ranges(state, points, accesses, always, index, cache)
    joint = frozenset(vid for vid, r in ranges.items() if in_fn_vars[vid] and len(r) > 1)
    return Liveness(points, first, last, always, ranges, joint)


def _undef_ranges(
    state: Any,
    points: ProgramPoints,
    accesses: Accesses,
    always: np.ndarray,
    index: VariableIndex,
    cache: dict[int, np.ndarray],
) -> dict[int, tuple[tuple[int, int], ...]]:
    """Live ranges of the variables a ``WriteUndef`` covers in full (and that are not
    marked in ``always``): variable id -> inclusive ``(first, last)`` ranges, in order.
    An undef inside a function cuts at every call, as the function's steps are walked
    at every call."""
    cut: dict[int, list[int]] = {}  # variable -> positions of its undefs
    for nid, pos, _entry, _in_fn in points.undefs:
        for t, ids in accesses.undefs[nid]:
            if isinstance(ids, range) and ids.step != 1:
                ids = np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
            if state.find_space(t) is None or len(ids) == 0:
                continue
            # a whole variable's undef lists its ids in order (a range of a variable's
            # consecutive ids, made for this undef, is counted as it is): no sort needed
            ordered = isinstance(ids, range) or ids.size < 2 or bool((ids[1:] > ids[:-1]).all())
            uniq = ids if ordered else np.unique(ids)
            vids, counts = index.counts_of(t, uniq)
            for vid, n in zip(vids.tolist(), counts.tolist(), strict=True):
                if n == state.variables[vid].size and not always[vid]:
                    cut.setdefault(vid, []).append(pos)
    if not cut:
        return {}
    spans: dict[int, list[tuple[int, int]]] = {vid: [] for vid in cut}
    wanted = np.zeros(len(state.variables), bool)
    wanted[np.fromiter(cut, np.int64, len(cut))] = True
    for nid, lo, hi, _entry, _in_fn in points.touched:
        vids = cache.get(nid)
        if vids is None:
            vids = cache[nid] = index.mark(accesses.touches[nid])
        for vid in vids[wanted[vids]].tolist():  # vids: sorted, distinct
            spans[vid].append((lo, hi))
    out: dict[int, tuple[tuple[int, int], ...]] = {}
    for vid, touched in spans.items():
        marks = sorted(cut[vid])
        ranges: list[list[int]] = []
        for lo, hi in sorted(touched):
            if ranges and not any(ranges[-1][1] < u <= lo for u in marks):
                ranges[-1][1] = max(ranges[-1][1], hi)
            else:
                ranges.append([lo, hi])
        for _ in range(2):  # loops nest or are disjoint, as in liveness
            for loop_lo, loop_hi in points.loops:
                for r in ranges:
                    inside = r[0] <= loop_hi and r[1] >= loop_lo
                    fresh = any(loop_lo <= u <= max(r[0], loop_lo) for u in marks)
                    if inside and not fresh:
                        r[0], r[1] = min(r[0], loop_lo), max(r[1], loop_hi)
            ranges.sort()
            merged: list[list[int]] = []
            for r in ranges:
                if merged and r[0] <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], r[1])
                else:
                    merged.append(list(r))
            ranges = merged
        out[vid] = tuple((a, b) for a, b in ranges)
    return out
