"""The Poplibs release a run plans as (``software.poplibs_release``): the setting's
validation, products whose plans differ between graphcore/poplibs 7eac0f26 (serial
splits with a padded last pass, inputs broadcast before an output-channel loop) and
f927358 (serial splits that divide the channels, no broadcast) run each way against
numpy, f927358's ``ConvPartial1x1Out``, horizontal- and vertical-MAC planning estimates
against its formulas, and the calibration rows measured with f927358 planned as f927358."""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from ipusim.config import config_hash, config_to_yaml, load_config
from ipusim.errors import ConfigError
from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_serial import plan_cache_key
from poplar_api.poplin.poplibs_mac_estimates import hmac_partial_cycles, vmac_partial_cycles
from poplar_api.poplin.poplibs_matmul_model import SPLIT_NAMES, Product, costs
from poplar_api.poplin.poplibs_release import poplibs_release
from tests.test_poplin import run_product

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(5309)
NEW, OLD = "7eac0f26", "f927358"


def _config(release: str | None, preset: str = "tiny"):
    overrides = {} if release is None else {"software.poplibs_release": release}
    return load_config(preset, overrides=overrides)


def _graph(release: str | None) -> Graph:
    return Graph(IPUModel(_config(release)).createDevice().getTarget())


# ------------------------------------------------------------------ the setting
def test_the_default_release_is_the_newest_and_leaves_the_hash_alone() -> None:
    cfg = _config(None)
    assert cfg.software.poplibs_release == NEW
    assert poplibs_release(IPUModel(cfg).createDevice().getTarget()) == NEW
    # a config that never names the release dumps and hashes as before the setting
    assert "software" not in config_to_yaml(cfg)
    assert config_hash(_config(NEW)) == config_hash(cfg)
    old = _config(OLD)
    assert "poplibs_release: f927358" in config_to_yaml(old)
    assert config_hash(old) != config_hash(cfg)


def test_an_unknown_release_names_the_path_the_value_and_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        _config("1e4ea3b")
    text = str(err.value)
    assert "software.poplibs_release" in text and "'1e4ea3b'" in text
    assert "'7eac0f26'" in text and "'f927358'" in text


def test_plan_cache_keys_name_the_release() -> None:
    params = poplin.ConvParams(HALF, 1, [16], [1], 32, 16)
    keys = {plan_cache_key(_graph(r).getTarget(), params, {}) for r in (NEW, OLD)}
    assert len(keys) == 2


# ------------------------------------------------------------------ plans each way
#: (m, k, n, availableMemoryProportion, kind) on the tiny target (8 tiles of 64 KiB):
#: 7eac0f26 broadcasts 136 x 128 x 200's inputs over 3 output-channel passes of 48 of
#: its 136 channels; pads 100 x 48 x 600 into 2 passes of 56 and 44; pads 24 x 2000 x 24
#: into 4 input-channel passes of 512 of 2000. f927358 splits each by a factor.
PRODUCTS = [
    (136, 128, 200, None, "out"),
    (100, 48, 600, None, "out"),
    (24, 2000, 24, "0.2", "in"),
]


def _run(release: str, m: int, k: int, n: int, opts):
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)
    # operands laid out as the plan wants
    c, engine, _ = run_product(_config(release), a, b, HALF, opts=opts, layout="created")
    return c, a.astype(np.float64) @ b.astype(np.float64), engine


@pytest.mark.parametrize(("m", "k", "n", "proportion", "kind"), PRODUCTS)
def test_a_product_planned_as_each_release_matches_numpy(m, k, n, proportion, kind) -> None:
    opts = None if proportion is None else {"availableMemoryProportion": proportion}
    plans = {r: poplin.getPlan(_graph(r), (1, m, k, n), HALF, HALF, opts) for r in (NEW, OLD)}
    new, old = plans[NEW], plans[OLD]
    chans = k if kind == "in" else (m if new.swapped else n)
    serial = {r: p.in_serial if kind == "in" else p.serial for r, p in plans.items()}
    # 7eac0f26: every pass but the last of whole grains, the last smaller
    per = new.serial_chans
    assert serial[NEW] > 1 and (serial[NEW] - 1) * per < chans < serial[NEW] * per
    assert new.release == NEW
    # f927358: a factor of the channels, equal passes, no broadcast
    assert serial[OLD] > 1 and chans % serial[OLD] == 0
    assert old.serial_chans == 0 and not old.broadcast and old.release == OLD
    cycles = {}
    for release in (NEW, OLD):
        c, ref, engine = _run(release, m, k, n, opts)
        np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=5e-2)
        cycles[release] = engine.getTrace().total_cycles
    assert cycles[NEW] != cycles[OLD]  # (the setting is no inert knob)


def test_the_report_prints_the_release_serial_channels_and_broadcast() -> None:
    text = {}
    for release in (NEW, OLD):
        out = io.StringIO()
        poplin.matMulReportPlan(out, _graph(release), HALF, HALF, [136, 128], [128, 200])
        text[release] = out.getvalue()
    assert "serialChansPerPass       48" in text[NEW]
    assert "broadcastInputBeforeLoop true" in text[NEW]
    assert text[NEW].rstrip().endswith("poplibsRelease           7eac0f26")
    assert "serialChansPerPass       0" in text[OLD]
    assert "broadcastInputBeforeLoop false" in text[OLD]
    assert text[OLD].rstrip().endswith("poplibsRelease           f927358")
    plan = poplin.getPlan(_graph(NEW), (1, 136, 128, 200), HALF, HALF)
    assert "48 channels a pass" in str(plan) and "inputs broadcast before the loop" in str(plan)
    assert "Poplibs 7eac0f26 plan" in str(plan)


# ------------------------------------------------------------------ the AMP estimate
def _poplibs_1x1(release: str, field: int, nig: int, nog: int, workers: int = 6) -> int:
    """``getConvPartial1x1SupervisorOuterLoopCycleEstimate`` of HALF inputs with FLOAT
    partials, 8 conv units, weights loaded at 8 bytes a cycle and one conv group, as
    ``lib/poplin/PerformanceEstimation.hpp`` writes it at each release, for a field that
    gives every worker the same ``n >= 3`` positions."""
    n = field // workers
    assert n * workers == field and n >= 3
    loads = 8 * 16 * 2 // 8
    if release == OLD:
        keep, per_in = 10, 2  # conv1x1WorkerRetentionSavings
        zero, plain = 38 + (n - 3) * 4 - keep, 40 + (n - 3) * 4 - keep
        first, later, last, out_last = 12, 16, 11, 19
    else:
        keep, per_in = 7, 3
        zero, plain = 37 + (n - 3) * 4 - keep, 38 + (n - 3) * 4 - keep
        first, later, last, out_last = 13, 15, 11, 18
    # every worker alike: the slowest worker's cycles times the workers, plus the 14 the
    # estimate adds over the fastest
    inner_z, inner_nz = workers * zero + 14, workers * plain + 14
    return (
        50
        + workers * (keep + per_in * (nig - 1))
        + first
        + (nig - 1) * (later + nog * (19 + 6 + loads + inner_nz))
        + last
        + nog * (out_last + 7 + loads + inner_z)
    )


@pytest.mark.parametrize("release", [NEW, OLD])
def test_the_models_amp_estimate_is_the_releases(release) -> None:
    target = IPUModel("tiny").createDevice().getTarget()
    p = Product((1, 24, 32, 16), target, False, (16, 8), "NONE_MATMUL", 8, release)
    got = costs(p, {k: np.ones(1, np.int64) for k in SPLIT_NAMES}).terms["compute"]
    assert int(got[0]) == _poplibs_1x1(release, 24, 2, 2) == {NEW: 1261, OLD: 1239}[release]


# ------------------------------------------------------------------ calibration rows
def _calibration():
    here = ROOT / "examples" / "calibration"
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))
    import points
    import report

    return points, report, str(here / "j_poplibs_bench.py")


def test_a_row_measured_with_f927358_plans_as_f927358() -> None:
    points, report, j = _calibration()
    assert points.poplibs_release_of("Poplibs f927358 (2021-03-10; SDK 2.0/2.1 era)") == OLD
    assert points.poplibs_release_of("Poplibs 7eac0f26") == NEW
    # four commits before f927358, with its planner files (poplibs_release.PLANS_AS)
    assert points.poplibs_release_of("Poplibs 1e4ea3b (2021-02-26)") == OLD
    assert points.poplibs_release_of("Poplibs 3eb5d5e (2020-12-04, Sim1)") is None
    assert points.poplibs_release_of("SDK 3.2 era (July 2023; not printed)") is None
    cfg = points.point_config(j, "J-gemm-2.ipum1")
    assert cfg.software.poplibs_release == OLD
    for calibrated in (True, False):
        assert report.row_config(j, "J-gemm-2.ipum1", calibrated).software.poplibs_release == OLD
    # a row whose measurement names no Poplibs commit keeps the default
    a = str(ROOT / "examples" / "calibration" / "a_lightweight_profiling.py")
    assert points.point_config(a, "A2o.stage1.1").software.poplibs_release == NEW
    # the row's product, planned on the row's config: 2 output-channel passes of 500 of
    # the swapped product's 1000 channels, no broadcast (7eac0f26: 2 passes of 504 and
    # 496, the inputs broadcast)
    graph = Graph(IPUModel(cfg).createDevice().getTarget())
    plan = poplin.getPlan(graph, (1, 1000, 256, 20000), HALF, HALF)
    assert plan.release == OLD and plan.swapped and plan.serial == 2
    assert plan.serial_chans == 0 and not plan.broadcast


def test_a_commit_is_matched_to_the_release_it_plans_as() -> None:
    """Full and abbreviated hashes of a release, of a commit planning as one, and of a
    commit whose planning is not modelled; a text that is no hash is refused."""
    from poplar_api.poplin.poplibs_release import planning_release_of

    assert planning_release_of("7eac0f266ced5b064b3284a3cd90d491745b387c") == NEW
    assert planning_release_of("F9273583") == OLD
    assert planning_release_of("1e4ea3b225a40831ce6d8aec1160c5efd3b4cae7") == OLD
    assert planning_release_of("1e4ea3b2") == OLD
    assert planning_release_of("1e4ea3c") is None
    assert planning_release_of("3eb5d5e") is None
    with pytest.raises(ValueError, match=r"'1e4ea'.*7 to 40 hexadecimal digits"):
        planning_release_of("1e4ea")


# ------------------------------------------------------------------ the MAC estimates
def _dense_dot_f927358(size: int) -> int:
    """``getDenseDotProductCycles(false, true, size)`` at f927358 (HALF into FLOAT):
    rpt, wind-down, the sum with the previous partials and the branch, then a cycle a
    vector of 4 or a cycle an element."""
    inner = 1 + 2 + 3 + 1
    return inner + size // 4 if size % 4 == 0 else inner + size


def _hmac_f927358(ft: int, cit: int, cot: int, gt: int, icg: int, workers: int = 6) -> int:
    """``addPartialCalcCycleEstimate``'s HMAC branch at f927358 for a tile of a matMul
    product (one output row, the field over the workers), transcribed loop by loop:
    ``estimateConvPartialHorizontalMacInnerLoopCycles``,
    ``getConvPartialHorizontalMacCycleEstimate`` (no 1x1 path),
    ``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate`` and, always,
    ``estimateZeroSupervisorCycles``."""
    split = workers // math.gcd(workers, 1)
    max_part = (1 * split + workers - 1) // workers
    whole, part = max_part // split, max_part % split
    sizes = [ft] * whole + ([part * (ft + split - 1) // split] if part else [])
    worker = 16
    for s in sizes:
        worker += 7 if s == 0 else 19 + s * (7 + 1 * _dense_dot_f927358(icg))
    inner = workers * (worker + 16)  # one used context: the least worker is 0
    nig = -(-cit // icg)
    outer = 63 + workers * 9 + gt * (23 + nig * (15 + cot * (10 + inner)))
    per_worker = (ft + workers - 1) // workers
    zero = ((per_worker + 1) // 2 + 14 - 9) * workers * cot * gt
    return outer + zero


def _vmac_f927358(ft: int, cit: int, gt: int, workers: int = 6) -> int:
    """``addPartialCalcCycleEstimate``'s VMAC branch at f927358 (4 conv groups a group, one
    input and output channel a group, a 1-wide kernel), transcribed loop by loop."""
    split = workers // math.gcd(workers, ft)
    max_part = (ft * split + workers - 1) // workers
    whole, part = max_part // split, max_part % split
    sizes = [1] * whole + [(1 + split - 1) // split] * part
    worker = 6 + sum(10 + 5 + (5 + 2 * (s - 1)) for s in sizes)
    inner = workers * worker
    zero = 4 + ft
    reduction = 10 + ((9 + 2 * (workers - 1)) * ((ft + workers - 1) // workers)) // 4
    return 61 + 13 + 26 + (zero + 32 + cit * (24 + inner) + reduction) * -(-gt // 4)


@pytest.mark.parametrize("icg", [2, 6, 8, 100, 500])
def test_f927358_hmac_estimate(icg) -> None:
    """The model's horizontal MAC planned as f927358 is that release's estimate, and not
    7eac0f26's (which has the 1x1 path)."""
    for ft in range(1, 40):
        for nig, cot, gt in ((1, 1, 1), (2, 4, 1), (5, 3, 2)):
            got = int(hmac_partial_cycles(ft, nig * icg, cot, gt, icg, 6, OLD))
            assert got == _hmac_f927358(ft, nig * icg, cot, gt, icg), (ft, nig, cot, gt)
            assert got != int(hmac_partial_cycles(ft, nig * icg, cot, gt, icg, 6, NEW))


def test_f927358_vmac_estimate() -> None:
    for ft in range(1, 40):
        for cit, gt in ((1, 4), (5, 4), (17, 8)):
            got = int(vmac_partial_cycles(ft, cit, gt, 6, OLD))
            assert got == _vmac_f927358(ft, cit, gt), (ft, cit, gt)
