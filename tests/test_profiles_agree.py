"""The machine, the graph profile and the execution profile agree on every step's cycles.

All three ask the same timing model, so for every tutorial: each compute set's and each
exchange's per-tile cycles in the graph profile equal those the machine recorded when
it ran them; each stream copy's estimate equals its duration in the run (one IPU, so
the host link is never shared), or bounds it when the copy's data was prefetched; and
the execution profile's steps are the machine's records with the same per-tile
cycles (``cyclesAllTiles``, ``maxTileCycles``) and laid end to end to the run's total.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ipusim.runner import run_workload

TUTORIALS = Path(__file__).resolve().parents[1] / "examples" / "tutorials"

#: Tutorial -> small workload parameters (every tutorial of the guide).
CASES = {
    "tut1": {},
    "tut2": {},
    "tut3": {},
    "tut4": {},
    "tut5": {"batches": 1},
    "tut6": {"rows": 40, "cols": 50},
    "tut7": {"rows": 200, "cols": 100},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def result(request):
    name = request.param
    return run_workload(str(TUTORIALS / f"{name}.py"), "mk2-ipumodel", CASES[name])


def _records(result, kind):
    return [r for t in result.traces for r in t.records if r.kind == kind]


def test_compute_sets_agree(result):
    gp = result.graph_profile
    names = gp["computeSets"]["names"]
    by_tile = gp["computeSets"]["cycleEstimates"]["cyclesByTile"]
    active = gp["computeSets"]["cycleEstimates"]["activeCyclesByTile"]
    records = _records(result, "compute")
    assert records, "every tutorial runs a compute set or a copy"
    for rec in records:
        i = names.index(rec.name)
        assert np.array_equal(by_tile[i], rec.tile_cycles), rec.name
        assert np.array_equal(active[i], rec.active_cycles), rec.name


def test_exchanges_agree(result):
    gp = result.graph_profile
    names = gp["exchanges"]["names"]
    for rec in _records(result, "exchange"):
        i = names.index(rec.name)
        estimate = gp["exchanges"]["estimatedCyclesByTile"][i]
        assert np.array_equal(estimate, rec.tile_cycles), rec.name


def test_stream_copies_agree(result):
    gp = result.graph_profile
    names = gp["hostExchanges"]["names"]
    for rec in _records(result, "stream_copy"):
        i = names.index(rec.name)
        # every tile leaves the copy at its end; the one that arrived last waited least
        if isinstance(rec.details, dict) and rec.details.get("prefetched_ipus"):
            # its data was prefetched during earlier steps: the estimate is the most
            # it can take (docs/machine.md, "Prefetch")
            assert int(rec.tile_cycles.min()) <= gp["hostExchanges"]["cycles"][i], rec.name
            continue
        assert gp["hostExchanges"]["cycles"][i] == int(rec.tile_cycles.min()), rec.name


def test_execution_profile_steps_are_the_records(result):
    steps = result.execution_profile["simulation"]["steps"]
    records = [r for t in result.traces for r in t.records]
    assert len(steps) == len(records)
    for step, rec in zip(steps, records, strict=True):
        assert step["name"] == rec.name
        assert step["cyclesAllTiles"] == int(rec.tile_cycles.sum())
        assert step["maxTileCycles"] == int(rec.tile_cycles.max(initial=0))
    total = sum(t.total_cycles for t in result.traces)
    assert sum(s["cycles"] for s in steps) == total
    assert result.execution_profile["simulation"]["cycles"] == total
