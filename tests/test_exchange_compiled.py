"""Exchange detail in compiled Poplar programs: the bus shared by tile pairs and the
distance cost, each changing a compiled program's exchange cycles by its formula.

The program: a vector of ``N`` floats on one tile, read whole by a vertex on each of
two or more other tiles (a broadcast), so the lowering's exchange planner says which
bytes the tiles of a bus pair both receive (``ir.Exchange.bytes_shared``). The
expected cycles are the exchange formula of docs/machine.md written out here, with the
receive side of each tile of a pair reduced by half of the bytes it shares.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from codelets_common import SumVertex, loaded, mapped, vertex_on

from ipusim import ir
from ipusim.config import load_config
from ipusim.errors import IRValidationError
from ipusim.ir_validation import validate_program
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.lowering import bus

N = 64  # floats read by every reader: 256 bytes
BASE = {
    "tile.columns": 2,  # tiny: 8 tiles, tile i at column i // 4, row i % 4
    "exchange.model": "static",
    "exchange.bytes_per_cycle": 4,
    "exchange.fixed_latency_cycles": 10,
    "exchange.cycles_per_message": 0,
    "exchange.cycles_per_hop": 0,
    "sync.min_sync_delay_cycles": 0,
    "sync.relative_delay": "none",
}


def _exchange_record(readers, overrides: dict, source: int = 0):
    """The on-chip exchange of a program whose vertices read parts of a vector ``x`` of
    ``N`` floats on ``source``: ``readers`` maps a tile to the slice of ``x`` its vertex
    reads (a tuple of tiles: all of ``x``). Returns (IR step, trace record)."""
    if not isinstance(readers, dict):
        readers = dict.fromkeys(readers, slice(None))
    cfg = load_config("tiny", {**BASE, **overrides})
    device = IPUModel(cfg).createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets(SumVertex)
    x = mapped(graph, FLOAT, [N], "x", source)
    cs = graph.addComputeSet("readers")
    for tile, part in readers.items():
        out = mapped(graph, FLOAT, [1], f"out{tile}", tile)
        vertex_on(graph, cs, "SumVertex", {"in": x[part], "out": out[0]}, tile, 10)
    engine = loaded(graph, prog.Execute(cs), device)
    engine.run(0)
    (record,) = [r for r in engine.getTrace().records if r.kind == "exchange"]
    (step,) = [s for s in ir.iter_steps(engine.ir_program) if isinstance(s, ir.Exchange)]
    return step, record


def _formula(receive_bytes: float, per_cycle: float = 4, fixed: int = 10) -> int:
    return math.ceil(receive_bytes / per_cycle) + fixed


@pytest.mark.parametrize("ipus", [1, 2])
def test_a_pair_receiving_a_broadcast_shares_the_bus(ipus: int) -> None:
    """Tiles 2 and 3 (a bus pair) both read ``x`` on tile 0: each receives 256 B, all
    shared; with 2 tiles per bus each takes them in at 8 B per cycle. On a target of
    two IPUs the planner takes its element-by-element path (an element may cross
    IPUs); the answer is the same."""
    base = {"num_ipus": ipus}
    step, one = _exchange_record((2, 3), {**base, "exchange.tiles_per_shared_bus": 1})
    listed = dict(zip(step.tile.tolist(), step.bytes_shared.tolist(), strict=True))
    assert listed == {0: 0, 2: 4 * N, 3: 4 * N}
    _, two = _exchange_record((2, 3), {**base, "exchange.tiles_per_shared_bus": 2})
    for tile in (2, 3):
        assert one.tile_cycles[tile] == _formula(4 * N)
        assert two.tile_cycles[tile] == _formula(4 * N - 4 * N * (1 - 1 / 2))
    # the sender sends the broadcast once: 256 B at its own rate either way
    assert one.tile_cycles[0] == two.tile_cycles[0] == _formula(4 * N)


def test_tiles_of_different_pairs_share_nothing() -> None:
    """Tiles 3 and 4 are in different pairs: no bytes shared, the same cycles."""
    step, one = _exchange_record((3, 4), {"exchange.tiles_per_shared_bus": 1})
    assert step.bytes_shared is None
    _, two = _exchange_record((3, 4), {"exchange.tiles_per_shared_bus": 2})
    np.testing.assert_array_equal(one.tile_cycles, two.tile_cycles)


def test_a_pair_shares_only_what_both_receive() -> None:
    """Tile 2 reads all of ``x``, tile 3 its second half: the pair shares the half."""
    readers = {2: slice(None), 3: slice(N // 2, None)}
    step, record = _exchange_record(readers, {"exchange.tiles_per_shared_bus": 2})
    listed = dict(zip(step.tile.tolist(), step.bytes_shared.tolist(), strict=True))
    assert listed == {0: 0, 2: 2 * N, 3: 2 * N}
    assert record.tile_cycles[2] == _formula(4 * N - 2 * N / 2)
    assert record.tile_cycles[3] == _formula(2 * N - 2 * N / 2)


def test_cycles_per_hop_in_a_compiled_program() -> None:
    """The distance term: a reader ``d`` layout hops from the sender pays
    ``ceil(cycles_per_hop * d)`` more than with no distance cost, and the sender pays
    it for its farthest reader."""
    readers = (1, 7)  # (column, row) (0, 1) and (1, 3): 1 and 1 + 3 = 4 hops from (0, 0)
    hops = {1: 1, 7: 4}
    _, flat = _exchange_record(readers, {"exchange.cycles_per_hop": 0})
    _, far = _exchange_record(readers, {"exchange.cycles_per_hop": 2.5})
    for tile, d in hops.items():
        assert far.tile_cycles[tile] - flat.tile_cycles[tile] == math.ceil(2.5 * d)
    assert far.tile_cycles[0] - flat.tile_cycles[0] == math.ceil(2.5 * max(hops.values()))


@pytest.mark.parametrize("bad", [-1, 4 * N + 1])
def test_shared_bytes_outside_the_received_are_refused(bad: int) -> None:
    step = ir.Exchange(
        name="x",
        tile=[0, 2, 3],
        bytes_sent=[4 * N, 0, 0],
        bytes_received=[0, 4 * N, 4 * N],
        messages_sent=[1, 0, 0],
        messages_received=[0, 1, 1],
        max_distance=[0, 2, 3],
        bytes_shared=[0, bad, 4 * N],
    )
    with pytest.raises(IRValidationError, match="bytes_shared"):
        validate_program(ir.Program((ir.Sequence([step]),)), num_tiles=8, tiles_per_ipu=8)


def test_pair_overlap_against_sets() -> None:
    """The planner's count of what a bus pair both receive, on random id ranges (in
    and out of order, overlapping, split over calls, IPUs of odd and even tile counts),
    against the intersection of Python sets."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        tpi = int(rng.integers(1, 6))
        n = tpi * int(rng.integers(1, 4))
        count = int(rng.integers(1, 30))
        tile = rng.integers(0, n, count)
        lo = rng.integers(0, 40, count)
        hi = lo + rng.integers(1, 10, count)
        cut = int(rng.integers(0, count + 1))
        received_runs = {
            2: [p for p in ((tile[:cut], lo[:cut], hi[:cut]), (tile[cut:], lo[cut:], hi[cut:]))
                if p[0].size]
        }  # fmt: skip
        got = bus.shared_bytes(received_runs, n, tpi)
        ids = [set() for _ in range(n)]
        for t, a, b in zip(tile, lo, hi, strict=True):
            ids[t].update(range(a, b))
        want = np.zeros(n, np.int64)
        for t in range(n):
            partner = t + 1 if (t % tpi) % 2 == 0 else t - 1
            if 0 <= partner < n and partner // tpi == t // tpi and partner != t:
                want[t] = 2 * len(ids[t] & ids[partner])
        np.testing.assert_array_equal(got, want)


def _progressions(elements: np.ndarray, s: int) -> list[tuple[int, int]]:
    """``(first, count)`` of the maximal progressions of stride ``s`` that make up the
    sorted distinct ``elements``, in order of residue then first."""
    out = []
    for r in range(s):
        idx = np.sort(elements[elements % s == r] // s)
        if idx.size:
            cuts = np.flatnonzero(np.diff(idx) != 1) + 1
            for run in np.split(idx, cuts):
                out.append((int(run[0]) * s + r, run.size))
    return out


def test_pair_common_against_sets() -> None:
    """What a bus pair both receive as strided progressions (merged per class, one
    stride a tile), on random element sets of random strides, against the intersection
    of Python sets: a pair of one stride shares its classes' overlaps; a pair of two
    strides, whose spans never meet (as the planner takes them), shares none."""
    from poplar_api.lowering import strided

    rng = np.random.default_rng(11)
    for _ in range(200):
        tpi = int(rng.integers(1, 6))
        n = tpi * int(rng.integers(1, 4))
        rows = []
        ids = [set() for _ in range(n)]
        strides = rng.integers(1, 4, n)
        for t in range(n):
            if rng.random() < 0.2:
                continue  # a tile that receives nothing
            s = int(strides[t])
            even = t - (t % tpi) % 2  # the first tile of t's pair
            base = 0 if strides[even] == s else 10_000  # two strides: spans apart
            elements = np.unique(base + rng.integers(0, 60, int(rng.integers(1, 30))))
            ids[t].update(elements.tolist())
            rows += [(first, c, s, t) for first, c in _progressions(elements, s)]
        if not rows:
            continue
        first, count, stride, tile = (np.array(c, np.int64) for c in zip(*rows, strict=True))
        common = np.zeros(n, np.int64)
        strided.pair_common(first, count, stride, tile, tpi, common)
        want = np.zeros(n, np.int64)
        for t in range(n):
            partner = t + 1 if (t % tpi) % 2 == 0 else t - 1
            if 0 <= partner < n and partner // tpi == t // tpi and partner != t:
                want[t] = len(ids[t] & ids[partner])
        np.testing.assert_array_equal(common, want)


def test_shared_and_unshared_receive_sides_cost_through_one_signature() -> None:
    """The receive side is passed as float64 whether or not a pair shares bytes, so
    both programs are costed by one compiled signature, with the formula's cycles."""
    from ipusim.exchange import internal

    _, plain = _exchange_record((3, 4), {"exchange.tiles_per_shared_bus": 2})
    _, shared = _exchange_record((2, 3), {"exchange.tiles_per_shared_bus": 2})
    for tile in (3, 4):
        assert plain.tile_cycles[tile] == _formula(4 * N)
    assert shared.tile_cycles[2] == _formula(4 * N - 4 * N * (1 - 1 / 2))
    assert len(internal._listed_cycles.signatures) == 1


@pytest.mark.parametrize("per_bus", [1, 2, 4])
def test_listed_receive_side_is_numpys(per_bus: int) -> None:
    """The listed-totals pass works a tile's receive side out itself (received less the
    bus share of its shared bytes); the cycles must be those of the receive side numpy
    makes, passed to the dense pass, on random totals with and without shared bytes."""
    from ipusim.exchange import internal

    rng = np.random.default_rng(per_bus)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        tiles = np.sort(rng.choice(64, n, replace=False)).astype(np.int64)
        sent, received, msg_sent, msg_received, distance = (
            rng.integers(0, 1 << 16, n).astype(np.int64) for _ in range(5)
        )
        shared = (rng.integers(0, 1 << 16, n) * (rng.random(n) < 0.6)).astype(np.int64)
        shared = np.minimum(shared, received)
        for a in (tiles, sent, received, msg_sent, msg_received, distance, shared):
            a.flags.writeable = False  # as the IR's arrays: the one compiled signature
        consts = (float(rng.choice([4.0, 8.0, 3.5])), 10, 0.5, float(rng.integers(0, 4)))
        for given in (shared, internal._NONE_SHARED):
            side = received.astype(np.float64)
            if given.size:
                side = received - given * (1.0 - 1.0 / per_bus)
            want = np.zeros(64, np.int64)
            dense = [np.zeros(64, a.dtype) for a in (sent, side, msg_sent, msg_received)]
            dist = np.zeros(64, np.int64)
            for full, part in zip(dense, (sent, side, msg_sent, msg_received), strict=True):
                full[tiles] = part
            dist[tiles] = distance
            active = np.zeros(64, np.bool_)
            active[tiles] = True
            internal._tile_cycles(want, active, *dense[:2], *dense[2:], dist, *consts)
            got = np.zeros(64, np.int64)
            internal._listed_cycles(
                got, tiles, sent, received, given, 1.0 - 1.0 / per_bus,
                msg_sent, msg_received, distance, *consts,
            )  # fmt: skip
            np.testing.assert_array_equal(got, want)
