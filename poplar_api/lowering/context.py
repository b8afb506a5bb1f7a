"""What lowering produces besides the IR: device memory, effects and predicates.

The Engine's data plane applies effect ``k`` by calling ``effects[k]()`` and answers
predicate ``p`` with ``predicates[p]()``; both close over :class:`Storage`.

Replicated graphs
-----------------
A graph of ``r`` replicas is lowered once, for replica 0, and its device memory holds
one image per replica (:attr:`Storage.full`: one ``[r, size]`` array per element
size; replica ``k``'s image is row ``k``). Ordinary effects and predicates read and
write :attr:`Storage.arrays`, the image of the *current* replica: the data plane runs
each of them once per replica after :meth:`Storage.select` (with one replica the
image is simply row 0, so single-replica code runs unchanged). Effects registered
with :meth:`Lowered.global_effect` (collectives, cross-replica copies, copies of
non-replicated views) run once and reach every image through
:meth:`Storage.read_replicas`, :meth:`Storage.write_replica` and the non-replicated
(``wide``) element ids of :func:`wide_ids`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ipusim.host_heap import populate_for_writing
from poplar_api.lowering.runs import INT32_MAX, put_ranges, put_rows, rows_apart, take_rows
from poplar_api.replica_alike import AlikeRecord, EffectWrites
from poplar_api.replica_constants import ConstantsAlike
from poplar_api.replica_equal import DeclaredAlike
from poplar_api.types import Type

#: The raw storage dtype of each element size: the bits of every type of that size.
RAW_DTYPES: dict[int, np.dtype] = {
    4: np.dtype(np.uint32),
    2: np.dtype(np.uint16),
    1: np.dtype(np.uint8),
}


#: Element ids of a non-replicated view (``Graph.getNonReplicatedTensor``) encode the
#: replica: ``replica * WIDE_STRIDE + id``; no id space comes near this size.
WIDE_STRIDE = 1 << 40


def wide_ids(local: np.ndarray, replicas: np.ndarray | int) -> np.ndarray:
    """Non-replicated ("wide") ids of elements ``local`` of replica(s) ``replicas``."""
    return np.asarray(replicas, np.int64) * WIDE_STRIDE + np.asarray(local, np.int64)


def split_wide(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(replica, local id)`` of each wide element id."""
    ids = np.asarray(ids, np.int64)
    return ids // WIDE_STRIDE, ids % WIDE_STRIDE


class Storage:
    """Device memory image: the raw bits of one flat array per element size, per replica.

    Element types of one size share an id space (see :mod:`poplar_api.graph`), so a
    tensor and its ``reinterpret`` views address the same bits. Reads return a numpy
    ``view`` of the bits as the accessing type, writes store the bits of the values
    converted to that type: reinterpreting is bit-exact, as ``ndarray.view``. A BOOL
    read gives True for any non-zero byte.

    Parameters
    ----------
    state
        The graph state (its element spaces and initial values).
    replicas
        Replicas of the graph; each gets its own image, initialised alike.

    Notes
    -----
    :meth:`read` and :meth:`write` address the current replica's image
    (:meth:`select`); the ``*_replica*`` and ``*_wide`` methods address any replica.
    """

    def __init__(self, state: Any, replicas: int = 1) -> None:
        self.replicas = int(replicas)
        #: element size -> ``[replicas, size]`` raw bits; row ``k`` is replica ``k``'s image
        self.full: dict[int, np.ndarray] = {
            size: np.zeros((self.replicas, sp.size), RAW_DTYPES[size])
            for size, sp in state.spaces.items()
        }
        #: per replica: element size -> that replica's row of :attr:`full` (a view)
        self.images: list[dict[int, np.ndarray]] = [
            {size: arr[k] for size, arr in self.full.items()} for k in range(self.replicas)
        ]
        #: the replica :meth:`read` and :meth:`write` address
        self.replica = 0
        #: with several replicas, the constants every replica holds alike for good
        self.constants = ConstantsAlike(state) if self.replicas > 1 else None
        #: what the last effect applied stored alike in every replica
        self.declared = DeclaredAlike()
        self.arrays: dict[int, np.ndarray] = self.images[0]
        self._readonly: dict[tuple[int, Type], np.ndarray] = {}
        self.alike: AlikeRecord | None = None
        self._write_initial(state.initial_parts)  # (the same values in every image)
        if self.replicas > 1:  # the blocks every replica holds alike, effect to effect
            spaces = state.spaces.items()  # (a space without variables: one block)
            self.alike = AlikeRecord({s: (p.size, getattr(p, "var_bases", ())) for s, p in spaces})

    def _write_initial(self, parts: list[tuple[Type, Any, Any]]) -> None:
        """Write the graph's initial values into every image, in order.

        A graph may have tens of thousands of small constants: the parts of one
        element size are written together (one scatter) when each is a flat array of
        its type's dtype, one value per element, and no element is written twice;
        otherwise part by part, in order (a later value wins).
        """
        by_size: dict[int, list[tuple[Type, Any, Any]]] = {}
        for part in parts:
            by_size.setdefault(part[0].size, []).append(part)
        for size, group in by_size.items():
            if len(group) < 2 or not self._write_together(size, group):
                for t, ids, values in group:
                    self.write_replicas(t, ids, values)

    def _write_together(self, size: int, group: list[tuple[Type, Any, Any]]) -> bool:
        """Write ``group`` (parts of elements of ``size`` bytes) in one scatter, if it
        can be done without changing the result; whether it was."""
        begins, lengths, raws = [], [], []
        blocks = True  # every part a block of consecutive ids
        for t, ids, values in group:
            plain = type(values) is np.ndarray and values.dtype == t.numpy and values.ndim == 1
            if not plain or values.size != len(ids):
                return False
            blocks = blocks and type(ids) is range and ids.step == 1
            if blocks:
                begins.append(ids.start)
                lengths.append(len(ids))
            raws.append(values.view(RAW_DTYPES[size]))
        if blocks:
            index = _expand(begins, lengths)
        else:  # the parts' ids in turn (an int64 array as it is, no copy; a range made
            # by arange, not element by element: a CNN's constants are 570 k ids of ranges)
            index = np.concatenate(
                [
                    ids
                    if type(ids) is np.ndarray
                    else np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
                    if type(ids) is range
                    else np.asarray(ids, np.int64).reshape(-1)
                    for _, ids, _ in group
                ],
                axis=None,
                dtype=np.int64,
                casting="same_kind",
            )
        full = self.full[size]
        if blocks:  # blocks overlap where one starts before the last one ends, sorted
            if _blocks_overlap(begins, lengths):
                return False  # an element written twice: part by part, the last value wins
        else:
            written = np.zeros(full.shape[1], bool)
            written[index] = True
            if np.count_nonzero(written) != index.size:
                return False
        full[:, index] = np.concatenate(raws)
        return True

    def load(self) -> None:
        """Write every element of every image once, as loading an executable writes the
        whole of tile memory (values are unchanged), so that a run's first writes of
        an element cost the host no page fault. The pages are populated for writing
        (:func:`~ipusim.host_heap.populate_for_writing`: one fault per page, where
        writing the values back takes two on a page never written, the zero page's
        and its copy's), else every element is written back."""
        for arr in self.full.values():
            if not populate_for_writing(arr):
                np.bitwise_or(arr, 0, out=arr)

    def select(self, replica: int) -> None:
        """Make ``replica``'s image the one :meth:`read` and :meth:`write` address."""
        self.replica = replica
        self.arrays = self.images[replica]

    def read(self, t: Type, ids: np.ndarray | slice) -> np.ndarray:
        """Values of elements ``ids`` (ids or a slice of them) as type ``t`` (a new
        array of ``t.numpy``)."""
        raw = self.arrays[t.size][ids]
        if isinstance(ids, slice):
            raw = raw.copy()
        if t.numpy.kind == "b":
            return raw != 0
        return raw.view(t.numpy)

    def view(self, t: Type, block: slice) -> np.ndarray | None:
        """Elements ``block`` as a view of type ``t`` of the selected image (None for
        BOOL, whose values are not its raw bytes)."""
        if t.numpy.kind == "b":
            return None
        return self.arrays[t.size][block].view(t.numpy)

    def readonly(self, t: Type) -> np.ndarray | None:
        """The selected image as a read-only view of type ``t`` (None for BOOL); made
        once per replica and type, as the images are never reallocated."""
        key = (self.replica, t)
        image = self._readonly.get(key)
        if image is None:
            image = self.view(t, slice(None))
            if image is None:
                return None
            image.flags.writeable = False
            self._readonly[key] = image
        return image

    def write(self, t: Type, ids: np.ndarray | slice, values: np.ndarray) -> None:
        """Store ``values`` (converted to ``t``) into elements ``ids`` (ids or a slice)."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, ids)
        if type(values) is np.ndarray and values.dtype == t.numpy and values.ndim == 1:
            self.arrays[t.size][ids] = values.view(RAW_DTYPES[t.size])  # the bits as they are
            return
        self.arrays[t.size][ids] = _raw(t, values).reshape(-1)

    def write_runs(self, t: Type, begin: np.ndarray, end: np.ndarray, values: np.ndarray) -> None:
        """:meth:`write` of the elements of the runs ``[begin[k], end[k])``, run after run
        (their ids are never made; not BOOL, whose bits are not its values)."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, (begin, end))
        if type(values) is np.ndarray and values.dtype == t.numpy and values.ndim == 1:
            raw = values.view(RAW_DTYPES[t.size])  # the bits as they are
        else:
            raw = _raw(t, values).reshape(-1)
        put_ranges(self.arrays[t.size], begin, end, raw)

    def copy(self, t: Type, dst: np.ndarray | slice, src: np.ndarray | slice) -> None:
        """Copy elements ``src`` to elements ``dst`` (ids or slices) as type ``t``:
        ``write(t, dst, read(t, src))``, moving the raw bits directly where that is the
        same (every type but BOOL, whose read makes any non-zero byte True)."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, dst)
        if t.numpy.kind == "b":
            self.write(t, dst, self.read(t, src))
            return
        image = self.arrays[t.size]
        image[dst] = image[src]  # numpy copies first where the two overlap

    # ------------------------------------------------------------ every replica
    def read_replica(self, replica: int, t: Type, ids: np.ndarray) -> np.ndarray:
        """Values of elements ``ids`` of replica ``replica`` as type ``t``."""
        return _typed(t, self.images[replica][t.size][ids])

    def write_replica(self, replica: int, t: Type, ids: np.ndarray, values: np.ndarray) -> None:
        """Store ``values`` into elements ``ids`` of replica ``replica``."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, ids)
        self.images[replica][t.size][ids] = _raw(t, values).reshape(-1)

    def read_replicas(self, t: Type, ids: np.ndarray | slice) -> np.ndarray:
        """Values of elements ``ids`` in every replica: ``[replicas, len(ids)]``, each
        replica's row contiguous (numpy's ``full[:, ids]`` lays an index's result out
        element after element, so a sum over the replicas would add within each
        element's 16 bytes, and in numpy's pairwise order rather than replica after
        replica as it does for a slice)."""
        full = self.full[t.size]
        if isinstance(ids, slice):
            return _typed(t, full[:, ids])
        raw = np.empty((full.shape[0], np.size(ids)), full.dtype)
        take_rows(full, _gather_ids(ids, full.shape[1]), raw)
        return _typed(t, raw)

    def write_replicas(self, t: Type, ids: np.ndarray | range, values: np.ndarray) -> None:
        """Store ``values`` into elements ``ids`` of every replica: ``values`` is
        ``[replicas, len(ids)]``, or ``len(ids)`` values written to each replica."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, ids)
        if type(ids) is range and ids.step == 1:  # a block: written as a slice
            n, index = len(ids), slice(ids.start, ids.stop)
        else:
            index = np.asarray(ids).reshape(-1)
            if index.dtype.kind not in "iu":
                index = index.astype(np.int64)
            n = index.size
        raw = _raw(t, values)
        full = self.full[t.size]
        if raw.size == n * self.replicas and not isinstance(index, slice):  # compiled
            if index.flags.writeable:  # (read-only ids, int32 or int64 as they come: a
                index = index.view()  # conversion per call cost what the pass saves)
                index.flags.writeable = False
            put_rows(full, index, raw.reshape(self.replicas, n))
            if self.alike is not None and not self.alike.applying:  # every row the same?
                rows = raw.reshape(self.replicas, n)
                if (rows == rows[:1]).all():
                    self.alike.wrote_alike(t.size, ids)
            return
        alike = raw.size == n
        if alike:
            raw = np.broadcast_to(raw.reshape(1, -1), (self.replicas, n))
        raw = raw.reshape(self.replicas, n)
        if rows_apart(index):
            for row, values_of_row in zip(full, raw, strict=True):
                row[index] = values_of_row
        else:
            full[:, index] = raw
        if self.alike is not None and not self.alike.applying and (alike or (raw == raw[:1]).all()):
            self.alike.wrote_alike(t.size, ids)  # the host's values, the same in every replica

    def write_rows(self, t: Type, ids: np.ndarray | slice, values: np.ndarray) -> None:
        """:meth:`write_replica` of row ``k`` of ``values`` (``[replicas, n]``, rows of
        any stride) into replica ``k``, for every replica: one assignment for a slice
        of values of ``t``'s dtype, else row by row."""
        if self.alike is not None:
            self.alike.host_wrote(t.size, ids)
        if isinstance(ids, slice) and values.dtype == t.numpy and values.ndim == 2:
            self.full[t.size][:, ids] = values.view(RAW_DTYPES[t.size])  # the bits as they are
            return
        for k in range(self.replicas):
            self.write_replica(k, t, ids, values[k])

    def read_wide(self, t: Type, ids: np.ndarray) -> np.ndarray:
        """Values of non-replicated (wide) element ids, any replica each."""
        replica, local = split_wide(ids)
        return _typed(t, self.full[t.size][replica, local])

    def write_wide(self, t: Type, ids: np.ndarray, values: np.ndarray) -> None:
        """Store ``values`` into non-replicated (wide) element ids."""
        replica, local = split_wide(np.asarray(ids).reshape(-1))
        if self.alike is not None:
            self.alike.host_wrote(t.size, local)
        self.full[t.size][replica, local] = _raw(t, values).reshape(-1)


def _blocks_overlap(begins: list[int], lengths: list[int]) -> bool:
    """Whether two of the blocks ``[begin, begin + length)`` share an id: found from the
    non-empty blocks sorted by their starts (the graph's initial values of one element
    size are a few blocks, where a map of the element space's ids to mark them took
    6 ms of ``bench_conv``'s 19 million FLOAT elements)."""
    begin = np.asarray(begins, np.int64)
    length = np.asarray(lengths, np.int64)
    held = length > 0
    begin, end = begin[held], begin[held] + length[held]
    order = np.argsort(begin, kind="stable")
    return bool((begin[order][1:] < end[order][:-1]).any())


def _expand(begins: list[int], lengths: list[int]) -> np.ndarray:
    """The ids of runs ``[begin, begin + length)``, run after run (int64)."""
    length = np.asarray(lengths, np.int64)
    starts = np.cumsum(length) - length
    total = int(length.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(
        starts - np.asarray(begins, np.int64), length
    )


def _gather_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """``ids`` as the runner's compiled gathers take them (read-only, int32 where the
    image allows: one compiled signature, loaded once per process)."""
    ix = np.asarray(ids).reshape(-1)
    want = np.int32 if size <= INT32_MAX else np.int64
    if ix.dtype != want:
        ix = ix.astype(want)
    elif ix.flags.writeable:
        ix = ix.view()
    ix.flags.writeable = False
    return ix


def _typed(t: Type, raw: np.ndarray) -> np.ndarray:
    """Raw bits as values of ``t`` (BOOL: any non-zero byte is True)."""
    if t.numpy.kind == "b":
        return raw != 0
    return raw.view(t.numpy)


def _raw(t: Type, values: Any) -> np.ndarray:
    """The raw bits of ``values`` converted to ``t`` (same shape, contiguous)."""
    values = np.asarray(values)
    if values.dtype == t.numpy:
        return np.ascontiguousarray(values).view(RAW_DTYPES[t.size])
    # Narrowing (e.g. float32 kernel results to HALF) rounds, and overflows to inf as
    # the hardware does; that is expected, not worth a warning.
    with np.errstate(over="ignore"):
        typed = np.ascontiguousarray(values.astype(t.numpy))
    return typed.view(RAW_DTYPES[t.size])


#: How a predicate's per-replica values combine: ``equal`` (control flow: every
#: replica must agree) or ``all`` (true only when true in every replica, e.g. whether
#: the host has every replica's next stream data ready).
Combine = Literal["equal", "all"]


@dataclass
class Lowered:
    """Effects and predicates registered while lowering (closures over storage).

    ``global_effects`` are the effects that run once for all replicas (they address
    every replica's image themselves); every other effect runs once per replica,
    unless its entry of ``every_replica`` (a function doing what the effect does in
    each replica in turn, with none selected) says it has. ``combine`` says how a
    predicate's per-replica values combine (default ``equal``).
    """

    storage: Storage
    effects: list[Callable[[], None]] = field(default_factory=list)
    predicates: list[Callable[[], int]] = field(default_factory=list)
    global_effects: set[int] = field(default_factory=set)
    combine: dict[int, Combine] = field(default_factory=dict)
    every_replica: dict[int, Callable[[], bool]] = field(default_factory=dict)
    #: with several replicas, what each effect writes (:mod:`poplar_api.replica_alike`)
    writes: dict[int, EffectWrites] = field(default_factory=dict)

    def describe(self, effect: int, writes: EffectWrites) -> int:
        """Say what effect ``effect`` writes, for the record of what every replica holds
        alike (kept only with several replicas; an effect not described clears it)."""
        if self.storage.replicas > 1:
            self.writes[effect] = writes
        return effect

    def effect(
        self, fn: Callable[[], None], every_replica: Callable[[], bool] | None = None
    ) -> int:
        """Register an effect run once per replica (on the selected replica's image).

        With several replicas, ``every_replica`` (when given) is called first: it
        applies the effect to replica 0, 1, ... in turn and returns True, or does
        nothing and returns False (the effect then runs once per replica as usual)."""
        self.effects.append(fn)
        k = len(self.effects) - 1
        if every_replica is not None and self.storage.replicas > 1:
            self.every_replica[k] = every_replica
        return k

    def global_effect(self, fn: Callable[[], None]) -> int:
        """Register an effect run once for every replica together (collectives,
        cross-replica copies)."""
        k = self.effect(fn)
        self.global_effects.add(k)
        return k

    def predicate(self, fn: Callable[[], int], combine: Combine = "equal") -> int:
        """Register a predicate; with several replicas it is asked in each and the
        answers combine as ``combine`` says."""
        self.predicates.append(fn)
        k = len(self.predicates) - 1
        if combine != "equal":
            self.combine[k] = combine
        return k
