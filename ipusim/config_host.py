"""The host section of a machine config: the host link and the host's work around
each stream copy."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from ipusim.config_base import Section
from ipusim.config_limits import MAX_BYTES_PER_S, MAX_COPY_BYTES, MAX_SECONDS, MIN_BYTES_PER_S
from ipusim.units import Bytes, BytesPerSecond, Seconds

__all__ = ["HostConfig"]


class HostConfig(Section):
    """Host link (PCIe or RoCE) shared by the IPUs of a machine, and the host's own
    work around each stream copy (docs/machine.md, "Host preparation of stream
    copies")."""

    bandwidth_bytes_per_s: BytesPerSecond = Field(
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Host link bandwidth, one direction; 1 MB/s..1 PB/s (no host link is "
        "slower than PCIe 1.0 x1 or 1000x faster than PCIe 5).",
    )
    latency_s: Seconds = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Latency of one host transfer; at most 1 s (1e11 cycles at 100 GHz).",
    )
    max_copy_bytes: Bytes = Field(
        ge=1, le=MAX_COPY_BYTES, description="Largest single stream copy; at most 1 TiB."
    )
    ipus_per_link: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="IPUs sharing one host link: IPU i uses link i // ipus_per_link (an "
        "IPU-Machine's gateway serves its own IPUs); None: one link for the whole machine.",
    )
    copy_begin_s: Seconds = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Host work before every stream copy's data phase (Poplar's "
        "StreamCopyBegin: the runtime preparing the copy); the tiles wait, booked in no "
        "phase, as in Poplar's summary; at most 1 s.",
    )
    copy_end_s: Seconds = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Host work after every stream copy's data phase (StreamCopyEnd); "
        "the tiles wait, booked in no phase; at most 1 s.",
    )
    prepare_bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        default=None,
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Host memory rate at which the host moves a copy's bytes into the "
        "transfer buffers (host to device, in StreamCopyBegin) or out of them (device to "
        "host, in StreamCopyEnd); None: free; 1 MB/s..1 PB/s.",
    )
    model: str = Field(
        default="shared_link",
        description="Host link timing component (ipusim.timing.components('host')).",
    )

    @model_serializer(mode="wrap")
    def _without_idle_host_work(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Dumps leave out the host-work fields while they are off (their defaults),
        so configs that never set them keep their content hash."""
        values = handler(self)
        if isinstance(values, dict):
            for name, off in _HOST_WORK_OFF.items():
                if getattr(self, name) == off:
                    values.pop(name, None)
        return values


#: The host-work fields and their "off" values (left out of dumps when off).
_HOST_WORK_OFF: dict[str, Any] = {
    "copy_begin_s": 0.0,
    "copy_end_s": 0.0,
    "prepare_bandwidth_bytes_per_s": None,
}
