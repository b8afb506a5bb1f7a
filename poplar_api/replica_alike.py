"""Which elements every replica holds alike, kept from effect to effect and run to run.

A replicated executable's images start alike: every replica's image is zeroed and given
the graph's initial values (``Storage._write_initial``). From then on only a write can
make the replicas' copies of an element differ, so a record that every write passes
through knows, without reading the images, where they are still alike. The record is
kept per *block* of an element space: the elements of one variable or constant (the
space's variable bases cut it), so a tensor is known alike when every block its
elements lie in is.

Every way an element can come to differ clears its block:

* an effect the lowering described (:class:`EffectWrites`: the compute sets' writing
  fields, a copy's destination, a stream copy's destination, the FLOAT all-reduce's
  results) clears every block it writes, unless it is known to write the same bits in
  every replica: a copy whose source blocks are all alike, a compute set of
  :data:`PURE_VERTICES` whose every field lies in alike blocks (each replica computes
  the same function of the same bits), the all-reduce (one float32 sum stored in every
  replica). Such an effect keeps its blocks as they were, and where it writes a whole
  block (a copy's or the all-reduce's destination), makes it alike;
* any effect the lowering did not describe (remote-buffer copies, collectives other
  than the all-reduce, cross-replica copies, ``PrintTensor``, abort, anything new)
  clears every block of every space;
* an effect that raises clears every block it writes (it may have stopped half way);
* a write by the host (``writeTensor``, a host write, anything that writes the images
  through ``Storage`` outside an effect) clears the blocks it reaches; a
  ``writeTensor`` of one value set for every replica then makes the blocks it writes
  whole alike again (:meth:`AlikeRecord.wrote_alike`).

A record is kept only for a replicated executable (one replica's run pays nothing). A
kernel asks :meth:`AlikeRecord.holds` before it reads replica 0's copy of elements for
every replica: the answer holds for the state before the effect being applied, and for
elements the effect does not write unless the caller reads each element before it
writes it (``in_place``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from poplar_api.lowering.runs import read_only

__all__ = ["PURE_VERTICES", "AlikeRecord", "EffectWrites", "compute_set_writes"]

#: Vertex types (name prefixes) that compute their writes from their fields' bits alone,
#: the same in every replica: a compute set of only these, whose fields all lie in
#: alike blocks, writes alike. Kept short on purpose: a type listed here that reads
#: anything else (a seed, a replica's index, the host) would make the record unsound.
PURE_VERTICES = ("popops::ScaledAddSupervisor<", "popops::ScaledAdd2D<",
                 "popops::ScaledSubtractSupervisor<", "popops::ScaledSubtract2D<",
                 "poplar_rt::Transpose", "poplar_rt::SplitTranspose1D<")  # fmt: skip

#: Id arrays whose blocks are kept by :meth:`AlikeRecord.holds`, at most.
KEPT = 1 << 8

#: Element ids of one space: an id array, a ``range`` or slice, or ``(begin, end)`` runs.
Ids = Any


@dataclass(frozen=True)
class EffectWrites:
    """What one effect writes in every replica, as the lowering knows it.

    Attributes
    ----------
    writes
        Made when first needed: ``(element size, ids)`` of every element the effect may
        write (more is safe, less is not).
    reads
        Made when first needed, or None: ``(element size, ids)`` of everything the
        effect reads, for an effect that computes its writes from those bits alone
        (then, when they are all alike, so is everything it writes).
    whole
        Whether the effect writes every element of ``writes`` (a copy's destination),
        so a block it covers is alike after it when it writes alike.
    alike
        Whether the effect always stores the same bits in every replica (the FLOAT
        all-reduce of every replica), whatever it reads.
    """

    writes: Callable[[], list[tuple[int, Ids]]]
    reads: Callable[[], list[tuple[int, Ids]]] | None = None
    whole: bool = False
    alike: bool = False


def compute_set_writes(table: Any) -> EffectWrites:
    """:class:`EffectWrites` of a compute set's table (``ComputeSetTable``): its writing
    fields; its fields read, where every vertex type is one of :data:`PURE_VERTICES`."""
    fields = [ft for g in table.groups for ft in g.fields]
    pure = all(g.vtype.name.startswith(PURE_VERTICES) for g in table.groups)

    def writes() -> list[tuple[int, Ids]]:
        return [(ft.type.size, ft.touched()) for ft in fields if ft.spec.writes]

    def reads() -> list[tuple[int, Ids]]:
        return [(ft.type.size, ft.touched()) for ft in fields]

    return EffectWrites(writes, reads if pure else None)


class _Resolved:
    """An :class:`EffectWrites` as block numbers, per element size."""

    __slots__ = ("_writing", "alike", "full", "reads", "touched", "whole")

    def __init__(self, record: AlikeRecord, w: EffectWrites) -> None:
        self.touched: list[tuple[np.ndarray, np.ndarray]] = []  # (space's flags, blocks)
        self.full: list[tuple[np.ndarray, np.ndarray]] = []
        self.reads: list[tuple[np.ndarray, np.ndarray]] | None = None
        self.whole, self.alike = w.whole, w.alike
        #: blocks arrays asked about by :meth:`writes_any`, by identity: ``(flags,
        #: blocks, answer)``
        self._writing: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}
        for size, ids in w.writes():
            touched, full = record._blocks(size, ids, covered=True)
            self.touched.append((record.flags[size], touched))
            self.full.append((record.flags[size], full))
        if w.reads is not None:
            self.reads = [(record.flags[s], record._blocks(s, ids)[0]) for s, ids in w.reads()]

    def writes_any(self, flags: np.ndarray, blocks: np.ndarray) -> bool:
        """Whether the effect writes any of ``blocks`` of the space whose flags are
        ``flags``. What an effect writes does not change from run to run, nor does a
        blocks array :meth:`AlikeRecord.holds` keeps, so the answer is found once per
        array (kernels ask about the same ids on every run)."""
        key = (id(flags), id(blocks))
        hit = self._writing.get(key)
        if hit is not None and hit[0] is flags and hit[1] is blocks:
            return hit[2]
        answer = any(f is flags and bool(np.isin(blocks, b).any()) for f, b in self.touched)
        if len(self._writing) >= KEPT:
            self._writing.clear()
        self._writing[key] = (flags, blocks, answer)
        return answer


class _Unknown(Exception):
    """Ids the record cannot place (outside the space: a non-replicated view's)."""


class AlikeRecord:
    """Blocks of each element space that every replica holds alike.

    Parameters
    ----------
    spaces
        Element size -> ``(size of the space, variable bases)`` of the replicated
        images: each variable's first id (sorted; the record's blocks run from one base
        to the next).
    """

    def __init__(self, spaces: dict[int, tuple[int, Any]]) -> None:
        #: element size -> sorted block edges (the first 0, the last the space's size)
        self._edges: dict[int, np.ndarray] = {}
        #: element size -> whether every replica holds each block alike
        self.flags: dict[int, np.ndarray] = {}
        for size, (n, bases) in spaces.items():
            edges = np.unique(np.concatenate([[0, n], np.asarray(bases, np.int64)]))
            self._edges[size] = read_only(edges[(edges >= 0) & (edges <= n)])
            self.flags[size] = np.ones(self._edges[size].size - 1, bool)  # loaded alike
        #: whether an effect is being applied (the host's writes clear as they go)
        self.applying = False
        self._effect: _Resolved | None = None
        self._keep = False
        self._dirty = False  # the host wrote while an effect was applied
        self._resolved: dict[int, _Resolved | None] = {}
        self._asked: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}

    # ------------------------------------------------------------- blocks of ids
    def _blocks(self, size: int, ids: Ids, covered: bool = False) -> tuple[np.ndarray, ...]:
        """The blocks the ids reach (sorted) and, with ``covered``, those they cover
        whole; raises :class:`_Unknown` for an id outside the space. The ids as
        ``(begin, end)`` runs (an id array's ascending runs as they come: no sort of
        every id), placed on the blocks by one compiled pass (:func:`_run_blocks`)."""
        edges = self._edges[size]
        if isinstance(ids, slice):
            ids = range(*ids.indices(int(edges[-1])))
        if isinstance(ids, range) and ids.step != 1:
            ids = np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
        if isinstance(ids, range):
            begin = np.array([ids.start], np.int64)
            end = np.array([ids.stop], np.int64)
        elif isinstance(ids, tuple):
            begin = np.asarray(ids[0], np.int64).reshape(-1)
            end = np.asarray(ids[1], np.int64).reshape(-1)
        else:
            begin, end = ascending_runs(ids)
        touched, full, placed = _run_blocks(read_only(begin), read_only(end), edges)
        if not placed:
            raise _Unknown
        return (touched, full) if covered else (touched,)

    # ------------------------------------------------------------ the data plane
    def begin(self, effect: int, writes: EffectWrites | None) -> None:
        """Before effect ``effect`` (described by ``writes``, or not) is applied."""
        resolved = self._resolved.get(effect, False)
        if resolved is False:
            try:
                resolved = None if writes is None else _Resolved(self, writes)
            except (_Unknown, TypeError, ValueError):  # ids it cannot place: as undescribed
                resolved = None
            self._resolved[effect] = resolved
        self._effect = resolved
        self._keep = resolved is not None and (
            resolved.alike
            or (resolved.reads is not None and all(f[b].all() for f, b in resolved.reads))
        )
        self.applying = True

    def end(self, done: bool) -> None:
        """After the effect :meth:`begin` announced; ``done``: it returned (else it
        raised, and may have written any part of what it writes)."""
        self.applying = False
        effect, self._effect = self._effect, None
        if effect is None or self._dirty:  # not described, or the host wrote: nothing known
            self._dirty = False
            for flags in self.flags.values():
                flags[:] = False
            return
        if done and self._keep:  # the same bits in every replica: blocks kept
            if effect.whole or effect.alike:  # and those written whole are alike
                for flags, blocks in effect.full:
                    flags[blocks] = True
            return
        for flags, blocks in effect.touched:
            flags[blocks] = False

    # ---------------------------------------------------------------- the host
    def host_writing(self) -> None:
        """The host is about to write the images (``writeTensor``): in an effect (a
        stream callback that writes a tensor, say) nothing is known after the effect."""
        if self.applying:
            self._dirty = True

    def host_wrote(self, size: int, ids: Ids) -> None:
        """The host wrote elements ``ids`` (in one replica or several): their blocks
        are no longer known alike. (Inside an effect the effect's description holds.)"""
        if self.applying:
            return
        try:
            blocks = self._blocks(size, ids)[0]
        except _Unknown:
            self.flags[size][:] = False
            return
        self.flags[size][blocks] = False

    def wrote_alike(self, size: int, ids: Ids) -> None:
        """The host wrote the same bits into elements ``ids`` of every replica: the
        blocks they cover whole are alike (the others stay as :meth:`host_wrote` left
        them)."""
        try:
            full = self._blocks(size, ids, covered=True)[1]
        except _Unknown:
            return
        self.flags[size][full] = True

    # --------------------------------------------------------------- questions
    def holds(self, size: int, ids: np.ndarray, in_place: bool = False) -> bool:
        """Whether every replica holds the same bits at every element of ``ids`` (an
        id array of the ``size``-byte space, kept by the caller: its blocks are found
        once), before the effect being applied writes anything. Unless ``in_place`` (the
        caller reads each element before the effect writes it), elements the effect
        writes are not alike to it."""
        key = (size, id(ids))
        hit = self._asked.get(key)
        if hit is None or hit[0] is not ids:
            try:
                blocks = self._blocks(size, ids)[0]
            except _Unknown:
                return False
            if len(self._asked) >= KEPT:
                self._asked.clear()
            hit = self._asked[key] = (ids, blocks)
        blocks = hit[1]
        if not blocks.size or not self.flags[size][blocks].all():
            return False
        effect = self._effect
        if in_place or not self.applying:
            return True
        if effect is None:  # an effect that was not described: it may write them
            return False
        return not effect.writes_any(self.flags[size], blocks)


@numba.njit(cache=True, nogil=True)
def _ascending_runs(ids):  # pragma: no cover - compiled
    n = ids.shape[0]
    begin = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    r = 0
    if n:
        begin[0] = ids[0]
        for k in range(1, n):
            if ids[k] != ids[k - 1] + 1:
                end[r] = ids[k - 1] + 1
                r += 1
                begin[r] = ids[k]
        end[r] = ids[n - 1] + 1
        r += 1
    return begin[:r], end[:r]


@numba.njit(cache=True, nogil=True)
def _run_blocks(begin, end, edges):  # pragma: no cover - compiled
    # the runs (any order, overlapping or empty ones allowed) as the elements of each
    # block between the sorted edges that they hold, each element once; counted over
    # the blocks between the lowest and highest id only (a space has thousands)
    m = begin.size
    blocks = edges.size - 1
    none = np.zeros(0, np.int64)
    ordered = True
    low, high, length, last = edges[blocks], edges[0], 0, edges[0]
    for k in range(m):
        s, e = begin[k], end[k]
        if e <= s:
            continue
        if s < edges[0] or e > edges[blocks]:
            return none, none, False
        if s < last:  # (below the last run that holds ids)
            ordered = False
        low, high, length, last = min(low, s), max(high, e), length + e - s, s
    if not length:
        return none, none, True
    first = np.searchsorted(edges, low, side="right") - 1  # the blocks of low and high - 1
    count = np.zeros(np.searchsorted(edges, high - 1, side="right") - first, np.int64)
    if not ordered and high - low <= 4 * length + 4096:
        # the ids marked over their span (no sort): a transposing copy's one-id runs
        held = np.zeros(high - low, np.bool_)
        for k in range(m):
            held[max(begin[k], low) - low : max(end[k], low) - low] = True
        b = first
        for i in range(high - low):
            while edges[b + 1] <= low + i:
                b += 1
            count[b - first] += held[i]
    else:  # joined into sorted, disjoint runs, each placed on the blocks it meets
        order = np.arange(m) if ordered else np.argsort(begin)
        lo, hi = 0, 0  # the joined run being made, [lo, hi)
        for j in range(m + 1):
            if j < m:
                s, e = begin[order[j]], end[order[j]]
                if e <= s:
                    continue
                if hi > lo and s <= hi:  # meets or overlaps the run being made
                    hi = max(hi, e)
                    continue
            if hi > lo:
                b = np.searchsorted(edges, lo, side="right") - 1
                while b < blocks and edges[b] < hi:
                    count[b - first] += min(hi, edges[b + 1]) - max(lo, edges[b])
                    b += 1
            if j < m:
                lo, hi = s, e
    reached = 0
    whole = 0
    for k in range(count.size):
        if count[k]:
            reached += 1
            if count[k] == edges[first + k + 1] - edges[first + k]:
                whole += 1
    touched = np.empty(reached, np.int64)
    full = np.empty(whole, np.int64)
    reached = 0
    whole = 0
    for k in range(count.size):
        if count[k]:
            touched[reached] = first + k
            reached += 1
            if count[k] == edges[first + k + 1] - edges[first + k]:
                full[whole] = first + k
                whole += 1
    return touched, full, True


def ascending_runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(begin, end)`` of the ascending runs of ``ids`` as they come, flattened: each
    run a maximal stretch of ids one apart (int64; in the ids' order, so not sorted and
    possibly overlapping). One compiled pass, where sorting every id would cost
    ``n log n``. Int64 ids only reach the pass (others widened first): a compiled
    signature costs some milliseconds to load in every fresh process, more than
    widening the ids of the few arrays a run asks about (each asked once)."""
    flat = np.asarray(ids).reshape(-1)
    if flat.dtype != np.int64:
        flat = flat.astype(np.int64)
    return _ascending_runs(read_only(flat))


def copy_writes(size: int, pairs: list[tuple[Ids, Ids]]) -> EffectWrites:
    """:class:`EffectWrites` of a copy of ``size``-byte elements: each pair's
    destination and source ids (every destination element written: a copy)."""
    return EffectWrites(
        lambda: [(size, dst) for dst, _ in pairs], lambda: [(size, src) for _, src in pairs], True
    )


#: Destinations asked about by :func:`copy_alike`, by identity: ``(ids, block)``.
_BLOCKS: dict[int, tuple[Any, tuple[int, int] | None]] = {}


def _block(ids: Ids) -> tuple[int, int] | None:
    """``(first, end)`` where ``ids`` are the ids ``first`` to ``end - 1``, each at
    least once, in any order (a transposing copy's destination, say)."""
    hit = _BLOCKS.get(id(ids))
    if hit is not None and hit[0] is ids:
        return hit[1]
    block = None
    if isinstance(ids, slice | range) and ids.step in (None, 1) and ids.start is not None:
        block = (int(ids.start), int(ids.stop))
    elif isinstance(ids, np.ndarray) and ids.size:
        lo, hi = int(ids.min()), int(ids.max()) + 1
        if ids.size >= hi - lo:  # every id from lo to hi - 1 marked (no sort of the ids)
            seen = np.zeros(hi - lo, bool)
            seen[ids.reshape(-1) - lo] = True
            if seen.all():
                block = (lo, hi)
    if len(_BLOCKS) >= KEPT:
        _BLOCKS.clear()
    _BLOCKS[id(ids)] = (ids, block)
    return block


def copy_alike(
    record: AlikeRecord | None, views: Any, full: np.ndarray, size: int, src: Any, dst: Any
) -> bool:
    """Copy ``src`` to ``dst`` in every replica's row of ``full`` as replica 0's copy
    (by ``views``, an ``AffineCopy``, where it has a compiled pass; by the ids where
    there is none) and its destination block repeated in every other row, where every
    replica holds the source alike (then each replica's copy gives replica 0's bits)
    and the destination's ids are every id of one block (so the block is what the copy
    writes); whether it did (else nothing is written)."""
    block = _block(dst) if record is not None else None
    if block is None or (views is not None and not views.compiled):
        return False
    if not record.holds(size, src):
        return False
    if views is not None:
        views.copy_rows(full[:1])
    else:  # (numpy reads the source first where the two overlap)
        row = full[0]
        row[dst] = row[src]
    full[1:, block[0] : block[1]] = full[0, block[0] : block[1]]
    return True
