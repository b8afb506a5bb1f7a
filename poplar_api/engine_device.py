"""Whether a device can run a compiled graph: :func:`check_device_fits`.

Poplar loads an executable only onto a device of the target it was compiled for; a
graph built for one machine and run on another would be timed as that other machine
(its tiles, memory and clocks) without a word. The device's IPU architecture, tiles
per IPU, bytes per tile and IPU count (the replicas' together) must be the graph's.
"""

from __future__ import annotations

from poplar_api.device import Device, Target
from poplar_api.errors import EngineError


def describe(target: Target, ipus: int | None = None) -> str:
    """``"2 x ipu2 IPU(s) of 1472 tiles, 638,976 bytes a tile"``."""
    n = target.getNumIPUs() if ipus is None else ipus
    return (
        f"{n} x {target.getTargetArchString()} IPU(s) of {target.getTilesPerIPU()} tiles, "
        f"{target.getBytesPerTile():,} bytes a tile"
    )


def check_device_fits(target: Target, device: Device, replicas: int) -> None:
    """Refuse ``device`` unless its target is the graph's ``target`` (the target of one
    replica of ``replicas``).

    Raises
    ------
    EngineError
        Naming the graph's target and the device's, with a hint.
    """
    want, have = target.getNumTiles(), device.getTarget().getNumTiles()
    if have < want:
        raise EngineError(
            f"Engine.load: the graph was built for {want} tiles but the device has {have}; "
            "hint: build the graph with the device's target"
        )
    dev = device.getTarget()
    if replicas > 1 and device.isTimed:
        need = target.getNumIPUs() * replicas
        if dev.getNumIPUs() != need or dev.getTilesPerIPU() != target.getTilesPerIPU():
            raise EngineError(
                f"Engine.load: the graph has {replicas} replicas of "
                f"{target.getNumIPUs()} IPU(s) x {target.getTilesPerIPU()} tiles, so it "
                f"needs a device of exactly {need} IPU(s) x {target.getTilesPerIPU()} "
                f"tiles; the device has {dev.getNumIPUs()} x {dev.getTilesPerIPU()}; hint: "
                "build the graph with the device's target"
            )
    if not device.isTimed:
        return
    need = target.getNumIPUs() * max(replicas, 1)
    mine = (target.getTargetArchString(), target.getTilesPerIPU(), target.getBytesPerTile())
    theirs = (dev.getTargetArchString(), dev.getTilesPerIPU(), dev.getBytesPerTile())
    if mine != theirs or dev.getNumIPUs() != need:
        raise EngineError(
            f"Engine.load: the graph was built for {describe(target, need)} but the device "
            f"is {describe(dev)}; a graph runs only on the target it was built for (as "
            "Poplar's executables); hint: build the graph with device.getTarget()"
        )


__all__ = ["check_device_fits", "describe"]
