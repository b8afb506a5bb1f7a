"""Automatic differentiation of a lowered ONNX model: gradient ops on poplar_api.

Every differentiable op registers one gradient function with :func:`register_grad`::

    @register_grad("Relu")
    def _relu_grad(g: GradContext) -> list[Tensor | None]:
        return [popnn.nonLinearityInputGradient(g.graph, RELU, g.outputs[0],
                                                g.grad_outputs[0], g.prog, g.name)]

The function gets the forward op's values (:class:`GradContext`) and the gradients
of its outputs, appends the programs computing the gradients of its inputs to
``g.prog`` and returns one entry per forward input: a Tensor of that input's shape,
or ``None`` when the input has no gradient (integer inputs, shapes, or inputs whose
gradient nobody needs: :meth:`GradContext.needs_grad`).

:func:`backward` walks the lowered nodes in reverse order from the loss, like
PopART's autodiff: a tensor read by several ops gets the sum of their gradients, and
an op none of whose outputs has a gradient, or none of whose inputs needs one, is
skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from popart_api.errors import popart_exception
from poplar_api import FLOAT, HALF, Graph, Tensor, popops
from poplar_api import program as pprog
from poplar_api.graph import OUTSIDE
from poplar_api.popops import Operation

#: PopART's prefix of gradient tensor ids: ``reservedGradientPrefix() + id``.
GRADIENT_PREFIX = "Gradient___"

#: What a gradient function returns: per forward input, its gradient (None: none).
Grads = Sequence[Tensor | None]
GradFn = Callable[["GradContext"], Grads]
#: (domain, op type) -> gradient function.
GRAD_REGISTRY: dict[tuple[str, str], GradFn] = {}


def _domain(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def register_grad(op_type: str, domain: str = "ai.onnx") -> Callable[[GradFn], GradFn]:
    """Decorator: register the gradient function of ``op_type`` of ``domain``."""

    def deco(fn: GradFn) -> GradFn:
        GRAD_REGISTRY[(_domain(domain), op_type)] = fn
        return fn

    return deco


def differentiable_ops() -> list[str]:
    """``domain::OpType`` of every op with a gradient, sorted."""
    return sorted(f"{d}::{t}" for d, t in GRAD_REGISTRY)


def reservedGradientPrefix() -> str:
    """The prefix of gradient tensor ids (``Gradient___``), as PopART."""
    return GRADIENT_PREFIX


@dataclass
class GradContext:
    """What a gradient function sees of its forward op.

    Attributes
    ----------
    graph, prog, name
        The graph, the backward ``Sequence`` to append to, and a debug name
        (``<node>/grad``).
    op_type, attrs, opset
        The forward node's type, attributes (as its lowering saw them) and the
        model's opset of its domain.
    inputs
        The forward inputs: Tensors, numpy arrays (values known when the graph was
        built) or ``None`` (an omitted optional input).
    outputs
        Everything the forward lowering returned: the node's outputs first, then any
        extra values it kept for its gradient (a Dropout mask, saved statistics).
    grad_outputs
        The gradient of each node output (same shape), or ``None`` when no gradient
        reaches that output (read it as zero).
    wanted
        Per input, whether its gradient is needed.
    """

    graph: Graph
    prog: Any
    name: str
    op_type: str
    attrs: dict[str, Any]
    opset: int
    inputs: list[Any]
    outputs: list[Any]
    grad_outputs: list[Tensor | None]
    wanted: list[bool] = field(default_factory=list)

    def needs_grad(self, i: int) -> bool:
        """Whether the gradient of input ``i`` is needed (and it is a float tensor)."""
        return i < len(self.wanted) and self.wanted[i]

    def grad_output(self, i: int = 0) -> Tensor:
        """The gradient of output ``i``; zeros of the output's shape when none reaches it."""
        g = self.grad_outputs[i] if i < len(self.grad_outputs) else None
        if g is not None:
            return g
        out = self.outputs[i]
        return zeros(self.graph, out.elementType(), out.shape(), self.prog, f"{self.name}/zero")


# ------------------------------------------------------------------ helpers
def is_float(value: Any) -> bool:
    """Whether ``value`` is a float device tensor (the only kind with gradients)."""
    return isinstance(value, Tensor) and value.elementType() in (FLOAT, HALF)


def zeros(graph: Graph, typ: Any, shape: Sequence[int], prog: Any, name: str) -> Tensor:
    """A new tensor of zeros, mapped linearly over the tiles."""
    from poplar_api.poputil import mapTensorLinearly

    t = graph.addVariable(typ, list(shape), name)
    mapTensorLinearly(graph, t)
    popops.zero(graph, t, prog, name)
    return t


def unbroadcast(graph: Graph, grad: Tensor, shape: Sequence[int], prog: Any, name: str) -> Tensor:
    """``grad`` summed over the dimensions numpy broadcasting added or stretched to
    reach its shape from ``shape``: the gradient of a broadcast input."""
    shape = list(shape)
    gshape = grad.shape()
    if gshape == shape:
        return grad
    lead = len(gshape) - len(shape)
    dims = list(range(lead))
    dims += [lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1]
    if not dims:
        return grad.reshape(shape)
    if all(gshape[d] == 1 for d in dims):  # summing over size-1 dimensions: a view
        return grad.reshape(shape)
    out = popops.reduce(graph, grad, dims, Operation.ADD, prog, f"{name}/unbroadcast")
    return out.reshape(shape)


def add_grads(graph: Graph, a: Tensor, b: Tensor, prog: Any, name: str) -> Tensor:
    """The sum of two gradients of one tensor."""
    return popops.add(graph, a, b, prog, f"{name}/accumulate")


@dataclass
class NodeRecord:
    """One lowered forward node: what its gradient function needs."""

    domain: str
    op_type: str
    name: str
    opset: int
    attrs: dict[str, Any]
    input_ids: list[str]
    output_ids: list[str]
    inputs: list[Any]
    outputs: list[Any]
    ipu: int = 0
    stage: int | None = None
    #: ids of the forward values the gradient function read (pipelining stashes
    #: only these)
    read: set[int] = field(default_factory=set)


class _Recording(list):
    """A list that notes which of its Tensors a gradient function reads."""

    def __init__(self, values: Sequence[Any], sink: set[int]) -> None:
        super().__init__(values)
        self._sink = sink

    def _note(self, v: Any) -> Any:
        if isinstance(v, Tensor):
            self._sink.add(id(v))
        elif isinstance(v, list):
            for x in v:
                self._note(x)
        return v

    def __getitem__(self, key: Any) -> Any:
        return self._note(super().__getitem__(key))

    def __iter__(self):
        for v in super().__iter__():
            yield self._note(v)


def requires_grad(records: Sequence[NodeRecord], sources: Iterable[str]) -> set[str]:
    """Ids of the tensors whose value depends on a float tensor in ``sources``."""
    live = set(sources)
    for r in records:
        if any(i in live for i in r.input_ids if i):
            live.update(o for o, v in zip(r.output_ids, r.outputs, strict=False) if is_float(v))
    return live


#: (producer (domain, type), consumer (domain, type)) -> fused gradient: given the
#: consumer's GradContext and the producer's record, the gradient of the producer's
#: input 0 (the producer's own gradient is then skipped).
FUSED_GRADS: dict[tuple[tuple[str, str], tuple[str, str]], Callable] = {}


def register_fused_grad(producer: tuple[str, str], consumer: tuple[str, str]) -> Callable:
    """Decorator: a gradient computed in one step for ``producer -> consumer`` when the
    producer's output is read by the consumer only (e.g. Softmax -> Nll)."""

    def deco(fn: Callable) -> Callable:
        FUSED_GRADS[(producer, consumer)] = fn
        return fn

    return deco


def _fusions(records: Sequence[NodeRecord], keep: set[str]) -> dict[int, int]:
    """consumer record index -> producer record index, for the fusable pairs."""
    made_by = {o: k for k, r in enumerate(records) for o in r.output_ids if o}
    readers: dict[str, int] = {}
    for r in records:
        for i in r.input_ids:
            readers[i] = readers.get(i, 0) + 1
    out = {}
    for k, r in enumerate(records):
        if not r.input_ids:
            continue
        p = made_by.get(r.input_ids[0])
        if p is None:
            continue
        pr = records[p]
        key = ((pr.domain, pr.op_type), (r.domain, r.op_type))
        tid = r.input_ids[0]
        if key in FUSED_GRADS and readers.get(tid) == 1 and tid not in keep:
            out[k] = p
    return out


def _context(
    r: NodeRecord, graph: Graph, prog: Any, outs: list[Tensor | None], wanted: list[bool]
) -> GradContext:
    """The GradContext of record ``r``, noting which forward values its gradient reads."""
    return GradContext(
        graph=graph,
        prog=prog,
        name=f"{r.name}/grad",
        op_type=r.op_type,
        attrs=r.attrs,
        opset=r.opset,
        inputs=_Recording(r.inputs, r.read),
        outputs=_Recording(r.outputs, r.read),
        grad_outputs=outs,
        wanted=wanted,
    )


def _on_graph(graph: Graph, grad: Tensor, prog: Any, name: str) -> Tensor:
    """``grad`` as a tensor of ``graph``'s tiles: copied there (PopART's IpuCopy of a
    gradient) when some of it lives on tiles of another virtual graph (another IPU),
    as the forward pass copies a value to the IPU of the op that reads it."""
    if not (graph.elementTiles(grad, readonly=True) == OUTSIDE).any():
        return grad
    from poplar_api.poputil import mapTensorLinearly

    local = graph.addVariable(grad.elementType(), grad.shape(), f"{name}/ipuCopy")
    mapTensorLinearly(graph, local)
    prog.add(pprog.Copy(grad, local))
    return local


def _local_grads(
    graph: Graph, outs: list[Tensor | None], prog: Any, name: str, per_record: bool
) -> list[Tensor | None]:
    """The output gradients of a node on ``graph`` (the node's IPU), each copied there
    first when it was made on another IPU (only with a graph per node)."""
    if not per_record:
        return outs
    return [
        None if g is None else _on_graph(graph, g, prog, f"{name}/grad/{i}")
        for i, g in enumerate(outs)
    ]


def _summed(
    graph: Graph, prev: Tensor | None, g: Tensor, ctx: GradContext, per_record: bool
) -> Tensor:
    """``g`` plus the gradient ``prev`` already found for the same tensor (from a node
    on another IPU, copied to ``graph`` first with a graph per node)."""
    if prev is None:
        return g
    if per_record:
        prev = _on_graph(graph, prev, ctx.prog, f"{ctx.name}/sum")
    return add_grads(graph, prev, g, ctx.prog, ctx.name)


def backward(
    graph: Graph | Callable[[NodeRecord], Graph],
    records: Sequence[NodeRecord],
    seeds: dict[str, Tensor],
    sources: Iterable[str],
    prog: Any,
    before_node: Callable[[NodeRecord], Any] | None = None,
    keep: Iterable[str] = (),
    fuse: bool = True,
    outline: Callable[[NodeRecord, GradFn, GradContext], Grads] | None = None,
) -> dict[str, Tensor]:
    """Append the backward pass to ``prog``; return the gradient of every tensor reached.

    Parameters
    ----------
    records
        The forward nodes in the order they were lowered.
    seeds
        Gradients to start from (the loss's gradient, by id).
    sources
        Ids of the tensors whose gradients are wanted (weights, and inputs whose
        gradient is anchored); ops that do not lead to one are skipped.
    before_node
        Called with a record before its gradient is lowered; returns the program to
        append the gradient to (default ``prog``). Pipelining and recomputation use it.
    keep
        Tensor ids whose own gradient is wanted (anchored): no fused gradient skips them.
    fuse
        Whether fused gradients (``register_fused_grad``) are used at all (the
        ``SoftmaxGradDirect`` / ``NlllWithSoftmaxGradDirect`` patterns).
    outline
        Called as ``outline(record, gradient function, context)`` instead of the
        gradient function (:class:`popart_api.outline_grads.GradOutliner`: equivalent
        gradient ops lowered once as functions).

    Raises
    ------
    popart_exception
        An op on the path from a source to the loss has no gradient function (named,
        with the node).
    """
    need = requires_grad(records, sources)
    per_record = callable(graph) and not isinstance(graph, Graph)
    grads: dict[str, Tensor] = dict(seeds)
    fused = _fusions(records, set(keep)) if fuse else {}
    skipped: set[int] = set()
    for k in range(len(records) - 1, -1, -1):
        r = records[k]
        if k in skipped:
            continue
        outs = [grads.get(o) if o else None for o in r.output_ids]
        if all(g is None for g in outs):
            continue
        wanted = [
            bool(i) and i in need and is_float(v)
            for i, v in zip(r.input_ids, r.inputs, strict=False)
        ]
        if not any(wanted):
            continue
        g_graph = graph(r) if per_record else graph
        if k in fused:
            p = records[fused[k]]
            if p.input_ids and p.input_ids[0] in need and is_float(p.inputs[0]):
                target = prog
                if before_node is not None:
                    target = before_node(r)
                    before_node(p)
                target = prog if target is None else target
                outs = _local_grads(g_graph, outs, target, r.name, per_record)
                ctx = _context(r, g_graph, target, outs, wanted)
                p.read.update(id(v) for v in [*p.inputs, *p.outputs] if isinstance(v, Tensor))
                fn2 = FUSED_GRADS[((p.domain, p.op_type), (r.domain, r.op_type))]
                g = fn2(ctx, p)
                tid = p.input_ids[0]
                prev = grads.get(tid)
                grads[tid] = _summed(g_graph, prev, g, ctx, per_record)
                skipped.add(fused[k])
                continue
        fn = GRAD_REGISTRY.get((r.domain, r.op_type))
        if fn is None:
            raise popart_exception(
                f"{r.op_type} (node '{r.name}', domain '{r.domain}') has no gradient: it lies "
                "between a trained weight and the loss; ops with gradients: "
                f"{', '.join(differentiable_ops())}"
            )
        target = before_node(r) if before_node is not None else prog
        target = prog if target is None else target
        outs = _local_grads(g_graph, outs, target, r.name, per_record)
        ctx = _context(r, g_graph, target, outs, wanted)
        in_grads = list(fn(ctx) if outline is None else outline(r, fn, ctx))
        for tid, want, g, x in zip(r.input_ids, wanted, in_grads, r.inputs, strict=False):
            if not want or g is None:
                continue
            if list(g.shape()) != list(x.shape()):
                raise popart_exception(
                    f"{r.op_type} (node '{r.name}'): gradient of input '{tid}' has shape "
                    f"{g.shape()}, the input {x.shape()} (an internal error of its gradient)"
                )
            if g.elementType() != x.elementType():
                g = popops.cast(g_graph, g, x.elementType(), ctx.prog, f"{ctx.name}/cast")
            prev = grads.get(tid)
            grads[tid] = _summed(g_graph, prev, g, ctx, per_record)
    return grads


__all__ = [
    "FUSED_GRADS",
    "GRADIENT_PREFIX",
    "GRAD_REGISTRY",
    "GradContext",
    "NodeRecord",
    "add_grads",
    "backward",
    "differentiable_ops",
    "is_float",
    "register_fused_grad",
    "register_grad",
    "requires_grad",
    "reservedGradientPrefix",
    "unbroadcast",
    "zeros",
]
