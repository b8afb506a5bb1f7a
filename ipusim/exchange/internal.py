"""On-chip (internal) exchange: per-tile time of one statically scheduled exchange.

The exchange is compiled ahead of time, so there is no arbitration: a tile is busy for
as long as it takes to push out what it sends or take in what it receives, whichever
is more, plus a fixed latency and a latency that grows with the layout distance to its
farthest peer::

    cycles = ceil(max(bytes_sent, bytes_received) / exchange.bytes_per_cycle)
             + exchange.fixed_latency_cycles
             + ceil(exchange.cycles_per_hop * max_distance)
             + ceil(exchange.cycles_per_message * (messages_sent + messages_received))

Data moves in both directions at once, so the bytes count as the larger of the two;
the set-up of each message is exchange code run by the tile's one instruction stream,
so messages sent and received add up.

A broadcast (several transfers sharing one message id) costs the sender once.

**Exchange bus shared by tile pairs** (``exchange.tiles_per_shared_bus``, 2 on Mk2 and
Bow). The tiles ``2k`` and ``2k + 1`` of an IPU share one exchange bus, twice as wide as
one tile's port: data that both tiles of a pair receive in the same message arrives at
``tiles_per_shared_bus * bytes_per_cycle``. This is the rule of Poplibs' exchange
estimator (graphcore/poplibs, ``popops::modelling::ExchangeEstimator::getCycles``:
the speed-up is the greatest common divisor of the consecutive tiles receiving the same
data and the tiles sharing a bus, with 2 tiles per bus asserted). So a tile's receive
side counts ``bytes_received - (1 - 1/tiles_per_shared_bus) * bytes shared with its
pair``. An exchange given as transfers says it through its message ids; one given as
per-tile totals (what lowering emits) through ``Exchange.bytes_shared``, the bytes of
each tile that its partner receives too (the lowering's exchange planner works them
out from the element ids both tiles receive: one sender sends an element once, so the
same element landing on both tiles of a pair is one message on their shared bus).
Totals without ``bytes_shared`` get no speed-up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ipusim import ir
from ipusim.config import MachineConfig
from ipusim.errors import IRValidationError
from ipusim.tile.layout import tile_distance, tile_rows

__all__ = ["ExchangeCost", "ceil_ratio", "exchange_cost", "internal_exchange_cost"]

_MAX_LISTED = 5


def ceil_ratio(numerator: np.ndarray, denominator: float) -> np.ndarray:
    """``ceil(numerator / denominator)`` as int64, robust to float round-off.

    The quotient is rounded to 9 decimals before the ceiling so that, for example,
    ``79.80000000000001`` and ``25.000000000000004`` do not gain a cycle (the same
    convention as the config's derived cycle counts).
    """
    q = np.asarray(numerator, dtype=np.float64) / float(denominator)
    return np.ceil(np.round(q, 9)).astype(np.int64)


@dataclass(frozen=True)
class ExchangeCost:
    """Per-tile cost of one internal exchange.

    Attributes
    ----------
    cycles
        int64[num_tiles]: exchange cycles of each tile (0 without traffic).
    bytes_sent
        int64[num_tiles]: bytes sent; a broadcast is counted once at the sender.
    bytes_received
        int64[num_tiles]: bytes received.
    messages_sent
        int64[num_tiles]: distinct messages sent.
    max_distance
        int64[num_tiles]: layout distance to the farthest peer (0 if none).
    messages_received
        int64[num_tiles]: messages received (one per transfer landing on the tile).
    """

    cycles: np.ndarray
    bytes_sent: np.ndarray
    bytes_received: np.ndarray
    messages_sent: np.ndarray
    max_distance: np.ndarray
    messages_received: np.ndarray

    @classmethod
    def deferred(
        cls, cycles: np.ndarray, totals: Callable[[], tuple[np.ndarray, ...]]
    ) -> ExchangeCost:
        """A cost whose per-tile totals are worked out by ``totals()`` when first read.

        A run keeps the cost of every distinct exchange; most only need ``cycles``, so
        the five totals (in field order after ``cycles``) are not held until asked for.
        """
        cost = object.__new__(cls)
        object.__setattr__(cost, "cycles", cycles)
        object.__setattr__(cost, "_totals", totals)
        return cost

    def __getattr__(self, name: str) -> Any:
        # called only for attributes not set: the totals of a deferred cost
        totals = self.__dict__.get("_totals")
        if totals is None or name not in _TOTAL_FIELDS:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        for key, value in zip(_TOTAL_FIELDS, totals(), strict=True):
            object.__setattr__(self, key, value)
        del self.__dict__["_totals"]
        return self.__dict__[name]

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ("cycles", *_TOTAL_FIELDS)}

    def with_cycles(self, cycles: np.ndarray) -> ExchangeCost:
        """The same exchange with other per-tile cycles (totals still deferred)."""
        totals = self.__dict__.get("_totals")
        if totals is not None:
            return ExchangeCost.deferred(cycles, totals)
        return dataclasses.replace(self, cycles=cycles)


#: The per-tile totals of an :class:`ExchangeCost`, in field order.
_TOTAL_FIELDS = (
    "bytes_sent",
    "bytes_received",
    "messages_sent",
    "max_distance",
    "messages_received",
)


def _as_1d(name: str, values: object, problems: list[str]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        problems.append(f"exchange: '{name}' must be 1-D, got shape {arr.shape}")
    elif arr.size and not np.issubdtype(arr.dtype, np.integer):
        problems.append(f"exchange: '{name}' must be integers, got dtype {arr.dtype}")
    return arr


def _list_indices(indices: np.ndarray) -> str:
    shown = ", ".join(str(int(i)) for i in indices[:_MAX_LISTED])
    more = f" and {indices.size - _MAX_LISTED} more" if indices.size > _MAX_LISTED else ""
    return shown + more


def validate_transfers(
    cfg: MachineConfig,
    src_tile: object,
    dst_tile: object,
    num_bytes: object,
    what: str = "exchange",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check parallel transfer arrays and return them as int64.

    Raises
    ------
    IRValidationError
        Listing every problem: shapes, dtypes, tiles outside the machine, negative
        byte counts.
    """
    problems: list[str] = []
    src = _as_1d("src_tile", src_tile, problems)
    dst = _as_1d("dst_tile", dst_tile, problems)
    nbytes = _as_1d("num_bytes", num_bytes, problems)
    if problems:
        raise IRValidationError(problems)
    if not src.shape == dst.shape == nbytes.shape:
        raise IRValidationError(
            [
                f"{what}: transfer arrays differ in length (src_tile {src.shape[0]}, "
                f"dst_tile {dst.shape[0]}, num_bytes {nbytes.shape[0]}); one entry per "
                "transfer is required"
            ]
        )
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    nbytes = nbytes.astype(np.int64, copy=False)
    for name, arr in (("src_tile", src), ("dst_tile", dst)):
        bad = np.flatnonzero((arr < 0) | (arr >= cfg.num_tiles))
        if bad.size:
            k = int(bad[0])
            problems.append(
                f"{what}: transfer {k} has {name} {int(arr[k])}, outside the machine's "
                f"tiles [0, {cfg.num_tiles}) (transfers {_list_indices(bad)})"
            )
    bad = np.flatnonzero(nbytes < 0)
    if bad.size:
        k = int(bad[0])
        problems.append(
            f"{what}: transfer {k} has num_bytes {int(nbytes[k])}; byte counts must be >= 0 "
            f"(transfers {_list_indices(bad)})"
        )
    if problems:
        raise IRValidationError(problems)
    return src, dst, nbytes


def internal_exchange_cost(
    cfg: MachineConfig,
    src_tile: np.ndarray,
    dst_tile: np.ndarray,
    num_bytes: np.ndarray,
    message: np.ndarray,
) -> ExchangeCost:
    """Per-tile cost of one internal exchange given as parallel transfer arrays.

    Parameters
    ----------
    cfg
        Machine config (``exchange`` section and the tile layout).
    src_tile, dst_tile
        int[num_transfers]: global tile ids (tile ``t`` is on IPU
        ``t // tiles_per_ipu``). Source and destination must be on the same IPU.
    num_bytes
        int[num_transfers]: bytes of each transfer.
    message
        int[num_transfers]: message id. Transfers sharing an id form a broadcast: they
        must have the same source and the same size, and the sender pays once.

    Returns
    -------
    ExchangeCost
        Per-tile cycles, bytes, distinct messages and farthest distance. A tile that
        takes part in any transfer (as source or destination) pays the fixed latency;
        tiles without any transfer get 0 cycles.

    Raises
    ------
    IRValidationError
        If the arrays are inconsistent, a tile id is outside the machine, a transfer
        crosses IPUs, or the transfers of one message disagree on source or size.
    """
    fast = _planned(cfg, src_tile, dst_tile, num_bytes, message)
    if fast is not None:
        return fast
    # something is wrong: the checks below name it
    src, dst, nbytes = validate_transfers(cfg, src_tile, dst_tile, num_bytes)
    problems: list[str] = []
    msg = _as_1d("message", message, problems)
    if not problems and msg.shape != src.shape:
        problems.append(
            f"exchange: 'message' has {msg.shape[0]} entries but there are "
            f"{src.shape[0]} transfers; one message id per transfer is required"
        )
    if problems:
        raise IRValidationError(problems)
    msg = msg.astype(np.int64, copy=False)

    tiles_per_ipu = cfg.tile.tiles_per_ipu
    cross = np.flatnonzero(src // tiles_per_ipu != dst // tiles_per_ipu)
    if cross.size:
        problems.extend(
            f"exchange: transfer {int(k)} goes from tile {int(src[k])} (IPU "
            f"{int(src[k]) // tiles_per_ipu}) to tile {int(dst[k])} (IPU "
            f"{int(dst[k]) // tiles_per_ipu}); an internal exchange stays on one IPU, "
            "use a GlobalExchange for inter-IPU transfers"
            for k in cross[:_MAX_LISTED]
        )
        if cross.size > _MAX_LISTED:
            problems.append(f"exchange: {cross.size - _MAX_LISTED} more inter-IPU transfers")
        raise IRValidationError(problems)

    _, first, inverse = np.unique(msg, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    head = first[inverse]
    mismatch = np.flatnonzero((src != src[head]) | (nbytes != nbytes[head]))
    if mismatch.size:
        k = int(mismatch[0])
        h = int(head[k])
        raise IRValidationError(
            [
                f"exchange: transfer {k} (message {int(msg[k])}) has source tile "
                f"{int(src[k])} and {int(nbytes[k])} bytes, but transfer {h} of the same "
                f"message has source tile {int(src[h])} and {int(nbytes[h])} bytes; the "
                "transfers of one broadcast message share source and size "
                f"(mismatching transfers {_list_indices(mismatch)})"
            ]
        )

    n = cfg.num_tiles
    bytes_sent = np.zeros(n, dtype=np.int64)
    np.add.at(bytes_sent, src[first], nbytes[first])
    messages_sent = np.bincount(src[first], minlength=n).astype(np.int64)
    bytes_received = np.zeros(n, dtype=np.int64)
    np.add.at(bytes_received, dst, nbytes)

    distance = tile_distance(cfg.tile, src % tiles_per_ipu, dst % tiles_per_ipu)
    max_distance = np.zeros(n, dtype=np.int64)
    np.maximum.at(max_distance, src, distance)
    np.maximum.at(max_distance, dst, distance)

    active = np.zeros(n, dtype=bool)
    active[src] = True
    active[dst] = True
    messages_received = np.bincount(dst, minlength=n).astype(np.int64)
    receive_side = _bus_receive_bytes(cfg, dst, nbytes, msg, bytes_received)
    totals = (bytes_sent, receive_side, messages_sent, messages_received, max_distance)
    return ExchangeCost(
        cycles=_cycles(cfg, active, *totals),
        bytes_sent=bytes_sent,
        bytes_received=bytes_received,
        messages_sent=messages_sent,
        max_distance=max_distance,
        messages_received=messages_received,
    )


def _bus_receive_bytes(
    cfg: MachineConfig,
    dst: np.ndarray,
    nbytes: np.ndarray,
    message: np.ndarray,
    received: np.ndarray,
) -> np.ndarray:
    """Bytes each tile's receive side is charged, with the exchange bus shared by tile
    pairs (module docstring): ``received`` less ``(1 - 1/tiles_per_shared_bus)`` of the
    bytes that the tile's bus partner receives in the same message. ``received`` itself
    when no bus is shared or no message lands on both tiles of a pair."""
    per_bus = int(cfg.exchange.tiles_per_shared_bus)
    if per_bus < 2 or dst.size < 2:
        return received
    n = cfg.num_tiles
    tiles_per_ipu = cfg.tile.tiles_per_ipu
    _, rank = np.unique(message, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    keys = np.unique(rank * n + dst)
    local = dst % tiles_per_ipu
    partner = dst - local % per_bus + (local % per_bus + 1) % per_bus  # per_bus is 2
    ok = (partner // tiles_per_ipu == dst // tiles_per_ipu) & (partner < n) & (partner != dst)
    probe = rank * n + partner
    found = np.searchsorted(keys, probe)
    found = np.minimum(found, keys.size - 1)
    shared = ok & (keys[found] == probe)
    if not shared.any():
        return received
    shared_bytes = np.bincount(dst[shared], weights=nbytes[shared], minlength=n)
    return received - shared_bytes * (1.0 - 1.0 / per_bus)


def _cycles(
    cfg: MachineConfig,
    active: np.ndarray,
    bytes_sent: np.ndarray,
    bytes_received: np.ndarray,
    messages_sent: np.ndarray,
    messages_received: np.ndarray,
    max_distance: np.ndarray,
) -> np.ndarray:
    """int64[num_tiles] cycles of the tiles from their totals (0 where not ``active``)."""
    ex = cfg.exchange
    cycles = np.zeros(active.shape[0], np.int64)
    _tile_cycles(
        cycles,
        active,
        bytes_sent,
        # float64 whether or not bus sharing made them fractional: one compiled pass
        np.asarray(bytes_received, np.float64),
        messages_sent,
        messages_received,
        max_distance,
        float(ex.bytes_per_cycle),
        int(ex.fixed_latency_cycles),
        float(ex.cycles_per_hop),
        float(ex.cycles_per_message),
    )
    return cycles


# The compiled passes below compute exactly what the formula in the module docstring
# says, with ``ceil_ratio``'s rounding (numpy's round to 9 decimals: scale, rint,
# unscale), so the fast path and the checked one agree to the cycle.
@numba.njit(cache=True, inline="always")
def _ceil9(q):  # pragma: no cover - compiled
    if q == 0.0:  # the same, without the divisions (a cost term the config sets to 0)
        return np.int64(0)
    return np.int64(np.ceil(np.rint(q * 1e9) / 1e9))


#: ``shared`` of :func:`_listed_cycles` when no pair shares bytes (read-only, as the IR's
#: arrays are: one compiled signature)
_NONE_SHARED = np.zeros(0, np.int64)
_NONE_SHARED.flags.writeable = False


@numba.njit(cache=True, inline="always")
def _cycles_of(sent, received, msg_sent, msg_received, distance, bpc, fixed, hop, per_msg):
    # pragma: no cover - compiled; the formula of the module docstring for one tile
    return (
        _ceil9(max(sent, received) / bpc)
        + fixed
        + _ceil9(hop * distance)
        + _ceil9(per_msg * (msg_sent + msg_received))
    )


@numba.njit(cache=True)
def _tile_cycles(
    cycles, active, sent, received, msg_sent, msg_received, distance, bpc, fixed, hop, per_msg
):  # pragma: no cover - compiled
    for t in range(cycles.shape[0]):
        if active[t]:
            cycles[t] = _cycles_of(
                sent[t], received[t], msg_sent[t], msg_received[t], distance[t],
                bpc, fixed, hop, per_msg,
            )  # fmt: skip


@numba.njit(cache=True)
def _listed_cycles(
    cycles,
    tiles,
    sent,
    received,
    shared,
    share,
    msg_sent,
    msg_received,
    distance,
    bpc,
    fixed,
    hop,
    per_msg,
):  # pragma: no cover - compiled
    """``_tile_cycles`` for totals given per listed tile (the other tiles take 0). A
    tile's receive side is ``received[i] - shared[i] * share`` (float64, as numpy's
    ``received - shared * share`` gives it) when ``shared`` lists its bytes shared with
    its bus partner, else its ``received`` bytes (``shared`` empty)."""
    some = shared.shape[0] > 0
    for i in range(tiles.shape[0]):
        receive = np.float64(received[i])
        if some:
            receive = received[i] - shared[i] * share
        cycles[tiles[i]] = _cycles_of(
            sent[i], receive, msg_sent[i], msg_received[i], distance[i],
            bpc, fixed, hop, per_msg,
        )  # fmt: skip


@numba.njit(cache=True)
def phase_cycles(cycles, tiles_per_ipu):  # pragma: no cover - compiled
    """Per-tile cycles of an exchange run as one phase of each IPU: every tile of an
    IPU takes as long as the IPU's slowest tile (``cycles`` per tile, a new array)."""
    out = np.empty_like(cycles)
    for lo in range(0, cycles.shape[0], tiles_per_ipu):
        slowest = cycles[lo]
        for t in range(lo + 1, lo + tiles_per_ipu):
            slowest = max(slowest, cycles[t])
        out[lo : lo + tiles_per_ipu] = slowest
    return out


@numba.njit(cache=True)
def _transfer_totals(
    num_tiles, tiles_per_ipu, rows, src, dst, nbytes, msg
):  # pragma: no cover - compiled
    """Per-tile totals of checked-as-we-go transfers; ``ok`` False at the first problem
    (a tile outside the machine, negative bytes, a transfer between IPUs, a broadcast
    whose transfers differ in source or size)."""
    n = src.shape[0]
    sent = np.zeros(num_tiles, np.int64)
    received = np.zeros(num_tiles, np.int64)
    msg_sent = np.zeros(num_tiles, np.int64)
    msg_received = np.zeros(num_tiles, np.int64)
    distance = np.zeros(num_tiles, np.int64)
    active = np.zeros(num_tiles, np.bool_)
    head = np.arange(n)  # the first transfer of each transfer's message
    distinct = True
    for k in range(1, n):
        if msg[k] <= msg[k - 1]:
            distinct = False
            break
    if not distinct:
        order = np.argsort(msg, kind="mergesort")
        for i in range(1, n):
            a, b = order[i - 1], order[i]
            if msg[a] == msg[b]:
                head[b] = head[a]
    for k in range(n):
        s, d, b = src[k], dst[k], nbytes[k]
        if not (0 <= s < num_tiles and 0 <= d < num_tiles) or b < 0:
            return False, sent, received, msg_sent, msg_received, distance, active
        if s // tiles_per_ipu != d // tiles_per_ipu:
            return False, sent, received, msg_sent, msg_received, distance, active
        h = head[k]
        if h == k:
            sent[s] += b
            msg_sent[s] += 1
        elif src[h] != s or nbytes[h] != b:
            return False, sent, received, msg_sent, msg_received, distance, active
        received[d] += b
        msg_received[d] += 1
        ls, ld = s % tiles_per_ipu, d % tiles_per_ipu
        dist = abs(ls // rows - ld // rows) + abs(ls % rows - ld % rows)
        distance[s] = max(distance[s], dist)
        distance[d] = max(distance[d], dist)
        active[s] = True
        active[d] = True
    return True, sent, received, msg_sent, msg_received, distance, active


def _planned(
    cfg: MachineConfig, src: object, dst: object, nbytes: object, msg: object
) -> ExchangeCost | None:
    """The cost of well-formed transfers in one compiled pass, or None when anything is
    wrong with them (the checked path then says what)."""
    arrays = [np.asarray(a) for a in (src, dst, nbytes, msg)]
    n = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != n or (n and a.dtype.kind not in "iu") for a in arrays):
        return None
    arrays = [ir.read_only(a.astype(np.int64, copy=False)) for a in arrays]
    shape = (cfg.num_tiles, cfg.tile.tiles_per_ipu, tile_rows(cfg.tile))

    def totals() -> tuple[np.ndarray, ...]:
        _, sent, received, msg_sent, msg_received, distance, _ = _transfer_totals(*shape, *arrays)
        return sent, received, msg_sent, distance, msg_received

    first = _transfer_totals(*shape, *arrays)
    if not first[0]:
        return None
    sent, received, msg_sent, msg_received, distance, active = first[1:]
    received = _bus_receive_bytes(cfg, arrays[1], arrays[2], arrays[3], received)
    cycles = _cycles(cfg, active, sent, received, msg_sent, msg_received, distance)
    return ExchangeCost.deferred(cycles, totals)


def exchange_cost(cfg: MachineConfig, step: Any) -> ExchangeCost:
    """Cost of an IR Exchange step, given as transfers or as per-tile totals."""
    if step.tile is None:
        return internal_exchange_cost(
            cfg, step.src_tile, step.dst_tile, step.num_bytes, step.message
        )
    n = cfg.num_tiles
    tiles = np.asarray(step.tile, np.int64)
    sparse = (
        step.bytes_sent,
        step.bytes_received,
        step.messages_sent,
        step.messages_received,
        step.max_distance,
    )

    def dense() -> list[np.ndarray]:
        out = []
        for values in sparse:
            full = np.zeros(n, np.int64)
            full[tiles] = values
            out.append(full)
        return out

    def totals() -> tuple[np.ndarray, ...]:
        sent, received, msg_sent, msg_received, distance = dense()
        return sent, received, msg_sent, distance, msg_received

    ex = cfg.exchange
    cycles = np.zeros(n, np.int64)
    per_bus = int(ex.tiles_per_shared_bus)
    # the receive side is worked out in the compiled pass, as a float64 whether or not
    # a pair shares bytes (exact below 2**53; the formula takes the larger of sent and
    # received as a float): one compiled signature, and no array made per exchange
    shared = step.bytes_shared
    if per_bus <= 1 or shared is None:
        shared = _NONE_SHARED
    _listed_cycles(
        cycles,
        tiles,
        sparse[0],
        sparse[1],
        shared,
        1.0 - 1.0 / max(per_bus, 1),
        *sparse[2:],
        float(ex.bytes_per_cycle),
        int(ex.fixed_latency_cycles),
        float(ex.cycles_per_hop),
        float(ex.cycles_per_message),
    )
    return ExchangeCost.deferred(cycles, totals)
