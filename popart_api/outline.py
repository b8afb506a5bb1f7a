"""Outlining: repeated identical sequences of ops lowered once, as Poplar functions.

PopART outlines by default (``SessionOptions.enableOutlining``): its
``SubgraphOutline`` transform (graphcore/popart ``willow/src/transforms/
subgraphoutline.cpp``, ``SubgraphOutline::apply``, commit d2f20d78d) finds repeated
sequences of equivalent ops in the schedule with the outliner of
``willow/src/subgraph/`` (``outliner.cpp``: the default algorithm ``ALGO1``,
``algo1.cpp``) and replaces each occurrence by a ``CallOp`` of one subgraph, so
the code of the sequence exists once. Here (:func:`outline_repeats`):

* Ops are equivalent (PopART's ``Op::getSubgraphEquivId``) when their type, domain,
  opset, attributes, input and output shapes and types, IPU (virtual graph) and
  in-place variant are equal. Ops with side effects of their own, random ops and
  ops with subgraphs are not outlined (each is its own class).
* Two occurrences of a sequence must be *isomorphic* (``subgraph/isomorphic.hpp``,
  ``isomorphicUntil``): an input made inside the sequence comes from the same
  relative op and output index in both; inputs from outside follow the same pattern
  of sharing; an output is used outside the sequence in both or in neither.
* A sequence's value is the sum of its ops' values (``Op::getSubgraphValue``:
  1000, ``getHighSubgraphValue``, for convolutions, matmuls, normalisations and
  RNNs; 0.1, ``getLowSubgraphValue``, for the others); sequences worth less than
  ``outlineThreshold`` (default 1.0: a convolution is outlined, a lone ReLU is not)
  are left alone. Candidates are taken by total value (value times occurrences,
  then length) and an occurrence overlapping one already outlined is dropped; a
  sequence is outlined while two or more occurrences remain. PopART's Algo1 also
  nests subgraphs in subgraphs and prunes matches by copy cost; here subgraphs are
  flat.
* Copy-cost pruning (``enableOutliningCopyCostPruning``, default on): see
  :func:`prune_by_copy_cost`.
* ``outlineSequenceBreakCost`` penalises a subgraph that would split ops PopART
  schedules as one sequence for overlapping I/O and compute; no lowering here marks
  such sequences, so it changes nothing (recorded and checked only).
* Lowering (PopART's ``CallOp`` with ``SubgraphCopyingStrategy::OnEnterAndExit``):
  the sequence is lowered once more, on copies of the first occurrence's inputs
  (same shapes and tile mappings), into a Poplar function (``graph.addFunction``).
  Every occurrence copies its inputs in, calls the function and copies out the
  outputs used after it (in training every output, as the backward pass reads
  them). Values are those of the ops run in place.

A recomputed node (:func:`outline_recomputed`) is outlined on its own: its program
becomes one function called by the forward pass and again by the backward replay,
with no copies, since the replay writes the forward pass's own tensors.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popart_api import ops
from popart_api.node_lowering import node_lowering
from popart_api.optimizers import like
from poplar_api import Tensor
from poplar_api import program as pprog
from poplar_api.graph import Function

#: Op types of PopART's high subgraph value (``Op::getHighSubgraphValue``, 1000):
#: convbase.hpp, matmul.hpp (Gemm is a MatMul there), batchnorm.hpp, groupnorm.hpp,
#: instancenorm.hpp, lrn.hpp, lstm.hpp and rnnbase.hpp.
HIGH_VALUE_OPS = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm", "BatchNormalization", "GroupNormalization",
    "InstanceNormalization", "LRN", "LSTM", "GRU", "RNN",
})  # fmt: skip
HIGH_VALUE, LOW_VALUE = 1000.0, 0.1
#: Ops never outlined: random draws (each call its own numbers) and ops with subgraphs.
NOT_OUTLINED = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Dropout",
    "Multinomial", "Bernoulli", "If", "Loop", "Scan",
})  # fmt: skip


def outline_recomputed(
    session: Any, flags: list[bool]
) -> tuple[list[pprog.Program], dict[int, pprog.Program]]:
    """Make each recomputed node's program a function called by the forward pass and
    again by the backward replay.

    The function is the node's own program, so both calls write the forward pass's
    tensors and no copies are needed; the variables it touches keep one address, and
    an undef before the replay (:class:`popart_api.training._Recompute`) lets other
    variables use it in between (:mod:`ipusim.tile.memory`, joint groups). Its side
    effects (BatchNormalization's running statistics) run after the forward pass's
    call only.

    Returns
    -------
    forward, replays
        Per node, the program the forward pass runs; per recomputed node index, the
        program the backward replay runs (a call of the node's function).
    """
    lowered = session.lowered
    forward: list[pprog.Program] = list(lowered.fwd_progs)
    replays: dict[int, pprog.Program] = {}
    for k in range(len(forward)):
        if k < len(flags) and flags[k]:
            fn = session.graph.addFunction(lowered.node_progs[k])
            call = pprog.Call(fn, debugContext=f"outlined/node{k}")
            forward[k] = pprog.Sequence(call, lowered.side_progs[k])
            replays[k] = pprog.Call(fn, debugContext=f"recompute/node{k}")
    return forward, replays


def op_value(op_type: str) -> float:
    """PopART's ``Op::getSubgraphValue`` of an op type (see :data:`HIGH_VALUE_OPS`)."""
    return HIGH_VALUE if op_type in HIGH_VALUE_OPS else LOW_VALUE


@dataclass(frozen=True)
class Match:
    """A sequence of ``length`` ops outlined at ``starts`` (node indices); ``value``
    is the sum of its ops' values."""

    length: int
    starts: tuple[int, ...]
    value: float


def _key(value: Any) -> Any:
    """A hashable key of an attribute value (arrays by shape, type and a digest)."""
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str, hashlib.sha1(value.tobytes()).hexdigest())
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    if hasattr(value, "SerializeToString"):
        return ("proto", hashlib.sha1(value.SerializeToString()).hexdigest())
    return value


def _tensor_key(value: Any) -> Any:
    """Shape and type of a tensor; other values (a lowering's saved options) as
    :func:`_key`."""
    if isinstance(value, Tensor):
        return (tuple(value.shape()), value.elementType().name)
    return _key(value)


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_tensor(v) for v in value)
    return False


class _Schedule:
    """The forward nodes of a session as the outliner sees them: which may be
    outlined, their equivalence classes, values, producers and consumers."""

    def __init__(self, session: Any, excluded: Sequence[bool], keep_all: bool) -> None:
        lowered = session.lowered
        self.session = session
        self.records = lowered.records
        self.keep_all = keep_all
        n = len(self.records)
        #: tensor id -> (producing node, output index)
        self.producer: dict[str, tuple[int, int]] = {}
        #: tensor id -> consuming nodes
        self.consumers: dict[str, list[int]] = {}
        for k, rec in enumerate(self.records):
            for j, tid in enumerate(rec.output_ids):
                self.producer[tid] = (k, j)
            for tid in rec.input_ids:
                self.consumers.setdefault(tid, []).append(k)
        model = session.model.graph
        self.used = set(session.dataFlow.anchors()) | {o.name for o in model.output}
        self.eligible = [
            not (k < len(excluded) and excluded[k]) and self._outlinable(k) for k in range(n)
        ]
        classes: dict[Any, int] = {}
        self.ids: list[int] = []
        for k, rec in enumerate(self.records):
            if not self.eligible[k]:
                self.ids.append(-1 - k)  # a class of its own
                continue
            how = node_lowering(session, model.node[k], k)
            key = (
                rec.domain, rec.op_type, rec.opset, _key(rec.attrs), _key(how.proportion),
                tuple(_tensor_key(v) for v in rec.inputs),
                tuple(_tensor_key(v) for v in rec.outputs), rec.ipu, session._inplace.get(k),
            )  # fmt: skip
            self.ids.append(classes.setdefault(key, len(classes)))
        self.values = [op_value(rec.op_type) for rec in self.records]

    def _outlinable(self, k: int) -> bool:
        """Whether node ``k`` may be outlined: no side effects, randomness, subgraph or
        view of its inputs, tensors in and out, all on its own IPU."""
        from popart_api.inplace import VIEW_OPS

        rec, lowered = self.records[k], self.session.lowered
        if rec.op_type in NOT_OUTLINED or rec.op_type in VIEW_OPS:
            return False
        if lowered.side_progs[k].children() or len(rec.input_ids) != len(rec.inputs):
            return False
        named = rec.outputs[: len(rec.output_ids)]
        if not named or not all(isinstance(v, Tensor) for v in named):
            return False
        extras = rec.outputs[len(rec.output_ids) :]  # what the gradient reads
        if any(not isinstance(v, Tensor) and _holds_tensor(v) for v in extras):
            return False
        for tid, v in zip(rec.input_ids, rec.inputs, strict=True):
            if v is None:
                continue
            if not isinstance(v, Tensor) or lowered.value_ipu.get(tid, rec.ipu) != rec.ipu:
                return False
        return True

    def external_output(self, start: int, length: int, k: int, tid: str) -> bool:
        """Whether output ``tid`` of node ``k`` is used after the occurrence at
        ``start`` (training keeps every output: the backward pass reads them)."""
        if self.keep_all or tid in self.used:
            return True
        return any(not start <= c < start + length for c in self.consumers.get(tid, ()))

    def isomorphic(self, length: int, s0: int, s1: int) -> bool:
        """PopART's ``isomorphicUntil(length, s0, s1) == length`` (see the module)."""
        ext0: dict[str, list[tuple[int, int]]] = {}
        ext1: dict[str, list[tuple[int, int]]] = {}
        for delta in range(length):
            r0, r1 = self.records[s0 + delta], self.records[s1 + delta]
            for idx, (t0, t1) in enumerate(zip(r0.input_ids, r1.input_ids, strict=True)):
                if (r0.inputs[idx] is None) != (r1.inputs[idx] is None):
                    return False
                if r0.inputs[idx] is None:
                    continue
                p0, p1 = self.producer.get(t0), self.producer.get(t1)
                in0 = p0 is not None and s0 <= p0[0] < s0 + length
                in1 = p1 is not None and s1 <= p1[0] < s1 + length
                if in0 != in1:
                    return False
                if in0:
                    if p0[0] - s0 != p1[0] - s1 or p0[1] != p1[1]:
                        return False
                    continue
                ext0.setdefault(t0, []).append((delta, idx))
                ext1.setdefault(t1, []).append((delta, idx))
                if ext0[t0] != ext1[t1]:
                    return False
            for t0, t1 in zip(r0.output_ids, r1.output_ids, strict=True):
                out0 = self.external_output(s0, length, s0 + delta, t0)
                if out0 != self.external_output(s1, length, s1 + delta, t1):
                    return False
        return True


def find_matches(
    ids: Sequence[int],
    values: Sequence[float],
    isomorphic: Any,
    threshold: float,
) -> list[Match]:
    """Repeated sequences to outline, none overlapping another.

    Parameters
    ----------
    ids
        Equivalence class of each op in schedule order (negative: never outlined).
    values
        Each op's subgraph value.
    isomorphic
        ``isomorphic(length, s0, s1)``: whether the occurrences at ``s0`` and ``s1``
        are connected alike.
    threshold
        ``outlineThreshold``: the least value of a sequence worth outlining.

    Returns
    -------
    list of Match
        The accepted sequences, in order of acceptance: candidates by total value
        (value times occurrences), then length, then position; occurrences
        overlapping an accepted one are dropped, and a candidate is accepted while
        two or more remain.
    """
    n = len(ids)
    words: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(ids):
        if c >= 0:
            words.setdefault((c,), []).append(i)
    candidates: list[Match] = []
    length = 1
    while words:
        words = {w: at for w, at in words.items() if len(at) >= 2}
        for at in words.values():
            classes: list[list[int]] = []  # occurrences isomorphic to the first, apart
            for p in at:
                for cl in classes:
                    if p >= cl[-1] + length and isomorphic(length, cl[0], p):
                        cl.append(p)
                        break
                else:
                    classes.append([p])
            for cl in classes:
                value = float(sum(values[cl[0] : cl[0] + length]))
                if len(cl) >= 2 and value >= threshold:
                    candidates.append(Match(length, tuple(cl), value))
        longer: dict[tuple[int, ...], list[int]] = {}
        for w, at in words.items():
            for p in at:
                if p + length < n and ids[p + length] >= 0:
                    longer.setdefault((*w, ids[p + length]), []).append(p)
        words = longer
        length += 1
    candidates.sort(key=lambda m: (-m.value * len(m.starts), -m.length, m.starts))
    taken = np.zeros(n, bool)
    accepted: list[Match] = []
    for m in candidates:
        starts = tuple(s for s in m.starts if not taken[s : s + m.length].any())
        if len(starts) >= 2:
            accepted.append(Match(m.length, starts, m.value))
            for s in starts:
                taken[s : s + m.length] = True
    return accepted


def _nbytes(value: Any) -> int:
    """Bytes of a tensor (of a host array; 0 for anything else)."""
    if isinstance(value, Tensor):
        return int(math.prod(value.shape())) * value.elementType().size
    return int(getattr(value, "nbytes", 0))


def prune_by_copy_cost(sched: _Schedule, matches: Sequence[Match], threshold: float) -> list[Match]:
    """PopART's copy-cost pruning (``enableOutliningCopyCostPruning``, default on:
    ``subgraph/prunematches.hpp``, ``pruneMatches`` with the ``IoSubgraphCostModel``
    of ``subgraph/iosubgraphcostmodel.cpp``): each match is cut down to the part
    ``[start, end)`` of its first occurrence with the highest value, where an op is
    worth its subgraph value times the square root of its input bytes and each
    tensor copied in (made before the part, read in it) or out (made in it, read
    after it; in training every output, the backward pass reads them) costs the
    square root of its bytes. A part whose value (the sum of its ops' subgraph
    values) does not exceed ``threshold`` is dropped."""
    records = sched.records
    worth = [
        sched.values[k] * float(np.sqrt(sum(_nbytes(v) for v in r.inputs if v is not None)))
        for k, r in enumerate(records)
    ]
    last_use = {tid: max(users) for tid, users in sched.consumers.items()}

    def cost_model(start: int, end: int) -> float:
        value = float(sum(worth[start:end]))
        for k in range(start, end):
            rec = records[k]
            for tid, v in zip(rec.input_ids, rec.inputs, strict=True):
                made = sched.producer.get(tid, (-1, 0))[0]
                if v is not None and made < start:
                    value -= float(np.sqrt(_nbytes(v)))
            for tid, v in zip(rec.output_ids, rec.outputs, strict=False):
                used_after = sched.keep_all or tid in sched.used
                if used_after or last_use.get(tid, -1) >= end:
                    value -= float(np.sqrt(_nbytes(v)))
        return value

    pruned: list[Match] = []
    for m in sorted(matches, key=lambda m: m.length):
        s0 = m.starts[0]
        best, lo, hi = cost_model(s0, s0 + m.length), s0, s0 + m.length
        for start in range(s0, s0 + m.length):
            for end in range(start + 1, s0 + m.length + 1):
                value = cost_model(start, end)
                if value > best:
                    best, lo, hi = value, start, end
        value = float(sum(sched.values[lo:hi]))
        if value > threshold:
            pruned.append(Match(hi - lo, tuple(s + lo - s0 for s in m.starts), value))
    return pruned


@dataclass
class _Function:
    """A sequence of nodes lowered once more as a function: the copies of its inputs
    (by the ``(delta, input index)`` of their first use), its outputs per node, and
    the variables it made (written by every call before they are read)."""

    function: Function
    clones: dict[tuple[int, int], Tensor]
    outputs: list[list[Any]]
    fresh: list[Tensor]


def _build_function(session: Any, s0: int, length: int, tag: str) -> _Function:
    """Lower nodes ``s0 .. s0 + length - 1`` once more, on copies of their outside
    inputs (same shapes and tile mappings), as a function (they have no side
    effects)."""
    from poplar_api.graph import variable_count, variable_tensors

    records = session.lowered.records
    graph = session.lowered.graphs[records[s0].ipu]
    first = variable_count(graph)
    by_id: dict[str, Tensor] = {}
    clones: dict[tuple[int, int], Tensor] = {}
    inside: dict[str, Any] = {}
    body = pprog.Sequence(debugContext=tag)
    outputs: list[list[Any]] = []
    for delta in range(length):
        k, rec = s0 + delta, records[s0 + delta]
        inputs: list[Any] = []
        for idx, (tid, v) in enumerate(zip(rec.input_ids, rec.inputs, strict=True)):
            if v is None or tid in inside:
                inputs.append(None if v is None else inside[tid])
                continue
            if tid not in by_id:
                by_id[tid] = clones[delta, idx] = like(graph, v, f"{tag}/input{len(clones)}")
            inputs.append(by_id[tid])
        node = session.model.graph.node[k]
        how = node_lowering(session, node, k)
        with ops.lowering_context(how.context(session, node, pprog.Sequence(), None, None)):
            outs = list(how.fn(graph, inputs, how.attrs, body, f"{tag}/{how.name}"))
        outs = outs[: len(rec.outputs)]
        for tid, v in zip(rec.output_ids, outs, strict=False):
            inside[tid] = v
        outputs.append(outs)
    fn = graph.addFunction(body)
    return _Function(fn, clones, outputs, variable_tensors(graph, first, variable_count(graph)))


def _call_site(
    session: Any, built: _Function, s0: int, start: int, keep: Any, tag: str
) -> pprog.Sequence:
    """The program of the occurrence at ``start`` of the function built from the nodes
    at ``s0``: its variables undefined, the occurrence's inputs copied in, the call,
    and the outputs ``keep(delta, j, output id)`` says are used after it copied out."""
    records = session.lowered.records
    seq = pprog.Sequence(debugContext=tag)
    for t in built.fresh:
        seq.add(pprog.WriteUndef(t))
    for (delta, idx), clone in built.clones.items():
        seq.add(pprog.Copy(records[start + delta].inputs[idx], clone))
    seq.add(pprog.Call(built.function, debugContext=tag))
    for delta, mine in enumerate(built.outputs):
        rec = records[start + delta]
        for j, (value, out) in enumerate(zip(mine, rec.outputs, strict=False)):
            tid = rec.output_ids[j] if j < len(rec.output_ids) else None
            if keep(delta, j, tid) and isinstance(value, Tensor) and isinstance(out, Tensor):
                seq.add(pprog.Copy(value, out))
    return seq


def _lower_match(session: Any, sched: _Schedule, m: Match, number: int) -> list[pprog.Program]:
    """Lower ``m`` once as a function; the program of each occurrence (copies in, the
    call, copies out)."""
    tag = f"outlined/subgraph{number}"
    built = _build_function(session, m.starts[0], m.length, tag)
    progs: list[pprog.Program] = []
    for c, s in enumerate(m.starts):

        def keep(delta: int, _j: int, tid: str | None, s: int = s) -> bool:
            if sched.keep_all:
                return True
            return tid is not None and sched.external_output(s, m.length, s + delta, tid)

        progs.append(_call_site(session, built, s0=m.starts[0], start=s, keep=keep,
                                tag=f"{tag}/call{c}"))  # fmt: skip
    return progs


def outline_repeats(
    session: Any, excluded: Sequence[bool] = ()
) -> tuple[list[pprog.Program], list[Match]]:
    """The forward programs of ``session`` with its repeated sequences outlined (see
    the module docstring); unchanged when ``enableOutlining`` is off.

    Parameters
    ----------
    session
        A session whose forward pass is lowered (``session.lowered``).
    excluded
        Per node: never outline it (a recomputed node, outlined on its own).

    Returns
    -------
    forward, matches
        Per node, the program the forward pass runs (an occurrence's whole program
        at its first node, empty sequences at the others), and the outlined
        sequences.
    """
    lowered = session.lowered
    forward: list[pprog.Program] = list(lowered.fwd_progs)
    opts = session.options
    if not opts.enableOutlining or len(lowered.records) != len(forward):
        return forward, []
    sched = _Schedule(session, excluded, session._kind == "TrainingSession")
    matches = find_matches(sched.ids, sched.values, sched.isomorphic, opts.outlineThreshold)
    if opts.enableOutliningCopyCostPruning:
        matches = prune_by_copy_cost(sched, matches, opts.outlineThreshold)
    for number, m in enumerate(matches):
        for s, prog in zip(m.starts, _lower_match(session, sched, m, number), strict=True):
            forward[s] = prog
            for k in range(s + 1, s + m.length):
                forward[k] = pprog.Sequence(debugContext=f"outlined/node{k}")
    return forward, matches


__all__ = ["Match", "find_matches", "outline_recomputed", "outline_repeats", "prune_by_copy_cost"]
