"""popops' elementwise ops ask for an operand's tiles once: the tiles ``_mapped`` took
when checking the operand are handed to ``plan_tiles`` for the tensor the op plans
over (the operand written in place, or a clone of it). Every such hand-over is checked
here against the tiles asked afresh and the plan made without them, on ops in place
and not, clones of the first and of the second operand (the first broadcast), unary
ops and scaled adds, operands mapped in irregular runs, permuted, and on a virtual
graph."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import poplar_api.popops as popops
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.popops import elementwise
from poplar_api.program import Sequence


def _mapped(graph: Graph, shape: list[int], seed: int, permute: bool):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    x = graph.addVariable(FLOAT, [n], f"x{seed}")
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, 12), replace=False))
    bounds = [0, *cuts.tolist(), n]
    for a, b in itertools.pairwise(bounds):
        graph.setTileMapping(x.slice(a, b), int(rng.integers(0, graph.getTarget().getNumTiles())))
    if permute:
        return x.elements(rng.permutation(n)).reshape(shape)
    return x.reshape(shape)


@pytest.fixture
def handed(monkeypatch):
    """Records every plan_tiles call given tiles, after checking them and the plan."""
    calls = []
    real = elementwise.plan_tiles

    def checked(graph, ref, api, plan_tile, tiles=None):
        out = real(graph, ref, api, plan_tile, tiles)
        if tiles is not None:
            np.testing.assert_array_equal(tiles, graph.elementTiles(ref))
            fresh = real(graph, ref, api, plan_tile)
            for field in ("tiles", "rows", "counts", "sizes", "positions"):
                np.testing.assert_array_equal(getattr(out, field), getattr(fresh, field))
            assert out.classes == fresh.classes
            calls.append(api)
        return out

    monkeypatch.setattr(elementwise, "plan_tiles", checked)
    return calls


@pytest.mark.parametrize("virtual", [False, True])
@pytest.mark.parametrize("permute", [False, True])
def test_handed_tiles_are_the_tiles_asked_afresh(handed, virtual: bool, permute: bool) -> None:
    device = IPUModel("ipu2")
    device.tilesPerIPU = 16
    top = Graph(device.createDevice().getTarget())
    graph = top.createVirtualGraph(4, 12) if virtual else top
    prog = Sequence()
    for seed in range(6):
        a = _mapped(graph, [6, 8], 2 * seed, permute)
        b = _mapped(graph, [6, 8], 2 * seed + 1, permute)
        row = _mapped(graph, [1, 8], 100 + seed, False)
        popops.add(graph, a, b, prog)  # out a clone of A
        popops.mul(graph, row, b, prog)  # A broadcast: out a clone of B
        popops.sub(graph, a, 2.0, prog)  # a constant B
        popops.addInPlace(graph, a, b, prog)
        popops.mulInPlace(graph, a, row, prog)  # in place, B broadcast
        popops.exp(graph, b, prog)
        popops.negInPlace(graph, b, prog)
        popops.scaledAddTo(graph, a, b, 0.5, prog)
    assert len(handed) == 6 * 8  # every op above handed its tiles


def _error(fn) -> str:
    try:
        fn()
    except Exception as e:  # (the message is compared)
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_handed_tiles_are_checked_as_tiles_asked_here(monkeypatch) -> None:
    device = IPUModel("ipu2")
    device.tilesPerIPU = 16
    top = Graph(device.createDevice().getTarget())
    sub = top.createVirtualGraph(4, 12)
    a = top.addVariable(FLOAT, [40], "a")
    top.mapElements(a, np.r_[np.full(30, 5), np.full(10, 14)])  # 14: outside sub
    b = top.addVariable(FLOAT, [40], "b")
    top.mapElements(b, np.full(40, 6))
    ops = [
        lambda: popops.addInPlace(sub, a, b, Sequence()),
        lambda: popops.add(sub, a, b, Sequence()),
        lambda: popops.exp(sub, a, Sequence()),
        lambda: popops.scaledAddTo(sub, a, b, 0.5, Sequence()),
    ]
    handed = [_error(op) for op in ops]
    real = elementwise._execute.__wrapped__

    def without_tiles(graph, prog, name, ref, operands, plan_tile, tiles=None):
        return real(graph, prog, name, ref, operands, plan_tile)

    monkeypatch.setattr(elementwise, "_execute", without_tiles)
    asked = [_error(op) for op in ops]
    assert handed == asked
    assert sum("outside this virtual graph" in m for m in handed) >= 3, handed
