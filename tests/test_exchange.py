"""On-chip exchange cost.

The base test machine has 8 tiles in 2 columns (4 rows), 4 exchange bytes per cycle:
    tile:   0     1     2     3     4     5     6     7
    (c,r): (0,0) (0,1) (0,2) (0,3) (1,0) (1,1) (1,2) (1,3)
"""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.errors import IRValidationError
from ipusim.exchange.internal import ceil_ratio, internal_exchange_cost


def _cost(cfg, src, dst, nbytes, message=None):
    src = np.asarray(src, dtype=np.int64)
    if message is None:
        message = np.arange(src.size)
    return internal_exchange_cost(
        cfg,
        src,
        np.asarray(dst, dtype=np.int64),
        np.asarray(nbytes, dtype=np.int64),
        np.asarray(message, dtype=np.int64),
    )


def test_single_transfer_both_ends(make_config):
    cost = _cost(make_config(), [0], [1], [100])
    # 100 bytes / 4 B per cycle = 25 cycles at sender and receiver, nothing elsewhere.
    np.testing.assert_array_equal(cost.cycles, [25, 25, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.bytes_sent, [100, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.bytes_received, [0, 100, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.messages_sent, [1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.max_distance, [1, 1, 0, 0, 0, 0, 0, 0])
    assert cost.cycles.dtype == np.int64


def test_fixed_latency(make_config):
    cfg = make_config(exchange={"bytes_per_cycle": 4.0, "fixed_latency_cycles": 10})
    cost = _cost(cfg, [0], [1], [100])
    np.testing.assert_array_equal(cost.cycles, [35, 35, 0, 0, 0, 0, 0, 0])  # 25 + 10


def test_hop_latency(make_config):
    cfg = make_config(exchange={"bytes_per_cycle": 4.0, "cycles_per_hop": 1.5})
    # 0 -> 7: (0,0) -> (1,3), distance 1 + 3 = 4; 1 -> 2: (0,1) -> (0,2), distance 1.
    # tile 0 and 7: ceil(8/4) + ceil(1.5 * 4) = 2 + 6 = 8
    # tile 1 and 2: ceil(8/4) + ceil(1.5 * 1) = 2 + 2 = 4
    cost = _cost(cfg, [0, 1], [7, 2], [8, 8])
    np.testing.assert_array_equal(cost.max_distance, [4, 1, 1, 0, 0, 0, 0, 4])
    np.testing.assert_array_equal(cost.cycles, [8, 4, 4, 0, 0, 0, 0, 8])


def test_farthest_peer_sets_the_distance(make_config):
    cfg = make_config(exchange={"bytes_per_cycle": 4.0, "cycles_per_hop": 1.0})
    # tile 5 = (1,1) sends to 4 = (1,0) (distance 1) and to 3 = (0,3) (distance 1 + 2 = 3)
    cost = _cost(cfg, [5, 5], [4, 3], [4, 4])
    np.testing.assert_array_equal(cost.max_distance, [0, 0, 0, 3, 1, 3, 0, 0])
    # tile 5 sends 8 bytes: 2 + 3 = 5; tile 4: 1 + 1 = 2; tile 3: 1 + 3 = 4
    np.testing.assert_array_equal(cost.cycles, [0, 0, 0, 4, 2, 5, 0, 0])


def test_broadcast_costs_the_sender_once(make_config):
    cost = _cost(make_config(), [0, 0, 0], [1, 2, 3], [40, 40, 40], message=[5, 5, 5])
    # Sender: 40 bytes once -> 10 cycles (not 3 * 40 / 4 = 30); receivers 10 each.
    np.testing.assert_array_equal(cost.bytes_sent, [40, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.messages_sent, [1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.bytes_received, [0, 40, 40, 40, 0, 0, 0, 0])
    np.testing.assert_array_equal(cost.cycles, [10, 10, 10, 10, 0, 0, 0, 0])


def test_distinct_messages_are_counted(make_config):
    # Message 1 broadcast to tiles 1 and 2 (40 B), message 2 to tile 3 (8 B).
    cost = _cost(make_config(), [0, 0, 0], [1, 2, 3], [40, 40, 8], message=[1, 1, 2])
    assert cost.messages_sent[0] == 2
    assert cost.bytes_sent[0] == 40 + 8
    assert cost.cycles[0] == 12  # 48 / 4


def test_receiver_sums_bytes_from_two_senders(make_config):
    cost = _cost(make_config(), [0, 1], [2, 2], [20, 12])
    assert cost.bytes_received[2] == 32
    # tile 2: 32 / 4 = 8; tile 0: 20 / 4 = 5; tile 1: 12 / 4 = 3
    np.testing.assert_array_equal(cost.cycles, [5, 3, 8, 0, 0, 0, 0, 0])


def test_unequal_send_and_receive_takes_the_max(make_config):
    # tile 0 sends 40 B to tile 1 and receives 12 B from tile 2: max(40, 12) / 4 = 10.
    cost = _cost(make_config(), [0, 2], [1, 0], [40, 12])
    assert cost.cycles[0] == 10
    assert cost.cycles[2] == 3  # 12 / 4


def test_ceil_rounding(make_config):
    # 9 bytes at 4 B/cycle: ceil(2.25) = 3
    cost = _cost(make_config(), [0], [1], [9])
    assert cost.cycles[0] == 3 and cost.cycles[1] == 3
    # 10 bytes at 3 B/cycle: ceil(3.33) = 4
    cost = _cost(make_config(exchange={"bytes_per_cycle": 3.0}), [0], [1], [10])
    assert cost.cycles[0] == 4


def test_ceil_ratio_ignores_float_round_off():
    # 21 / 0.7 evaluates to 30.000000000000004 in binary floating point; it is 30.
    assert 21 / 0.7 > 30
    np.testing.assert_array_equal(ceil_ratio(np.array([21, 22]), 0.7), [30, 32])


def test_second_ipu_uses_local_distances(make_config):
    cfg = make_config(num_ipus=2, exchange={"bytes_per_cycle": 4.0, "cycles_per_hop": 1.0})
    # global 8 -> 15 is local 0 -> 7 on IPU 1: distance 4, 4 bytes -> 1 + 4 = 5 cycles
    cost = _cost(cfg, [8], [15], [4])
    assert cost.cycles.shape == (16,)
    assert cost.cycles[8] == 5 and cost.cycles[15] == 5
    assert cost.cycles[:8].sum() == 0


def test_empty_exchange(make_config):
    cost = _cost(make_config(), [], [], [])
    np.testing.assert_array_equal(cost.cycles, np.zeros(8))
    np.testing.assert_array_equal(cost.max_distance, np.zeros(8))


def test_cross_ipu_transfer_is_rejected(make_config):
    cfg = make_config(num_ipus=2)
    with pytest.raises(IRValidationError) as info:
        _cost(cfg, [0, 3], [1, 9], [4, 4])
    text = str(info.value)
    assert "transfer 1" in text and "tile 3" in text and "tile 9" in text
    assert "GlobalExchange" in text
    assert isinstance(info.value, ValueError)


def test_inconsistent_broadcast_is_rejected(make_config):
    with pytest.raises(IRValidationError, match=r"transfer 1 \(message 7\)"):
        _cost(make_config(), [0, 1], [2, 3], [4, 4], message=[7, 7])
    with pytest.raises(IRValidationError, match="12 bytes"):
        _cost(make_config(), [0, 0], [2, 3], [4, 12], message=[7, 7])


def test_bad_arrays_are_rejected(make_config):
    cfg = make_config()
    with pytest.raises(IRValidationError, match="differ in length"):
        _cost(cfg, [0, 1], [2], [4, 4])
    with pytest.raises(IRValidationError, match=r"transfer 0 has dst_tile 8"):
        _cost(cfg, [0], [8], [4])
    with pytest.raises(IRValidationError, match="num_bytes -4"):
        _cost(cfg, [0], [1], [-4])
    with pytest.raises(IRValidationError, match="one message id per transfer"):
        _cost(cfg, [0, 1], [2, 3], [4, 4], message=[0])


@pytest.mark.parametrize("seed", range(6))
def test_random_transfers_match_the_formula(make_config, seed):
    """Random transfers (broadcasts among them, messages in any order) on two IPUs give
    the module's formula, computed here with numpy, to the cycle."""
    cfg = make_config(
        num_ipus=2,
        exchange={
            "bytes_per_cycle": 3.7,
            "fixed_latency_cycles": 5,
            "cycles_per_hop": 0.3,
            "cycles_per_message": 1.1,
        },
    )
    rng = np.random.default_rng(seed)
    tpi, n = cfg.tile.tiles_per_ipu, cfg.num_tiles
    src, dst, nbytes, message = [], [], [], []
    for m in rng.permutation(40):  # message ids out of order
        s = int(rng.integers(n))
        ipu = s // tpi
        size = int(rng.integers(0, 500))
        for d in rng.integers(0, tpi, size=int(rng.integers(1, 4))):  # 1-3 receivers
            src.append(s)
            dst.append(ipu * tpi + int(d))
            nbytes.append(size)
            message.append(int(m))
    src, dst, nbytes, message = map(np.array, (src, dst, nbytes, message))
    cost = _cost(cfg, src, dst, nbytes, message)

    _, first = np.unique(message, return_index=True)
    sent = np.bincount(src[first], weights=nbytes[first], minlength=n)
    received = np.bincount(dst, weights=nbytes, minlength=n)
    msgs = np.bincount(src[first], minlength=n) + np.bincount(dst, minlength=n)
    rows = -(-tpi // cfg.tile.columns)
    a, b = src % tpi, dst % tpi
    dist = np.abs(a // rows - b // rows) + np.abs(a % rows - b % rows)
    far = np.zeros(n, np.int64)
    np.maximum.at(far, src, dist)
    np.maximum.at(far, dst, dist)
    ex = cfg.exchange
    expected = (
        np.ceil(np.round(np.maximum(sent, received) / ex.bytes_per_cycle, 9))
        + ex.fixed_latency_cycles
        + np.ceil(np.round(ex.cycles_per_hop * far, 9))
        + np.ceil(np.round(ex.cycles_per_message * msgs, 9))
    )
    expected[np.bincount(np.concatenate([src, dst]), minlength=n) == 0] = 0
    np.testing.assert_array_equal(cost.cycles, expected.astype(np.int64))
    np.testing.assert_array_equal(cost.bytes_sent, sent)
    np.testing.assert_array_equal(cost.messages_received, np.bincount(dst, minlength=n))
    np.testing.assert_array_equal(cost.max_distance, far)


def test_deferred_totals_are_worked_out_once_and_pickle(make_config):
    """A cost keeps only its cycles until a total is read; then every total is there,
    equal to the checked path's, and the cost pickles with its values."""
    import pickle

    from ipusim.exchange.internal import ExchangeCost

    cfg = make_config()
    cost = _cost(cfg, [0, 0, 5], [1, 2, 4], [100, 100, 8], [3, 3, 9])
    assert "bytes_sent" not in cost.__dict__
    np.testing.assert_array_equal(cost.bytes_sent, [100, 0, 0, 0, 0, 8, 0, 0])
    np.testing.assert_array_equal(cost.messages_received, [0, 1, 1, 0, 1, 0, 0, 0])
    assert "_totals" not in cost.__dict__
    eager = ExchangeCost(**{k: getattr(cost, k) for k in ExchangeCost.__dataclass_fields__})
    back = pickle.loads(pickle.dumps(_cost(cfg, [0, 0, 5], [1, 2, 4], [100, 100, 8], [3, 3, 9])))
    for name in ExchangeCost.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(back, name), getattr(eager, name))
    phase = cost.with_cycles(cost.cycles * 2)
    np.testing.assert_array_equal(phase.cycles, 2 * eager.cycles)
    np.testing.assert_array_equal(phase.bytes_received, eager.bytes_received)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = cost.nonsense
