"""Lower bounds of Poplibs' AMP plans of a 2-D convolution by transformed form
(:mod:`poplar_api.poplin.poplibs_conv2d_forms`): the expanded convolution, the swapped
forms' and the expansion's rearrangement floors written out here from docs/planner.md's
formulas (graphcore/poplibs 7eac0f26), and rows 16 and 18: every other form above the
plain family's best (with the slow tests: test_conv_plan_table checks the same claims of
the table)."""

from __future__ import annotations

import pytest
from resnet_rows_common import ROW16, ROW18, preset_target

from poplar_api import HALF, poplin
from poplar_api.poplin.poplibs_conv2d_forms import (
    _rearrange_floor,
    _serial_floor,
    _swapped_floor,
    amp_floors,
    expanded_params,
)
from poplar_api.poplin.poplibs_conv2d_model import family_plan
from poplar_api.poplin.poplibs_matmul_model import poplibs_matmul_plan


def test_expanded_params() -> None:
    """expandDim of dimension 0: its input becomes the 28 outputs, its kernel one wide, no
    padding, the channels times 3; the batch of 4 then flattens into it."""
    p = expanded_params(ROW18, 0)
    assert (p.batchSize, list(p.inputFieldShape), list(p.kernelShape)) == (1, [112, 28], [1, 3])
    assert (p.inputChannelsPerConvGroup, p.outputChannelsPerConvGroup) == (384, 128)
    assert list(p.inputTransform.paddingLower) == [0, 1]
    q = expanded_params(ROW18, 1)
    assert (list(q.inputFieldShape), list(q.kernelShape)) == ([28, 112], [3, 1])
    assert list(q.getOutputFieldShape()) == [28, 112]


def test_swapped_floor_written_out() -> None:
    """Row 16 swapped, one dimension flattened into the output channels: 64 x 56 output
    positions (the batch is the 64 output channels), the other dimension's 56-wide kernel,
    64 x 3 input channels in 12 groups of 16, 56 output channels in 4 passes of 16, 4 cycles
    each over 1472 tiles; none flattened: 64 x 3136 positions, 3136 kernel positions, 4
    input groups, one output pass."""
    one = 4 * (64 * 56) * 56 * 12 * 4 // 1472
    none = 4 * (64 * 3136) * 3136 * 4 * 1 // 1472
    assert _swapped_floor(ROW16, preset_target("mk2-ipumodel")) == min(one, none) == one == 26_178


def test_rearrangement_floor_written_out() -> None:
    """Row 16 with both dimensions expanded: 3136 x 576 inputs and 576 x 64 weights in HALF
    over at most 1472 tiles, copied at 2 bytes a cycle times 4 / 5 and exchanged at 4."""
    both = poplin.ConvParams(HALF, 1, [1, 3136], [1, 1], 576, 64)
    cycles = 0
    for elements in (3136 * 576, 576 * 64):
        per_tile = -(-elements * 2 // 1472)
        cycles += -(-per_tile * 5 // 8) + -(-per_tile // 4)
    assert _rearrange_floor(both, preset_target("mk2-ipumodel"), 3136 * 576, 576 * 64) == cycles
    assert cycles == 1_535 + 614 + 32 + 13


@pytest.mark.slow
def test_row_16_every_other_form_costs_more() -> None:
    """docs/planner.md row 16: the plain family's best, 8,249 cycles, is below every other
    AMP form's floor; the both-expanded product (without its rearrangement, 7,926) plus the
    rearrangement's floor, and the swapped product costed whole."""
    t = preset_target("mk2-ipumodel")
    best = family_plan(ROW16, t)["cost"][0]
    floors = amp_floors(ROW16, t, best)
    assert best == 8_249 and min(floors.values()) > best
    product = (1, 3136, 576, 64)
    assert floors["swapped, flattened"] == poplibs_matmul_plan(
        product, t, "NONE", swaps=(True,), release="7eac0f26"
    )["cost"][0] == 12_323  # fmt: skip
    unswapped = poplibs_matmul_plan(product, t, "NONE", swaps=(False,), release="7eac0f26")
    assert floors["expanded both"] == unswapped["cost"][0] + 2_194 == 10_120
    assert floors["swapped, other"] == 26_178


@pytest.mark.slow
def test_row_18_every_other_form_costs_more() -> None:
    """docs/planner.md row 18: every other AMP form's floor passes the plain family's best
    (30,451, ipusim's partition); the output-channel serial plans of the form expanded in
    dimension 0 only once their inputs' exchange is counted (before the loop, once)."""
    t = preset_target("mk1-ipumodel")
    best = family_plan(ROW18, t)["cost"][0]
    floors = amp_floors(ROW18, t, best)
    assert best == 30_451 and min(floors.values()) > best
    assert floors["expanded both"] == 35_743 and floors["swapped, flattened"] == 37_122


def test_a_serial_split_over_output_channels_rearranges_the_inputs_once() -> None:
    """An expanded form's inputs are rearranged once before an output-channel serial loop
    when ``broadcastInputBeforeLoop`` moves them there (``addEstimates``, graphcore/poplibs
    7eac0f26 ConvModel.cpp: the inputs' copy and exchange cycles out of the loop), the
    weights every iteration. With 4 input channels (one grain in every AMP grouping, so no
    input-channel serial split) every serial plan splits the 32 output channels: 1,000
    cycles of the inputs' rearrangement raise the floor by 1,000, not by S times it."""
    t = preset_target("mk2-ipumodel")
    p = poplin.ConvParams(HALF, 1, [14, 14], [3, 3], 4, 32, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    base = _serial_floor(p, t, 1e9)
    assert _serial_floor(p, t, 1e9, (1_000, 0)) == base + 1_000
    assert _serial_floor(p, t, 1e9, (0, 1_000)) >= base + 2 * 1_000


@pytest.mark.slow
def test_the_margins_docs_planner_states() -> None:
    """docs/planner.md: the floors of rows 16 and 18 computed to a higher limit (each exact
    below it), and so the margins of the plain plans (8,249 and 30,451)."""
    t16, t18 = preset_target("mk2-ipumodel"), preset_target("mk1-ipumodel")
    f16 = amp_floors(ROW16, t16, 12_000)
    assert (f16["serial"], f16["expanded 0"], f16["expanded 0 serial"], f16["expanded 1"],
            f16["expanded 1 serial"]) == (8_792, 9_011, 10_316, 9_249, 10_240)  # fmt: skip
    f18 = amp_floors(ROW18, t18, 40_000)
    assert (f18["serial"], f18["expanded 0"], f18["expanded 0 serial"], f18["expanded 1"],
            f18["expanded 1 serial"]) == (30_936, 30_550, 31_471, 34_505, 35_617)  # fmt: skip
    assert min(f16.values()) - 8_249 == 543 and min(f18.values()) - 30_451 == 99
