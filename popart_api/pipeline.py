"""Pipelined execution (``SessionOptions.enablePipelining``): stages on different IPUs
working on different micro-batches at the same time.

Every node has a pipeline stage (``Builder.pipelineStage``, else its virtual graph;
:func:`place_nodes` gives each node its IPU and stage).
The micro-batches of a batch (``accumulationFactor`` of them in training,
``batchesPerStep`` in inference) go through a static schedule of *pipeline cycles*:

* inference: stage ``s`` runs micro-batch ``k`` in cycle ``k + s``;
* training: the forward of stage ``s`` runs micro-batch ``k`` in cycle ``k + s`` and
  its backward in cycle ``k + 2S - 1 - s`` (``S`` stages), as PopART's schedule of
  fill, main and flush phases.

Within a cycle the forwards run from the last stage to the first and the backwards
from the first to the last, so each reads what its neighbour made in the previous
cycle; as the stages are on different IPUs, the simulator runs a cycle's stages at the
same time, meeting at the copies between IPUs (PopART's IpuCopy). A stage's
activations are stashed after its forward and restored before its backward (a
circular stash of ``2(S - s)`` entries: ``2(S - 1 - s) + 1`` micro-batches are in
flight between the two, plus the one whose forward runs earlier in the cycle of the
backward), since later micro-batches overwrite them in between; the stash is
addressed by index tensors (:func:`_stash_programs`, PopART's StashOp and RestoreOp),
so every cycle in which all stages run is the same program and the main phase is one
cycle in a ``Repeat`` between the fill and flush cycles (:func:`_schedule`). The
weight gradients are accumulated over the micro-batches and the optimizer runs once
per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from popart_api import autodiff
from popart_api.builder import PIPELINE_STAGE_ATTRIBUTE, VIRTUAL_GRAPH_ATTRIBUTE
from popart_api.errors import popart_exception
from popart_api.graph_patterns import _tensor_info
from popart_api.onnx_model import node_attrs
from popart_api.optimizers import OptimizerLowering, like
from popart_api.options import VirtualGraphMode
from poplar_api import UNSIGNED_INT, Tensor, gcl, popops
from poplar_api import program as pprog
from poplar_api.graph import OUTSIDE, touches_constant, variable_count
from poplar_api.popops.dynamic_slice import (
    createSliceableTensorFromSlice,
    dynamicSlice,
    dynamicUpdate,
)
from poplar_api.poputil import mapTensorLinearly

if TYPE_CHECKING:  # the session imports this module when it builds
    from popart_api.session import _Session


def place_nodes(
    model: onnx.ModelProto,
    mode: VirtualGraphMode,
    ipus: int,
    what: str,
    device_ipus: int,
    replicas: int,
) -> tuple[list[int], list[int]]:
    """Per node of ``model``: its IPU within a replica (of ``ipus``) and its pipeline
    stage (``Builder.pipelineStage``, else its IPU).

    ``virtualGraphMode`` Manual takes each node's ``Builder.virtualGraph``; Auto cuts
    the nodes as PopART's ``AutoVirtualGraph`` does (:func:`auto_virtual_graphs`); Off
    puts every node on IPU 0.
    """
    nodes = list(model.graph.node)
    placed: list[int] = []
    if mode is VirtualGraphMode.Auto and ipus > 1:
        placed = auto_virtual_graphs(model, ipus, what == "TrainingSession", what)
    else:
        for i, node in enumerate(nodes):
            v = node_attrs(node).get(VIRTUAL_GRAPH_ATTRIBUTE)
            if mode is VirtualGraphMode.Manual and v is None:
                raise popart_exception(
                    f"{what}: virtualGraphMode is Manual but node "
                    f"'{node.name or node.op_type + '_' + str(i)}' ({node.op_type}) has no "
                    "virtual graph; hint: builder.virtualGraph(id, ipu) or "
                    "`with builder.virtualGraph(ipu):`"
                )
            v = int(v or 0) if mode is not VirtualGraphMode.Off else 0
            if v >= ipus:
                raise popart_exception(
                    f"{node.op_type} (node '{node.name}'): virtual graph {v} needs more "
                    f"IPUs than the {ipus} of each replica (device {device_ipus}"
                    f" IPUs / {replicas} replicas)"
                )
            placed.append(v)
    stages = []
    for node, ipu in zip(nodes, placed, strict=True):
        s = node_attrs(node).get(PIPELINE_STAGE_ATTRIBUTE)
        stages.append(int(s) if s is not None else ipu)
    return [int(x) for x in placed], stages


def check_stage_order(model: onnx.ModelProto, stages: list[int], what: str) -> None:
    """Refuse a node that reads a tensor made in a later pipeline stage: a pipelined
    step runs each stage on a batch before the later stages do, so the node would read
    a value of another batch (or none yet), as PopART refuses it."""
    made: dict[str, tuple[int, str]] = {}
    for i, (node, stage) in enumerate(zip(model.graph.node, stages, strict=True)):
        name = node.name or f"{node.op_type}_{i}"
        for tid in node.input:
            if tid in made and made[tid][0] > stage:
                raise popart_exception(
                    f"{what}: {node.op_type} (node '{name}') in pipeline stage {stage} reads "
                    f"'{tid}', made by {made[tid][1]} in the later stage {made[tid][0]}; "
                    "required a tensor's readers in its producer's stage or later; hint: "
                    "number the stages in the order the data flows (builder.pipelineStage)"
                )
        for tid in node.output:
            made[tid] = (stage, f"{node.op_type} (node '{name}')")


def _tensor_bytes(model: onnx.ModelProto) -> tuple[dict[str, int], set[str]]:
    """Bytes of every tensor whose type and shape ONNX's shape inference finds (PopART
    knows every tensor's info when it places ops; a model built with ``onnx.helper``
    records no ``value_info``, and without inference its activations would cost
    nothing), and the initializers' ids."""
    sizes: dict[str, int] = {}
    for name, (elem, shape) in _tensor_info(model).items():
        if shape is None:
            continue
        try:
            item = onnx.helper.tensor_dtype_to_np_dtype(elem).itemsize
        except Exception:  # an undefined or exotic type: no cost
            continue
        sizes[name] = item * int(np.prod(shape, dtype=np.int64))
    return sizes, {t.name for t in model.graph.initializer}


def auto_virtual_graphs(model: onnx.ModelProto, ipus: int, training: bool, what: str) -> list[int]:
    """The IPU of each node under ``VirtualGraphMode.Auto``, as PopART's
    ``AutoVirtualGraph`` transform places ops (graphcore/popart d2f20d78,
    ``willow/src/transforms/auto_virtual_graph.cpp``, ``AutoVirtualGraph::apply`` and
    ``Subgraph::best_split``).

    An op costs the bytes of the weights and constants it reads, plus in training the
    bytes of its other inputs and outputs (PopART adds those its gradient ops read,
    ``AutoVirtualGraph::costFn`` at 3a6002b; every input and output here), every
    tensor's size from ONNX's shape inference (:func:`_tensor_bytes`). Ops may be cut
    after an op that was the last pending consumer of everything made before it (the
    only tensors crossing the cut are its outputs): a *split node* with the cumulative
    cost up to it. For IPU ``i`` of ``n`` the budget is ``(i + 1) / n`` of the total
    cost; the split node whose cumulative cost is the first at or above the budget is
    taken, or the one before it when that is closer. The ops up to a split stay on the
    IPU, the rest go to the next. The model's nodes are in topological order (PopART
    walks its schedule), and they form one subgraph.

    Raises
    ------
    popart_exception
        Fewer split points than IPUs - 1 (PopART: "Couldn't find enough splits").
    """
    nodes = list(model.graph.node)
    sizes, weights = _tensor_bytes(model)
    consumers: dict[str, list[int]] = {}
    for k, node in enumerate(nodes):
        for i in node.input:
            consumers.setdefault(i, []).append(k)
    costs = []
    for node in nodes:
        cost = sum(sizes.get(i, 0) for i in set(node.input) if i in weights)
        if training:
            cost += sum(sizes.get(i, 0) for i in set(node.input) if i and i not in weights)
            cost += sum(sizes.get(o, 0) for o in node.output if o)
        costs.append(float(cost))
    pending: set[int] = set()
    splits: list[tuple[float, int]] = []  # (cumulative cost, node index), increasing
    total = 0.0
    for k, node in enumerate(nodes):
        total += costs[k]
        pending.discard(k)
        if not pending:
            splits.append((total, k))
        for o in node.output:
            pending.update(c for c in consumers.get(o, []) if c > k)
    cut_after: list[int] = []
    last = -1
    for i in range(1, ipus):
        budget = i / ipus * total
        usable = [(c, k) for c, k in splits if k > last and k < len(nodes) - 1]
        above = [x for x in usable if x[0] >= budget]
        if not above:
            break
        best = above[0]
        below = [x for x in usable if x[0] < budget]
        if below and budget - below[-1][0] < best[0] - budget:
            best = below[-1]
        cut_after.append(best[1])
        last = best[1]
    if len(cut_after) != ipus - 1:
        raise popart_exception(
            f"{what}: virtualGraphMode Auto could not find {ipus - 1} places to cut the "
            f"model for {ipus} IPUs (found {len(cut_after)}): the model has too few nodes "
            "after which a single tensor crosses; hint: VirtualGraphMode.Manual with "
            "builder.virtualGraph(ipu), or fewer IPUs per replica"
        )
    placed, ipu = [], 0
    for k in range(len(nodes)):
        placed.append(ipu)
        if ipu < len(cut_after) and k == cut_after[ipu]:
            ipu += 1
    return placed


def sum_over_replicas(
    session: _Session, grads: list[Tensor], prog: pprog.Sequence, name: str
) -> None:
    """With more than one replica, each of ``grads`` summed in place over the replicas
    at the end of ``prog`` (``gcl.allReduceInPlaceCrossReplica``, ADD, named
    ``name/allReduce``), before the weights' update reads them; nothing with one."""
    if session.replicas > 1:
        gcl.allReduceInPlaceCrossReplica(
            session.graph, grads, gcl.CollectiveOperator.ADD, prog, f"{name}/allReduce"
        )


def on_weight_ipu(session: _Session, wid: str, grad: Tensor, prog: pprog.Sequence) -> Tensor:
    """Weight ``wid``'s gradient ``grad`` on the weight's IPU, for its update.

    In a sharded graph the backward pass may leave a gradient on another IPU than its
    weight (an outlined gradient lowered once on the IPU of its first occurrence, a
    weight read on several IPUs). PopART then copies it over (``IpuCopyOp``, inserted
    by its ``InterIpuCopy`` transform, graphcore/popart ``willow/src/transforms/
    interipucopy.cpp``): no compute set reads another IPU's memory. So here: when any
    element of ``grad`` lies outside the weight's IPU, ``grad`` is copied (a ``Copy``
    added to ``prog``) into a new variable mapped as the weight, which is returned;
    else ``grad`` itself. A graph on one IPU, or not split into virtual graphs, is left
    as it is.
    """
    ipu = session.lowered.value_ipu.get(wid)
    if session._whole or session.ipus <= 1 or ipu is None:
        return grad
    tiles = session.lowered.graphs[ipu].elementTiles(grad)
    if not (tiles == OUTSIDE).any():
        return grad
    local = like(session.graph, session.lowered.weight_vars[wid], f"{wid}/gradient/toIpu{ipu}")
    prog.add(pprog.Copy(grad, local))
    return local


def scalar_copies(session: _Session, prog: pprog.Sequence) -> Any:
    """For a sharded graph, the :attr:`~popart_api.optimizers.OptimizerLowering.scalar_on`
    of its optimizer: an optimizer scalar (learning rate, momentum, Adam's step, ...)
    lives on tile 0, and the update of a weight on another IPU reads a copy of it on
    that IPU, made once per IPU by a ``Copy`` added to ``prog`` where it is first
    needed (PopART's ``InterIpuCopy`` transform copies an optimizer tensor to each IPU
    whose ``VarUpdateOp`` consumes it). None when the graph is not sharded."""
    if session._whole or session.ipus <= 1:
        return None
    copies: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}

    def on(scalar: Tensor, wid: str) -> Tensor:
        ipu = session.lowered.value_ipu.get(wid)
        if ipu is None:
            return scalar
        key = (id(scalar), ipu)
        if key not in copies:
            graph = session.lowered.graphs[ipu]
            local = scalar
            if (graph.elementTiles(scalar) == OUTSIDE).any():
                local = graph.addVariable(
                    scalar.elementType(), scalar.shape(), f"{scalar.name}/toIpu{ipu}"
                )
                mapTensorLinearly(graph, local)
                prog.add(pprog.Copy(scalar, local))
            copies[key] = (scalar, local)  # the scalar kept: its id stays its own
        return copies[key][1]

    return on


def _stages(session: _Session) -> int:
    stages = sorted(set(session.lowered.node_stage))
    if stages != list(range(len(stages))):
        raise popart_exception(
            f"{type(session).__name__}: pipeline stages {stages} must be 0, 1, ... without gaps"
        )
    for r in session.lowered.records:
        ipus = {x.ipu for x in session.lowered.records if x.stage == r.stage}
        if len(ipus) > 1:
            raise popart_exception(
                f"{type(session).__name__}: pipeline stage {r.stage} spans IPUs "
                f"{sorted(ipus)}; each stage must be on one IPU"
            )
    return len(stages)


def _stage_forward(session: _Session, num_stages: int) -> tuple[list, list]:
    """Per stage: the input stream copies of the inputs it consumes first, and its
    forward (its nodes, then the sends of its outputs to the next IPU)."""
    fwd = [pprog.Sequence(debugContext=f"stage{s}/forward") for s in range(num_stages)]
    host = [pprog.Sequence(debugContext=f"stage{s}/inputs") for s in range(num_stages)]
    first_stage: dict[str, int] = {}
    for node, stage in zip(session.model.graph.node, session.lowered.node_stage, strict=True):
        for i in node.input:
            first_stage.setdefault(i, stage)
    for tid, p in session.lowered.input_progs.items():
        host[first_stage.get(tid, 0)].add(p)
    for r, p in zip(session.lowered.records, session.lowered.fwd_progs, strict=True):
        fwd[r.stage].add(p)
    for stage, send in session.lowered.pipeline_sends:
        fwd[stage].add(send)
    return host, fwd


def _anchor_stage(session: _Session, aid: str) -> tuple[int, bool]:
    """The stage whose forward (False) or backward (True) makes anchor ``aid``."""
    grad = aid.startswith(autodiff.GRADIENT_PREFIX)
    base = aid[len(autodiff.GRADIENT_PREFIX) :] if grad else aid
    for r in session.lowered.records:
        if base in r.output_ids or (grad and base in r.input_ids):
            return r.stage, grad
    return 0, grad


def _anchor_copies(session: _Session, values: dict, num_stages: int):
    """Per stage: the ALL/SUM anchor programs after its forward and after its backward
    (ALL anchors are captured into a buffer on the device there and streamed to the
    host at the end of the pipeline cycle, ``to_host``), plus the programs after the
    step and before it."""
    after_fwd = [pprog.Sequence() for _ in range(num_stages)]
    after_bwd = [pprog.Sequence() for _ in range(num_stages)]
    to_host_fwd = [pprog.Sequence() for _ in range(num_stages)]
    to_host_bwd = [pprog.Sequence() for _ in range(num_stages)]
    post = pprog.Sequence(debugContext="anchors/final")
    pre = pprog.Sequence(debugContext="anchors/sumZero")
    graph = session.graph
    for aid, art, t, stream in session.anchor_streams(values):
        stage, grad = _anchor_stage(session, aid)
        target = (after_bwd if grad else after_fwd)[stage]
        if art.id() == "ALL":
            buf = like(graph, t, f"anchor/{aid}/buffer")
            target.add(pprog.Copy(t, buf))
            (to_host_bwd if grad else to_host_fwd)[stage].add(pprog.Copy(buf, stream))
        elif art.id() == "FINAL":
            post.add(pprog.Copy(t, stream))
        elif art.id() == "SUM":
            total = like(graph, t, f"anchor/{aid}/sum")
            popops.zero(graph, total, pre, f"anchor/{aid}/sumZero")
            popops.addInPlace(graph, total, t, target, f"anchor/{aid}/sum")
            post.add(pprog.Copy(total, stream))
        else:
            raise popart_exception(
                f"{type(session).__name__}: anchor '{aid}': EVERYN anchors are not supported with "
                "pipelining; hint: ALL, SUM or FINAL"
            )
        session.add_anchor(aid, art, t)
    return after_fwd, after_bwd, (to_host_fwd, to_host_bwd), post, pre


def _schedule(cycles: list[list[pprog.Program]], kinds: list[tuple]) -> pprog.Sequence:
    """The pipeline cycles as PopART runs them (graphcore/popart d2f20d78,
    ``willow/src/popx/popprograms.cpp``, ``getFullProgramFromPipelineFragments``): the
    fill cycles one after another, the main phase's cycles, which all run every stage
    and so are one program, once inside a ``Repeat``, then the flush cycles. ``kinds[c]``
    names the stages cycle ``c`` runs; a run of equal kinds is one repeated cycle."""
    out = pprog.Sequence(debugContext="pipeline")
    c = 0
    while c < len(cycles):
        n = 1
        while c + n < len(cycles) and kinds[c + n] == kinds[c]:
            n += 1
        body = pprog.Sequence(*cycles[c], debugContext=f"pipelineCycle{c}")
        out.add(body if n == 1 else pprog.Repeat(n, body, debugContext="pipelineMain"))
        c += n
    return out


def inference_program(session: _Session, values: dict) -> pprog.Program:
    """The whole inference step (``batchesPerStep`` micro-batches pipelined)."""
    num = _stages(session)
    host, fwd = _stage_forward(session, num)
    after_fwd, _after_bwd, (to_host, _), post, pre = _anchor_copies(session, values, num)
    n = session.dataFlow.batchesPerStep
    cycles: list[list[pprog.Program]] = [[] for _ in range(n + num - 1)]
    kinds = []
    for c in range(n + num - 1):
        active = [s for s in range(num) if 0 <= c - s < n]
        kinds.append(tuple(active))
        cycles[c] += [host[s] for s in active]
        cycles[c] += [p for s in reversed(active) for p in (fwd[s], after_fwd[s])]
        cycles[c] += [to_host[s] for s in active]
    return pprog.Sequence(pre, _schedule(cycles, kinds), post, debugContext="main")


def _stash_set(session: _Session, stage: int) -> list[Tensor]:
    """Tensors of ``stage``'s nodes that its backward reads and later forwards
    overwrite: the node inputs and outputs its gradient functions read, except
    weights and constants."""
    held = {id(v) for v in session.lowered.weight_vars.values()}
    out, seen = [], set()
    for r in session.lowered.records:
        if r.stage != stage:
            continue
        for v in [*r.inputs, *r.outputs]:
            if not isinstance(v, Tensor) or id(v) not in r.read:
                continue
            if id(v) in held or id(v) in seen:
                continue
            if touches_constant(session.graph, v):
                continue
            seen.add(id(v))
            out.append(v)
    return out


def _update_per_backward(
    session: _Session,
    used: list[str],
    grads: dict[str, Tensor],
    weight_stage: dict[str, int],
    bwd: list[pprog.Sequence],
    lowering: OptimizerLowering,
    num: int,
) -> None:
    """Pipelining without gradient accumulation: each stage's backward ends with the
    update of the weights it reads (all-reduced over the replicas first), as PopART's
    VarUpdate ops take the pipeline stage of their weight's gradient. Adam's step
    counter is one per stage, so each stage counts its own updates."""
    graph = session.graph
    shared = lowering.step_counter
    for s in range(num):
        mine = [w for w in used if weight_stage.get(w, 0) == s]
        if not mine:
            continue
        prog = bwd[s]
        sum_over_replicas(session, [grads[w] for w in mine], prog, f"stage{s}/gradients")
        if shared is not None:
            counter = graph.addVariable(shared.elementType(), [], f"optimizer/step/stage{s}")
            graph.setTileMapping(counter, graph.getTileMapping(shared))
            lowering.state[f"step/stage{s}"] = counter
            lowering.step_counter = counter
        lowering.begin_update(prog)
        for w in mine:
            lowering.update(w, session.lowered.weight_vars[w], grads[w], prog, f"update/{w}")
    lowering.step_counter = shared


def _refuse_if_gradients(session: _Session, sources: set[str]) -> None:
    """A named error for an If on the weights' path to the loss, pipelined: its
    gradient reads its branches' activations, which the stash (a record's inputs and
    outputs) does not hold, so a later micro-batch would overwrite them."""
    from popart_api.ops_control import IF_GRAD

    need = autodiff.requires_grad(session.lowered.records, sources)
    for r in session.lowered.records:
        info = r.attrs.get(IF_GRAD)
        if info is not None and any(i in need for i in info.reads):
            raise popart_exception(
                f"If (node '{r.name}'): training through an If is not supported with "
                "pipelining here (the pipeline stash holds node inputs and outputs, not the "
                "activations of an If's branches); hint: train without "
                "SessionOptions.enablePipelining, or keep the If off the weights' path"
            )


def _stash_programs(session: _Session, num: int) -> tuple[list[pprog.Sequence], list]:
    """Per stage: the program that stashes its activations after its forward and the
    one that restores them before its backward, as PopART's ``StashOp`` and
    ``RestoreInplaceOp`` (graphcore/popart d2f20d78, ``willow/src/popx/op/stashx.cpp``
    ``StashOpx::grow`` and ``restorex.cpp`` ``RestoreBaseOpx::growRestore``).

    Each stashed tensor gets a stash of ``D = 2(S - s)`` copies
    (``popops::createSliceableTensorFromSlice``) and two ``UNSIGNED_INT`` index
    variables, one for the stash and one for the restore, each on its own tile counted
    down from the IPU's last (``IrLowering::getScalarVariable``). The stash writes the
    tensor at its index with ``popops::dynamicUpdate``; the restore reads the entry at
    its index with ``popops::dynamicSlice`` and copies it into the tensor; each then
    adds 1 to its index and takes the remainder by ``D``. Micro-batch ``k``'s forward
    and backward both find entry ``k mod D``, whatever pipeline cycle they run in, so
    one program serves every cycle and the main phase can be a ``Repeat``.
    """
    ipu_of = {r.stage: r.ipu for r in session.lowered.records}
    saves = [pprog.Sequence(debugContext=f"stage{s}/stash") for s in range(num)]
    restores = [pprog.Sequence(debugContext=f"stage{s}/restore") for s in range(num)]
    scalars = 0
    for s in range(num):
        depth = 2 * (num - s)
        g = session.lowered.graphs[ipu_of.get(s, 0)]
        tiles = g.getTarget().getNumTiles()
        for t in _stash_set(session, s):
            name = f"stash/stage{s}/{t.name}"
            stash = createSliceableTensorFromSlice(g, t.expand([0]), [0], [depth], name)
            indices = []
            for what in ("stash", "restore"):
                scalars += 1
                index = g.addVariable(UNSIGNED_INT, [1], f"{name}/{what}_index")
                g.setTileMapping(index, (tiles - scalars % tiles) % tiles)
                g.setInitialValue(index, 0)
                indices.append(index)
            dynamicUpdate(g, stash, t.expand([0]), indices[0], [0], [1], saves[s], name)
            restored = dynamicSlice(g, stash, indices[1], [0], [1], restores[s], f"{name}/restore")
            for index, prog in zip(indices, (saves[s], restores[s]), strict=True):
                popops.addInPlace(g, index, 1, prog, f"{name}/index")
                popops.remInPlace(g, index, depth, prog, f"{name}/index")
            restores[s].add(pprog.Copy(restored.reshape(t.shape()), t))
    return saves, restores


def training_step(
    session: _Session,
    values: dict,
    seed: Tensor,
    trained: list[str],
    sources: set[str],
    lowering: OptimizerLowering,
):
    """The pipelined training batch; returns ``(Step, gradients, (post, pre))`` (the
    anchor programs after and before the step)."""
    from popart_api.training import Step

    graph = session.graph
    num = _stages(session)
    _refuse_if_gradients(session, sources)
    # With gradient accumulation the pipeline runs over the accumulationFactor
    # micro-batches of a batch and updates once; without, over the batchesPerStep
    # batches of a step, each stage updating its weights after every backward
    # (PopART's ``PipelineInfo``: main-phase cycles = micro-batches - (stages - 1),
    # which must be >= 1, with 2S - 1 stages in training).
    accumulate = session.accumulation > 1
    af = session.accumulation if accumulate else session.dataFlow.batchesPerStep
    if af < 2 * num - 1:
        what = "accumulationFactor" if accumulate else "batchesPerStep"
        hint = (
            f"opts.accumulationFactor = {2 * num - 1}"
            if accumulate
            else f"popart.DataFlow({2 * num - 1}, ...) or gradient accumulation"
        )
        raise popart_exception(
            f"TrainingSession: pipelining {num} stages needs {what} >= {2 * num - 1} "
            f"(2 x stages - 1: the forward and backward stages of training), got {af}; "
            f"hint: {hint}"
        )
    host, fwd = _stage_forward(session, num)
    bwd = [pprog.Sequence(debugContext=f"stage{s}/backward") for s in range(num)]

    def hook(r: autodiff.NodeRecord) -> pprog.Sequence:
        return bwd[r.stage]

    keep = {a[len(autodiff.GRADIENT_PREFIX) :] for a in session.dataFlow.anchors()}
    first = variable_count(graph)
    grads = autodiff.backward(
        lambda r: session.lowered.graphs[r.ipu],
        session.lowered.records,
        {session.loss: seed},
        sources,
        bwd[0],
        hook,
        keep,
        session.patterns.fuse_softmax_grad,
    )
    from popart_api.training import transient_variables

    spans = [session.lowered.forward_variables, (first, variable_count(graph))]
    undef = [pprog.WriteUndef(t) for t in transient_variables(graph, spans)]
    used = [w for w in trained if w in grads]
    if trained and not used:
        raise popart_exception(
            f"TrainingSession: no trained weight reaches the loss '{session.loss}'"
        )
    weight_stage = {}
    for r in session.lowered.records:
        for i in r.input_ids:
            weight_stage.setdefault(i, r.stage)
    zero = pprog.Sequence(debugContext="accumulators/zero")
    if accumulate:
        accs = {w: like(graph, session.lowered.weight_vars[w], f"{w}/accum") for w in used}
        for w in used:
            popops.zero(graph, accs[w], zero, f"{w}/accumZero")
            stage = weight_stage.get(w, 0)
            popops.addInPlace(graph, accs[w], grads[w], bwd[stage], f"{w}/accumulate")
    else:
        _update_per_backward(session, used, grads, weight_stage, bwd, lowering, num)
    for tid, g in grads.items():
        values[autodiff.GRADIENT_PREFIX + tid] = g
    after_fwd, after_bwd, (host_fwd, host_bwd), post, pre = _anchor_copies(session, values, num)
    saves, restores = _stash_programs(session, num)
    cycles: list[list[pprog.Program]] = [[] for _ in range(af + 2 * num - 1)]
    kinds = []
    advance = session.seed_step()
    for c in range(len(cycles)):
        # Host inputs first and anchors last: a stream copy syncs every IPU with the
        # host, so in the middle of a cycle it would hold the stages back in turn.
        forwards = [s for s in reversed(range(num)) if 0 <= c - s < af]
        backwards = [s for s in range(num) if 0 <= c - (2 * num - 1 - s) < af]
        kinds.append((tuple(forwards), tuple(backwards)))
        cycles[c] += [advance, *[host[s] for s in forwards]]
        for s in forwards:
            cycles[c] += [fwd[s], after_fwd[s], saves[s]]
        for s in backwards:
            cycles[c] += [restores[s], bwd[s], after_bwd[s]]
        cycles[c] += [host_fwd[s] for s in forwards] + [host_bwd[s] for s in backwards]
    updates = pprog.Sequence(debugContext="optimizer")
    if accumulate:
        sum_over_replicas(session, [accs[w] for w in used], updates, "gradients")
        lowering.begin_update(updates)
        for w in used:
            lowering.update(w, session.lowered.weight_vars[w], accs[w], updates, f"update/{w}")
    program = pprog.Sequence(*undef, zero, _schedule(cycles, kinds), updates, debugContext="batch")
    return Step(program, pprog.Sequence()), grads, (post, pre)


__all__ = ["inference_program", "training_step"]
