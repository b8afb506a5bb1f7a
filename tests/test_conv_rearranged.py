"""Convolutions that rearrange their operands before the exchange, as Poplibs' do.

The rules (graphcore/poplibs 7eac0f26, ``lib/poplin/Convolution.cpp``,
``convolutionPreprocess`` and the conditions of ``convolutionImpl``): an
operand is copied into a tensor laid out as the plan wants in the weight-update pass,
when the plan expands dimensions (im2col), when it is broadcast to more than 7 tiles
(activations: the output-channel split; weights: batch times field split), and when
the plan groups input channels and the operand's innermost dimension has no grouping.
The tests write the rules out again from each plan's partition, check which copies the
passes decide on and which are left after Poplar's elision (an operand that already lies
as the copy's destination and needs no padding: ``tests/test_matmul_rearrange.py``), the
values of every pass against numpy, and that the partial vertices then read their
rearranged operands as runs.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.run_ids import MIN_ELEMENTS_PER_RUN, RunIds, as_runs
from tests.test_matmul_rearrange import Spy
from tests.test_poplin_conv import NO_EXPAND_AMP, jacobians, ref_conv, run_passes

DIRECT = {"planConstraints": '{"transform": {"expandDims": []}}'}


def _copies(seq: prog.Sequence) -> set[str]:
    return {c.debugName for c in seq.programs if isinstance(c, prog.Copy)}


def _expected(prefix: str, plan, wu: bool, acts_grouped: bool, weights_grouped: bool) -> set:
    """The rule written out from the plan's partition ``(G, B, *field, Co, Ci)``."""
    parts = list(plan.parts)
    field_batch = int(np.prod(parts[1:-2]))
    ungrouped = plan.in_chans_per_group > 1
    acts = wu or plan.expanded or parts[-2] > 7 or (ungrouped and not acts_grouped)
    weights = wu or plan.expanded or field_batch > 7 or (ungrouped and not weights_grouped)
    named = ((f"{prefix}/actsRearranged", acts), (f"{prefix}/weightsRearranged", weights))
    return {n for n, on in named if on}


# ------------------------------------------------------------ which operands are copied
#: (preset, params, options, pass): convolutions whose plans fall on each side of the
#: rules (the expected copies are derived from each one's plan)
TABLE = [
    (
        "ipu2",
        poplin.ConvParams(
            FLOAT, 8, [32, 32], [3, 3], 64, 64, 1, paddingLower=[1, 1], paddingUpper=[1, 1]
        ),
        DIRECT,
        None,
    ),
    ("ipu2", poplin.ConvParams(FLOAT, 1, [8, 8], [1, 1], 16, 512, 1), NO_EXPAND_AMP, None),
    ("ipu2", poplin.ConvParams(FLOAT, 2, [4, 4], [3, 3], 8, 8, 1), DIRECT, None),
    ("ipu2", poplin.ConvParams(FLOAT, 2, [8, 8], [3, 3], 4, 8, 1), None, None),
    ("ipu1", poplin.ConvParams(HALF, 4, [16, 16], [3, 3], 16, 16, 2), DIRECT, "TRAINING_FWD"),
    ("ipu1", poplin.ConvParams(FLOAT, 2, [6, 6], [3, 3], 8, 8, 1), DIRECT, "TRAINING_WU"),
    ("tiny", poplin.ConvParams(FLOAT, 1, [4, 4], [3, 3], 8, 8, 1), DIRECT, None),
]


def _forward(preset, params, options, conv_pass, acts_view):
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    opts = dict(options or {})
    if conv_pass:
        opts["pass"] = conv_pass
    if acts_view == "created":
        x = poplin.createInput(graph, params, "x", opts)
    else:  # channels outermost in memory: the innermost (channel) dimension has stride
        b, c, *field = params.inputShape()
        raw = graph.addVariable(params.inputType, [c, b, *field], "x")
        graph.mapElements(raw, np.zeros(raw.numElements(), np.int64))
        x = raw.dimShuffle([1, 0, *range(2, 2 + len(field))])
    w = poplin.createWeights(graph, params, "w", opts)
    seq = prog.Sequence()
    poplin.convolution(graph, x, w, params, False, seq, "fwd", opts)
    return graph, poplin.getConvPlan(graph, params, opts), _copies(seq)


@pytest.mark.parametrize("acts_view", ["created", "channels outermost"])
@pytest.mark.parametrize("row", range(len(TABLE)))
def test_operands_are_copied_exactly_where_poplibs_copies_them(row, acts_view, monkeypatch):
    preset, params, options, conv_pass = TABLE[row]
    spy = Spy(monkeypatch)
    graph, plan, names = _forward(preset, params, options, conv_pass, acts_view)
    # created operands keep their channels together (grouped); the other view strides
    # them (ungrouped) unless there is one channel per group
    grouped = acts_view == "created" or params.inputChannelsPerConvGroup == 1
    want = _expected("fwd", plan, conv_pass == "TRAINING_WU", grouped, True)
    assert spy.decided() == want, str(plan)
    # Poplar elides those whose operand already lies as the destination, unpadded
    assert names == spy.kept(graph), str(plan)
    if acts_view == "channels outermost" and "fwd/actsRearranged" in want:
        assert "fwd/actsRearranged" in names  # all on tile 0: never the plan's layout


def test_the_table_covers_each_rule():
    """Every rule decides a copy in at least one row, and one row copies nothing."""
    seen = {"wu": False, "expanded": False, "acts broadcast": False,
            "weights broadcast": False, "none": False}  # fmt: skip
    for preset, params, options, conv_pass in TABLE:
        _, plan, names = _forward(preset, params, options, conv_pass, "created")
        seen["wu"] |= conv_pass == "TRAINING_WU"
        seen["expanded"] |= plan.expanded
        seen["acts broadcast"] |= plan.parts[-2] > 7
        seen["weights broadcast"] |= int(np.prod(plan.parts[1:-2])) > 7 and not plan.expanded
        seen["none"] |= not names
    assert all(seen.values()), seen


# ------------------------------------------------------------ values
CASES = {
    "grouped": (poplin.ConvParams(FLOAT, 2, [6, 5], [3, 2], 3, 4, 2), None),
    "strides padding dilation": (
        poplin.ConvParams(
            FLOAT,
            2,
            [9, 7],
            [3, 3],
            4,
            5,
            1,
            stride=[2, 1],
            paddingLower=[1, 0],
            paddingUpper=[2, 1],
            dilation=[1, 2],
        ),
        None,
    ),
    "direct, broadcast operands": (
        poplin.ConvParams(
            FLOAT, 2, [6, 6], [3, 3], 8, 8, 1, paddingLower=[1, 1], paddingUpper=[1, 1]
        ),
        DIRECT,
    ),
    "weight-update pass": (
        poplin.ConvParams(FLOAT, 2, [5, 5], [2, 2], 4, 6, 1),
        {**DIRECT, "pass": "TRAINING_WU"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rearranged_passes_equal_numpy(case):
    params, options = CASES[case]
    rng = np.random.default_rng(31)
    x = rng.standard_normal(params.inputShape()).astype(np.float32)
    w = rng.standard_normal(params.weightsShape()).astype(np.float32)
    dy = rng.standard_normal(params.outputShape()).astype(np.float32)
    out, _, _ = run_passes(params, x, w, dy, preset="ipu1", options=options)
    jx, jw = jacobians(x, w, params)
    np.testing.assert_allclose(out["y"], ref_conv(x, w, params), rtol=1e-5, atol=1e-4)
    dx = (jx.T @ dy.reshape(-1)).reshape(x.shape)
    dw = (jw.T @ dy.reshape(-1)).reshape(w.shape)
    np.testing.assert_allclose(out["dx"], dx, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["dw"], dw, rtol=1e-5, atol=1e-4)


def test_rearranged_passes_copy_before_their_partials():
    """The weight-update pass always rearranges: its copies come before its compute set."""
    params, options = CASES["strides padding dilation"]
    device = IPUModel("ipu1").createDevice()
    graph = Graph(device.getTarget())
    x = poplin.createInput(graph, params, "x", options)
    dy = graph.addVariable(FLOAT, params.outputShape(), "dy")
    graph.mapElements(dy, np.arange(dy.numElements()) % 4)
    seq = prog.Sequence()
    wu_options = {**(options or {}), "pass": "TRAINING_WU"}
    poplin.calculateWeightDeltas(graph, dy, x, params, seq, "wu", wu_options)
    kinds = [(type(p).__name__, getattr(p, "debugName", "")) for p in seq.programs]
    assert kinds[:2] == [("Copy", "wu/actsRearranged"), ("Copy", "wu/weightsRearranged")]
    assert kinds[2][0] == "Execute"


def test_half_rearranged_convolution_equals_numpy():
    params = poplin.ConvParams(HALF, 2, [8, 8], [3, 3], 16, 16, 1, paddingLower=[1, 1],
                               paddingUpper=[1, 1])  # fmt: skip
    rng = np.random.default_rng(4)
    x = rng.standard_normal(params.inputShape()).astype(np.float16)
    w = rng.standard_normal(params.weightsShape()).astype(np.float16)
    dy = rng.standard_normal(params.outputShape()).astype(np.float16)
    opts = {"pass": "TRAINING_WU"}
    out, _, _ = run_passes(params, x, w, dy, options=opts, passes=("fwd", "wu"))
    np.testing.assert_allclose(out["y"], ref_conv(x, w, params), rtol=2e-2, atol=5e-2)
    # dw[o, i, ky, kx] = sum over batch and output positions of dy * the padded input
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(xp, (8, 8), axis=(2, 3))
    dw = np.einsum("boyx,bikjyx->oikj", dy.astype(np.float64), windows)
    np.testing.assert_allclose(out["dw"], dw[None], rtol=2e-2, atol=0.25)


# ------------------------------------------------------------ fields as runs
def _list_field(graph: Graph, name: str) -> list:
    """Each bulk-connected VectorList ``name``: (vectors per vertex, piece begins and
    ends, the ids as an array)."""
    out = []
    for block in graph._state.vertices.list_blocks:
        if name in block.fields:
            offsets, begins, ends, ids = block.fields[name]
            out.append((offsets, np.asarray(begins), np.asarray(ends), np.asarray(ids)))
    return out


def test_rearranged_weights_are_one_run_per_piece():
    """The forward pass of a plan with more than 7 batch-field parts reads its weights
    laid out as ``[G][Co/ocg][Ci/icg][*K][ocg][icg]`` (created so, the rearranging copy
    elided): each weight piece of a partial vertex (one output- and input-channel
    group) is one run of consecutive elements."""
    params, options = TABLE[0][1], TABLE[0][2]
    graph, _, names = _forward("ipu2", params, options, None, "created")
    # the created weights lie as the copy would lay them out: read where they are
    assert "fwd/weightsRearranged" not in names
    fields = _list_field(graph, "weights")
    assert fields
    pieces = runs = 0
    for _, begins, ends, ids in fields:
        for b, e in zip(begins.tolist(), ends.tolist(), strict=True):
            piece = ids[b:e]
            pieces += 1
            runs += 1 + int(np.count_nonzero(np.diff(piece) != 1))
    assert runs == pieces
    # and the graph keeps them as runs, not one id per element
    kept = [b.fields["weights"][3] for b in graph._state.vertices.list_blocks]
    assert all(isinstance(k, RunIds) for k in kept)


# ------------------------------------------------------------ ids as runs
def test_run_ids_read_back_as_the_array():
    rng = np.random.default_rng(9)
    lengths = rng.integers(8, 40, 50)
    firsts = rng.integers(0, 10_000, 50)
    ids = np.concatenate([np.arange(f, f + n) for f, n in zip(firsts, lengths, strict=True)])
    runs = as_runs(ids.astype(np.int32))
    assert isinstance(runs, RunIds) and runs.size == ids.size
    assert runs.starts.size <= 50
    for a, b in [(0, ids.size), (3, 17), (100, 101), (ids.size - 5, ids.size), (7, 7)]:
        np.testing.assert_array_equal(runs[a:b], ids[a:b])
    pos = rng.integers(0, ids.size, 300)
    np.testing.assert_array_equal(runs[pos], ids[pos])
    np.testing.assert_array_equal(runs[-3:], ids[-3:])
    np.testing.assert_array_equal(np.asarray(pickle.loads(pickle.dumps(runs))), ids)


def test_scattered_ids_stay_an_array():
    ids = np.arange(0, 4 * MIN_ELEMENTS_PER_RUN * 10, 4)  # no two consecutive
    assert as_runs(ids) is None
    assert as_runs(np.arange(MIN_ELEMENTS_PER_RUN)) is None  # too short to matter


def test_a_compiled_convolution_with_ids_as_runs_survives_a_file(tmp_path):
    """The list blocks holding ids as runs are saved and loaded with the executable,
    and the loaded one computes what the graph does."""
    from poplar_api import Engine, compileGraph
    from poplar_api.executable import Executable

    params, options = CASES["direct, broadcast operands"]
    device = IPUModel("ipu1").createDevice()
    graph = Graph(device.getTarget())
    x = poplin.createInput(graph, params, "x", options)
    w = poplin.createWeights(graph, params, "w", options)
    seq = prog.Sequence()
    y = poplin.convolution(graph, x, w, params, False, seq, "fwd", options)
    for name, t in (("x", x), ("w", w)):
        graph.createHostWrite(name, t)
    graph.createHostRead("y", y)
    blocks = graph._state.vertices.list_blocks
    assert any(isinstance(v[3], RunIds) for b in blocks for v in b.fields.values())
    path = tmp_path / "conv.ipuexe"
    compileGraph(graph, seq).serialize(path)
    exe = Executable.deserialize(path)
    rng = np.random.default_rng(2)
    xv = rng.standard_normal(params.inputShape()).astype(np.float32)
    wv = rng.standard_normal(params.weightsShape()).astype(np.float32)

    def result(engine):
        engine.load(IPUModel("ipu1").createDevice())
        engine.writeTensor("x", xv)
        engine.writeTensor("w", wv)
        engine.run(0)
        return engine.readTensor("y")

    loaded = result(Engine(exe))
    np.testing.assert_allclose(loaded, ref_conv(xv, wv, params), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(loaded, result(Engine(graph, seq)))
