"""Control flow: ``If``, ``Loop`` and ``Scan``, lowered as PopART lowers them.

PopART (graphcore/popart @d2f20d78) builds each ONNX subgraph as a graph of its IR
and calls it from a Poplar control program:

* ``If`` (``willow/src/op/if.cpp``, ``popx/op/ifx.cpp``): both branches are lowered,
  each copies its outputs into the op's outputs, and a Poplar ``If`` on the scalar
  condition runs one of them.
* ``Loop`` (``willow/src/op/loop.cpp``, ``popx/op/loopx.cpp``, ``LoopOpx::grow``):
  the trip count ``M`` must be known when the graph is built (``LoopOp`` reads its
  value); the loop-carried values live in copies of the body's outputs; a
  ``Repeat(M)`` runs ``exit = exit || !cond`` and then, in an ``If(exit)``, either
  nothing or the body (body outputs copied to the body inputs, the iteration count
  copied in, the body, its outputs copied back, the iteration count incremented).
  Scan outputs (``LoopScanOutPattern``) are ``[M, ...]`` tensors each iteration
  writes its row of.
* ``Scan`` (opsets 9 and 11; ``willow/src/op/scan.cpp``, ``ScanToLoopPattern``): a
  loop of as many iterations as the scan inputs are long along their axes, each
  iteration reading one slice of every scan input (reversed when its direction is
  1) and writing one slice of every scan output.

Where PopART slices and updates by the iteration count with ``popops::dynamicSlice``
and ``dynamicUpdate``, this lowering uses a Poplar ``Switch`` on the iteration count
with one ``Copy`` per iteration (the trip count is known, so every case is): the same
values, with copy programs instead of dynamic-slice vertices. Rows of a Loop's scan
outputs that an early exit leaves unwritten are zero (PopART leaves them
uninitialised). The body's ops see the enclosing graph's values by name
(:attr:`LoweringContext.scope`), as ONNX's outer-scope references. Loop-carried values
must keep their shape and type (PopART's tensors are static).

Gradients: PopART differentiates ``If`` (``IfOp::getGradOps`` makes an ``IfGradOp``
running the backward graph of each branch under the same condition), not ``Loop`` or
``Scan``. In a ``TrainingSession`` each ``If`` branch keeps its node records and the
values of the enclosing graph it reads (the node's implicit inputs, recorded after its
condition); the gradient runs each branch's backward pass in a Poplar ``If`` on the
forward predicate, and a value one branch does not reach gets zeros there. A ``Loop``
or ``Scan`` body reading a float tensor of the enclosing graph is a named error (its
gradient would otherwise be lost), and a ``Loop`` or ``Scan`` with a float input on a
trained weight's path is the autodiff's error for an op without a gradient.
"""

from __future__ import annotations

import dataclasses
from collections import ChainMap
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from popart_api.autodiff import (
    GradContext,
    Grads,
    NodeRecord,
    add_grads,
    backward,
    is_float,
    register_grad,
)
from popart_api.errors import popart_exception
from popart_api.onnx_model import node_attrs
from popart_api.ops import Value, context, lookup, lowering_context, register, tensor
from popart_api.ops_tensor import _norm_axes
from poplar_api import BOOL, FLOAT, HALF, INT, Graph, Tensor, popops
from poplar_api import program as pprog
from poplar_api.errors import PoplarError
from poplar_api.poputil import mapTensorLinearly

__all__ = ["IF_GRAD", "IfBranch", "IfGrad", "implicit_inputs", "lower_subgraph", "node_record"]

#: The largest trip count (``LoopOp`` casts ``M`` to int32).
_INT32_MAX = 2**31 - 1


def lower_subgraph(
    graph: Graph,
    body: onnx.GraphProto,
    bound: dict[str, Value],
    prog: pprog.Sequence,
    name: str,
    records: list[NodeRecord] | None = None,
    reads: dict[str, Value] | None = None,
) -> list[Value]:
    """Lower the nodes of ONNX subgraph ``body`` into ``prog``; return its outputs.

    Parameters
    ----------
    graph
        The graph the enclosing node is lowered on.
    body
        The subgraph (an ``If`` branch, a ``Loop`` or ``Scan`` body).
    bound
        Values of the subgraph's inputs by name (the loop's variables).
    prog
        The program the subgraph's ops append to (a branch or the loop body).
    name
        The enclosing node's name; the subgraph's nodes are named under it.
    records
        When given (an ``If`` branch in training), a :class:`NodeRecord` per lowered
        node is appended, for the branch's backward pass.
    reads
        When given, the values of the enclosing graph the subgraph reads, by id (the
        ``If``'s implicit inputs, which get gradients); otherwise, in training, a
        float one is refused (a Loop or Scan body: no gradient through it).

    Raises
    ------
    popart_exception
        An op that is not supported, an input no node, subgraph input or enclosing
        value makes, or a lowering error (naming the subgraph's node).
    """
    parent = context()
    local: dict[str, Value] = dict(bound)
    for init in body.initializer:
        local[init.name] = numpy_helper.to_array(init)
    outer = parent.scope if parent.scope is not None else {}
    scope = ChainMap(local, outer)
    for i, node in enumerate(body.node):
        nname = f"{name}/{node.name or f'{node.op_type}_{i}'}"
        domain = node.domain or "ai.onnx"
        opset = parent.opset if domain == "ai.onnx" else 1
        fn = lookup(domain, node.op_type, opset, nname)
        inputs: list[Value] = []
        for tid in node.input:
            if tid and tid not in scope:
                raise popart_exception(
                    f"{node.op_type} (node '{nname}' in subgraph '{body.name}'): input "
                    f"'{tid}' is made by no earlier node of the subgraph, subgraph input or "
                    "value of the enclosing graph"
                )
            value = scope[tid] if tid else None
            if tid and tid not in local and parent.fetch is not None:
                value = parent.fetch(tid, value)  # on this node's IPU
            if tid and tid not in local:
                if reads is not None:
                    reads.setdefault(tid, value)
                elif parent.training:
                    _refuse_training(value, tid, node.op_type, nname, name)
            inputs.append(value)
        while inputs and inputs[-1] is None:
            inputs.pop()
        ctx = dataclasses.replace(parent, num_outputs=len(node.output), scope=scope)
        attrs = node_attrs(node)
        try:
            with lowering_context(ctx):
                outs = list(fn(graph, inputs, attrs, prog, nname))
        except PoplarError as exc:
            raise popart_exception(f"{node.op_type} (node '{nname}'): {exc}") from None
        record = node_record(node, nname, domain, opset, attrs, inputs, outs)
        if reads is not None:  # a nested If's reads of this subgraph's enclosing scope
            for tid, value in zip(record.input_ids, record.inputs, strict=True):
                if tid and tid not in local:
                    reads.setdefault(tid, value)
        if records is not None:
            records.append(record)
        for tid, v in zip(node.output, outs + [None] * len(node.output), strict=False):
            if tid and v is None:
                raise popart_exception(
                    f"{node.op_type} (node '{nname}'): output '{tid}' is not supported by "
                    "popart_api's lowering of this op"
                )
            if tid:
                local[tid] = v
    results = []
    for vi in body.output:
        if vi.name not in scope:
            raise popart_exception(
                f"subgraph '{body.name}' of node '{name}': output '{vi.name}' is made by no "
                "node, input or enclosing value"
            )
        results.append(scope[vi.name])
    return results


def _refuse_training(value: Value, tid: str, op: str, nname: str, name: str) -> None:
    """In training, an error for a float device value a subgraph reads from the
    enclosing graph: its gradient would be lost silently (the node's recorded inputs
    do not include it)."""
    if isinstance(value, Tensor) and value.elementType() in (FLOAT, HALF):
        raise popart_exception(
            f"{op} (node '{nname}'): this subgraph of node '{name}' reads '{tid}', a float "
            "tensor of the enclosing graph; there is no gradient through the body of a Loop "
            "or Scan (PopART differentiates If, not Loop or Scan), so a TrainingSession "
            "refuses it; hint: run the model in an InferenceSession, or pass the value as "
            "a loop-carried input off the weights' path"
        )


def _variable(graph: Graph, like: Tensor, name: str, shape: list[int] | None = None) -> Tensor:
    """A new variable of ``like``'s type (and shape unless given), mapped linearly."""
    t = graph.addVariable(like.elementType(), like.shape() if shape is None else shape, name)
    mapTensorLinearly(graph, t)
    return t


def _scalar(graph: Graph, typ: Any, name: str) -> Tensor:
    t = graph.addVariable(typ, [], name)
    graph.setTileMapping(t, 0)
    return t


def _copy(src: Tensor, dst: Tensor, prog: pprog.Sequence) -> None:
    if dst.numElements():
        prog.add(pprog.Copy(src, dst))


def _matching(graph: Graph, value: Value, like: Tensor, op: str, name: str, what: str) -> Tensor:
    """``value`` as a Tensor of ``like``'s shape and type, or an error naming ``what``."""
    t = tensor(graph, value, name, like if not isinstance(value, Tensor) else None)
    if t.shape() != like.shape() or t.elementType() != like.elementType():
        raise popart_exception(
            f"{op} (node '{name}'): {what} is {t.elementType().name} {t.shape()} but must be "
            f"{like.elementType().name} {like.shape()} (the value it replaces); PopART's "
            "tensors have static shapes and types; hint: keep the loop-carried value's "
            "shape and type"
        )
    return t


def _graph_attr(attrs: dict, key: str, op: str, name: str) -> onnx.GraphProto:
    g = attrs.get(key)
    if not isinstance(g, onnx.GraphProto):
        raise popart_exception(f"{op} (node '{name}'): the graph attribute '{key}' is required")
    return g


def _scalar_pred(value: Tensor, op: str, what: str, name: str) -> Tensor:
    if value.numElements() != 1:
        raise popart_exception(
            f"{op} (node '{name}'): {what} '{value.name}' has shape {value.shape()}; it must "
            "hold one element (a BOOL scalar)"
        )
    return value.reshape([])


# ------------------------------------------------------------------------- If
#: Attribute key under which a trained ``If`` keeps what its gradient needs.
IF_GRAD = "__if_grad__"


@dataclasses.dataclass
class IfBranch:
    """One lowered branch of an ``If`` in training: its node records, its output ids
    and values (before they are copied into the node's outputs)."""

    records: list[NodeRecord]
    output_ids: list[str]
    outputs: list[Value]


@dataclasses.dataclass
class IfGrad:
    """What the gradient of an ``If`` (PopART's ``IfGradOp``) needs: the scalar
    predicate (None when the condition was known and one branch was inlined), the
    branches lowered (then, else; or the one inlined) and the values of the
    enclosing graph they read (its implicit inputs), in order of first reading."""

    pred: Tensor | None
    branches: list[IfBranch] = dataclasses.field(default_factory=list)
    reads: dict[str, Value] = dataclasses.field(default_factory=dict)


def implicit_inputs(attrs: dict) -> tuple[list[str], list[Value]]:
    """Ids and values of the enclosing graph a node's subgraphs read, when they get
    gradients (an ``If`` in training): the node record lists them after its inputs."""
    info = attrs.get(IF_GRAD)
    if info is None:
        return [], []
    return list(info.reads), list(info.reads.values())


def node_record(
    node: onnx.NodeProto,
    name: str,
    domain: str,
    opset: int,
    attrs: dict,
    inputs: list[Value],
    outputs: list[Value],
    ipu: int = 0,
    stage: int | None = None,
) -> NodeRecord:
    """The autodiff record of a lowered node: its inputs, then the values of the
    enclosing graph its subgraphs read when they get gradients (an If in training)."""
    extra_ids, extra_values = implicit_inputs(attrs)
    return NodeRecord(
        domain=domain,
        op_type=node.op_type,
        name=name,
        opset=opset,
        attrs=attrs,
        input_ids=[*node.input[: len(inputs)], *extra_ids],
        output_ids=list(node.output),
        inputs=[*inputs, *extra_values],
        outputs=outputs,
        ipu=ipu,
        stage=stage,
    )


def _branch(
    graph: Graph,
    body: onnx.GraphProto,
    prog: pprog.Sequence,
    name: str,
    attrs: dict,
    pred: Tensor | None,
) -> list[Value]:
    """Lower an ``If`` branch; in training, keep its records for the gradient."""
    if not context().training:
        return lower_subgraph(graph, body, {}, prog, name)
    info = attrs.setdefault(IF_GRAD, IfGrad(pred))
    records: list[NodeRecord] = []
    outs = lower_subgraph(graph, body, {}, prog, name, records, info.reads)
    info.branches.append(IfBranch(records, [o.name for o in body.output], outs))
    return outs


@register("If", since=1)
def _if(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    then_g = _graph_attr(attrs, "then_branch", "If", name)
    else_g = _graph_attr(attrs, "else_branch", "If", name)
    if len(then_g.output) != len(else_g.output):
        raise popart_exception(
            f"If (node '{name}'): then_branch has {len(then_g.output)} outputs and "
            f"else_branch {len(else_g.output)}; both branches must give the node's outputs"
        )
    cond = inputs[0] if inputs else None
    if cond is None:
        raise popart_exception(f"If (node '{name}'): the condition input is required")
    if not isinstance(cond, Tensor):  # known when the graph is built: one branch
        arr = np.asarray(cond)
        if arr.size != 1:
            raise popart_exception(
                f"If (node '{name}'): the condition has shape {list(arr.shape)}; it must "
                "hold one element"
            )
        taken = bool(arr.reshape(-1)[0])
        branch = then_g if taken else else_g
        return _branch(graph, branch, prog, f"{name}/{'then' if taken else 'else'}", attrs, None)
    pred = _scalar_pred(cond, "If", "condition", name)
    then_p = pprog.Sequence(debugContext=f"{name}/then")
    else_p = pprog.Sequence(debugContext=f"{name}/else")
    t_out = _branch(graph, then_g, then_p, f"{name}/then", attrs, pred)
    e_out = _branch(graph, else_g, else_p, f"{name}/else", attrs, pred)
    outs = []
    for k, (a, b) in enumerate(zip(t_out, e_out, strict=True)):
        like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
        a_t = tensor(graph, a, f"{name}/then", like)
        b_t = tensor(graph, b, f"{name}/else", a_t)
        if a_t.shape() != b_t.shape() or a_t.elementType() != b_t.elementType():
            raise popart_exception(
                f"If (node '{name}'): output {k} is {a_t.elementType().name} {a_t.shape()} "
                f"in then_branch ('{then_g.output[k].name}') but {b_t.elementType().name} "
                f"{b_t.shape()} in else_branch ('{else_g.output[k].name}'); PopART needs "
                "both branches to give the same shapes and types"
            )
        out = _variable(graph, a_t, f"{name}/out{k}")
        _copy(a_t, out, then_p)
        _copy(b_t, out, else_p)
        outs.append(out)
    prog.add(pprog.If(pred, then_p, else_p, name))
    return outs


@register_grad("If")
def _if_grad(g: GradContext) -> Grads:
    """PopART's ``IfGradOp`` (``willow/src/op/if.cpp``, ``IfOp::getGradOps``): the
    backward pass of each branch, run under the forward condition, gives the gradients
    of the values of the enclosing graph the branches read (the If's implicit inputs,
    after its condition in the record); a value one branch does not reach gets zeros
    in that branch."""
    info: IfGrad | None = g.attrs.get(IF_GRAD)
    n_in = len(g.inputs)
    if info is None:  # lowered outside a TrainingSession
        return [None] * n_in
    ids = list(info.reads)
    first = n_in - len(ids)
    wanted = [j for j in range(len(ids)) if g.needs_grad(first + j)]
    out: list[Tensor | None] = [None] * n_in
    if not wanted:
        return out
    sources = [ids[j] for j in wanted]
    targets: dict[int, Tensor] = {}
    progs = []
    for b, branch in enumerate(info.branches):
        bprog = g.prog if info.pred is None else pprog.Sequence(debugContext=f"{g.name}/{b}")
        seeds: dict[str, Tensor] = {}
        for k, (oid, value) in enumerate(zip(branch.output_ids, branch.outputs, strict=True)):
            dy = g.grad_outputs[k] if k < len(g.grad_outputs) else None
            if dy is None or not is_float(value):
                continue
            prev = seeds.get(oid)
            seeds[oid] = dy if prev is None else add_grads(g.graph, prev, dy, bprog, g.name)
        found = backward(g.graph, branch.records, seeds, sources, bprog)
        for j in wanted:
            x = g.inputs[first + j]
            grad = found.get(ids[j])
            if grad is not None and grad.elementType() != x.elementType():
                grad = popops.cast(g.graph, grad, x.elementType(), bprog, f"{g.name}/cast")
            if info.pred is None:  # one branch inlined: its gradients as they are
                out[first + j] = grad
                continue
            if j not in targets:
                targets[j] = _variable(g.graph, x, f"{g.name}/{ids[j]}")
            if grad is None:
                popops.zero(g.graph, targets[j], bprog, f"{g.name}/{b}/zero")
            else:
                _copy(grad, targets[j], bprog)
        progs.append(bprog)
    if info.pred is not None:
        g.prog.add(pprog.If(info.pred, progs[0], progs[1], f"{g.name}/branches"))
        for j, t in targets.items():
            out[first + j] = t
    return out


# ----------------------------------------------------------------------- Loop
def _slot_copies(
    graph: Graph,
    outs: list[Tensor],
    arrays: list[Tensor],
    axes: list[int],
    rows: list[list[int]],
    counter: Tensor,
    name: str,
) -> pprog.Program:
    """A ``Switch`` on ``counter``: case ``j`` copies ``outs[k]`` into row
    ``rows[k][j]`` of ``arrays[k]`` along ``axes[k]`` (a scan output's update)."""
    cases = []
    for j in range(len(rows[0]) if rows else 0):
        seq = pprog.Sequence()
        for out, arr, axis, r in zip(outs, arrays, axes, rows, strict=True):
            _copy(out, arr.slice(r[j], r[j] + 1, axis).squeeze([axis]), seq)
        cases.append((j, seq))
    return pprog.Switch(counter, cases, f"{name}/scanOut")


def _loop_state(
    graph: Graph, values: list[Tensor], name: str, prog: pprog.Sequence
) -> tuple[list[Tensor], list[Tensor]]:
    """The body-input variables and the carried copies of ``values`` (PopART's body
    output clones), the copies initialised from ``values`` in ``prog``."""
    body_in, carried = [], []
    for k, v in enumerate(values):
        body_in.append(_variable(graph, v, f"{name}/in{k}"))
        c = _variable(graph, v, f"{name}/carried{k}")
        _copy(v, c, prog)
        carried.append(c)
    return body_in, carried


@register("Loop", since=1)
def _loop(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    body = _graph_attr(attrs, "body", "Loop", name)
    inputs = list(inputs) + [None] * max(0, 2 - len(inputs))
    m, cond, v_init = inputs[0], inputs[1], inputs[2:]
    if m is None:
        raise popart_exception(
            f"Loop (node '{name}'): no trip count input 'M'; PopART needs the trip count "
            "known when it builds its graph (it is the Repeat count); hint: give M as a "
            "Constant or an initializer"
        )
    if isinstance(m, Tensor):
        raise popart_exception(
            f"Loop (node '{name}'): the trip count input 'M' ('{m.name}') is computed on "
            "the device; PopART needs it known when it builds its graph (LoopOp reads "
            "its value); hint: give M as a Constant or an initializer"
        )
    trips = max(int(np.asarray(m).reshape(-1)[0]), 0)
    if trips > _INT32_MAX:
        raise popart_exception(
            f"Loop (node '{name}'): trip count {trips} (an ONNX 'while' loop's unbounded M) "
            f"exceeds {_INT32_MAX}; PopART holds it as an int32 Repeat count; hint: give the "
            "largest number of iterations the loop can take"
        )
    n = len(v_init)
    if len(body.input) != 2 + n or len(body.output) < 1 + n:
        raise popart_exception(
            f"Loop (node '{name}'): the body has {len(body.input)} inputs and "
            f"{len(body.output)} outputs; with {n} loop-carried values it needs {2 + n} "
            f"inputs (iteration, condition, values) and at least {1 + n} outputs"
        )
    init = [tensor(graph, v, f"{name}/init{k}") for k, v in enumerate(v_init)]
    it_in = _scalar(graph, INT, f"{name}/iteration")
    cond_in = _scalar(graph, BOOL, f"{name}/cond")
    cond_carried = _scalar(graph, BOOL, f"{name}/condOut")
    if cond is None:
        popops.fill(graph, cond_carried, True, prog, f"{name}/condTrue")
    else:
        c = tensor(graph, cond, f"{name}/cond", cond_carried)
        prog.add(pprog.Copy(_scalar_pred(c, "Loop", "condition", name), cond_carried))
    body_in, carried = _loop_state(graph, init, name, prog)
    counter = _scalar(graph, INT, f"{name}/iterator")
    popops.zero(graph, counter, prog, f"{name}/iterator0")
    exit_ = _scalar(graph, BOOL, f"{name}/exit")
    popops.fill(graph, exit_, False, prog, f"{name}/exitFalse")
    cont = pprog.Sequence(debugContext=f"{name}/continue")
    cont.add(pprog.Copy(cond_carried, cond_in))
    for src, dst in zip(carried, body_in, strict=True):
        _copy(src, dst, cont)
    cont.add(pprog.Copy(counter, it_in))
    bound = {body.input[0].name: it_in, body.input[1].name: cond_in}
    bound.update({vi.name: t for vi, t in zip(body.input[2:], body_in, strict=True)})
    outs = lower_subgraph(graph, body, bound, cont, f"{name}/body")
    cond_out = tensor(graph, outs[0], f"{name}/condOut", cond_carried)
    what = f"body output '{body.output[0].name}'"
    cond_out = _matching(graph, _scalar_pred(cond_out, "Loop", what, name), cond_carried,
                         "Loop", name, what)  # fmt: skip
    cont.add(pprog.Copy(cond_out, cond_carried))
    for k, c in enumerate(carried):
        what = f"body output '{body.output[1 + k].name}'"
        _copy(_matching(graph, outs[1 + k], c, "Loop", name, what), c, cont)
    scan_outs = [tensor(graph, v, f"{name}/scan") for v in outs[1 + n :]]
    arrays = [_variable(graph, s, f"{name}/scanOut{k}", [trips, *s.shape()])
              for k, s in enumerate(scan_outs)]  # fmt: skip
    for a in arrays:
        if a.numElements():
            popops.zero(graph, a, prog, f"{name}/scanZero")
    if arrays and trips:
        rows = [list(range(trips))] * len(arrays)
        cont.add(_slot_copies(graph, scan_outs, arrays, [0] * len(arrays), rows, counter, name))
    popops.addInPlace(graph, counter, 1, cont, f"{name}/iteratorUpdate")
    step = pprog.Sequence(debugContext=f"{name}/loop")
    popops.logicalOrInPlace(
        graph, exit_, popops.logicalNot(graph, cond_carried, step, f"{name}/notCond"), step,
        f"{name}/exitUpdate",
    )  # fmt: skip
    step.add(pprog.If(exit_, pprog.Sequence(debugContext=f"{name}/exit"), cont, f"{name}/cond"))
    prog.add(pprog.Repeat(trips, step, f"{name}/loop"))
    return [*carried, *arrays]


# ----------------------------------------------------------------------- Scan
def _axes(attrs: dict, key: str, count: int, ranks: list[int], op: str, name: str) -> list[int]:
    raw = [int(a) for a in attrs.get(key, [0] * count)]
    if len(raw) != count:
        raise popart_exception(
            f"{op} (node '{name}'): attribute '{key}' has {len(raw)} entries; {count} are "
            "required (one per scan tensor)"
        )
    what = f"'{key}' entry"
    return [_norm_axes([a], r, op, name, what)[0] for a, r in zip(raw, ranks, strict=True)]


@register("Scan", since=9)
def _scan(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    body = _graph_attr(attrs, "body", "Scan", name)
    if "num_scan_inputs" not in attrs:
        raise popart_exception(f"Scan (node '{name}'): attribute 'num_scan_inputs' is required")
    n_scan = int(attrs["num_scan_inputs"])
    n_state = len(inputs) - n_scan
    if n_scan < 1 or n_state < 0:
        raise popart_exception(
            f"Scan (node '{name}'): num_scan_inputs is {n_scan} with {len(inputs)} inputs; "
            "required: 1 <= num_scan_inputs <= the number of inputs"
        )
    values = [tensor(graph, v, f"{name}/in{k}") for k, v in enumerate(inputs)]
    states, scans = values[:n_state], values[n_state:]
    in_axes = _axes(attrs, "scan_input_axes", n_scan, [s.rank() for s in scans], "Scan", name)
    in_dirs = [int(d) for d in attrs.get("scan_input_directions", [0] * n_scan)]
    lengths = {s.dim(a) for s, a in zip(scans, in_axes, strict=True)}
    if len(lengths) != 1:
        raise popart_exception(
            f"Scan (node '{name}'): the scan inputs "
            f"{[f'{s.name} {s.shape()}' for s in scans]} have different lengths "
            f"{sorted(lengths)} along their scan axes {in_axes}; they must be equal"
        )
    steps = lengths.pop()
    if len(body.input) != n_state + n_scan or len(body.output) < n_state:
        raise popart_exception(
            f"Scan (node '{name}'): the body has {len(body.input)} inputs and "
            f"{len(body.output)} outputs; with {n_state} states and {n_scan} scan inputs it "
            f"needs {n_state + n_scan} inputs and at least {n_state} outputs"
        )
    body_in, carried = _loop_state(graph, states, name, prog)
    slices = [
        _variable(graph, s, f"{name}/slice{k}", [d for i, d in enumerate(s.shape()) if i != a])
        for k, (s, a) in enumerate(zip(scans, in_axes, strict=True))
    ]
    counter = _scalar(graph, INT, f"{name}/iterator")
    popops.zero(graph, counter, prog, f"{name}/iterator0")
    step = pprog.Sequence(debugContext=f"{name}/body")
    for src, dst in zip(carried, body_in, strict=True):
        _copy(src, dst, step)
    cases = []
    for j in range(steps):
        seq = pprog.Sequence()
        for s, a, d, dst in zip(scans, in_axes, in_dirs, slices, strict=True):
            row = steps - 1 - j if d else j
            _copy(s.slice(row, row + 1, a).squeeze([a]), dst, seq)
        cases.append((j, seq))
    step.add(pprog.Switch(counter, cases, f"{name}/scanIn"))
    bound = {vi.name: t for vi, t in zip(body.input, [*body_in, *slices], strict=True)}
    outs = lower_subgraph(graph, body, bound, step, f"{name}/body")
    for k, c in enumerate(carried):
        _copy(_matching(graph, outs[k], c, "Scan", name, f"body output '{body.output[k].name}'"),
              c, step)  # fmt: skip
    scan_outs = [tensor(graph, v, f"{name}/scan") for v in outs[n_state:]]
    n_out = len(scan_outs)
    out_axes = _axes(attrs, "scan_output_axes", n_out, [s.rank() + 1 for s in scan_outs],
                     "Scan", name)  # fmt: skip
    out_dirs = [int(d) for d in attrs.get("scan_output_directions", [0] * n_out)]
    arrays = []
    for k, (s, a) in enumerate(zip(scan_outs, out_axes, strict=True)):
        shape = s.shape()
        arrays.append(_variable(graph, s, f"{name}/scanOut{k}", [*shape[:a], steps, *shape[a:]]))
    if arrays and steps:
        rows = [[steps - 1 - j if d else j for j in range(steps)] for d in out_dirs]
        step.add(_slot_copies(graph, scan_outs, arrays, out_axes, rows, counter, name))
    popops.addInPlace(graph, counter, 1, step, f"{name}/iteratorUpdate")
    prog.add(pprog.Repeat(steps, step, f"{name}/loop"))
    return [*carried, *arrays]
