"""Poplibs' cost of the plain AMP plans of a 2-D convolution
(:mod:`poplar_api.poplin.poplibs_conv2d_model`): one partition's terms written out here from
``addEstimates``' formulas (graphcore/poplibs 7eac0f26, ``ConvModel.cpp``), the partition
variables ``constructModel`` allows, and the family's plans of docs/planner.md rows 16
and 18."""

from __future__ import annotations

import math

import numpy as np
import pytest
from resnet_rows_common import ROW16, ROW18, preset_target

from poplar_api import FLOAT, HALF, poplin
from poplar_api.poplin.poplibs_amp_estimates import nx1_partial_cycles
from poplar_api.poplin.poplibs_conv2d_model import (
    SPLITS,
    _partitions,
    describe_family,
    family_costs,
    family_plan,
    slic_floors,
)


def _one(**split: int) -> dict[str, np.ndarray]:
    return {k: np.array([split[k]]) for k in SPLITS}


def _row16_tile_partials(filter_height: int) -> int:
    """Poplibs' ``ConvPartialnx1`` estimate of a tile of row 16 split field 14 . 3: a
    4 x 19 field of one image, the 3 x 3 kernel, 8 output channels on 8 units (HALF in,
    FLOAT partials), at a conv-unit weight height of ``filter_height``."""
    return nx1_partial_cycles(
        batch=1, field_shape=(4, 19), kernel_shape=(3, 3), filter_height=filter_height,
        conv_groups=1, in_groups=1, out_groups=1, out_chans_per_group=8, num_conv_units=8,
        weight_bytes_per_conv_unit=32, coeff_load_bytes_per_cycle=8, workers=6,
        float_activations=False, float_partials=True,
    )  # fmt: skip


def test_one_partition_written_out() -> None:
    """Row 16 on Mk2 split B 1 x field 14 . 3 x kernel 1 x Co 8 x Ci 4 (1344 tiles, ipusim's
    own partition): a tile's output is 4 x 19 positions of 8 channels from 16 input
    channels. Inputs: the window with its halo, (4 + 2) x (19 + 2) x 16, less the eighth
    already there (the output-channel split), 2 bytes at 8 a cycle (4, doubled: the split
    is even and the supertile's 2 tiles share the bus). Weights 3 x 3 x 16 x 8 less a 42nd
    (the field split), at 4 bytes a cycle. Partial sums 4 x 19 x 8 FLOAT, one byte-cycle per
    byte / 4. The output regroup of the 8-channel partials to 16: ceil(3136 x 64 / 1344) =
    150 elements, 300 bytes at 5 / 4 of 8 bytes a cycle (``getScaleFactorForTransform``)."""
    t = preset_target("mk2-ipumodel")
    split = _one(**{"batchSplit": 1, "fieldSplit[0]": 14, "fieldSplit[1]": 3,
                    "kernelSplit[0]": 1, "outChanSplit.parallel": 8,
                    "inChanSplit.parallel": 4})  # fmt: skip
    c = family_costs(ROW16, t, "AMP", (16, 8), split)
    inputs = 6 * 21 * 16
    assert int(c["input exchange"][0]) == math.ceil((inputs - inputs // 8) * 2 / 8) == 441
    weights = 3 * 3 * 16 * 8
    assert int(c["weight exchange"][0]) == math.ceil((weights - weights // 42) * 2 / 4) == 563
    assert int(c["partials exchange"][0]) == 4 * 19 * 8 == 608
    assert int(c["transform"][0]) == math.ceil(-(-3136 * 64 // 1344) * 2 * 5 / (8 * 4)) == 47
    assert int(c["compute"][0]) == _row16_tile_partials(filter_height=1)
    terms = ("input exchange", "weight exchange", "partials exchange", "transform", "compute",
             "reduce")  # fmt: skip
    assert int(c["cycles"][0]) == sum(int(c[k][0]) for k in terms)
    # temporary bytes: the tile's inputs and weights in HALF, its partials in FLOAT (the
    # reduction's 152 x 4 FLOAT partials are fewer)
    assert int(c["bytes"][0]) == 2 * inputs + 2 * weights + 4 * 608 == 8_768


def test_a_kernel_split_shrinks_the_window_and_the_weights() -> None:
    """With the outer kernel dimension split 3 ways a tile holds one kernel row: its input
    window is the output rows alone (no halo in that dimension) and its weights a third;
    its partial sums are as many (all of its outputs, whatever is split)."""
    t = preset_target("mk2-ipumodel")
    base = {"batchSplit": 1, "fieldSplit[0]": 10, "fieldSplit[1]": 3, "outChanSplit.parallel": 8,
            "inChanSplit.parallel": 2}  # fmt: skip
    whole = family_costs(ROW16, t, "AMP", (16, 8), _one(**base, **{"kernelSplit[0]": 1}))
    split = family_costs(ROW16, t, "AMP", (16, 8), _one(**base, **{"kernelSplit[0]": 3}))
    ht, wt = -(-56 // 10), -(-56 // 3)
    assert int(split["input exchange"][0]) == math.ceil(
        (ht * (wt + 2) * 32 - ht * (wt + 2) * 32 // 8) * 2 / 8
    )
    assert int(whole["input exchange"][0]) == math.ceil(
        ((ht + 2) * (wt + 2) * 32 - (ht + 2) * (wt + 2) * 32 // 8) * 2 / 8
    )
    assert int(split["weight exchange"][0]) == math.ceil((96 * 8 - 96 * 8 // 30) * 2 / 4)
    for c in (split, whole):
        assert int(c["partials exchange"][0]) == ht * wt * 8


def test_the_partition_variables() -> None:
    """``constructModel``: the inner kernel dimension is not split, every split is the least
    giving its part, and the parallel splits' product is at most the tiles."""
    t = preset_target("mk2-ipumodel")
    s = _partitions(ROW16, t, "AMP", (16, 8))
    assert set(np.unique(s["kernelSplit[0]"]).tolist()) == {1, 2, 3}
    assert set(np.unique(s["outChanSplit.parallel"]).tolist()) == {1, 2, 3, 4, 8}
    assert set(np.unique(s["inChanSplit.parallel"]).tolist()) == {1, 2, 4}
    assert 9 not in set(s["fieldSplit[0]"].tolist())  # (ceil(56 / 9) = 7 = ceil(56 / 8))
    assert (np.prod([s[k] for k in SPLITS], axis=0) <= 1472).all()


def test_the_partitions_are_enumerated_once_per_grains() -> None:
    """Two groupings of the same channel grains share one enumeration (the grid is kept by
    what it depends on), each call gets a dict of its own over read-only arrays, the same
    partitions in the order of one enumerated here with itertools (``np.meshgrid``'s, which
    decides between equal costs), and ``shared_plans.clear`` forgets the grids and the
    priced 1x1 tiles."""
    import itertools

    from poplar_api.poplin import shared_plans
    from poplar_api.poplin.poplibs_conv2d_model import _partition_grid
    from poplar_api.poplin.poplibs_float_candidates import _float_1x1

    t = preset_target("mk2-ipumodel")
    params = poplin.ConvParams(FLOAT, 2, [6, 5], [3, 3], 8, 16)  # (4 x 3 outputs)
    shared_plans.clear()
    a = _partitions(params, t, "AMP", (8, 16))  # (1 input and 1 output grain)
    b = _partitions(params, t, "AMP", (4, 8))  # (2 and 2: another grid)
    c = _partitions(params, t, "AMP", (16, 16))  # (1 and 1: the first one's)
    assert _partition_grid.cache_info().currsize == 2 and c is not a
    assert all(c[k] is a[k] and not a[k].flags.writeable for k in SPLITS)
    least = {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 4]}  # (least splits of n)
    for got, grains in ((a, (1, 1)), (b, (2, 2))):
        want = [p for p in itertools.product(least[2], least[4], least[3], least[3],
                                             least[grains[1]], least[grains[0]])
                if math.prod(p) <= t.getNumTiles()]  # fmt: skip
        assert list(zip(*(got[k].tolist() for k in SPLITS), strict=True)) == want  # (in order)
    _float_1x1(64, 8, 8, 4, 8, 8, 6)  # (a FLOAT ConvPartial1x1Out tile priced)
    shared_plans.clear()
    assert _partition_grid.cache_info().currsize == 0
    assert _float_1x1.cache_info().currsize == 0


@pytest.mark.parametrize(
    "params,preset,text",
    [
        (
            ROW16,
            "mk2-ipumodel",
            "B 1 \N{MULTIPLICATION SIGN} field 10\N{MIDDLE DOT}3 \N{MULTIPLICATION SIGN} kernel 3 "
            "\N{MULTIPLICATION SIGN} Co 8 \N{MULTIPLICATION SIGN} Ci 2, AMP 16 / 8, 8,249 cycles "
            "/ 13,248 B",
        ),
        (
            ROW18,
            "mk1-ipumodel",
            "B 4 \N{MULTIPLICATION SIGN} field 4\N{MIDDLE DOT}1 \N{MULTIPLICATION SIGN} kernel 1 "
            "\N{MULTIPLICATION SIGN} Co 16 \N{MULTIPLICATION SIGN} Ci 4, AMP 16 / 8, 30,451 "
            "cycles / 27,008 B",
        ),
    ],
    ids=["row16", "row18"],
)
def test_the_family_plans_of_the_table(params, preset, text) -> None:
    plan = family_plan(params, preset_target(preset))
    assert plan["ties"] == 1
    assert describe_family(plan) == text


def test_not_covered_is_named() -> None:
    t = preset_target("mk2-ipumodel")
    with pytest.raises(ValueError, match="float/float \\(HALF/HALF needed"):
        family_plan(poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 64, 64), t)
    with pytest.raises(ValueError, match="dilation, stride"):
        family_plan(poplin.ConvParams(HALF, 1, [8, 8], [3, 3], 64, 64, stride=[2, 2]), t)
    with pytest.raises(ValueError, match="AMP grouped \\(2, 8\\)"):
        family_costs(ROW16, t, "AMP", (2, 8), _one(**dict.fromkeys(SPLITS, 1)))


def test_slic_floors_of_row_16() -> None:
    """SLIC's floors for docs/planner.md row 16 (Mk2, 1472 tiles, 166 x 166 x 64 x 64 real
    MACs): 2 or 4 groups of 2 or 1 channels at 8 real MACs a cycle at most; an expansion
    multiplies the 64 input channels by 3 at least, 48 grains of 4, each output's partial
    sum in every one of them exchanged in FLOAT (4 bytes at 4 a cycle), plus the MACs at
    32 a cycle; a serial split of 2 input channels' halves costs twice the least one-pass
    terms (all but the reduction) of the 32-channel convolution; no swapped form."""
    t = preset_target("mk2-ipumodel")
    macs = 166 * 166 * 64 * 64
    floors = slic_floors(ROW16, t)
    assert floors["2 or 4 groups"] == macs // (8 * 1472) == 9_584
    assert floors["expanded"] == macs // 32 // 1472 + -(-3136 * 64 * 48 // 1472) == 8_941
    assert floors["swapped"] is None
    assert floors["one pass"] == family_plan(ROW16, t, "SLIC")["cost"][0] == 13_270
    half = poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 32, 64, paddingLower=[1, 1],
                             paddingUpper=[1, 1])  # fmt: skip
    c = family_costs(half, t, "SLIC", (4, 4), _partitions(half, t, "SLIC", (4, 4)))
    keys = ("input exchange", "weight exchange", "partials exchange", "transform", "padding",
            "compute")  # fmt: skip
    assert floors["serial"] <= 2 * int(sum(c[k] for k in keys).min())
    assert floors["serial"] == 9_398
    # each above the plain AMP family's best, 8,249: SLIC is not Poplibs' pick
    assert min(v for v in floors.values() if v is not None) > 8_249


def test_a_slic_serial_count_need_not_divide_the_grains() -> None:
    """A serial split's count need not divide the channel grains (``ceildivConstrainDivisor``
    allows every count that is the least giving its grains an iteration, the last
    iteration padded): 28 output channels are 7 grains of 4, and 2 iterations of 4 grains
    (16 channels) are a plan, so SLIC's serial floor is at most twice the one-pass terms
    (but the reduction and the inputs' exchange) of the 16-output-channel convolution."""
    t = preset_target("mk2-ipumodel")
    params = poplin.ConvParams(HALF, 1, [14, 14], [3, 3], 28, 28, paddingLower=[1, 1],
                               paddingUpper=[1, 1])  # fmt: skip
    sub = poplin.ConvParams(HALF, 1, [14, 14], [3, 3], 28, 16, paddingLower=[1, 1],
                            paddingUpper=[1, 1])  # fmt: skip
    c = family_costs(sub, t, "SLIC", (4, 4), _partitions(sub, t, "SLIC", (4, 4)))
    keys = ("weight exchange", "partials exchange", "transform", "padding", "compute")
    assert slic_floors(params, t)["serial"] <= 2 * int(sum(c[k] for k in keys).min())


def test_a_narrower_input_grouping_pads_the_kernel_rows() -> None:
    """AMP 8 / 8 (a conv-unit weight height of 2) on row 16 split B 1 x field 14 . 3 x Co 8
    x Ci 8: the tile's 3 kernel rows padded to 4 (``padKernelSpatialDim``: (2 - 3 mod 2) mod
    2 = 1 row), 3 x 8 x 8 kernel zeros at 4 bytes a cycle and one more input row of 19 x 8
    zeros at 8 (the inputs' doubled rate); the partial sums ``ConvPartialnx1`` of height 2."""
    t = preset_target("mk2-ipumodel")
    split = _one(**{"batchSplit": 1, "fieldSplit[0]": 14, "fieldSplit[1]": 3,
                    "kernelSplit[0]": 1, "outChanSplit.parallel": 8,
                    "inChanSplit.parallel": 8})  # fmt: skip
    c = family_costs(ROW16, t, "AMP", (8, 8), split)
    assert int(c["padding"][0]) == 3 * 8 * 8 * 2 // 4 + 19 * 8 * 2 // 8 == 134
    assert int(c["compute"][0]) == _row16_tile_partials(filter_height=2)


@pytest.mark.parametrize("seed", range(6))
def test_the_partition_grid_is_every_split_within_the_tiles_in_row_major_order(seed) -> None:
    """The compiled enumeration of the grid against itertools over the least splits of each
    size (a split ``s`` of ``n`` kept when ``ceil(n / s)`` differs from ``ceil(n / (s - 1))``),
    for random sizes on 16 and 1,472 tiles, with and without SLIC's whole channels."""
    import itertools

    from poplar_api.poplin.poplibs_conv2d_model import _partition_grid

    rng = np.random.default_rng(seed)
    for tiles in (16, 1472):
        sizes = [int(x) for x in rng.integers(1, 70, 6)]
        for slic in (False, True):
            least = [[s for s in range(1, min(n, tiles) + 1)
                      if s == 1 or -(-n // s) != -(-n // (s - 1))] for n in sizes]  # fmt: skip
            if slic:
                least[4], least[5] = least[4][-1:], least[5][-1:]
            want = [p for p in itertools.product(*least) if math.prod(p) <= tiles]
            grid = _partition_grid(*sizes, tiles, slic)
            got = list(zip(*(grid[k].tolist() for k in SPLITS), strict=True))
            assert got == want
            assert all(grid[k].dtype == np.int64 and not grid[k].flags.writeable
                       for k in SPLITS)  # fmt: skip
