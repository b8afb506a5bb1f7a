"""A PopART-like Python layer over poplar_api: build or import an ONNX model and run
its inference on the ipusim simulator.

Use it as PopART: ``import popart_api as popart``; ``popart.Builder()``,
``popart.DataFlow``, ``popart.InferenceSession``, ``popart.DeviceManager``. What is
supported is listed in docs/popart.md.
"""

from popart_api.builder import Builder, TensorInfo
from popart_api.devices import DeviceInfo, DeviceManager
from popart_api.errors import PopartError, popart_exception
from popart_api.ops import supported_ops
from popart_api.session import (
    AnchorReturnType,
    DataFlow,
    InferenceSession,
    InputShapeInfo,
    PyStepIO,
)

__all__ = [
    "AnchorReturnType",
    "Builder",
    "DataFlow",
    "DeviceInfo",
    "DeviceManager",
    "InferenceSession",
    "InputShapeInfo",
    "PopartError",
    "PyStepIO",
    "TensorInfo",
    "popart_exception",
    "supported_ops",
]
