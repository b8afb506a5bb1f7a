"""PopART's ``DataFlow``, ``PyStepIO`` and ``InferenceSession`` on the simulator.

``InferenceSession(fnModel, dataFlow, deviceInfo)`` reads an ONNX model;
``prepareDevice()`` lowers it to a poplar_api graph for the device (inputs, weights
and constants mapped linearly over the tiles, one host-to-device stream per input and
one device-to-host stream per anchor, program ``Repeat(batchesPerStep, body)``) and
compiles it; ``weightsFromHost()`` writes the weights; ``run(PyStepIO(...))`` runs one
step of ``batchesPerStep`` batches.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from popart_api import ops
from popart_api.builder import VIRTUAL_GRAPH_ATTRIBUTE, TensorInfo
from popart_api.devices import DeviceInfo
from popart_api.errors import popart_exception
from poplar_api import BOOL, FLOAT, HALF, INT, Engine, Graph, Tensor, poplin, popnn, popops
from poplar_api import program as pprog
from poplar_api.errors import PoplarError
from poplar_api.poputil import mapTensorLinearly

#: ONNX element type -> (device type, host numpy dtype).
_TYPES = {
    onnx.TensorProto.FLOAT: (FLOAT, np.float32),
    onnx.TensorProto.FLOAT16: (HALF, np.float16),
    onnx.TensorProto.INT32: (INT, np.int32),
    onnx.TensorProto.BOOL: (BOOL, np.bool_),
}
_HOST = {FLOAT: np.float32, HALF: np.float16, INT: np.int32, BOOL: np.bool_}
RETURN_TYPES = ("ALL", "FINAL", "EVERYN", "SUM")


def load_model(fnModel: Any, what: str) -> onnx.ModelProto:
    """An ``onnx.ModelProto`` from serialized bytes, a ModelProto or a file path."""
    if isinstance(fnModel, onnx.ModelProto):
        return fnModel
    if isinstance(fnModel, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(fnModel))
        except Exception as exc:
            raise popart_exception(
                f"{what}: the bytes are not a serialized ONNX ModelProto ({exc})"
            ) from None
    if isinstance(fnModel, str | os.PathLike):
        if not os.path.isfile(fnModel):
            raise popart_exception(
                f"{what}: model file '{fnModel}' does not exist; hint: pass "
                "builder.getModelProto() or the path of a file written with onnx.save"
            )
        try:
            return onnx.load(os.fspath(fnModel))
        except Exception as exc:
            raise popart_exception(f"{what}: cannot read '{fnModel}' as ONNX ({exc})") from None
    raise popart_exception(
        f"{what}: fnModel must be ModelProto bytes or a file path, got {type(fnModel).__name__}"
    )


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
        if not isinstance(anchors, Mapping):
            anchors = {a: anchorReturnType or AnchorReturnType("ALL") for a in anchors}
        for k, v in anchors.items():
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


class _Input:
    """A model input: its stream, device type and per-batch shape."""

    def __init__(self, tid: str, typ: Any, shape: list[int]) -> None:
        self.id, self.type, self.shape = tid, typ, shape
        self.data: np.ndarray | None = None
        self.index = 0

    def fill(self, buffer: np.ndarray) -> None:
        buffer[...] = self.data[self.index].reshape(buffer.shape)
        self.index += 1


class _Anchor:
    """An anchor: its stream and where the values of the current run go."""

    def __init__(self, tid: str, art: AnchorReturnType, t: Tensor) -> None:
        self.id, self.art, self.tensor = tid, art, t
        self.out: np.ndarray | None = None
        self.index = 0

    def take(self, buffer: np.ndarray) -> None:
        self.out[self.index] = buffer.reshape(self.out.shape[1:])
        self.index += 1


class InferenceSession:
    """Run an ONNX model's inference on a simulated device.

    Parameters
    ----------
    fnModel
        Serialized ``ModelProto`` bytes (``builder.getModelProto()``), a ModelProto, or
        the path of an ONNX file.
    dataFlow
        A :class:`DataFlow`.
    deviceInfo
        A :class:`~popart_api.devices.DeviceInfo` (``DeviceManager().createIpuModelDevice``,
        ``createCpuDevice``, ``acquireAvailableDevice``).
    inputShapeInfo
        Shapes of inputs whose shape the model leaves open.
    patterns, userOptions, name
        Accepted for PopART compatibility; not used yet.

    Raises
    ------
    popart_exception
        Unreadable model, an anchor that is no tensor of the model, an input without a
        shape, or no device.
    """

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Any = None,
        userOptions: Any = None,
        name: str = "inference",
    ) -> None:
        self.model = load_model(fnModel, "InferenceSession")
        if not isinstance(dataFlow, DataFlow):
            raise popart_exception(
                f"InferenceSession: dataFlow must be a popart.DataFlow, got "
                f"{type(dataFlow).__name__}"
            )
        if not isinstance(deviceInfo, DeviceInfo):
            raise popart_exception(
                "InferenceSession: deviceInfo must be a DeviceInfo; hint: "
                "popart.DeviceManager().createIpuModelDevice({'tilesPerIPU': 8})"
            )
        self.dataFlow = dataFlow
        self.deviceInfo = deviceInfo
        self.name = name
        self._shape_info = inputShapeInfo or InputShapeInfo()
        graph = self.model.graph
        self._opsets = {(i.domain or "ai.onnx"): i.version for i in self.model.opset_import}
        self._init_names = {t.name for t in graph.initializer}
        self._input_infos: dict[str, tuple[int, list[int]]] = {}
        for vi in graph.input:
            if vi.name not in self._init_names:
                self._input_infos[vi.name] = self._input_info(vi)
        known = set(self._input_infos) | self._init_names
        known |= {o for n in graph.node for o in n.output}
        for a in dataFlow.anchors():
            if a not in known:
                raise popart_exception(
                    f"InferenceSession: anchor '{a}' is not a tensor of the model; model "
                    f"outputs: {[o.name for o in graph.output]}"
                )
        self.engine: Engine | None = None
        self._inputs: dict[str, _Input] = {}
        self._anchors: dict[str, _Anchor] = {}
        self._weights: dict[str, np.ndarray] = {}

    def _input_info(self, vi: onnx.ValueInfoProto) -> tuple[int, list[int]]:
        if self._shape_info.has(vi.name):
            info = self._shape_info.get(vi.name)
            return info.onnxType, info.shape()
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if dims is None or any(not d.HasField("dim_value") for d in dims):
            raise popart_exception(
                f"InferenceSession: input '{vi.name}' has no fixed shape in the model; hint: "
                "inputShapeInfo=popart.InputShapeInfo() with .add(id, TensorInfo(...))"
            )
        return tt.elem_type, [d.dim_value for d in dims]

    # ------------------------------------------------------------------ build
    def prepareDevice(self, loadEngine: bool = True) -> None:
        """Lower the model to a poplar_api graph for the device, compile it and load it.

        Raises
        ------
        popart_exception
            An unsupported op (named with its node), a type the device lacks, or a
            lowering/compile error (with the op and node it came from).
        """
        device = self.deviceInfo.device
        graph = Graph(device.getTarget())
        for add_codelets in (popops.addCodelets, poplin.addCodelets, popnn.addCodelets):
            add_codelets(graph)
        values: dict[str, Any] = {}
        for init in self.model.graph.initializer:
            arr = numpy_helper.to_array(init)
            if init.data_type in _TYPES:
                typ = _TYPES[init.data_type][0]
                var = graph.addVariable(typ, list(arr.shape), init.name)
                mapTensorLinearly(graph, var)
                graph.createHostWrite(f"weight:{init.name}", var)
                self._weights[init.name] = arr.astype(_HOST[typ])
                values[init.name] = var
            else:  # e.g. INT64 shapes: known when the graph is built
                values[init.name] = arr
        body = pprog.Sequence(debugContext="step")
        for tid, (etype, shape) in self._input_infos.items():
            if etype not in _TYPES:
                raise popart_exception(
                    f"InferenceSession: input '{tid}' has type "
                    f"{onnx.TensorProto.DataType.Name(etype)}; supported input types: FLOAT, "
                    "FLOAT16, INT32, BOOL"
                )
            typ = _TYPES[etype][0]
            var = graph.addVariable(typ, shape, tid)
            mapTensorLinearly(graph, var)
            stream = graph.addHostToDeviceFIFO(f"input:{tid}", typ, max(var.numElements(), 1))
            body.add(pprog.Copy(stream, var))
            values[tid] = var
            self._inputs[tid] = _Input(tid, typ, shape)
        for i, node in enumerate(self.model.graph.node):
            self._lower(graph, node, i, values, body)
        post = pprog.Sequence(debugContext="final")
        every = pprog.Sequence(debugContext="everyN")
        periods = set()
        for aid in self.dataFlow.anchors():
            art = self.dataFlow.art(aid)
            t = ops.tensor(graph, values[aid], f"anchor/{aid}")
            stream = graph.addDeviceToHostFIFO(f"anchor:{aid}", t.elementType(), t.numElements())
            if art.id() == "ALL":
                body.add(pprog.Copy(t, stream))
            elif art.id() == "FINAL":
                post.add(pprog.Copy(t, stream))
            elif art.id() == "EVERYN":
                periods.add(art.rp())
                every.add(pprog.Copy(t, stream))
            else:
                raise popart_exception(
                    f"InferenceSession: anchor '{aid}': AnchorReturnType('SUM') is not "
                    "supported yet; hint: ALL, FINAL or EVERYN"
                )
            self._anchors[aid] = _Anchor(aid, art, t)
        bps = self.dataFlow.batchesPerStep
        main = self._main_program(body, every, post, periods, bps)
        try:
            self.engine = Engine(graph, [main])
        except PoplarError as exc:
            raise popart_exception(f"InferenceSession.prepareDevice: {exc}") from None
        for aid in self._anchors:
            self.engine.connectStreamToCallback(f"anchor:{aid}", self._anchors[aid].take)
        for tid in self._inputs:
            self.engine.connectStreamToCallback(f"input:{tid}", self._inputs[tid].fill)
        if loadEngine:
            self.engine.load(self.deviceInfo.device)

    @staticmethod
    def _main_program(
        body: pprog.Sequence, every: pprog.Sequence, post: pprog.Sequence, periods: set, bps: int
    ) -> pprog.Program:
        if not periods:
            return pprog.Sequence(pprog.Repeat(bps, body), post, debugContext="main")
        if len(periods) > 1:
            raise popart_exception(
                f"InferenceSession: EVERYN anchors with different periods {sorted(periods)} "
                "are not supported yet; hint: use one period"
            )
        n = periods.pop()
        if bps % n:
            raise popart_exception(
                f"InferenceSession: AnchorReturnType('EVERYN', {n}) needs batchesPerStep "
                f"({bps}) to be a multiple of {n}"
            )
        group = pprog.Sequence(pprog.Repeat(n - 1, body), body, every)
        return pprog.Sequence(pprog.Repeat(bps // n, group), post, debugContext="main")

    def _lower(
        self, graph: Graph, node: onnx.NodeProto, i: int, values: dict, prog: pprog.Sequence
    ) -> None:
        name = node.name or f"{node.op_type}_{i}"
        domain = node.domain or "ai.onnx"
        fn = ops.lookup(domain, node.op_type, self._opsets.get(domain, 1), name)
        attrs = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v)
            elif isinstance(v, bytes):
                v = v.decode()
            attrs[a.name] = v
        ipu = attrs.pop(VIRTUAL_GRAPH_ATTRIBUTE, 0)
        if int(ipu) >= self.deviceInfo.numIpus:
            raise popart_exception(
                f"{node.op_type} (node '{name}'): virtual graph {ipu} needs more IPUs than "
                f"the device's {self.deviceInfo.numIpus}"
            )
        inputs = []
        for tid in node.input:
            if tid and tid not in values:
                raise popart_exception(
                    f"{node.op_type} (node '{name}'): input '{tid}' is made by no earlier "
                    "node, input or initializer (nodes must be in topological order)"
                )
            inputs.append(values[tid] if tid else None)
        while inputs and inputs[-1] is None:
            inputs.pop()
        try:
            outs = fn(graph, inputs, attrs, prog, name)
        except popart_exception:
            raise
        except PoplarError as exc:
            raise popart_exception(f"{node.op_type} (node '{name}'): {exc}") from None
        for tid, v in zip(node.output, outs, strict=False):
            if tid:
                values[tid] = v

    # -------------------------------------------------------------------- run
    def _engine(self, what: str) -> Engine:
        if self.engine is None:
            raise popart_exception(f"InferenceSession.{what}: call prepareDevice() first")
        return self.engine

    def weightsFromHost(self) -> None:
        """Write the model's weights (initializers) to the device."""
        engine = self._engine("weightsFromHost")
        for tid, arr in self._weights.items():
            engine.writeTensor(f"weight:{tid}", arr)

    def _anchor_shape(self, a: _Anchor) -> list[int]:
        art, bps = a.art, self.dataFlow.batchesPerStep
        shape = a.tensor.shape()
        if art.id() == "ALL" and bps > 1:
            return [bps, *shape]
        if art.id() == "EVERYN" and bps // art.rp() > 1:
            return [bps // art.rp(), *shape]
        return list(shape)

    def initAnchorArrays(self) -> dict[str, np.ndarray]:
        """Zeroed numpy arrays for the anchors, shaped as PopART shapes them (a leading
        ``batchesPerStep`` dimension for ``ALL`` anchors when it is > 1)."""
        self._engine("initAnchorArrays")
        return {
            aid: np.zeros(self._anchor_shape(a), _HOST[a.tensor.elementType()])
            for aid, a in self._anchors.items()
        }

    def getInfo(self, tensorId: str) -> TensorInfo:
        """The type and shape of an input or anchor (after ``prepareDevice``)."""
        if tensorId in self._inputs:
            i = self._inputs[tensorId]
            return TensorInfo(_HOST[i.type], i.shape)
        if tensorId in self._anchors:
            t = self._anchors[tensorId].tensor
            return TensorInfo(_HOST[t.elementType()], t.shape())
        raise popart_exception(f"InferenceSession.getInfo: '{tensorId}' is no input or anchor")

    def run(self, stepio: PyStepIO, debugName: str = "") -> None:
        """Run one step: ``batchesPerStep`` batches from ``stepio.inputs`` (arrays
        ``[batchesPerStep, *shape]`` when it is > 1) into ``stepio.outputs``.

        Raises
        ------
        popart_exception
            A missing or unknown input, an input of the wrong shape or kind of type, or
            a missing or wrongly shaped anchor array (all named, with the shapes).
        """
        engine = self._engine("run")
        if not isinstance(stepio, PyStepIO):
            raise popart_exception("InferenceSession.run: expected a popart.PyStepIO")
        bps = self.dataFlow.batchesPerStep
        extra = sorted(set(stepio.inputs) - set(self._inputs))
        if extra:
            raise popart_exception(
                f"InferenceSession.run: {extra} are not inputs of the model; inputs: "
                f"{sorted(self._inputs)}"
            )
        for tid, inp in self._inputs.items():
            if tid not in stepio.inputs:
                raise popart_exception(
                    f"InferenceSession.run: no data for input '{tid}' in the PyStepIO; "
                    f"inputs needed: {sorted(self._inputs)}"
                )
            inp.data, inp.index = self._step_input(tid, inp, stepio.inputs[tid], bps), 0
        for aid, a in self._anchors.items():
            out = stepio.outputs.get(aid)
            want = self._anchor_shape(a)
            if not isinstance(out, np.ndarray) or list(out.shape) != want:
                got = list(out.shape) if isinstance(out, np.ndarray) else type(out).__name__
                raise popart_exception(
                    f"InferenceSession.run: anchor '{aid}' needs an array of shape {want}, got "
                    f"{got}; hint: session.initAnchorArrays()"
                )
            a.out, a.index = out.reshape([-1, *a.tensor.shape()]), 0
        try:
            engine.run(0, debugName)
        except PoplarError as exc:
            raise popart_exception(f"InferenceSession.run: {exc}") from None

    @staticmethod
    def _step_input(tid: str, inp: _Input, data: Any, bps: int) -> np.ndarray:
        arr = np.asarray(data)
        host = _HOST[inp.type]
        want = [bps, *inp.shape] if bps > 1 else inp.shape
        if list(arr.shape) != want and not (bps == 1 and list(arr.shape) == [1, *inp.shape]):
            raise popart_exception(
                f"InferenceSession.run: input '{tid}' has shape {list(arr.shape)}; it needs "
                f"{want} (batchesPerStep={bps} x tensor shape {inp.shape})"
            )
        if np.dtype(host).kind != arr.dtype.kind and not (
            np.dtype(host).kind == "f" and arr.dtype.kind in "iu"
        ):
            raise popart_exception(
                f"InferenceSession.run: input '{tid}' is {arr.dtype}; the model's input is "
                f"{np.dtype(host)}"
            )
        return np.ascontiguousarray(arr, dtype=host).reshape([bps, *inp.shape])

    # -------------------------------------------------------------- reports
    def getSummaryReport(self, resetProfile: bool = True) -> str:
        """ipusim's profile summary of the graph and the runs so far (text)."""
        engine = self._engine("getSummaryReport")
        out = io.StringIO()
        engine.printProfileSummary(out)
        return out.getvalue()

    def getGraphReport(self) -> dict[str, Any]:
        """The graph profile (a dict of JSON types)."""
        return self._engine("getGraphReport").getGraphProfile()

    def getExecutionReport(self) -> dict[str, Any]:
        """The execution profile of the runs so far (a dict of JSON types)."""
        return self._engine("getExecutionReport").getExecutionProfile()


__all__ = [
    "AnchorReturnType",
    "DataFlow",
    "InferenceSession",
    "InputShapeInfo",
    "PyStepIO",
]
