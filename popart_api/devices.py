"""PopART's ``DeviceManager`` and ``DeviceInfo`` over poplar_api's devices."""

from __future__ import annotations

from typing import Any

from ipusim.config import with_overrides
from popart_api.errors import popart_exception
from poplar_api import Device, IPUModel, TargetType
from poplar_api import DeviceManager as PoplarDeviceManager

#: ``createIpuModelDevice`` options this layer reads.
IPU_MODEL_OPTIONS = ("numIPUs", "tilesPerIPU", "ipuVersion", "compileIPUCode")


class DeviceInfo:
    """A device for a session (PopART's ``DeviceInfo``), wrapping a poplar_api Device.

    Attributes
    ----------
    device
        The poplar_api :class:`~poplar_api.Device`.
    """

    def __init__(self, device: Device, kind: str) -> None:
        self.device = device
        self._kind = kind

    @property
    def type(self) -> str:
        """``"Ipu"``, ``"IpuModel"`` or ``"Cpu"``."""
        return self._kind

    @property
    def numIpus(self) -> int:
        """IPUs of the device."""
        return self.device.getTarget().getNumIPUs()

    @property
    def tilesPerIPU(self) -> int:
        """Tiles of each IPU."""
        return self.device.getTarget().getTilesPerIPU()

    @property
    def id(self) -> int:
        """The device manager's id (0 for models and the CPU)."""
        return self.device.getId()

    @property
    def isAttached(self) -> bool:
        """Whether the device is attached."""
        return bool(self.device.attached)

    def attach(self) -> bool:
        """Attach; False when another device holds its IPUs."""
        return self.device.attach()

    def detach(self) -> None:
        """Detach (free the IPUs)."""
        self.device.detach()

    def __enter__(self) -> DeviceInfo:
        """``with manager.acquireAvailableDevice() as device:`` detaches on leaving."""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    def __repr__(self) -> str:
        return f"DeviceInfo({self._kind}, {self.numIpus} IPU(s) x {self.tilesPerIPU} tiles)"


class DeviceManager:
    """Make devices: ``popart.DeviceManager().createIpuModelDevice({...})``.

    Parameters
    ----------
    preset, numIpus
        Passed to poplar_api's ``DeviceManager`` (the simulated system of
        ``acquireAvailableDevice``).
    """

    def __init__(self, preset: str | None = None, numIpus: int | None = None) -> None:
        self._preset = preset
        self._num_ipus = numIpus
        self._manager: PoplarDeviceManager | None = None

    def createIpuModelDevice(self, options: dict[str, Any] | None = None) -> DeviceInfo:
        """An IPU Model device; ``options``: ``numIPUs`` (1), ``tilesPerIPU`` (the
        version's), ``ipuVersion`` ("ipu2"; also a preset such as "tiny");
        ``compileIPUCode`` is accepted and ignored.

        Raises
        ------
        popart_exception
            Unknown option or bad value.
        """
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(IPU_MODEL_OPTIONS))
        if unknown:
            raise popart_exception(
                f"createIpuModelDevice: unknown option(s) {unknown}; supported: "
                f"{list(IPU_MODEL_OPTIONS)}"
            )
        model = IPUModel(str(opts.get("ipuVersion", "ipu2")))
        for key, attr in (("numIPUs", "numIPUs"), ("tilesPerIPU", "tilesPerIPU")):
            if key in opts:
                value = opts[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise popart_exception(
                        f"createIpuModelDevice: option '{key}' = {value!r} must be an int >= 1"
                    )
                setattr(model, attr, value)
        tiles = model.tilesPerIPU
        if tiles is not None and tiles < model.config.tile.columns:
            # Fewer tiles than the preset's tile columns: shrink the columns with them
            # (IPUModel.tilesPerIPU alone leaves the config invalid).
            columns = max(c for c in range(1, tiles + 1) if tiles % c == 0 and c <= 4)
            overrides = {"tile.tiles_per_ipu": tiles, "tile.columns": columns}
            if model.config.sync.controller_tile >= tiles:
                overrides["sync.controller_tile"] = tiles // 2
            try:
                model.config = with_overrides(model.config, overrides)
            except Exception as exc:
                raise popart_exception(
                    f"createIpuModelDevice: tilesPerIPU={tiles} does not make a valid device: {exc}"
                ) from None
            model.tilesPerIPU = None
        dev = model.createDevice()
        return DeviceInfo(dev, "IpuModel")

    def createCpuDevice(self) -> DeviceInfo:
        """A CPU device: values only, no timing."""
        return DeviceInfo(Device.createCPUDevice(), "Cpu")

    def acquireAvailableDevice(self, numIpus: int = 1, tilesPerIpu: int = 0, *_: Any) -> DeviceInfo:
        """The first free simulated device of ``numIpus`` IPUs, attached.

        Raises
        ------
        popart_exception
            No device of that size is free (or exists).
        """
        if tilesPerIpu:
            raise popart_exception(
                "acquireAvailableDevice: tilesPerIpu is not supported for simulated "
                "hardware devices; hint: createIpuModelDevice({'tilesPerIPU': n})"
            )
        try:
            devices = self._system().getDevices(TargetType.IPU, numIpus)
        except Exception as exc:
            raise popart_exception(f"acquireAvailableDevice: {exc}") from None
        for dev in devices:
            if dev.attach():
                return DeviceInfo(dev, "Ipu")
        raise popart_exception(
            f"acquireAvailableDevice: no free device of {numIpus} IPU(s) in the simulated "
            f"system ({len(devices)} exist, all attached); hint: detach one, or use "
            "createIpuModelDevice"
        )

    def tryAcquireAvailableDevice(
        self, numIpus: int = 1, tilesPerIpu: int = 0, *args: Any
    ) -> DeviceInfo | None:
        """As :meth:`acquireAvailableDevice`, but None when no device is free (PopART
        returns a null device there)."""
        try:
            return self.acquireAvailableDevice(numIpus, tilesPerIpu, *args)
        except popart_exception as exc:
            if "no free device" in str(exc):
                return None
            raise

    def _system(self) -> PoplarDeviceManager:
        if self._manager is None:
            self._manager = PoplarDeviceManager(self._preset, self._num_ipus)
        return self._manager

    def acquireDeviceById(self, id: int, *_: Any) -> DeviceInfo:
        """The simulated device with id ``id`` (as ``enumerateDevices`` lists), attached.

        Raises
        ------
        popart_exception
            No device has that id, or it is attached already.
        """
        try:
            dev = self._system().getDevice(int(id))
        except Exception as exc:
            raise popart_exception(f"acquireDeviceById: {exc}") from None
        if not dev.attach():
            raise popart_exception(
                f"acquireDeviceById: device {id} is attached already; hint: detach it first"
            )
        return DeviceInfo(dev, "Ipu")

    def enumerateDevices(self) -> list[DeviceInfo]:
        """Every device of the simulated system (not attached)."""
        return [DeviceInfo(d, "Ipu") for d in self._system().getDevices(TargetType.IPU)]


__all__ = ["DeviceInfo", "DeviceManager"]
