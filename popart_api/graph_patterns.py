"""PopART's graph-rewriting patterns that run before lowering, applied to the ONNX model.

Each is one of PopART's ``PreAliasPattern`` classes (graphcore/popart d2f20d78,
``willow/src/patterns/``), on by default there and switched off by name with
``Patterns.enablePattern`` (``popart_api/patterns.py``). They rewrite
``model.graph.node`` in place before a session lowers it, so cycles and memory follow:

* ``OpToIdentity`` (``optoidentitypattern.cpp``, ``Op::canBeReplacedByIdentity`` of
  each op): an op that returns its input unchanged becomes an ``Identity``: a Cast to
  the input's type, a Clip without bounds, a Dropout in an ``InferenceSession`` or of
  ratio 0 without its mask, a MaxPool or AveragePool of a 1-element kernel without
  pads and strides, a Reduce, Reshape or Tile whose output has the input's shape, a
  Scale by 1, a Transpose whose permutation is sorted, a Concat, Sum, Max, Min or Mean
  of one input.
* ``PostNRepl`` (``postnrepl.cpp``): an ``Identity``, a ``Sum`` of one input or an
  opset-2 ``Pad`` of zero pads is removed and its readers read its input, unless its
  output is a graph output, anchored, the loss or read inside a subgraph.
* ``PreUniRepl`` (``preunirepl.cpp``): a ``Sum`` of one input or an opset-2 ``Pad`` of
  zero pads whose input is made by a node and read by it only is removed: that node
  writes the output directly.
* ``NegativeOneScale`` (``negativeonescalepattern.cpp``): ``Scale`` by -1 becomes
  ``Neg``.
* ``ExpandCast`` (``expandcast.cpp``): an ``Expand`` read only by a ``Cast`` on the
  same IPU, which adds elements, swaps with it: the cast then runs on the fewer
  elements.
* ``PadSum`` (``padsum.cpp``): a ``Sum``/``Add`` of zero-padded inputs whose values
  do not overlap becomes a ``Concat`` of the inputs padded only by the gaps.
* ``SumToAdd`` (``sumtoaddpattern.cpp``): a ``Sum`` of two inputs becomes ``Add``.
* ``TransposeToIdentityOrReshapePattern`` (``transposetoidentityorreshape.cpp``): a
  Transpose undoing an earlier one (through Identities and one Reshape inserting size-1
  dimensions) becomes an ``Identity`` of, or a ``Reshape`` of, that one's input.

Node attributes the Builder sets (``__ipu_number``, ``__pipeline_stage``,
``__recompute_output_in_backward_pass``, ...) move to the replacing node.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["GRAPH_PATTERNS", "apply_graph_patterns", "rewrite_session_model", "subgraph_reads"]

#: The ai.onnx op types ``OpToIdentity`` tests.
_VARIADIC = {"Concat", "Sum", "Max", "Min", "Mean"}
#: Reductions that give their input back when no axis shrinks. PopART's
#: ``ReduceOp::canBeReplacedByIdentity`` tests the shapes of every reduction, which
#: would turn ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum (|x|, |x|, x², log x
#: over a one-element set) into identities too; those are left out here.
_REDUCES = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp"}


class _Graph:
    """The nodes of a model with what the patterns ask of them: producers, readers,
    shapes and element types known from the model, constant values."""

    def __init__(
        self,
        model: onnx.ModelProto,
        blocked: set[str],
        info: dict[str, tuple[int, list[int] | None]],
    ) -> None:
        self.model = model
        self.nodes = model.graph.node
        self.blocked = blocked
        #: element type and shape per tensor id (shared by the rewrites: one that
        #: changes a tensor drops it)
        self.info = info
        #: values of the small constants (bounds, ratios): weights are not read
        self.consts: dict[str, np.ndarray] = {}
        for init in model.graph.initializer:
            if _small(init):
                self.consts[init.name] = numpy_helper.to_array(init)
        for n in self.nodes:
            if n.op_type == "Constant" and n.output and n.attribute:
                a = n.attribute[0]
                if a.name == "value":
                    self.consts[n.output[0]] = numpy_helper.to_array(a.t)

    def readers(self, tid: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if tid in n.input]

    def producer(self, tid: str) -> onnx.NodeProto | None:
        return next((n for n in self.nodes if tid in n.output), None)

    def shape(self, tid: str) -> list[int] | None:
        return self.info.get(tid, (0, None))[1]

    def dtype(self, tid: str) -> int | None:
        return self.info.get(tid, (None, None))[0]

    def replace(self, node: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        """Put ``new`` where ``node`` is, with ``node``'s Builder attributes."""
        for n in new:
            n.attribute.extend(a for a in node.attribute if a.name.startswith("__"))
        k = list(self.nodes).index(node)
        del self.nodes[k]
        for j, n in enumerate(new):
            self.nodes.insert(k + j, n)

    def rename_reads(self, old: str, new: str) -> None:
        for n in self.nodes:
            for i, x in enumerate(n.input):
                if x == old:
                    n.input[i] = new


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _identity_like(g: _Graph, n: onnx.NodeProto, inference: bool) -> bool:
    """Whether ``n`` returns its first input unchanged (PopART's
    ``canBeReplacedByIdentity``)."""
    op, inputs = n.op_type, [i for i in n.input if i]
    if (n.domain or "ai.onnx") == "ai.graphcore":
        return op == "Scale" and float(_attr(n, "scale", 0.0)) == 1.0 and len(n.output) == 1
    if (n.domain or "ai.onnx") != "ai.onnx" or not inputs or len(n.output) != 1:
        return False
    x, y = inputs[0], n.output[0]
    if op in _VARIADIC:
        if op == "Concat":  # PopART checks the axis before its patterns run
            shape = g.shape(x)
            axis = _attr(n, "axis", None)
            if shape is None or axis is None or not -len(shape) <= axis < len(shape):
                return False
        return len(inputs) == 1
    if op == "Cast":
        return g.dtype(x) is not None and int(_attr(n, "to", -1)) == g.dtype(x)
    if op == "Clip":
        lo = g.consts.get(n.input[1]) if len(n.input) > 1 and n.input[1] else None
        hi = g.consts.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if (len(n.input) > 1 and n.input[1] and lo is None) or (
            len(n.input) > 2 and n.input[2] and hi is None
        ):
            return False  # a bound computed on the device
        lo = _attr(n, "min", None) if lo is None else float(lo)
        hi = _attr(n, "max", None) if hi is None else float(hi)
        return (lo is None or lo <= float(np.finfo(np.float32).min)) and (
            hi is None or hi >= float(np.finfo(np.float32).max)
        )
    if op == "Dropout":
        ratio = _attr(n, "ratio", 0.5)
        if len(n.input) > 1 and n.input[1]:
            r = g.consts.get(n.input[1])
            ratio = None if r is None else float(r)
        if ratio is None or not 0.0 <= ratio < 1.0:  # refused by the op (DropoutOp)
            return False
        return inference or ratio == 0.0
    if op in ("MaxPool", "AveragePool"):
        kernel = _attr(n, "kernel_shape", [])
        return (
            int(math.prod(kernel)) == 1
            and not any(_attr(n, "pads", []))
            and int(math.prod(_attr(n, "strides", [1]))) == 1
            and _attr(n, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET", b"VALID", "VALID")
        )
    if op in _REDUCES or op in ("Reshape", "Tile"):
        return g.shape(x) is not None and g.shape(x) == g.shape(y)
    if op == "Transpose":
        perm = _attr(n, "perm", None)
        return perm is not None and list(perm) == sorted(perm)
    return False


def _op_to_identity(g: _Graph, inference: bool) -> int:
    count = 0
    for n in list(g.nodes):
        if n.op_type != "Identity" and _identity_like(g, n, inference):
            x = next(i for i in n.input if i)
            g.replace(n, [helper.make_node("Identity", [x], [n.output[0]], name=n.name)])
            if x in g.info:  # the output is the input: known for the ops after it
                g.info[n.output[0]] = g.info[x]
            count += 1
    return count


def _zero_pad2(n: onnx.NodeProto) -> bool:
    """An opset-2 ``Pad`` (pads as an attribute) of zero padding."""
    pads = _attr(n, "pads", None)
    return n.op_type == "Pad" and pads is not None and not any(pads)


def _replicator(n: onnx.NodeProto) -> bool:
    if (n.domain or "ai.onnx") != "ai.onnx" or len(n.output) != 1:
        return False
    one = len([i for i in n.input if i]) == 1
    return n.op_type == "Identity" or (n.op_type == "Sum" and one) or _zero_pad2(n)


def _post_n_repl(g: _Graph) -> int:
    count = 0
    for n in list(g.nodes):
        if not _replicator(n) or n.output[0] in g.blocked:
            continue
        x, y = next(i for i in n.input if i), n.output[0]
        g.replace(n, [])
        g.rename_reads(y, x)
        count += 1
    return count


def _pre_uni_repl(g: _Graph) -> int:
    count = 0
    for n in list(g.nodes):
        if not (_replicator(n) and n.op_type != "Identity"):
            continue
        x, y = next(i for i in n.input if i), n.output[0]
        p = g.producer(x)
        if p is None or len(g.readers(x)) != 1 or x in g.blocked:
            continue
        g.replace(n, [])
        for k, o in enumerate(p.output):
            if o == x:
                p.output[k] = y
        count += 1
    return count


def _negative_one_scale(g: _Graph) -> int:
    count = 0
    for n in list(g.nodes):
        scale = n.domain == "ai.graphcore" and n.op_type == "Scale"
        if scale and float(_attr(n, "scale", 0.0)) == -1.0:
            g.replace(n, [helper.make_node("Neg", list(n.input), list(n.output), name=n.name)])
            count += 1
    return count


def _ipu(n: onnx.NodeProto) -> Any:
    return _attr(n, "__ipu_number", None)


def _expand_cast(g: _Graph) -> int:
    count = 0
    for n in list(g.nodes):
        if n.op_type != "Expand" or (n.domain or "ai.onnx") != "ai.onnx" or len(n.input) < 2:
            continue
        y = n.output[0]
        readers = g.readers(y)
        if len(readers) != 1 or readers[0].op_type != "Cast" or y in g.blocked:
            continue
        cast = readers[0]
        if _ipu(cast) != _ipu(n) or cast.input[0] != y:
            continue
        sx, sy = g.shape(n.input[0]), g.shape(y)
        if sx is None or sy is None or int(math.prod(sx)) == int(math.prod(sy)):
            continue
        out = cast.output[0]
        # cast -> expand, the intermediate keeps its id (now of the cast's type)
        cast.input[0], cast.output[0] = n.input[0], y
        n.input[0], n.output[0] = y, out
        k, j = list(g.nodes).index(n), list(g.nodes).index(cast)
        moved = g.nodes[j]
        del g.nodes[j]
        g.nodes.insert(k, moved)
        g.info.pop(y, None)
        stale = [vi for vi in g.model.graph.value_info if vi.name == y]
        for vi in stale:  # y is now the cast of the unexpanded input
            g.model.graph.value_info.remove(vi)
        count += 1
    return count


def _sum_to_add(g: _Graph) -> int:
    count = 0
    for n in list(g.nodes):
        ins = [i for i in n.input if i]
        if n.op_type == "Sum" and (n.domain or "ai.onnx") == "ai.onnx" and len(ins) == 2:
            g.replace(n, [helper.make_node("Add", ins, list(n.output), name=n.name)])
            count += 1
    return count


def _ints(g: _Graph, n: onnx.NodeProto, attr: str, index: int) -> list[int] | None:
    """An integer list given as attribute ``attr`` (older opsets) or as the constant
    input ``index``; None when it is neither (computed on the device)."""
    if len(n.input) > index and n.input[index]:
        v = g.consts.get(n.input[index])
        return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]
    v = _attr(n, attr, None)
    return None if v is None else [int(x) for x in v]


def _zero_constant_pad(g: _Graph, n: onnx.NodeProto | None) -> list[int] | None:
    """The pads of ``n`` when it is an ai.onnx ``Pad`` of constant 0 over all axes
    (PopART's ``BasePadOutplaceOp`` with ``getPadValue() == 0`` and mode constant)."""
    if n is None or n.op_type != "Pad" or (n.domain or "ai.onnx") != "ai.onnx":
        return None
    if len(n.input) > 3 and n.input[3]:  # axes (opset 18): not matched
        return None
    mode = _attr(n, "mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else str(mode)) != "constant":
        return None
    value = float(_attr(n, "value", 0.0))
    if len(n.input) > 2 and n.input[2]:
        v = g.consts.get(n.input[2])
        if v is None or np.asarray(v).size != 1:
            return None
        value = float(np.asarray(v).reshape(-1)[0])
    pads = _ints(g, n, "pads", 1)
    return pads if value == 0.0 and pads is not None else None


def _gap_pads(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """PadSum's ``createPadOps``: the (before, after) padding of each input, ``spans``
    its values' range along the axis (sorted, disjoint) in ``[0, size)``. The ranges
    not covered (the non-empty gaps) are dealt out: an input with a gap just before it
    takes that gap and also the gap just after it; an input without one takes the gap
    just after it only when that is the last gap."""
    edges = [0, *[e for span in spans for e in span], size]
    gaps = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True) if a != b]
    out, first = [], 0
    for lo, hi in spans:
        rest = gaps[first:]
        left = next((g for g in reversed(rest) if g[0] < lo), None)
        at = next((i for i, g in enumerate(rest) if g[0] >= lo), None)
        right = None if at is None else rest[at]
        before = after = 0
        if left is not None and left[1] == lo:
            before = left[1] - left[0]
            if right is not None and right[0] == hi:
                after, first = right[1] - right[0], first + at + 1
        elif right is not None and right == gaps[-1] and right[0] == hi:
            after, first = right[1] - right[0], first + at + 1
        out.append((before, after))
    return out


def _pad_sum(g: _Graph) -> int:
    """PopART's ``PadSumPattern`` (``willow/src/patterns/padsum.cpp``): a ``Sum`` or
    ``Add`` of at least two inputs, each made by a constant-zero ``Pad`` along the same
    single axis, their values in disjoint ranges of it, becomes a ``Concat`` along that
    axis of the inputs, ordered by their pads, each padded only by gaps next to it
    (:func:`_gap_pads`). Here the pads must be read only by the sum (PopART removes
    them)."""
    count = 0
    for n in list(g.nodes):
        ins = [i for i in n.input if i]
        if n.op_type not in ("Sum", "Add") or (n.domain or "ai.onnx") != "ai.onnx":
            continue
        if len(ins) < 2 or len(set(ins)) != len(ins) or len(n.output) != 1:
            continue
        pads_of = [_zero_constant_pad(g, g.producer(i)) for i in ins]
        if any(p is None for p in pads_of):
            continue
        rank = len(pads_of[0]) // 2
        if any(len(p) != 2 * rank for p in pads_of):
            continue
        dims = [{d for d in range(rank) if p[d] or p[rank + d]} for p in pads_of]
        if any(len(d) != 1 or d != dims[0] for d in dims):
            continue
        axis = next(iter(dims[0]))
        producers = [g.producer(i) for i in ins]
        sources = [p.input[0] for p in producers]
        shapes = [g.shape(x) for x in sources]
        out_shape = g.shape(n.output[0])
        if any(s is None or len(s) != rank for s in shapes) or out_shape is None:
            continue
        if any(p[axis] < 0 or p[rank + axis] < 0 for p in pads_of):
            continue
        if any(i in g.blocked or len(g.readers(i)) != 1 for i in ins):
            continue
        spans = [(p[axis], p[axis] + s[axis]) for p, s in zip(pads_of, shapes, strict=True)]
        order = sorted(range(len(ins)), key=lambda k: pads_of[k])
        spans = [spans[k] for k in order]
        if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
            continue  # overlapping values (sorted by their start)
        new: list[onnx.NodeProto] = []
        padded = []
        attr_form = _attr(producers[0], "pads", None) is not None
        for j, (k, (lo, hi)) in enumerate(
            zip(order, _gap_pads(spans, out_shape[axis]), strict=True)
        ):
            pads = [0] * (2 * rank)
            pads[axis], pads[rank + axis] = lo, hi
            y = f"{n.output[0]}/PadSum/{j}"
            if attr_form:
                new.append(helper.make_node("Pad", [sources[k]], [y], pads=pads))
            else:
                c = f"{y}/pads"
                value = helper.make_tensor(c, onnx.TensorProto.INT64, [2 * rank], pads)
                new.append(helper.make_node("Constant", [], [c], value=value))
                g.consts[c] = np.asarray(pads, np.int64)
                new.append(helper.make_node("Pad", [sources[k], c], [y]))
            padded.append(y)
        new.append(helper.make_node("Concat", padded, [n.output[0]], axis=axis, name=n.name))
        g.replace(n, new)
        for p in producers:
            g.replace(p, [])
        count += 1
    return count


def _perm(g: _Graph, n: onnx.NodeProto) -> list[int] | None:
    perm = _attr(n, "perm", None)
    if perm is not None:
        return [int(p) for p in perm]
    shape = g.shape(n.input[0])
    return None if shape is None else list(range(len(shape)))[::-1]


def _reverse_transpose(g: _Graph, t: onnx.NodeProto) -> tuple[onnx.NodeProto, list[int]] | None:
    """``findReverseTransposeWithReshapes``: walking back from ``t``'s input through
    Identity nodes and at most one Reshape that only inserts size-1 dimensions the
    permutation leaves in place, a Transpose whose permutation reverses ``t``'s (those
    dimensions removed); with the inserted dimensions."""
    perm = _perm(g, t)
    if perm is None:
        return None
    dims: list[int] = []
    x = t.input[0]
    while True:
        p = g.producer(x)
        if p is None or (p.domain or "ai.onnx") != "ai.onnx":
            return None
        if p.op_type == "Identity":
            x = p.input[0]
            continue
        if p.op_type == "Reshape" and not dims:
            src, dst = g.shape(p.input[0]), g.shape(p.output[0])
            if src is None or dst is None or len(src) > len(dst):
                return None
            dims = _unsqueezed(src, dst)
            if not dims or any(perm[d] != d for d in dims):
                return None
            x = p.input[0]
            continue
        if p.op_type != "Transpose":
            return None
        first = _perm(g, p)
        if first is None:
            return None
        inverse = [0] * len(first)
        for i, d in enumerate(first):
            inverse[d] = i
        kept = [d - sum(r < d for r in dims) for d in perm if d not in dims]
        return (p, dims) if inverse == kept else None


def _unsqueezed(src: list[int], dst: list[int]) -> list[int]:
    """``unsqueezedDimensionsInReshape``: the dimensions of ``dst`` a reshape from
    ``src`` inserted (size 1), or none when it does anything else."""
    dims, i = [], 0
    for o, d in enumerate(dst):
        if i < len(src) and src[i] == d:
            i += 1
        elif d == 1:
            dims.append(o)
        else:
            return []
    return dims if i == len(src) else []


def _transpose_to_identity_or_reshape(g: _Graph) -> int:
    """PopART's ``TransposeToIdentityOrReshapePattern``
    (``willow/src/patterns/transposetoidentityorreshape.cpp``): a Transpose that undoes
    an earlier one (:func:`_reverse_transpose`) reads that one's input instead, as an
    ``Identity``, or as a ``Reshape`` to its output shape when a Reshape inserted
    dimensions in between."""
    count = 0
    for n in list(g.nodes):
        if n.op_type != "Transpose" or (n.domain or "ai.onnx") != "ai.onnx":
            continue
        found = _reverse_transpose(g, n)
        if found is None:
            continue
        first, dims = found
        x, y, was = first.input[0], n.output[0], n.input[0]
        if not dims:
            g.replace(n, [helper.make_node("Identity", [x], [y], name=n.name)])
        else:
            shape = g.shape(y)
            if shape is None:
                continue
            c = f"{y}/TransposeToReshape/shape"
            value = helper.make_tensor(c, onnx.TensorProto.INT64, [len(shape)], shape)
            g.consts[c] = np.asarray(shape, np.int64)
            g.replace(n, [
                helper.make_node("Constant", [], [c], value=value),
                helper.make_node("Reshape", [x, c], [y], name=n.name),
            ])  # fmt: skip
        _drop_unread(g, was)
        count += 1
    return count


def _drop_unread(g: _Graph, tid: str) -> None:
    """Remove the Identity, Reshape, Transpose or Constant node making ``tid`` when
    nothing reads its outputs any more (none is blocked), then the same for its inputs:
    the ops the rewrite left without readers, as PopART's ``Prune`` transform removes
    them after its patterns."""
    p = g.producer(tid)
    if p is None or p.op_type not in ("Identity", "Reshape", "Transpose", "Constant"):
        return
    if any(o in g.blocked or g.readers(o) for o in p.output if o):
        return
    g.replace(p, [])
    for i in p.input:
        if i:
            _drop_unread(g, i)


#: Pattern name -> rewrite, in the order they are applied.
GRAPH_PATTERNS: dict[str, Callable[[_Graph, bool], int]] = {
    "OpToIdentity": _op_to_identity,
    "NegativeOneScale": lambda g, _inference: _negative_one_scale(g),
    "ExpandCast": lambda g, _inference: _expand_cast(g),
    "PadSum": lambda g, _inference: _pad_sum(g),
    "SumToAdd": lambda g, _inference: _sum_to_add(g),
    "TransposeToIdentityOrReshapePattern": (
        lambda g, _inference: _transpose_to_identity_or_reshape(g)
    ),
    "PreUniRepl": lambda g, _inference: _pre_uni_repl(g),
    "PostNRepl": lambda g, _inference: _post_n_repl(g),
}


def _small(init: onnx.TensorProto) -> bool:
    """Whether an initializer is small enough to be a shape, axes or bound operand."""
    return int(math.prod(init.dims)) <= _SMALL


#: Initializers of at most this many elements keep their values for shape inference.
_SMALL = 64


def _tensor_info(model: onnx.ModelProto) -> dict[str, tuple[int, list[int] | None]]:
    """Element type and shape of every tensor of ``model`` ONNX's shape inference
    finds (ops it does not know, e.g. ``ai.graphcore``'s, leave theirs out). Inference
    runs on a copy whose large initializers (weights) are declared inputs of their
    type and shape, so the weights' bytes are neither copied nor serialised."""
    g = model.graph
    declared = {vi.name for vi in g.input}
    big = [
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in g.initializer
        if not _small(t) and t.name not in declared
    ]
    light = helper.make_model(
        helper.make_graph(
            list(g.node),
            g.name,
            [*g.input, *big],
            list(g.output),
            [t for t in g.initializer if _small(t)],
            value_info=list(g.value_info),
        ),
        opset_imports=list(model.opset_import),
    )
    try:
        inferred = onnx.shape_inference.infer_shapes(light)
    except Exception:  # an invalid model: the session reports it when it lowers
        inferred = light
    info: dict[str, tuple[int, list[int] | None]] = {}
    g = inferred.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        shape = None
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shape = [int(d.dim_value) for d in t.shape.dim]
        info[vi.name] = (t.elem_type, shape)
    for init in g.initializer:
        info[init.name] = (init.data_type, list(init.dims))
    return info


def _graph_reads(graph: onnx.GraphProto) -> set[str]:
    out: set[str] = set()
    for n in graph.node:
        out.update(n.input)
        out |= subgraph_reads(n)
    return out


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names the subgraphs of ``node`` (If branches, Loop and Scan bodies, nested)
    read: values of the enclosing graph they may read by name."""
    out: set[str] = set()
    for a in node.attribute:
        for sub in [a.g] if a.HasField("g") else list(a.graphs):
            out |= _graph_reads(sub)
    return out


def apply_graph_patterns(
    model: onnx.ModelProto,
    enabled: Callable[[str], bool],
    inference: bool,
    keep: Iterable[str],
) -> dict[str, int]:
    """Apply the enabled patterns to ``model`` (in place) until none applies.

    Parameters
    ----------
    model
        The model a session lowers.
    enabled
        Whether a pattern is on (``Patterns.isPatternEnabled``).
    inference
        True for an ``InferenceSession`` (PopART's ``isTesting``: Dropout is an
        identity).
    keep
        Tensor ids that must stay (anchors, the loss, tensors whose gradient is
        anchored).

    Returns
    -------
    dict
        Pattern name -> how many times it applied.
    """
    blocked = {o.name for o in model.graph.output} | set(keep)
    for n in model.graph.node:
        blocked |= subgraph_reads(n)
    applied = dict.fromkeys(GRAPH_PATTERNS, 0)
    if not any(enabled(name) for name in GRAPH_PATTERNS):
        return applied
    info = _tensor_info(model)
    for _ in range(8):  # PopART applies its patterns until none matches
        changed = 0
        for name, rewrite in GRAPH_PATTERNS.items():
            if enabled(name):
                k = rewrite(_Graph(model, blocked, info), inference)
                applied[name] += k
                changed += k
        if not changed:
            break
    return applied


def rewrite_session_model(session: Any, gradient_prefix: str) -> dict[str, int]:
    """Apply a session's enabled patterns to its model once (before its first
    ``prepareDevice``), keeping its anchors, the tensors whose gradients are anchored
    and the loss."""
    if getattr(session, "_rewritten", False):
        return {}
    anchors = set(session.dataFlow.anchors())
    keep = anchors | {a[len(gradient_prefix) :] for a in anchors if a.startswith(gradient_prefix)}
    keep |= {getattr(session, "loss", None) or ""}
    inference = session._kind != "TrainingSession"
    applied = apply_graph_patterns(
        session.model, session.patterns.isPatternEnabled, inference, keep
    )
    session._rewritten = True
    return {k: v for k, v in applied.items() if v}
