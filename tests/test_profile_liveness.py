"""``memory.liveness`` of the graph profile in the shape Graphcore's readers of
Poplar's profile use (``alwaysLive.bytesByTile``, ``notAlwaysLive.maxBytesByTile``),
with ipusim's totals per program point beside them.

The expected numbers are worked out here from the placed blocks, point by point and
tile by tile (a plain loop, not the profile's event sweep), and from the variables
the program builds.
"""

from __future__ import annotations

from types import SimpleNamespace

import jsonschema
import numpy as np
from codelets_common import mapped, tiny_graph

from ipusim.profile.execution import schema
from ipusim.profile.memory_categories import liveness, overlapped_blocks
from poplar_api import FLOAT, Engine
from poplar_api import program as prog


def _engine() -> Engine:
    """``keep`` (tile 0) is read by the host at the end: always live. ``t1`` and
    ``t2`` (tile 1) are temporaries whose lives do not overlap; ``u`` (tile 2) lives
    while both of them do."""
    g = tiny_graph()
    keep = mapped(g, FLOAT, [16], "keep", tile=0)
    src = mapped(g, FLOAT, [4], "src", tile=3)
    t1 = mapped(g, FLOAT, [4], "t1", tile=1)
    t2 = mapped(g, FLOAT, [8], "t2", tile=1)
    u = mapped(g, FLOAT, [2], "u", tile=2)
    dst = mapped(g, FLOAT, [4], "dst", tile=3)
    g.createHostRead("keep", keep)
    g.createHostRead("dst", dst)
    body = prog.Sequence(
        [
            prog.Copy(src, t1),
            prog.Copy(t1[:2], u),
            prog.Copy(t1, dst),
            prog.Copy(src, t2[:4]),
            prog.Copy(src, t2[4:]),
            prog.Copy(t2[4:], dst),
            prog.Copy(u, dst[:2]),
        ]
    )
    return Engine(g, body)


def _by_point(report) -> tuple[np.ndarray, np.ndarray]:
    """Always-live bytes per tile, and the not-always-live bytes live at each program
    point on each tile (points x tiles), from the blocks one at a time."""
    nt = report.num_tiles
    b = report.blocks
    points = len(report.liveness)
    always = np.zeros(nt, np.int64)
    live = np.zeros((points, nt), np.int64)
    for i in range(len(b.size)):
        t, size = int(b.tile[i]), int(b.size[i])
        if b.always[i]:
            always[t] += size
            continue
        for p in range(max(int(b.live_first[i]), 0), min(int(b.live_last[i]), points - 1) + 1):
            live[p, t] += size
    return always, live


def test_liveness_has_the_shape_graphcores_readers_use():
    engine = _engine()
    profile = engine.getGraphProfile()
    jsonschema.validate(profile, schema("graph_profile"))
    lv = profile["memory"]["liveness"]
    always, live = _by_point(engine.memory)
    assert lv["alwaysLive"]["bytesByTile"] == always.tolist()
    assert lv["notAlwaysLive"]["maxBytesByTile"] == live.max(axis=0).tolist()
    points = lv["programPoints"]
    assert [p["notAlwaysLive"] for p in points] == live.sum(axis=1).tolist()
    assert {p["alwaysLive"] for p in points} == {int(always.sum())}
    tree = lv["notAlwaysLive"]["byProgram"]
    assert [(n["name"], n["bytes"], n["children"]) for n in tree] == [
        (p["name"], p["notAlwaysLive"], []) for p in points
    ]


def test_temporaries_that_never_live_together_peak_at_the_larger():
    engine = _engine()
    lv = engine.getGraphProfile()["memory"]["liveness"]
    peak = lv["notAlwaysLive"]["maxBytesByTile"]
    # tile 1: t1 (16 bytes) and t2 (32 bytes) are never live at once
    assert peak[1] == 8 * 4
    # tile 0: keep is read by the host, so it is live throughout
    assert lv["alwaysLive"]["bytesByTile"][0] >= 16 * 4


def test_narrow_integer_columns_are_widened_before_adding():
    """A placed report keeps its block columns in the narrowest integer types; a block
    live up to point 127 in int8 columns (127 + 1 would wrap) and offsets near the top
    of int16 (offset + size would wrap) give what int64 columns give."""
    blocks = SimpleNamespace(
        tile=np.array([0, 0, 1], np.int8),
        size=np.array([100, 27, 5], np.int8),
        always=np.array([False, False, True]),
        live_first=np.array([120, 127, 0], np.int8),
        live_last=np.array([127, 127, 0], np.int8),
    )
    report = SimpleNamespace(
        num_tiles=2, blocks=blocks, liveness=[(f"p{i}", 0, 0) for i in range(200)]
    )
    lv = liveness(report)
    # tile 0: both blocks live at point 127 only together; tile 1: always live
    assert lv["notAlwaysLive"]["maxBytesByTile"] == [127, 0]
    assert lv["alwaysLive"]["bytesByTile"] == [0, 5]
    start = np.array([32700, 32760], np.int16)  # the first ends at 32800, past int16
    size = np.array([100, 4], np.int16)
    zeros = np.zeros(2, np.int8)
    assert overlapped_blocks(zeros, zeros, start, size).tolist() == [True, True]
