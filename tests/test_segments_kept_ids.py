"""Vector fields given as :class:`Segments` whose pieces are not all runs: each vertex
gets the ids of its piece (as ``addVertex`` of the piece gives them), and the ids kept
for the pieces that are not runs are those from the first such piece to the last one's
end, not every id of the tensor."""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import ScaleBy

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.graph import Segments


def _ids_of(graph: Graph, pieces: int) -> list[list[int]]:
    table = graph._state.vertices
    out = []
    for vid in range(pieces):
        value = table.get_field(vid, "in")
        out.append(list(value) if isinstance(value, range) else np.asarray(value).tolist())
    return out


@pytest.mark.parametrize("seed", range(12))
def test_pieces_that_are_not_runs_keep_the_ids_of_their_span(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 9, int(rng.integers(4, 30)))
    n = int(sizes.sum())
    begins = np.cumsum(sizes) - sizes
    order = np.arange(n)  # runs of ids, two stretches of them shuffled
    for _ in range(2):
        a, b = sorted(rng.integers(0, n + 1, 2).tolist())
        order[a:b] = rng.permutation(order[a:b])
    built = []
    for bulk in (True, False):
        g = Graph(IPUModel("ipu2").createDevice().getTarget())
        g.addCodelets([ScaleBy])
        cs = g.addComputeSet("cs")
        x = g.addVariable(FLOAT, [n], "x")
        k = g.addVariable(FLOAT, [sizes.size], "k")
        view = x.elements(order)
        if bulk:
            fields = {"in": Segments(view, sizes), "out": Segments(x, sizes), "k": k}
            g.addVertices(cs, "ScaleBy", np.zeros(sizes.size, np.int64), fields)
            kept = [e["in"] for _, e in sorted(g._state.vertices.extra.items()) if "in" in e]
        else:
            for i, (b, s) in enumerate(zip(begins.tolist(), sizes.tolist(), strict=True)):
                fields = {"in": view.slice(b, b + s), "out": x.slice(b, b + s), "k": k[i]}
                v = g.addVertex(cs, "ScaleBy", fields)
                g.setTileMapping(v, 0)
        built.append(_ids_of(g, sizes.size))
    want = [order[b : b + s].tolist() for b, s in zip(begins, sizes, strict=True)]
    assert built[0] == built[1] == want
    # the pieces that are not runs (empty, or ids that do not step by one)
    not_runs = [i for i, w in enumerate(want) if not w or np.any(np.diff(w) != 1)]
    assert len(kept) == len(not_runs)
    if not_runs:
        lo, hi = int(begins[not_runs[0]]), int(begins[not_runs[-1]] + sizes[not_runs[-1]])
        assert len({id(p.base) for p in kept}) == 1  # slices of one array: those ids
        assert kept[0].base.tolist() == order[lo:hi].tolist()
