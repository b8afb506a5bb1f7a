"""A whole plan given by ``planConstraints`` (:mod:`poplar_api.poplin.conv_constrained_plan`):
the partition run as given (blocks computed here from the splits), values against numpy,
Poplibs' plan of the CNN step's conv2 (docs/planner.md row 14) run from its restated cost
model, and bad constraints.

Expected values come from :func:`tests.test_poplin_conv.ref_conv` (numpy, Poplar's
ConvParams semantics).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from resnet_rows_common import preset_target
from test_poplin_conv import forward_equals_numpy, ref_conv, vertex_names

from poplar_api import FLOAT, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.poplin import amp
from poplar_api.poplin.conv_constrained_plan import model_plan_constraints
from poplar_api.poplin.poplibs_amp_estimates import nx1_partial_cycles
from poplar_api.poplin.poplibs_float_conv2d import form_plan


def _constraints(expand, field, batch=1, kernel=1, co=1, ci=1, units=8, **extra) -> dict:
    tree = {
        "0": {
            "transform": {"expandDims": expand},
            "partition": {
                "fieldSplit": {str(d): n for d, n in enumerate(field)},
                "batchSplit": batch,
                "kernelSplit": {"0": kernel, "1": 1},
                "outChanSplit": {"parallel": co, "serial": 1},
                "inChanSplit": {"parallel": ci, "serial": 1},
                "convGroupSplit": 1,
            },
        },
        "method": {"type": "AMP", "convUnits": units},
        **extra,
    }
    return {"planConstraints": json.dumps(tree)}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


#: (ConvParams args, keywords, constraint arguments, expected (parts, blocks)) on ipu1:
#: the width expanded and the batch flattened into it (2 x 7 positions), kernel rows over
#: 3 tiles, 2 output-channel grains of 8 over 2; the plain convolution; both expanded.
CASES = [
    ((2, [6, 7], [3, 3], 8, 16), {"paddingLower": [1, 1], "paddingUpper": [1, 1]},
     dict(expand=[1], field=[3, 4], kernel=3, co=2),
     ((1, 1, 3, 4, 2, 1), (1, 1, 2, _ceil(14, 4), 8, 24))),
    ((2, [6, 7], [3, 3], 8, 16), {"paddingLower": [1, 1], "paddingUpper": [1, 1]},
     dict(expand=[], field=[3, 2], batch=2, co=2),
     ((1, 2, 3, 2, 2, 1), (1, 1, 2, 4, 8, 8))),
    ((3, [5, 6], [2, 3], 2, 8), {"stride": [1, 2]},
     dict(expand=[0, 1], field=[1, 6]),
     ((1, 1, 1, 6, 1, 1), (1, 1, 1, _ceil(3 * 4 * 2, 6), 8, 12))),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_given_partition_runs_and_equals_numpy(case):
    args, kwargs, c, (parts, blocks) = CASES[case]
    p = poplin.ConvParams(FLOAT, *args, **kwargs)
    options = _constraints(**c)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, p, options)
    assert (plan.method, plan.num_conv_units, plan.out_chans_per_group) == ("AMP", 8, 8)
    assert (tuple(plan.parts), tuple(plan.blocks)) == (parts, blocks)
    assert plan.kernel_split == c.get("kernel", 1)
    g = forward_equals_numpy(p, np.random.default_rng(case), preset="ipu1", options=options)
    tiles = _partial_tiles(g)
    assert len(tiles) == len(set(tiles)) == plan.num_tiles_used
    assert set(tiles) == set(plan.tiles.reshape(-1).tolist())


def _partial_tiles(graph: Graph) -> list[int]:
    st = graph._state
    return [int(st.vertices.tile[v]) for cs in st.compute_sets if cs.name.endswith("fwd/Convolve")
            for v in cs.vertices if "ConvPartial" in st.vertices[v].vtype.name]  # fmt: skip


def _model_plan(p: poplin.ConvParams, vertex: tuple, vertex_name: str) -> tuple:
    """The restated cost model's plan of ``p`` (TRAINING_FWD on Mk2, the width
    expanded), checked to use ``vertex`` (the grouping) named ``vertex_name``: the
    model's plan, the options its plan constraints make and the plan getConvPlan makes
    of them."""
    model = form_plan(p, "TRAINING_FWD", preset_target("mk2-ipumodel"), "expanded 1")
    assert model["vertex"] == vertex and model["vertex name"] == vertex_name
    options = {"pass": "TRAINING_FWD", "planConstraints": model_plan_constraints(model)}
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    return model, options, poplin.getConvPlan(graph, p, options)


def test_poplibs_plan_of_the_cnn_conv2_runs_as_its_model_states():
    """docs/planner.md row 14: the restated cost model's plan of conv2 (TRAINING_FWD,
    Mk2), turned into plan constraints, runs with that vertex, grouping, units and
    partition (1,428 tiles, a ConvPartial1x1Out a tile: one kernel row, batch 1), and its
    values equal numpy's."""
    p = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    model, options, plan = _model_plan(p, (8, 8, 8), "ConvPartial1x1Out")
    s = model["splits"]
    assert tuple(plan.parts) == (1, s["batchSplit"], s["fieldSplit[0]"], s["fieldSplit[1]"],
                                 s["outChanSplit.parallel"], s["inChanSplit.parallel"])  # fmt: skip
    assert plan.kernel_split == s["kernelSplit[0]"] == 3
    assert (plan.in_chans_per_group, plan.out_chans_per_group, plan.num_conv_units) == (8, 8, 8)
    assert plan.expanded_dims == (1,) and plan.flatten_dims == (0, 2)
    assert plan.num_tiles_used == 1428
    g = forward_equals_numpy(p, np.random.default_rng(14), "mk2-ipumodel", options)
    assert {n for n in vertex_names(g, "fwd/Convolve") if "ConvPartial" in n} == {
        "poplin::ConvPartial1x1Out<float,float,true,true,8,2,false>"  # (8 units, 2 a load)
    }
    # a vertex a block and kernel row but where the row reads only padding: kernel row
    # 0 of output row 0 and kernel row 2 of output row 13 (each 17 x 2 blocks), zeroed
    tiles = _partial_tiles(g)
    assert len(tiles) == len(set(tiles)) == 1428 - 2 * 17 * 2
    assert set(tiles) <= set(plan.tiles.reshape(-1).tolist())


def test_ptree_strings_are_counts():
    """Poplibs' getPlanConstraints JSON quotes its numbers (a property tree)."""
    p = poplin.ConvParams(FLOAT, 2, [6, 7], [3, 3], 8, 16, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    a = poplin.getConvPlan(Graph(IPUModel("ipu1").createDevice().getTarget()), p,
                           _constraints([1], [3, 4], kernel=3, co=2))  # fmt: skip
    text = _constraints([1], [3, 4], kernel=3, co=2)["planConstraints"]
    quoted = json.loads(text)
    quoted["0"]["partition"]["fieldSplit"] = {"0": "3", "1": "4"}
    quoted["method"]["convUnits"] = "8"
    b = poplin.getConvPlan(Graph(IPUModel("ipu1").createDevice().getTarget()), p,
                           {"planConstraints": json.dumps(quoted)})  # fmt: skip
    assert (a.parts, a.blocks) == (b.parts, b.blocks)


@pytest.mark.parametrize(
    "c, match",
    [
        (dict(expand=[1], field=[3, 6]), r"fieldSplit.1 6 of 14 \(grain 1\) gives 5 blocks"),
        (dict(expand=[1], field=[3, 4], inChansPerGroup=6),
         r"inChansPerGroup=6.*8 units grouping 8 or 4 or 2 / 8"),
        (dict(expand=[1], field=[3, 4], units=4), r"convUnits=4"),
        (dict(expand=[], field=[3, 4, 2]), r"fieldSplit=\[3, 4, 2\] names more dimensions"),
    ],
)  # fmt: skip
def test_bad_constraints_are_refused(c, match):
    p = poplin.ConvParams(FLOAT, 2, [6, 7], [3, 3], 8, 16, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    with pytest.raises(GraphError, match=match):
        poplin.getConvPlan(graph, p, _constraints(**c))


def test_a_serial_split_with_a_partition_is_refused():
    p = poplin.ConvParams(FLOAT, 2, [6, 7], [3, 3], 8, 16)
    tree = json.loads(_constraints([], [1, 1])["planConstraints"])
    tree["0"]["partition"]["outChanSplit"]["serial"] = 2
    with pytest.raises(GraphError, match=r"outChanSplit.serial=2"):
        poplin.getConvPlan(Graph(IPUModel("ipu1").createDevice().getTarget()), p,
                           {"planConstraints": json.dumps(tree)})  # fmt: skip


def test_poplibs_plan_of_the_cnn_conv1_runs_with_four_channel_groups():
    """docs/planner.md row 13: the model's plan of conv1 (the width expanded, the batch
    flattened, FLOAT ConvPartialnx1 with 4 input channels a group, so a conv-unit weight
    height of 2, partials by 8 on 8 units, B 1 x field 14 . 100 on 1,400 tiles) runs, its
    values equal numpy's, and its vertex estimate is Poplibs' for that height: the
    restated ``getConvPartialnx1SupervisorCycleEstimate`` of the largest tile (2 x 9
    positions, the 3 kernel rows as 2 slices, 32 weight bytes a unit) computed here from
    the tile's shape, at the vertex's weight load rate."""
    p = poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    _, options, plan = _model_plan(p, (8, 4, 8), "ConvPartialnx1")
    assert tuple(plan.parts) == (1, 1, 14, 100, 1, 1) and plan.num_tiles_used == 1400
    assert (plan.in_chans_per_group, plan.out_chans_per_group, plan.num_conv_units) == (4, 8, 8)
    want = nx1_partial_cycles(
        batch=1, field_shape=(2, 9), kernel_shape=(3, 1), filter_height=2, conv_groups=1,
        in_groups=1, out_groups=1, out_chans_per_group=8, num_conv_units=8,
        weight_bytes_per_conv_unit=32,
        coeff_load_bytes_per_cycle=amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE, workers=6,
        float_activations=True, float_partials=True,
    )  # fmt: skip
    assert plan.cost["compute"] == want
    g = forward_equals_numpy(p, np.random.default_rng(13), "mk2-ipumodel", options)
    assert {n for n in vertex_names(g, "fwd/Convolve") if "ConvPartial" in n} == {
        "poplin::ConvPartialnx1<float,float,true,true,8,2,false>"
    }
    assert len(_partial_tiles(g)) == 1400


@pytest.mark.parametrize("batch, rows", [(11, 7), (16, 5)])
def test_poplibs_tied_plans_of_the_cnn_conv2_gradient_run(batch, rows):
    """docs/planner.md row 15: the two partitions the model ties for conv2's input
    gradient (TRAINING_BWD; AMP 8 / 8 on 8 units, unexpanded, kernel rows over 3 tiles,
    Ci 2) run as given, and the gradient equals numpy's: for a stride of 1 and padding 1
    on each side, the forward weights transposed and flipped, convolved with the output
    gradient padded by 1."""
    fwd = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                            paddingUpper=[1, 1])  # fmt: skip
    bwd = poplin.getGradientParams(fwd)
    tree = json.loads(_constraints([], [rows, 3], batch=batch, kernel=3, ci=2)["planConstraints"])
    options = {"pass": "TRAINING_BWD", "planConstraints": json.dumps(tree)}
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, bwd, options)
    assert tuple(plan.parts) == (1, batch, rows, 3, 1, 2) and plan.kernel_split == 3
    assert not plan.expanded and (plan.in_chans_per_group, plan.num_conv_units) == (8, 8)
    rng = np.random.default_rng(batch)
    w = rng.standard_normal(fwd.weightsShape()).astype(np.float32)
    dy = rng.standard_normal(fwd.outputShape()).astype(np.float32)
    w_t = np.flip(w.transpose(0, 2, 1, 3, 4), axis=(3, 4)).copy()  # [G, Ci, Co, K] flipped
    same = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 16, 8, paddingLower=[1, 1],
                             paddingUpper=[1, 1])  # fmt: skip
    want = ref_conv(dy, w_t, same)
    device = IPUModel("mk2-ipumodel").createDevice()
    graph = Graph(device.getTarget())
    w_var = poplin.createWeights(graph, fwd, "w", {"pass": "TRAINING_FWD"})
    dy_var = poplin.createInput(graph, bwd, "dy", options)
    seq = prog.Sequence()
    dx = poplin.convolution(graph, dy_var, w_var, bwd, True, seq, "bwd", options)
    for name, t in (("w", w_var), ("dy", dy_var)):
        graph.createHostWrite(name, t)
    graph.createHostRead("dx", dx)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("w", w)
    engine.writeTensor("dy", dy)
    engine.run(0)
    np.testing.assert_allclose(engine.readTensor("dx"), want, rtol=1e-5, atol=1e-4)


def test_groupings_without_a_partition_change_nothing():
    """``convUnits`` and the groupings are read with a whole partition only: without one
    the options are those of the method alone (ipusim's own search and adoption)."""
    from poplar_api.poplin.conv_options import parse_options

    alone = {"method": {"type": "AMP", "convUnits": 8}, "inChansPerGroup": 4}
    assert parse_options({"planConstraints": json.dumps(alone)}, "t") == parse_options(
        {"planConstraints": json.dumps({"method": "AMP"})}, "t"
    )
