"""Inputs broadcast before a serial loop over output channels (Poplibs'
``broadcastInputBeforeLoop``, graphcore/poplibs 7eac0f26: ``convolutionImpl`` copies each
tile's input slice into a tensor on that tile, ``tileLevelActsRearranged`` by
``tileLevelActsCopy``, which ``ConvProgramTree::lower`` moves before the loop, and the
planner counts the inputs' exchange once). HALF matMuls whose plan ipusim takes from the
restatement of Poplibs' planner, against numpy; the trace and the exchange estimate
against the same plan without the broadcast and a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin import poplibs_plans
from poplar_api.poplin.conv_planner import PHASE_OVERHEAD_CYCLES
from tests.test_poplin import run_product

RNG = np.random.default_rng(2812)

#: (m, k, n) on the tiny target (8 tiles of 64 KiB) whose model plans broadcast the
#: inputs: 136 x 128 x 200 swapped, 3 output-channel passes of 48 of 136 channels (the
#: last padded), field 4 x Co 2; 100 x 392 x 72 unswapped, 2 passes of 40 of 72, field 2
#: x Co 1, the input channels split 4 ways (a reduction each pass)
PRODUCTS = [(136, 128, 200), (100, 392, 72)]


def _no_broadcast(monkeypatch) -> None:
    """The model's plans as they are but with the inputs exchanged in every pass (so
    costed and run)."""
    model = poplibs_plans.model_plan

    def plain(*args, **kwargs):
        found = model(*args, **kwargs)
        return None if found is None else {**found, "broadcast": False}

    monkeypatch.setattr(poplibs_plans, "model_plan", plain)


def run_half(a: np.ndarray, b: np.ndarray):
    """``a @ b`` as a HALF matMul on the tiny target, its operands made by
    ``createMatMulInputLHS``/``RHS`` (so planned as the model plans them): the result
    and the engine that ran it."""
    c, engine, _ = run_product("tiny", a, b, HALF, layout="created")
    return c, engine


def _run(m: int, k: int, n: int):
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)
    c, engine = run_half(a, b)
    return c, a.astype(np.float64) @ b.astype(np.float64), engine.getTrace().records


@pytest.mark.parametrize(("m", "k", "n"), PRODUCTS)
def test_broadcast_plans_match_numpy(m, k, n, monkeypatch) -> None:
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), (1, m, k, n),
                          HALF, HALF)  # fmt: skip
    assert plan.broadcast and plan.serial > 1
    c, ref, records = _run(m, k, n)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=5e-2)
    names = [r.name for r in records]
    # the inputs are copied to their tiles once, before the loop (its counter zeroed
    # after), and not exchanged again
    copies = [i for i, x in enumerate(names) if x.startswith("mm/tileLevelActsCopy")]
    assert copies and max(copies) < names.index("mm/loopCounter/OnTileCopy")
    # each pass's exchange before the partial sums receives the weights alone: less than
    # the same plan's with the inputs exchanged in every pass where several tiles (the
    # output-channel parts) read each input; with one part (100 x 392 x 72) the inputs
    # laid out for the plan are where they are read, and nothing changes
    with_copy = [r for r in records if r.name == "mm/serial/Convolve/ExchangeIn"]
    assert len(with_copy) == plan.serial
    _no_broadcast(monkeypatch)
    c2, ref2, plain = _run(m, k, n)
    np.testing.assert_allclose(c2.astype(np.float64), ref2, rtol=2e-3, atol=5e-2)
    assert not any(r.name.startswith("mm/tileLevelActsCopy") for r in plain)
    without = [r for r in plain if r.name == "mm/serial/Convolve/ExchangeIn"]
    assert len(without) == plan.serial
    for x, y in zip(with_copy, without, strict=True):
        if plan.parts[-2] > 1:
            assert int(x.tile_cycles.max()) < int(y.tile_cycles.max())
        else:
            assert x.tile_cycles.tolist() == y.tile_cycles.tolist()


def test_the_exchange_estimate_counts_the_inputs_once(monkeypatch) -> None:
    """136 x 128 x 200, swapped: field 200, 128 input channels, blocks of 50 positions x
    24 output channels x 128 input channels over field 4 x Co 2. A tile receives the
    inputs of its block less the eighth of the inputs it holds, ``2 (50 x 128 - 128 x 200
    / 8)`` = 6,400 bytes, once; and its weights less the quarter it holds, ``2 (24 x 128 -
    24 x 128 / 4)`` = 4,608 bytes, in each of the 3 passes; each exchange ``ceil(16 bytes /
    round(16 E))`` cycles plus the phase's overhead."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    plan = poplin.getPlan(graph, (1, 136, 128, 200), HALF, HALF)
    assert plan.parts[2:] == (4, 2, 1) and plan.blocks[2:] == (50, 24, 128)
    assert plan.broadcast and plan.serial == 3
    scaled = round(16 * float(graph.getTarget().getExchangeBytesPerCycle()))

    def cycles(nbytes: int) -> int:
        return math.ceil(16 * nbytes / scaled) + PHASE_OVERHEAD_CYCLES

    assert plan.cost["exchange"] == cycles(6400) + 3 * cycles(4608)
    _no_broadcast(monkeypatch)
    plain = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()),
                           (1, 136, 128, 200), HALF, HALF)  # fmt: skip
    assert not plain.broadcast and plain.cost["exchange"] == 3 * cycles(6400 + 4608)
