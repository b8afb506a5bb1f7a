"""PopART's ``DataFlow`` (batches per step and anchors), ``AnchorReturnType``,
``InputShapeInfo``, ``PyStepIO`` (one step's host arrays), ``PyStepIOCallback`` (the
same through callbacks) and ``PyWeightsIO``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from popart_api.builder import TensorInfo
from popart_api.errors import popart_exception

RETURN_TYPES = ("ALL", "FINAL", "EVERYN", "SUM")


class AnchorReturnType:
    """What an anchor returns per step: ``AnchorReturnType("ALL")`` (every batch),
    ``"FINAL"`` (the last batch), ``"EVERYN", n`` (every n-th batch) or ``"SUM"``
    (the sum over the batches)."""

    def __init__(self, artId: str, returnPeriod: int | None = None) -> None:
        art = str(artId).upper()
        if art not in RETURN_TYPES:
            raise popart_exception(
                f"AnchorReturnType: '{artId}' is not a return type; use one of {RETURN_TYPES}"
            )
        if art == "EVERYN":
            if isinstance(returnPeriod, bool) or not isinstance(returnPeriod, int):
                raise popart_exception(
                    f"AnchorReturnType('EVERYN', n): n must be an int >= 1, got {returnPeriod!r}"
                )
            if returnPeriod < 1:
                raise popart_exception(f"AnchorReturnType: EVERYN period {returnPeriod} < 1")
        self._id = art
        self._period = int(returnPeriod) if art == "EVERYN" else 1

    def id(self) -> str:
        """The return type's name (``"ALL"``...)."""
        return self._id

    def rp(self) -> int:
        """The return period (EVERYN's n; 1 otherwise)."""
        return self._period

    def __repr__(self) -> str:
        return f"AnchorReturnType({self._id!r}" + (
            f", {self._period})" if self._id == "EVERYN" else ")"
        )


class DataFlow:
    """Batches per step and the anchors (tensors returned to the host).

    ``DataFlow(batchesPerStep, {id: AnchorReturnType(...)})``, or
    ``DataFlow(batchesPerStep, [ids], AnchorReturnType(...))`` for one type for all.
    """

    def __init__(
        self,
        batchesPerStep: int,
        anchorTensors: Mapping[str, AnchorReturnType] | list[str] | None = None,
        anchorReturnType: AnchorReturnType | None = None,
    ) -> None:
        if isinstance(batchesPerStep, bool) or not isinstance(batchesPerStep, int):
            raise popart_exception(f"DataFlow: batchesPerStep {batchesPerStep!r} is not an int")
        if batchesPerStep < 1:
            raise popart_exception(f"DataFlow: batchesPerStep {batchesPerStep} must be >= 1")
        self.batchesPerStep = batchesPerStep
        anchors = anchorTensors or {}
        if isinstance(anchors, str | bytes) or not isinstance(anchors, Mapping | Iterable):
            # a string was split into one anchor per character
            raise popart_exception(
                f"DataFlow: anchorTensors {anchors!r} is a {type(anchors).__name__}; expected "
                "a dict {id: AnchorReturnType} or a list of ids; hint: "
                f"DataFlow({batchesPerStep}, [{anchors!r}])"
            )
        if not isinstance(anchors, Mapping):
            anchors = {a: anchorReturnType or AnchorReturnType("ALL") for a in anchors}
        for k, v in anchors.items():
            if not isinstance(k, str):
                raise popart_exception(
                    f"DataFlow: anchor {k!r} is a {type(k).__name__}; expected a tensor id "
                    "(str), as the builder returns"
                )
            if not isinstance(v, AnchorReturnType):
                raise popart_exception(
                    f"DataFlow: anchor '{k}' has {v!r}, not an AnchorReturnType; hint: "
                    "popart.AnchorReturnType('ALL')"
                )
        self._anchors: dict[str, AnchorReturnType] = dict(anchors)

    def anchors(self) -> list[str]:
        """The anchor ids."""
        return list(self._anchors)

    def art(self, anchorId: str) -> AnchorReturnType:
        """The return type of ``anchorId``."""
        return self._anchors[anchorId]

    def nAnchors(self) -> int:
        """Number of anchors."""
        return len(self._anchors)


class InputShapeInfo:
    """Shapes of model inputs the model leaves unspecified: ``add(id, TensorInfo)``."""

    def __init__(self) -> None:
        self._infos: dict[str, TensorInfo] = {}

    def add(self, tensorId: str, tensorInfo: TensorInfo) -> None:
        """Give ``tensorId``'s type and shape."""
        if not isinstance(tensorInfo, TensorInfo):
            raise popart_exception(
                f"InputShapeInfo.add('{tensorId}'): {tensorInfo!r} is a "
                f"{type(tensorInfo).__name__}; expected a popart.TensorInfo; hint: "
                "popart.TensorInfo('FLOAT', [2, 3])"
            )
        self._infos[tensorId] = tensorInfo

    def get(self, tensorId: str) -> TensorInfo:
        """The info of ``tensorId``."""
        return self._infos[tensorId]

    def has(self, tensorId: str) -> bool:
        """Whether ``tensorId`` has an info."""
        return tensorId in self._infos


class PyStepIO:
    """The data of one step: ``PyStepIO({inputId: array}, {anchorId: array})``."""

    def __init__(self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray]) -> None:
        if not isinstance(inputs, Mapping) or not isinstance(outputs, Mapping):
            raise popart_exception(
                "PyStepIO: takes (inputs, outputs), both dicts of tensor id -> numpy array"
            )
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)


class PyStepIOCallback:
    """The data of one step through callbacks, as PopART's ``PyStepIOCallback``.

    Parameters
    ----------
    input_callback
        ``(tensorId, prefetch) -> array``: the next micro-batch of an input (one
        replica's shape), called once per micro-batch and replica.
    input_complete_callback
        ``(tensorId) -> None``: that array has been consumed.
    output_callback
        ``(tensorId) -> array``: where the next value of an anchor goes (its shape
        without the step's leading dimensions).
    output_complete_callback
        ``(tensorId) -> None``: that array has been written.
    """

    def __init__(
        self,
        input_callback: Callable[[str, bool], np.ndarray],
        input_complete_callback: Callable[[str], None],
        output_callback: Callable[[str], np.ndarray],
        output_complete_callback: Callable[[str], None],
    ) -> None:
        for what, fn in (
            ("input_callback", input_callback),
            ("input_complete_callback", input_complete_callback),
            ("output_callback", output_callback),
            ("output_complete_callback", output_complete_callback),
        ):
            if not callable(fn):
                raise popart_exception(
                    f"PyStepIOCallback: {what} is {type(fn).__name__}, not a callable"
                )
        self.input_callback = input_callback
        self.input_complete_callback = input_complete_callback
        self.output_callback = output_callback
        self.output_complete_callback = output_complete_callback


class PyWeightsIO:
    """Host arrays for ``readWeights``/``writeWeights``: ``PyWeightsIO({id: array})``."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        if not isinstance(weights, Mapping):
            raise popart_exception("PyWeightsIO: takes a dict of weight id -> numpy array")
        self.weights = dict(weights)


__all__ = [
    "RETURN_TYPES",
    "AnchorReturnType",
    "DataFlow",
    "InputShapeInfo",
    "PyStepIO",
    "PyStepIOCallback",
    "PyWeightsIO",
]
