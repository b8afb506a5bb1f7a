"""poplin::ConvPartial1x1Out (AMP 1x1 partials): Poplibs estimator, values, PF workload.

Expected cycle counts are written out here from the Poplibs formula
(graphcore/poplibs@7eac0f26, lib/poplin/PerformanceEstimation.hpp,
getConvPartial1x1SupervisorCycleEstimate) for the cases tested, without calling the
project's estimator: closed forms per case, and a few totals computed by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import vertex_type
from poplar_api.errors import CodeletError
from poplar_api.poplin.amp import (
    add_conv_partial_1x1_out,
    conv_partial_1x1_cycles,
    conv_partial_1x1_out_vertex,
    decode_worklist,
    make_worklist,
)

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(77)
W = 6


def even(n: int) -> list[int]:
    return [n // W + (1 if w < n % W else 0) for w in range(W)]


def estimate(n: int, units: int, **kwargs) -> int:
    """The project's estimate of ``n`` rows spread evenly over the workers on ``units``
    conv units: one input group, one pass (``units`` output channels), 32 weight bytes a
    unit loaded 16 bytes a cycle, unless ``kwargs`` say otherwise."""
    args = dict(out_chans_per_group=units, weight_bytes_per_conv_unit=32, num_conv_units=units,
                coeff_load_bytes_per_cycle=16, num_worker_contexts=W)  # fmt: skip
    return conv_partial_1x1_cycles(even(n), **(args | kwargs))


# Worker cycles of one pass, retention savings already subtracted, per code path.
def worker_half_common(n: int, zero: bool) -> int:
    """Half acts with 16 units or float partials: table 21/32/41 (zeroing) or
    22/33/42, then 37|38 + 4 (n - 3); minus the 7-cycle retention saving."""
    if n < 3:
        return (20, 31, 40)[n] + (1 if zero else 2) - 7
    return (37 if zero else 38) + 4 * (n - 3) - 7


def worker_float(n: int, zero: bool) -> int:
    """Float acts, float partials, 8 units: zeroing cost 4 per element, core 8, no saving."""
    z = int(zero)
    if n == 0:
        return 24
    if n == 1:
        return 47 + 6 * z
    if n == 2:
        return 46 + 10 * z
    return 46 + (2 + 4 * n) * z + 8 * (n - 3)


def inner(worker, elems: list[int], zero: bool) -> int:
    per = [W * worker(n, zero) for n in elems]
    return max(max(per), min(per) + 14)


def test_pf_case_by_hand():
    # N=16: rows 3,3,3,3,2,2; zeroing pass: 3 rows 30, 2 rows 34 -> 6*34 = 204.
    # supervisor: 50 + 6*7 + (12+1) + (10+1) + (19-1) + (7 + 16*32/16) = 173.
    assert inner(worker_half_common, even(16), True) == 204
    assert estimate(16, 16, float_activations=False, float_partials=False) == 173 + 204 == 377


@pytest.mark.parametrize("n", [16, 64, 256, 1000, 2048])
def test_half_half_16_units(n):
    expected = 173 + inner(worker_half_common, even(n), True)
    got = estimate(n, 16, float_activations=False, float_partials=False)
    assert got == expected
    if n % W == 0:  # every worker n/W rows: 173 + 6 (30 + 4 (n/W - 3))
        assert got == 173 + 6 * (18 + 4 * (n // W))


@pytest.mark.parametrize("n", [6, 48, 300])
def test_half_float_8_units(n):
    # float partials -> common path, retention (7, 3); 8 units x 32 bytes / 16 = 16 loads.
    # 50 + 6*7 + 13 + 11 + 18 + 7 + 16 = 157.
    expected = 157 + inner(worker_half_common, even(n), True)
    assert estimate(n, 8, float_activations=False, float_partials=True) == expected


@pytest.mark.parametrize("n", [7, 60, 129])
def test_float_float_8_units(n):
    # no retention saving; 50 + 0 + 13 + 11 + 18 + 7 + 16 loads = 115.
    expected = 115 + inner(worker_float, even(n), True)
    assert estimate(n, 8, float_activations=True, float_partials=True) == expected


def test_two_input_groups_two_out_passes_and_64bit_loads():
    # half/half 16 units, ig=2, og=1, outChans 32 (2 passes), 8 bytes/cycle -> 64 loads.
    # 50 + 6 (7 + 3) + (13 + (15 - 1 + 1 + (19 + 2 (6 + 64 + I0))) + (11 + 18 + 2 (7 + 64 + I1)))
    n = 30
    i0 = inner(worker_half_common, even(n), False)
    i1 = inner(worker_half_common, even(n), True)
    expected = 50 + 60 + 13 + 15 + 19 + 2 * (70 + i0) + 29 + 2 * (71 + i1)
    got = estimate(n, 16, float_activations=False, float_partials=False, num_in_groups=2,
                   out_chans_per_group=32, coeff_load_bytes_per_cycle=8)  # fmt: skip
    assert got == expected


def test_vertex_estimate_uses_sizes_and_target():
    target = IPUModel("tiny").createDevice().getTarget()
    cls = conv_partial_1x1_out_vertex(HALF, HALF)
    assert cls.typeName == "poplin::ConvPartial1x1Out<half,half,true,true,16,4,false>"
    sizes = {"in": [64 * 16], "weights": [256], "out": [64 * 16], "worklists": 18}
    assert vertex_type(cls).estimate(sizes, target) == 173 + inner(
        worker_half_common, even(64), True
    )
    name = conv_partial_1x1_out_vertex(HALF, FLOAT).typeName
    assert name == "poplin::ConvPartial1x1Out<half,float,true,true,8,4,false>"


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ({"in": [40], "weights": [256], "out": [40], "worklists": 18}, ["'in'", "[40]", "16"]),
        ({"in": [64], "weights": [12 * 16], "out": [48], "worklists": 18},
         ["outChansPerGroup=12", "numConvUnits=16"]),
        ({"in": [64], "weights": [120], "out": [64], "worklists": 18},
         ["'weights'", "[120]", "inChansPerGroup=16"]),
        ({"in": [64], "weights": [256], "out": [64], "worklists": 12}, ["'worklists'", "12", "18"]),
    ],
)  # fmt: skip
def test_bad_sizes_name_the_field(sizes, words):
    target = IPUModel("tiny").createDevice().getTarget()
    with pytest.raises(CodeletError) as err:
        vertex_type(conv_partial_1x1_out_vertex(HALF, HALF)).estimate(sizes, target)
    for w in words:
        assert w in str(err.value)


def test_bad_instantiation_and_helper_arguments():
    with pytest.raises(ValueError, match="num_conv_units=16"):
        conv_partial_1x1_out_vertex(HALF, FLOAT, num_conv_units=16)
    with pytest.raises(ValueError, match="fp_type=float, accum_type=half"):
        conv_partial_1x1_out_vertex(FLOAT, HALF)
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    cs = graph.addComputeSet("cs")
    a = graph.addVariable(HALF, [8, 12], "a")
    b = graph.addVariable(HALF, [16, 16], "b")
    c = graph.addVariable(HALF, [8, 16], "c")
    with pytest.raises(ValueError, match=r"lhs shape \[8, 12\]; required \[N, 16\]"):
        add_conv_partial_1x1_out(graph, cs, 0, a, b, c)
    a = graph.addVariable(HALF, [8, 16], "a2")
    with pytest.raises(ValueError, match=r"worker_elems=\[8, 0, 0, 0, 0, 1\].*N=8"):
        add_conv_partial_1x1_out(graph, cs, 0, a, b, c, worker_elems=[8, 0, 0, 0, 0, 1])


def test_worklist_round_trip():
    vals = make_worklist([3, 3, 2, 0, 1, 1], 16, 16, 2, 2)
    assert vals.dtype == np.uint16
    # rows 0,3,6,8,8,9 x 4 eight-byte units; counts - 3 in two's complement.
    assert vals.tolist()[:6] == [0, 0, 0, 12, 0, 12]
    assert vals[10] == 65536 - 3
    assert decode_worklist(vals, 4, 4, True) == [
        (0, 3, 0), (3, 3, 3), (6, 2, 6), (8, 0, 8), (8, 1, 8), (9, 1, 9),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("acc", "n", "split"),
    [(HALF, 16, None), (HALF, 50, [20, 0, 10, 5, 5, 10]), (FLOAT, 33, None)],
)
def test_values_equal_numpy(acc, n, split):
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    tiles = 3
    oc = 16 if acc == HALF else 8
    lhs = graph.addVariable(HALF, [tiles, n, 16], "lhs")
    rhs = graph.addVariable(HALF, [tiles, oc, 16], "rhs")
    out = graph.addVariable(acc, [tiles, n, oc], "out")
    cs = graph.addComputeSet("amp")
    for t in range(tiles):
        for x in (lhs[t], rhs[t], out[t]):
            graph.setTileMapping(x, t)
        add_conv_partial_1x1_out(
            graph, cs, t, lhs[t], rhs[t], out[t], worker_elems=split, name=f"wl{t}"
        )
    for name, x in (("lhs", lhs), ("rhs", rhs)):
        graph.createHostWrite(name, x)
    graph.createHostRead("out", out)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    a = RNG.uniform(-1, 1, (tiles, n, 16)).astype(np.float16)
    b = RNG.uniform(-1, 1, (tiles, oc, 16)).astype(np.float16)
    engine.writeTensor("lhs", a)
    engine.writeTensor("rhs", b)
    engine.run(0)
    ref = np.einsum("tnk,tok->tno", a.astype(np.float64), b.astype(np.float64))
    tol = 2e-3 * 16 if acc == HALF else 1e-5
    np.testing.assert_allclose(engine.readTensor("out"), ref, rtol=1e-2, atol=tol)
    rec = next(r for r in engine.getTrace().records if r.kind == "compute")
    elems = even(n) if split is None else split
    worker = worker_half_common
    base = 173 if acc == HALF else 157
    assert int(rec.tile_cycles[0]) == base + inner(worker, elems, True)


def test_pf_workload_small_on_tiny():
    import sys

    sys.path.insert(0, str(ROOT / "examples" / "calibration"))
    from ipusim.runner import run_workload

    result = run_workload(str(ROOT / "examples" / "calibration" / "pf_amp_matmul.py"), "tiny",
                          {"n": 64})  # fmt: skip
    m = result.metrics
    assert all(math.isfinite(v) for v in m.values())
    # 64 rows: 11,11,11,11,10,10 -> zeroing pass 6 * (18 + 4 * 11) = 372 > 6 * 58 + 14.
    assert m["vertex_cycles"] == 173 + 372 == 173 + inner(worker_half_common, even(64), True)
    assert m["cycles_per_call"] >= m["vertex_cycles"]
    tiles = result.trace.num_tiles
    flop = 2 * 64 * 16 * 16 * tiles
    assert m["throughput"] == pytest.approx(
        flop / (m["cycles_per_call"] / result.trace.clock_hz) / 1e12
    )
