"""FC: the fully-connected training passes as Poplibs' ``fully_connected_layer`` tool
times them (``tools/fully_connected_layer.cpp`` at graphcore/poplibs f927358).

The tool builds, for ``numGroups`` groups of a layer ``[batch, input] x [input, output]``:

* the forward program: ``nextAct = matMulGrouped(prevAct, weights)`` (option
  ``fullyConnectedPass=TRAINING_FWD``; ``prevAct`` and ``weights`` laid out by
  ``createMatMulGroupedInputLHS/RHS``), then the biases added in place
  (``addInPlace(nextAct, biases broadcast over the batch)``; biases ``[groups, output]``
  mapped linearly);
* the backward program: the input gradient ``prevDeltas = matMulGrouped(zDeltas,
  weights^T)`` (``TRAINING_BWD``; ``zDeltas`` from ``createMatMulGroupedInputLHS``),
  the weight update ``weights += -lr prevAct^T zDeltas`` (``matMulAcc``,
  ``TRAINING_WU``) and the bias update (``reduce`` of ``zDeltas`` over the batch,
  ``cast``, ``scaledAddTo(biases, -lr)``);

and runs the forward program, then the backward one, each by its own
``engine.run`` (``--ignore-data``: no host transfers), so each run ends with its own
end-of-run sync. The metrics are the cycles of each pass (``fwd_cycles``: the forward
program; ``bwd_cycles``: the input gradient; ``wu_cycles``: the weight and bias
update) and ``total_cycles``, the cycles of both runs, as the tool's profile counts
them.

Each pass passes ``fullyConnectedPass`` to ``matMul``, which rearranges an operand
before the exchange where Poplibs does (``convolutionPreprocess``: always in the weight
update, and where the operand's layout is not the plan's, as the transposed weights of
the input gradient; see :mod:`poplar_api.poplin.matmul`). The three passes are planned
jointly or separately as Poplibs' ``createPlan`` does (:mod:`poplar_api.poplin.fc_joint`),
and a joint plan's input gradient first transposes the weights into its grouping
(:mod:`poplar_api.poplin.fc_transpose`). Measured: the ``fc_layer_*`` rows of Poplibs'
``tests/benchmark_results.csv`` at f927358 (source J, IPU Model Mk1 and Mk2,
``--bias 0 --ignore-data``): the total cycles of the tool's runs.
"""

from __future__ import annotations

from ipusim.trace import Trace
from poplar_api import Device, Graph, poplin, popops, poputil
from poplar_api import program as prog
from poplar_api.popops import Operation
from poplar_api.types import type_from_name
from poplar_api.workload import Workload

CONFIG = "mk2-ipumodel"
TEST_CONFIG = "tiny"

#: Poplibs' fully-connected benchmarks (``add_fc_benchmark`` in ``tests/CMakeLists.txt``
#: at f927358): name -> (batch, input, output, data type); ``--bias 0``.
_FC = {
    "fc_layer_1440x100x200": (1440, 100, 200, "half"),
    "fc_layer_1440x200x400": (1440, 200, 400, "half"),
    "fc_layer_16x1324x100": (16, 1324, 100, "half"),
    "fc_layer_80_1324_100": (80, 1324, 100, "half"),
    **{
        f"fc_layer_{b}_1000_{o}_{t}": (b, 1000, o, t)
        for t in ("half", "float")
        for b in (1, 4, 8, 16)
        for o in (1000, 5)
    },
}
#: CSV row id -> parameters; ``.ipum1`` rows on ``mk1-ipumodel``, ``.ipum2`` on
#: ``mk2-ipumodel``.
POINTS: dict[str, dict] = {}
POINT_CONFIGS: dict[str, str] = {}
for _model, _preset in (("ipum1", "mk1-ipumodel"), ("ipum2", "mk2-ipumodel")):
    for _name, (_b, _i, _o, _t) in _FC.items():
        _row = f"J-{_name}.{_model}"
        POINTS[_row] = {
            "batch": _b, "input_size": _i, "output_size": _o, "bias": False, "data_type": _t
        }  # fmt: skip
        POINT_CONFIGS[_row] = _preset

#: The tool's learning rate when its data is not uniform random (``learningRate``).
LEARNING_RATE = 1.0


def _pass_cycles(traces: list[Trace], prefix: str) -> float:
    """Cycles from the first start to the last end of the steps named ``prefix...`` (in
    the one run that has them)."""
    for trace in traces:
        recs = [r for r in trace.records if r.name.startswith(prefix)]
        if recs:
            return float(max(r.last_cycle for r in recs) - min(r.first_cycle for r in recs))
    return 0.0


def metrics(engine, trace: Trace) -> dict[str, float]:
    """Cycles of the forward, backward and weight-update passes and of both runs."""
    traces = engine.getTraces()
    return {
        "fwd_cycles": _pass_cycles(traces, "fc/fwd"),
        "bwd_cycles": _pass_cycles(traces, "fc/bwd"),
        "wu_cycles": _pass_cycles(traces, "fc/wu"),
        "total_cycles": float(sum(t.total_cycles for t in traces)),
    }


def workload(
    device: Device,
    batch: int = 4,
    input_size: int = 32,
    output_size: int = 16,
    groups: int = 1,
    bias: bool = True,
    data_type: str = "half",
) -> Workload:
    """The forward and backward programs of one fully-connected layer, run in turn (two
    runs, as the tool's)."""
    dtype = type_from_name(data_type.upper())
    graph = Graph(device.getTarget())
    fwd_opts = {"fullyConnectedPass": "TRAINING_FWD", "remapOutputTensor": "false"}
    bwd_opts = {**fwd_opts, "fullyConnectedPass": "TRAINING_BWD"}
    wu_opts = {**fwd_opts, "fullyConnectedPass": "TRAINING_WU"}
    a_shape, w_shape = [groups, batch, input_size], [groups, input_size, output_size]
    prev_act = poplin.createMatMulInputLHS(graph, dtype, a_shape, w_shape, "prevAct", fwd_opts)
    weights = poplin.createMatMulInputRHS(graph, dtype, a_shape, w_shape, "weights", fwd_opts)
    fwd, bwd = prog.Sequence(), prog.Sequence()
    next_act = poplin.matMulGrouped(graph, prev_act, weights, fwd, "fc/fwd", fwd_opts)
    biases = None
    if bias:
        biases = graph.addVariable(dtype, [groups, output_size], "biases")
        poputil.mapTensorLinearly(graph, biases)
        b = biases.reshape([groups, 1, output_size]).broadcast(batch, 1)
        popops.addInPlace(graph, next_act, b, fwd, "fc/fwd/bias")
    z_shape, wt_shape = [groups, batch, output_size], [groups, output_size, input_size]
    z_deltas = poplin.createMatMulInputLHS(graph, dtype, z_shape, wt_shape, "zDeltas", bwd_opts)
    w_t = weights.dimShuffle([0, 2, 1])
    poplin.matMulGrouped(graph, z_deltas, w_t, bwd, "fc/bwd", bwd_opts)
    prev_t = prev_act.dimShuffle([0, 2, 1])
    for g in range(groups):  # matMulAcc is 2-D: one update per group, as the tool's g = 1
        poplin.matMulAcc(
            graph, weights[g], -LEARNING_RATE, prev_t[g], z_deltas[g], bwd, "fc/wu", wu_opts
        )
    if biases is not None:
        deltas = popops.reduce(graph, z_deltas, [1], Operation.ADD, bwd, "fc/wu/biasReduce")
        deltas = popops.cast(graph, deltas, dtype, bwd, "fc/wu/biasCast")
        popops.scaledAddTo(graph, biases, deltas, -LEARNING_RATE, bwd, "fc/wu/biasUpdate")
    # the tool's engine.run(fwdProgIndex), then engine.run(bwdProgIndex)
    return Workload(graph, [fwd, bwd], run=(0, 1), metrics=metrics)
