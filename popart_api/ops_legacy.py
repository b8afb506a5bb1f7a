"""The older opsets of ops PopART's op registry creates (graphcore/popart @d2f20d78,
``willow/src/op``) whose newer lowerings would otherwise refuse them.

PopART reads ``ai.onnx`` opsets 6 to 11 and registers, besides the current forms:

* ``Add``, ``Sub``, ``Mul``, ``Div`` 6 and ``Pow`` 1 (used by opset-6 models): the
  legacy broadcast, ``broadcast=1`` aligning ``B``'s dimensions with ``A``'s from
  ``axis`` (default: ``A``'s last dimensions; ``B``'s dimensions equal ``A``'s or 1),
  the result ``A``'s shape; without ``broadcast`` the shapes must be equal.
* ``Max``, ``Min``, ``Sum``, ``Mean`` 6: no broadcasting, every input of one shape.
* ``GRU`` 3 and ``LSTM`` 1: as their opset-7 forms, with the ``output_sequence``
  attribute (``Y`` is always produced).

Each is the current lowering (as :mod:`popart_api.ops_integer` wrapped it) after a
check or reshape of its operands, registered at PopART's first version.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_api import ops_integer, ops_rnn  # noqa: F401  (their registrations first)
from popart_api.errors import popart_exception
from popart_api.ops import REGISTRY, Lowering, Value, register, value_shape
from poplar_api import Graph, Tensor


def _current(op: str) -> Lowering:
    return REGISTRY[("ai.onnx", op)][0][1]


def _reshape(v: Value, shape: list[int]) -> Value:
    return v.reshape(shape) if isinstance(v, Tensor) else np.reshape(np.asarray(v), shape)


def _name(v: Value) -> str:
    return f"'{v.name}'" if isinstance(v, Tensor) else "(a constant)"


def _legacy_binary(op: str, fn: Lowering) -> Lowering:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        attrs = dict(attrs)
        broadcast = int(attrs.pop("broadcast", 0))
        axis = attrs.pop("axis", None)
        a, b = inputs[0], inputs[1]
        sa, sb = value_shape(a), value_shape(b)
        if not broadcast:
            if sa != sb:
                raise popart_exception(
                    f"{op} (node '{name}'): inputs A {_name(a)} {sa} and B {_name(b)} {sb} "
                    f"differ in shape; {op} of this opset broadcasts only with "
                    "broadcast=1; hint: set broadcast=1 (and axis) or export with opset >= 7"
                )
            return fn(graph, [a, b], attrs, prog, name)
        ra, rb = len(sa), len(sb)
        start = ra - rb if axis is None else int(axis) + (ra if int(axis) < 0 else 0)
        fits = start >= 0 and start + rb <= ra
        if not fits or any(d not in (sa[start + i], 1) for i, d in enumerate(sb)):
            raise popart_exception(
                f"{op} (node '{name}'): B {_name(b)} {sb} does not fit A {_name(a)} {sa} from "
                f"axis {start}: with broadcast=1, B's dimensions must equal A's (or be 1) "
                "from axis on"
            )
        b = _reshape(b, [1] * start + sb + [1] * (ra - start - rb))
        return fn(graph, [a, b], attrs, prog, name)

    return lower


def _same_shapes(op: str, fn: Lowering) -> Lowering:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        shapes = [value_shape(v) for v in inputs]
        if any(s != shapes[0] for s in shapes):
            listed = ", ".join(f"{_name(v)} {s}" for v, s in zip(inputs, shapes, strict=True))
            raise popart_exception(
                f"{op} (node '{name}'): inputs {listed} differ in shape; {op} of opset 6 needs "
                "every input of one shape; hint: export with opset >= 8 to broadcast"
            )
        return fn(graph, inputs, attrs, prog, name)

    return lower


def _drop_output_sequence(fn: Lowering) -> Lowering:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        attrs = {k: v for k, v in attrs.items() if k != "output_sequence"}
        return fn(graph, inputs, attrs, prog, name)

    return lower


for _op in ("Add", "Sub", "Mul", "Div"):
    register(_op, since=6)(_legacy_binary(_op, _current(_op)))
register("Pow", since=1)(_legacy_binary("Pow", _current("Pow")))
for _op in ("Max", "Min", "Sum", "Mean"):
    register(_op, since=6)(_same_shapes(_op, _current(_op)))
register("GRU", since=3)(_drop_output_sequence(_current("GRU")))
register("LSTM", since=1)(_drop_output_sequence(_current("LSTM")))

__all__: list[str] = []
