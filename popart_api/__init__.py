"""A PopART-like Python layer over poplar_api: build or import an ONNX model and run
its inference on the ipusim simulator.

Use it as PopART: ``import popart_api as popart``; ``popart.Builder()``,
``popart.DataFlow``, ``popart.InferenceSession``, ``popart.DeviceManager``. What is
supported is listed in docs/popart.md.
"""

# The op modules register their lowerings and gradients when imported.
from popart_api import (  # noqa: F401
    grads,
    ops_activation,
    ops_control,
    ops_integer,
    ops_legacy,
    ops_loss,
    ops_math,
    ops_nn,
    ops_random,
    ops_resize,
    ops_rnn,
    ops_scatter,
    ops_shape,
    ops_tensor,
    ops_window,
)
from popart_api.autodiff import reservedGradientPrefix
from popart_api.builder import Builder, TensorInfo
from popart_api.dataflow import (
    AnchorReturnType,
    DataFlow,
    InputShapeInfo,
    PyStepIO,
    PyStepIOCallback,
    PyWeightsIO,
)
from popart_api.devices import DeviceInfo, DeviceManager
from popart_api.errors import OutOfMemoryException, PopartError, popart_exception
from popart_api.logger import getLogger
from popart_api.ops import supported_ops
from popart_api.optimizers import SGD, Adam, AdamMode, ConstSGD, Optimizer, WeightDecayMode
from popart_api.options import (
    RecomputationType,
    RecomputeType,
    ReductionType,
    SessionOptions,
    SyntheticDataMode,
    VirtualGraphMode,
)
from popart_api.patterns import Patterns, PatternsLevel
from popart_api.session import InferenceSession, TrainingSession

__all__ = [
    "SGD",
    "Adam",
    "AdamMode",
    "AnchorReturnType",
    "Builder",
    "ConstSGD",
    "DataFlow",
    "DeviceInfo",
    "DeviceManager",
    "InferenceSession",
    "InputShapeInfo",
    "Optimizer",
    "OutOfMemoryException",
    "Patterns",
    "PatternsLevel",
    "PopartError",
    "PyStepIO",
    "PyStepIOCallback",
    "PyWeightsIO",
    "RecomputationType",
    "RecomputeType",
    "ReductionType",
    "SessionOptions",
    "SyntheticDataMode",
    "TensorInfo",
    "TrainingSession",
    "VirtualGraphMode",
    "WeightDecayMode",
    "getLogger",
    "popart_exception",
    "reservedGradientPrefix",
    "supported_ops",
]
