"""Outlining of the backward pass: equivalent gradient ops lowered once, as functions.

PopART outlines the whole schedule of a training step, backward pass included:
autodiff has made the gradient ops (``ConvDataGradOp``, ``ConvWeightsGradOp``,
``BatchNormGradOp``, ...) ops of the IR before ``SubgraphOutline::apply`` runs
(graphcore/popart ``willow/src/transforms/subgraphoutline.cpp``, commit d2f20d78d;
the outliner of ``willow/src/subgraph/outliner.cpp`` sees every op of the
schedule). Here the backward pass is lowered op by op by :func:`popart_api.autodiff.
backward`, so :class:`GradOutliner` outlines at that grain: the gradient of a forward
op whose subgraph value reaches ``outlineThreshold`` (a convolution, a matmul, a
normalisation: :func:`popart_api.outline.op_value`, PopART's
``Op::getHighSubgraphValue``) and which has an equivalent in the step is lowered
once into a Poplar function, on copies of the first occurrence's operands (same
shapes and tile mappings), and every occurrence copies its operands in, calls the
function and copies the gradients out (PopART's ``CallOp`` with
``SubgraphCopyingStrategy::OnEnterAndExit``).

Two gradient ops are equivalent (PopART's ``Op::getSubgraphEquivId``) when their
forward ops have the same type, domain, opset and attributes, every operand the same
shape and type (arrays: the same values), the same pattern of shared operands, the
same gradients wanted and arriving, and the same IPU. A gradient op with one
occurrence is lowered in place, as PopART leaves a sequence seen once. Copy-cost
pruning (``enableOutliningCopyCostPruning``) keeps a single high-value op whenever
its value exceeds the threshold, which a convolution's or a normalisation's always
does (:func:`popart_api.outline.prune_by_copy_cost`'s cost model: the op's value
times the square root of its input bytes less the square roots of the bytes copied),
so it changes nothing at this grain.

Values are those of the ops lowered in place: the function runs the same vertices on
operands laid out as the first occurrence's, and the copies move bytes unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from popart_api.autodiff import GradContext, Grads, NodeRecord, is_float
from popart_api.optimizers import like
from popart_api.outline import _key, _tensor_key, op_value
from poplar_api import Tensor
from poplar_api import program as pprog
from poplar_api.graph import Function, variable_count, variable_tensors

#: Where an operand of a gradient op comes from: forward input, forward output, or
#: gradient of a forward output.
INPUT, OUTPUT, GRAD_OUTPUT = "input", "output", "gradOutput"


class _Cloning(list):
    """A gradient op's operand list whose Tensors read as copies made on first use.

    ``clones`` maps ``(source, index)`` to the copy; ``by_id`` makes a Tensor read
    twice (under two indices) one copy; ``read`` notes the original's id as
    :class:`popart_api.autodiff._Recording` does."""

    def __init__(
        self,
        values: Sequence[Any],
        source: str,
        graph: Any,
        tag: str,
        clones: dict[tuple[str, int], Tensor],
        by_id: dict[int, Tensor],
        read: set[int],
    ) -> None:
        super().__init__(values)
        self._source, self._graph, self._tag = source, graph, tag
        self._clones, self._by_id, self._read = clones, by_id, read

    def _clone(self, index: int, v: Any) -> Any:
        if not isinstance(v, Tensor):
            return v
        self._read.add(id(v))
        made = self._by_id.get(id(v))
        if made is None:
            made = like(self._graph, v, f"{self._tag}/{self._source}{index}")
            self._by_id[id(v)] = made
        self._clones.setdefault((self._source, index), made)
        return made

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            idx = range(*key.indices(len(self)))
            return [self._clone(i, list.__getitem__(self, i)) for i in idx]
        i = key if key >= 0 else key + len(self)
        return self._clone(i, list.__getitem__(self, key))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


@dataclass
class _GradFunction:
    """A gradient op lowered once: its function, the copies of its operands, the
    gradients it returns and the variables it made (written by every call)."""

    function: Function
    clones: dict[tuple[str, int], Tensor]
    grads: list[Tensor | None]
    fresh: list[Tensor]


def _sharing(values: Iterable[Any]) -> tuple[int, ...]:
    """Per value, the index of the first value that is the same Tensor (-1: none)."""
    first: dict[int, int] = {}
    out = []
    for i, v in enumerate(values):
        out.append(first.setdefault(id(v), i) if isinstance(v, Tensor) else -1)
    return tuple(out)


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, Tensor):
        return False
    if isinstance(value, dict):
        return any(isinstance(v, Tensor) or _holds_tensor(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(isinstance(v, Tensor) or _holds_tensor(v) for v in value)
    return False


class GradOutliner:
    """Lowers the gradients of equivalent high-value ops once each (see the module).

    Parameters
    ----------
    records
        The forward nodes the backward pass walks.
    need
        Ids of the tensors whose value depends on a source (their gradient may be
        wanted: :func:`popart_api.autodiff.requires_grad`).
    threshold
        ``outlineThreshold``: the least subgraph value worth outlining.
    """

    def __init__(self, records: Sequence[NodeRecord], need: set[str], threshold: float) -> None:
        self.threshold = threshold
        self.functions: dict[Any, _GradFunction] = {}
        #: calls made per function key (for reports and tests)
        self.calls: Counter[Any] = Counter()
        self._counts = Counter(
            k for k in (self._forward_key(r, need) for r in records) if k is not None
        )
        self._need = need

    def _forward_key(self, r: NodeRecord, need: set[str]) -> Any:
        """The part of a gradient op's equivalence known before the backward pass, or
        None when it is never outlined."""
        if op_value(r.op_type) < self.threshold:
            return None
        values = [*r.inputs, *r.outputs]
        if any(_holds_tensor(v) for v in values):
            return None
        wanted = tuple(
            bool(i) and i in need and is_float(v)
            for i, v in zip(r.input_ids, r.inputs, strict=False)
        )
        return (
            r.domain, r.op_type, r.opset, _key(r.attrs), r.ipu, wanted,
            tuple(_tensor_key(v) for v in r.inputs), tuple(_tensor_key(v) for v in r.outputs),
            _sharing(values),
        )  # fmt: skip

    def __call__(
        self, r: NodeRecord, fn: Callable[[GradContext], Grads], ctx: GradContext
    ) -> Grads:
        """The gradients of ``r``'s inputs: ``fn(ctx)``, through a function call when
        ``r`` has an equivalent in the step."""
        head = self._forward_key(r, self._need)
        if head is None or self._counts[head] < 2:
            return fn(ctx)
        arriving = list(ctx.grad_outputs)
        key = (head, tuple(None if g is None else _tensor_key(g) for g in arriving),
               tuple(ctx.wanted), _sharing([*r.inputs, *r.outputs, *arriving]))  # fmt: skip
        built = self.functions.get(key)
        if built is None:
            built = self._build(r, fn, ctx, f"outlined/grad{len(self.functions)}")
            self.functions[key] = built
        self.calls[key] += 1
        return self._call_site(built, r, ctx)

    def _build(
        self, r: NodeRecord, fn: Callable[[GradContext], Grads], ctx: GradContext, tag: str
    ) -> _GradFunction:
        graph = ctx.graph
        first = variable_count(graph)
        clones: dict[tuple[str, int], Tensor] = {}
        by_id: dict[int, Tensor] = {}
        body = pprog.Sequence(debugContext=tag)

        def cloning(values: Sequence[Any], source: str) -> _Cloning:
            return _Cloning(values, source, graph, tag, clones, by_id, r.read)

        inner = GradContext(
            graph=graph, prog=body, name=ctx.name, op_type=ctx.op_type, attrs=ctx.attrs,
            opset=ctx.opset, inputs=cloning(r.inputs, INPUT), outputs=cloning(r.outputs, OUTPUT),
            grad_outputs=cloning(ctx.grad_outputs, GRAD_OUTPUT), wanted=list(ctx.wanted),
        )  # fmt: skip
        grads = [g if isinstance(g, Tensor) else None for g in fn(inner)]
        function = graph.addFunction(body)
        fresh = variable_tensors(graph, first, variable_count(graph))
        return _GradFunction(function, clones, grads, fresh)

    def _call_site(self, built: _GradFunction, r: NodeRecord, ctx: GradContext) -> Grads:
        """Undefine the function's variables, copy ``r``'s operands in, call, copy the
        gradients out into new tensors of this occurrence."""
        prog, graph = ctx.prog, ctx.graph
        sources = {INPUT: r.inputs, OUTPUT: r.outputs, GRAD_OUTPUT: ctx.grad_outputs}
        for t in built.fresh:
            prog.add(pprog.WriteUndef(t))
        for (source, index), clone in built.clones.items():
            value = list.__getitem__(sources[source], index)
            r.read.add(id(value))
            prog.add(pprog.Copy(value, clone))
        prog.add(pprog.Call(built.function, debugContext=f"{ctx.name}/call"))
        out: list[Tensor | None] = []
        for k, g in enumerate(built.grads):
            if g is None:
                out.append(None)
                continue
            mine = like(graph, g, f"{ctx.name}/out{k}")
            prog.add(pprog.Copy(g, mine))
            out.append(mine)
        return out


__all__ = ["GradOutliner"]
