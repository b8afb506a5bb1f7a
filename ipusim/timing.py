"""The timing model: the one place that says how many cycles a step takes.

The machine, the graph and execution profiles, memory planning and calibration all ask
one :class:`TimingModel`, so their numbers cannot drift apart. It is made of one
component per hardware part, each with a single signature:

============  =====================  ==============================================
component     config key             signature
============  =====================  ==============================================
compute       ``tile.model``         ``cost(step: ir.Compute) -> ComputeCost``
exchange      ``exchange.model``     ``cost(step: ir.Exchange) -> ExchangeCost``
sync          ``sync.model``         ``delays() -> int64[num_tiles]``;
                                     ``release(arrival, delays, kind, ipus=None)``
                                     ``-> exit times`` (a three-argument ``release``
                                     is adapted: it prices every external sync
                                     without its IPUs' placement)
host          ``host.model``         ``demand(step: ir.StreamCopy) -> StreamDemand``;
                                     ``link(env) -> shared link``
links         ``links.model``        ``cost(step: ir.GlobalExchange) -> GlobalExchangeCost``;
                                     ``collective(step: ir.Collective) -> CollectiveCost``
                                     (uncontended); ``topology`` (routes, capacities)
remote        ``remote.model``       ``demand(step: ir.RemoteBufferCopy) -> StreamDemand``;
                                     ``link(env) -> links`` (None: the host link)
============  =====================  ==============================================

A component is chosen by name in the config and can be replaced without touching the
others: :func:`register_component` adds an implementation (a factory taking the
:class:`~ipusim.config.MachineConfig`), and a config selects it, e.g.
``exchange.model: my_exchange``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numba
import numpy as np
import simpy

from ipusim import ir
from ipusim.config import MachineConfig
from ipusim.errors import ConfigError
from ipusim.exchange.collectives import CollectiveCost, collective_cost
from ipusim.exchange.internal import ExchangeCost, exchange_cost, phase_cycles
from ipusim.exchange.links import GlobalExchangeCost, global_exchange_cost
from ipusim.host.link import (
    HostLink,
    HostLinks,
    StreamingMemoryLinks,
    busy_cycles_at,
    busy_cycles_of,
    stream_copy_demand,
)
from ipusim.sync.controller import sync_delays, sync_extra_cycles, sync_release
from ipusim.tile.compute import ComputeCost, compute_cost

__all__ = [
    "COMPONENTS",
    "SharedArrays",
    "StreamDemand",
    "TimingModel",
    "component_names",
    "register_component",
]


# ----------------------------------------------------------------------- protocols
class ComputeModel(Protocol):
    def cost(self, step: ir.Compute) -> ComputeCost: ...


class ExchangeModel(Protocol):
    def cost(self, step: ir.Exchange) -> ExchangeCost: ...


class SyncModel(Protocol):
    def delays(self) -> np.ndarray: ...

    def release(
        self,
        arrival: np.ndarray,
        delays: np.ndarray,
        kind: str,
        ipus: tuple[int, ...] | None = None,
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class StreamDemand:
    """What one host (or Streaming Memory) transfer asks of the link, per IPU.

    Attributes
    ----------
    bytes_per_ipu
        int64[num_ipus]: bytes each IPU moves over the link.
    floor_cycles
        int64[num_ipus]: the fewest cycles the transfer can take on that IPU whatever
        the link's share (0 when the tiles' side is costed by a separate exchange).
    latency_cycles
        Latency before the data moves (transfers pipeline: it does not hold the link).
    """

    bytes_per_ipu: np.ndarray
    floor_cycles: np.ndarray
    latency_cycles: int


class HostModel(Protocol):
    def demand(self, step: ir.StreamCopy) -> StreamDemand: ...

    def link(self, env: simpy.Environment) -> Any: ...

    def busy_cycles(self, num_bytes: int) -> int: ...


class LinksModel(Protocol):
    def cost(self, step: ir.GlobalExchange) -> GlobalExchangeCost: ...

    def collective(self, step: ir.Collective) -> CollectiveCost: ...


# ------------------------------------------------------------ default components
class BarrelCompute:
    """Barrel-scheduled worker contexts (see :mod:`ipusim.tile.compute`)."""

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg

    def cost(self, step: ir.Compute) -> ComputeCost:
        return compute_cost(
            self.cfg.tile, self.cfg.num_tiles, step.vertex_tile, step.vertex_cycles,
            step.vertex_multi,
        )  # fmt: skip


class StaticExchange:
    """Statically scheduled on-chip exchange (see :mod:`ipusim.exchange.internal`)."""

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg

    def cost(self, step: ir.Exchange) -> ExchangeCost:
        return exchange_cost(self.cfg, step)


class PhaseExchange(StaticExchange):
    """An exchange as one phase of its IPU: every tile of an IPU taking part stays in
    the exchange until the IPU's slowest tile has finished (the exchange is compiled
    as one static schedule), so early tiles count the wait as exchange, not as sync.
    """

    def cost(self, step: ir.Exchange) -> ExchangeCost:
        cost = exchange_cost(self.cfg, step)
        return cost.with_cycles(phase_cycles(cost.cycles, self.cfg.tile.tiles_per_ipu))


class ControllerSync:
    """The sync controller with per-tile delays (see :mod:`ipusim.sync.controller`)."""

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg
        self._delays = sync_delays(cfg)

    def delays(self) -> np.ndarray:
        return self._delays

    def release(
        self,
        arrival: np.ndarray,
        delays: np.ndarray,
        kind: str,
        ipus: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Exit times of the arriving tiles; ``ipus``: the IPUs of an external sync
        (its path through the sync fabric; None: all of the machine)."""
        return sync_release(arrival, delays, sync_extra_cycles(self.cfg, kind, ipus))


class PlacementFreeSync:
    """A sync component whose ``release`` takes no ``ipus`` argument, adapted to
    :class:`SyncModel`.

    ``release`` gained ``ipus`` (the IPUs of an external sync, whose placement sets its
    path through the sync fabric); a component written for the three-argument form
    keeps working, and prices every external sync as it did: without placement.
    Every other attribute is the wrapped component's.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def delays(self) -> np.ndarray:
        return self.inner.delays()

    def release(
        self,
        arrival: np.ndarray,
        delays: np.ndarray,
        kind: str,
        ipus: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Exit times from the wrapped three-argument ``release`` (``ipus`` unused)."""
        return self.inner.release(arrival, delays, kind)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: an instance being copied or unpickled
            raise AttributeError(name)
        return getattr(self.inner, name)


def _with_placement(sync: Any) -> Any:
    """``sync`` itself if its ``release`` accepts ``ipus``, else adapted to it."""
    try:
        signature = inspect.signature(sync.release)
    except (AttributeError, TypeError, ValueError):
        return sync  # no introspectable release: used as given
    try:  # the machine passes ipus as a fourth positional argument (``*args`` takes it)
        signature.bind(None, None, None, None)
    except TypeError:
        return PlacementFreeSync(sync)
    return sync


class SharedHostLink:
    """One host link per machine (or per ``host.ipus_per_link`` IPUs), its bandwidth
    shared by the transfers in flight.

    A stream copy's tile side (the on-chip exchange that delivers or gathers its data)
    is a separate ``Exchange`` step in the program, so no tile floor is added here.
    """

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg

    def demand(self, step: ir.StreamCopy) -> StreamDemand:
        total, floor = stream_copy_demand(self.cfg, step.tile, step.num_bytes)
        if step.exchanged:
            floor = np.zeros_like(floor)
        return StreamDemand(total, floor, self.cfg.host_latency_cycles)

    def link(self, env: simpy.Environment) -> HostLink | HostLinks:
        per_link = self.cfg.host.ipus_per_link
        if per_link is None or per_link >= self.cfg.num_ipus:
            return HostLink(env, self.cfg)
        return HostLinks(env, self.cfg)

    def busy_cycles(self, num_bytes: int) -> int:
        return busy_cycles_of(self.cfg, num_bytes)


class TopologyLinks:
    """IPU-Links routed on the configured topology (see :mod:`ipusim.exchange.links`)."""

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg

    def cost(self, step: ir.GlobalExchange) -> GlobalExchangeCost:
        return global_exchange_cost(self.cfg, step.src_tile, step.dst_tile, step.num_bytes)

    @property
    def topology(self) -> Any:
        """The routes, capacities and latencies of the configured topology."""
        from ipusim.exchange.topology import topology_of

        return topology_of(self.cfg)

    def collective(self, step: ir.Collective) -> CollectiveCost:
        """Cycles of a collective with the links to itself (ipusim.exchange.collectives)."""
        return collective_cost(self.cfg, self.topology, step)


class HostLinkRemote(SharedHostLink):
    """Remote buffers reached over the host link (remote buffers in host memory, as on
    Mk1, which has no Streaming Memory).

    ``link`` returns None: remote-buffer copies share the host link's bandwidth and
    latency.
    """

    def link(self, env: simpy.Environment) -> None:  # type: ignore[override]
        return None


class StreamingMemory:
    """Remote buffers in Streaming Memory: one link per IPU with the ``remote``
    section's bandwidth and latency, not shared with the host link.

    On an IPU-M2000 Streaming Memory is DDR on the IPU-Gateway, which each IPU reaches
    over its own link; host traffic enters the gateway through a separate NIC, so a
    remote-buffer copy neither waits for nor slows down host transfers in this model
    (the gateway-to-IPU hop that both cross on hardware is not shared here; see
    docs/machine.md). A copy's tile side is its separate on-chip ``Exchange`` step.
    """

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg
        self.bytes_per_cycle = cfg.remote.bandwidth_bytes_per_s / cfg.tile.clock_hz
        self.latency_cycles = math.ceil(round(cfg.remote.latency_s * cfg.tile.clock_hz, 9))

    def demand(self, step: ir.StreamCopy) -> StreamDemand:
        total, floor = stream_copy_demand(self.cfg, step.tile, step.num_bytes)
        if step.exchanged:
            floor = np.zeros_like(floor)
        return StreamDemand(total, floor, self.latency_cycles)

    def link(self, env: simpy.Environment) -> StreamingMemoryLinks:
        return StreamingMemoryLinks(env, self.cfg)

    def busy_cycles(self, num_bytes: int) -> int:
        return busy_cycles_at(self.bytes_per_cycle, num_bytes)


# ---------------------------------------------------------------------- registry
#: component -> (config section holding its ``model`` key, {name: factory}).
COMPONENTS: dict[str, tuple[str, dict[str, Callable[[MachineConfig], Any]]]] = {
    "compute": ("tile", {"barrel": BarrelCompute}),
    "exchange": ("exchange", {"static": StaticExchange, "phase": PhaseExchange}),
    "sync": ("sync", {"controller": ControllerSync}),
    "host": ("host", {"shared_link": SharedHostLink}),
    "links": ("links", {"topology": TopologyLinks}),
    "remote": ("remote", {"host_link": HostLinkRemote, "streaming_memory": StreamingMemory}),
}


def register_component(component: str, name: str, factory: Callable[[MachineConfig], Any]) -> None:
    """Make ``factory`` selectable as ``<section>.model: <name>`` for ``component``.

    Raises
    ------
    ConfigError
        ``component`` is not one of :data:`COMPONENTS`.
    """
    if component not in COMPONENTS:
        raise ConfigError(
            [f"timing component {component!r} does not exist; known: {', '.join(COMPONENTS)}"]
        )
    COMPONENTS[component][1][name] = factory


def component_names(component: str) -> list[str]:
    """Names of the registered implementations of ``component``."""
    return sorted(COMPONENTS[component][1])


def _build(cfg: MachineConfig, component: str) -> Any:
    section, factories = COMPONENTS[component]
    name = getattr(cfg, section).model
    factory = factories.get(name)
    if factory is None:
        close = difflib.get_close_matches(name, list(factories), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "register one with register_component"
        raise ConfigError(
            [
                f"{section}.model: found {name!r}; expected one of "
                f"{', '.join(sorted(factories))} ({hint})"
            ],
            header=f"invalid machine config {cfg.name}",
        )
    return factory(cfg)


class SharedArrays:
    """Per-tile int64 arrays held once per distinct contents.

    A run keeps the cost of every distinct compute set and exchange, each with int64
    arrays over all the machine's tiles; many of them are equal (the same operation on
    tensors laid out alike: half of the compute costs' arrays and more than half of the
    exchanges' in the 4-IPU training step of ``run_model.py resnet50-small``), and a
    model sharded over several IPUs has most of each array zero. :meth:`get` hands back
    the first array seen with the same contents, made read-only, so equal costs share
    one.
    """

    #: Arrays with fewer elements are not looked up (their bytes are not worth it).
    MIN_SIZE = 256

    def __init__(self) -> None:
        self._arrays: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        """Arrays held."""
        return len(self._arrays)

    def get(self, arr: Any) -> Any:
        """An equal array met before, else ``arr``; read-only either way (an array not
        looked up too: the machine's compiled passes then take one kind of array);
        other values as given."""
        if type(arr) is not np.ndarray:
            return arr
        if (
            arr.dtype != np.int64
            or arr.ndim != 1
            or arr.size < self.MIN_SIZE
            or not arr.flags.c_contiguous
        ):
            arr.flags.writeable = False
            return arr
        # a compiled mix of the values (under 1 us for 1,216 tiles, against about 3 for
        # Python's hash of the bytes and 16 for a BLAKE2 digest: this runs for three
        # arrays per distinct step, on the distinct-step rate's path); two contents with
        # one key are told apart by the comparison, and the later one is then simply not
        # shared
        arr.flags.writeable = False  # (read-only either way: one compiled signature)
        key = _contents_key(arr)
        seen = self._arrays.get(key)
        if seen is not None and seen.size == arr.size and _same_values(seen, arr):
            return seen
        if seen is None:
            self._arrays[key] = arr
        return arr


@numba.njit(cache=True, nogil=True)
def _contents_key(values):  # pragma: no cover - compiled
    """A 64-bit key of int64 ``values``: each value mixed with its position (a multiply,
    a shift and a multiply, so that reordered values give another key), summed with
    wraparound (independent terms: the loop vectorizes)."""
    key = np.uint64(values.shape[0])
    for i in range(values.shape[0]):
        x = np.uint64(values[i]) + np.uint64(i) * np.uint64(0x9E3779B97F4A7C15)
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(31))
        key += x * np.uint64(0x94D049BB133111EB)
    return key


@numba.njit(cache=True, nogil=True)
def _same_values(a, b):  # pragma: no cover - compiled
    """Whether int64 arrays ``a`` and ``b`` of one size hold the same values."""
    same = True
    for i in range(a.shape[0]):
        if a[i] != b[i]:
            same = False
            break
    return same


class TimingModel:
    """Cycles of every kind of step on one machine config.

    Parameters
    ----------
    config
        The machine config; its ``<section>.model`` keys choose the components.
    **components
        Component objects to use instead of the configured ones (``exchange=...``).

    Costs of stateless steps (compute, exchange, global exchange, stream demand) are
    cached per step object, so a step run many times is costed once.
    """

    def __init__(self, config: MachineConfig, **components: Any) -> None:
        unknown = sorted(set(components) - set(COMPONENTS))
        if unknown:
            raise ConfigError(
                [f"TimingModel: unknown component(s) {unknown}; known: {', '.join(COMPONENTS)}"]
            )
        self.config = config
        self.compute: ComputeModel = components.get("compute") or _build(config, "compute")
        self.exchange: ExchangeModel = components.get("exchange") or _build(config, "exchange")
        self.sync: SyncModel = _with_placement(components.get("sync") or _build(config, "sync"))
        self.host: HostModel = components.get("host") or _build(config, "host")
        self.links: LinksModel = components.get("links") or _build(config, "links")
        self.remote: HostModel = components.get("remote") or _build(config, "remote")
        self._cache: dict[int, tuple[ir.Step, Any]] = {}
        self._shared = SharedArrays()

    def cost(self, step: ir.Step) -> Any:
        """The cost of ``step``: ComputeCost, ExchangeCost, GlobalExchangeCost,
        StreamDemand, or None for a sync (whose time depends on arrival).

        The per-tile cycles of the compute and exchange costs kept are read-only, and
        equal ones are one array (:class:`SharedArrays`)."""
        hit = self._cache.get(id(step))
        if hit is not None and hit[0] is step:
            return hit[1]
        kind = ir.STEP_KINDS[step.kind]
        if kind.component is None:
            return None
        cost = getattr(getattr(self, kind.component), kind.method)(step)
        cost = self._share(cost)
        self._cache[id(step)] = (step, cost)
        return cost

    def _share(self, cost: Any) -> Any:
        """``cost`` with its per-tile cycles those of an earlier cost when equal."""
        shared = self._shared.get
        if type(cost) is ComputeCost:
            tile, active = shared(cost.tile_cycles), shared(cost.active_cycles)
            if tile is not cost.tile_cycles or active is not cost.active_cycles:
                cost = dataclasses.replace(cost, tile_cycles=tile, active_cycles=active)
        elif type(cost) is ExchangeCost:
            cycles = shared(cost.cycles)
            if cycles is not cost.cycles:
                cost = cost.with_cycles(cycles)
        return cost

    @property
    def topology(self) -> Any:
        """The IPU-Link topology the links component routes on."""
        topology = getattr(self.links, "topology", None)
        if topology is None:
            from ipusim.exchange.topology import topology_of

            topology = topology_of(self.config)
        return topology

    def tile_cycles(self, step: ir.Step) -> np.ndarray | None:
        """Per-tile cycles of a step whose time does not depend on other steps
        (compute, internal exchange), else None."""
        if isinstance(step, ir.Compute):
            return self.cost(step).tile_cycles
        if isinstance(step, ir.Exchange):
            return self.cost(step).cycles
        return None

    def stream_copy_cycles(self, step: ir.StreamCopy) -> np.ndarray:
        """Cycles of a stream copy on each IPU with the link to itself (no contention):
        ``latency + max(link work, floor)`` where the IPU moves data, else 0."""
        demand = self.cost(step)
        model = self.remote if isinstance(step, ir.RemoteBufferCopy) else self.host
        work = np.array([model.busy_cycles(int(b)) for b in demand.bytes_per_ipu], np.int64)
        return np.where(
            demand.bytes_per_ipu > 0,
            demand.latency_cycles + np.maximum(work, demand.floor_cycles),
            0,
        ).astype(np.int64)
