"""Convolution operands are mapped in memory-contiguous grains of at least 128 bytes
(activations) or 256 bytes (weights), as Poplibs' ``mapActivationsOrWeights``
(``lib/poplin/Convolution.cpp``, graphcore/poplibs ``7eac0f26``) maps them, so that a
tile holds a few long regions of an operand and the exchange code stays small.

The expected region counts are written out from the plan's partition.
"""

from __future__ import annotations

import math

import numpy as np

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.poplin.conv import getWeightUpdateParams
from poplar_api.poplin.conv_layout import spread_by_use


def _wu_graph():
    """The weight-update convolution of a 512 -> 512 3x3 layer on a 7x7 field (one
    input channel per group, im2col-expanded, one block per batch part)."""
    fwd = poplin.ConvParams(FLOAT, 1, [7, 7], [3, 3], 512, 512, 1,
                            paddingLower=[1, 1], paddingUpper=[1, 1])  # fmt: skip
    params = getWeightUpdateParams(fwd)
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    opts = {"pass": "TRAINING_WU"}
    return graph, params, poplin.getConvPlan(graph, params, opts), opts


def test_weight_update_input_is_mapped_in_128_byte_regions():
    graph, params, plan, opts = _wu_graph()
    assert plan.expanded and params.inputChannelsPerConvGroup == 1, str(plan)
    x = poplin.createInput(graph, params, "x", opts)
    # memory order [G][Ci][B][*field]: a batch part's block is one run of B_p * 49
    # elements, cut into min(Co parts, elements // 32) chunks of at least 128 bytes
    per_elem = int(np.prod(params.inputFieldShape))
    b, bb, pco = params.batchSize, plan.blocks[1], plan.parts[-2]
    sizes = [(min((p + 1) * bb, b) - p * bb) * per_elem for p in range(plan.parts[1])]
    expected = sum(min(pco, max(n // (128 // 4), 1)) for n in sizes if n)
    mapping = graph.getTileMapping(x)
    regions = [(t, iv) for t, ivs in enumerate(mapping) for iv in ivs]
    assert len(regions) == expected
    assert max(len(ivs) for ivs in mapping) == 1
    lengths = np.array([iv.size() for _, iv in regions])
    assert lengths.min() * 4 >= 128
    # balanced: within a block the chunks differ by at most one element
    assert lengths.max() - lengths.min() <= max(sizes) // pco + 1


def test_weight_update_input_lies_on_tiles_that_read_it():
    graph, params, plan, opts = _wu_graph()
    x = poplin.createInput(graph, params, "x", opts)  # [G, B, C, *F] canonical
    mapping = graph.getTileMapping(x)
    tile = np.empty(x.numElements(), np.int64)
    for t, ivs in enumerate(mapping):
        for iv in ivs:
            tile[iv.begin() : iv.end()] = t
    per_batch = x.numElements() // params.batchSize
    part = np.arange(params.batchSize) // plan.blocks[1]
    users = plan.tiles[0, :, 0, 0, :, 0]  # [batch part, Co part]
    on = tile.reshape(params.batchSize, per_batch)
    ok = (on[:, :, None] == users[part][:, None, :]).any(-1)
    assert ok.all()


def test_weights_are_mapped_in_256_byte_grains():
    graph, params, plan, opts = _wu_graph()
    w = poplin.createWeights(graph, params, "w", opts)  # [G, Co, Ci, *K]
    g, co, ci = (params.numConvGroups, params.outputChannelsPerConvGroup,
                 params.inputChannelsPerConvGroup)  # fmt: skip
    ocg, icg = math.gcd(co, plan.out_chans_per_group), math.gcd(ci, plan.in_chans_per_group)
    kernel = list(params.kernelShape)
    # the memory order [G][Co/ocg][Ci/icg][*K][ocg][icg] of Poplibs' createWeightsImpl
    mem = w.reshape([g, co // ocg, ocg, ci // icg, icg, *kernel])
    mem = mem.dimShuffle([0, 1, 3, *range(5, 5 + len(kernel)), 2, 4])
    lengths = np.array([iv.size() for ivs in graph.getTileMapping(mem) for iv in ivs])
    assert lengths.min() * 4 >= 256
    assert (lengths % (ocg * icg) == 0).all()


def test_spread_by_use_cuts_blocks_in_whole_grains():
    # two interleaved blocks of 40 and 24 elements, grain 4, at least 8 per tile
    block = np.repeat(np.array([0, 1, 0, 1, 0, 0]), [8, 8, 8, 16, 16, 8])
    users = np.array([[10, 11, 12, 13, 14, 15, 16], [20, 21, 22, 23, 24, 25, 26]])
    tiles = spread_by_use(block, users, 4, 8)
    # block 0: 40 elements -> 5 chunks of 2 grains; block 1: 24 -> 3 chunks of 2 grains
    for blk, n in [(0, 40), (1, 24)]:
        got = tiles[block == blk]
        assert (got == np.repeat(users[blk, : n // 8], 8)).all()
