"""The tile of each element: held in the narrowest integer type that fits the device's
tile numbers, and as runs once the graph is compiled; values, cycles and traces are
those of the int32 array it replaces."""

from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pytest

from ipusim.config import load_config
from poplar_api import Graph, graph_state
from poplar_api.errors import GraphError
from poplar_api.graph_state import _Space, tile_dtype
from poplar_api.vertices import UNMAPPED
from tests.test_poplin import run_product


@pytest.mark.parametrize(
    ("num_tiles", "dtype"),
    [
        (1, np.int16),
        (4 * 1472, np.int16),  # four Mk2 IPUs
        (22 * 1472, np.int16),  # 32,384 tiles: tile 32,383 fits
        (32768, np.int16),  # tiles 0 to 32,767: the largest int16
        (32769, np.int32),  # tile 32,768 does not fit
        (64 * 1472, np.int32),  # a POD64
    ],
)
def test_tile_dtype_is_the_narrowest_holding_every_tile_and_unmapped(num_tiles, dtype):
    got = tile_dtype(num_tiles)
    assert got == np.dtype(dtype)
    info = np.iinfo(got)
    assert info.min <= UNMAPPED and num_tiles - 1 <= info.max


def test_tile_dtype_refuses_a_device_without_tiles():
    with pytest.raises(GraphError, match=r"0 tiles.*1 to"):
        tile_dtype(0)


def test_a_space_of_a_large_device_keeps_its_highest_tile():
    space = _Space(64 * 1472)
    base = space.allocate(3, 0)
    space.tile[base : base + 3] = [0, 64 * 1472 - 1, UNMAPPED]
    assert space.tile[:3].tolist() == [0, 94207, -1]


def _mapped_space(rng: np.random.Generator) -> tuple[_Space, np.ndarray]:
    """A space of 10,000 elements mapped in runs of random lengths to random tiles,
    some unmapped, and the int64 tile of each element."""
    space = _Space(5888)
    space.allocate(10_000, 0)
    lengths = rng.integers(1, 60, 400)
    tiles = np.repeat(rng.integers(-1, 5888, lengths.size), lengths)[:10_000]
    tiles = np.pad(tiles, (0, 10_000 - tiles.size), constant_values=7)
    space.tile[:10_000] = tiles
    return space, tiles.astype(np.int64)


def test_compacted_tiles_read_as_the_array_did():
    rng = np.random.default_rng(5)
    space, want = _mapped_space(rng)
    starts, values = space.runs()
    assert np.array_equal(np.repeat(values, np.diff(np.append(starts, 10_000))), want)
    space.compact()
    assert space._tile.size == 0  # the array is freed
    ids = rng.integers(0, 10_000, 3000)
    assert np.array_equal(space.tiles_of(ids), want[ids])
    assert np.array_equal(space.tiles_of(slice(17, 9000, 7)), want[17:9000:7])
    # pickled compacted (an executable file) and loaded, then made again on demand
    loaded = pickle.loads(pickle.dumps(space))
    assert np.array_equal(loaded.tiles_of(ids), want[ids])
    assert np.array_equal(space.tile[:10_000], want)
    assert space._runs is None
    # writes after compaction land in the array made again
    space.tile[5] = 3
    space.allocate(10, 1)
    assert space.tile[5] == 3 and (space.tile[10_000:10_010] == UNMAPPED).all()


@pytest.mark.parametrize("num_tiles", [5888, 64 * 1472])  # int16 and int32 tile arrays
def test_wide_tiles_of_ids_are_the_tiles_in_int64(num_tiles):
    """The compiled gather (``wide_tiles_of``) against numpy's, for ids of every form a
    tensor's index takes: ascending, scattered, strided, read-only, 2-D, empty; and for
    a slice and a compacted space, which take numpy's path."""
    rng = np.random.default_rng(11)
    space = _Space(num_tiles)
    space.allocate(10_000, 0)
    want = rng.integers(-1, num_tiles, 10_000)
    space.tile[:10_000] = want
    scattered = rng.integers(0, 10_000, 3000)
    frozen = np.arange(40, 4040)
    frozen.flags.writeable = False
    cases = [scattered, scattered[::3], frozen, scattered[:2400].reshape(40, 60), frozen[:0]]
    for ids in [*cases, slice(17, 9000, 7)]:
        got = space.wide_tiles_of(ids)
        assert got.dtype == np.int64 and np.array_equal(got, want[ids])
    space.compact()
    assert np.array_equal(space.wide_tiles_of(scattered), want[scattered])


def test_executables_saved_as_tile_and_run_length_load():
    # the earlier pickled form: (tile of each run, run lengths)
    space = _Space(8)
    state = {"size": 6, "var_bases": [0], "var_ids": [0]}
    state["tile"] = (np.array([3, -1, 2], np.int32), np.array([2, 3, 1], np.int64))
    space.__setstate__(state)
    assert space.tiles_of(np.arange(6)).tolist() == [3, 3, -1, -1, -1, 2]
    assert space.tile[:6].tolist() == [3, 3, -1, -1, -1, 2]


def _matmul_run(tiles: int) -> tuple[np.ndarray, str, Graph]:
    """A [12,40] x [40,20] matMul on ``tiles`` tiles, its inputs written and result read
    by the host: the product, the trace's fingerprint and the graph."""
    config = load_config("tiny", {"tile.tiles_per_ipu": tiles})
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((12, 40), np.float32), rng.standard_normal((40, 20), np.float32)
    got, engine, graph = run_product(config, x, y, layout="created")
    np.testing.assert_allclose(got, x @ y, rtol=1e-5, atol=1e-5)
    return got, engine.getTrace().fingerprint(), graph


def test_int16_and_compacted_tiles_give_the_int32_runs_values_and_trace(monkeypatch):
    got, fingerprint, graph = _matmul_run(8)
    spaces = graph._state.spaces.values()
    assert {sp._tile.dtype for sp in spaces} == {np.dtype(np.int16)}
    # compiled, loaded, written, run and read without the arrays made again
    assert all(sp._runs is not None for sp in spaces)
    monkeypatch.setattr(graph_state, "tile_dtype", lambda n: np.dtype(np.int32))
    monkeypatch.setattr(_Space, "compact", lambda self, changes=None: None)
    want, want_fingerprint, graph32 = _matmul_run(8)
    assert {sp.tile.dtype for sp in graph32._state.spaces.values()} == {np.dtype(np.int32)}
    assert np.array_equal(got, want)
    assert fingerprint == want_fingerprint


def test_tiles_of_a_slice_of_a_compacted_space_makes_only_the_slices_ids():
    space = _Space(1472)
    space.allocate(4_000_000, 0)
    space.tile[:4_000_000] = np.arange(4_000_000) // 5000
    space.compact()
    tracemalloc.start()
    got = space.tiles_of(slice(3_000_000, 3_000_010))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got.tolist() == [600] * 10
    assert peak < 100_000  # an id array over the space would be 32 MB


def test_a_growing_space_moves_its_tile_array_rarely_and_keeps_every_tile():
    """Variables of 1 to 30,000 elements, 400 of them (about 6 M elements), one after
    another: the tile array moves (a new array, the tiles copied) a few times only,
    and every element keeps its tile (``UNMAPPED`` until mapped)."""
    rng = np.random.default_rng(3)
    space = _Space(1472)
    want: list[np.ndarray] = []
    moves, array = 0, space.tile
    for var in range(400):
        n = int(rng.integers(1, 30_000))
        base = space.allocate(n, var)
        if var % 2:
            space.tile[base : base + n] = var % 1472
            want.append(np.full(n, var % 1472))
        else:
            want.append(np.full(n, UNMAPPED))
        moves += space.tile is not array
        array = space.tile
    total = space.size
    assert np.array_equal(space.tile[:total], np.concatenate(want))
    assert total > 5_000_000
    assert moves <= 4, moves  # 3 growing eightfold; twice over, 8


def test_a_host_refusing_the_room_gets_a_smaller_array_then_the_error(monkeypatch):
    """When the host refuses ``GROWTH`` times the room needed, the array grows twice
    over, then to exactly what is needed; when that is refused too, the error names
    the tensor and its elements."""
    empty = np.empty
    refuse_above = [0]

    def host(shape, dtype=float):
        if int(shape) > refuse_above[0]:
            raise MemoryError
        return empty(shape, dtype)

    monkeypatch.setattr(graph_state.np, "empty", host)
    space = _Space(1472)
    refuse_above[0] = 2 * 5000
    space.allocate(5000, 0)
    assert space.tile.size == 10_000
    refuse_above[0] = 12_000
    space.allocate(7000, 1)
    assert space.tile.size == 12_000 and space.size == 12_000
    assert (space.tile == UNMAPPED).all()
    refuse_above[0] = 0
    with pytest.raises(GraphError, match=r"tensor 'big': 1 elements are more than this host"):
        space.allocate(1, 2, "big")
