"""A Poplar-like Python API whose graphs run on the ipusim machine model.

Names follow Poplar's C++ API (``Graph.addVariable``, ``setTileMapping``,
``Engine.run``, ...), so programs port with little change.
"""

import ipusim  # noqa: F401 - first: stamps the kernels' disk cache (ipusim.kernel_cache)
from poplar_api import gcl, program
from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.device import (
    Device,
    DeviceError,
    DeviceManager,
    IPUModel,
    SyncDelayType,
    Target,
    TargetType,
)
from poplar_api.engine import Engine
from poplar_api.errors import StreamCallbackError
from poplar_api.executable import Executable, ExecutableError, compileGraph
from poplar_api.graph import (
    ComputeSet,
    DataStream,
    Function,
    Graph,
    ReplicatedStreamMode,
    VertexRef,
)
from poplar_api.remote import RemoteBuffer
from poplar_api.streams import LegacyStreamCallback, StreamCallback
from poplar_api.summary import printExecutionSummary, printGraphSummary
from poplar_api.tensor import Interval, Tensor, append, concat
from poplar_api.types import (
    BOOL,
    CHAR,
    FLOAT,
    HALF,
    INT,
    SHORT,
    UNSIGNED_CHAR,
    UNSIGNED_INT,
    UNSIGNED_SHORT,
    Type,
)

__all__ = [
    "BOOL",
    "CHAR",
    "FLOAT",
    "HALF",
    "INT",
    "SHORT",
    "UNSIGNED_CHAR",
    "UNSIGNED_INT",
    "UNSIGNED_SHORT",
    "ComputeSet",
    "DataStream",
    "Device",
    "DeviceError",
    "DeviceManager",
    "Engine",
    "Executable",
    "ExecutableError",
    "Function",
    "Graph",
    "IPUModel",
    "InOut",
    "Input",
    "Interval",
    "LegacyStreamCallback",
    "MultiVertex",
    "Output",
    "RemoteBuffer",
    "ReplicatedStreamMode",
    "StreamCallback",
    "StreamCallbackError",
    "SyncDelayType",
    "Target",
    "TargetType",
    "Tensor",
    "Type",
    "Vector",
    "VectorList",
    "Vertex",
    "VertexRef",
    "append",
    "compileGraph",
    "concat",
    "gcl",
    "printExecutionSummary",
    "printGraphSummary",
    "program",
]
