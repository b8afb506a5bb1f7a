"""Tile memory of a compiled graph: what each tile must hold, placed with liveness.

Gathers, per tile and by Poplar's profile categories, everything a compiled graph
needs in tile memory and hands it to :func:`ipusim.tile.memory.plan`:

* ``variable`` / ``constant``: each variable's elements on each tile (data region:
  interleaved first; the interleaved region only when a vertex field declared
  ``interleaved=True`` is connected to them on that tile).
* ``vertexInstanceState``: per vertex a header word plus its field words (sizes in
  the config's ``code`` section), summed per compute set and tile; kept in the
  non-interleaved region next to the code that walks it, so the interleaved region
  holds only variables and buffers. The descriptors of its vector lists are
  ``vectorListDescriptor`` blocks beside it, and the state of the on-tile copy
  vertices lowering inserts is ``copyDescriptor``.
* ``vertexCode``: once per vertex type per tile; ``controlCode``: per tile, per
  program step run on it; ``internalExchangeCode`` / ``globalExchangeCode`` /
  ``hostExchangeCode``: per on-chip exchange, exchange between IPUs
  (``GlobalExchange``) or stream copy, per participating tile (the same sizes for
  both kinds of exchange); ``stack``: worker and supervisor stacks on every tile.
  Code and stacks are non-interleaved and always live.
* ``messageBuffer``: the elements an ``Execute`` receives from (or sends to) other
  tiles, on its IPU or another, held while that ``Execute`` runs.

Variables are placed by their live ranges
(:class:`~poplar_api.lowering.liveness.Liveness`): blocks whose ranges do not overlap
may share an address. A variable whose range a ``WriteUndef`` splits has one block
per live range, so other variables may use its memory in between (``by_category``
still counts its bytes once). Each variable's elements per tile are found per element
space from its stretches of one owner (:func:`variable_tiles`), not variable by
variable.

Code is stored once: a function's steps count in the control and exchange code at
its first call only, however often it is called. The sizes come from the config's
``code`` section; none is measured on hardware (the presets mark them estimates).

Exchange code per tile and exchange is ``exchange_code_base_bytes`` plus
``exchange_code_bytes_per_message`` for each region the tile sends and for each
distinct tile it receives from (:func:`exchange_code`): received data lands in the
tile's message buffer in arrival order, so the receiving tile's code selects each
sender once and lets the incoming data run on, whereas a sender addresses every
region it sends. Counting every received run instead (each a few elements of a
convolution's input window) put ResNet-50's exchange code at 590 MB; see
``docs/models.md`` for the measurement and what is uncertain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.config import CodeConfig
from ipusim.tile.banks import DataPlacement, PlacedData
from ipusim.tile.block_table import ANY, INTERLEAVED, NON_INTERLEAVED, REGION_CODE, BlockTable
from ipusim.tile.counted import CountedCompute
from ipusim.tile.memory import MemoryReport, MemorySpec, plan
from ipusim.timing import PhaseExchange, StaticExchange, TimingModel
from poplar_api.lowering import runs
from poplar_api.lowering.computeset import ComputeSetRecord
from poplar_api.lowering.exchange import OwnerCache
from poplar_api.lowering.liveness import Liveness, ProgramPoints, VariableIndex

__all__ = ["exchange_code", "out_of_memory_message", "place_memory", "variable_tiles"]


def copy_vertex_state_bytes(code: CodeConfig) -> int:
    """Vertex state of an on-tile copy vertex: header and two vector fields."""
    return code.vertex_header_bytes + 2 * (code.field_pointer_bytes + code.vector_size_bytes)


def _present(values: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct values of ``values`` (all in ``[0, n)``), without sorting them."""
    mask = np.zeros(n, bool)
    mask[values] = True
    return np.flatnonzero(mask)


#: id of an exchange step -> (the step, its :func:`_step_totals`): what memory
#: placement asks of each exchange several times (its tiles, code and buffers)
Totals = dict[int, tuple[ir.Step, tuple[np.ndarray, ...]]]


def _step_totals(
    timing: TimingModel, step: ir.Exchange, known: Totals | None = None
) -> tuple[np.ndarray, ...]:
    """(bytes sent, bytes received, messages sent, messages received) per tile of an
    on-chip exchange, as its cost gives them (kept in ``known`` when given; the arrays
    are not to be written).

    An exchange given as per-tile totals is read from the step itself when the timing
    model costs it with a default exchange component, which takes those totals as they
    are: asking the cost instead keeps its four arrays over all tiles in the model's
    cache of costs for the engine's life, for every exchange (a few hundred MB in a
    sharded ResNet-50 training step).
    """
    if known is not None:
        found = known.get(id(step))
        if found is not None and found[0] is step:
            return found[1]
    default = type(timing).cost is TimingModel.cost and type(timing.exchange) in (
        StaticExchange,
        PhaseExchange,
    )
    if not (default and step.is_totals):
        cost = timing.cost(step)
        out = (cost.bytes_sent, cost.bytes_received, cost.messages_sent, cost.messages_received)
    else:
        n = timing.config.num_tiles
        tiles = np.asarray(step.tile, np.int64)
        full = np.zeros((4, n), np.int64)
        for k, values in enumerate((step.bytes_sent, step.bytes_received, step.messages_sent,
                                    step.messages_received)):  # fmt: skip
            full[k, tiles] = values
        out = tuple(full)
    if known is not None:
        known[id(step)] = (step, out)
    return out


def _exchange_totals(
    timing: TimingModel, step: ir.Step, known: Totals | None = None
) -> tuple[np.ndarray, ...]:
    """(bytes sent once per message, bytes received, messages sent + received) per tile."""
    if isinstance(step, ir.Exchange):
        sent, received, messages_sent, messages_received = _step_totals(timing, step, known)
        return sent, received, messages_sent + messages_received
    n = timing.config.num_tiles
    # a global exchange between replicas (``replicated`` False) names machine-wide
    # tiles: every replica holds its share of the code on its own tile ``t % n``
    src = np.asarray(step.src_tile, np.int64) % n
    dst = np.asarray(step.dst_tile, np.int64) % n
    nbytes = np.asarray(step.num_bytes, np.int64)
    sent = np.bincount(src, weights=nbytes, minlength=n).astype(np.int64)
    received = np.bincount(dst, weights=nbytes, minlength=n).astype(np.int64)
    messages = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    return sent, received, messages.astype(np.int64)


def exchange_code(
    timing: TimingModel,
    step: ir.Step,
    known: Totals | None = None,
    tiles: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Exchange code of one on-chip or global exchange per tile, by what it does:
    ``setup`` (``exchange_code_base_bytes`` on each tile taking part), ``send`` (per
    region the tile sends) and ``receive`` (per tile it receives from, or per message
    received when the exchange does not count senders). A tile sends each region with
    its own instructions but takes what it receives sender after sender into its
    message buffer, so its receive code is per distinct sender
    (``Exchange.senders_received``). The sum of the three is what the exchange adds to
    its code category. ``known``: totals of exchanges asked before (:data:`Totals`);
    ``tiles``: the tiles taking part when the caller has them (:func:`_step_tiles`)."""
    code = timing.config.code
    n = timing.config.num_tiles
    if isinstance(step, ir.Exchange):
        _, _, sent, received = _step_totals(timing, step, known)
        if step.is_totals and step.senders_received is not None:
            received = np.zeros(n, np.int64)
            received[np.asarray(step.tile, np.int64)] = step.senders_received
    else:
        sent = np.bincount(np.asarray(step.src_tile, np.int64) % n, minlength=n)
        received = np.bincount(np.asarray(step.dst_tile, np.int64) % n, minlength=n)
    setup = np.zeros(n, np.int64)
    setup[_step_tiles(timing, step, n, known) if tiles is None else tiles] = (
        code.exchange_code_base_bytes
    )
    per_message = code.exchange_code_bytes_per_message
    return {
        "setup": setup,
        "send": per_message * np.asarray(sent, np.int64),
        "receive": per_message * np.asarray(received, np.int64),
    }


def _step_tiles(
    timing: TimingModel, step: ir.Step, num_tiles: int, known: Totals | None = None
) -> np.ndarray:
    """Tiles a step runs on (a sync involves every tile, or those of the IPUs it
    lists)."""
    if isinstance(step, ir.Compute):
        return _present(np.asarray(step.vertex_tile, np.int64), num_tiles)
    if isinstance(step, ir.Exchange | ir.GlobalExchange):
        sent, received, messages = _exchange_totals(timing, step, known)
        return np.flatnonzero((sent > 0) | (received > 0) | (messages > 0))
    if isinstance(step, ir.StreamCopy):
        return _present(np.asarray(step.tile, np.int64), num_tiles)
    if isinstance(step, ir.Sync) and step.ipus is not None:  # the listed IPUs' tiles
        tpi = timing.config.tile.tiles_per_ipu
        tiles = [np.arange(i * tpi, min((i + 1) * tpi, num_tiles)) for i in step.ipus]
        return np.concatenate(tiles) if tiles else np.zeros(0, np.int64)
    return np.arange(num_tiles)


@dataclass(frozen=True)
class _PerTile:
    """Blocks named ``name`` of ``nbytes[t]`` bytes on every tile ``t`` where that is not
    0 (:meth:`BlockTable.per_tile`'s blocks), kept as a row of bytes until
    :func:`_per_tile_table` makes one table of many such rows."""

    name: str
    category: str
    nbytes: np.ndarray
    element_bytes: int = 1
    region: str = ANY
    live: tuple[int, int] | None = None


def _per_tile_blocks(name: str, category: str, nbytes: np.ndarray, **kw: Any) -> _PerTile:
    return _PerTile(name, category, nbytes, **kw)


def _per_tile_table(parts: Sequence[_PerTile], nt: int) -> BlockTable:
    """One table of the blocks of ``parts``: the rows, names and categories that
    :meth:`BlockTable.concat` gives of their :meth:`BlockTable.per_tile` tables (part
    after part, each one's tiles ascending; names and categories in order of first
    appearance, those of parts without blocks included), found in one pass over a
    ``[parts, tiles]`` matrix of bytes. Memory placement has a few hundred such parts
    (the state of every compute set, its exchange buffers): a table of a dozen small
    arrays each, then a join of them all, cost more than the blocks they hold."""
    if not parts:
        return BlockTable.empty()
    nbytes = np.empty((len(parts), nt), np.int64)
    for k, part in enumerate(parts):
        nbytes[k] = part.nbytes
    at = np.flatnonzero(nbytes)  # row-major: part after part, tiles ascending
    of, tile = np.divmod(at, nt)
    names = {x: k for k, x in enumerate(dict.fromkeys(p.name for p in parts))}
    categories = {x: k for k, x in enumerate(dict.fromkeys(p.category for p in parts))}

    def column(values: Any) -> np.ndarray:  # a value per part, one per block
        return np.fromiter(values, np.int64, len(parts))[of]

    live = [(0, 0) if p.live is None else (int(p.live[0]), int(p.live[1])) for p in parts]
    return BlockTable(
        names=list(names),
        categories=list(categories),
        name=column(names[p.name] for p in parts),
        category=column(categories[p.category] for p in parts),
        tile=tile,
        size=nbytes.reshape(-1)[at],
        element_bytes=column(p.element_bytes for p in parts),
        region=column(REGION_CODE[p.region] for p in parts),
        live_first=column(lo for lo, _ in live),
        live_last=column(hi for _, hi in live),
        always=np.fromiter((p.live is None for p in parts), bool, len(parts))[of],
    )


def _code_blocks(
    walk: ProgramPoints, timing: TimingModel, nt: int, known: Totals | None = None
) -> list[_PerTile]:
    """Stacks, control code and exchange code of every tile (non-interleaved, always live)."""
    nonint = {"region": NON_INTERLEAVED}
    cfg = timing.config
    code = cfg.code
    stack = cfg.tile.worker_contexts * code.worker_stack_bytes + code.supervisor_stack_bytes
    steps_on = np.zeros(nt, np.int64)
    on_all = 0  # steps run on every tile (a sync of the whole target), counted apart
    ex_code = np.zeros(nt, np.int64)
    global_code = np.zeros(nt, np.int64)
    host_code = np.zeros(nt, np.int64)
    for point, step in enumerate(walk.steps):
        if point in walk.repeated:
            continue  # a function called again: its code is already stored
        if isinstance(step, ir.Exchange) and step.host:
            continue  # the on-chip side of a stream copy: its code is the copy's
        if isinstance(step, ir.Sync) and step.ipus is None:
            on_all += 1
            continue
        tiles = _step_tiles(timing, step, nt, known)
        steps_on[tiles] += 1
        if isinstance(step, ir.Exchange | ir.GlobalExchange):
            into = global_code if isinstance(step, ir.GlobalExchange) else ex_code
            for part in exchange_code(timing, step, known, tiles).values():
                into += part
        elif isinstance(step, ir.StreamCopy):
            host_code[tiles] += code.host_exchange_code_bytes
    steps_on += on_all
    control = code.control_code_base_bytes + code.control_code_bytes_per_step * steps_on
    return [
        _per_tile_blocks("stack", "stack", np.full(nt, stack, np.int64), **nonint),
        _per_tile_blocks("control", "controlCode", control, **nonint),
        _per_tile_blocks("exchange", "internalExchangeCode", ex_code, **nonint),
        _per_tile_blocks("host exchange", "hostExchangeCode", host_code, **nonint),
        _per_tile_blocks("global exchange", "globalExchangeCode", global_code, **nonint),
    ]


def _vertex_code_blocks(
    computes: list[ir.Compute], nt: int, by_vertex_type: dict[str, int], code: CodeConfig
) -> list[_PerTile]:
    """Code of each vertex type on each tile that runs one (counted in ``by_vertex_type``)."""
    code_tiles: dict[str, np.ndarray] = {}
    for step in computes:
        vtile = np.asarray(step.vertex_tile, np.int64)
        vt = np.asarray(step.vertex_type if step.vertex_type is not None else [], np.int64)
        if vt.size != vtile.size:
            vt = np.zeros(vtile.size, np.int64)
        for k, tname in enumerate(step.vertex_type_names):
            on = code_tiles.setdefault(tname, np.zeros(nt, bool))
            on[vtile[vt == k]] = True
    blocks = []
    for tname, on in code_tiles.items():
        nbytes = np.where(on, code.vertex_code_bytes, 0)
        blocks.append(_per_tile_blocks(tname, "vertexCode", nbytes, region=NON_INTERLEAVED))
        count = int(np.count_nonzero(on))
        by_vertex_type[tname] = by_vertex_type.get(tname, 0) + code.vertex_code_bytes * count
    return blocks


def variable_tiles(
    state: Any, index: VariableIndex, owners: OwnerCache, nt: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(variable, tile, elements)`` of every variable's elements on each tile, sorted
    by variable then tile (unmapped elements left out).

    Found per element space from its stretches of one owner cut at the variables'
    bases: a few numpy passes over the stretches, not a loop over the variables.
    """
    out_var, out_tile, out_count = [], [], []
    for size, space in state.spaces.items():
        n = space.size
        arrays = index.arrays_of_size(size)
        if n == 0 or arrays is None:
            continue
        bases, var_ids, _ = arrays
        changes = owners.changes_of(size, space.tile, n)
        # both ascending: merged in one pass, each start with the variable holding it
        starts, holder = runs.stretch_starts(changes, bases, n)
        # variables are id ranges in id order: the stretches' variables never decrease
        var, tile, count = runs.variable_tile_counts(starts, holder, n, space.tile, var_ids, nt)
        out_var.append(var)
        out_tile.append(tile)
        out_count.append(count)
    if not out_var:
        none = np.zeros(0, np.int64)
        return none, none, none
    var, tile, count = (np.concatenate(x) for x in (out_var, out_tile, out_count))
    if len(out_var) > 1:  # spaces interleave variable ids
        # each space's rows are in order of (variable, tile) and a variable is in one
        # space: a stable sort by variable alone (a merge of the spaces' runs) orders
        # the pairs as a sort of both would
        order = np.argsort(var, kind="stable")
        var, tile, count = var[order], tile[order], count[order]
    return var, tile, count


def _variable_blocks(
    state: Any,
    live: Liveness,
    index: VariableIndex,
    records: Sequence[ComputeSetRecord],
    nt: int,
    owners: OwnerCache,
    keyed: bool = False,
) -> tuple[BlockTable, BlockTable, np.ndarray | None]:
    """Each variable's (or constant's) elements on each tile, with its live range: one
    block per live range when ``WriteUndef`` splits it, a variable's blocks tile by
    tile (its ranges next to each other), variables by id. Returns the blocks and,
    apart, the second and later ranges' blocks (so that the report counts a variable
    once), and with ``keyed`` each block's ``variable * nt + tile`` (else None)."""
    var, tile, count = variable_tiles(state, index, owners, nt)
    if var.size == 0:
        return BlockTable.empty(), BlockTable.empty(), None
    variables = state.variables
    constant = variables.constant_flags()
    type_size = variables.element_sizes()
    # per (variable, tile): the interleaved request, the name's index (names in order
    # of first appearance: var is sorted) and the bytes; narrow columns throughout
    # (a ResNet-50 training step over 4 IPUs has tens of millions of rows)
    region = np.full(var.size, 2, np.int8)  # any region
    inter = [r.interleaved for r in records if r.interleaved.size]
    if inter:
        inter = np.unique(np.concatenate(inter))
        key = var * nt + tile
        at = np.minimum(np.searchsorted(inter, key), inter.size - 1)
        region[inter[at] == key] = 1  # interleaved
        del key, at
    starts = np.concatenate(([True], var[1:] != var[:-1]))
    names = variables.names(var[starts])
    name_of = _narrow(np.cumsum(starts) - 1)
    del starts
    size = _narrow(count * type_size[var])
    del count
    tile = _narrow(tile)
    # a variable whose live range a WriteUndef splits has a row per range on each tile
    split, rows, copy = _split_rows(live, var)
    if rows is not None:  # rows of the split variables' ranges next to each other
        var, tile, size, region, name_of = (a[rows] for a in (var, tile, size, region, name_of))
    always = live.always[var]
    first = np.where(always, 0, live.first[var])
    last = np.where(always, 0, live.last[var])
    unused = ~always & (last < 0)
    first[unused], last[unused] = 0, -1
    del unused
    first, last = _narrow(first), _narrow(last)
    if split is not None:  # the split variables' rows: their own ranges
        at, range_at, flat = split
        mine = np.flatnonzero(np.isin(var, at))
        r = flat[range_at[np.searchsorted(at, var[mine])] + copy[mine]]
        first[mine], last[mine], always[mine] = r[:, 0], r[:, 1], False
        del mine, r
    cat_flag = constant[var]
    categories = ["constant" if cat_flag[0] else "variable"]
    if (cat_flag != cat_flag[0]).any():
        categories.append("variable" if cat_flag[0] else "constant")
    table = BlockTable(
        names=names,
        categories=categories,
        name=name_of,
        category=(cat_flag != cat_flag[0]).astype(np.int8),
        tile=tile,
        size=size,
        element_bytes=type_size[var].astype(np.int8),
        region=region,
        live_first=first,
        live_last=last,
        always=always,
    )
    if live.joint:  # a function's variable: its ranges keep one address on each tile
        joint = np.fromiter(live.joint, np.int64, len(live.joint))
        table.joint = _narrow(np.where(np.isin(var, joint), var, -1))
    extra = table.take(np.flatnonzero(copy > 0)) if copy is not None else BlockTable.empty()
    keys = var.astype(np.int64) * nt + tile if keyed else None
    return table, extra, keys


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` as int32 when they fit (element counts, tiles, bytes, program points
    of a compiled graph do), else unchanged."""
    if values.size and (int(values.min()) < -(2**31) or int(values.max()) >= 2**31):
        return values
    return values.astype(np.int32, copy=False)


def _split_rows(
    live: Liveness, var: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, np.ndarray | None, np.ndarray | None]:
    """The rows of the variable blocks when ``WriteUndef`` splits live ranges.

    Returns ``(split, rows, copy)``: ``split`` is ``(variables, first range's index,
    ranges [k, 2])`` of the split variables (sorted; None when none is), ``rows`` the
    row of ``var`` each block repeats (one per range of a split variable) and
    ``copy`` which of its variable's ranges each block is (None, None when no
    variable of ``var`` is split)."""
    extra_ranges = {vid: r for vid, r in live.ranges.items() if r}
    if not extra_ranges:
        return None, None, None
    vids = np.fromiter(extra_ranges, np.int64, len(extra_ranges))
    lengths = np.fromiter(map(len, extra_ranges.values()), np.int64, len(extra_ranges))
    flat = np.array([r for ranges in extra_ranges.values() for r in ranges], np.int64)
    range_at = np.cumsum(lengths) - lengths
    order = np.argsort(vids)
    vids, lengths, range_at = vids[order], lengths[order], range_at[order]
    at = np.minimum(np.searchsorted(vids, var), vids.size - 1)
    found = vids[at] == var
    if not found.any():
        return None, None, None
    reps = np.ones(var.size, np.int64)
    reps[found] = lengths[at[found]]
    del at, found
    rows = np.repeat(np.arange(var.size, dtype=np.int64), reps)
    copy = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
    return (vids, range_at, flat.reshape(-1, 2)), rows, copy


def _vertex_state_blocks(
    records: Sequence[ComputeSetRecord],
    computes: list[ir.Compute],
    nt: int,
    by_compute_set: dict[str, np.ndarray],
    by_vertex_type: dict[str, int],
    code: CodeConfig,
    data_by_type: dict[str, np.ndarray],
    parts: dict[str, dict[str, np.ndarray]] | None = None,
) -> list[_PerTile]:
    """Vertex state per compute set and tile: the graph's compute sets (their
    vector-list descriptors as ``vectorListDescriptor`` blocks beside the rest of the
    state), then the on-tile copies lowering made (one copy vertex per tile, its state
    held as ``copyDescriptor``, Poplar's storage of copy descriptors). ``data_by_type``
    gets each vertex type's state bytes per tile; ``parts`` (``"byType"`` and
    ``"byComputeSet"``: name -> rows edge pointers, descriptors, copy pointers, each
    on every tile) the parts of that state."""
    kw = {"element_bytes": 4, "region": NON_INTERLEAVED}
    blocks: list[_PerTile] = []
    in_cs: set[int] = set()
    parts = parts if parts is not None else {"byType": {}, "byComputeSet": {}}
    zero = np.zeros(nt, np.int64)
    # the byType parts of each vertex type summed row by row and stacked once at the
    # end (a compute set's few types each added as a [3, tiles] stack cost more than
    # the bytes they add: a fixed cost per compute set)
    type_rows: dict[str, list[Any]] = {}
    for record in records:
        in_cs.update(id(s) for s in record.node.body)
        for tname, nbytes in record.state_by_type:
            by_vertex_type[tname] = by_vertex_type.get(tname, 0) + nbytes
        for tname, on_tiles in record.state_by_type_tile:
            data_by_type[tname] = data_by_type.get(tname, 0) + on_tiles
        edges = zero
        for tname, on_edges, on_lists in record.parts_by_type_tile:
            rows = type_rows.setdefault(tname, [0, 0, 0])
            rows[0] = rows[0] + on_edges
            rows[1] = rows[1] + on_lists
            edges = edges + on_edges
        per_tile = record.state_per_tile
        # kept in the report for every compute set and tile: int32 (half the bytes of
        # the lowering's int64, thousands of compute sets over all tiles of 4 IPUs)
        by_compute_set[record.name] = _narrow(by_compute_set.get(record.name, 0) + per_tile)
        lists = record.descriptors_per_tile
        lists = zero if lists is None else lists
        add = _rows(nt, edges, lists)
        held = parts["byComputeSet"]
        prev = held.get(record.name)
        held[record.name] = _narrow(add if prev is None else prev + add)
        blocks.append(_per_tile_blocks(record.name, "vertexInstanceState", per_tile - lists, **kw))
        blocks.append(_per_tile_blocks(record.name, "vectorListDescriptor", lists, **kw))
    for step in computes:
        if id(step) in in_cs:
            continue
        per_tile = np.bincount(step.vertex_tile, minlength=nt).astype(np.int64)
        per_tile *= copy_vertex_state_bytes(code)
        by_compute_set[step.name] = _narrow(by_compute_set.get(step.name, 0) + per_tile)
        tname = step.vertex_type_names[0]
        by_vertex_type[tname] = by_vertex_type.get(tname, 0) + int(per_tile.sum())
        data_by_type[tname] = data_by_type.get(tname, 0) + per_tile
        rows = type_rows.setdefault(tname, [0, 0, 0])
        rows[2] = rows[2] + per_tile
        add = _rows(nt, None, None, per_tile)
        held = parts["byComputeSet"]
        prev = held.get(step.name)
        held[step.name] = _narrow(add if prev is None else prev + add)
        blocks.append(_per_tile_blocks(step.name, "copyDescriptor", per_tile, **kw))
    for tname, (on_edges, on_lists, copies) in type_rows.items():
        add = _rows(nt, on_edges, on_lists, copies)
        parts["byType"][tname] = parts["byType"].get(tname, 0) + add
    return blocks


def _rows(nt: int, *rows: Any) -> np.ndarray:
    """A ``[3, nt]`` int64 array of ``rows`` (edge pointers, descriptors, copy
    pointers), each an array of ``nt`` or 0 / None for zeros."""
    out = np.zeros((3, nt), np.int64)
    for k, row in enumerate(rows):
        if row is not None and not isinstance(row, int):
            out[k] = row
    return out


def _buffer_blocks(
    walk: ProgramPoints, timing: TimingModel, nt: int, known: Totals | None = None
) -> list[_PerTile]:
    """Exchange buffers of each Execute, live while it runs: elements received before
    its compute step (on the receivers), elements sent after it (on the senders), by
    on-chip and global exchanges alike."""
    blocks: list[_PerTile] = []
    for lo, hi in walk.executes:
        seen_compute = False
        for p in range(lo, hi + 1):
            step = walk.steps[p]
            if isinstance(step, ir.Compute):
                seen_compute = True
            elif isinstance(step, ir.Exchange | ir.GlobalExchange):
                sent, received, _ = _exchange_totals(timing, step, known)
                nbytes = sent if seen_compute else received
                blocks.append(_per_tile_blocks(step.name, "messageBuffer", nbytes, live=(lo, hi)))
    return blocks


def place_memory(
    state: Any,
    live: Liveness,
    records: Sequence[ComputeSetRecord],
    timing: TimingModel,
    owners: OwnerCache | None = None,
    index: VariableIndex | None = None,
) -> MemoryReport:
    """Place what a compiled program of graph ``state`` needs in tile memory.

    Blocks are handed to the allocator in this order (it keeps the order among
    blocks of equal rank): stacks, control code, exchange code, host exchange code,
    global exchange code, vertex code, variables (by id), vertex state, exchange
    buffers.

    Parameters
    ----------
    state
        The graph state (variables, tile mappings, host handles).
    live
        The program points and live ranges (:func:`~poplar_api.lowering.liveness.liveness`).
    records
        The lowered compute sets, in lowering order (their vertex state).
    timing
        The timing model whose exchange costs give the messages exchange code holds
        (the engine's, so that a custom model is honoured here too).
    owners, index
        The lowering's owner change points and variable index (made here if not given).
    """
    cfg = state.target.config
    nt = state.target.getNumTiles()
    walk = live.points
    computes = list({id(s): s for s in walk.steps if isinstance(s, ir.Compute)}.values())
    by_compute_set: dict[str, np.ndarray] = {}
    by_vertex_type: dict[str, int] = {}
    data_by_type: dict[str, np.ndarray] = {}
    parts: dict[str, dict[str, np.ndarray]] = {"byType": {}, "byComputeSet": {}}
    owners = owners if owners is not None else OwnerCache()
    index = index if index is not None else VariableIndex(state)
    placements = _counted_placements(records)
    variables, extra, keys = _variable_blocks(
        state, live, index, records, nt, owners, keyed=bool(placements)
    )
    known: Totals = {}  # each exchange's totals, asked for its tiles, code and buffers
    code = _code_blocks(walk, timing, nt, known)
    code += _vertex_code_blocks(computes, nt, by_vertex_type, cfg.code)
    state_blocks = _vertex_state_blocks(
        records, computes, nt, by_compute_set, by_vertex_type, cfg.code, data_by_type, parts
    )
    state_blocks += _buffer_blocks(walk, timing, nt, known)
    tables = [_per_tile_table(code, nt), variables, _per_tile_table(state_blocks, nt)]
    first_variable, variable_sizes = len(tables[0]), variables.size.astype(np.int64)
    del code, state_blocks
    del known
    del variables  # the tables are emptied column by column as the blocks are joined
    blocks = BlockTable.concat(tables, release=True)
    del tables
    names = [s.name for s in walk.steps]
    spec = MemorySpec.from_config(cfg.memory)
    report = plan(spec, nt, blocks, names, by_compute_set, by_vertex_type)
    report.vertex_data_by_type = data_by_type
    # the parts of that state (edge pointers, descriptors, copy pointers) the graph
    # profile's byVertexType and byComputeSet list; read with getattr there
    report.vertex_data_parts = parts
    if placements and keys is not None:
        rows = first_variable + np.arange(keys.size)
        where = (keys, report.block_region[rows], report.block_offset[rows], variable_sizes)
        _place_counted(placements, where, state.variables.element_sizes(), nt)
    for k, category in enumerate(extra.categories):  # later live ranges: bytes count once
        rows = extra.category == k
        np.subtract.at(report.by_category[category], extra.tile[rows], extra.size[rows])
    return report


def _counted_placements(records: Sequence[ComputeSetRecord]) -> list[DataPlacement]:
    """The data placements of the counted compute steps among ``records`` that wait for
    memory to be placed."""
    found = []
    for record in records:
        nodes = [record.node]
        while nodes:
            node = nodes.pop()
            if isinstance(node, CountedCompute) and node.placement.touched is not None:
                found.append(node.placement)
            elif not isinstance(node, ir.Step):
                nodes.extend(ir.children(node))
    return found


def _place_counted(
    placements: Sequence[DataPlacement],
    where: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    element_sizes: np.ndarray,
    nt: int,
) -> None:
    """Fill in where the data each counted compute step touches lies: per (variable,
    tile) block its region, offset and size, and the bytes its fields read and write
    (a variable whose live range is split has a block per range: the first is taken)."""
    keys, region, offset, size = where
    known, first = np.unique(keys, return_index=True)
    for placement in placements:
        read, read_n, written, written_n = placement.touched
        parts = []
        for found, n, is_read in ((read, read_n, True), (written, written_n, False)):
            if known.size:
                at = np.minimum(np.searchsorted(known, found), known.size - 1)
                ok = known[at] == found
            else:  # nothing placed
                at, ok = np.zeros(found.size, np.int64), np.zeros(found.size, bool)
            row = first[at[ok]] if known.size else np.zeros(0, np.int64)
            nbytes = n[ok] * element_sizes[found[ok] // nt]
            zero = np.zeros(row.size, np.int64)
            parts.append((row, nbytes if is_read else zero, zero if is_read else nbytes))
        row = np.concatenate([p[0] for p in parts])
        placement.data = PlacedData(
            tile=keys[row] % nt,
            region=region[row].astype(np.int8),
            offset=offset[row].astype(np.int64),
            size=size[row],
            read=np.concatenate([p[1] for p in parts]).astype(np.int64),
            written=np.concatenate([p[2] for p in parts]).astype(np.int64),
        )
        placement.touched = None


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def out_of_memory_message(report: MemoryReport, max_tiles: int = 5) -> str:
    """Message of the out-of-memory error: worst tiles, their sizes and largest variables."""
    bad = report.tiles_out_of_memory
    cap = report.capacity
    lines = [
        f"graph does not fit in tile memory: {bad.size} of {report.num_tiles} tile(s) out of "
        f"memory (capacity per tile {cap['total']} B = {_kib(cap['total'])}: "
        f"{cap[NON_INTERLEAVED]} B non-interleaved + {cap[INTERLEAVED]} B interleaved)"
    ]
    for tile, need, capacity in report.worst_tiles(min(max_tiles, max(int(bad.size), 1))):
        over = int(report.by_tile["overflowedIncludingGaps"][tile])
        top = report.variables_on_tile(tile)[:3]
        listed = ", ".join(f"'{n}' {b} B" for n, b in top) or "none"
        lines.append(
            f"  tile {tile}: needs {need} B ({_kib(need)}) including gaps, capacity "
            f"{capacity} B ({_kib(capacity)}), {over} B did not fit; largest variables: {listed}"
        )
    lines.append(
        "hint: spread large tensors over more tiles (setTileMapping, "
        "poputil.mapTensorLinearly), or compile with the engine option "
        "debug.allowOutOfMemory='true' to get the engine and its memory report "
        "(engine.memory, getGraphProfile)"
    )
    return "\n".join(lines)
