"""Memory placement's per-tile blocks made as one table equal the join of a table each."""

from __future__ import annotations

import numpy as np

from ipusim.tile.memory import ANY, INTERLEAVED, NON_INTERLEAVED, BlockTable
from poplar_api.lowering.memory import _per_tile_blocks, _per_tile_table

COLUMNS = (
    "name", "category", "tile", "size", "element_bytes", "region", "live_first", "live_last",
    "always",
)  # fmt: skip


def _parts(rng: np.random.Generator, nt: int) -> list:
    parts = []
    for k in range(40):
        nbytes = rng.integers(0, 5, nt) * rng.integers(0, 2, nt) * 4
        if k % 7 == 0:
            nbytes[:] = 0  # a part without blocks still names its block and category
        kw = {"region": (ANY, INTERLEAVED, NON_INTERLEAVED)[k % 3], "element_bytes": 1 + k % 4}
        if k % 5 == 0:
            kw["live"] = (k, k + 3)
        name = f"cs{k // 2}"  # two parts of one name, as a compute set's state and lists
        parts.append(_per_tile_blocks(name, ("a", "b", "c")[k % 3], nbytes, **kw))
    return parts


def test_one_table_equals_the_join_of_per_tile_tables() -> None:
    nt = 23
    parts = _parts(np.random.default_rng(5), nt)
    variables = BlockTable.rows("v", "variable", np.arange(nt), np.full(nt, 8))
    expected = BlockTable.concat(
        [
            *(BlockTable.per_tile(p.name, p.category, p.nbytes, p.element_bytes, p.region, p.live)
              for p in parts[:10]),
            variables,
            *(BlockTable.per_tile(p.name, p.category, p.nbytes, p.element_bytes, p.region, p.live)
              for p in parts[10:]),
        ]
    )  # fmt: skip
    got = BlockTable.concat(
        [_per_tile_table(parts[:10], nt), variables, _per_tile_table(parts[10:], nt)]
    )
    assert got.names == expected.names
    assert got.categories == expected.categories
    for column in COLUMNS:
        a, b = getattr(got, column), getattr(expected, column)
        assert a.dtype == b.dtype, column
        np.testing.assert_array_equal(a, b, err_msg=column)


def test_no_parts_give_an_empty_table() -> None:
    assert len(_per_tile_table([], 4)) == 0
