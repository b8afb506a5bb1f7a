"""Devices and targets: simulated IPUs, the IPU Model (both timed by ipusim) and a CPU
device (values only).

``IPUModel(version)`` describes a modelled IPU; its Poplar attributes
(``numIPUs``, ``tilesPerIPU``, ``minIPUSyncDelay``, ``relativeSyncDelay``, ...) override
the machine config when ``createDevice()`` is called.

:class:`DeviceManager` stands in for the IPU hardware a Poplar program discovers with
``DeviceManager::createDeviceManager().getDevices(TargetType::IPU, n)``: a simulated
system of IPUs (the ``mk2`` preset, 16 IPUs, unless ``IPUSIM_IPU_PRESET`` and
``IPUSIM_NUM_IPUS`` or the constructor say otherwise) whose devices are attached and
detached as hardware devices are: one holder at a time per IPU.
"""

from __future__ import annotations

import os
import weakref
from enum import Enum
from typing import Any

from ipusim.config import MachineConfig, load_config, with_overrides
from poplar_api.errors import PoplarError
from poplar_api.types import Type

#: Poplar's IPU versions and the preset that models each.
VERSION_PRESETS = {"ipu1": "mk1-ipumodel", "ipu2": "mk2-ipumodel", "ipu21": "bow-ipumodel"}

#: Poplar's IPU versions and the preset of the hardware IPU (``TargetType.IPU``).
HARDWARE_PRESETS = {"ipu1": "mk1", "ipu2": "mk2", "ipu21": "bow"}

#: Environment variable naming the preset (or YAML path) of ``DeviceManager`` IPUs.
PRESET_ENV = "IPUSIM_IPU_PRESET"

#: Environment variable with the number of IPUs of the simulated system.
NUM_IPUS_ENV = "IPUSIM_NUM_IPUS"

DEFAULT_PRESET = "mk2"
DEFAULT_NUM_IPUS = 16


class DeviceError(PoplarError, RuntimeError):
    """A device could not be found, made or used (bad id, bad IPU count, bad preset)."""


class SyncDelayType(str, Enum):
    """How the sync delay of a tile is modelled: by its position, or not at all."""

    AUTO = "auto"
    NO_DELAY = "none"


class TargetType(str, Enum):
    """Kind of target a graph is built for.

    ``IPU`` is a hardware IPU, simulated by ipusim with a hardware preset (``mk2``, ...);
    ``IPU_MODEL`` is Poplar's IPU Model, simulated with its ``*-ipumodel`` preset;
    ``CPU`` runs programs for their values only.
    """

    IPU = "IPU"
    IPU_MODEL = "IPU_MODEL"
    CPU = "CPU"


class Target:
    """The properties of a device a graph is built for, with Poplar's getters."""

    def __init__(self, config: MachineConfig, targetType: TargetType) -> None:
        self.config = config
        self.targetType = TargetType(targetType)

    @staticmethod
    def createIPUTarget(numIPUs: int = 1, systemType: str = "ipu2", opts: Any = None) -> Target:
        """The target of ``numIPUs`` hardware IPUs, for compiling without a device.

        Parameters
        ----------
        numIPUs
            IPUs of the target; a graph may span them (docs/poplar_api.md, "Graphs
            spanning several IPUs").
        systemType
            ``"ipu1"``, ``"ipu2"`` or ``"ipu21"`` (mapped to the presets ``mk1``,
            ``mk2``, ``bow``), or any preset name or YAML path.
        opts
            Accepted for Poplar compatibility and ignored.
        """
        _check_num_ipus(numIPUs, "Target.createIPUTarget")
        cfg = load_config(HARDWARE_PRESETS.get(str(systemType), systemType))
        if numIPUs != cfg.num_ipus:
            cfg = with_overrides(cfg, {"num_ipus": int(numIPUs)})
        return Target(cfg, TargetType.IPU)

    @staticmethod
    def createCPUTarget() -> Target:
        """The target of :meth:`Device.createCPUDevice` (the tiles of an ``ipu2``)."""
        return Device.createCPUDevice().getTarget()

    def getTargetType(self) -> TargetType:
        return self.targetType

    def getTargetArchString(self) -> str:
        """Poplar's architecture name of the modelled IPU (``ipu1``, ``ipu2``, ``ipu21``)."""
        return self.config.arch

    def getNumIPUs(self) -> int:
        return self.config.num_ipus

    def getTilesPerIPU(self) -> int:
        return self.config.tile.tiles_per_ipu

    def getNumTiles(self) -> int:
        return self.config.num_tiles

    def getNumWorkerContexts(self) -> int:
        return self.config.tile.worker_contexts

    def getBytesPerTile(self) -> int:
        return self.config.memory.tile_memory_bytes

    def getBytesPerIPU(self) -> int:
        return self.config.memory.tile_memory_bytes * self.config.tile.tiles_per_ipu

    def getMemoryBytes(self) -> int:
        return self.getBytesPerIPU() * self.config.num_ipus

    def getExchangeBytesPerCycle(self) -> float:
        return self.config.exchange.bytes_per_cycle

    def getTileClockFrequency(self) -> float:
        return self.config.tile.clock_hz

    def getDataPathWidth(self) -> int:
        """Bits loaded per cycle on the 64-bit data path."""
        return 64

    def getVectorWidth(self, elementType: Type) -> int:
        """Elements of ``elementType`` per 64-bit vector (float 2, half 4)."""
        return max(1, 8 // elementType.size)

    def getTypeSize(self, elementType: Type) -> int:
        return elementType.size

    def getMinIPUSyncDelay(self) -> int:
        return self.config.sync.min_sync_delay_cycles

    def getGlobalSyncCycles(self) -> int:
        return self.config.global_sync_cycles

    def getTilesPerSharedExchangeBus(self) -> int:
        return self.config.exchange.tiles_per_shared_bus

    def getFpFlopsPerCycle(self, elementType: Type) -> int:
        """Peak flop per cycle per tile for FLOAT or HALF."""
        tile = self.config.tile
        return (
            tile.peak_flops_per_cycle_fp16
            if elementType.size == 2
            else tile.peak_flops_per_cycle_fp32
        )

    def __repr__(self) -> str:
        return (
            f"Target({self.targetType.value}, {self.config.name}: {self.getNumIPUs()} IPU x "
            f"{self.getTilesPerIPU()} tiles)"
        )


class Device:
    """A device a graph is loaded onto: a simulated IPU, the IPU Model or the CPU.

    Parameters
    ----------
    target
        What the device is (its machine config and target type).
    deviceId
        The device manager's id (``getId``); 0 for IPU Model and CPU devices.
    ipus
        Indices of the system IPUs the device holds while attached (manager devices).
    system
        Key of the simulated system the IPUs belong to (manager devices), None for a
        device of its own (IPU Model, CPU), which no other device competes for.

    Notes
    -----
    ``attach()`` returns False when the device is already attached, or when another
    device of the same simulated system holds one of its IPUs, as on hardware; a
    device that is dropped without ``detach()`` frees its IPUs when it is collected
    (as Poplar's ``Device`` destructor detaches).
    """

    def __init__(
        self,
        target: Target,
        deviceId: int = 0,
        ipus: tuple[int, ...] = (),
        system: tuple[Any, ...] | None = None,
    ) -> None:
        self._target = target
        self._id = int(deviceId)
        self._ipus = tuple(int(i) for i in ipus)
        self._system = system
        self.attached = False
        self._release: weakref.finalize | None = None

    @staticmethod
    def createCPUDevice(version: str | os.PathLike[str] | MachineConfig = "ipu2") -> Device:
        """A device that runs programs for their values only, with no timing.

        Unlike Poplar's one-tile CPU target, it has the tiles of the IPU ``version``
        names, so a graph built for the IPU Model runs on it unchanged; that makes it
        the reference for the values an IPU Model run must produce.
        """
        return Device(Target(IPUModel(version).config, TargetType.CPU))

    def getTarget(self) -> Target:
        return self._target

    def getId(self) -> int:
        """The device manager's id of this device (0 for IPU Model and CPU devices)."""
        return self._id

    def getDriverIDs(self) -> list[int]:
        """Indices of the system IPUs this device consists of (empty for a model)."""
        return list(self._ipus)

    @property
    def isIPUModel(self) -> bool:
        """Whether this is Poplar's IPU Model (``TargetType.IPU_MODEL``)."""
        return self._target.targetType is TargetType.IPU_MODEL

    @property
    def isTimed(self) -> bool:
        """Whether ipusim simulates the timing of runs (simulated IPU or IPU Model)."""
        return self._target.targetType in (TargetType.IPU, TargetType.IPU_MODEL)

    def attach(self) -> bool:
        """Take the device; False if it, or one of its IPUs, is already attached."""
        if self.attached:
            return False
        if self._system is not None:
            held = _HELD.setdefault(self._system, set())
            if held.intersection(self._ipus):
                return False
            held.update(self._ipus)
            self._release = weakref.finalize(self, _free_ipus, self._system, self._ipus)
        self.attached = True
        return True

    def detach(self) -> None:
        """Release the device (and its IPUs); a detached device can be attached again."""
        if not self.attached:
            return
        if self._release is not None:
            self._release()  # frees the IPUs once
            self._release = None
        self.attached = False

    def __repr__(self) -> str:
        state = ", attached" if self.attached else ""
        return f"Device(id {self._id}, {self._target!r}{state})"


#: IPUs held by attached manager devices, per simulated system.
_HELD: dict[tuple[Any, ...], set[int]] = {}


def _free_ipus(system: tuple[Any, ...], ipus: tuple[int, ...]) -> None:
    _HELD.get(system, set()).difference_update(ipus)


def _check_num_ipus(n: Any, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DeviceError(
            f"{what}: number of IPUs {n!r} must be an int >= 1; hint: 1 for a single IPU"
        )


class DeviceManager:
    """The IPU devices of a simulated system, as Poplar's ``DeviceManager``.

    Devices are numbered as ``gc-info`` numbers them: first one device per IPU (ids
    ``0 .. N-1``), then every aligned group of 2 IPUs, of 4, and so on up to all ``N``
    IPUs of the system (for ``N = 16``: 16 + 8 + 4 + 2 + 1 = 31 devices).

    Parameters
    ----------
    preset
        Machine preset (or YAML path) of one IPU; ``None`` reads ``IPUSIM_IPU_PRESET``,
        default ``mk2`` (a GC200 as hardware, not the IPU Model's ``mk2-ipumodel``).
        ``ipu1``/``ipu2``/``ipu21`` are read as ``mk1``/``mk2``/``bow``.
    numIpus
        IPUs of the system; ``None`` reads ``IPUSIM_NUM_IPUS``, default 16.

    Notes
    -----
    Devices of several IPUs can be made and attached, and a graph may span their IPUs
    (data between IPUs travels in global exchanges over the IPU-Links; see
    docs/poplar_api.md, "Graphs spanning several IPUs").
    """

    def __init__(self, preset: str | os.PathLike[str] | None = None, numIpus: int | None = None):
        if preset is None:
            preset = os.environ.get(PRESET_ENV) or DEFAULT_PRESET
        if numIpus is None:
            raw = os.environ.get(NUM_IPUS_ENV)
            try:
                numIpus = int(raw) if raw else DEFAULT_NUM_IPUS
            except ValueError:
                raise DeviceError(
                    f"{NUM_IPUS_ENV}={raw!r} is not an int; hint: the number of IPUs of the "
                    "simulated system, e.g. 16"
                ) from None
        _check_num_ipus(numIpus, "DeviceManager")
        self._preset = HARDWARE_PRESETS.get(str(preset), preset)
        self._base = load_config(self._preset)
        self._num_ipus = int(numIpus)
        self._system = (str(self._preset), self._num_ipus)
        self._configs: dict[int, MachineConfig] = {}
        groups: list[tuple[int, ...]] = []
        size = 1
        while size <= self._num_ipus:
            groups += [
                tuple(range(first, first + size))
                for first in range(0, self._num_ipus - size + 1, size)
            ]
            size *= 2
        self._groups = groups

    @staticmethod
    def createDeviceManager(
        preset: str | os.PathLike[str] | None = None, numIpus: int | None = None
    ) -> DeviceManager:
        """A device manager (Poplar's factory); same arguments as the constructor."""
        return DeviceManager(preset, numIpus)

    def getNumDevices(self) -> int:
        """Number of devices (of every size) of the system."""
        return len(self._groups)

    def _config(self, n: int) -> MachineConfig:
        cfg = self._configs.get(n)
        if cfg is None:
            cfg = (
                self._base
                if n == self._base.num_ipus
                else with_overrides(self._base, {"num_ipus": n})
            )
            self._configs[n] = cfg
        return cfg

    def _device(self, device_id: int) -> Device:
        ipus = self._groups[device_id]
        target = Target(self._config(len(ipus)), TargetType.IPU)
        return Device(target, device_id, ipus, self._system)

    def getDevices(
        self,
        targetType: TargetType | Any = None,
        requiredNumIPUs: int | None = None,
        opts: Any = None,
    ) -> list[Device]:
        """The devices of ``requiredNumIPUs`` IPUs (new, unattached handles).

        ``getDevices()`` (or ``getDevices(opts)``) lists every device. A number of IPUs
        no device has (3, or more than the system) gives an empty list, as on
        hardware.

        Raises
        ------
        DeviceError
            ``targetType`` is not ``TargetType.IPU`` (models are made with
            :class:`IPUModel`), or ``requiredNumIPUs`` is not an int >= 1.
        """
        if targetType is None or isinstance(targetType, dict):
            return [self._device(i) for i in range(len(self._groups))]
        try:
            kind = TargetType(targetType)
        except ValueError:
            kind = None
        if kind is not TargetType.IPU:
            raise DeviceError(
                f"DeviceManager.getDevices: target type {targetType!r} is not supported; only "
                "TargetType.IPU devices are managed; hint: IPUModel('ipu2').createDevice() for "
                "the IPU Model, Device.createCPUDevice() for the CPU"
            )
        n = 1 if requiredNumIPUs is None else requiredNumIPUs
        _check_num_ipus(n, "DeviceManager.getDevices")
        return [self._device(i) for i, g in enumerate(self._groups) if len(g) == n]

    def getDevice(self, deviceManagerId: int, opts: Any = None) -> Device:
        """The device with id ``deviceManagerId`` (a new, unattached handle).

        Raises
        ------
        DeviceError
            No device has that id (the message gives the valid range).
        """
        n = len(self._groups)
        if (
            isinstance(deviceManagerId, bool)
            or not isinstance(deviceManagerId, int)
            or not (0 <= deviceManagerId < n)
        ):
            raise DeviceError(
                f"DeviceManager.getDevice: no device has id {deviceManagerId!r}; this system "
                f"of {self._num_ipus} {self._preset} IPU(s) has ids 0..{n - 1}; hint: "
                "getDevices(TargetType.IPU, n) lists the devices of n IPUs"
            )
        return self._device(deviceManagerId)

    def __repr__(self) -> str:
        return f"DeviceManager({self._num_ipus} x {self._preset}, {len(self._groups)} devices)"


class IPUModel:
    """A modelled IPU: a machine config plus Poplar's IPU Model attributes.

    Parameters
    ----------
    version
        "ipu1", "ipu2" or "ipu21", a preset name ("mk2", "tiny"), a YAML path or a
        :class:`~ipusim.config.MachineConfig`.

    Attributes
    ----------
    numIPUs, tilesPerIPU, minIPUSyncDelay, relativeSyncDelay, globalSyncCycles
        None keeps the config's value; anything else overrides it at ``createDevice``.
    """

    def __init__(self, version: str | os.PathLike[str] | MachineConfig = "ipu2") -> None:
        if isinstance(version, MachineConfig):
            self.config = version
        else:
            self.config = load_config(VERSION_PRESETS.get(str(version), version))
        self.numIPUs: int | None = None
        self.tilesPerIPU: int | None = None
        self.minIPUSyncDelay: int | None = None
        self.relativeSyncDelay: SyncDelayType | None = None
        self.globalSyncCycles: int | None = None

    def createDevice(self) -> Device:
        """Resolve the attributes against the config and make the device."""
        overrides: dict[str, Any] = {}
        if self.numIPUs is not None:
            overrides["num_ipus"] = self.numIPUs
        if self.tilesPerIPU is not None:
            overrides["tile.tiles_per_ipu"] = self.tilesPerIPU
            if self.config.sync.controller_tile >= self.tilesPerIPU:
                overrides["sync.controller_tile"] = self.tilesPerIPU // 2
            if (
                isinstance(self.tilesPerIPU, int)
                and 0 < self.tilesPerIPU < self.config.tile.columns
            ):
                # a column holds at least one tile: fewer tiles than columns, fewer columns
                overrides["tile.columns"] = self.tilesPerIPU
        if self.minIPUSyncDelay is not None:
            overrides["sync.min_sync_delay_cycles"] = self.minIPUSyncDelay
        if self.relativeSyncDelay is not None:
            try:
                overrides["sync.relative_delay"] = SyncDelayType(self.relativeSyncDelay).value
            except ValueError:
                raise PoplarError(
                    f"IPUModel.relativeSyncDelay: {self.relativeSyncDelay!r} is not valid; "
                    "use SyncDelayType.AUTO or SyncDelayType.NO_DELAY"
                ) from None
        if self.globalSyncCycles is not None:
            overrides["sync.global_sync_cycles"] = self.globalSyncCycles
        cfg = with_overrides(self.config, overrides) if overrides else self.config
        return Device(Target(cfg, TargetType.IPU_MODEL))


__all__ = [
    "Device",
    "DeviceError",
    "DeviceManager",
    "IPUModel",
    "SyncDelayType",
    "Target",
    "TargetType",
]
