"""Lowering of the programs that reach across replicas or IPUs.

* :class:`~poplar_api.gcl.GclCollective` (the GCL functions): one IR ``Collective``
  step. Across replicas, each replica group and each IPU ``j`` of a replica that
  holds some of the data forms a ring of the IPUs ``j`` of the group's replicas
  (machine-wide ids: replica ``k``'s IPU ``j`` is ``k·m + j`` for replicas of ``m``
  IPUs); ``num_bytes`` is what each member holds on that IPU (the gathered size for an
  all-gather), ``max_tile_bytes`` the most one tile of it holds and ``member_tiles``
  how many tiles hold some of it (one message each per ring step). Within a replica,
  the IPUs of the data's rows form the ring in every replica. Each ring is laid
  along the links (``ipusim.exchange.collectives.ring_order``: the members' order
  when each is a neighbour of the next, else a tour over the links). The
  values come from one effect: a global one (every replica's image at once) across
  replicas, an ordinary one (run per replica) within a replica. A collective whose
  groups have one member moves nothing: its effect rides on an internal sync.
* ``CrossReplicaCopy``: an external sync and a ``GlobalExchange`` with
  ``replicated=False`` (machine-wide tile ids: replica ``k``'s tile ``t`` is
  ``k·T + t``), one transfer per (source tile, destination tile) pair.
* :class:`~poplar_api.program.NonReplicatedCopy` (copies of
  ``getNonReplicatedTensor`` views): with a stream, a host sync, a ``StreamCopy`` and
  its on-chip exchange (replicated steps costed with the most bytes any replica
  moves per tile); between views, a ``GlobalExchange`` (``replicated=False``) for the
  elements that change replica and an exchange of the busiest replica for those that
  stay. Its effect is global.

Problems are appended to the em's list, as everywhere in lowering.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ipusim import ir
from ipusim.exchange.collectives import ring_order
from ipusim.exchange.topology import topology_of
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.gcl import CollectiveOperator, GclCollective, collective_values
from poplar_api.graph import DataStream, is_nonreplicated, replication_factor
from poplar_api.lowering import runs
from poplar_api.lowering.context import split_wide
from poplar_api.lowering.emission import Emission, stream_exchange, with_effect
from poplar_api.lowering.exchange import ExchangePlanner
from poplar_api.replica_alike import EffectWrites
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT

#: The IR op of each GCL collective kind.
IR_OPS = {
    "all_reduce": "all_reduce",
    "reduce_scatter": "reduce_scatter",
    "all_gather": "all_gather",
    "broadcast": "broadcast",
}


def _layout(em: Emission) -> tuple[int, int, int]:
    """``(tiles per IPU, IPUs per replica, tiles per replica)`` of the em's target."""
    target = em.state.target
    tpi = int(target.getTilesPerIPU())
    tiles = int(target.getNumTiles())
    return tpi, max(1, tiles // tpi), tiles


def _constant_of_ids(em: Emission, t: Tensor, ids: np.ndarray) -> str | None:
    """Name of a constant among elements ``ids`` (local ids) of ``t``'s type, or None."""
    if ids.size == 0:
        return None
    for vid in em.variables.mark([(t.elementType(), ids)]).tolist():
        if em.state.variables[vid].constant:
            return em.state.variables[vid].name
    return None


def _unlike_problems(where: str, src: Tensor, dst: Tensor) -> list[str]:
    """The problem of a copy from ``src`` to ``dst`` (whole tensors, whether replicated
    or non-replicated views) whose element types or element counts differ, else none."""
    if src.elementType() == dst.elementType() and src.numElements() == dst.numElements():
        return []
    return [
        f"{where}: source ({src.elementType()}, shape {src.shape()}) and destination "
        f"({dst.elementType()}, shape {dst.shape()}) must have the same element type and "
        "number of elements"
    ]


# ---------------------------------------------------------------------- collectives
def lower_collective(em: Emission, prog: GclCollective) -> ir.Node:
    """IR of a GCL collective (see the module docstring)."""
    state = em.state
    pid = em.pid(prog)
    what = f"{prog.debugName or prog.kind} #{pid}"
    problems: list[str] = []
    for t in (*prog.inputs, *prog.outputs):
        if not isinstance(t, Tensor) or t.graph is not state:
            problems.append(f"{what}: tensor {t!r} is not a tensor of the engine's graph")
    if not problems:
        for t in prog.outputs:
            const = em.constant_of(t)
            if const is not None:
                problems.append(
                    f"{what}: the result '{t.name}' is (part of) constant '{const}'; constants "
                    "cannot be written; hint: reduce into a variable"
                )
    replicas = replication_factor(state)
    groups: list[list[int]] = [[0]]
    if prog.crossReplica and not problems:
        try:
            groups = prog.group.groups(replicas, what)
        except Exception as exc:  # a group that no longer fits the graph
            problems.append(str(exc))
    if problems:
        em.problems += problems
        return ir.Sequence()
    typ = prog.inputs[0].elementType()
    storage = em.lowered.storage
    pairs = [
        (t.flat_index(), o.flat_index()) for t, o in zip(prog.inputs, prog.outputs, strict=True)
    ]
    kind, op, root = prog.kind, prog.op, prog.root
    if prog.crossReplica:
        # a tensor's consecutive elements are read and written as blocks (slices)
        blocks = [(runs.as_index(src), runs.as_index(dst)) for src, dst in pairs]
        everyone = groups == [list(range(replicas))]  # one group, every replica in order
        if everyone and FUSED_SUMS and kind == "all_reduce" and typ == FLOAT and op in SUMS:
            effect = em.lowered.global_effect(_fused_sum(storage, blocks, op))
            # (one float32 sum stored in every replica: what it writes is alike)
            writes = EffectWrites(lambda: [(FLOAT.size, d) for _, d in blocks], alike=True)
            em.lowered.describe(effect, writes)
            step = _cross_step(em, prog, groups, effect, pid)
            return em.touch(step, *prog.inputs, *prog.outputs)

        def run() -> None:
            # copies, as an output may be another pair's input (read through an index,
            # the values are a new array already)
            values = [
                np.array(storage.read_replicas(typ, src))
                if isinstance(src, slice)
                else storage.read_replicas(typ, src)
                for src, _ in blocks
            ]
            for (_, dst), vals in zip(blocks, values, strict=True):
                for group in groups:
                    outs = collective_values(kind, op, vals if everyone else vals[group], root)
                    if everyone and all(out is outs[0] for out in outs):
                        # the same values for every replica: converted and stored once
                        storage.write_replicas(typ, _ids(dst), outs[0])
                        continue
                    for member, out in zip(group, outs, strict=True):
                        storage.write_replica(member, typ, dst, out)

        effect = em.lowered.global_effect(run)
        step = _cross_step(em, prog, groups, effect, pid)
    else:
        rows = [t.dim(0) for t in prog.inputs]

        def run_within() -> None:
            values = [storage.read(typ, src) for src, _ in pairs]
            for (_, dst), vals, n in zip(pairs, values, rows, strict=True):
                outs = collective_values(kind, op, vals.reshape(n, -1), root)
                storage.write(typ, dst, np.concatenate(outs) if outs else vals[:0])

        effect = em.lowered.effect(run_within)
        step = _within_step(em, prog, effect, pid)
    return em.touch(step, *prog.inputs, *prog.outputs)


#: Whether a FLOAT sum or mean of every replica runs as the compiled passes of
#: :func:`_fused_sum` (a switch for tests comparing it with the general path).
FUSED_SUMS = True
SUMS = (CollectiveOperator.ADD, CollectiveOperator.MEAN)


def _fused_sum(storage: Any, blocks: list[tuple[Any, Any]], op: CollectiveOperator) -> Any:
    """The effect of a FLOAT all-reduce ``op`` (ADD or MEAN) of every replica, each pair
    of ``blocks`` (source and destination: slices or ids) in two compiled passes: the
    float64 sum of the replicas' elements member after member (what
    :func:`~poplar_api.gcl.reduce_values` adds; MEAN then divides by the replicas), and
    the float32 rounding of each sum written to every replica. Every pair is summed
    before any is written, as an output may be another pair's input. An in-place
    all-reduce (each pair's destination its source, element for element) is one pass
    over the runs of its distinct elements (:func:`_in_place_runs`,
    :func:`_sum_runs_in_place`): the same sums, read and stored as slices."""
    ids = [(_id_array(src), _id_array(dst)) for src, dst in blocks]
    mean = op is CollectiveOperator.MEAN
    in_place = _in_place_runs(ids)
    if in_place is not None:
        starts, ends = in_place

        def run_in_place() -> None:
            full = storage.full[FLOAT.size]
            _sum_runs_in_place(full.view(np.float32), starts, ends, mean)
            storage.declared.declare(full, starts, ends)  # one float32 sum in every row

        return run_in_place

    def run() -> None:
        full = storage.full[FLOAT.size].view(np.float32)
        totals = [_replica_sum(full, src, mean) for src, _ in ids]
        for (_, dst), total in zip(ids, totals, strict=True):
            _store_every_replica(full, dst, total)

    return run


def _in_place_runs(
    ids: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where every pair's destination is its source element for element (an in-place
    all-reduce): the distinct ids of all pairs, sorted, as runs of consecutive ids
    (first ids and ends); else None.

    Each element's result is then the sum of that same element over the replicas, so
    the elements can be summed and stored in any order, each once: an element named
    twice gets the one sum of the values before the collective either way (the
    general pass sums every pair before it writes any)."""
    if not ids or not all(np.array_equal(src, dst) for src, dst in ids):
        return None
    every = np.unique(np.concatenate([src for src, _ in ids]))
    if not every.size:
        return None
    cut = np.flatnonzero(np.diff(every) != 1) + 1
    starts = every[np.concatenate(([0], cut))]
    ends = every[np.concatenate((cut - 1, [every.size - 1]))] + 1
    return starts.astype(np.int64), ends.astype(np.int64)


#: Elements summed and stored together by :func:`_sum_runs_in_place` (every replica's
#: rows of a chunk stay in the first-level cache between the sum and the stores).
CHUNK = 512


@numba.njit(cache=True, nogil=True)
def _sum_runs_in_place(full, starts, ends, mean):  # pragma: no cover - compiled
    """:func:`_replica_sum` and :func:`_store_every_replica` of the elements of runs
    ``starts[j]`` to ``ends[j]`` of every row of ``full``, a chunk of
    :data:`CHUNK` consecutive elements at a time: each element's float64 sum of the
    rows in order (divided by the rows when ``mean``), rounded to float32 and stored
    in every row."""
    rows = full.shape[0]
    k = np.float64(rows)
    total = np.empty(CHUNK, np.float64)
    for j in range(starts.size):
        for lo in range(starts[j], ends[j], CHUNK):
            n = min(CHUNK, ends[j] - lo)
            chunk = total[:n]
            row = full[0, lo : lo + n]  # (slices: the loops vectorize)
            for i in range(n):
                chunk[i] = np.float64(row[i])
            for r in range(1, rows):
                row = full[r, lo : lo + n]
                for i in range(n):
                    chunk[i] += np.float64(row[i])
            if mean:
                for i in range(n):
                    chunk[i] = chunk[i] / k
            for r in range(rows):
                row = full[r, lo : lo + n]
                for i in range(n):
                    row[i] = np.float32(chunk[i])


def _id_array(index: np.ndarray | slice) -> np.ndarray:
    """Element ids of ``index`` (a slice of consecutive ids, or ids) as int64, read-only
    and C-contiguous (:func:`runs.read_only`) whether they were a tensor's read-only
    index or a new array: one type of ids for :func:`_replica_sum` and
    :func:`_store_every_replica` (a writable array is another compile of each)."""
    if isinstance(index, slice):
        return runs.read_only(np.arange(index.start, index.stop, dtype=np.int64))
    return runs.read_only(np.asarray(index, dtype=np.int64).reshape(-1))


@numba.njit(cache=True, nogil=True)
def _replica_sum(full, ids, mean):  # pragma: no cover - compiled
    """Float64 sum of elements ``ids`` of every row (replica) of ``full``, row after
    row (each value widened exactly), divided by the rows when ``mean``."""
    total = np.empty(ids.size, np.float64)
    row = full[0]
    for i in range(ids.size):
        total[i] = np.float64(row[ids[i]])
    for r in range(1, full.shape[0]):
        row = full[r]
        for i in range(ids.size):
            total[i] += np.float64(row[ids[i]])
    if mean:
        k = np.float64(full.shape[0])
        for i in range(ids.size):
            total[i] = total[i] / k
    return total


@numba.njit(cache=True, nogil=True)
def _store_every_replica(full, ids, total):  # pragma: no cover - compiled
    """Write ``total`` rounded to float32 (to nearest, overflowing to inf) into elements
    ``ids`` of every row of ``full``, in order."""
    values = np.empty(ids.size, np.float32)
    for i in range(ids.size):
        values[i] = np.float32(total[i])
    for r in range(full.shape[0]):
        row = full[r]
        for i in range(ids.size):
            row[ids[i]] = values[i]


def _ids(index: np.ndarray | slice) -> np.ndarray | range:
    """Element ids of ``index`` as ``Storage.write_replicas`` takes them."""
    return range(index.start, index.stop) if isinstance(index, slice) else index


def _trivial(em: Emission, prog: GclCollective, effect: int, pid: int) -> ir.Node:
    """A collective that moves nothing (groups of one): its effect on an internal sync."""
    name = f"{prog.debugName}/Local"
    return ir.Sequence([ir.Sync(name=name, effect=effect, program_id=pid)], name=prog.debugName)


def _cross_step(
    em: Emission, prog: GclCollective, groups: list[list[int]], effect: int, pid: int
) -> ir.Node:
    tpi, m, replica_tiles = _layout(em)
    size = prog.inputs[0].elementType().size
    tiles = np.concatenate([em.tiles(t) for t in prog.inputs])
    per_tile = np.bincount(tiles, minlength=replica_tiles)[:replica_tiles] * size
    per_ipu = per_tile.reshape(m, tpi).sum(axis=1)
    tile_max = per_tile.reshape(m, tpi).max(axis=1)
    held = np.count_nonzero(per_tile.reshape(m, tpi), axis=1)
    ring_groups, num_bytes, max_tile, member_tiles = [], [], [], []
    topology = topology_of(em.state.device_target.config)
    for group in groups:
        factor = len(group) if prog.kind == "all_gather" else 1
        for j in np.flatnonzero(per_ipu).tolist():
            # the ring laid along the links, as a collective library lays it
            ring_groups.append(ring_order(topology, [k * m + j for k in group]))
            num_bytes.append(int(per_ipu[j]) * factor)
            max_tile.append(int(tile_max[j]) * factor)
            member_tiles.append(int(held[j]))
    if not ring_groups or max(len(g) for g in groups) == 1:
        return _trivial(em, prog, effect, pid)
    return ir.Collective(
        name=prog.debugName,
        effect=effect,
        program_id=pid,
        op=IR_OPS[prog.kind],
        groups=tuple(ring_groups),
        num_bytes=tuple(num_bytes),
        max_tile_bytes=tuple(max_tile),
        member_tiles=tuple(member_tiles),
        element_bytes=size,
        algorithm=prog.algorithm,
        root=prog.root,
    )


def _within_step(em: Emission, prog: GclCollective, effect: int, pid: int) -> ir.Node:
    tpi, m, _ = _layout(em)
    replicas = replication_factor(em.state)
    size = prog.inputs[0].elementType().size
    first = prog.inputs[0]
    rows = first.dim(0)
    ipus = [int(em.tiles(first[i])[0] // tpi) for i in range(rows)] if rows else []
    member_bytes = 0
    tile_bytes = 0
    factor = rows if prog.kind == "all_gather" else 1
    for t in prog.inputs:
        n = t.numElements() // max(rows, 1)
        member_bytes += n * size * factor
        counts = np.bincount(em.tiles(t))
        tile_bytes = max(tile_bytes, int(counts.max(initial=0)) * size * factor)
    if rows <= 1 or member_bytes == 0:
        return _trivial(em, prog, effect, pid)
    # the tiles holding each member's row, over all the tensors
    held = max(
        np.unique(np.concatenate([em.tiles(t[i]) for t in prog.inputs])).size for i in range(rows)
    )
    topology = topology_of(em.state.device_target.config)
    ring_groups = tuple(ring_order(topology, [k * m + i for i in ipus]) for k in range(replicas))
    return ir.Collective(
        name=prog.debugName,
        effect=effect,
        program_id=pid,
        op=IR_OPS[prog.kind],
        groups=ring_groups,
        num_bytes=(member_bytes,) * replicas,
        max_tile_bytes=(tile_bytes,) * replicas,
        member_tiles=(max(int(held), 1),) * replicas,
        element_bytes=size,
        algorithm=prog.algorithm,
        root=prog.root,
    )


# ------------------------------------------------------------ CrossReplicaCopy
def lower_cross_replica_copy(em: Emission, prog: P.CrossReplicaCopy) -> ir.Node:
    """IR of ``CrossReplicaCopy(src, dst, replicaMap)`` (see the module docstring)."""
    state = em.state
    pid = em.pid(prog)
    replicas = replication_factor(state)
    where = (
        f"CrossReplicaCopy #{pid} from '{prog.src.name}' to '{prog.dst.name}' "
        f"(replicaMap {prog.replicaMap})"
    )
    if replicas == 1:
        em.problems.append(
            f"{where}: the graph is not replicated (replication factor 1), so there is no "
            "other replica to copy to; hint: use Copy within the replica, or build the "
            "graph with Graph(target, replication_factor=r)"
        )
        return ir.Sequence()
    s = em.tensor(prog.src, f"{where}: source")
    d = em.tensor(prog.dst, f"{where}: destination")
    if s is None or d is None:
        return ir.Sequence()
    problems = _unlike_problems(where, s, d)
    bad = sorted({k for kv in prog.replicaMap.items() for k in kv if not 0 <= k < replicas})
    if bad:
        problems.append(
            f"{where}: replica {bad[0]} is out of range; the graph has {replicas} replicas "
            f"(0..{replicas - 1})"
        )
    targets = list(prog.replicaMap.values())
    twice = sorted({v for v in targets if targets.count(v) > 1})
    if twice:
        sources = [k for k, v in prog.replicaMap.items() if v == twice[0]]
        problems.append(
            f"{where}: replica {twice[0]} is the destination of replicas {sources}; each "
            "replica may receive one copy"
        )
    const = em.constant_of(d)
    if const is not None:
        problems.append(
            f"{where}: the destination is (part of) constant '{const}'; constants cannot be "
            "written; hint: copy into a variable"
        )
    if problems:
        em.problems += problems
        return ir.Sequence()
    typ, s_ids, d_ids = s.elementType(), s.flat_index(), d.flat_index()
    storage, mapping = em.lowered.storage, dict(prog.replicaMap)

    def copy() -> None:
        values = storage.read_replicas(typ, s_ids)
        for a, b in mapping.items():
            storage.write_replica(b, typ, d_ids, values[a])

    effect = em.lowered.global_effect(copy)
    _, _, replica_tiles = _layout(em)
    s_tile, d_tile = em.tiles(s), em.tiles(d)
    src, dst = [], []
    for a, b in mapping.items():
        src.append(a * replica_tiles + s_tile)
        dst.append(b * replica_tiles + d_tile)
    name = prog.debugName or f"CrossReplicaCopy {s.name} -> {d.name}"
    return em.touch(_global_transfer(em, name, pid, src, dst, typ.size, effect), s, d)


def _global_transfer(
    em: Emission,
    name: str,
    pid: int,
    src: list[np.ndarray],
    dst: list[np.ndarray],
    element_size: int,
    effect: int,
) -> ir.Node:
    """An external sync and a run-once GlobalExchange of the (src, dst) element moves
    (machine-wide tiles), carrying ``effect``; only the sync when nothing moves."""
    tpi, _, _ = _layout(em)
    src_all = np.concatenate(src) if src else np.zeros(0, np.int64)
    dst_all = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    cross = src_all // tpi != dst_all // tpi
    sync = ir.Sync(name=f"{name}/ExternalSync", program_id=pid, sync_kind="external")
    if not cross.any():
        return ir.Sequence([with_effect(sync, effect)], name=name)
    total = int(max(src_all.max(), dst_all.max())) + 1
    keys = src_all[cross] * total + dst_all[cross]
    pairs, counts = np.unique(keys, return_counts=True)
    step = ir.GlobalExchange(
        name=f"{name}/GlobalExchange",
        effect=effect,
        program_id=pid,
        src_tile=pairs // total,
        dst_tile=pairs % total,
        num_bytes=counts * element_size,
        replicated=False,
    )
    return ir.Sequence([sync, step], name=name)


# ------------------------------------------------------- non-replicated copies
def lower_nonreplicated_copy(em: Emission, prog: P.NonReplicatedCopy) -> ir.Node:
    """IR of a copy of ``getNonReplicatedTensor`` views (see the module docstring)."""
    state = em.state
    pid = em.pid(prog)
    src, dst = prog.src, prog.dst
    if isinstance(src, DataStream) or isinstance(dst, DataStream):
        to_device = isinstance(src, DataStream)
        stream, t = (src, dst) if to_device else (dst, src)
        return _wide_stream_copy(em, prog, stream, t, to_device, pid)
    where = f"Copy from '{getattr(src, 'name', src)}' to '{getattr(dst, 'name', dst)}'"
    if not (is_nonreplicated(src, state) and is_nonreplicated(dst, state)):
        em.problems.append(
            f"{where}: one side is a non-replicated view (getNonReplicatedTensor) and the "
            "other is not; a copy between tensors is either within every replica (two "
            "replicated tensors) or between views of the top level (two views); hint: "
            "take getNonReplicatedTensor of the other tensor too"
        )
        return ir.Sequence()
    problems = _unlike_problems(where, src, dst)
    s_ids, d_ids = src.flat_index(), dst.flat_index()
    d_rep, d_local = split_wide(d_ids)
    const = _constant_of_ids(em, dst, d_local)
    if const is not None:
        problems.append(
            f"{where}: the destination is (part of) constant '{const}'; constants cannot be written"
        )
    if not problems and not np.array_equal(s_ids, d_ids) and np.intersect1d(s_ids, d_ids).size:
        problems.append(
            f"{where}: source and destination overlap; they must be disjoint; hint: copy "
            "through a temporary"
        )
    if problems:
        em.problems += problems
        return ir.Sequence()
    typ, storage = src.elementType(), em.lowered.storage

    def copy() -> None:
        storage.write_wide(typ, d_ids, storage.read_wide(typ, s_ids))

    effect = em.lowered.global_effect(copy)
    s_rep, s_local = split_wide(s_ids)
    space = state.space(typ)
    s_tile = space.tile[s_local].astype(np.int64)
    d_tile = space.tile[d_local].astype(np.int64)
    _, _, replica_tiles = _layout(em)
    name = prog.debugName or f"Copy {src.name} -> {dst.name}"
    nodes: list[ir.Node] = []
    same = s_rep == d_rep
    if same.any():  # moves within one replica: the busiest replica's, for every replica
        moved = same & (s_tile != d_tile)
        if moved.any():
            busiest = np.bincount(s_rep[moved]).argmax()
            pick = moved & (s_rep == busiest)
            planner = ExchangePlanner(state.target, state, em.owners)
            planner.add_grouped(typ, s_local[pick], s_tile[pick], d_tile[pick])
            nodes += _exchange_nodes(em, planner, name, pid)
    glob = _global_transfer(
        em,
        name,
        pid,
        [s_rep[~same] * replica_tiles + s_tile[~same]],
        [d_rep[~same] * replica_tiles + d_tile[~same]],
        typ.size,
        effect,
    )
    node = ir.Sequence([*nodes, glob], name=name)
    em.touches.setdefault(id(node), []).extend([(typ, s_local), (typ, d_local)])
    return node


def _exchange_nodes(em: Emission, planner: ExchangePlanner, name: str, pid: int) -> list[ir.Node]:
    """The steps of a planned exchange within a replica (sync + exchange)."""
    return em.exchange_steps(planner, f"{name}/Exchange", f"{name}/Sync", pid)


def _wide_stream_copy(
    em: Emission, prog: P.Copy, stream: DataStream, t: Any, to_device: bool, pid: int
) -> ir.Node:
    state = em.state
    label = prog.debugName or stream.handle
    where = f"Copy between stream '{stream.handle}' and '{getattr(t, 'name', t)}'"
    if state.streams.get(stream.handle) is not stream:
        em.problems.append(f"{where}: not a stream of this graph")
        return ir.Sequence()
    problems = []
    if stream.toDevice != to_device:
        way = "host-to-device" if stream.toDevice else "device-to-host"
        problems.append(f"{where}: the stream is a {way} FIFO and cannot be used this way")
    if stream.replicationFactor > 1:
        problems.append(
            f"{where}: the stream belongs to the replicated graph (it serves each replica "
            "separately) but the tensor is a non-replicated view of every replica; hint: "
            "make the stream with the non-replicated top-level graph"
        )
    if stream.elementType != t.elementType() or stream.numElements != t.numElements():
        problems.append(
            f"{where}: the stream ({stream.elementType}, {stream.numElements} elements) and "
            f"the tensor ({t.elementType()}, {t.numElements()} elements) must have the same "
            "type and size"
        )
    ids = t.flat_index()
    rep, local = split_wide(ids)
    const = _constant_of_ids(em, t, local) if to_device else None
    if const is not None:
        problems.append(f"{where}: the destination is (part of) constant '{const}'")
    if problems:
        em.problems += problems
        return ir.Sequence()
    typ, storage, host = t.elementType(), em.lowered.storage, em.host

    if to_device:

        def effect() -> None:
            storage.write_wide(typ, ids, host.pull(stream))
            host.pulled(stream)
    else:

        def effect() -> None:
            host.push(stream, storage.read_wide(typ, ids))

    eff = em.lowered.global_effect(effect)
    _, _, replica_tiles = _layout(em)
    tiles = state.space(typ).tile[local].astype(np.int64)
    replicas = replication_factor(state)
    per = np.zeros((replicas, replica_tiles), np.int64)
    np.add.at(per, (rep, tiles), typ.size)
    nbytes = per.max(axis=0)  # every replica runs the step: the busiest one's bytes
    active = np.flatnonzero(nbytes)
    step = ir.StreamCopy(
        name=label,
        effect=eff,
        program_id=pid,
        direction="host_to_device" if to_device else "device_to_host",
        tile=active,
        num_bytes=nbytes[active],
        stream=label,
        exchanged=True,
    )
    messages = np.ones(active.size, np.int64)
    on_chip = stream_exchange(label, pid, active, nbytes[active], messages, to_device)
    sync = ir.Sync(name=f"{label}/HostSync", program_id=pid, sync_kind="host")
    parts = [step, on_chip] if to_device else [on_chip, step]
    node = ir.Sequence([sync, *parts], name=label)
    em.touches.setdefault(id(node), []).append((typ, local))
    return node


__all__ = ["lower_collective", "lower_cross_replica_copy", "lower_nonreplicated_copy"]
