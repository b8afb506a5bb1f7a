"""The training program of a ``TrainingSession``: forward, loss gradient, backward,
gradient accumulation, replica all-reduce and optimizer update.

One batch is ``accumulationFactor`` micro-batches; each micro-batch streams its
inputs in, runs the forward nodes, seeds the loss gradient with the loss scaling
(ones times ``lossScaling``, written by the host), runs the backward pass and adds
the weight gradients into accumulators (gradient accumulation) or uses them directly.
After the micro-batches the replicas all-reduce (sum) the gradients
(``gcl.allReduceInPlaceCrossReplica``) and every weight is updated
(:mod:`popart_api.optimizers`).

Recomputation (``SessionOptions.autoRecomputation`` or
``Builder.recomputeOutputInBackwardPass``) splits the forward nodes into segments
ending at checkpoints; the backward pass replays a segment's recomputed nodes just
before the first gradient that needs them, after marking their outputs undefined
(``WriteUndef``) so their memory is free between the forward pass and the replay.
With ``SessionOptions.enableOutlining`` (PopART's default) the forward pass and the
replay call one function per recomputed node, the node's own program, which writes
the forward pass's tensors, so no copies are made (:mod:`popart_api.outline`, as
PopART outlines a fragment and its recomputation) and the replay adds no compute-set
code. Repeated sequences of other nodes are
outlined as PopART's outliner would (:func:`popart_api.outline.outline_repeats`), and
so are the gradients of equivalent high-value ops in the backward pass
(:class:`popart_api.outline_grads.GradOutliner`).
Every micro-batch starts by marking undefined every variable the forward and backward
passes create (activations, gradients, Poplibs temporaries), so each is live from its
write to its last read in the micro-batch only, not across the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_api import autodiff
from popart_api.builder import RECOMPUTE_ATTRIBUTE
from popart_api.errors import popart_exception
from popart_api.optimizers import OptimizerLowering, like
from popart_api.options import RecomputationType, RecomputeType, ReductionType
from popart_api.outline import outline_recomputed, outline_repeats
from popart_api.outline_grads import GradOutliner
from popart_api.pipeline import on_weight_ipu, scalar_copies, sum_over_replicas
from poplar_api import Tensor, popops
from poplar_api import program as pprog
from poplar_api.graph import variable_count, variable_tensors
from poplar_api.poputil import mapTensorLinearly

if TYPE_CHECKING:  # the session imports this module when it builds
    from popart_api.session import TrainingSession

#: Op types whose outputs ``RecomputationType.Standard`` keeps (checkpoints).
CHECKPOINT_OPS = {"MatMul", "Gemm", "Conv", "Nll", "L1", "IdentityLoss"}
NORM_OPS = {"BatchNormalization", "LayerNormalization", "GroupNormalization"}


def recompute_flags(session: TrainingSession) -> list[bool]:
    """Per forward node: whether the backward pass recomputes it."""
    mode = session.options.autoRecomputation
    flags = []
    for node in session.model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        own = attrs.get(RECOMPUTE_ATTRIBUTE)
        if own is not None:
            flags.append(int(own.i) == RecomputeType.Recompute.value)
        elif mode is RecomputationType.Standard:
            flags.append(node.op_type not in CHECKPOINT_OPS)
        elif mode is RecomputationType.NormOnly:
            flags.append(node.op_type in NORM_OPS)
        elif mode is RecomputationType.RecomputeAll:
            flags.append(node.op_type not in {"Nll", "L1", "IdentityLoss"})
        else:
            flags.append(False)
    return flags


class _Recompute:
    """The backward hook replaying recomputed segments."""

    def __init__(
        self,
        session: TrainingSession,
        flags: list[bool],
        prog: pprog.Sequence,
        replays: dict[int, pprog.Program],
    ) -> None:
        self.session = session
        self.flags = flags
        self.prog = prog
        #: per outlined recomputed node: what its replay runs (a call of its function)
        self.replays = replays
        records = session.lowered.records
        self.index = {id(r): k for k, r in enumerate(records)}
        self.segment = []
        seg = 0
        for k in range(len(records)):
            self.segment.append(seg)
            if not flags[k]:
                seg += 1
        self.done: set[int] = set()

    def __call__(self, record: autodiff.NodeRecord) -> pprog.Sequence:
        k = self.index[id(record)]
        seg = self.segment[k]
        if seg in self.done:
            return self.prog
        self.done.add(seg)
        members = [j for j, s in enumerate(self.segment) if s == seg and self.flags[j]]
        if members:
            replay = pprog.Sequence(debugContext=f"recompute/segment{seg}")
            # Everything the replayed nodes create (outputs and Poplibs temporaries)
            # is written again by the replay: undefined until then, so none of it is
            # held between the forward pass and the replay.
            lowered = self.session.lowered
            held = {id(v) for v in lowered.weight_vars.values()}
            for j in members:
                for t in _outputs(lowered.records[j]):
                    if id(t) not in held:
                        replay.add(pprog.WriteUndef(t))
                if j < len(lowered.node_variables):
                    spans = [lowered.node_variables[j]]
                    for t in transient_variables(self.session.graph, spans):
                        if id(t) not in held:
                            replay.add(pprog.WriteUndef(t))
            for j in members:
                # outlined: the forward pass's function called again (code stored
                # once); else the node's programs compiled again
                replay.add(self.replays.get(j, self.session.lowered.node_progs[j]))
            self.prog.add(replay)
        return self.prog


def _outputs(r: autodiff.NodeRecord) -> list[Tensor]:
    return [v for v in r.outputs[: len(r.output_ids)] if isinstance(v, Tensor)]


def transient_variables(graph: Any, spans: list[tuple[int, int]]) -> list[Tensor]:
    """Whole-variable tensors of the (non-constant) variables created in ``spans``
    (ranges of variable ids): the activations and temporaries a forward or backward
    pass writes before it reads them, so each batch may mark them undefined."""
    return [t for lo, hi in spans for t in variable_tensors(graph, lo, hi)]


def build_training(
    session: TrainingSession,
    values: dict[str, Any],
    loss: Tensor,
    trained: list[str],
    sources: set[str],
) -> TrainingBuild:
    """Build the training program of ``session`` and the host handles of its
    optimizer."""
    graph = session.graph
    optimizer = session.optimizer
    af, reps = session.accumulation, session.replicas
    mean = session.options.accumulationAndReplicationReductionType is ReductionType.Mean
    lowering = OptimizerLowering(graph, optimizer, float(af * reps) if mean else 1.0)
    loss_ipu = session.lowered.value_ipu.get(session.loss, 0)
    loss_graph = session.lowered.graphs[loss_ipu]
    seed = loss_graph.addVariable(loss.elementType(), loss.shape(), "lossScaling/seed")
    mapTensorLinearly(loss_graph, seed)
    graph.createHostWrite("lossScaling:seed", seed)
    seed_shape = (
        loss.shape(),
        np.float32 if loss.elementType().name == "FLOAT" else np.float16,
    )

    pipelined = session.options.enablePipelining and session.ipus > 1
    if pipelined:
        from popart_api.pipeline import training_step

        step, grads, (post, pre) = training_step(session, values, seed, trained, sources, lowering)
        every, periods = pprog.Sequence(), set()
    else:
        step, grads = _training_step(session, values, seed, trained, sources, lowering)
        for tid, g in grads.items():
            values[autodiff.GRADIENT_PREFIX + tid] = g
        micro_anchors, every, post, pre, periods = session.anchor_programs(values)
        step.micro.add(micro_anchors)
    for k, sc in enumerate(lowering.scalars):
        handle = f"optimizer:{k}:{sc.name}"
        graph.createHostWrite(handle, sc.tensor)
        sc.handle = handle
    slot_handles = []
    for k, t in enumerate(lowering.state_tensors()):
        handle = f"optimizerState:{k}"
        graph.createHostWrite(handle, t)
        dtype = np.float32 if t.elementType().name == "FLOAT" else np.float16
        slot_handles.append((handle, t.shape(), dtype))
    if pipelined and session.accumulation == 1:
        # the pipeline itself runs the step's batchesPerStep batches
        program: pprog.Program = pprog.Sequence(pre, step.program, post, debugContext="main")
    else:
        program = session.main_program(step.program, every, post, pre, periods)
    return TrainingBuild(program, lowering, seed_shape, slot_handles)


@dataclass
class TrainingBuild:
    """What :func:`build_training` made: the step program, the optimizer's lowering
    (its scalars' host handles), the shape and host dtype of the loss-scaling seed,
    and ``(handle, shape, dtype)`` of each optimizer state tensor (zeroed by
    ``weightsFromHost``)."""

    program: pprog.Program
    lowering: OptimizerLowering
    seed_shape: tuple[list[int], type]
    slot_handles: list[tuple[str, list[int], type]]


class Step:
    """A built training batch: the whole batch program and the micro-batch sequence
    anchors copied per micro-batch go into."""

    def __init__(self, program: pprog.Program, micro: pprog.Sequence) -> None:
        self.program = program
        self.micro = micro


def _training_step(
    session: TrainingSession,
    values: dict[str, Any],
    seed: Tensor,
    trained: list[str],
    sources: set[str],
    lowering: OptimizerLowering,
) -> tuple[Step, dict[str, Tensor]]:
    graph = session.graph
    af = session.accumulation
    micro = pprog.Sequence(debugContext="microBatch")
    undef = pprog.Sequence(debugContext="transients")
    micro.add(undef)
    micro.add(session.seed_step())
    for p in session.lowered.input_progs.values():
        micro.add(p)
    bwd = pprog.Sequence(debugContext="backward")
    flags = recompute_flags(session)
    # repeated sequences outlined (recomputed nodes apart: each is its own function)
    forward, _ = outline_repeats(session, flags)
    replays: dict[int, pprog.Program] = {}
    if session.options.enableOutlining and any(flags):
        outlined, replays = outline_recomputed(session, flags)
        forward = [outlined[k] if k in replays else p for k, p in enumerate(forward)]
    for p in forward:
        micro.add(p)
    hook = _Recompute(session, flags, bwd, replays) if any(flags) else None
    keep = {a[len(autodiff.GRADIENT_PREFIX) :] for a in session.dataFlow.anchors()}

    def graph_of(r: autodiff.NodeRecord):
        return session.lowered.graphs[r.ipu]

    first = variable_count(graph)
    records = session.lowered.records
    outliner = None
    if session.options.enableOutlining:  # the backward pass too, as PopART's outliner
        need = autodiff.requires_grad(records, sources)
        outliner = GradOutliner(records, need, session.options.outlineThreshold)
    grads = autodiff.backward(
        graph_of,
        records,
        {session.loss: seed},
        sources,
        bwd,
        hook,
        keep,
        session.patterns.fuse_softmax_grad,
        outliner,
    )
    spans = [session.lowered.forward_variables, (first, variable_count(graph))]
    for t in transient_variables(graph, spans):
        undef.add(pprog.WriteUndef(t))
    micro.add(bwd)
    updates = pprog.Sequence(debugContext="optimizer")
    missing = [w for w in trained if w not in grads]
    if trained and len(missing) == len(trained):
        raise popart_exception(
            f"TrainingSession: no trained weight reaches the loss '{session.loss}'; weights: "
            f"{trained}"
        )
    used = [w for w in trained if w in grads]
    local = {w: on_weight_ipu(session, w, grads[w], micro) for w in used}  # IpuCopy
    if af > 1:
        accs = {w: like(graph, session.lowered.weight_vars[w], f"{w}/accum") for w in used}
        zero = pprog.Sequence(debugContext="accumulators/zero")
        for w in used:
            popops.zero(graph, accs[w], zero, f"{w}/accumZero")
            popops.addInPlace(graph, accs[w], local[w], micro, f"{w}/accumulate")
        body: list[pprog.Program] = [zero, pprog.Repeat(af, micro)]
        totals = accs
    else:
        body = [micro]
        totals = local
    if used:
        sum_over_replicas(session, [totals[w] for w in used], updates, "gradients")
    lowering.begin_update(updates)
    lowering.scalar_on = scalar_copies(session, updates)  # sharded: IpuCopy of each scalar
    for w in used:
        lowering.update(w, session.lowered.weight_vars[w], totals[w], updates, f"update/{w}")
    return Step(pprog.Sequence(*body, updates, debugContext="batch"), micro), grads


__all__ = [
    "CHECKPOINT_OPS",
    "Step",
    "TrainingBuild",
    "build_training",
    "recompute_flags",
    "transient_variables",
]
