"""popnn pooling (``popnn::pooling``): max, average and sum pooling and their gradients.

Signatures and semantics follow ``include/popnn/Pooling.hpp`` and
``lib/popnn/Pooling.cpp`` (graphcore/poplibs @7eac0f26):

* tensors at the interface are ``[batch, channels, *field]``; any number of field
  dimensions (1-D, 2-D, N-D);
* ``inputTruncationOrPaddingLower/Upper`` pad (> 0) or truncate (< 0) each field
  dimension; the output size is ``(in + lower + upper - kernel) // stride + 1``;
* MAX ignores padding (padding is not a value, it is skipped); an output whose window
  lies wholly in the padding is 0 (the pooled tensor is zeroed first, as Poplibs);
* AVG divides by the number of **non-padding** inputs in the window (the count of
  kernel positions that land on the input, as ``getNumKernelPositionsUsedForOutputs``
  and the vertices' scale factors count them), so padding does not count; when the
  kernel equals the field with no padding it is ``popops.reduce`` ADD scaled by
  ``1 / kernel size``, as ``substPoolingWithReduction``;
* the MAX gradient goes, in full, to **every** input equal to the maximum (ties all
  receive it, as ``MaxPoolingGrad``); with ``useScaledVariant`` it is first divided by
  the number of such inputs (``MaxPoolingGradientScale``), so ties share it.

Vertices and planning
---------------------
As ``PoolVertices.cpp``: per tile one supervisor vertex (``popnn::MaxPooling<T>``,
``popnn::SumPooling<T>`` for AVG and SUM, ``popnn::MaxPoolingGrad<T>``,
``popnn::MaxPoolingGradientScale<T>``) with worklists built by
``partitionPartialByContext`` and ``createPartitions`` (output rows split evenly over
the 6 workers, one worklist entry per partial row and contributing kernel position,
entries sorted by ``(out, in, n)``); AVG with differing counts on a tile adds
``popnn::SelectiveScaling<T>`` in a second compute set ``Scale``, else the vertex's
``scale`` is ``1 / count``. The forward pass folds the batch into the channels
(``gatherDimsTransformIn``). Each partition goes to the not yet used tile that holds
most of its input (``poolUseIntrospectiveMapping``, the default). Backward passes are
the transposed pass (``getGradientParams``: the pass input dilated by the stride, so
worklist entries step ``stride`` outputs apart).

Not modelled (stated in ``docs/estimators.md``): the popsolver plan search
(``PoolPlan.cpp``). ipusim splits channel groups, then batch, then the output field
dimensions in order, greedily over the tiles, with ``chansPerGroup`` the largest
divisor of the channels not above 8 grains (a grain is the 64-bit vector width; a
multiple of the grain when one divides). The planner's transforms (flattening
dimensions into channels, combining spatial dimensions) and channel padding are not
done; a group that is not a whole number of grains is estimated as the padded group
(``chansPerGroupD = ceil(chansPerGroup / vectorWidth)``). The optional ``optimizeForSpeed``
convolution path is not taken. Worklists and constants sit on the vertex's tile.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.popnn import estimators as est
from poplar_api.popnn import pool_vertices as pv
from poplar_api.popnn.mapping import check_sequence, element_tiles, place, view
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, UNSIGNED_INT, UNSIGNED_SHORT, Type

__all__ = [
    "PoolParams",
    "PoolingType",
    "getOutputFieldShape",
    "pool",
    "poolInputGradient",
]

#: Maximum channel grains per group (``maxGrainsPerChanGroup`` of ``getPlan``).
MAX_GRAINS_PER_GROUP = 8
_OPTIONS = ("poolUseIntrospectiveMapping", "optimizeForSpeed", "useFloatPartialsWhereBeneficial")


class PoolingType(enum.Enum):
    """Pooling type (``popnn::PoolingType``)."""

    MAX = "MAX"
    AVG = "AVG"
    SUM = "SUM"


def _int_list(value: Any, what: str, fn: str) -> list[int]:
    try:
        items = list(value)
    except TypeError:
        raise GraphError(f"{fn}: {what} must be a list of ints, got {value!r}") from None
    for x in items:
        if isinstance(x, bool) or not isinstance(x, int | np.integer):
            raise GraphError(f"{fn}: {what} must be a list of ints, got {value!r}")
    return [int(x) for x in items]


class PoolParams:
    """Parameters of a pooling (``popnn::pooling::PoolParams``); arguments as Poplibs.

    Parameters
    ----------
    poolingType
        :class:`PoolingType`.
    inputFieldShape
        Field shape, without batch and channels.
    kernelShape, stride
        Per field dimension; both at least 1.
    inputTruncationOrPaddingLower, inputTruncationOrPaddingUpper
        Per field dimension: padding (> 0) or truncation (< 0) at the start / end.
    numChannels, batchSize
        Channels and batch size of the input.
    dType
        FLOAT or HALF.
    """

    def __init__(
        self,
        poolingType: PoolingType,
        inputFieldShape: Sequence[int],
        kernelShape: Sequence[int],
        stride: Sequence[int],
        inputTruncationOrPaddingLower: Sequence[int],
        inputTruncationOrPaddingUpper: Sequence[int],
        numChannels: int,
        batchSize: int,
        dType: Type,
    ) -> None:
        fn = "PoolParams"
        if not isinstance(poolingType, PoolingType):
            raise GraphError(
                f"{fn}: poolingType {poolingType!r} is not a PoolingType; use "
                f"PoolingType.MAX, AVG or SUM"
            )
        self.poolingType = poolingType
        self.inputFieldShape = _int_list(inputFieldShape, "inputFieldShape", fn)
        self.kernelShape = _int_list(kernelShape, "kernelShape", fn)
        self.stride = _int_list(stride, "stride", fn)
        self.inputTruncationOrPaddingLower = _int_list(
            inputTruncationOrPaddingLower, "inputTruncationOrPaddingLower", fn
        )
        self.inputTruncationOrPaddingUpper = _int_list(
            inputTruncationOrPaddingUpper, "inputTruncationOrPaddingUpper", fn
        )
        for what, x in (("numChannels", numChannels), ("batchSize", batchSize)):
            if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 1:
                raise GraphError(f"{fn}: {what} must be a positive int, got {x!r}")
        self.numChannels = int(numChannels)
        self.batchSize = int(batchSize)
        if dType not in (FLOAT, HALF):
            raise TypeMismatchError(
                f"{fn}: dType {getattr(dType, 'name', dType)!r} is not supported; pooling "
                f"needs float or half"
            )
        self.dType = dType

    def getNumFieldDims(self) -> int:
        """Number of field dimensions."""
        return len(self.inputFieldShape)

    def getOutputFieldShape(self) -> list[int]:
        """Output field shape; checks the parameters (see :func:`getOutputFieldShape`)."""
        return [d.out for d in _dims(self, "getOutputFieldShape")]

    def __str__(self) -> str:
        return (
            f"{{ poolingType={self.poolingType.name.lower()}\n"
            f"  inputFieldShape={self.inputFieldShape}\n"
            f"  kernelShape={self.kernelShape}\n"
            f"  stride={self.stride}\n"
            f"  inputTruncationOrPaddingLower={self.inputTruncationOrPaddingLower}\n"
            f"  inputTruncationOrPaddingUpper={self.inputTruncationOrPaddingUpper}\n"
            f"  numChannels={self.numChannels}\n"
            f"  batchSize={self.batchSize}\n"
            f"  dType={self.dType.name} }}\n"
        )

    def __repr__(self) -> str:
        return (
            f"PoolParams(PoolingType.{self.poolingType.name}, {self.inputFieldShape}, "
            f"{self.kernelShape}, {self.stride}, {self.inputTruncationOrPaddingLower}, "
            f"{self.inputTruncationOrPaddingUpper}, {self.numChannels}, {self.batchSize}, "
            f"{self.dType.name})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PoolParams) and repr(self) == repr(other)

    __hash__ = None  # type: ignore[assignment]


def getOutputFieldShape(params: PoolParams) -> list[int]:
    """Output field shape of ``params`` (``popnn::pooling::getOutputFieldShape``).

    Raises
    ------
    GraphError
        Mismatched dimension counts, a kernel or stride below 1, a kernel larger than
        the padded input, or padding / truncation that leaves no output.
    """
    if not isinstance(params, PoolParams):
        raise GraphError(f"getOutputFieldShape: params must be a PoolParams, got {params!r}")
    return params.getOutputFieldShape()


@dataclass(frozen=True)
class _Dim:
    """One field dimension of the forward pooling."""

    size: int  # input size
    kernel: int
    stride: int
    lower: int  # padding (> 0) or truncation (< 0)
    upper: int

    @property
    def out(self) -> int:
        return (self.size + self.lower + self.upper - self.kernel) // self.stride + 1

    @property
    def valid_in(self) -> tuple[int, int]:
        """Range of input indices not truncated away."""
        return max(0, -self.lower), self.size - max(0, -self.upper)


def _dims(params: PoolParams, fn: str) -> list[_Dim]:
    p = params
    n = len(p.inputFieldShape)
    lengths = {
        "kernelShape": len(p.kernelShape),
        "stride": len(p.stride),
        "inputTruncationOrPaddingLower": len(p.inputTruncationOrPaddingLower),
        "inputTruncationOrPaddingUpper": len(p.inputTruncationOrPaddingUpper),
    }
    if n == 0:
        raise GraphError(f"{fn}: inputFieldShape is empty; pooling needs at least 1 field dim")
    bad = {k: v for k, v in lengths.items() if v != n}
    if bad:
        raise GraphError(
            f"{fn}: mismatched window dimensions: inputFieldShape has {n} dims but "
            + ", ".join(f"{k} has {v}" for k, v in bad.items())
        )
    out = []
    for d in range(n):
        size, k, s = p.inputFieldShape[d], p.kernelShape[d], p.stride[d]
        lo, hi = p.inputTruncationOrPaddingLower[d], p.inputTruncationOrPaddingUpper[d]
        if size < 1:
            raise GraphError(f"{fn}: inputFieldShape[{d}] = {size}; it must be >= 1")
        if k < 1:
            raise GraphError(f"{fn}: kernelShape[{d}] = {k}; it must be >= 1")
        if s < 1:
            raise GraphError(f"{fn}: stride[{d}] = {s}; it must be >= 1")
        padded = size + lo + hi
        if max(0, -lo) + max(0, -hi) >= size or padded <= 0:
            raise GraphError(
                f"{fn}: inputTruncationOrPaddingLower[{d}] = {lo} and "
                f"inputTruncationOrPaddingUpper[{d}] = {hi} truncate all {size} inputs of "
                f"field dim {d}; the output would be empty"
            )
        if k > padded:
            raise GraphError(
                f"{fn}: kernelShape[{d}] = {k} is larger than the padded input of field dim "
                f"{d} ({size} + {lo} + {hi} = {padded}); the output would be empty"
            )
        out.append(_Dim(size, k, s, lo, hi))
    return out


# ----------------------------------------------------------------- pass geometry


@dataclass
class _Pass:
    """A pooling pass as a convolution-shaped loop: for pass output index ``x`` and
    kernel index ``k`` of each dim, ``valid[d][x, k]`` and the pass input index
    ``src[d][x, k]``; innermost steps ``out_step`` / ``in_step`` per worklist element."""

    out_shape: list[int]
    in_shape: list[int]
    kernel: list[int]
    valid: list[np.ndarray]
    src: list[np.ndarray]
    out_step: int
    in_step: int


def _fwd_pass(dims: list[_Dim]) -> _Pass:
    valid, src = [], []
    for d in dims:
        x = np.arange(d.out)[:, None]
        k = np.arange(d.kernel)[None, :]
        i = x * d.stride + k - d.lower
        a, b = d.valid_in
        valid.append((i >= a) & (i < b))
        src.append(i)
    return _Pass(
        [d.out for d in dims], [d.size for d in dims], [d.kernel for d in dims],
        valid, src, 1, dims[-1].stride,
    )  # fmt: skip


def _bwd_pass(dims: list[_Dim]) -> _Pass:
    valid, src = [], []
    for d in dims:
        x = np.arange(d.size)[:, None]
        k = np.arange(d.kernel)[None, :]
        t = x + d.lower - k
        o = np.floor_divide(t, d.stride)
        a, b = d.valid_in
        valid.append((x >= a) & (x < b) & (t % d.stride == 0) & (o >= 0) & (o < d.out))
        src.append(o)
    return _Pass(
        [d.size for d in dims], [d.out for d in dims], [d.kernel for d in dims],
        valid, src, dims[-1].stride, 1,
    )  # fmt: skip


def _chans_per_group(channels: int, grain: int) -> int:
    """Largest divisor of ``channels`` up to ``MAX_GRAINS_PER_GROUP`` grains, preferring
    multiples of ``grain``."""
    limit = MAX_GRAINS_PER_GROUP * grain
    divisors = [c for c in range(1, min(channels, limit) + 1) if channels % c == 0]
    whole = [c for c in divisors if c % grain == 0]
    return max(whole) if whole else max(divisors)


def _splits(num_tiles: int, sizes: list[int]) -> list[int]:
    """Greedy split of ``sizes`` (chan groups, batch, field dims) over the tiles."""
    out, rem = [], num_tiles
    for s in sizes:
        k = max(1, min(s, rem))
        out.append(k)
        rem //= k
    return out


def _ranges(size: int, split: int) -> list[tuple[int, int]]:
    return [((i * size) // split, ((i + 1) * size) // split) for i in range(split)]


@dataclass
class _Operand:
    """Element ids of a tensor in internal layout ``[channels, batch, *field]`` and the
    window (``"in"`` or ``"out"`` of the pass) a vertex field takes from it."""

    field: str
    ids: np.ndarray
    window: str


class _Builder:
    """Adds one pooling pass (``tilePartitions`` and ``generateVertices``)."""

    def __init__(self, graph: Graph, name: str, typ: Type, kind: str, ps: _Pass, cpg: int):
        self.graph, self.name, self.typ, self.kind, self.ps = graph, name, typ, kind, ps
        self.cpg = cpg
        target = graph.getTarget()
        self.workers = target.getNumWorkerContexts()
        self.vw = target.getVectorWidth(typ)
        self.num_tiles = target.getNumTiles()
        # innermost dim: prefix counts and next valid index per kernel index
        v = ps.valid[-1].T.astype(np.int64)  # [K, Out]
        self.count = np.concatenate([np.zeros((v.shape[0], 1), np.int64), v.cumsum(1)], 1)
        nxt = np.full((v.shape[0], v.shape[1] + 1), v.shape[1], np.int64)
        for x in range(v.shape[1] - 1, -1, -1):
            nxt[:, x] = np.where(v[:, x] > 0, x, nxt[:, x + 1])
        self.next = nxt
        self.kidx = np.array(np.unravel_index(np.arange(int(np.prod(ps.kernel))), ps.kernel))

    # -------------------------------------------------------------- one partition
    def rows(self, nb: int, shape: list[int]) -> tuple[np.ndarray, ...]:
        """``partitionPartialByContext``: (context, batch, active row, xBegin, xEnd)."""
        row_len = shape[-1]
        active = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        total = nb * active * row_len
        parts = []
        for c in range(self.workers):
            e0, e1 = (c * total) // self.workers, ((c + 1) * total) // self.workers
            if e0 == e1:
                continue
            r = np.arange(e0 // row_len, (e1 - 1) // row_len + 1)
            xb = np.maximum(e0, r * row_len) - r * row_len
            xe = np.minimum(e1, (r + 1) * row_len) - r * row_len
            parts.append((np.full(r.size, c), r // active, r % active, xb, xe))
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))

    def entries(self, nb: int, begin: list[int], end: list[int]) -> dict[str, Any] | None:
        ps = self.ps
        shape = [e - b for b, e in zip(begin, end, strict=True)]
        ctx, bi, arow, xb, xe = self.rows(nb, shape)
        outer = (
            np.array(np.unravel_index(arow, shape[:-1]))
            if len(shape) > 1
            else np.zeros((0, arow.size), np.int64)
        )
        outer = outer + np.array(begin[:-1], np.int64)[:, None]
        kin = self.kidx[-1]
        ok = np.ones((arow.size, kin.size), bool)
        for d in range(len(shape) - 1):
            ok &= ps.valid[d][outer[d][:, None], self.kidx[d][None, :]]
        xg0, xg1 = xb + begin[-1], xe + begin[-1]
        cnt = self.count[kin[None, :], xg1[:, None]] - self.count[kin[None, :], xg0[:, None]]
        ok &= cnt > 0
        r, k = np.nonzero(ok)
        if r.size == 0:
            return None
        n = cnt[r, k]
        first = self.next[kin[k], xg0[r]]
        out_idx = [outer[d][r] for d in range(len(shape) - 1)] + [first]
        in_idx = [ps.src[d][outer[d][r], self.kidx[d][k]] for d in range(len(shape) - 1)]
        in_idx.append(ps.src[-1][first, kin[k]])
        out_w = [np.ones_like(n)] * (len(shape) - 1) + [(n - 1) * ps.out_step + 1]
        in_w = [np.ones_like(n)] * (len(shape) - 1) + [(n - 1) * ps.in_step + 1]
        return {"ctx": ctx[r], "row": r, "b": bi[r], "out": out_idx, "in": in_idx,
                "out_w": out_w, "in_w": in_w, "n": n, "slice": shape}  # fmt: skip

    def window(self, e: dict[str, Any], which: str) -> tuple[list[int], list[int], np.ndarray]:
        """Bounding box ``(begin, shape)`` of the field the entries use and each entry's
        flat position in ``[batch, *box]``."""
        idx, w = e[which], e[f"{which}_w"]
        lo = [int(i.min()) for i in idx]
        hi = [int((i + ww).max()) for i, ww in zip(idx, w, strict=True)]
        shape = [h - low for low, h in zip(lo, hi, strict=True)]
        pos = np.ravel_multi_index(
            [e["b"]] + [i - low for i, low in zip(idx, lo, strict=True)],
            [self._nb, *shape],
        )
        return lo, shape, pos

    def worklists(self, e: dict[str, Any], out_pos: np.ndarray, in_pos: np.ndarray):
        order = np.lexsort((e["n"], in_pos, out_pos, e["row"]))
        row, op, ip, n = e["row"][order], out_pos[order], in_pos[order], e["n"][order]
        ctx = e["ctx"][order]
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        ends = np.r_[starts[1:], row.size]
        row_ctx = ctx[starts]
        start_pos = np.cumsum(np.bincount(row_ctx, minlength=self.workers))
        base = np.stack([op[starts], ip[starts]], 1).ravel()
        rel_o = op - np.repeat(op[starts], ends - starts)
        rel_i = ip - np.repeat(ip[starts], ends - starts)
        trip = np.stack([rel_o, rel_i, n - 1], 1) & 0xFFFF
        lists = [trip[s:t].ravel() for s, t in zip(starts, ends, strict=True)]
        return start_pos, base, lists, starts, ends, op, n

    # ------------------------------------------------------------------ the pass
    def build(
        self,
        operands: list[_Operand],
        prog: _program.Sequence,
        intro_ids: np.ndarray,
        avg: bool = False,
        scale_value: float = 1.0,
    ) -> None:
        graph, ps, cpg, typ = self.graph, self.ps, self.cpg, self.typ
        chans, batch = operands[0].ids.shape[:2]
        ng = chans // cpg
        sizes = [ng, batch, *ps.out_shape]
        split = _splits(self.num_tiles, sizes)
        # introspective tile choice (tilePartitions / getTileToMap)
        owner = element_tiles(graph, view(graph, typ, intro_ids.ravel(), self.name), self.name)
        owner = owner.reshape(intro_ids.shape) - graph._tile_lo
        per_tile = np.bincount(owner.ravel(), minlength=self.num_tiles)
        map_order = list(np.argsort(per_tile, kind="stable"))
        cs_pool = graph.addComputeSet(f"{self.name}/Pool")
        cs_scale = None
        zero_required = False
        cls = pv.pool_vertex(self.kind, typ)
        out_field_ranges = [_ranges(s, k) for s, k in zip(ps.out_shape, split[2:], strict=True)]
        for b0, b1 in _ranges(batch, split[1]):
            for g0, g1 in _ranges(ng, split[0]):
                for combo in np.ndindex(*split[2:]):
                    begin = [out_field_ranges[d][i][0] for d, i in enumerate(combo)]
                    end = [out_field_ranges[d][i][1] for d, i in enumerate(combo)]
                    if b1 == b0 or g1 == g0 or any(e == b for b, e in zip(begin, end, strict=True)):
                        continue
                    self._nb = b1 - b0
                    e = self.entries(b1 - b0, begin, end)
                    in_box = self._input_box(begin, end)
                    region = owner[g0 * cpg : g1 * cpg, b0:b1]
                    sub = region[(slice(None), slice(None), *[slice(a, b) for a, b in in_box])]
                    counts = np.bincount(sub.ravel(), minlength=self.num_tiles)
                    best = max(range(len(map_order)), key=lambda j: (counts[map_order[j]], -j))
                    tile = int(map_order.pop(best))
                    if e is None:
                        zero_required = True
                        continue
                    olo, oshape, opos = self.window(e, "out")
                    ilo, ishape, ipos = self.window(e, "in")
                    if int(np.prod(oshape)) != int(np.prod(e["slice"])):
                        zero_required = True
                    if (
                        max(self._nb * int(np.prod(oshape)), self._nb * int(np.prod(ishape)))
                        > 0xFFFF
                    ):
                        raise GraphError(
                            f"{self.name}: a tile's pooling window has more than 65535 field "
                            f"positions (unsigned short worklist offsets); use more tiles"
                        )
                    sp, base, lists, _, _, op_sorted, n_sorted = self.worklists(e, opos, ipos)
                    conns = self._connect(operands, g0, g1, b0, b1, olo, oshape, ilo, ishape, tile)
                    init_info = self._nb * int(np.prod(oshape))
                    nchg = g1 - g0
                    params = [init_info, nchg - 1, cpg, ps.in_step, ps.out_step,
                              self._nb * int(np.prod(ishape)) * cpg, init_info * cpg]  # fmt: skip
                    conns["startPos"] = self._const(UNSIGNED_SHORT, sp, tile, "ContextStartPos")
                    conns["offsetBase"] = self._const(UNSIGNED_SHORT, base, tile, "OffsetBase")
                    wl = self._const(UNSIGNED_SHORT, np.concatenate(lists), tile, "worklist")
                    bounds = np.r_[0, np.cumsum([x.size for x in lists])]
                    conns["workList"] = [
                        wl.slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)
                    ]
                    conns["params"] = self._const(UNSIGNED_INT, params, tile, "params")
                    scale = scale_value
                    if avg:
                        scale, cs_scale = self._avg_scale(
                            e, op_sorted, n_sorted, conns["out"], nchg, tile, cs_scale
                        )
                    if self.kind == "sum":
                        conns["scale"] = self._const(typ, [scale], tile, "scale")
                    v = graph.addVertex(cs_pool, cls, conns)
                    place(graph, v, tile + graph._tile_lo)
                    graph.setPerfEstimate(v, est.pooling_cycles(
                        init_info, -(-cpg // self.vw), nchg - 1, sp.tolist(),
                        [x.tolist() for x in lists], is_max=self.kind != "sum",
                        is_bwd=self.kind == "maxGrad", workers=self.workers,
                    ))  # fmt: skip
        out_t = next(o for o in operands if o.field == "out")
        if zero_required:
            from poplar_api.popops.elementwise import zero

            zero(graph, view(graph, typ, out_t.ids.ravel(), self.name), prog, f"{self.name}/zero")
        prog.add(_program.Execute(cs_pool))
        if cs_scale is not None:
            prog.add(_program.Execute(cs_scale))

    def _input_box(self, begin: list[int], end: list[int]) -> list[tuple[int, int]]:
        """Input range of an output slice over all kernel positions (``getInputRange``)."""
        out = []
        for d in range(len(begin)):
            valid = self.ps.valid[d][begin[d] : end[d]]
            src = self.ps.src[d][begin[d] : end[d]][valid]
            out.append((int(src.min()), int(src.max()) + 1) if src.size else (0, 0))
        return out

    def _const(self, type_: Type, values: Any, tile: int, what: str) -> Tensor:
        values = np.asarray(values)
        t = self.graph.addConstant(type_, [values.size], values, f"{self.name}/{what}")
        self.graph.setTileMapping(t, tile)
        return t

    def _window_ids(self, ids, g0, g1, b0, b1, lo, shape) -> np.ndarray:
        """Ids of ``[g, b, *box, c]`` of an internal-layout id array."""
        cpg = self.cpg
        sub = ids[g0 * cpg : g1 * cpg, b0:b1][
            (slice(None), slice(None), *[slice(a, a + s) for a, s in zip(lo, shape, strict=True)])
        ]
        sub = sub.reshape(g1 - g0, cpg, *sub.shape[1:])
        return np.moveaxis(sub, 1, -1)

    def _connect(self, operands, g0, g1, b0, b1, olo, oshape, ilo, ishape, tile) -> dict:
        conns: dict[str, Any] = {}
        for o in operands:
            lo, shape = (olo, oshape) if o.window == "out" else (ilo, ishape)
            w = self._window_ids(o.ids, g0, g1, b0, b1, lo, shape)
            if o.field == "out":
                self.graph._state.space(self.typ).tile[w.ravel()] = tile + self.graph._tile_lo
                self._out_groups = [w[i].ravel() for i in range(w.shape[0])]
            conns[o.field] = view(self.graph, self.typ, w.ravel(), self.name)
        return conns

    def _avg_scale(self, e, op_sorted, n_sorted, out_view, nchg, tile, cs_scale):
        """Per-output kernel-position counts; a common ``1 / count`` scale, or a
        ``SelectiveScaling`` vertex (returns ``(scale, scale compute set)``)."""
        positions = int(self._out_groups[0].size // self.cpg)
        # each entry covers the output range [out, out + outWidth) (createWorklists)
        width = (n_sorted - 1) * self.ps.out_step + 1
        cover = np.zeros(positions + 1, np.int64)
        np.add.at(cover, op_sorted, 1)
        np.add.at(cover, op_sorted + width, -1)
        counts = np.cumsum(cover)[:-1]
        used = np.flatnonzero(counts)
        values = np.unique(counts[used])
        if values.size <= 1:
            return (1.0 / float(values[0]) if values.size else 1.0), cs_scale
        # runs of equal count (interval_map regions), split over the workers
        runs = np.flatnonzero(np.r_[True, np.diff(counts) != 0])
        run_end = np.r_[runs[1:], counts.size]
        keep = counts[runs] != 0
        r0, r1 = runs[keep], run_end[keep]
        total = int((r1 - r0).sum())
        lists = []
        acc = np.r_[0, np.cumsum(r1 - r0)]
        for c in range(self.workers):
            lo_e, hi_e = (c * total) // self.workers, ((c + 1) * total) // self.workers
            trip = []
            for a, s0, s1 in zip(r0, acc[:-1], acc[1:], strict=True):
                lo_x, hi_x = max(lo_e, s0), min(hi_e, s1)
                if lo_x < hi_x:
                    trip += [int(a + lo_x - s0), int(hi_x - lo_x), int(counts[a])]
            lists.append(np.asarray(trip, np.int64))
        if cs_scale is None:
            cs_scale = self.graph.addComputeSet(f"{self.name}/Scale")
        data = np.concatenate(lists) if any(x.size for x in lists) else np.zeros(0, np.int64)
        wl = self._const(UNSIGNED_SHORT, data, tile, "scaleWorklist") if data.size else None
        bounds = np.r_[0, np.cumsum([x.size for x in lists])]
        scale_lists = [wl.slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        groups = [view(self.graph, self.typ, g, self.name) for g in self._out_groups]
        conns = {
            "scaleWorklist": scale_lists,
            "inOut": groups,
            "params": self._const(UNSIGNED_INT, [nchg, self.cpg], tile, "scalingParams"),
        }
        v = self.graph.addVertex(cs_scale, pv.selective_scaling_vertex(self.typ), conns)
        place(self.graph, v, tile + self.graph._tile_lo)
        self.graph.setPerfEstimate(v, est.SELECTIVE_SCALING_CYCLES)
        return 1.0, cs_scale


# ------------------------------------------------------------------ public API


def _check_common(graph: object, params: object, prog: object, options: object, fn: str):
    if not isinstance(graph, Graph):
        raise GraphError(f"{fn}: graph must be a poplar_api Graph, got {type(graph).__name__}")
    if not isinstance(params, PoolParams):
        raise GraphError(f"{fn}: params must be a PoolParams, got {type(params).__name__}")
    dims = _dims(params, fn)
    check_sequence(prog, fn)
    if options is not None:
        if not isinstance(options, dict):
            raise GraphError(f"{fn}: options must be a dict, got {type(options).__name__}")
        for key, value in options.items():
            if key not in _OPTIONS:
                raise GraphError(
                    f"{fn}: unknown pooling option {key!r}; known: {', '.join(_OPTIONS)}"
                )
            if str(value).lower() not in ("true", "false"):
                raise GraphError(f"{fn}: option {key}={value!r} must be true or false")
    return dims


def _check_tensor(graph: Graph, t: object, what: str, shape: list[int], typ: Type, fn: str):
    if not isinstance(t, Tensor) or t.graph is not graph._state:
        raise GraphError(f"{fn}: {what} must be a Tensor of this graph, got {t!r}")
    if t.rank() != len(shape):
        raise GraphError(
            f"{fn}: {what} '{t.name}' has rank {t.rank()} (shape {t.shape()}); it must be "
            f"[batch, channels, *field] of rank {len(shape)} = {shape}"
        )
    if t.shape() != shape:
        raise GraphError(
            f"{fn}: {what} '{t.name}' has shape {t.shape()}; the pooling parameters need "
            f"{shape} ([batchSize, numChannels, *field])"
        )
    if t.elementType() != typ:
        raise TypeMismatchError(
            f"{fn}: {what} '{t.name}' is {t.elementType().name}; params.dType is {typ.name}"
        )
    element_tiles(graph, t, f"{fn}: {what}")
    return t


def _layer_name(params: PoolParams, pas: str) -> str:
    kernel = "x".join(str(k) for k in params.kernelShape)
    return f"{params.poolingType.name.lower()}Pool{kernel}/{pas}"


def _matches_reduction(params: PoolParams) -> bool:
    """``detectMatchingFieldAndKernel``: kernel == field and no padding/truncation."""
    return params.kernelShape == params.inputFieldShape and not any(
        params.inputTruncationOrPaddingLower + params.inputTruncationOrPaddingUpper
    )


def _internal(t: Tensor, fold_batch: bool) -> np.ndarray:
    """Element ids in internal layout ``[channels, batch, *field]``."""
    ids = t.flat_index().reshape(t.shape())
    if fold_batch:  # gatherDimsTransformIn: batch folded into the channels
        return ids.reshape(ids.shape[0] * ids.shape[1], 1, *ids.shape[2:])
    return np.swapaxes(ids, 0, 1)


def _new_output(graph: Graph, typ: Type, shape: list[int], name: str) -> Tensor:
    from poplar_api.poputil import mapTensorLinearly

    out = graph.addVariable(typ, shape, name)
    mapTensorLinearly(graph, out)
    return out


def pool(
    graph: Graph,
    params: PoolParams,
    in_: Tensor,
    prog: _program.Sequence,
    debugPrefix: str = "",
    options: dict[str, Any] | None = None,
) -> Tensor:
    """Pool ``in_`` (``[batch, channels, *field]``) over its field dimensions.

    Returns a new ``[batch, channels, *outField]`` tensor; the compute sets are added
    to ``prog``. MAX skips padding; AVG divides by the non-padding inputs of each
    window; SUM adds them.

    Raises
    ------
    GraphError
        Bad parameters (the message names the argument and value), or ``in_`` of the
        wrong rank or shape, or not mapped.
    TypeMismatchError
        ``in_`` is not of ``params.dType``.
    """
    fn = "pool"
    dims = _check_common(graph, params, prog, options, fn)
    in_shape = [params.batchSize, params.numChannels, *params.inputFieldShape]
    _check_tensor(graph, in_, "in", in_shape, params.dType, fn)
    typ = params.dType
    name = (
        f"{debugPrefix}/{_layer_name(params, 'Fwd')}" if debugPrefix else _layer_name(params, "Fwd")
    )
    ptype = params.poolingType
    if _matches_reduction(params):  # substPoolingWithReduction
        from poplar_api.popops.reduce import Operation, ReduceParams, reduce

        kernel = int(np.prod(params.kernelShape))
        rp = (
            ReduceParams(Operation.MAX)
            if ptype is PoolingType.MAX
            else ReduceParams(
                Operation.ADD, scale=1.0 / kernel if ptype is PoolingType.AVG else 1.0
            )
        )
        red = reduce(graph, in_, list(range(2, in_.rank())), rp, prog, name)
        return red.reshape([params.batchSize, params.numChannels] + [1] * len(dims))
    out_shape = [params.batchSize, params.numChannels, *[d.out for d in dims]]
    out = _new_output(graph, typ, out_shape, f"{name}/out")
    vw = graph.getTarget().getVectorWidth(typ)
    chans = params.batchSize * params.numChannels
    kind = "max" if ptype is PoolingType.MAX else "sum"
    b = _Builder(graph, name, typ, kind, _fwd_pass(dims), _chans_per_group(chans, vw))
    in_ids = _internal(in_, True)
    operands = [_Operand("in", in_ids, "in"), _Operand("out", _internal(out, True), "out")]
    b.build(operands, prog, in_ids, avg=ptype is PoolingType.AVG)
    return out


def _avg_counts(dims: list[_Dim]) -> np.ndarray:
    """Non-padding inputs of every output window (``getNumKernelPositionsUsedForOutputs``)."""
    counts = np.ones([d.out for d in dims], np.float64)
    for i, p in enumerate(_fwd_pass(dims).valid):
        shape = [1] * len(dims)
        shape[i] = p.shape[0]
        counts = counts * p.sum(1).reshape(shape)
    return counts


def _grad_impl(graph, params, dims, in_, pooled, grad, output, scaled, prog, name) -> None:
    """``poolInputGradientImpl``: the input gradient into ``output``."""
    from poplar_api import popops

    typ = params.dType
    vw = graph.getTarget().getVectorWidth(typ)
    cpg = _chans_per_group(params.numChannels, vw)
    bwd = _bwd_pass(dims)
    ptype = params.poolingType
    if ptype is not PoolingType.MAX:
        if _matches_reduction(params):  # substPoolingGradientWithBroadcast
            src = grad
            if ptype is PoolingType.AVG:
                scale = 1.0 / float(np.prod(params.kernelShape))
                src = popops.mul(graph, grad, scale, prog, name)
            ids = np.broadcast_to(src.flat_index().reshape(src.shape()), output.shape())
            prog.add(
                _program.Copy(view(graph, typ, ids.ravel(), name).reshape(output.shape()), output)
            )
            return
        if ptype is PoolingType.AVG:  # scaleGradient
            counts = _avg_counts(dims)
            inv = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0)
            const = graph.addConstant(typ, [inv.size], inv.ravel(), f"{name}/scaleTensor")
            graph.setTileMapping(const, 0)
            ids = np.broadcast_to(const.flat_index().reshape(inv.shape), grad.shape())
            bscale = view(graph, typ, ids.ravel(), name).reshape(grad.shape())
            grad = popops.mul(graph, grad, bscale, prog, f"{name}/preScale")
        g_ids = _internal(grad, False)
        b = _Builder(graph, name, typ, "sum", bwd, cpg)
        b.build([_Operand("in", g_ids, "in"), _Operand("out", _internal(output, False), "out")],
                prog, g_ids)  # fmt: skip
        return
    if scaled:  # poolingMaxScale: 1 / (inputs equal to the maximum), per output
        scale = _new_output(graph, typ, grad.shape(), f"{name}/Scale/out")
        sb = _Builder(graph, f"{name}/Scale", typ, "maxGradScale", _fwd_pass(dims), cpg)
        in_ids = _internal(in_, False)
        sb.build(
            [_Operand("in", in_ids, "in"), _Operand("out", _internal(scale, False), "out"),
             _Operand("fwdActsOut", _internal(pooled, False), "out")],
            prog, in_ids,
        )  # fmt: skip
        grad = popops.mul(graph, grad, scale, prog, f"{name}/ScaleGrad")
    from poplar_api.popnn.mapping import clone_like

    rearranged = clone_like(graph, pooled, typ, f"{name}/gradsRearranged", name)
    prog.add(_program.Copy(grad, rearranged))
    g_ids = _internal(rearranged, False)
    b = _Builder(graph, name, typ, "maxGrad", bwd, cpg)
    b.build(
        [_Operand("in", g_ids, "in"), _Operand("out", _internal(output, False), "out"),
         _Operand("fwdActsIn", _internal(in_, False), "out"),
         _Operand("fwdActsOut", _internal(pooled, False), "in")],
        prog, g_ids,
    )  # fmt: skip


def poolInputGradient(graph: Graph, params: PoolParams, *args: Any, **kwargs: Any) -> Tensor:
    """Gradient of a pooling with respect to its input (both Poplibs overloads).

    Two call forms, told apart by the third argument:

    * ``poolInputGradient(graph, params, in_, pooled, pooledGradient, useScaledVariant,
      prog, debugPrefix="", options=None)`` — any pooling type; MAX needs the forward
      input ``in_`` and output ``pooled`` (every input equal to the maximum gets the
      gradient; with ``useScaledVariant`` divided by the number of such inputs). The
      result is a clone of ``in_`` (same mapping).
    * ``poolInputGradient(graph, params, fwdChansPerGroup, pooledGradient, prog,
      debugPrefix="", options=None)`` — AVG and SUM only; the result is created
      ``[numChannels / fwdChansPerGroup, batch, *field, fwdChansPerGroup]``, mapped
      linearly and returned as ``[batch, numChannels, *field]``, as Poplibs.

    Raises
    ------
    GraphError
        Bad parameters or arguments (named with their values), tensors whose shapes do
        not match ``params``, or MAX with the second form.
    TypeMismatchError
        A tensor not of ``params.dType``.
    """
    fn = "poolInputGradient"
    if args and isinstance(args[0], int | np.integer) and not isinstance(args[0], bool):
        names = ["fwdChansPerGroup", "pooledGradient", "prog", "debugPrefix", "options"]
    else:
        names = [
            "in_",
            "pooled",
            "pooledGradient",
            "useScaledVariant",
            "prog",
            "debugPrefix",
            "options",
        ]
    if len(args) > len(names):
        raise GraphError(f"{fn}: too many arguments ({2 + len(args)}); the form is {names}")
    bound = dict(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names:
            raise GraphError(f"{fn}: unexpected argument {k!r}; this form takes {names}")
        if k in bound:
            raise GraphError(f"{fn}: argument {k!r} given twice")
        bound[k] = v
    missing = [n for n in names if n not in bound and n not in ("debugPrefix", "options")]
    if missing:
        raise GraphError(f"{fn}: missing argument(s) {missing}; this form takes {names}")
    prog = bound["prog"]
    dims = _check_common(graph, params, prog, bound.get("options"), fn)
    typ = params.dType
    in_shape = [params.batchSize, params.numChannels, *params.inputFieldShape]
    out_shape = [params.batchSize, params.numChannels, *[d.out for d in dims]]
    prefix = bound.get("debugPrefix") or ""
    name = f"{prefix}/{_layer_name(params, 'Bwd')}" if prefix else _layer_name(params, "Bwd")
    grad = _check_tensor(graph, bound["pooledGradient"], "pooledGradient", out_shape, typ, fn)
    if "fwdChansPerGroup" in bound:
        cpg = int(bound["fwdChansPerGroup"])
        if params.poolingType is PoolingType.MAX:
            raise GraphError(
                f"{fn}: the fwdChansPerGroup form is for AVG and SUM pooling; MAX needs "
                f"the forward input and output (in_, pooled, pooledGradient, ...)"
            )
        if cpg < 1 or params.numChannels % cpg:
            raise GraphError(
                f"{fn}: fwdChansPerGroup = {cpg} must be >= 1 and divide numChannels = "
                f"{params.numChannels}"
            )
        field = params.inputFieldShape
        raw = graph.addVariable(
            typ, [params.numChannels // cpg, params.batchSize, *field, cpg], name
        )
        from poplar_api.poputil import mapTensorLinearly

        mapTensorLinearly(graph, raw)
        ids = np.moveaxis(raw.flat_index().reshape(raw.shape()), -1, 1)  # [G, cpg, B, *f]
        ids = np.swapaxes(ids.reshape(params.numChannels, params.batchSize, *field), 0, 1)
        output = view(graph, typ, ids.ravel(), name).reshape(in_shape)
        _grad_impl(graph, params, dims, None, None, grad, output, False, prog, name)
        return output
    in_ = bound["in_"]
    pooled = bound["pooled"]
    scaled = bound["useScaledVariant"]
    if not isinstance(scaled, bool | np.bool_):
        raise GraphError(f"{fn}: useScaledVariant must be True or False, got {scaled!r}")
    _check_tensor(graph, in_, "in", in_shape, typ, fn)
    if params.poolingType is PoolingType.MAX:
        _check_tensor(graph, pooled, "pooled", out_shape, typ, fn)
    from poplar_api.popnn.mapping import clone_like

    output = clone_like(graph, in_, typ, f"{name}/out", fn)
    _grad_impl(graph, params, dims, in_, pooled, grad, output, bool(scaled), prog, name)
    return output
