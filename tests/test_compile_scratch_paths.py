"""The compile's scratch and packed-prefix paths against the paths they replaced.

* Memory placement skips the always-live blocks packed from address 0 of a region
  (``ipusim.tile.first_fit._after_packed``): placements equal the plainly written
  first fit of ``tests/test_tile_memory.py`` (``reference_allocate``), with packed
  prefixes, empty blocks, wider and non-multiple alignments.
* The exchange planner writes its sort keys and merged intervals over the piece arrays
  it is handed as scratch (``ExchangePlanner.add_pieces(scratch=True)``,
  ``received.tile_sorted_keys(in_place=True)``, ``received.merge_received(scratch=...)``):
  the same exchange, keys and intervals as with fresh arrays.
"""

import numpy as np
import pytest
from test_tile_memory import reference_allocate

from ipusim.tile.memory import ANY, INTERLEAVED, NON_INTERLEAVED, Block, MemorySpec, allocate
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.lowering import received
from poplar_api.lowering.exchange import ExchangePlanner


def _packed_case(seed: int) -> tuple[MemorySpec, list[Block]]:
    """Per tile: many always-live blocks of the minimum alignment, a few
    always-live ones of wider or odd alignment, then blocks of live ranges."""
    rng = np.random.default_rng(seed)
    spec = MemorySpec(2048, 4096, 1024, 8)
    blocks = []
    for tile in range(4):
        for k in range(int(rng.integers(0, 30))):
            size = int(rng.integers(1, 60))
            region = str(rng.choice([ANY, INTERLEAVED, NON_INTERLEAVED]))
            blocks.append(Block(f"a{tile}_{k}", "variable", tile, size, 4, region, None))
        for k in range(int(rng.integers(0, 4))):  # ends the packed prefix of its region
            elem = int(rng.choice([12, 16, 32]))
            blocks.append(Block(f"w{tile}_{k}", "variable", tile, 40, elem, ANY, None))
        for k in range(int(rng.integers(0, 40))):
            lo = int(rng.integers(0, 10))
            size = 0 if rng.random() < 0.1 else int(rng.integers(1, 200))
            elem = int(rng.choice([1, 4, 8, 12, 16]))
            region = str(rng.choice([ANY, INTERLEAVED, NON_INTERLEAVED]))
            live = (lo, lo + int(rng.integers(0, 5)))
            blocks.append(Block(f"b{tile}_{k}", "variable", tile, size, elem, region, live))
    order = rng.permutation(len(blocks))
    return spec, [blocks[i] for i in order]


@pytest.mark.parametrize("seed", range(12))
def test_placement_after_a_packed_prefix_equals_the_plain_first_fit(seed):
    """Blocks after the always-live ones packed from address 0 land where the plain
    first fit over every placed block puts them."""
    spec, blocks = _packed_case(seed)
    got = [(p.region, p.offset) for p in allocate(spec, 4, blocks)]
    assert got == reference_allocate(spec, blocks)


@pytest.mark.parametrize("seed", range(6))
def test_keys_written_over_their_begins_equal_fresh_keys(seed):
    """``tile_sorted_keys(in_place=True)`` gives the keys it gives into a fresh array."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    dst = rng.integers(0, 50, n)
    begin = rng.integers(0, 10_000, n).astype(np.int64)
    other = rng.integers(1, rng.choice([2, 40]), n).astype(np.int64)
    want = received.tile_sorted_keys(dst, begin.copy(), other.copy(), 10_001)
    scratch = begin.copy()
    got = received.tile_sorted_keys(dst, scratch, other.copy(), 10_001, in_place=True)
    assert got[2] == want[2]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert np.shares_memory(got[0], scratch)


def _random_pieces(rng, tiles: int, space: int, n: int):
    dst = np.sort(rng.integers(0, tiles, n)) if rng.random() < 0.5 else rng.integers(0, tiles, n)
    begin = rng.integers(0, space - 40, n).astype(np.int64)
    length = rng.integers(1, rng.choice([2, 40]), n).astype(np.int64)
    return begin, length, dst.astype(np.int64)


def _exchange(planner: ExchangePlanner) -> tuple:
    step = planner.build("x", 0)
    names = ("tile", "bytes_sent", "bytes_received", "messages_sent", "messages_received",
             "max_distance", "senders_received", "bytes_shared")  # fmt: skip
    return tuple(None if getattr(step, k) is None else getattr(step, k).tolist() for k in names)


@pytest.mark.parametrize("seed", range(6))
def test_planning_over_scratch_pieces_equals_planning_over_kept_ones(seed):
    """An exchange planned with its pieces as scratch (keys and intervals written over
    them) equals the one planned with fresh arrays, and a second exchange planned after
    it by the same lowering (its map of tile pairs reused) equals one planned alone."""
    rng = np.random.default_rng(seed)
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    tiles, space = 64, 64 * 312
    v = graph.addVariable(FLOAT, [space], "v")
    graph.mapElements(v, np.repeat(np.arange(tiles), space // tiles))
    state = graph._state  # the lowering's input, as the engine hands it over
    owner = state.space(FLOAT).tile
    remote = _random_pieces(rng, tiles, space, int(rng.integers(1, 4000)))
    ids_tile = owner[remote[0]]
    keep = ids_tile != remote[2]  # no piece starts on its own tile
    begin, length, dst = (a[keep] for a in remote)
    length = np.minimum(length, np.maximum(1, (space // tiles) - begin % (space // tiles)))
    fresh = ExchangePlanner(graph.getTarget(), state)
    fresh.add_pieces(FLOAT, begin.copy(), length.copy(), dst.copy(), owner)
    want = _exchange(fresh)
    planner = ExchangePlanner(graph.getTarget(), state)
    planner.add_pieces(FLOAT, begin.copy(), length.copy(), dst.copy(), owner, scratch=True)
    assert _exchange(planner) == want
    again = ExchangePlanner(graph.getTarget(), state, planner.owners)
    again.add_pieces(FLOAT, begin.copy(), length.copy(), dst.copy(), owner, scratch=True)
    assert _exchange(again) == want
