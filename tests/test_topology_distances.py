"""Hop distances of a topology: breadth first with numpy products up to 256 IPUs, scipy's
shortest paths beyond; both against a plain breadth-first search written here."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from ipusim.exchange.topology import Topology, Wiring


def _bfs(n: int, pairs: np.ndarray) -> np.ndarray:
    """Hops between every two IPUs over links both ways (-1: not connected)."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for a, b in pairs.tolist():
        neighbours[a].append(b)
        neighbours[b].append(a)
    dist = np.full((n, n), -1, np.int64)
    for s in range(n):
        dist[s, s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v in neighbours[u]:
                if dist[s, v] < 0:
                    dist[s, v] = dist[s, u] + 1
                    queue.append(v)
    return dist


@pytest.mark.parametrize("n", [5, 40, 64, 300])
def test_distances_are_breadth_first_hops(n):
    rng = np.random.default_rng(n)
    pairs = {tuple(sorted(p)) for p in rng.integers(0, n, (int(1.3 * n), 2)).tolist()}
    pairs = np.array(sorted(p for p in pairs if p[0] != p[1]), np.int64)  # some IPUs apart
    wiring = Wiring(n, n, pairs, np.zeros((0, 2), np.int64))
    topology = Topology(wiring, ipu_capacity=1.0, ipu_latency=1)
    want = _bfs(n, pairs)
    assert (want < 0).any() and want.max() >= 3  # disconnected IPUs and long routes
    np.testing.assert_array_equal(topology.distances, want)
