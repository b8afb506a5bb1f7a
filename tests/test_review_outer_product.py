"""The OuterProduct pass's simulated cycles against Poplibs' planner cost.

Poplibs' planner costs a tile of an outer-product convolution as one worker's share of
the field (``ceil(field / workers)`` positions) over the tile's channels, times the
worker contexts (``addPartialCalcCycleEstimate``, ``lib/poplin/ConvModel.cpp`` at
7eac0f26). With one block per tile and no more worker pieces than contexts, each
piece runs on a context of its own, so the tile's compute-set cycles are the
contexts times the slowest piece: the first, which has ``ceil(field / workers)``
positions. The estimate is written out here from ``getOuterProductCycleEstimate``.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.outer_product import OUTER_PRODUCT, outer_product_conv


def _estimate(is_float: bool, width: int, chans: int, cpg: int) -> int:
    groups = chans // cpg
    if is_float:
        fast = cpg >= 6 and cpg % 2 == 0
        per = 6 + (cpg - 6) // 2 if fast else 10 + 2 * cpg
        return 25 + groups * (11 + width * per)
    fast = cpg >= 12 and cpg % 4 == 0
    per = 6 + (cpg - 12) // 4 if fast else 10 + (5 * cpg) // 2
    return 25 + groups * (10 + width * per)


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize(
    ("field", "co", "cpg", "field_parts", "chan_parts"),
    [(50, 24, 8, 2, 3), (13, 16, 16, 1, 1), (7, 12, 4, 3, 1), (1, 6, 6, 1, 1)],
)
def test_tile_cycles_are_the_planner_cost(t, field, co, cpg, field_parts, chan_parts) -> None:
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    workers = graph.getTarget().getNumWorkerContexts()
    parts = (1, 1, field_parts, chan_parts, 1)
    used = field_parts * chan_parts
    assert used <= graph.getTarget().getNumTiles()
    cog = -(-co // cpg)
    bco = -(-cog // chan_parts) * cpg
    bf = -(-field // field_parts)
    plan = ConvPlan(
        method=OUTER_PRODUCT, parts=parts, blocks=(1, 1, bf, bco, 1), in_chans_per_group=1,
        out_chans_per_group=cpg, num_conv_units=1, conv_input_load_elems=1,
        partials_type=t, tiles=np.arange(used).reshape(parts),
    )  # fmt: skip
    params = ConvParams(t, 1, [field], [1], 1, co, 1, outputType=t)
    acts = graph.addVariable(t, [1, field, 1], "acts")
    weights = graph.addVariable(t, [1, co, 1], "weights")
    graph.setTileMapping(acts, 0)
    graph.setTileMapping(weights, 0)
    seq = prog.Sequence()
    outer_product_conv(graph, acts, weights, params, plan, seq, "op")
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run()
    (rec,) = [r for r in engine.getTrace().records if r.name == "op/Convolve"]
    want = np.zeros(graph.getTarget().getNumTiles(), np.int64)
    for f in range(field_parts):
        width = min(bf, field - f * bf)
        for c in range(chan_parts):
            chans = min(bco, cog * cpg - c * bco)
            if width > 0 and chans > 0:
                tile = f * chan_parts + c
                want[tile] = workers * _estimate(t == FLOAT, -(-width // workers), chans, cpg)
    np.testing.assert_array_equal(np.asarray(rec.tile_cycles, np.int64), want)
