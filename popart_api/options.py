"""PopART's ``SessionOptions`` and the enums its options take.

Only the options this layer acts on are attributes with checked values; the
``engineOptions``, ``convolutionOptions``, ``lstmOptions`` and ``reportOptions``
dicts are passed through to poplar_api (engine options to the ``Engine``,
convolution and matmul options to ``poplin``). Setting an attribute
``SessionOptions`` does not have is an error naming it, so a typo is never silent.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from popart_api.errors import popart_exception


class VirtualGraphMode(enum.Enum):
    """How ops are placed on IPUs (``popart.VirtualGraphMode``)."""

    Off = "Off"
    Manual = "Manual"
    Auto = "Auto"


class RecomputationType(enum.Enum):
    """Which activations the backward pass recomputes (``popart.RecomputationType``)."""

    NoRecompute = "NoRecompute"
    Standard = "Standard"
    NormOnly = "NormOnly"
    RecomputeAll = "RecomputeAll"
    Pipeline = "Pipeline"


class RecomputeType(enum.Enum):
    """Per-node recomputation (``Builder.recomputeOutputInBackwardPass``)."""

    Undefined = 0
    Checkpoint = 1
    Recompute = 2


class ReductionType(enum.Enum):
    """How a loss or the gradient accumulation reduces (``popart.ReductionType``)."""

    Sum = "Sum"
    Mean = "Mean"
    NoReduction = "NoReduction"


class SyntheticDataMode(enum.Enum):
    """Synthetic data (``popart.SyntheticDataMode``): inputs not read from the host."""

    Off = "Off"
    Zeros = "Zeros"
    RandomNormal = "RandomNormal"


_DEFAULTS: dict[str, Any] = {
    "virtualGraphMode": VirtualGraphMode.Off,
    "enablePipelining": False,
    "enableGradientAccumulation": False,
    "accumulationFactor": 1,
    "accumulationAndReplicationReductionType": ReductionType.Sum,
    "enableReplicatedGraphs": False,
    "replicatedGraphCount": 1,
    "autoRecomputation": RecomputationType.NoRecompute,
    "engineOptions": {},
    "convolutionOptions": {},
    "matmulOptions": {},
    "lstmOptions": {},
    "reportOptions": {},
    "instrumentWithHardwareCycleCounter": False,
    "enableStochasticRounding": False,
    "syntheticDataMode": SyntheticDataMode.Off,
    # I/O tiles per IPU (popart_api.io_tiles); 0: none
    "numIOTiles": 0,
    # PopART's default (popart_api.outline)
    "enableOutlining": True,
    # PopART's outliner (popart_api.outline): the least value of an outlined sequence,
    # and the penalty for splitting ops PopART schedules as one sequence
    "outlineThreshold": 1.0,
    "outlineSequenceBreakCost": 10000.0,
    "enableOutliningCopyCostPruning": True,
    "constantWeights": True,
    "enableEngineCaching": False,
    "cachePath": "session_cache",
    "logDir": "",
    "randomSeed": None,
    # PopART's older names: enableVirtualGraphs (Manual placement) and
    # autoVirtualGraph (Auto); setting either True sets virtualGraphMode
    "enableVirtualGraphs": False,
    "autoVirtualGraph": False,
}

_ENUMS = {
    "virtualGraphMode": VirtualGraphMode,
    "autoRecomputation": RecomputationType,
    "accumulationAndReplicationReductionType": ReductionType,
    "syntheticDataMode": SyntheticDataMode,
}
_BOOLS = {
    "enablePipelining",
    "enableGradientAccumulation",
    "enableReplicatedGraphs",
    "instrumentWithHardwareCycleCounter",
    "enableStochasticRounding",
    "enableOutlining",
    "enableOutliningCopyCostPruning",
    "constantWeights",
    "enableEngineCaching",
    "enableVirtualGraphs",
    "autoVirtualGraph",
}
_POSITIVE_INTS = {"accumulationFactor", "replicatedGraphCount"}
_FLOATS = {"outlineThreshold", "outlineSequenceBreakCost"}
_DICTS = {"engineOptions", "convolutionOptions", "matmulOptions", "lstmOptions", "reportOptions"}


class SessionOptions:
    """Options of a session (``popart.SessionOptions()``), set as attributes.

    Acted on: ``virtualGraphMode`` (Off, Manual: the ``virtualGraph`` of each node,
    Auto: consecutive ops spread over the IPUs), ``enablePipelining``,
    ``enableGradientAccumulation`` with ``accumulationFactor``,
    ``accumulationAndReplicationReductionType`` (Sum or Mean),
    ``enableReplicatedGraphs`` with ``replicatedGraphCount``, ``autoRecomputation``,
    ``syntheticDataMode``, ``randomSeed``, ``numIOTiles`` (:mod:`popart_api.io_tiles`),
    ``enableOutlining`` (recomputed nodes'
    replays call the forward pass's code, :mod:`popart_api.outline`; default True,
    as PopART's) with ``outlineThreshold``, ``outlineSequenceBreakCost`` and
    ``enableOutliningCopyCostPruning``, and the option dicts passed through
    (``engineOptions``, ``convolutionOptions``, ``matmulOptions``); PopART's older
    ``enableVirtualGraphs`` and ``autoVirtualGraph`` set ``virtualGraphMode`` to Manual
    and Auto. The others are accepted and recorded.
    """

    def __init__(self) -> None:
        for key, value in _DEFAULTS.items():
            object.__setattr__(self, key, dict(value) if isinstance(value, dict) else value)

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in _DEFAULTS:
            raise popart_exception(
                f"SessionOptions: no option '{key}'; known: {', '.join(sorted(_DEFAULTS))}"
            )
        object.__setattr__(self, key, _check(key, value))
        if key == "autoVirtualGraph" and value:
            object.__setattr__(self, "virtualGraphMode", VirtualGraphMode.Auto)
        elif key == "enableVirtualGraphs" and value and not self.autoVirtualGraph:
            object.__setattr__(self, "virtualGraphMode", VirtualGraphMode.Manual)

    def as_dict(self) -> dict[str, Any]:
        """Every option and its value."""
        return {k: getattr(self, k) for k in _DEFAULTS}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.as_dict().items() if v != _DEFAULTS[k]}
        return f"SessionOptions({changed})"


def _check(key: str, value: Any) -> Any:
    if key in _ENUMS:
        kind = _ENUMS[key]
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except ValueError:
            names = [m.name for m in kind]
            raise popart_exception(
                f"SessionOptions.{key}: {value!r} is not a {kind.__name__}; use one of "
                f"{names} (popart.{kind.__name__}.{names[0]})"
            ) from None
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise popart_exception(f"SessionOptions.{key}: {value!r} must be True or False")
        return value
    if key in _POSITIVE_INTS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise popart_exception(f"SessionOptions.{key}: {value!r} must be an int >= 1")
        return value
    if key in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise popart_exception(f"SessionOptions.{key}: {value!r} must be a number")
        return float(value)
    if key in _DICTS:
        if not isinstance(value, dict):
            raise popart_exception(
                f"SessionOptions.{key}: {value!r} must be a dict of option name -> value"
            )
        return {str(k): str(v) for k, v in value.items()}
    if key == "numIOTiles" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise popart_exception(f"SessionOptions.numIOTiles: {value!r} must be an int >= 0")
    if key == "randomSeed" and value is not None:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise popart_exception(f"SessionOptions.randomSeed: {value!r} must be an int")
        if not 0 <= value < 2**64:  # PopART's seed is a uint64
            raise popart_exception(
                f"SessionOptions.randomSeed: {value} is outside 0..2**64-1 (a uint64, as "
                "PopART's); hint: a seed in that range, e.g. seed % 2**64"
            )
        return int(value)
    return value


def seed_word(seed: int) -> int:
    """The 32-bit word the device's generator is seeded with: a seed's two halves
    folded, so seeds that differ only above bit 31 differ (the low half alone made
    5 and 5 + 2**32 the same stream); a seed below 2**32 is itself."""
    return (seed ^ (seed >> 32)) & 0xFFFFFFFF


__all__ = [
    "RecomputationType",
    "RecomputeType",
    "ReductionType",
    "SessionOptions",
    "SyntheticDataMode",
    "VirtualGraphMode",
]
