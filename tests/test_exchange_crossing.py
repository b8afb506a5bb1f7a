"""Exchanges on several IPUs: runs that stay on their IPU planned as intervals, the
receiving tiles that get elements from other IPUs element by element; the same plan
as planning every run element by element (the computation kept here as the
reference)."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from ipusim.tile.layout import tile_distance
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
    computation): every id of every run, receiving tile after receiving tile."""
    ids = runs.expand(begin, length)
    _tile_by_tile(planner, ids, owner[ids].astype(np.int64), np.repeat(dst, length))


def _tile_by_tile(planner: ExchangePlanner, ids, src, dst) -> None:
    """The old ``add_grouped``: references grouped by receiving tile, each tile's
    planned by :func:`_old_add`."""
    ids, src, dst = (np.asarray(a, np.int64) for a in (ids, src, dst))
    order = np.argsort(dst, kind="stable")
    ids, src, dst = ids[order], src[order], dst[order]
    for tile in np.unique(dst).tolist():
        here = dst == tile
        _old_add(planner, tile, ids[here], src[here])


def _old_add(p: ExchangePlanner, dst: int, ids, src) -> None:
    """The old ``ExchangePlanner.add`` (with its ``_cross``) for FLOAT, one receiving
    tile: kept here as the reference of the planning of all tiles at once."""
    size, n, tpi = FLOAT.size, p.num_tiles, p.tiles_per_ipu
    remote = src != dst
    if not remote.any():
        return
    ids, src = ids[remote], src[remote]
    first = np.sort(np.unique(ids, return_index=True)[1])
    ids, src = ids[first], src[first]
    relayed = None
    if p.num_ipus > 1:
        crossing_ = src // tpi != dst // tpi
        if crossing_.any():
            landing = p.landing.setdefault((size, dst // tpi), crossing.LandingMap())
            c_ids, c_src = ids[crossing_], src[crossing_]
            prior = landing.get(c_ids)
            new = prior < 0
            if new.any():
                landing.insert(c_ids[new], dst)
                tiles, counts = np.unique(c_src[new], return_counts=True)
                p.global_keys.append(tiles * n + dst)
                p.global_bytes.append(counts.astype(np.int64) * size)
            keep = ~crossing_
            ids = np.concatenate((ids[keep], c_ids[~new]))
            src = np.concatenate((src[keep], prior[~new]))
            relayed = np.zeros(ids.size, bool)
            relayed[int(keep.sum()) :] = True
            if ids.size == 0:
                return
    order = np.argsort(ids)
    in_order = ids[order]
    p.received[dst] += ids.size * size
    step = np.ones(ids.size, bool)
    step[1:] = (np.diff(in_order) != 1) | (np.diff(src[order]) != 0)
    p.messages_received[dst] += int(step.sum())
    starts = np.flatnonzero(np.diff(in_order, prepend=in_order[0] - 2) != 1)
    ends = np.append(starts[1:], in_order.size) - 1
    p.received_runs.setdefault(size, []).append(
        (np.full(starts.size, dst, np.int64), in_order[starts], in_order[ends] + 1)
    )
    keys = dst * n + np.unique(src)
    seen, senders, stamp = p.take_pair_map()
    new = keys[seen[keys] != stamp]
    seen[new] = stamp
    senders[dst] += new.size
    owned = np.ones(ids.size, bool) if relayed is None else ~relayed
    if relayed is not None:
        p.relayed.setdefault((size, dst // tpi), []).append(ids[relayed])
    if owned.any():
        p.owned_senders(size).append((ids[owned], src[owned]))
    peers = np.unique(src)
    dist = tile_distance(p.cfg.tile, peers % tpi, np.full(peers.size, dst % tpi))
    p.max_distance[dst] = max(int(p.max_distance[dst]), int(dist.max()))
    np.maximum.at(p.max_distance, peers, dist.astype(np.int64))


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


@pytest.mark.parametrize("ipus", [1, 3])
def test_references_of_all_tiles_at_once_as_tile_by_tile(ipus):
    """Arbitrary references (repeated ids, several senders, local ones, senders on
    other IPUs, calls after calls on one planner): planned for all receiving tiles at
    once, the exchanges are those of the old tile-by-tile planning kept above."""
    rng = np.random.default_rng(5 + ipus)
    for trial in range(40):
        graph = _graph(ipus)
        n_tiles = graph.getTarget().getNumTiles()
        size = int(rng.integers(10, 90))
        graph.addVariable(FLOAT, [size], "x")
        new = ExchangePlanner(graph.getTarget(), graph._state)
        old = ExchangePlanner(graph.getTarget(), graph._state)
        tiles = rng.permutation(n_tiles)
        cut = np.sort(rng.choice(np.arange(1, n_tiles), int(rng.integers(1, 4)), replace=False))
        for group in np.split(tiles, cut):  # each call its own receiving tiles
            k = int(rng.integers(1, 60))
            ids = rng.integers(0, size, k)
            src = rng.integers(0, n_tiles, k)
            dst = rng.choice(group, k)
            new.add_grouped(FLOAT, ids, src, dst)
            _tile_by_tile(old, ids, src, dst)
        assert _plan(new) == _plan(old), trial
