"""Lowering of ONNX's ``ScatterElements`` (and the older ``Scatter``) with indices known
only at run time.

With the axis moved last, every index is compared with a constant iota of the data's
axis (``popops::eq`` on broadcast views: the one-hot encoding PopART's ``ScatterOpx``
builds with ``popops::encodeOneHot``), the updates are selected into that one-hot
layout and reduced over the index axis (``popops::reduce``: ADD for ``none``/``add``,
MUL, MAX, MIN), and the result replaces (or combines with) the data where any index
hit. Data positions outside the indices' extent in the other dimensions are kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_api.errors import popart_exception
from popart_api.ops import register, tensor
from popart_api.ops_tensor import _norm_axes
from poplar_api import BOOL, FLOAT, HALF, INT, Graph, Tensor, popops
from poplar_api.popops import Operation
from poplar_api.tensor import concat

_REDUCTIONS = {
    "none": Operation.ADD,
    "add": Operation.ADD,
    "mul": Operation.MUL,
    "max": Operation.MAX,
    "min": Operation.MIN,
}


def _last(t: Tensor, axis: int) -> Tensor:
    last = t.rank() - 1
    return t.dimShufflePartial([axis], [last]) if axis != last else t


def _identity(typ: Any, reduction: str) -> float | int:
    if reduction in ("none", "add"):
        return 0
    if reduction == "mul":
        return 1
    if typ in (FLOAT, HALF):
        return float(-np.inf if reduction == "max" else np.inf)
    info = np.iinfo(typ.numpy)
    return int(info.min if reduction == "max" else info.max)


def _scatter(op: str) -> Any:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        data = tensor(graph, inputs[0], name)
        idx = tensor(graph, inputs[1], name)
        upd = tensor(graph, inputs[2], name, data)
        rank = data.rank()
        axis = _norm_axes([int(attrs.get("axis", 0))], rank, op, name)[0]
        reduction = str(attrs.get("reduction", "none"))
        if reduction not in _REDUCTIONS:
            raise popart_exception(
                f"{op} (node '{name}'): reduction '{reduction}' is not one of {list(_REDUCTIONS)}"
            )
        if idx.shape() != upd.shape() or idx.rank() != rank or any(
            i > d for k, (i, d) in enumerate(zip(idx.shape(), data.shape(), strict=True))
            if k != axis
        ):  # fmt: skip
            raise popart_exception(
                f"{op} (node '{name}'): indices {idx.shape()} and updates {upd.shape()} must "
                f"have one shape, of data's rank ({data.shape()}) and not larger outside axis "
                f"{axis}"
            )
        if idx.elementType() != INT:
            raise popart_exception(
                f"{op} (node '{name}'): indices '{idx.name}' are {idx.elementType().name}; "
                "required INT32 or INT64"
            )
        typ = data.elementType()
        if typ == BOOL:
            raise popart_exception(f"{op} (node '{name}'): BOOL data is not supported")
        size = data.dim(axis)
        d_last, i_last, u_last = _last(data, axis), _last(idx, axis), _last(upd, axis)
        lead = i_last.shape()[:-1]
        n_idx = i_last.dim(i_last.rank() - 1)
        negative = popops.lt(graph, i_last, 0, prog, f"{name}/negative")
        wrapped = popops.select(graph, popops.add(graph, i_last, size, prog, f"{name}/plus"),
                                i_last, negative, prog, f"{name}/wrapped")  # fmt: skip
        full = [*lead, n_idx, size]
        k = len(lead)
        iota = tensor(graph, np.arange(size, dtype=np.int32), f"{name}/iota", wrapped)
        iota_view = iota.reshape([1] * (k + 1) + [size])
        for d, n in enumerate(full[:-1]):
            iota_view = iota_view.broadcast(n, d)
        hit = popops.eq(graph, wrapped.expand([k + 1]).broadcast(size, k + 1), iota_view, prog,
                        f"{name}/hit")  # fmt: skip
        spread = popops.select(
            graph, u_last.expand([k + 1]).broadcast(size, k + 1), _identity(typ, reduction), hit,
            prog, f"{name}/spread",
        )  # fmt: skip
        combined = popops.reduce(graph, spread, [k], _REDUCTIONS[reduction], prog,
                                 f"{name}/combine")  # fmt: skip
        any_hit = popops.reduce(graph, popops.cast(graph, hit, INT, prog, f"{name}/hitInt"), [k],
                                Operation.MAX, prog, f"{name}/any")  # fmt: skip
        any_hit = popops.cast(graph, any_hit, BOOL, prog, f"{name}/anyBool")
        region = d_last
        for d, n in enumerate(lead):
            region = region.slice(0, n, d)
        if reduction == "none":
            new = combined
        elif reduction == "add":
            new = popops.add(graph, region, combined, prog, f"{name}/add")
        elif reduction == "mul":
            new = popops.mul(graph, region, combined, prog, f"{name}/mul")
        elif reduction == "max":
            new = popops.max(graph, region, combined, prog, f"{name}/max")
        else:
            new = popops.min(graph, region, combined, prog, f"{name}/min")
        out = popops.select(graph, new, region, any_hit, prog, f"{name}/merge")
        full_shape = d_last.shape()
        for d, n in enumerate(lead):  # the data outside the indices' extent, kept
            if n == full_shape[d]:
                continue
            rest = d_last.slice(n, full_shape[d], d)
            for e in range(d + 1, len(lead)):
                rest = rest.slice(0, lead[e], e)
            out = concat([out, rest], d)
        last = rank - 1
        return [out.dimShufflePartial([last], [axis]) if axis != last else out]

    return lower


register("ScatterElements", since=11)(_scatter("ScatterElements"))
register("Scatter", since=9)(_scatter("Scatter"))

__all__: list[str] = []
