"""Run a model of ``examples/models`` through popart_api and check it against ONNX's
reference evaluator.

Inference runs the model once on random inputs and compares the outputs with
``onnx.reference.ReferenceEvaluator`` on the same ModelProto. A training step (one
forward and backward pass, ``ConstSGD`` with learning rate 0, so the step is the
gradient computation alone) anchors the loss and the gradients of some weights;
the loss is compared with the reference evaluator and the gradients with a central
finite difference of the reference evaluator run in float64 along the gradient's
own direction ``d = g / |g|``: ``|g| ≈ (loss(w + εd) - loss(w - εd)) / 2ε``, with the
ReLU masks and max pool choices frozen at ``w`` (:func:`freeze_kinks`). Where that
fails, the step is run again with the ReLU and max pool inputs anchored and the check
taken at the branches the float32 step took, which may differ from float64's at units
within rounding of a kink (:func:`_check_at_session_branches`).

Usage::

    .venv/bin/python examples/models/run_model.py bert-tiny --train --tiles 16
    .venv/bin/python examples/models/run_model.py resnet18

prints the host seconds of each phase, the simulated cycles and whether the run
matched the reference, as ``key: value`` lines (``--json`` prints one JSON object).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.reference
from onnx import TensorProto, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bert import BERT_BASE, BERT_TINY, build_bert_layer
from resnet import RESNET18, RESNET50, RESNET_TINY, ResNetConfig, build_resnet

import popart_api as popart
from ipusim.progress import activity

#: Model names this script runs -> (kind, size).
MODELS: dict[str, tuple[str, Any]] = {
    "bert-tiny": ("bert", BERT_TINY),
    "bert-base": ("bert", BERT_BASE),
    "resnet-tiny": ("resnet", RESNET_TINY),
    "resnet-tiny50": ("resnet", ResNetConfig(blocks=(1, 1, 1, 1), bottleneck=True, width=8,
                                             image=32, classes=10)),
    "resnet18": ("resnet", RESNET18),
    "resnet50": ("resnet", RESNET50),
    # ResNet-50's stages and widths, one block per stage, on 64x64 images: the full
    # model's kinds of layers at a tenth of its host memory (for memory inventories)
    "resnet50-small": ("resnet", ResNetConfig(blocks=(1, 1, 1, 1), bottleneck=True,
                                              image=64)),
}  # fmt: skip


@dataclass
class ModelRun:
    """What one run of a model gave.

    Attributes
    ----------
    model, mode
        Model name and ``inference`` or ``training``.
    seconds
        Host seconds: ``build`` (ONNX model), ``compile`` (``prepareDevice``), ``run``
        (weights to the device and one step), ``reference`` (the checks).
    cycles
        Simulated cycles of the step.
    vertices
        Vertices of the compiled graph.
    max_error, tolerance, matched
        Largest difference from the reference (relative to the reference's largest
        magnitude), the tolerance, and whether it is within it.
    gradient_check
        Training: the directional derivative from the anchored gradients and the
        reference's central difference (see :func:`directional_check`).
    session_branches
        Training, when ``gradient_check`` is not within the tolerance: the check taken
        again at the branches the session's step took (``gradient_check``), the units
        on another branch than the reference's (``units``), the largest distance of
        one from its kink (``nearest``) and the step's largest error at a kink input
        (``forward``), both relative to their tensor's largest magnitude, and whether
        the repeated step gave the first one's values (``repeated``); see
        :func:`_check_at_session_branches`. ``max_error`` is then this check's error
        (infinite when the step's branches cannot stand in for the reference's).
    """

    model: str
    mode: str
    seconds: dict[str, float] = field(default_factory=dict)
    cycles: int = 0
    vertices: int = 0
    max_error: float = 0.0
    tolerance: float = 0.0
    matched: bool = False
    gradient_check: tuple[float, float] | None = None
    session_branches: dict[str, Any] | None = None


#: A built model: ModelProto, random inputs, outputs checked, loss id (training).
Built = tuple[onnx.ModelProto, dict[str, np.ndarray], list[str], str | None]


def build(name: str, train: bool, seed: int = 0) -> Built:
    """The model ``name``: (ModelProto, random inputs, outputs checked, loss id)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    kind, cfg = MODELS[name]
    rng = np.random.default_rng(seed + 1)
    if kind == "bert":
        m = build_bert_layer(cfg, seed=seed, loss=train)
        x = rng.standard_normal((cfg.batch, cfg.seq, cfg.hidden)).astype(np.float32)
        return m.proto, {m.x: x}, [m.y], m.loss
    r = build_resnet(cfg, seed=seed, loss=train)
    inputs = {r.x: rng.standard_normal((cfg.batch, 3, cfg.image, cfg.image)).astype(np.float32)}
    if train:
        labels = np.zeros((cfg.batch, cfg.classes), np.float32)
        labels[np.arange(cfg.batch), rng.integers(0, cfg.classes, cfg.batch)] = 1.0
        inputs[r.labels] = labels
    return r.proto, inputs, [r.logits], r.loss


def float64_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` computing in float64 (initializers, Constant values, FLOAT
    inputs, outputs and value infos), for a finite difference the float32 rounding
    does not swamp."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph

    def widen(t: onnx.TensorProto) -> onnx.TensorProto:
        if t.data_type != TensorProto.FLOAT:
            return t
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)

    inits = [widen(t) for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for node in g.node:
        for a in node.attribute:
            if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(widen(a.t))
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m


def _initializers(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The float initializers that get a gradient (BatchNormalization's running
    statistics are left out: training updates them by momentum, not by gradient)."""
    stats = {
        name
        for node in proto.graph.node
        if node.op_type == "BatchNormalization"
        for name in node.input[3:5]
    }
    return {
        t.name: numpy_helper.to_array(t)
        for t in proto.graph.initializer
        if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE) and t.name not in stats
    }


def training_reference(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose BatchNormalization nodes use the batch's statistics
    (``training_mode=1``), as a training step does."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    for node in m.graph.node:
        if node.op_type == "BatchNormalization":
            node.attribute.append(onnx.helper.make_attribute("training_mode", 1))
    return m


def kink_inputs(model: onnx.ModelProto) -> list[str]:
    """The tensors whose signs and orders pick the model's branch: the input of every
    ``Relu`` and ``MaxPool``, in node order."""
    return [n.input[0] for n in model.graph.node if n.op_type in ("Relu", "MaxPool")]


def _pool_picks(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
    """ONNX ``Indices`` of the elements the windows of MaxPool ``node`` pick in ``x``."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    pool = onnx.helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = onnx.helper.make_graph(
        [pool],
        "picks",
        [onnx.helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [onnx.helper.make_empty_tensor_value_info(o) for o in ("y", "i")],
    )
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 15)])
    return onnx.reference.ReferenceEvaluator(m).run(["i"], {"x": x.astype(np.float64)})[0]


def _evaluate(
    model: onnx.ModelProto, names: list[str], feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The values of the tensors ``names`` of ``model`` on ``feeds`` by the ONNX
    reference evaluator (a copy of the model whose outputs are those tensors)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(x) for x in names)
    found = onnx.reference.ReferenceEvaluator(probe).run(names, feeds)
    return dict(zip(names, found, strict=True))


def freeze_kinks(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    at: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    """A copy of ``model`` that is smooth in its weights and agrees with it, value and
    gradient, at the weights it has and the inputs ``feeds``.

    Each ``Relu(x)`` becomes ``x * mask``, the mask the 0/1 pattern of ``x > 0`` there,
    and each ``MaxPool`` a ``Gather`` of the elements its windows picked there (ONNX's
    ``Indices``: offsets into the flattened input). Near those weights the model is
    the same piecewise-smooth branch without the kinks: a finite difference of it
    converges as the step squared, where one of the model converges only as the
    step, since a step of ``eps`` crosses the kinks of the units within ``eps`` of
    one (measured on ResNet-50's training step in ``docs/models.md``).

    ``at`` (optional) maps each of :func:`kink_inputs` to the values another
    computation of the model gave it (a session's float32 step): the branch frozen is
    then the one those values pick, which differs from the model's own where a value
    within that computation's rounding of zero (or of a tie) came out on the other side.
    """
    if at is not None:
        missing = [x for x in kink_inputs(model) if x not in at]
        if missing:
            raise ValueError(f"freeze_kinks: no values given for the kink inputs {missing}")
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    wanted = []
    for node in probe.graph.node:
        if node.op_type == "Relu":
            wanted.append(node.input[0])
        elif node.op_type == "MaxPool":
            if len(node.output) != 1:
                raise ValueError(
                    f"freeze_kinks: MaxPool '{node.name}' has {len(node.output)} outputs, "
                    "1 required (its Indices output is added here); hint: drop the Indices "
                    "output from the model checked"
                )
            node.output.append(f"{node.output[0]}/argmax")
            wanted.append(node.output[1])
    if at is None:
        values = _evaluate(probe, wanted, feeds)
    else:
        values = {}
        for node in probe.graph.node:
            x = np.asarray(at[node.input[0]]) if node.op_type in ("Relu", "MaxPool") else None
            if node.op_type == "Relu":
                values[node.input[0]] = x
            elif node.op_type == "MaxPool":
                values[node.output[1]] = _pool_picks(node, x)
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    nodes, inits = [], []
    wide = any(t.data_type == TensorProto.DOUBLE for t in model.graph.initializer)
    for node in frozen.graph.node:
        if node.op_type == "Relu":
            x = node.input[0]
            mask = f"{node.output[0]}/mask"
            kind = values[x].dtype if at is None else np.float64 if wide else np.float32
            inits.append(numpy_helper.from_array((values[x] > 0).astype(kind), mask))
            nodes.append(onnx.helper.make_node("Mul", [x, mask], list(node.output), node.name))
        elif node.op_type == "MaxPool":
            out, picked = node.output[0], f"{node.output[0]}/argmax"
            flat = f"{out}/flat"
            inits.append(numpy_helper.from_array(np.array([-1], np.int64), f"{flat}/shape"))
            inits.append(numpy_helper.from_array(values[picked], picked))
            nodes.append(onnx.helper.make_node("Reshape", [node.input[0], f"{flat}/shape"], [flat]))
            nodes.append(onnx.helper.make_node("Gather", [flat, picked], [out], node.name, axis=0))
        else:
            nodes.append(node)
    del frozen.graph.node[:]
    frozen.graph.node.extend(nodes)
    frozen.graph.initializer.extend(inits)
    return frozen


def directional_check(
    proto: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    loss: str,
    grads: dict[str, np.ndarray],
    eps: float = 1e-4,
    at: dict[str, np.ndarray] | None = None,
) -> tuple[float, float]:
    """``(|g|, central difference of the float64 reference along g / |g|)`` for the
    gradients ``g`` of the weights in ``grads``.

    Along its own direction a right gradient's derivative is its norm, so the two
    agree; a gradient scaled wrong or pointing elsewhere gives a smaller difference
    than it claims. The derivative is as large as it can be, so float32 rounding in
    the session's gradient stays small beside it (a random direction's derivative
    is ``~|g| / sqrt(n)`` and drowns in it). The difference is taken of the model
    with its ReLU and max pool branches frozen at the weights (:func:`freeze_kinks`):
    along the steepest direction of ResNet-50 a step of ``eps`` crosses enough ReLU
    kinks that the plain difference is 1.4 % short of the exact derivative.

    ``at`` (optional): the values of the model's :func:`kink_inputs` in the session's
    step; the branches are then frozen where those values put them (see
    :func:`freeze_kinks`) instead of where the float64 reference does.
    """
    feeds = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()}
    wide = freeze_kinks(float64_model(training_reference(proto)), feeds, at)
    weights = {t.name: numpy_helper.to_array(t) for t in wide.graph.initializer if t.name in grads}
    norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
    if norm == 0.0:
        return 0.0, 0.0
    direction = {w: np.asarray(g, np.float64) / norm for w, g in grads.items()}

    def loss_at(sign: float) -> float:
        m = onnx.ModelProto()
        m.CopyFrom(wide)
        for t in m.graph.initializer:
            if t.name in direction:
                moved = weights[t.name] + sign * eps * direction[t.name]
                t.CopyFrom(numpy_helper.from_array(moved, t.name))
        return float(onnx.reference.ReferenceEvaluator(m).run([loss], feeds)[0])

    return norm, (loss_at(1.0) - loss_at(-1.0)) / (2 * eps)


def branch_differences(
    proto: onnx.ModelProto, inputs: dict[str, np.ndarray], at: dict[str, np.ndarray]
) -> tuple[int, float, float]:
    """Where a session's step took other branches than the float64 reference (training
    form) of ``proto`` on ``inputs``, given the session's values ``at`` of the
    :func:`kink_inputs`.

    Returns ``(units, nearest, forward)``: the ReLU inputs of the other sign and max
    pool windows that picked another element; the largest distance from its kink, in
    the reference, of such a unit (a ReLU input's magnitude, or the gap between the
    two elements a window picked), relative to the largest magnitude of its tensor;
    and the largest difference of a kink input from the reference, relative likewise.
    A step whose values are right to ``forward`` can take the other branch only where
    the reference is within about that of a kink.
    """
    feeds = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()}
    wide = float64_model(training_reference(proto))
    names = kink_inputs(wide)
    ref = _evaluate(wide, names, feeds)
    units, nearest, forward = 0, 0.0, 0.0
    for node in wide.graph.node:
        if node.op_type not in ("Relu", "MaxPool"):
            continue
        x = node.input[0]
        want = ref[x]
        got = np.asarray(at[x], np.float64).reshape(want.shape)
        scale = max(float(np.max(np.abs(want))), 1e-30)
        forward = max(forward, float(np.max(np.abs(got - want))) / scale)
        if node.op_type == "Relu":
            other = (got > 0) != (want > 0)
            gaps = np.abs(want[other])
        else:
            mine, theirs = _pool_picks(node, got).reshape(-1), _pool_picks(node, want).reshape(-1)
            other = mine != theirs
            flat = want.reshape(-1)
            gaps = np.abs(flat[mine[other]] - flat[theirs[other]])
        units += int(np.count_nonzero(other))
        if gaps.size:
            nearest = max(nearest, float(gaps.max()) / scale)
    return units, nearest, forward


def run_model(
    name: str,
    train: bool = False,
    tiles: int | None = None,
    ipus: int = 1,
    grad_weights: int = 3,
    seed: int = 0,
    allow_oom: bool = False,
) -> ModelRun:
    """Build, compile and run model ``name`` once; check it against the reference.

    Parameters
    ----------
    name
        A key of :data:`MODELS`.
    train
        One training step (forward and backward) instead of inference.
    tiles, ipus
        Tiles per IPU (None: the Mk2's 1472) and IPUs of the IPU Model device; with
        several IPUs the model is sharded (``VirtualGraphMode.Auto``: the nodes in
        order split into one chunk per IPU, balanced by the weights they read and, in
        training, the activations they keep for the backward pass).
    grad_weights
        Weights whose gradients are anchored and checked (spread over the model).
    seed
        Seed of the weights and inputs.
    allow_oom
        Compile and run even when the step does not fit the device's tile memory
        (engine option ``debug.allowOutOfMemory``): the host cost of a model that does
        not fit, with values computed as if it did.
    """
    result = ModelRun(name, "training" if train else "inference")
    t0 = time.perf_counter()
    with activity(f"Building {name} as ONNX"):  # a line on a terminal if it takes a while
        proto, inputs, outputs, loss = build(name, train, seed)
    result.seconds["build"] = time.perf_counter() - t0
    step = _Step(proto, inputs, loss, tiles, ipus, allow_oom)
    if train:
        assert loss is not None
        names = list(_initializers(proto))
        picked = [names[int(i)] for i in np.linspace(0, len(names) - 1, grad_weights)]
        picked = list(dict.fromkeys(picked))
        prefix = popart.reservedGradientPrefix()
        anchors = step.run([loss, *(prefix + w for w in picked)], result)
    else:
        anchors = step.run(outputs, result)
    t0 = time.perf_counter()
    if train:
        reference = onnx.reference.ReferenceEvaluator(training_reference(proto))
        want = float(reference.run([loss], inputs)[0])
        got = float(np.asarray(anchors[loss]).reshape(-1)[0])
        grads = {w: np.asarray(anchors[prefix + w], np.float64) for w in picked}
        analytic, numeric = directional_check(proto, inputs, loss, grads)
        result.gradient_check = (analytic, numeric)
        loss_error = abs(got - want) / max(abs(want), 1e-6)
        grad_error = abs(analytic - numeric) / max(abs(numeric), 1e-6)
        result.tolerance = 1e-3
        if grad_error > result.tolerance:
            grad_error = _check_at_session_branches(step, anchors, grads, result)
        result.max_error = max(loss_error, grad_error)
    else:
        refs = onnx.reference.ReferenceEvaluator(proto).run(outputs, inputs)
        errs = [
            float(np.max(np.abs(anchors[o].reshape(r.shape) - r)) / max(np.max(np.abs(r)), 1e-6))
            for o, r in zip(outputs, refs, strict=True)
        ]
        result.max_error = max(errs)
        result.tolerance = 1e-4
    result.matched = bool(result.max_error <= result.tolerance)
    result.seconds["reference"] = time.perf_counter() - t0
    return result


class _Step:
    """One step of a model on a fresh IPU Model device and session, run once per call
    with the anchors asked for (the device, session and engine freed after it, so the
    host memory a check needs afterwards is not on top of the simulation's)."""

    def __init__(
        self,
        proto: onnx.ModelProto,
        inputs: dict[str, np.ndarray],
        loss: str | None,
        tiles: int | None,
        ipus: int,
        allow_oom: bool,
    ) -> None:
        self.proto, self.inputs, self.loss = proto, inputs, loss
        self.tiles, self.ipus, self.allow_oom = tiles, ipus, allow_oom

    def run(self, anchor_ids: list[str], result: ModelRun | None = None) -> dict[str, np.ndarray]:
        """The anchors ``anchor_ids`` of one step (a training step when the model has a
        loss); ``result`` (if given) gets its compile and run seconds, cycles and
        vertices."""
        options: dict[str, Any] = {"numIPUs": self.ipus}
        if self.tiles:
            options["tilesPerIPU"] = self.tiles
        device = popart.DeviceManager().createIpuModelDevice(options)
        every = popart.AnchorReturnType("ALL")
        user = popart.SessionOptions()
        if self.ipus > 1:  # sharded: the nodes in order, one contiguous chunk per IPU
            user.virtualGraphMode = popart.VirtualGraphMode.Auto
        if self.allow_oom:
            user.engineOptions = {"debug.allowOutOfMemory": "true"}
        flow = popart.DataFlow(1, {a: every for a in anchor_ids})
        t0 = time.perf_counter()
        if self.loss is not None:
            session = popart.TrainingSession(
                fnModel=self.proto.SerializeToString(),
                dataFlow=flow,
                deviceInfo=device,
                loss=self.loss,
                optimizer=popart.ConstSGD(0.0),
                userOptions=user,
            )
        else:
            session = popart.InferenceSession(
                fnModel=self.proto.SerializeToString(),
                dataFlow=flow,
                deviceInfo=device,
                userOptions=user,
            )
        session.prepareDevice()
        compiled = time.perf_counter() - t0
        t0 = time.perf_counter()
        session.weightsFromHost()
        anchors = session.initAnchorArrays()
        session.run(popart.PyStepIO(self.inputs, anchors))
        if result is not None:
            result.seconds["compile"] = compiled
            result.seconds["run"] = time.perf_counter() - t0
            result.cycles = int(session.getCycleCount())
            # the graph profile's numVertices, without encoding the whole profile as JSON
            result.vertices = int(session.graph.getNumVertices())
        # the checks run the reference in float64: the simulator's state is freed
        # first, so the peak host RAM measured is the simulation's, not the sum of both
        del session
        device.detach()
        gc.collect()
        return anchors


def _check_at_session_branches(
    step: _Step,
    anchors: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    result: ModelRun,
) -> float:
    """The gradient check's error at the branches the session's step took, or ``inf``
    where those cannot stand in for the reference's.

    The float32 step computes the gradient of the branch its own values pick; at a ReLU
    input within its rounding of zero (or a max pool window within it of a tie) that
    can be the other branch than the float64 reference's, and one such unit near the
    stem moves a deep model's stem gradient by more than the check's tolerance. The
    step is run again with the :func:`kink_inputs` anchored (the same program with more
    anchors: its loss and gradients must come out bit for bit as the first run's, or
    the branches seen are not that run's), and the check is taken at those branches.
    It stands only if the step's kink inputs are within the forward tolerance (1e-4 of
    each tensor's largest magnitude) of the reference and every unit on another branch
    is within that of its kink; ``result.session_branches`` gets the figures.
    """
    kinks = kink_inputs(step.proto)
    again = step.run([*anchors, *(k for k in kinks if k not in anchors)])
    same = all(np.array_equal(np.asarray(again[a]), np.asarray(anchors[a])) for a in anchors)
    at = {k: np.asarray(again[k]) for k in kinks}
    del again
    units, nearest, forward = branch_differences(step.proto, step.inputs, at)
    assert step.loss is not None
    analytic, numeric = directional_check(step.proto, step.inputs, step.loss, grads, at=at)
    error = abs(analytic - numeric) / max(abs(numeric), 1e-6)
    result.session_branches = {
        "gradient_check": [analytic, numeric],
        "units": units,
        "nearest": nearest,
        "forward": forward,
        "repeated": same,
    }
    within = same and forward <= 1e-4 and nearest <= 1e-4
    return error if within else float("inf")


def main(argv: list[str] | None = None) -> int:
    """Command line: run one model and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--train", action="store_true", help="one training step")
    parser.add_argument("--tiles", type=int, default=None, help="tiles per IPU (Mk2: 1472)")
    parser.add_argument("--ipus", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--allow-oom", action="store_true", help="run even if it does not fit tile memory"
    )
    args = parser.parse_args(argv)
    try:
        result = run_model(args.model, args.train, args.tiles, args.ipus, allow_oom=args.allow_oom)
    except Exception as exc:  # a model that does not compile or run: say why, exit 2
        first = str(exc).splitlines()[0] if str(exc) else ""
        message = f"{type(exc).__name__}: {first}"
        print(json.dumps({"model": args.model, "error": message}) if args.json else message)
        return 2
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key}: {value}")
    return 0 if result.matched else 1


if __name__ == "__main__":
    sys.exit(main())
