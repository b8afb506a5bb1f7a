"""The host link (PCIe or RoCE), shared by every transfer of a machine, and the
Streaming Memory links (one per IPU) behind which remote buffers live.

A transfer first pays the link latency (transfers pipeline, so latency does not hold
the link), then needs ``ceil(num_bytes / bytes_per_cycle)`` cycles of link work.
Transfers in flight at the same time share the bandwidth equally, so two IPUs
streaming at once each see half the host link.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from fractions import Fraction
from functools import partial

import numpy as np
import simpy

from ipusim.config import MachineConfig
from ipusim.errors import HostLinkError

__all__ = [
    "HostLink",
    "HostLinks",
    "StreamingMemoryLinks",
    "busy_cycles_at",
    "busy_cycles_of",
    "check_copy_size",
    "host_work_cycles",
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


def busy_cycles_at(bytes_per_cycle: float, num_bytes: int) -> int:
    """Cycles a transfer of ``num_bytes`` holds a link moving ``bytes_per_cycle``:
    ``ceil(bytes / bytes_per_cycle)`` (rounded to 9 decimals first, so that an exact
    quotient computed in floating point is not pushed up by one)."""
    _check_bytes(num_bytes, "transfer")
    return math.ceil(round(num_bytes / bytes_per_cycle, 9))


def busy_cycles_of(cfg: MachineConfig, num_bytes: int) -> int:
    """Cycles a transfer of ``num_bytes`` holds the host link: ``ceil(bytes / bytes_per_cycle)``."""
    return busy_cycles_at(cfg.host_bytes_per_cycle, num_bytes)


def host_work_cycles(cfg: MachineConfig, num_bytes: int, to_device: bool) -> tuple[int, int]:
    """``(before, after)``: tile cycles of the host's own work around one stream copy of
    ``num_bytes`` to or from one IPU (Poplar's StreamCopyBegin and StreamCopyEnd).

    Before the data phase the host prepares the copy (``host.copy_begin_s``) and, for a
    copy to the device, moves its bytes into the transfer buffers at
    ``host.prepare_bandwidth_bytes_per_s``; after it the host finishes the copy
    (``host.copy_end_s``) and, for a copy from the device, moves the bytes out of the
    buffers. Without a preparation bandwidth the bytes cost nothing here.
    """
    host = cfg.host
    clock = cfg.tile.clock_hz
    before = math.ceil(round(host.copy_begin_s * clock, 9))
    after = math.ceil(round(host.copy_end_s * clock, 9))
    if host.prepare_bandwidth_bytes_per_s is not None and num_bytes > 0:
        moved = busy_cycles_at(host.prepare_bandwidth_bytes_per_s / clock, num_bytes)
        if to_device:
            before += moved
        else:
            after += moved
    return before, after


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
    transfers in flight each progresses at ``1/n`` of the link rate. Background
    transfers (prefetches of data no copy waits for yet) use the link only while no
    other transfer is in flight, and then share it equally among themselves.

    The link keeps its own exact clock (:class:`fractions.Fraction`, touched only when
    a transfer starts or ends), so finish times depend only on the transfers' start
    times and sizes, never on the order SimPy happens to process simultaneous events.
    A transfer that ends at the exact time ``T`` is reported at the whole cycle
    ``ceil(T)`` (every caller rounds a transfer's end up to a whole cycle), so the
    simulation clock only ever holds whole cycles from here: the other processes'
    events compare and add plain numbers, not fractions.

    Parameters
    ----------
    env
        SimPy environment the transfers run in (time unit: tile cycles).
    cfg
        Machine config (``host`` section, tile clock).
    bytes_per_cycle, latency_cycles
        The link's rate and latency; by default the host link's (another link, such
        as a Streaming Memory link, passes its own).

    Attributes
    ----------
    busy_cycles
        Total cycles of link work done so far (``ceil(bytes / bytes_per_cycle)`` per
        transfer).
    """

    def __init__(
        self,
        env: simpy.Environment,
        cfg: MachineConfig,
        bytes_per_cycle: float | None = None,
        latency_cycles: int | None = None,
    ) -> None:
        self.env = env
        self.cfg = cfg
        self.bytes_per_cycle = (
            cfg.host_bytes_per_cycle if bytes_per_cycle is None else bytes_per_cycle
        )
        self.latency_cycles = cfg.host_latency_cycles if latency_cycles is None else latency_cycles
        self.busy_cycles: int = 0
        # id -> [remaining work, done event, background, equal copies it stands for]
        self._active: dict[int, list] = {}
        self._next_id = 0
        self._last = Fraction(0)  # the link's exact clock
        self._version = 0

    def transfer(
        self, num_bytes: int, ipu: int = 0, background: bool = False, copies: int = 1
    ) -> Generator[simpy.Event, object, None]:
        """SimPy process generator moving ``num_bytes`` over the link.

        Waits the latency (transfers pipeline, so latency does not hold the link),
        then needs ``ceil(num_bytes / bytes_per_cycle)`` cycles of link work, shared
        with every other transfer in flight; a ``background`` transfer progresses
        only while no foreground transfer is in flight. It returns at the first whole
        cycle at or after its exact end. A transfer of 0 bytes returns at once.
        ``ipu`` (the IPU moving the data) does not matter: one link serves the whole
        machine. ``copies``: this many equal transfers starting now (replicas in
        lockstep, ``ipusim.machine_replicas``), each taking its share of the link;
        they end together, at the time each would alone among the others. Use as
        ``env.process(link.transfer(n))`` or ``yield from``.
        """
        work = busy_cycles_at(self.bytes_per_cycle, num_bytes)
        if work == 0:
            return
        latency = self.latency_cycles
        if latency:
            yield self.env.timeout(latency)
        self._advance(Fraction(self.env.now))
        done = self.env.event()
        self._active[self._next_id] = [Fraction(work), done, background, copies]
        self._next_id += 1
        self.busy_cycles += work * copies
        self._reschedule()
        yield done

    def _served(self) -> list[list]:
        """The transfers the link serves now: the foreground ones, else the background."""
        foreground = [entry for entry in self._active.values() if not entry[2]]
        return foreground or list(self._active.values())

    def _next_end(self) -> Fraction | None:
        """The exact time the first transfer served now ends, if none starts before."""
        served = self._served()
        if not served:
            return None
        return self._last + min(entry[0] for entry in served) * _count(served)

    def _advance(self, now: Fraction) -> None:
        """Run the link up to ``now``: every transfer served gets its share of the
        time, transfer after transfer ending at its exact time (which may lie before
        ``now``: a transfer is reported at the next whole cycle); those that ended are
        reported done."""
        end = self._next_end()
        while end is not None and end <= now:
            self._credit(end)
            for key in [k for k, entry in self._active.items() if entry[0] <= 0]:
                self._active.pop(key)[1].succeed()
            end = self._next_end()
        self._credit(now)

    def _credit(self, now: Fraction) -> None:
        """Credit every transfer served with its share of the time since the link's clock."""
        served = self._served()
        if served:
            share = (now - self._last) / _count(served)
            for entry in served:
                entry[0] -= share
        self._last = now

    def _reschedule(self) -> None:
        """Schedule a timer at the whole cycle of the next end; older timers go stale."""
        self._version += 1
        end = self._next_end()
        if end is None:
            return
        version = self._version
        timer = self.env.timeout(max(math.ceil(end) - self.env.now, 0))
        timer.callbacks.append(lambda _event: self._complete(version))

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance(Fraction(self.env.now))
        self._reschedule()


def _count(served: list[list]) -> int:
    """Transfers in ``served``, each entry's equal copies counted."""
    return sum(entry[3] for entry in served)


class _LinkGroup:
    """Links each shared by ``ipus_per_link`` consecutive IPUs: IPU ``i`` uses link
    ``i // ipus_per_link``, a :class:`HostLink` no other IPU's transfers slow down.

    A link is made when it is first used (:meth:`link`): a run makes the group anew,
    and a POD16's 16 Streaming Memory links and 4 host links were a fifth of the
    machine's set-up of a run, though a program of replicas in lockstep uses one host
    link and no Streaming Memory link at all."""

    ipus_per_link: int
    #: the links' count and what makes one; the links made so far, by index
    _count: int
    _make: Callable[[], HostLink]
    _made: dict[int, HostLink]

    def link(self, k: int) -> HostLink:
        """Link ``k`` (made now if it was not used before)."""
        link = self._made.get(k)
        if link is None:
            if not 0 <= k < self._count:
                raise IndexError(f"link {k} of {self._count}")
            link = self._made[k] = self._make()
        return link

    @property
    def links(self) -> list[HostLink]:
        """Every link, in order (each made now if it was not used before)."""
        return [self.link(k) for k in range(self._count)]

    @property
    def busy_cycles(self) -> int:
        """Cycles of link work done so far, over all the links (in a replicated run
        whose replicas go in lockstep, ``ipusim.machine_replicas``, only the links of
        replica 0's IPUs carry transfers, each standing for its link's copies: the
        other links' equal work is not counted). A link not made has done none."""
        return sum(link.busy_cycles for link in self._made.values())

    def transfer(
        self, num_bytes: int, ipu: int = 0, background: bool = False, copies: int = 1
    ) -> Generator[simpy.Event, object, None]:
        """Move ``num_bytes`` to or from IPU ``ipu`` over that IPU's link (see
        :meth:`HostLink.transfer`)."""
        link = self.link(ipu // self.ipus_per_link)
        yield from link.transfer(num_bytes, background=background, copies=copies)


class HostLinks(_LinkGroup):
    """The host links of a machine whose IPUs are served by several links: IPU ``i``
    uses link ``i // host.ipus_per_link`` (each IPU-Machine's gateway carries the host
    traffic of its own IPUs), each a :class:`HostLink` shared only by its IPUs.

    Parameters
    ----------
    env
        SimPy environment the transfers run in (time unit: tile cycles).
    cfg
        Machine config (``host`` section with ``ipus_per_link`` set).
    """

    def __init__(self, env: simpy.Environment, cfg: MachineConfig) -> None:
        per_link = int(cfg.host.ipus_per_link or cfg.num_ipus)
        self.ipus_per_link = per_link
        self._count = -(-cfg.num_ipus // per_link)
        self._make = partial(HostLink, env, cfg)
        self._made = {}


class StreamingMemoryLinks(_LinkGroup):
    """The Streaming Memory links of a machine: one per IPU, each shared only by the
    transfers of its IPU.

    On an IPU-M2000 the DDR of Streaming Memory sits on the IPU-Gateway and every IPU
    has its own link to the gateway (docs/sources.md#host-link-and-streaming-memory),
    so remote-buffer copies of different IPUs do not slow each other down, and they
    do not use the host link. Each link is a :class:`HostLink` with the ``remote``
    section's bandwidth and latency.

    Parameters
    ----------
    env
        SimPy environment the transfers run in (time unit: tile cycles).
    cfg
        Machine config (``remote`` section, tile clock, number of IPUs).
    """

    def __init__(self, env: simpy.Environment, cfg: MachineConfig) -> None:
        rate = cfg.remote.bandwidth_bytes_per_s / cfg.tile.clock_hz
        latency = math.ceil(round(cfg.remote.latency_s * cfg.tile.clock_hz, 9))
        self.ipus_per_link = 1
        self._count = cfg.num_ipus
        self._make = partial(HostLink, env, cfg, rate, latency)
        self._made = {}
