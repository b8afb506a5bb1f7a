"""PopART's ``Builder``: build an ONNX model op by op.

Ops are methods of ``builder.aiOnnx`` (domain ``ai.onnx``) and ``builder.aiGraphcore``
(domain ``ai.graphcore``), :mod:`popart_api.builder_opsets`; each takes a list of input
tensor ids and the attributes, by position in PopART's order or by name, and returns the
output id (a string) or, for an op with several outputs, the list of ids.
``getModelProto()`` gives the serialized ``onnx.ModelProto``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from popart_api.builder_extras import BuilderExtras
from popart_api.builder_opsets import (
    AI_GRAPHCORE_OPS,
    GRAPHCORE_DOMAIN,
    AiGraphcore,
    AiOnnx,
    onnx_ops,
)
from popart_api.errors import popart_exception
from popart_api.onnx_model import load_model

#: Default opset versions, as PopART's Builder.
DEFAULT_OPSETS = {"ai.onnx": 11, "ai.graphcore": 1}
#: Node attribute holding the virtual graph (IPU) of a node, as PopART names it.
VIRTUAL_GRAPH_ATTRIBUTE = "__ipu_number"
#: Node attribute holding the pipeline stage of a node, as PopART names it.
PIPELINE_STAGE_ATTRIBUTE = "__pipeline_stage"
#: Node attribute marking a node for recomputation, as PopART names it.
RECOMPUTE_ATTRIBUTE = "__recompute_output_in_backward_pass"
#: Node attribute holding a matmul's or convolution's available memory proportion.
MEMORY_PROPORTION_ATTRIBUTE = "__available_memory_proportion"

#: PopART dtype strings -> ONNX element types.
DTYPE_NAMES = {
    "FLOAT": TensorProto.FLOAT,
    "FLOAT16": TensorProto.FLOAT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "INT16": TensorProto.INT16,
    "INT8": TensorProto.INT8,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "BOOL": TensorProto.BOOL,
}
_ONNX_TO_NAME = {v: k for k, v in DTYPE_NAMES.items()}
#: The largest element count a TensorInfo may describe (PopART's int64 nelms).
INT64_MAX = 2**63 - 1


def _onnx_type(dtype: Any, what: str) -> int:
    if isinstance(dtype, str) and dtype.upper() in DTYPE_NAMES:
        return DTYPE_NAMES[dtype.upper()]
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (TypeError, KeyError, ValueError):
        raise popart_exception(
            f"{what}: data type {dtype!r} is not known; hint: one of "
            f"{sorted(DTYPE_NAMES)} or a numpy dtype such as np.float32"
        ) from None


def _listed(values: Any) -> list[Any] | None:
    try:
        return list(values)
    except TypeError:
        return None


class TensorInfo:
    """Data type and shape of a tensor: ``TensorInfo("FLOAT", [2, 3])`` or
    ``TensorInfo(np.float32, [2, 3])``.

    Raises
    ------
    popart_exception
        Unknown data type, a shape that is not a list of ints >= 0, or one with more
        elements than an int64 counts.
    """

    def __init__(self, dtype: Any, shape: Sequence[int]) -> None:
        self._type = _onnx_type(dtype, "TensorInfo")
        # a float would be truncated ([2.5] read as [2]) and a string split ("23")
        items = None if isinstance(shape, str | bytes) else _listed(shape)
        if items is None or any(
            isinstance(d, bool) or not isinstance(d, int | np.integer) for d in items
        ):
            raise popart_exception(
                f"TensorInfo: shape {shape!r} must be a list of ints, e.g. [2, 3]"
            )
        dims = [int(d) for d in items]
        if any(d < 0 for d in dims):
            raise popart_exception(f"TensorInfo: shape {dims} has a negative dimension")
        count = math.prod(dims)
        if count > INT64_MAX:  # PopART counts elements in an int64; numpy's prod wraps
            raise popart_exception(
                f"TensorInfo: shape {dims} has {count} elements, more than an int64 holds "
                f"({INT64_MAX}); hint: a smaller shape"
            )
        self._shape = dims

    def shape(self) -> list[int]:
        """The dimensions."""
        return list(self._shape)

    def rank(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    def nelms(self) -> int:
        """Number of elements."""
        return math.prod(self._shape)

    def data_type(self) -> str:
        """The data type's name, upper case (``"FLOAT"``)."""
        return _ONNX_TO_NAME.get(self._type, TensorProto.DataType.Name(self._type))

    def data_type_lcase(self) -> str:
        """The data type's name, lower case (``"float"``)."""
        return self.data_type().lower()

    @property
    def onnxType(self) -> int:
        """The ONNX ``TensorProto`` element type."""
        return self._type

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorInfo)
            and other._type == self._type
            and other._shape == self._shape
        )

    def __repr__(self) -> str:
        return f"TensorInfo({self.data_type()}, {self._shape})"


class Builder(BuilderExtras):
    """Build an ONNX model: ``popart.Builder()``.

    Parameters
    ----------
    modelProtoOrFilename
        An existing model (serialized bytes, a ``ModelProto`` or a file path) to add to.
    opsets
        Opset versions, ``{"ai.onnx": 11, "ai.graphcore": 1}`` by default (PopART's).
    """

    def __init__(
        self, modelProtoOrFilename: Any = None, opsets: dict[str, int] | None = None
    ) -> None:
        self.opsets = dict(DEFAULT_OPSETS)
        self.opsets.update(opsets or {})
        self._nodes: list[onnx.NodeProto] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._outputs: list[str] = []
        #: id -> (ONNX element type, shape) of every tensor made so far
        self._info: dict[str, tuple[int, list[int]]] = {}
        #: id -> value of tensors known at build time (initializers, constants)
        self._values: dict[str, np.ndarray] = {}
        self._names: dict[str, int] = {}
        self._name_scope: list[str] = []  # nameScope blocks, outermost first
        #: node attribute -> stack of values set by ``with`` scopes (virtual graph,
        #: pipeline stage...)
        self._scopes: dict[str, list[Any]] = {
            VIRTUAL_GRAPH_ATTRIBUTE: [],
            PIPELINE_STAGE_ATTRIBUTE: [],
        }
        if modelProtoOrFilename is not None:
            self._load(modelProtoOrFilename)
        self.aiOnnx = AiOnnx(self, "", onnx_ops())
        self.aiGraphcore = AiGraphcore(self, GRAPHCORE_DOMAIN, AI_GRAPHCORE_OPS)

    # ------------------------------------------------------------------ loading
    def _load(self, model: Any) -> None:
        proto = load_model(model, "Builder")
        for imp in proto.opset_import:
            self.opsets[imp.domain or "ai.onnx"] = imp.version
        inferred = onnx.shape_inference.infer_shapes(proto)
        init_names = {t.name for t in proto.graph.initializer}
        for t in proto.graph.initializer:
            self._initializers.append(t)
            arr = numpy_helper.to_array(t)
            self._values[t.name] = arr
            self._info[t.name] = (t.data_type, list(arr.shape))
        for vi in proto.graph.input:
            if vi.name not in init_names:
                self._inputs.append(vi)
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info):
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            self._info.setdefault(vi.name, (vi.type.tensor_type.elem_type, dims))
        for vi in inferred.graph.output:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            self._info.setdefault(vi.name, (vi.type.tensor_type.elem_type, dims))
        self._nodes.extend(proto.graph.node)
        self._outputs.extend(o.name for o in proto.graph.output)
        for name in self._info:
            self._names[name] = 1

    # ------------------------------------------------------------------ naming
    def _unique(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        name = base if n == 0 else f"{base}/{n}"
        while name in self._info:
            n += 1
            self._names[base] = n + 1
            name = f"{base}/{n}"
        return name

    def _check_id(self, tid: Any, what: str) -> str:
        if not isinstance(tid, str):
            raise popart_exception(
                f"{what}: tensor id {tid!r} is not a string; hint: ids are the strings the "
                "Builder returned"
            )
        if tid not in self._info:
            known = ", ".join(sorted(self._info)[:20])
            raise popart_exception(
                f"{what}: no tensor '{tid}' in the model; known ids: {known or '(none)'}"
            )
        return tid

    # ------------------------------------------------------------------ tensors
    def addInputTensor(self, tensorInfo: Any, debugContext: str = "") -> str:
        """Add a model input of ``tensorInfo`` (a :class:`TensorInfo`, or a dtype string
        then a shape as PopART's ``addInputTensor("FLOAT", [2, 3])``); returns its id."""
        if isinstance(tensorInfo, str) and isinstance(debugContext, list | tuple):
            tensorInfo, debugContext = TensorInfo(tensorInfo, debugContext), ""
        if not isinstance(tensorInfo, TensorInfo):
            raise popart_exception(
                f"Builder.addInputTensor: expected a TensorInfo, got "
                f"{type(tensorInfo).__name__}; hint: popart.TensorInfo('FLOAT', [2, 3])"
            )
        tid = self._unique(str(debugContext) or "input")
        self._inputs.append(
            helper.make_tensor_value_info(tid, tensorInfo.onnxType, tensorInfo.shape())
        )
        self._info[tid] = (tensorInfo.onnxType, tensorInfo.shape())
        return tid

    def addInitializedInputTensor(self, initVal: Any, debugContext: str = "") -> str:
        """Add a weight initialized to ``initVal`` (a numpy array); returns its id."""
        arr = np.ascontiguousarray(initVal)
        if arr.dtype == np.float64:
            raise popart_exception(
                "Builder.addInitializedInputTensor: float64 arrays are not supported (the "
                "IPU has no 64-bit floats); hint: pass arr.astype(np.float32)"
            )
        tid = self._unique(str(debugContext) or "init_input")
        try:
            proto = numpy_helper.from_array(arr, tid)
        except Exception as exc:
            raise popart_exception(
                f"Builder.addInitializedInputTensor: cannot store an array of dtype "
                f"{arr.dtype} ({exc})"
            ) from None
        self._initializers.append(proto)
        self._info[tid] = (proto.data_type, list(arr.shape))
        self._values[tid] = arr
        return tid

    def addOutputTensor(self, outputName: str) -> None:
        """Mark tensor ``outputName`` as a model output."""
        self._check_id(outputName, "Builder.addOutputTensor")
        if outputName not in self._outputs:
            self._outputs.append(outputName)

    def getTensorShape(self, id: str) -> list[int]:
        """The shape of tensor ``id``."""
        return list(self._info[self._check_id(id, "Builder.getTensorShape")][1])

    def getTensorDtypeString(self, id: str) -> str:
        """The data type of tensor ``id``, lower case (``"float32"``)."""
        t = self._info[self._check_id(id, "Builder.getTensorDtypeString")][0]
        return str(helper.tensor_dtype_to_np_dtype(t))

    def getInputTensorIds(self) -> list[str]:
        """Ids of the model inputs (weights included, as PopART)."""
        return [v.name for v in self._inputs] + [t.name for t in self._initializers]

    def getOutputTensorIds(self) -> list[str]:
        """Ids of the model outputs."""
        return list(self._outputs)

    # ---------------------------------------------------------- virtual graphs
    def virtualGraph(self, *args: Any) -> Any:
        """``virtualGraph(tensorId, ipu)`` puts the node making ``tensorId`` on virtual
        graph ``ipu``; ``with builder.virtualGraph(ipu):`` does so for every node added
        inside the block. Recorded as node attribute ``__ipu_number``."""
        if len(args) == 1:
            return self._vgraph_scope(self._check_ipu(args[0]))
        if len(args) != 2:
            raise popart_exception(
                "Builder.virtualGraph: takes (ipu) as a context manager or (tensorId, ipu)"
            )
        tid, ipu = args
        node = self._producer(self._check_id(tid, "Builder.virtualGraph"), "virtualGraph")
        self._set_attr(node, VIRTUAL_GRAPH_ATTRIBUTE, self._check_ipu(ipu))
        return None

    def getVirtualGraph(self, tensorId: str) -> int:
        """The virtual graph of the node making ``tensorId``."""
        node = self._producer(self._check_id(tensorId, "Builder.getVirtualGraph"), "")
        for a in node.attribute:
            if a.name == VIRTUAL_GRAPH_ATTRIBUTE:
                return int(a.i)
        raise popart_exception(
            f"Builder.getVirtualGraph: the node making '{tensorId}' has no virtual graph"
        )

    @contextlib.contextmanager
    def _vgraph_scope(self, ipu: int) -> Iterator[None]:
        with self._scope(VIRTUAL_GRAPH_ATTRIBUTE, ipu):
            yield

    @contextlib.contextmanager
    def _scope(self, attribute: str, value: Any) -> Iterator[None]:
        self._scopes[attribute].append(value)
        try:
            yield
        finally:
            self._scopes[attribute].pop()

    @contextlib.contextmanager
    def nameScope(self, name: str) -> Iterator[None]:
        """``with builder.nameScope("layer1"):`` prefixes the names and output ids of
        the nodes added inside the block with ``layer1/`` (nested scopes join)."""
        self._name_scope.append(self._check_name(name))
        try:
            yield
        finally:
            self._name_scope.pop()

    def _check_name(self, name: Any) -> str:
        if not isinstance(name, str) or not name:
            raise popart_exception(f"Builder.nameScope: {name!r} must be a non-empty str")
        return name

    def pipelineStage(self, *args: Any) -> Any:
        """``pipelineStage(tensorId, stage)`` puts the node making ``tensorId`` in
        pipeline stage ``stage``; ``with builder.pipelineStage(stage):`` does so for
        every node added inside the block (node attribute ``__pipeline_stage``)."""
        if len(args) == 1:
            return self._scope(PIPELINE_STAGE_ATTRIBUTE, self._check_int(args[0], "pipelineStage"))
        if len(args) != 2:
            raise popart_exception(
                "Builder.pipelineStage: takes (stage) as a context manager or (tensorId, stage)"
            )
        node = self._producer(self._check_id(args[0], "Builder.pipelineStage"), "pipelineStage")
        self._set_attr(node, PIPELINE_STAGE_ATTRIBUTE, self._check_int(args[1], "pipelineStage"))
        return None

    def getPipelineStage(self, tensorId: str) -> int:
        """The pipeline stage of the node making ``tensorId``."""
        return int(self._node_attr(tensorId, PIPELINE_STAGE_ATTRIBUTE, "getPipelineStage"))

    def recomputeOutputInBackwardPass(self, tensorIds: Any, value: Any = None) -> None:
        """Mark the nodes making ``tensorIds`` (an id or a set of ids) to be recomputed
        in the backward pass instead of kept (``popart.RecomputeType.Recompute``, the
        default) or kept (``RecomputeType.Checkpoint``)."""
        from popart_api.options import RecomputeType

        kind = RecomputeType.Recompute if value is None else value
        if not isinstance(kind, RecomputeType):
            raise popart_exception(
                f"Builder.recomputeOutputInBackwardPass: {value!r} is not a popart.RecomputeType"
            )
        self._set_producers_attr(
            tensorIds, RECOMPUTE_ATTRIBUTE, kind.value, "recomputeOutputInBackwardPass"
        )

    def getRecompute(self, tensorId: str) -> bool:
        """Whether the node making ``tensorId`` is recomputed in the backward pass."""
        from popart_api.options import RecomputeType

        try:
            value = self._node_attr(tensorId, RECOMPUTE_ATTRIBUTE, "getRecompute")
        except popart_exception:
            return False
        return value == RecomputeType.Recompute.value

    def setAvailableMemoryProportion(self, nodeOutputNames: Any, value: float) -> None:
        """The proportion of tile memory the convolution or matmul making
        ``nodeOutputNames`` may use for temporaries (Poplibs'
        ``availableMemoryProportion``, 0 < value <= 1)."""
        try:
            proportion = float(value)
        except (TypeError, ValueError):
            proportion = float("nan")
        if not 0.0 < proportion <= 1.0:
            raise popart_exception(
                f"Builder.setAvailableMemoryProportion: {value!r} must be in (0, 1]"
            )
        self._set_producers_attr(
            nodeOutputNames, MEMORY_PROPORTION_ATTRIBUTE, proportion, "setAvailableMemoryProportion"
        )

    def addNodeAttribute(
        self, attributeName: str, attributeValue: Any, nodeOutputNames: Any
    ) -> None:
        """Add an attribute to the node making ``nodeOutputNames``."""
        self._set_producers_attr(
            nodeOutputNames, str(attributeName), attributeValue, "addNodeAttribute"
        )

    def _set_producers_attr(self, tensorIds: Any, attribute: str, value: Any, what: str) -> None:
        """Set ``attribute`` to ``value`` on the node making each of ``tensorIds`` (an id
        or several); ``what`` names the Builder method in errors."""
        ids = [tensorIds] if isinstance(tensorIds, str) else list(tensorIds)
        for tid in ids:
            node = self._producer(self._check_id(tid, f"Builder.{what}"), what)
            self._set_attr(node, attribute, value)

    def _node_attr(self, tensorId: str, attribute: str, what: str) -> Any:
        node = self._producer(self._check_id(tensorId, f"Builder.{what}"), what)
        for a in node.attribute:
            if a.name == attribute:
                return helper.get_attribute_value(a)
        raise popart_exception(
            f"Builder.{what}: the node making '{tensorId}' has no attribute '{attribute}'"
        )

    @staticmethod
    def _check_int(value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise popart_exception(f"Builder.{what}: {value!r} must be an int >= 0")
        return int(value)

    @staticmethod
    def _check_ipu(ipu: Any) -> int:
        if isinstance(ipu, bool) or not isinstance(ipu, int | np.integer) or ipu < 0:
            raise popart_exception(f"Builder.virtualGraph: ipu {ipu!r} must be an int >= 0")
        return int(ipu)

    def _producer(self, tid: str, what: str) -> onnx.NodeProto:
        for node in self._nodes:
            if tid in node.output:
                return node
        raise popart_exception(
            f"Builder.{what}: tensor '{tid}' is a model input or weight, made by no node"
        )

    @staticmethod
    def _set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
        for i, a in enumerate(node.attribute):
            if a.name == name:
                del node.attribute[i]
                break
        node.attribute.append(helper.make_attribute(name, value))

    # -------------------------------------------------------------------- nodes
    def _add_node(
        self,
        domain: str,
        op_type: str,
        args: Any,
        attrs: dict[str, Any],
        debugContext: str,
        num_outputs: int = 1,
    ) -> list[str]:
        what = f"Builder: {op_type}"
        if isinstance(args, str) or not isinstance(args, list | tuple):
            raise popart_exception(
                f"{what}: inputs must be a list of tensor ids, got {args!r}; hint: "
                f"builder.aiOnnx.{op_type.lower()}([a, b])"
            )
        if isinstance(num_outputs, bool) or not isinstance(num_outputs, int) or num_outputs < 1:
            raise popart_exception(f"{what}: num_outputs {num_outputs!r} must be an int >= 1")
        inputs = [self._check_id(a, what) if a != "" else "" for a in args]
        scope = "".join(f"{part}/" for part in self._name_scope)
        name = self._unique(scope + (str(debugContext) or op_type))
        outs = [self._unique(f"{scope}{op_type}:{k}") for k in range(num_outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        for key, stack in self._scopes.items():
            if stack:
                attrs[key] = stack[-1]
        try:
            node = helper.make_node(op_type, inputs, outs, name=name, domain=domain, **attrs)
        except (TypeError, ValueError) as exc:
            raise popart_exception(f"{what}: bad attribute ({exc})") from None
        for out, info in zip(outs, self._infer(node, what), strict=True):
            self._info[out] = info
        if op_type == "Constant":
            self._values[outs[0]] = numpy_helper.to_array(attrs["value"])
        else:
            self._fold(node)
        self._nodes.append(node)
        return outs

    #: Ops folded when their inputs are known (shape arithmetic of exported models).
    FOLDABLE = {
        "Shape",
        "Gather",
        "Concat",
        "Unsqueeze",
        "Squeeze",
        "Slice",
        "Cast",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Reshape",
        "Identity",
        "Range",
        "ConstantOfShape",
        "Expand",
    }

    def _fold(self, node: onnx.NodeProto) -> None:
        """Record the value of a shape-arithmetic node whose inputs are known, so a
        later Reshape/Expand/Slice using it has a known shape (as ONNX's data
        propagation in shape inference)."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in self.FOLDABLE:
            return
        if node.op_type == "Shape":
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), None)
            shape = np.asarray(self._info[node.input[0]][1], np.int64)
            self._values[node.output[0]] = shape[start:end]
            return
        if not all(i in self._values for i in node.input if i):
            return
        if sum(int(np.size(self._values[i])) for i in node.input if i) > 4096:
            return
        from onnx.reference import ReferenceEvaluator

        plain = onnx.NodeProto()
        plain.CopyFrom(node)
        del plain.attribute[:]
        plain.attribute.extend(a for a in node.attribute if not a.name.startswith("__"))
        inputs = [i for i in node.input if i]
        graph = helper.make_graph(
            [plain],
            "fold",
            [helper.make_tensor_value_info(i, self._info[i][0], self._info[i][1]) for i in inputs],
            [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output],
        )
        model = helper.make_model(graph, opset_imports=self._opset_protos())
        try:
            values = ReferenceEvaluator(model).run(None, {i: self._values[i] for i in inputs})
        except Exception:
            return
        for o, v in zip(node.output, values, strict=False):
            self._values[o] = np.asarray(v)

    def _graphcore_infer(self, node: onnx.NodeProto, what: str) -> list[tuple[int, list[int]]]:
        """Output types and shapes of the ``ai.graphcore`` ops (not known to ONNX)."""
        x = self._info[node.input[0]]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Nll", "L1", "IdentityLoss"):
            red = attrs.get("reduction", b"Mean")
            red = red.decode() if isinstance(red, bytes) else str(red)
            if red != "NoReduction":
                return [(x[0], [])]
            if node.op_type == "Nll":
                if len(node.input) != 2:
                    raise popart_exception(f"{what}: needs [probabilities, labels]")
                return [(x[0], list(self._info[node.input[1]][1]))]
            return [x]
        if node.op_type == "GroupNormalization":
            groups = int(attrs.get("num_groups", 1))
            stats = (x[0], [x[1][0] * groups] if x[1] else [])
            return [x, stats, stats][: len(node.output)]
        return [x] * len(node.output)

    def _infer(self, node: onnx.NodeProto, what: str) -> list[tuple[int, list[int]]]:
        """Types and shapes of ``node``'s outputs, by ONNX shape inference on the node."""
        if node.domain == GRAPHCORE_DOMAIN:
            return self._graphcore_infer(node, what)
        inputs, inits = [], []
        for name in node.input:
            if not name:
                continue
            if name in self._values:
                inits.append(numpy_helper.from_array(self._values[name], name))
            t, shape = self._info[name]
            inputs.append(helper.make_tensor_value_info(name, t, shape))
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
        plain = onnx.NodeProto()
        plain.CopyFrom(node)
        del plain.attribute[:]
        plain.attribute.extend(a for a in node.attribute if not a.name.startswith("__"))
        graph = helper.make_graph([plain], "infer", inputs, outs, inits)
        model = helper.make_model(graph, opset_imports=self._opset_protos())
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:
            shapes = ", ".join(f"'{n}' {self._info[n][1]}" for n in node.input if n)
            raise popart_exception(
                f"{what} (node '{node.name}', inputs {shapes}): {str(exc).strip()}"
            ) from None
        result = []
        for vi in inferred.graph.output:
            vt = vi.type.tensor_type
            if not vt.HasField("shape"):
                raise popart_exception(
                    f"{what} (node '{node.name}'): the shape of output '{vi.name}' cannot be "
                    "inferred; hint: shapes, axes and slice bounds must be constants or "
                    "initializers"
                )
            result.append((vt.elem_type, [d.dim_value for d in vt.shape.dim]))
        return result

    def _opset_protos(self) -> list[onnx.OperatorSetIdProto]:
        return [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in self.opsets.items()]

    # -------------------------------------------------------------------- model
    def getModelProto(self, humanReadable: bool = False) -> bytes:
        """The model as serialized ONNX ``ModelProto`` bytes (checked by
        ``onnx.checker``); ``humanReadable=True`` gives its text form instead."""
        names = list(self._outputs)
        if not names:  # as PopART: the tensors no node reads are the outputs
            read = {i for node in self._nodes for i in node.input}
            names = [o for node in self._nodes for o in node.output if o and o not in read]
        if not names:
            raise popart_exception(
                "Builder.getModelProto: the model has no nodes and no outputs; hint: "
                "builder.addOutputTensor(id)"
            )
        outputs = [
            helper.make_tensor_value_info(o, self._info[o][0], self._info[o][1]) for o in names
        ]
        special = set(names) | {v.name for v in self._inputs}
        special |= {t.name for t in self._initializers}
        value_info = [
            helper.make_tensor_value_info(n, t, s)
            for node in self._nodes
            for n in node.output
            if n not in special
            for t, s in [self._info[n]]
        ]
        graph = helper.make_graph(
            list(self._nodes),
            "popart_api",
            list(self._inputs),
            outputs,
            list(self._initializers),
            value_info=value_info,
        )
        model = helper.make_model(
            graph, opset_imports=self._opset_protos(), producer_name="popart_api"
        )
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            raise popart_exception(f"Builder.getModelProto: invalid model: {exc}") from None
        if humanReadable:
            return str(helper.printable_graph(model.graph))
        return model.SerializeToString()


__all__ = ["AI_GRAPHCORE_OPS", "GRAPHCORE_DOMAIN", "Builder", "TensorInfo"]
