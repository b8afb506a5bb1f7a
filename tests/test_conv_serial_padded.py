"""Serial splits whose count does not divide the channel grains, run as Poplibs runs them
(graphcore/poplibs 7eac0f26, ``lib/poplin/Convolution.cpp``: ``getOutChansPerSerialSplit``,
``getInChansPerSerialSplit`` and ``convolutionImpl``): every iteration but the last has
the grains shared out and rounded up, the loop runs those, and the last runs after it on
the same slices (its channels copied into their first channels, an input-channel split's
padding zeroed) with the same convolution program. The products are HALF matMuls whose
plan ipusim takes from the restatement of Poplibs' planner (:mod:`.poplibs_plans`),
checked against numpy; the channels per iteration against the formula worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_serial import co_ranges
from poplar_api.poplin.serial_estimates import serial_chans
from tests.test_poplin import run_product

RNG = np.random.default_rng(2811)


@pytest.mark.parametrize(
    ("chans", "serial", "grain", "want"),
    [
        (1000, 3, 8, 336),  # 125 grains, 42 an iteration: 336 + 336 + 328
        (40, 2, 8, 24),  # 5 grains, 3 an iteration: 24 + 16 (not 20 + 20)
        (2000, 4, 16, 512),  # 125 grains, 32 an iteration: 3 x 512 + 464
        (720, 6, 16, 128),  # 45 grains, 8 an iteration: 5 x 128 + 80
        (1000, 5, 8, 200),  # 125 grains, 25 an iteration: no padding
        (6, 2, 8, 6),  # fewer channels than a grain: one grain of 6
    ],
)
def test_channels_of_an_iteration_are_whole_grains_rounded_up(chans, serial, grain, want):
    assert serial_chans(chans, serial, grain) == want


#: (m, k, n, availableMemoryProportion, kind) on the tiny target (8 tiles of 64 KiB),
#: each planned by the model with a last iteration that is padded: the swapped product's
#: 100 output channels in 2 iterations of 56 (44 in the last); 40 in 2 of 24 (16: a loop
#: of one iteration); 2000 input channels in 4 of 512 (464); 720 in 6 of 128 (80)
PADDED = [
    (100, 48, 600, None, "out"),
    (40, 48, 1320, None, "out"),
    (24, 2000, 24, "0.2", "in"),
    (40, 720, 64, "0.2", "in"),
]


def _opts(proportion):
    return None if proportion is None else {"availableMemoryProportion": proportion}


@pytest.mark.parametrize(("m", "k", "n", "proportion", "kind"), PADDED)
def test_padded_serial_plans_match_numpy(m, k, n, proportion, kind) -> None:
    opts = _opts(proportion)
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), (1, m, k, n),
                          HALF, HALF, opts)  # fmt: skip
    serial = plan.in_serial if kind == "in" else plan.serial
    chans = k if kind == "in" else (m if plan.swapped else n)
    per = plan.serial_chans
    assert serial > 1 and per and (serial - 1) * per < chans < serial * per
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)
    # operands laid out as the plan wants (the last slice's too)
    c, engine, _ = run_product("tiny", a, b, HALF, opts=opts, layout="created")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=5e-2)
    records = engine.getTrace().records
    names = [r.name for r in records]
    # the loop runs serial - 1 iterations, the last one runs after it with the same
    # convolution: serial runs of one compute set, each as long as the others
    convolve = [r for r in records if r.name == "mm/serial/Convolve"]
    assert len(convolve) == serial
    assert len({tuple(r.tile_cycles.tolist()) for r in convolve}) == 1
    assert names.count("mm/weightsSerialSlice/slice") == serial - 1
    assert names.count("mm/loopIncrement") == serial - 1
    # the last iteration's weights are copied into the slice once (each iteration's
    # weights are spread over the users of its blocks, as Poplibs maps each serial
    # slice: a shorter last slice partly lies elsewhere and is exchanged)
    assert names.count("mm/weightsSerialLastSlice/OnTileCopy") == 1
    if kind == "in":
        # the inputs too, the padding of the smaller slice zeroed (a compute set of
        # the slice's name), and the last partials are added to the accumulator as
        # every iteration's after the first (serial - 1 additions)
        assert (
            names.count("mm/inputSerialLastSlice/OnTileCopy")
            + names.count("mm/inputSerialLastSlice/Exchange")
            >= 1
        )
        assert (
            names.count("mm/weightsSerialLastSlice") + names.count("mm/inputSerialLastSlice") == 1
        )
        assert names.count("mm/serialInChanAccum") == serial - 1
    else:  # the last iteration's outputs are copied where the output lies
        last = [x for x in names if x.startswith("mm/serialUpdateLastSlice")]
        assert last == ["mm/serialUpdateLastSlice/OnTileCopy"]
        assert names.count("mm/serialUpdate/update") == serial - 1


def test_output_channel_blocks_cover_the_channels_once() -> None:
    """The weights' layout of a padded output-channel split: the blocks of every
    iteration, the last one's cut at the channels, cover each channel once."""
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()),
                          (1, 100, 48, 600), HALF, HALF)  # fmt: skip
    assert plan.swapped and plan.serial == 2 and plan.serial_chans == 56
    seen = np.zeros(100, np.int64)
    for part, lo, hi in co_ranges(plan, 100):
        assert 0 <= part < plan.parts[-2] and lo < hi
        seen[lo:hi] += 1
    assert (seen == 1).all()
