"""The sync controller: when every tile of a group leaves a sync.

The controller releases a group once its last tile has arrived (plus the extra cycles
of an external or host sync). The release signal then reaches tile ``i`` after its sync
delay ``min_sync_delay_cycles + relative_delay[i]``, where the relative delay grows
with the tile's layout distance to the controller (``sync.relative_delay: auto``) or is
zero (``none``, as on the IPU Model devices). A tile's sync cycles are its wait,
``exit - arrival``, idle time included.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ipusim import ir
from ipusim.config import MachineConfig
from ipusim.errors import IRValidationError
from ipusim.sync.placement import external_sync_cycles
from ipusim.tile.layout import tile_distance

__all__ = ["relative_sync_delays", "sync_delays", "sync_extra_cycles", "sync_release"]

#: The kinds of sync the controller releases (those of :class:`ipusim.ir.SyncKind`).
SYNC_KINDS: tuple[str, ...] = tuple(k.value for k in ir.SyncKind)


def relative_sync_delays(cfg: MachineConfig) -> np.ndarray:
    """Relative sync delay of each local tile of one IPU.

    With ``sync.relative_delay == "auto"`` the delay is
    ``np.rint(max_relative_delay_cycles * d / d_max)``, ``d`` being the layout distance
    to ``sync.controller_tile`` and ``d_max`` the largest such distance (all zeros when
    ``d_max == 0``). ``np.rint`` rounds halves to even (2.5 -> 2, 3.5 -> 4).
    With ``"none"`` every delay is 0.

    Returns
    -------
    numpy.ndarray
        int64[tiles_per_ipu].
    """
    tiles = cfg.tile.tiles_per_ipu
    if cfg.sync.relative_delay == "none":
        return np.zeros(tiles, dtype=np.int64)
    d = tile_distance(cfg.tile, np.arange(tiles, dtype=np.int64), cfg.sync.controller_tile)
    d_max = int(d.max())
    if d_max == 0:
        return np.zeros(tiles, dtype=np.int64)
    return np.rint(cfg.sync.max_relative_delay_cycles * d / d_max).astype(np.int64)


def sync_delays(cfg: MachineConfig) -> np.ndarray:
    """Sync delay of every tile of the machine.

    Returns
    -------
    numpy.ndarray
        int64[num_tiles]: ``min_sync_delay_cycles + relative delay`` of the tile's local
        id, the same pattern on every IPU.
    """
    per_ipu = cfg.sync.min_sync_delay_cycles + relative_sync_delays(cfg)
    return np.tile(per_ipu, cfg.num_ipus).astype(np.int64)


def sync_release(arrival: np.ndarray, delays: np.ndarray, extra_cycles: int = 0) -> np.ndarray:
    """Exit time of every tile of a group from one sync.

    Parameters
    ----------
    arrival
        int[tiles]: time each tile reaches the sync.
    delays
        int[tiles]: sync delay of each of those tiles (see :func:`sync_delays`).
    extra_cycles
        Extra cycles before the release (external or host sync; see
        :func:`sync_extra_cycles`).

    Returns
    -------
    numpy.ndarray
        int64[tiles]: ``max(arrival) + extra_cycles + delays[i]``; empty for an empty
        group.

    Raises
    ------
    IRValidationError
        If the arrays differ in shape or ``extra_cycles`` is negative.
    """
    arrival = np.asarray(arrival)
    delays = np.asarray(delays)
    if arrival.shape != delays.shape:
        raise IRValidationError(
            [
                f"sync: arrival times have shape {arrival.shape} but delays have shape "
                f"{delays.shape}; pass one delay per arriving tile (index sync_delays(cfg) "
                "by the group's tile ids)"
            ]
        )
    if extra_cycles < 0:
        raise IRValidationError([f"sync: extra_cycles must be >= 0, got {extra_cycles}"])
    if arrival.size == 0:
        return np.zeros(arrival.shape, dtype=np.int64)
    release = int(arrival.max()) + int(extra_cycles)
    return (release + delays).astype(np.int64)


def sync_extra_cycles(cfg: MachineConfig, kind: str, ipus: Iterable[int] | None = None) -> int:
    """Extra cycles the controller adds before releasing a sync of the given kind.

    ``"internal"``: 0; ``"external"``: the sync fabric's path between the IPUs ``ipus``
    (all of the machine when None; :func:`ipusim.sync.placement.external_sync_cycles`,
    ``cfg.global_sync_cycles`` for all IPUs); ``"host"``: ``cfg.sync.host_sync_cycles``.

    Raises
    ------
    IRValidationError
        (a ``ValueError``) for any other kind.
    """
    if kind == ir.SyncKind.INTERNAL:
        return 0
    if kind == ir.SyncKind.EXTERNAL:
        return external_sync_cycles(cfg, ipus)
    if kind == ir.SyncKind.HOST:
        return int(cfg.sync.host_sync_cycles)
    raise IRValidationError(
        [f"sync: unknown sync kind {kind!r}; expected one of {', '.join(SYNC_KINDS)}"]
    )
