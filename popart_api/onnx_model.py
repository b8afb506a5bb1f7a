"""Reading an ONNX model for a session: the model from bytes, a ModelProto or a file,
the element types a device holds, and a node's attributes as Python values."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from popart_api.errors import popart_exception
from poplar_api import INT, Type
from poplar_api.types import ALL_TYPES

#: Host numpy dtype -> device type: each Poplar type's storage dtype, and int64 held as
#: INT, as PopART does by default (the IPU has no 64-bit integers).
DEVICE_TYPES = {t.numpy: t for t in ALL_TYPES} | {np.dtype(np.int64): INT}
#: Device type -> host numpy dtype of its arrays (the type's storage dtype).
HOST_DTYPES = {t: t.numpy.type for t in ALL_TYPES}
#: ONNX element types a model's inputs and weights may have.
_DEVICE_ONNX_TYPES = (
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.BOOL,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
)


def _device_type(onnx_type: int) -> tuple[Type, type]:
    """(device type, host numpy dtype) of ONNX element type ``onnx_type``: the Poplar
    type of the numpy dtype ONNX gives it (:data:`DEVICE_TYPES`)."""
    typ = DEVICE_TYPES[np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))]
    return typ, HOST_DTYPES[typ]


#: ONNX element type -> (device type, host numpy dtype) of model inputs and weights.
#: INT64 is held as INT32: int64 host arrays are cast on the way in, anchors come back
#: as int32.
ONNX_TYPES = {code: _device_type(code) for code in _DEVICE_ONNX_TYPES}
#: Initializer types held as device variables (weights); other initializers (INT64
#: shapes, axes, 8/16-bit tables) are values known when the graph is built.
WEIGHT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.INT32,
        onnx.TensorProto.BOOL,
    }
)


def load_model(fnModel: Any, what: str) -> onnx.ModelProto:
    """An ``onnx.ModelProto`` from serialized bytes, a ModelProto or a file path.

    A model without a graph is refused: protobuf reads an empty file, or one cut off
    before its graph, as a valid empty model, which would run as a model of nothing.
    """
    if isinstance(fnModel, onnx.ModelProto):
        return _with_graph(fnModel, what, "the ModelProto")
    if isinstance(fnModel, bytes | bytearray):
        try:
            model = onnx.load_from_string(bytes(fnModel))
        except Exception as exc:
            raise popart_exception(
                f"{what}: the bytes are not a serialized ONNX ModelProto ({exc})"
            ) from None
        return _with_graph(model, what, f"the {len(fnModel)} bytes given")
    if isinstance(fnModel, str | os.PathLike):
        if not os.path.isfile(fnModel):
            raise popart_exception(
                f"{what}: model file '{fnModel}' does not exist; hint: pass "
                "builder.getModelProto() or the path of a file written with onnx.save"
            )
        try:
            model = onnx.load(os.fspath(fnModel))
        except Exception as exc:
            raise popart_exception(f"{what}: cannot read '{fnModel}' as ONNX ({exc})") from None
        size = os.path.getsize(fnModel)
        return _with_graph(model, what, f"model file '{fnModel}' ({size} bytes)")
    raise popart_exception(
        f"{what}: fnModel must be ModelProto bytes or a file path, got {type(fnModel).__name__}"
    )


def _with_graph(model: onnx.ModelProto, what: str, source: str) -> onnx.ModelProto:
    if model.HasField("graph"):
        return model
    raise popart_exception(
        f"{what}: {source} holds no ONNX graph; required a model with a graph (its "
        "inputs, nodes and outputs); hint: the file may be empty or cut short: write it "
        "again with onnx.save or session.modelToHost"
    )


def check_assignments(graph: onnx.GraphProto, what: str) -> None:
    """Refuse a graph that makes a tensor twice or never makes an output.

    ONNX assigns each tensor once (a graph in single static assignment form): a second
    node writing the same id would silently replace the first one's value for every
    later reader, and a graph output no node, input or initializer makes cannot be
    returned.

    Raises
    ------
    popart_exception
        Naming the tensor and both nodes (or the output), with a hint.
    """
    made: dict[str, str] = {vi.name: "a graph input" for vi in graph.input}
    made.update({t.name: "an initializer" for t in graph.initializer})
    for i, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{i}"
        for tid in filter(None, node.output):
            if tid in made:
                raise popart_exception(
                    f"{what}: {node.op_type} (node '{name}') makes '{tid}', which is already "
                    f"made by {made[tid]}; required each tensor made once (ONNX's single "
                    "static assignment); hint: give the output another name"
                )
            made[tid] = f"{node.op_type} (node '{name}')"
    for out in graph.output:
        if out.name not in made:
            raise popart_exception(
                f"{what}: graph output '{out.name}' is made by no node, input or "
                "initializer of the model; hint: name the output of the node that makes it"
            )


def node_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """The attributes of ``node`` as Python values (tensors as numpy arrays, strings
    decoded)."""
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, bytes):
            v = v.decode()
        attrs[a.name] = v
    return attrs


__all__ = [
    "DEVICE_TYPES",
    "HOST_DTYPES",
    "ONNX_TYPES",
    "WEIGHT_TYPES",
    "check_assignments",
    "load_model",
    "node_attrs",
]
