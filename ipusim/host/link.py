"""The host link (PCIe or RoCE), shared by every transfer of a machine.

A transfer first pays the link latency (transfers pipeline, so latency does not hold
the link), then needs ``ceil(num_bytes / host_bytes_per_cycle)`` cycles of link work.
Transfers in flight at the same time share the bandwidth equally, so two IPUs
streaming at once each see half the link.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from fractions import Fraction

import numpy as np
import simpy

from ipusim.config import MachineConfig
from ipusim.errors import HostLinkError

__all__ = [
    "HostLink",
    "busy_cycles_of",
    "check_copy_size",
    "stream_copy_cycles",
    "stream_copy_demand",
    "transfer_cycles",
]


def _check_bytes(num_bytes: int, what: str) -> None:
    if num_bytes < 0:
        raise HostLinkError(
            f"host copy '{what}': num_bytes is {num_bytes}; a copy moves >= 0 bytes"
        )


def check_copy_size(cfg: MachineConfig, num_bytes: int, what: str) -> None:
    """Reject a single host copy larger than ``host.max_copy_bytes``.

    Parameters
    ----------
    cfg
        Machine config.
    num_bytes
        Bytes of the copy.
    what
        Name of the stream or program step, used in the message.

    Raises
    ------
    HostLinkError
        If the copy is larger than the limit (or negative).
    """
    _check_bytes(num_bytes, what)
    limit = cfg.host.max_copy_bytes
    if num_bytes > limit:
        raise HostLinkError(
            f"host copy '{what}' moves {num_bytes} bytes, more than host.max_copy_bytes "
            f"({limit} bytes) allowed in one stream copy; hint: split the copy into "
            f"{math.ceil(num_bytes / limit)} or more copies of at most {limit} bytes"
        )


def busy_cycles_of(cfg: MachineConfig, num_bytes: int) -> int:
    """Cycles a transfer of ``num_bytes`` holds the link: ``ceil(bytes / bytes_per_cycle)``."""
    _check_bytes(num_bytes, "transfer")
    return math.ceil(round(num_bytes / cfg.host_bytes_per_cycle, 9))


def transfer_cycles(cfg: MachineConfig, num_bytes: int) -> int:
    """Duration of one host transfer on an otherwise idle link.

    ``host_latency_cycles + ceil(num_bytes / host_bytes_per_cycle)``; a transfer of 0
    bytes takes 0 cycles.
    """
    if num_bytes == 0:
        return 0
    return cfg.host_latency_cycles + busy_cycles_of(cfg, num_bytes)


def stream_copy_demand(
    cfg: MachineConfig, tile: np.ndarray, num_bytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes a stream copy moves over each IPU's host link, and the per-IPU floor.

    The floor is the cycles the busiest tile of the IPU needs at
    ``exchange.bytes_per_cycle``: however fast the link, a tile takes in (or gives
    out) host data no faster than that.

    Returns
    -------
    tuple of numpy.ndarray
        ``(bytes, floor_cycles)``, each int64[num_ipus].
    """
    tpi = cfg.tile.tiles_per_ipu
    ipu = np.asarray(tile, np.int64) // tpi
    nbytes = np.asarray(num_bytes, np.int64)
    total = np.bincount(ipu, weights=nbytes, minlength=cfg.num_ipus)
    busiest = np.zeros(cfg.num_ipus, np.int64)
    np.maximum.at(busiest, ipu, nbytes)
    floor = np.ceil(busiest / cfg.exchange.bytes_per_cycle).astype(np.int64)
    return np.rint(total).astype(np.int64), floor


def stream_copy_cycles(cfg: MachineConfig, tile: np.ndarray, num_bytes: np.ndarray) -> np.ndarray:
    """Cycles of a stream copy on each IPU with the host link to itself (no contention).

    ``latency + max(link work, tile floor)`` for an IPU that moves data, else 0; the
    machine charges the same rule, with the link shared between IPUs.
    """
    total, floor = stream_copy_demand(cfg, tile, num_bytes)
    work = np.array([busy_cycles_of(cfg, int(b)) for b in total], np.int64)
    return np.where(total > 0, cfg.host_latency_cycles + np.maximum(work, floor), 0)


class HostLink:
    """The host link of one machine, shared by all its transfers.

    Concurrent transfers share the bandwidth equally (processor sharing): with ``n``
    transfers in flight each progresses at ``1/n`` of the link rate. Time is kept as
    exact fractions, so finish times depend only on the transfers' start times and
    sizes, never on the order SimPy happens to process simultaneous events.

    Parameters
    ----------
    env
        SimPy environment the transfers run in (time unit: tile cycles).
    cfg
        Machine config (``host`` section, tile clock).

    Attributes
    ----------
    busy_cycles
        Total cycles of link work done so far (``ceil(bytes / bytes_per_cycle)`` per
        transfer).
    """

    def __init__(self, env: simpy.Environment, cfg: MachineConfig) -> None:
        self.env = env
        self.cfg = cfg
        self.busy_cycles: int = 0
        self._active: dict[int, list] = {}  # id -> [remaining work, done event]
        self._next_id = 0
        self._last = Fraction(0)
        self._version = 0

    def transfer(self, num_bytes: int) -> Generator[simpy.Event, object, None]:
        """SimPy process generator moving ``num_bytes`` over the link.

        Waits the latency (transfers pipeline, so latency does not hold the link),
        then needs ``ceil(num_bytes / host_bytes_per_cycle)`` cycles of link work,
        shared with every other transfer in flight. A transfer of 0 bytes returns at
        once. Use as ``env.process(link.transfer(n))`` or ``yield from``.
        """
        work = busy_cycles_of(self.cfg, num_bytes)
        if work == 0:
            return
        latency = self.cfg.host_latency_cycles
        if latency:
            yield self.env.timeout(latency)
        self._advance()
        done = self.env.event()
        self._active[self._next_id] = [Fraction(work), done]
        self._next_id += 1
        self.busy_cycles += work
        self._reschedule()
        yield done

    def _advance(self) -> None:
        """Credit every transfer in flight with its share of the time since the last event."""
        now = Fraction(self.env.now)
        if self._active:
            share = (now - self._last) / len(self._active)
            for entry in self._active.values():
                entry[0] -= share
        self._last = now

    def _reschedule(self) -> None:
        """Schedule the next completion; older schedules become stale."""
        self._version += 1
        if not self._active:
            return
        version = self._version
        first = min(entry[0] for entry in self._active.values())
        timer = self.env.timeout(first * len(self._active))
        timer.callbacks.append(lambda _event: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        for key in [k for k, entry in self._active.items() if entry[0] <= 0]:
            self._active.pop(key)[1].succeed()
        self._reschedule()
