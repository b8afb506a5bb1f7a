"""The weights' transposition before a jointly planned layer's input-gradient pass
(Poplibs' ``fullyConnectedWeightTranspose``, graphcore/poplibs f927358 and 7eac0f26:
``lib/poplin/Convolution.cpp``, ``lib/popops/Rearrange.cpp``, the ``Transpose2d``
estimate of ``popopsCycleEstimators.cpp``) and the grouped horizontal MAC of a joint plan.

Values are checked against the weights themselves (a transposition into the backward
plan's grouping leaves the logical tensor unchanged); cycles against the estimator's
formula written out here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate, partial_estimate
from poplar_api.poplin.fc_joint import FC_TRAINING, pass_product, swapped_params
from poplar_api.poplin.fc_transpose import group_sizes, weight_transpose

RNG = np.random.default_rng(8)
_PASSES = {"FC_TRAINING_FWD": "TRAINING_FWD", "FC_TRAINING_BWD": "TRAINING_BWD",
           "FC_TRAINING_WU": "TRAINING_WU"}  # fmt: skip


def _transpose_2d_float(rows: int, cols: int, matrices: int) -> int:
    """``Transpose2d``'s estimate for a 4-byte type (thread cycles): the fast path needs
    even sides and its largest stride ``rows (cols - 2) / 2`` under 512."""
    if rows % 2 == 0 and cols % 2 == 0 and rows * (cols - 2) // 2 < 512 and rows < 512:
        return 27 + matrices * (11 + (rows // 2) * (6 + 3 * (cols // 2 - 1)))
    return 13 + matrices * (8 + cols * (5 + rows * 4 // 2))


def test_group_sizes_are_the_largest_common_divisors() -> None:
    assert group_sizes(40, 40, 1000, 1000) == (40, 40)
    assert group_sizes(16, 16, 1000, 1000) == (8, 8)
    assert group_sizes(8, 16, 1000, 200) == (8, 8)
    assert group_sizes(1, 40, 1000, 1000)[0] == 1  # nothing to transpose (useCopyImpl)


@pytest.mark.parametrize(("size", "blocks_per_tile"), [(40, 1), (8, 4)])
def test_transposition_values_and_cycles(size: int, blocks_per_tile: int) -> None:
    """A ``size x size`` FLOAT grouping: every block transposed on its source's tile
    (one ``Transpose2d`` per worker share of the tile's blocks), the result equal to the
    weights; the compute set takes six times the busiest worker's estimate."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    workers = graph.getTarget().getNumWorkerContexts()
    n_i, n_o = size * blocks_per_tile, size
    # the forward layout: input channels grouped innermost, one block row per tile
    fwd = graph.addVariable(FLOAT, [1, n_i // size, n_o, size], "w")
    for b in range(n_i // size):
        graph.setTileMapping(fwd[0, b], 0)
    w = fwd.dimShuffle([0, 1, 3, 2]).reshape([1, n_i, n_o])
    bwd = graph.addVariable(FLOAT, [1, n_o // size, n_i, size], "transposed")
    graph.setTileMapping(bwd, 1)
    laid_out = bwd.dimShuffle([0, 2, 1, 3]).reshape([1, n_i, n_o])
    seq = prog.Sequence()
    got_t = weight_transpose(graph, w, laid_out, (size, size), seq, "t")
    assert set(graph.elementTiles(got_t).tolist()) == {0}
    graph.createHostWrite("w", fwd)
    graph.createHostRead("t", bwd)
    values = RNG.standard_normal((1, n_i, n_o)).astype(np.float32)
    eng = Engine(graph, seq)
    eng.load(device)
    eng.writeTensor("w", values.reshape(1, n_i // size, size, n_o).transpose(0, 1, 3, 2))
    eng.run()
    got = eng.readTensor("t")  # [1, O / size, I, size]
    want = values.reshape(1, n_i, n_o // size, size).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(got, want)
    per_worker = math.ceil(blocks_per_tile / workers)
    want_cycles = workers * _transpose_2d_float(size, size, per_worker)
    step = [r for r in eng.getTraces()[-1].records if r.name.endswith("t/Transpose")]
    assert [r.last_cycle - r.first_cycle for r in step] == [want_cycles]


def test_mk1_float_batch1_layer_is_a_grouped_horizontal_mac_plan() -> None:
    """The 1 x 1000 x 1000 FLOAT layer on Mk1 (source J's
    ``fc_layer_1_1000_1000_float``): a joint horizontal-MAC plan, 40 input channels per
    group, with the ``OuterProduct`` weight update (no AMP in any pass, as Poplibs'
    run's tile memory says); its weights transposed in 40 x 40 FLOAT blocks, which
    ``Transpose2d`` runs on its slow path (stride ``40 x 38 / 2`` is not under 512)."""
    graph = Graph(IPUModel("mk1-ipumodel").createDevice().getTarget())
    layer = (1, 1, 1000, 1000)
    plans = {p: poplin.getPlan(graph, pass_product(p, layer), FLOAT, FLOAT,
                               {"fullyConnectedPass": q}) for p, q in _PASSES.items()}  # fmt: skip
    assert [plans[p].method for p in FC_TRAINING] == ["HMAC", "HMAC", "OUTER_PRODUCT"]
    assert all(plans[p].joint for p in FC_TRAINING)
    fwd = plans["FC_TRAINING_FWD"]
    assert fwd.in_chans_per_group == 40
    sizes = group_sizes(fwd.in_chans_per_group, plans["FC_TRAINING_BWD"].in_chans_per_group,
                        1000, 1000)  # fmt: skip
    assert sizes == (40, 40)
    assert _transpose_2d_float(40, 40, 1) == 13 + 8 + 40 * (5 + 80)


def test_joint_horizontal_mac_runs_its_grouping() -> None:
    """A horizontal MAC of a joint plan costs ``ceil(channels / inChansPerGroup)`` input
    groups of its grouping (Poplibs' ``tileNumInGroups``; each more group repeats
    ``15 + numOutGroups (10 + inner loop)`` of
    ``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate``), a plan made alone
    one group of the block's channels."""
    from dataclasses import replace

    from poplar_api.poplin.conv_params import dim_maps
    from poplar_api.poplin.conv_vertex_estimates import group_counts
    from poplar_api.poplin.conv_worklists import tile_geometry

    graph = Graph(IPUModel("mk1-ipumodel").createDevice().getTarget())
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    layer = (1, 1, 1000, 1000)
    plan = poplin.getPlan(graph, pass_product("FC_TRAINING_FWD", layer), FLOAT, FLOAT,
                          {"fullyConnectedPass": "TRAINING_FWD"})  # fmt: skip
    params = swapped_params(pass_product("FC_TRAINING_FWD", layer), FLOAT, FLOAT)
    icg, bci, bco, field = plan.in_chans_per_group, plan.blocks[-1], plan.blocks[-2], plan.blocks[2]
    assert (icg, bci, bco, field) == (40, 40, 1, 40)
    geom = tile_geometry(dim_maps(params), 1, [(0, field)], workers)
    counts = group_counts(plan, plan.blocks[0], bci, bco)
    one = partial_estimate(plan, "HMAC", geom, 1, counts, (bci, bco), params, target)
    two = partial_estimate(plan, "HMAC", geom, 1, counts, (2 * bci, bco), params, target)
    merged = partial_estimate(replace(plan, joint=False), "HMAC", geom, 1, counts,
                              (2 * bci, bco), params, target)  # fmt: skip
    assert largest_block_estimate(params, target)(plan) == one
    # the inner loop: 6 workers x (16 + 16 + 19 + positions (7 + D)), a worker's
    # positions ceil(40 / 6) = 7, the FLOAT dot product over 40 channels D = 7 + 40 / 2
    inner = workers * (16 + 16 + 19 + 7 * (7 + (7 + icg // 2)))
    assert two - one == 15 + (10 + inner)
    assert merged < two  # one group of 80 channels: no second pass of the loops


def test_unmapped_weights_are_refused() -> None:
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    w = graph.addVariable(FLOAT, [1, 8, 8], "w")
    laid_out = graph.addVariable(FLOAT, [1, 8, 8], "t")
    graph.setTileMapping(laid_out, 0)
    with pytest.raises(GraphError, match="'w' have 1 of 1 transposition blocks on no tile"):
        weight_transpose(graph, w, laid_out, (8, 8), prog.Sequence(), "bwd")
