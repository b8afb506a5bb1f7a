"""What the Poplar examples share: attaching to a device of the IPU system.

Kept out of ``poplar_api`` on purpose: it is what a user program writes for itself (the
examples' C++ originals each define ``getIpuHwDevice`` the same way).
"""

from __future__ import annotations

from poplar_api import Device, DeviceManager, TargetType

__all__ = ["getIpuHwDevice"]


def getIpuHwDevice(numIpus: int) -> Device:
    """The first free device of ``numIpus`` IPUs of the (simulated) IPU system, attached.

    Raises
    ------
    RuntimeError
        No such device is free.
    """
    dm = DeviceManager.createDeviceManager()
    for device in dm.getDevices(TargetType.IPU, numIpus):
        if device.attach():
            return device
    raise RuntimeError("No IPU hardware available.")
