"""Exchanges on several IPUs: runs that stay on their IPU planned as intervals, the
receiving tiles that get elements from other IPUs element by element; the same plan
as planning every run element by element (the computation kept here as the
reference)."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.lowering import crossing, runs
from poplar_api.lowering import pieces as pk
from poplar_api.lowering.exchange import ExchangePlanner


def _graph(ipus: int) -> Graph:
    model = IPUModel("tiny")
    model.numIPUs = ipus
    return Graph(model.createDevice().getTarget())


def _element_by_element(planner: ExchangePlanner, begin, length, dst, owner) -> None:
    """How ``add_pieces`` planned every run on a multi-IPU target before (the old
    computation): every id of every run, grouped by receiving tile."""
    ids = runs.expand(begin, length)
    planner.add_grouped(FLOAT, ids, owner[ids].astype(np.int64), np.repeat(dst, length))


def _plan(planner: ExchangePlanner) -> dict:
    """Everything a planner's two exchange steps say, as lists."""
    out = {}
    ex = planner.build("ex", 0)
    if ex is not None:
        out = {k: getattr(ex, k).tolist() for k in ir.TOTALS}
        out["shared"] = None if ex.bytes_shared is None else ex.bytes_shared.tolist()
    glob = planner.build_global("global", 0)
    if glob is not None:
        out["global"] = (glob.src_tile.tolist(), glob.dst_tile.tolist(), glob.num_bytes.tolist())
    return out


@pytest.mark.parametrize("ipus", [2, 3])
def test_runs_on_several_ipus_plan_as_element_by_element(ipus):
    """Random owners (stretches of a few ids on random tiles of all IPUs, some unmapped
    ids never read), random reads by vertices on every IPU, some calls with no run
    crossing IPUs: the exchange and the global exchange are those of the old element
    by element planning, call after call on one planner (landing tiles carry over)."""
    rng = np.random.default_rng(11 + ipus)
    crossed = local_only = 0
    for trial in range(40):
        graph = _graph(ipus)
        n_tiles = graph.getTarget().getNumTiles()
        per_ipu = n_tiles // ipus
        size = int(rng.integers(20, 120))
        x = graph.addVariable(FLOAT, [size], "x")
        tiles = np.repeat(rng.integers(0, n_tiles, size), rng.integers(1, 7, size))[:size]
        if trial % 3 == 0:  # every element and every reader on IPU 1: nothing crosses
            tiles = per_ipu + tiles % per_ipu
        graph._state.space(FLOAT).tile[x.flat_index()] = tiles.astype(np.int32)
        owner = graph._state.space(FLOAT).tile
        new = ExchangePlanner(graph.getTarget(), graph._state)
        old = ExchangePlanner(graph.getTarget(), graph._state)
        planned = 0  # ids of the runs planned, counted with repeats
        for _call in range(int(rng.integers(1, 4))):
            parts, bounds, vtiles = [], [0], []
            for _ in range(int(rng.integers(1, 14))):
                ids = []
                for _ in range(int(rng.integers(1, 4))):
                    a = int(rng.integers(0, size))
                    ids.append(np.arange(a, int(rng.integers(a, min(size, a + 12) + 1))))
                parts.append(np.concatenate(ids))
                bounds.append(bounds[-1] + parts[-1].size)
                tile = int(rng.integers(0, n_tiles))
                vtiles.append(per_ipu + tile % per_ipu if trial % 3 == 0 else tile)
            found = pk.field_pieces(
                np.concatenate(parts).astype(np.int64),
                np.asarray(bounds, np.int64),
                np.asarray(vtiles, np.int64),
                owner,
            )
            begin, length, dst = found
            far = crossing.receivers_from_other_ipus(
                begin, length, dst, crossing.ipu_stretches(
                    owner, runs.change_points(owner, owner.size), per_ipu, owner.size
                ), per_ipu,
            )  # fmt: skip
            crossed += int(far.any())
            local_only += int(begin.size > 0 and not far.any())
            new.add_pieces(FLOAT, begin, length, dst, owner)
            planned += int(length.sum())
            _element_by_element(old, begin, length, dst, owner)
        # what the planner keeps of the elements planned one by one is per element
        # planned, not an array over the element space (hundreds of MB in a big graph)
        kept = sum(ids.size for parts in new.sender.values() for ids, _ in parts)
        assert kept <= planned, trial
        assert _plan(new) == _plan(old), trial
    assert crossed and local_only  # both kinds of call were planned


def test_receivers_from_other_ipus_against_their_elements():
    """A run's receiving tile is marked when some element of one of its runs lives on
    another IPU, checked element by element."""
    rng = np.random.default_rng(3)
    per_ipu, ipus = 8, 3
    for _ in range(50):
        size = int(rng.integers(1, 80))
        owner = np.repeat(rng.integers(-1, per_ipu * ipus, size), rng.integers(1, 5, size))
        owner = owner[:size].astype(np.int32)
        stretches = crossing.ipu_stretches(owner, runs.change_points(owner, size), per_ipu, size)
        k = int(rng.integers(1, 20))
        begin = rng.integers(0, size, k)
        length = np.minimum(rng.integers(1, 10, k), size - begin)
        dst = rng.integers(0, per_ipu * ipus, k)
        got = crossing.receivers_from_other_ipus(begin, length, dst, stretches, per_ipu)
        far_tiles = {
            int(d)
            for b, n, d in zip(begin, length, dst, strict=True)
            if np.any(owner[b : b + n] // per_ipu != d // per_ipu)
        }
        assert got.tolist() == [int(d) in far_tiles for d in dst]
