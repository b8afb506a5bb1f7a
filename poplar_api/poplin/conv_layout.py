"""Memory order of a convolution's partials and output, as Poplibs allocates them.

Poplibs creates the partials of a convolution with the shape
``[numPartials][G / cgpg][Co / cpg][B][*field][cgpg][cpg]`` (``getPartialOutputShape``,
used by ``createPartialsTensor`` in ``lib/poplin/Convolution.cpp`` at graphcore/poplibs
``7eac0f26``): the ``cpg`` (``partialChansPerGroup``) output channels of a vertex's
group are innermost, the batch and field outside them. A tile's block of outputs is
then a few long runs of consecutive elements (one per channel group) instead of one
short run per field position, and what reads the output where it lies (the cast of the
partials, an elementwise update, the clone of the output) sees those few runs.

The operands are laid out the same way (``createInputImpl`` / ``createWeightsImpl``):
the input ``[G][Ci / icg][B][*field][icg]`` and the weights
``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``, on the tiles of the plan's blocks that
read them. ``createInput``/``createWeights`` return such tensors, and a convolution
copies an operand into one where Poplibs rearranges it (:mod:`.conv_rearrange`); the
partial vertices' ``in`` and ``weights`` vectors are then long runs of consecutive
elements, which the graph keeps as runs (:mod:`poplar_api.run_ids`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from poplar_api.errors import TensorError
from poplar_api.graph import Graph
from poplar_api.poplin.conv_ids import SeparableIds
from poplar_api.poplin.conv_kernel_split import kernel_ranges
from poplar_api.poplin.conv_params import ConvParams, expand_dims, expanded_kernel_offsets
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.conv_serial import co_ranges, iteration_chans
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "GroupedView",
    "grouped_input",
    "grouped_output",
    "grouped_partials",
    "grouped_separable",
    "grouped_tiles",
    "grouped_weights",
    "input_tiles",
    "input_tiles_in_memory_order",
    "map_grouped_output",
    "partial_chans_per_group",
    "spread_by_use",
    "weight_tiles",
    "weight_tiles_in_memory_order",
]


def partial_chans_per_group(method: str, out_chans: int, out_chans_per_group: int) -> int:
    """The innermost channel grouping of the partials of a plan.

    The AMP vertices write ``out_chans_per_group`` channels together; when the output
    channels are not a multiple of it, the largest common divisor keeps the view exact
    (Poplibs pads the channels instead). The MAC vertices (``partialChansPerGroup`` 1
    for float partials in ``ConvVertexType.cpp``) group one channel.
    """
    if method != "AMP":
        return 1
    return math.gcd(int(out_chans), int(out_chans_per_group)) or 1


def _output_perm(nl: int, nd: int) -> list[int]:
    """The memory order ``[*lead, G, Co / cpg, B, *field, cpg]`` as ``[*lead, G, B,
    *field, Co / cpg, cpg]``."""
    return [*range(nl), nl, nl + 2, *range(nl + 3, nl + 3 + nd), nl + 1, nl + 3 + nd]


def grouped_output(
    graph: Graph,
    type_: Type,
    lead: Sequence[int],
    groups: int,
    batch: int,
    field: Sequence[int],
    chans: int,
    cpg: int,
    name: str,
) -> tuple[Tensor, Tensor]:
    """A new variable ``[*lead, G, Co / cpg, B, *field, cpg]`` (Poplibs' memory order, see
    the module docstring) and its view ``[*lead, G, B, *field, Co]``: ``(variable,
    view)`` (the variable is what :func:`map_grouped_output` maps)."""
    var, view = grouped_partials(graph, type_, lead, groups, batch, field, chans, cpg, name)
    return var, view if isinstance(view, Tensor) else view.tensor()


class GroupedView:
    """The view ``[*lead, G, B, *field, Co]`` of a grouped variable given by its ids'
    tables (:class:`~poplar_api.poplin.conv_ids.SeparableIds`), the array of every id
    made only when a tensor of the view is asked for: a convolution's partials have
    eight or more times the output's elements, and its partial and reduction vertices'
    fields are computed from the tables.

    Attributes
    ----------
    var
        The variable (memory order): the graph and element type of the view's ids.
    ids
        The ids of the view, one table per dimension.
    name
        The name of the tensor :meth:`tensor` makes.
    """

    def __init__(self, var: Tensor, ids: SeparableIds, name: str) -> None:
        self.var = var
        self.ids = ids
        self.name = name
        self._tensor: Tensor | None = None

    def shape(self) -> list[int]:
        """The view's shape."""
        return list(self.ids.shape)

    def tensor(self) -> Tensor:
        """The view as a tensor (its ids made once)."""
        if self._tensor is None:
            self._tensor = Tensor(self.var.graph, self.var.elementType(), self.ids.array(),
                                  self.name)  # fmt: skip
        return self._tensor


def grouped_partials(
    graph: Graph,
    type_: Type,
    lead: Sequence[int],
    groups: int,
    batch: int,
    field: Sequence[int],
    chans: int,
    cpg: int,
    name: str,
) -> tuple[Tensor, Tensor | GroupedView]:
    """:func:`grouped_output` with the view of a variable with ``lead`` dimensions (the
    partials: internal) as a :class:`GroupedView`, whose ids are not made as an array
    until asked for."""
    lead, field = [int(x) for x in lead], [int(x) for x in field]
    nl, nd = len(lead), len(field)
    var = graph.addVariable(type_, [*lead, groups, chans // cpg, batch, *field, cpg], name)
    perm = _output_perm(nl, nd)
    if not nl:  # the output: the user's tensor is a view of this one, named after it
        return var, var.dimShuffle(perm).reshape([*lead, groups, batch, *field, chans])
    # the partials (internal): the view's ids summed from each dimension's offsets
    # (dimShuffle then reshape gathers them from an array of every id, read across)
    start = int(var.flatten().slice(0, 1).index[0])
    return var, GroupedView(var, grouped_separable(start, var.shape(), perm), name)


def grouped_separable(start: int, shape: Sequence[int], perm: Sequence[int]) -> SeparableIds:
    """The ids of ``v.dimShuffle(perm)`` with its last two dimensions merged, where ``v``
    is a variable of ``shape`` whose ids are consecutive from ``start``, as one table per
    dimension: a stride times the index for each leading dimension (the first also
    holding ``start``), and the merged dimension's offsets in both."""
    st = np.array(np.empty(tuple(shape), np.int8).strides, np.int64)  # element strides
    tables = [np.arange(shape[d], dtype=np.int64) * st[d] for d in perm[:-2]]
    a, b = int(perm[-2]), int(perm[-1])
    merged = np.add.outer(np.arange(shape[a], dtype=np.int64) * st[a],
                          np.arange(shape[b], dtype=np.int64) * st[b])  # fmt: skip
    tables.append(merged.reshape(-1))
    tables[0] = tables[0] + start
    return SeparableIds(tables)


def grouped_ids(start: int, shape: Sequence[int], perm: Sequence[int]) -> np.ndarray:
    """The ids of ``v.dimShuffle(perm)`` with its last two dimensions merged, where
    ``v`` is a variable of ``shape`` whose ids are consecutive from ``start``: the
    offsets of the leading dimensions summed over their (small) grid, plus those of the
    last two, in one pass over the result (:func:`grouped_separable`'s tables)."""
    return grouped_separable(start, shape, perm).array()


def map_grouped_output(graph: Graph, var: Tensor, tiles: np.ndarray, lead: int) -> None:
    """Map the variable of :func:`grouped_output` (with ``lead`` leading
    dimensions) by ``tiles``, the tile of every element of its view ``[*lead, G, B,
    *field, Co]``: the tiles are put in the variable's memory order (one transpose) and
    written as one run, instead of looking up every element of the view."""
    mem = var.shape()
    perm = _output_perm(lead, len(mem) - 4 - lead)
    shuffled = tiles.reshape([mem[p] for p in perm])
    graph.mapElements(var, shuffled.transpose(np.argsort(perm)))


def grouped_tiles(
    plan: ConvPlan,
    rng: list[list[tuple[int, int]]],
    shape: Sequence[int],
    need_reduce: bool,
    cpg: int,
) -> np.ndarray:
    """The tile of every element of the variable of :func:`grouped_partials` whose view
    ``[*lead, G, B, *O, Co]`` has ``shape`` (one leading dimension, the input-channel
    parts, with ``need_reduce``), in the variable's memory order ``[*lead, G, Co / cpg,
    B, *O, cpg]``: the last block of ``plan`` (ranges ``rng``) holding the element (-1:
    none), as int32 (one per partial: tens of millions in ResNet-50's weight updates).

    The blocks' grid is taken one axis at a time in the memory order, each axis by the
    block of each index (whole rows copied); where every channel group of ``cpg``
    channels lies in one block (block bounds are multiples of the output channels'
    grouping), the groups are taken and their ``cpg`` channels broadcast (a read-only
    view: an array ``cpg`` times smaller, and no transpose of the full one).
    """
    shape = [int(x) for x in shape]
    nl = 1 if need_reduce else 0
    owners = [_owner(r, s) for r, s in zip(rng[:-1], shape[nl:], strict=True)]
    if need_reduce:  # the input-channel part first, as in the partials
        grid = np.moveaxis(plan.tiles, -1, 0).astype(np.int32)
        owners.insert(0, np.arange(shape[0], dtype=np.int64))
    else:
        grid = plan.tiles[..., 0].astype(np.int32)
    by_group = owners[-1].reshape(-1, cpg)
    if (by_group == by_group[:, :1]).all():
        owners[-1] = by_group[:, 0]
        order = [*range(nl + 1), grid.ndim - 1, *range(nl + 1, grid.ndim - 1)]
        out = _take_blocks(grid.transpose(order), [owners[k] for k in order])
        return np.broadcast_to(out[..., None], (*out.shape, cpg))
    out = _take_blocks(grid, owners)  # [*lead, G, B, *O, Co], then as map_grouped_output
    perm = _output_perm(nl, len(shape) - 3 - nl)
    return out.reshape(*out.shape[:-1], -1, cpg).transpose(np.argsort(perm))


def _owner(rng: list[tuple[int, int]], size: int) -> np.ndarray:
    """For each index of a dimension of ``size``, the last range holding it (-1: none)."""
    out = np.full(size, -1, np.int64)
    for k, (a, b) in enumerate(rng):
        out[a:b] = k
    return out


def _take_blocks(grid: np.ndarray, owners: list[np.ndarray]) -> np.ndarray:
    """``grid[owners[0][i0], owners[1][i1], ...]`` for every index (one axis at a time),
    -1 where an owner is -1."""
    out = grid
    for d, o in enumerate(owners):  # one axis at a time: whole rows copied
        out = np.take(out, np.maximum(o, 0), axis=d)
    for d, o in enumerate(owners):
        if (o < 0).any():
            sel = [slice(None)] * out.ndim
            sel[d] = o < 0
            out[tuple(sel)] = -1
    return out


# ------------------------------------------------------------------ operand layouts
#: The fewest bytes of an operand Poplibs puts on one tile ("to reduce the amount of
#: exchange code", ``mapActivationsOrWeights`` in ``lib/poplin/Convolution.cpp``,
#: graphcore/poplibs ``7eac0f26``): 128 for the activations, 256 for the weights.
MIN_INPUT_BYTES_PER_TILE = 128
MIN_WEIGHT_BYTES_PER_TILE = 256


def spread_by_use(block: np.ndarray, users: np.ndarray, grain: int, min_elems: int) -> np.ndarray:
    """The tile of every element of an operand, given in its memory order.

    ``block`` (any shape, the tensor's memory order) is the plan block each element
    belongs to and ``users[block]`` the tiles that read that block. A block's elements,
    taken in memory order, are cut into consecutive chunks of whole ``grain``-element
    grains and of at least ``min_elems`` elements, one chunk per user while there are
    enough elements, as Poplibs' ``TensorUseTracker::mapTensorsByUse`` does with
    ``mapActivationsOrWeights``' grain and minimum: a tile then holds a few long runs of
    the operand instead of one region per element, which keeps the exchange code small.
    """
    flat = np.ascontiguousarray(block, np.int64).reshape(-1).view()
    flat.flags.writeable = False  # however the caller holds it: one compiled _spread
    grain = max(int(grain), 1)
    counts = np.bincount(flat, minlength=users.shape[0])
    unit = -(-max(int(min_elems), 1) // grain) * grain
    chunks = np.clip(counts // unit, 1, users.shape[1])
    grains = np.maximum(-(-counts // grain), 1)
    users = _read_only(users)
    out = _spread(flat, users, grain, chunks.astype(np.int64), grains.astype(np.int64))
    return out.reshape(np.shape(block))


def _read_only(users: np.ndarray) -> np.ndarray:
    """``users`` as :func:`_spread` and :func:`_spread_terms` take them: C-contiguous
    int64 and read-only. Numba types a writable array apart from a read-only one, and
    a plan's tile table comes both ways (its own read-only array, or a writable copy
    made by a reshape), so each pass was compiled twice."""
    users = np.ascontiguousarray(users, np.int64).view()
    users.flags.writeable = False
    return users


@numba.njit(cache=True, nogil=True)
def _spread(flat, users, grain, chunks, grains):  # pragma: no cover - compiled
    """One pass in memory order: an element's rank within its block picks its chunk."""
    seen = np.zeros(users.shape[0], np.int64)
    out = np.empty(flat.size, np.int64)
    for i in range(flat.size):
        b = flat[i]
        r = seen[b]
        seen[b] = r + 1
        out[i] = users[b, (r // grain) * chunks[b] // grains[b]]
    return out


def _min_elems(params: ConvParams, min_bytes: int) -> int:
    """``min_bytes`` of the operand type in elements (rounded up)."""
    size = int(params.inputType.size)
    return -(-min_bytes // size)


def input_tiles(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every input element ``[G, B, *field, Ci]`` in the layout ``plan`` wants
    (:func:`input_tiles_in_memory_order` in the canonical order).
    """
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    fshape = [int(x) for x in params.inputFieldShape]
    nd = len(fshape)
    mem = input_tiles_in_memory_order(plan, params)
    # [G, Ci/icg, B, *F, icg] -> [G, B, *F, Ci/icg, icg] -> [G, B, *F, Ci]
    perm = [0, 2, *range(3, 3 + nd), 1, 3 + nd]
    return mem.transpose(perm).reshape(g, b, *fshape, ci)


def input_tiles_in_memory_order(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every input element ``[G, Ci / icg, B, *field, icg]`` (the memory
    order of :func:`grouped_input`) in the layout ``plan`` wants.

    Each input element belongs to a block the plan reads it in: along every field
    dimension the input is cut in proportion to the output blocks. A block's elements
    are spread over the tiles of its output-channel parts in memory-contiguous chunks
    of whole ``icg`` grains and at least 128 bytes (:func:`spread_by_use`), in the
    memory order ``[G][Ci / icg][B][*field][icg]`` of :func:`grouped_input`.
    """
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    fshape = [int(x) for x in params.inputFieldShape]
    nd = len(fshape)
    icg = _grouping(ci, plan.in_chans_per_group)
    parts = [int(p) for p in plan.parts]
    eff = expand_dims(params, plan.expanded_dims) if plan.expanded else params
    ktot = eff.inputChannelsPerConvGroup // ci  # (expanded kernel positions a channel)
    # the block of [G, Ci/icg, B, *F, icg] is the sum of one term per axis (the field
    # dimensions flattened, the channels' term over [Ci/icg, icg]): the block ids are
    # never made as an array (see _spread_terms)
    pb, pci = parts[1], parts[-1]
    pf = int(math.prod(parts[2 : 2 + nd]))
    gi = np.minimum(np.arange(g) // plan.blocks[0], parts[0] - 1)
    bi = np.minimum(np.arange(b) // plan.blocks[1], parts[1] - 1)
    # an input-channel serial split's iterations reuse the blocks: channel c is in
    # block (c mod the iteration's channels) of its iteration
    ci_i = np.minimum(
        np.arange(ci) % iteration_chans(plan, ci, "in") * ktot // plan.blocks[-1], parts[-1] - 1
    )
    f_term = np.zeros(1, np.int64)
    for d, f in enumerate(fshape):
        fi = np.minimum(np.arange(f) * parts[2 + d] // f, parts[2 + d] - 1)
        f_term = (f_term[:, None] * parts[2 + d] + fi[None, :]).reshape(-1)
    users = np.moveaxis(plan.tiles, -2, -1).reshape(-1, parts[-2])  # [block, Co part]
    if plan.kernel_split > 1:  # [block, kernel part, Co part]: a block's kernel parts too
        by_part = np.moveaxis(plan.tiles, [0, -2], [-2, -1])
        users = by_part.reshape(-1, plan.kernel_split * parts[-2])
    out = _spread_terms(
        (gi * pb * pf * pci).astype(np.int64),
        ci_i.reshape(ci // icg, icg).astype(np.int64),
        (bi * pf * pci).astype(np.int64),
        (f_term * pci).astype(np.int64),
        _read_only(users),
        icg,
        _min_elems(params, MIN_INPUT_BYTES_PER_TILE),
    )
    return out.reshape(g, ci // icg, b, *fshape, icg)


@numba.njit(cache=True, nogil=True)
def _spread_terms(tg, tc, tb, tf, users, grain, min_elems):  # pragma: no cover - compiled
    """:func:`spread_by_use` of an input whose block at ``[g, cg, b, f, c]`` (memory
    order, the field flattened) is ``tg[g] + tc[cg, c] + tb[b] + tf[f]``: one pass
    writes each element's block into the result and counts the blocks' elements, a
    second replaces each block by its user, moving to a block's next grain by a
    counter (no division per element)."""
    nb = users.shape[0]
    counts = np.zeros(nb, np.int64)
    out = np.empty(tg.shape[0] * tc.size * tb.shape[0] * tf.shape[0], np.int64)
    i = 0
    for g in range(tg.shape[0]):
        for cg in range(tc.shape[0]):
            for b in range(tb.shape[0]):
                for f in range(tf.shape[0]):
                    base = tg[g] + tb[b] + tf[f]
                    for c in range(tc.shape[1]):
                        k = base + tc[cg, c]
                        counts[k] += 1
                        out[i] = k
                        i += 1
    _by_user(out, counts, users, grain, min_elems)
    return out


@numba.njit(cache=True, nogil=True)
def _spread_weight_terms(tg, tc, tk, users, grain, min_elems):  # pragma: no cover - compiled
    """:func:`spread_by_use` of weights whose block at ``[g, co, ci, k, oc, ic]`` (the
    memory order ``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``, the kernel flattened)
    is ``tg[g] + tc[co, oc] + tk[ci, k, ic]``, as :func:`_spread_terms` does inputs."""
    counts = np.zeros(users.shape[0], np.int64)
    out = np.empty(tg.shape[0] * tc.size * tk.size, np.int64)
    i = 0
    for g in range(tg.shape[0]):
        for co in range(tc.shape[0]):
            for ci in range(tk.shape[0]):
                for k in range(tk.shape[1]):
                    for oc in range(tc.shape[1]):
                        base = tg[g] + tc[co, oc]
                        for ic in range(tk.shape[2]):
                            b = base + tk[ci, k, ic]
                            counts[b] += 1
                            out[i] = b
                            i += 1
    _by_user(out, counts, users, grain, min_elems)
    return out


@numba.njit(cache=True, nogil=True)
def _by_user(out, counts, users, grain, min_elems):  # pragma: no cover - compiled
    """Each element's block in ``out`` (memory order; ``counts`` its elements) replaced
    by its user, as :func:`spread_by_use` picks it."""
    nb = users.shape[0]
    unit = -(-max(min_elems, 1) // grain) * grain
    chunks = np.empty(nb, np.int64)
    grains = np.empty(nb, np.int64)
    for k in range(nb):
        chunks[k] = min(max(counts[k] // unit, 1), users.shape[1])
        grains[k] = max(-(-counts[k] // grain), 1)
    # per block: elements into its current grain, grains done, the current user
    into = np.zeros(nb, np.int64)
    done = np.zeros(nb, np.int64)
    user = users[:, 0].copy()
    for i in range(out.size):
        k = out[i]
        if into[k] == grain:
            into[k] = 0
            done[k] += 1
            user[k] = users[k, done[k] * chunks[k] // grains[k]]
        into[k] += 1
        out[i] = user[k]
    return out


def weight_tiles(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every weight ``[G, Co, Ci, *kernel]`` (:func:`weight_tiles_in_memory_order`
    in the canonical order)."""
    g, co, ci, kernel, _, _ = _weight_groups(params, plan)
    nk = len(kernel)
    mem = weight_tiles_in_memory_order(plan, params)
    # [G, Co/ocg, Ci/icg, *K, ocg, icg] -> [G, Co/ocg, ocg, Ci/icg, icg, *K] -> [G, Co, Ci, *K]
    perm = [0, 1, 3 + nk, 2, 4 + nk, *range(3, 3 + nk)]
    return mem.transpose(perm).reshape(g, co, ci, *kernel)


def weight_tiles_in_memory_order(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every weight ``[G, Co / ocg, Ci / icg, *kernel, ocg, icg]`` (the memory
    order of :func:`grouped_weights`).

    Each plan block's weights are spread over the tiles that use it in
    memory-contiguous chunks of whole ``ocg * icg`` grains and at least 256 bytes
    (:func:`spread_by_use`), in the memory order ``[G][Co / ocg][Ci / icg][*kernel]
    [ocg][icg]`` of :func:`grouped_weights`.
    """
    eff = expand_dims(params, plan.expanded_dims) if plan.expanded else params
    g, co, ci, kernel, ocg, icg = _weight_groups(params, plan)
    nk = len(kernel)
    parts = [int(p) for p in plan.parts]
    gblk = np.minimum(np.arange(g) // plan.blocks[0], parts[0] - 1)
    cor = co_ranges(plan, co)
    coblk = np.zeros(co, np.int64)
    for k, (_, o0, o1) in enumerate(cor):
        coblk[o0:o1] = k
    eci = int(eff.inputChannelsPerConvGroup)
    per = iteration_chans(plan, eci, "in")
    ciblk = np.minimum(np.arange(eci) % per // plan.blocks[-1], parts[-1] - 1)
    # the expanded input channel of weight (c, *k) is c * prod(expanded kernel) + k_e
    # (k_e: k's flat position in the expanded dimensions, row-major)
    ktot = int(math.prod(kernel))
    kprod = eci // ci
    kk = (expanded_kernel_offsets(params, plan.expanded_dims).reshape(-1) if plan.expanded
          else np.zeros(ktot, np.int64))  # fmt: skip
    ce = np.arange(ci).reshape(ci, 1) * kprod + kk.reshape(1, ktot)
    cik = ciblk[ce].reshape(ci // icg, icg, *kernel)  # [Ci/icg, icg, *K]
    cik = np.moveaxis(cik, 1, -1)  # [Ci/icg, *K, icg]
    shape = [g, co // ocg, ci // icg, *kernel, ocg, icg]
    gpart = gblk.reshape(g, *[1] * (len(shape) - 1))
    cpart = coblk.reshape(co // ocg, ocg)
    cpart = cpart.reshape(1, co // ocg, *[1] * (1 + nk), ocg, 1)
    kpart = cik.reshape(1, 1, ci // icg, *kernel, 1, icg)
    min_elems = _min_elems(params, MIN_WEIGHT_BYTES_PER_TILE)
    if plan.kernel_split == 1:  # the block a sum of three terms: never made as an array
        grid = np.moveaxis(plan.tiles, [0, -2, -1], [0, 1, 2]).reshape(
            parts[0], parts[-2], parts[-1], -1
        )
        users = grid[:, [oi for oi, _, _ in cor]].reshape(-1, grid.shape[-1])
        out = _spread_weight_terms(
            (gblk * len(cor) * parts[-1]).astype(np.int64),
            (cpart.reshape(co // ocg, ocg) * parts[-1]).astype(np.int64),
            np.ascontiguousarray(cik.reshape(ci // icg, ktot, icg), np.int64),
            _read_only(users), ocg * icg, min_elems,
        )  # fmt: skip
        return out.reshape(shape)
    # a weight's block also by its kernel row's part
    block = (gpart * len(cor) + cpart) * parts[-1] + kpart
    block = block * plan.kernel_split + _kernel_part_of_row(plan, kernel, len(shape))
    grid = np.moveaxis(plan.tiles, [1, -2, -1, 0], [0, 1, 2, 3]).reshape(
        parts[0], parts[-2], parts[-1] * plan.kernel_split, -1
    )
    block = np.broadcast_to(block, shape)
    users = grid[:, [oi for oi, _, _ in cor]].reshape(-1, grid.shape[-1])
    return spread_by_use(block, users, ocg * icg, min_elems)


def _kernel_part_of_row(plan: ConvPlan, kernel: list[int], rank: int) -> np.ndarray:
    """The kernel part of each row of the outer kernel dimension, shaped to broadcast
    over the weights' memory order ``[G, Co / ocg, Ci / icg, *kernel, ocg, icg]``."""
    of_row = np.zeros(kernel[0], np.int64)
    for k, (a, b) in enumerate(kernel_ranges(kernel[0], plan.kernel_split)):
        of_row[a:b] = k
    return of_row.reshape(1, 1, 1, kernel[0], *[1] * (rank - 4))


def _grouping(chans: int, per_group: int) -> int:
    """The plan's channel grouping where it divides ``chans`` (Poplibs pads the
    channels to a multiple instead; the largest common divisor keeps the view exact)."""
    return math.gcd(int(chans), max(int(per_group), 1)) or 1


def _weight_groups(params: ConvParams, plan: ConvPlan) -> tuple[int, int, int, list[int], int, int]:
    """``G, Co, Ci, kernel, ocg, icg`` of the weights' memory order
    ``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``."""
    g, co, ci = (params.numConvGroups, params.outputChannelsPerConvGroup,
                 params.inputChannelsPerConvGroup)  # fmt: skip
    ocg = _grouping(co, plan.out_chans_per_group)
    icg = _grouping(ci, plan.in_chans_per_group)
    return g, co, ci, [int(x) for x in params.kernelShape], ocg, icg


def grouped_input(
    graph: Graph,
    params: ConvParams,
    plan: ConvPlan,
    name: str,
    internal: bool = False,
    tiles: np.ndarray | None = None,
) -> Tensor:
    """A new input ``[G, B, C, *field]`` (the canonical view) laid out as the plan wants.

    Its memory order is Poplibs' ``[G][Ci / icg][B][*field][icg]`` (``createInputImpl``
    in ``lib/poplin/Convolution.cpp``, graphcore/poplibs ``7eac0f26``, with one conv
    group per group): the ``icg`` input channels a partial vertex reads together are
    innermost and a tile's window of one channel group is a few long runs. Its tiles
    are :func:`input_tiles`. With ``internal`` (a copy the convolution makes for
    itself), the view is made from its ids (:func:`grouped_ids`) and named after the
    variable, not derived by ``dimShuffle`` and ``reshape``, which copy an array of
    every id across. ``tiles``, when given, are :func:`input_tiles_in_memory_order` of
    ``plan`` already made (any shape of that size; a caller that tested the layout
    before making the tensor, as :func:`~.conv_rearrange.rearranged` does, has them).
    """
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    nd = len(field)
    icg = _grouping(ci, plan.in_chans_per_group)
    shape = [g, ci // icg, b, *field, icg]
    var = graph.addVariable(params.inputType, shape, name)
    if tiles is None:
        tiles = input_tiles_in_memory_order(plan, params)
    graph.mapElements(var, _memory_tiles(tiles, shape, name))  # no view's ids gathered
    # [G, Ci/icg, B, *F, icg] -> [G, B, *F, Ci/icg, icg] -> [G, B, *F, Ci]
    perm = [0, 2, *range(3, 3 + nd), 1, 3 + nd]
    if internal:
        ids = grouped_ids(int(var.flatten().slice(0, 1).index[0]), var.shape(), perm)
        view = Tensor(var.graph, params.inputType, ids, name)
    else:
        view = var.dimShuffle(perm).reshape([g, b, *field, ci])
    return view.dimShuffle([0, 1, 2 + nd, *range(2, 2 + nd)])


def grouped_weights(
    graph: Graph,
    params: ConvParams,
    plan: ConvPlan,
    name: str,
    tiles: np.ndarray | None = None,
    positions: np.ndarray | None = None,
) -> Tensor:
    """New weights ``[G, Co, Ci, *kernel]`` laid out as the plan wants.

    Their memory order is Poplibs' ``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``
    (``createWeightsImpl``, as :func:`grouped_input`): the weights of one partial
    vertex's output- and input-channel group are one run. Their tiles are
    :func:`weight_tiles`; ``tiles``, when given, are :func:`weight_tiles_in_memory_order`
    of ``plan`` already made (as :func:`grouped_input`'s). ``positions``, when given,
    are the memory position of each weight of ``[G, Co, Ci, *kernel]`` (the layout
    :func:`~.conv_rearrange.weights_layout` made): the view is then the variable's
    first id plus them, named after the variable (as :func:`grouped_input`'s internal
    view), not derived by ``dimShuffle`` and ``reshape``, which copy every id across
    through the transposed view.
    """
    g, co, ci, kernel, ocg, icg = _weight_groups(params, plan)
    nk = len(kernel)
    shape = [g, co // ocg, ci // icg, *kernel, ocg, icg]
    var = graph.addVariable(params.inputType, shape, name)
    # -> [G, Co/ocg, ocg, Ci/icg, icg, *K] -> [G, Co, Ci, *K]
    perm = [0, 1, 3 + nk, 2, 4 + nk, *range(3, 3 + nk)]
    if tiles is None:
        tiles = weight_tiles_in_memory_order(plan, params)
    graph.mapElements(var, _memory_tiles(tiles, shape, name))
    if positions is not None:
        if tuple(positions.shape) != (g, co, ci, *kernel):
            raise TensorError(
                f"'{name}': memory positions of shape {list(positions.shape)} for weights "
                f"of shape {[g, co, ci, *kernel]} (hint: pass weights_layout's of the plan)"
            )
        start = int(var.flatten().slice(0, 1).index[0])
        return Tensor(var.graph, params.inputType, positions + start, name)
    return var.dimShuffle(perm).reshape([g, co, ci, *kernel])


def _memory_tiles(tiles: np.ndarray, shape: Sequence[int], name: str) -> np.ndarray:
    """``tiles`` (one per memory position) as the variable of ``shape`` named ``name``;
    a clear error when their count is not the variable's."""
    tiles = np.asarray(tiles)
    if tiles.size != math.prod(shape):
        raise TensorError(
            f"'{name}': {tiles.size} tiles given for a laid-out operand of shape "
            f"{list(shape)} ({math.prod(shape)} elements); one tile per element is needed "
            "(hint: pass input_tiles_in_memory_order / weight_tiles_in_memory_order of "
            "the same plan)"
        )
    return tiles.reshape(shape)
