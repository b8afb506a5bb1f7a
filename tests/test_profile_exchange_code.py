"""Exchange code in the graph profile: ``exchanges.memoryByInstruction`` gives each
internal exchange's code per tile by what it does (setup on every tile taking part,
send per region a tile sends, receive per tile it receives from), and the exchanges
add up to the ``internalExchangeCode`` category.

Expected bytes are worked out here from the copies' layout and the config's ``code``
sizes, not by the profile's code.
"""

from __future__ import annotations

import jsonschema
import numpy as np
from codelets_common import mapped, tiny_graph

from ipusim.profile.execution import schema
from ipusim.profile.memory_categories import category_totals
from poplar_api import FLOAT, Engine
from poplar_api import program as prog


def _engine() -> Engine:
    """Two copies onto tile 3: ``a`` (tile 0) alone, then ``b`` whose halves live on
    tiles 1 and 2 (two senders, one region each)."""
    g = tiny_graph()
    a = mapped(g, FLOAT, [8], "a", tile=0)
    b = g.addVariable(FLOAT, [8], "b")
    g.setTileMapping(b[:4], 1)
    g.setTileMapping(b[4:], 2)
    out_a = mapped(g, FLOAT, [8], "outA", tile=3)
    out_b = mapped(g, FLOAT, [8], "outB", tile=3)
    return Engine(g, prog.Sequence([prog.Copy(a, out_a), prog.Copy(b, out_b)]))


def test_memory_by_instruction_is_setup_send_and_receive_per_tile():
    engine = _engine()
    profile = engine.getGraphProfile()
    jsonschema.validate(profile, schema("graph_profile"))
    code = engine._state.target.config.code
    base, per = code.exchange_code_base_bytes, code.exchange_code_bytes_per_message
    ex = profile["exchanges"]
    assert len(ex["memoryByInstruction"]) == len(ex["names"]) == 2
    n = profile["target"]["numTiles"]

    def tiles(values: dict[int, int]) -> list[int]:
        out = [0] * n
        for t, v in values.items():
            out[t] = v
        return out

    first, second = ex["memoryByInstruction"]
    assert first == {
        "setup": tiles({0: base, 3: base}),
        "send": tiles({0: per}),
        "receive": tiles({3: per}),
    }
    assert second == {
        "setup": tiles({1: base, 2: base, 3: base}),
        "send": tiles({1: per, 2: per}),
        "receive": tiles({3: 2 * per}),  # two senders
    }


def test_exchanges_add_up_to_the_internal_exchange_code_category():
    engine = _engine()
    profile = engine.getGraphProfile()
    total = np.zeros(profile["target"]["numTiles"], np.int64)
    for parts in profile["exchanges"]["memoryByInstruction"]:
        for per_tile in parts.values():
            total += np.asarray(per_tile)
    by_cat = category_totals(profile["memory"]["byCategory"])
    assert total.tolist() == by_cat["internalExchangeCode"].tolist()
    assert total.sum() > 0


def test_code_bytes_by_tile_is_each_exchanges_code_on_every_tile():
    """``exchanges.codeBytesByTile`` (the name Poplar's profile gives each exchange's
    code, as a Graphcore tool reads it): worked out from the copies' layout."""
    engine = _engine()
    profile = engine.getGraphProfile()
    code = engine._state.target.config.code
    base, per = code.exchange_code_base_bytes, code.exchange_code_bytes_per_message
    n = profile["target"]["numTiles"]
    first, second = (np.zeros(n, np.int64) for _ in range(2))
    first[[0, 3]] = base + per  # tile 0 sends one region, tile 3 receives from one tile
    second[[1, 2]] = base + per
    second[3] = base + 2 * per  # two senders
    got = profile["exchanges"]["codeBytesByTile"]
    assert got == [first.tolist(), second.tolist()]
    by_cat = category_totals(profile["memory"]["byCategory"])
    assert (first + second).tolist() == by_cat["internalExchangeCode"].tolist()
