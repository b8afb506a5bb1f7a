"""Devices and targets: the IPU Model (timed by ipusim) and a CPU device (values only).

``IPUModel(version)`` describes a modelled IPU; its Poplar attributes
(``numIPUs``, ``tilesPerIPU``, ``minIPUSyncDelay``, ``relativeSyncDelay``, ...) override
the machine config when ``createDevice()`` is called.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

from ipusim.config import MachineConfig, load_config, with_overrides
from poplar_api.errors import PoplarError
from poplar_api.types import Type

#: Poplar's IPU versions and the preset that models each.
VERSION_PRESETS = {"ipu1": "mk1-ipumodel", "ipu2": "mk2-ipumodel", "ipu21": "bow-ipumodel"}


class SyncDelayType(str, Enum):
    """How the sync delay of a tile is modelled: by its position, or not at all."""

    AUTO = "auto"
    NO_DELAY = "none"


class TargetType(str, Enum):
    """Kind of target a graph is built for."""

    IPU_MODEL = "IPU_MODEL"
    CPU = "CPU"


class Target:
    """The properties of a device a graph is built for, with Poplar's getters."""

    def __init__(self, config: MachineConfig, targetType: TargetType) -> None:
        self.config = config
        self.targetType = TargetType(targetType)

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
    """A device a graph is loaded onto: a modelled IPU or the CPU."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self.attached = False

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

    @property
    def isIPUModel(self) -> bool:
        return self._target.targetType is TargetType.IPU_MODEL

    def attach(self) -> bool:
        self.attached = True
        return True

    def detach(self) -> None:
        self.attached = False

    def __repr__(self) -> str:
        return f"Device({self._target!r})"


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


__all__ = ["Device", "IPUModel", "SyncDelayType", "Target", "TargetType"]
