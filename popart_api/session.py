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
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from popart_api import autodiff, ops
from popart_api.builder import (
    MEMORY_PROPORTION_ATTRIBUTE,
    PIPELINE_STAGE_ATTRIBUTE,
    RECOMPUTE_ATTRIBUTE,
    VIRTUAL_GRAPH_ATTRIBUTE,
    TensorInfo,
)
from popart_api.devices import DeviceInfo
from popart_api.errors import OutOfMemoryException, popart_exception
from popart_api.optimizers import Optimizer, like
from popart_api.options import SessionOptions, SyntheticDataMode, VirtualGraphMode
from poplar_api import (
    BOOL,
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    Engine,
    Graph,
    Tensor,
    poplin,
    popnn,
    popops,
    poprand,
)
from poplar_api import program as pprog
from poplar_api.errors import OutOfMemoryError, PoplarError
from poplar_api.graph import variable_count
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

#: PopART's log levels (``POPART_LOG_LEVEL``) -> Python logging levels.
LOG_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
logger = logging.getLogger("popart")


def _configure_logging() -> None:
    """Apply ``POPART_LOG_LEVEL`` (PopART's names) to the ``popart`` logger."""
    level = os.environ.get("POPART_LOG_LEVEL")
    if not level:
        return
    if level.upper() not in LOG_LEVELS:
        raise popart_exception(
            f"POPART_LOG_LEVEL={level!r} is not a level; use one of {sorted(LOG_LEVELS)}"
        )
    logger.setLevel(LOG_LEVELS[level.upper()])
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[popart] [%(levelname)s] %(message)s"))
        logger.addHandler(handler)


def _write_tile_map(graph: Graph, values: dict[str, Any], path: str) -> None:
    """``POPART_TENSOR_TILE_MAP``: per tensor id, its element intervals on each tile
    (JSON ``{id: [[tile, begin, end], ...]}``), as PopART writes after compiling."""
    out: dict[str, list[list[int]]] = {}
    for tid, v in values.items():
        if not isinstance(v, Tensor):
            continue
        try:
            mapping = graph.getTileMapping(v)
        except Exception:
            continue
        out[tid] = [
            [tile, int(iv.begin()), int(iv.end())] for tile, ivs in enumerate(mapping) for iv in ivs
        ]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f)


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


class PyWeightsIO:
    """Host arrays for ``readWeights``/``writeWeights``: ``PyWeightsIO({id: array})``."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        if not isinstance(weights, Mapping):
            raise popart_exception("PyWeightsIO: takes a dict of weight id -> numpy array")
        self.weights = dict(weights)


def _id_list(ids: Any) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


class _Session:
    """What inference and training sessions share: reading the model, placing it on
    the device's IPUs and replicas, lowering its nodes, streams, anchors and reports."""

    _kind = "Session"

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Any = None,
        userOptions: SessionOptions | None = None,
        name: str = "session",
    ) -> None:
        what = self._kind
        self.model = load_model(fnModel, what)
        if not isinstance(dataFlow, DataFlow):
            raise popart_exception(
                f"{what}: dataFlow must be a popart.DataFlow, got {type(dataFlow).__name__}"
            )
        if not isinstance(deviceInfo, DeviceInfo):
            raise popart_exception(
                f"{what}: deviceInfo must be a DeviceInfo; hint: "
                "popart.DeviceManager().createIpuModelDevice({'tilesPerIPU': 8})"
            )
        if userOptions is not None and not isinstance(userOptions, SessionOptions):
            raise popart_exception(
                f"{what}: userOptions must be a popart.SessionOptions, got "
                f"{type(userOptions).__name__}"
            )
        self.dataFlow = dataFlow
        self.deviceInfo = deviceInfo
        self.options = userOptions or SessionOptions()
        self.patterns = patterns
        self.name = name
        self._shape_info = inputShapeInfo or InputShapeInfo()
        graph = self.model.graph
        self._opsets = {(i.domain or "ai.onnx"): i.version for i in self.model.opset_import}
        self._init_names = {t.name for t in graph.initializer}
        self._input_infos: dict[str, tuple[int, list[int]]] = {}
        for vi in graph.input:
            if vi.name not in self._init_names:
                self._input_infos[vi.name] = self._input_info(vi)
        self._known = set(self._input_infos) | self._init_names
        self._known |= {o for n in graph.node for o in n.output}
        self._check_options()
        self.engine: Engine | None = None
        self._inputs: dict[str, _Input] = {}
        self._anchors: dict[str, _Anchor] = {}
        self._weights: dict[str, np.ndarray] = {}
        self._weight_vars: dict[str, Tensor] = {}
        self._records: list[autodiff.NodeRecord] = []
        self._values: dict[str, Any] = {}

    # -------------------------------------------------------------- options
    def _check_options(self) -> None:
        o, what = self.options, self._kind
        self.replicas = o.replicatedGraphCount if o.enableReplicatedGraphs else 1
        if o.replicatedGraphCount > 1 and not o.enableReplicatedGraphs:
            raise popart_exception(
                f"{what}: replicatedGraphCount is {o.replicatedGraphCount} but "
                "enableReplicatedGraphs is False; hint: set both"
            )
        n = self.deviceInfo.numIpus
        if n % self.replicas:
            raise popart_exception(
                f"{what}: {self.replicas} replicas do not divide the device's {n} IPUs; "
                f"hint: acquireAvailableDevice({self.replicas * max(1, n // self.replicas)})"
            )
        self.ipus = n // self.replicas
        self.accumulation = o.accumulationFactor if o.enableGradientAccumulation else 1
        if o.accumulationFactor > 1 and not o.enableGradientAccumulation:
            raise popart_exception(
                f"{what}: accumulationFactor is {o.accumulationFactor} but "
                "enableGradientAccumulation is False; hint: set both"
            )
        if self.accumulation > 1 and self._kind != "TrainingSession":
            raise popart_exception(
                f"{what}: gradient accumulation (accumulationFactor "
                f"{self.accumulation}) is for training; hint: an InferenceSession runs "
                "batchesPerStep batches per run"
            )
        everyn = [a for a in self.dataFlow.anchors() if self.dataFlow.art(a).id() == "EVERYN"]
        if everyn and self.accumulation > 1:
            raise popart_exception(
                f"{what}: EVERYN anchors {everyn} with gradient accumulation are not "
                "supported; hint: ALL, SUM or FINAL"
            )
        if o.enablePipelining and o.virtualGraphMode is VirtualGraphMode.Off:
            raise popart_exception(
                f"{what}: enablePipelining needs virtualGraphMode Manual or Auto (a stage "
                "per IPU); hint: opts.virtualGraphMode = popart.VirtualGraphMode.Manual"
            )
        for aid in self.dataFlow.anchors():
            base = aid[len(autodiff.GRADIENT_PREFIX) :] if self._is_grad_anchor(aid) else aid
            if base not in self._known:
                raise popart_exception(
                    f"{what}: anchor '{aid}' is not a tensor of the model; model outputs: "
                    f"{[x.name for x in self.model.graph.output]}"
                )

    def _is_grad_anchor(self, aid: str) -> bool:
        return aid.startswith(autodiff.GRADIENT_PREFIX) and self._kind == "TrainingSession"

    def _input_info(self, vi: onnx.ValueInfoProto) -> tuple[int, list[int]]:
        if self._shape_info.has(vi.name):
            info = self._shape_info.get(vi.name)
            return info.onnxType, info.shape()
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if dims is None or any(not d.HasField("dim_value") for d in dims):
            raise popart_exception(
                f"{self._kind}: input '{vi.name}' has no fixed shape in the model; hint: "
                "inputShapeInfo=popart.InputShapeInfo() with .add(id, TensorInfo(...))"
            )
        return tt.elem_type, [d.dim_value for d in dims]

    # ----------------------------------------------------------- placement
    @staticmethod
    def _node_attrs(node: onnx.NodeProto) -> dict[str, Any]:
        attrs = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v)
            elif isinstance(v, bytes):
                v = v.decode()
            attrs[a.name] = v
        return attrs

    def _place(self) -> tuple[list[int], list[int]]:
        """Per node: its IPU within the replica and its pipeline stage."""
        nodes = list(self.model.graph.node)
        mode = self.options.virtualGraphMode
        ipus: list[int] = []
        if mode is VirtualGraphMode.Auto and self.ipus > 1:
            cost = []
            for node in nodes:  # balance by the weights each node reads, then by count
                size = sum(
                    int(np.prod(self._init_shape(i), dtype=np.int64))
                    for i in node.input
                    if i in self._init_names
                )
                cost.append(1 + size)
            cum = np.cumsum(cost) / max(sum(cost), 1)
            ipus = [min(int(c * self.ipus - 1e-9), self.ipus - 1) for c in cum]
            ipus = list(np.maximum.accumulate(ipus)) if ipus else []
        else:
            for i, node in enumerate(nodes):
                v = self._node_attrs(node).get(VIRTUAL_GRAPH_ATTRIBUTE)
                if mode is VirtualGraphMode.Manual and v is None:
                    raise popart_exception(
                        f"{self._kind}: virtualGraphMode is Manual but node "
                        f"'{node.name or node.op_type + '_' + str(i)}' ({node.op_type}) has no "
                        "virtual graph; hint: builder.virtualGraph(id, ipu) or "
                        "`with builder.virtualGraph(ipu):`"
                    )
                v = int(v or 0) if mode is not VirtualGraphMode.Off else 0
                if v >= self.ipus:
                    raise popart_exception(
                        f"{node.op_type} (node '{node.name}'): virtual graph {v} needs more "
                        f"IPUs than the {self.ipus} of each replica (device "
                        f"{self.deviceInfo.numIpus}"
                        f" IPUs / {self.replicas} replicas)"
                    )
                ipus.append(v)
        stages = []
        for node, ipu in zip(nodes, ipus, strict=True):
            s = self._node_attrs(node).get(PIPELINE_STAGE_ATTRIBUTE)
            stages.append(int(s) if s is not None else ipu)
        return [int(x) for x in ipus], stages

    def _init_shape(self, tid: str) -> list[int]:
        for t in self.model.graph.initializer:
            if t.name == tid:
                return list(t.dims)
        return []

    # ---------------------------------------------------------------- build
    def prepareDevice(self, loadEngine: bool = True) -> None:
        """Lower the model to a poplar_api graph for the device, compile it and load it.

        Raises
        ------
        popart_exception
            An unsupported op (named with its node), a type the device lacks, a
            lowering or compile error (with the op and node it came from); a graph
            that does not fit the tiles' memory keeps its memory report
            (``getGraphReport``).
        """
        _configure_logging()
        started = time.perf_counter()
        logger.info(
            "%s.prepareDevice: %d nodes, %d IPUs (%d replicas), pipelining %s",
            self._kind,
            len(self.model.graph.node),
            self.deviceInfo.numIpus,
            self.replicas,
            self.options.enablePipelining,
        )
        device = self.deviceInfo.device
        target = device.getTarget()
        graph = (
            Graph(target, replication_factor=self.replicas) if self.replicas > 1 else Graph(target)
        )
        self.graph = graph
        for add_codelets in (popops.addCodelets, poplin.addCodelets, popnn.addCodelets):
            add_codelets(graph)
        tiles = graph.getTarget().getTilesPerIPU()
        if self.options.virtualGraphMode is VirtualGraphMode.Off or self.ipus == 1:
            self._graphs = [graph] * max(self.ipus, 1)
            self._whole = True
        else:
            self._graphs = [
                graph.createVirtualGraph(i * tiles, (i + 1) * tiles) for i in range(self.ipus)
            ]
            self._whole = False
        node_ipu, node_stage = self._place()
        self._node_ipu, self._node_stage = node_ipu, node_stage
        first_ipu: dict[str, int] = {}
        for node, ipu in zip(self.model.graph.node, node_ipu, strict=True):
            for i in node.input:
                first_ipu.setdefault(i, ipu)
        values: dict[str, Any] = {}
        self._value_ipu: dict[str, int] = {}
        for init in self.model.graph.initializer:
            arr = numpy_helper.to_array(init)
            if init.data_type in _TYPES:
                typ = _TYPES[init.data_type][0]
                ipu = first_ipu.get(init.name, 0)
                var = self._graphs[ipu].addVariable(typ, list(arr.shape), init.name)
                mapTensorLinearly(self._graphs[ipu], var)
                graph.createHostWrite(f"weight:{init.name}", var)
                graph.createHostRead(f"weightRead:{init.name}", var)
                self._weights[init.name] = arr.astype(_HOST[typ])
                self._weight_vars[init.name] = var
                values[init.name] = var
                self._value_ipu[init.name] = ipu
            else:  # e.g. INT64 shapes: known when the graph is built
                values[init.name] = arr
        self._input_progs: dict[str, pprog.Sequence] = {}
        self._seed = graph.addVariable(UNSIGNED_INT, [2], "randomSeed")
        graph.setTileMapping(self._seed, 0)
        graph.createHostWrite("randomSeed", self._seed)
        synthetic = self.options.syntheticDataMode
        self._synthetic: dict[str, _Input] = {}
        for tid, (etype, shape) in self._input_infos.items():
            if etype not in _TYPES:
                raise popart_exception(
                    f"{self._kind}: input '{tid}' has type "
                    f"{onnx.TensorProto.DataType.Name(etype)}; supported input types: FLOAT, "
                    "FLOAT16, INT32, BOOL"
                )
            typ = _TYPES[etype][0]
            ipu = first_ipu.get(tid, 0)
            var = self._graphs[ipu].addVariable(typ, shape, tid)
            mapTensorLinearly(self._graphs[ipu], var)
            values[tid] = var
            self._value_ipu[tid] = ipu
            if synthetic is not SyntheticDataMode.Off:
                self._input_progs[tid] = self._synthetic_input(var, tid, synthetic)
                self._synthetic[tid] = _Input(tid, typ, shape)
                continue
            stream = graph.addHostToDeviceFIFO(f"input:{tid}", typ, max(var.numElements(), 1))
            self._input_progs[tid] = pprog.Sequence(
                pprog.Copy(stream, var), debugContext=f"input/{tid}"
            )
            self._inputs[tid] = _Input(tid, typ, shape)
        self._values = values
        self._copies: dict[tuple[str, int], Any] = {}
        self._copy_progs: dict[tuple[str, int], pprog.Copy] = {}
        self._side_progs: list[pprog.Sequence] = []
        #: pipeline stage of each node output; (stage, copy) sending outputs onwards
        self._value_stage: dict[str, int] = {}
        self._pipeline_sends: list[tuple[int, pprog.Copy]] = []
        node_progs = []
        first = variable_count(graph)
        for i, node in enumerate(self.model.graph.node):
            node_progs.append(self._lower(node, i, values))
        #: ids of the variables the forward pass creates (its activations, temporaries)
        self._forward_variables = (first, variable_count(graph))
        self._node_progs = node_progs
        #: per node: its program, then what runs once per forward pass
        self._fwd_progs = [
            pprog.Sequence(p, side) for p, side in zip(node_progs, self._side_progs, strict=True)
        ]
        logger.info("lowered %d nodes in %.3f s", len(node_progs), time.perf_counter() - started)
        self._finish_build(values)
        logger.info("compiled in %.3f s (total)", time.perf_counter() - started)
        tile_map = os.environ.get("POPART_TENSOR_TILE_MAP")
        if tile_map:
            _write_tile_map(graph, values, tile_map)
        self._loaded = False
        if loadEngine:
            self.engine.load(self.deviceInfo.device)
            self._loaded = True

    def _synthetic_input(self, var: Tensor, tid: str, mode: SyntheticDataMode) -> pprog.Sequence:
        """The program filling input ``tid`` on the device instead of streaming it
        (``SessionOptions.syntheticDataMode``): zeros, or standard normal values for
        float inputs in ``RandomNormal`` mode."""
        prog = pprog.Sequence(debugContext=f"input/{tid}/synthetic")
        if mode is SyntheticDataMode.RandomNormal and var.elementType() in (FLOAT, HALF):
            modifier = sum(ord(c) for c in tid) & 0xFFFF
            values = poprand.normal(
                self.graph,
                self._seed,
                modifier,
                var,
                var.elementType(),
                0.0,
                1.0,
                prog,
                f"input/{tid}/normal",
            )
            prog.add(pprog.Copy(values, var))
        else:
            popops.zero(self.graph, var, prog, f"input/{tid}/zero")
        return prog

    def _on_ipu(self, tid: str, value: Any, ipu: int, prog: pprog.Sequence) -> Any:
        """``value`` (tensor ``tid``) on ``ipu``: copied there once when it lives on
        another IPU (PopART's IpuCopy)."""
        src = self._value_ipu.get(tid, ipu)
        if not isinstance(value, Tensor) or src == ipu or self._whole:
            return value
        key = (tid, ipu)
        if key not in self._copies:
            g = self._graphs[ipu]
            dst = g.addVariable(value.elementType(), value.shape(), f"{tid}/ipu{ipu}")
            mapTensorLinearly(g, dst)
            self._copies[key] = dst
            stage = self._value_stage.get(tid)
            if self.options.enablePipelining and stage is not None:
                # A pipeline stage's output crosses to the next IPU right after the
                # stage's forward (into a carrier no stash touches); the consumer reads
                # it from there when its own forward runs.
                carrier = g.addVariable(value.elementType(), value.shape(), f"{tid}/toIpu{ipu}")
                mapTensorLinearly(g, carrier)
                self._pipeline_sends.append((stage, pprog.Copy(value, carrier)))
                self._copy_progs[key] = pprog.Copy(carrier, dst)
            else:
                self._copy_progs[key] = pprog.Copy(value, dst)
        prog.add(self._copy_progs[key])
        return self._copies[key]

    def _lower(self, node: onnx.NodeProto, i: int, values: dict) -> pprog.Sequence:
        name = node.name or f"{node.op_type}_{i}"
        domain = node.domain or "ai.onnx"
        opset = self._opsets.get(domain, 1)
        fn = ops.lookup(domain, node.op_type, opset, name)
        attrs = self._node_attrs(node)
        for key in (VIRTUAL_GRAPH_ATTRIBUTE, PIPELINE_STAGE_ATTRIBUTE, RECOMPUTE_ATTRIBUTE):
            attrs.pop(key, None)
        proportion = attrs.pop(MEMORY_PROPORTION_ATTRIBUTE, None)
        ipu = self._node_ipu[i]
        logger.debug("lowering %s '%s' on IPU %d", node.op_type, name, ipu)
        prog = pprog.Sequence(debugContext=name)
        inputs = []
        for tid in node.input:
            if tid and tid not in values:
                raise popart_exception(
                    f"{node.op_type} (node '{name}'): input '{tid}' is made by no earlier "
                    "node, input or initializer (nodes must be in topological order)"
                )
            inputs.append(self._on_ipu(tid, values[tid], ipu, prog) if tid else None)
        while inputs and inputs[-1] is None:
            inputs.pop()
        options = dict(self.options.convolutionOptions)
        options.update(self.options.matmulOptions)
        if proportion is not None:
            options["availableMemoryProportion"] = str(proportion)
        seed = self.options.randomSeed or 0
        side = pprog.Sequence(debugContext=f"{name}/once")
        ctx = ops.LoweringContext(
            training=self._kind == "TrainingSession",
            options=options,
            seed=seed,
            side_effects=side,
            opset=opset,
            seed_tensor=self._seed,
        )
        try:
            with ops.lowering_context(ctx):
                outs = list(fn(self._graphs[ipu], inputs, attrs, prog, name))
        except popart_exception:
            raise
        except PoplarError as exc:
            raise popart_exception(f"{node.op_type} (node '{name}'): {exc}") from None
        missing = [
            tid
            for tid, v in zip(node.output, outs + [None] * len(node.output), strict=False)
            if tid and v is None
        ]
        if missing:
            raise popart_exception(
                f"{node.op_type} (node '{name}'): output(s) {missing} are not supported by "
                "popart_api's lowering of this op; hint: build the node without them"
            )
        for tid, v in zip(node.output, outs, strict=False):
            if tid:
                values[tid] = v
                self._value_ipu[tid] = ipu
                self._value_stage[tid] = self._node_stage[i]
        self._side_progs.append(side)
        self._records.append(
            autodiff.NodeRecord(
                domain=domain,
                op_type=node.op_type,
                name=name,
                opset=opset,
                attrs=attrs,
                input_ids=list(node.input[: len(inputs)]),
                output_ids=list(node.output),
                inputs=inputs,
                outputs=outs,
                ipu=ipu,
                stage=self._node_stage[i],
            )
        )
        return prog

    # ------------------------------------------------------------- anchors
    def _anchor_tensor(self, aid: str, values: dict) -> Tensor:
        if aid not in values:
            raise popart_exception(
                f"{self._kind}: anchor '{aid}' has no value (a gradient nobody computes?); "
                "hint: anchor gradients of trained weights or of inputs on the loss's path"
            )
        return ops.tensor(self.graph, values[aid], f"anchor/{aid}")

    def _make_anchors(
        self, values: dict
    ) -> tuple[pprog.Sequence, pprog.Sequence, pprog.Sequence, pprog.Sequence, set]:
        """Programs copying anchors out: per micro-batch (ALL, SUM accumulation), per
        batch (EVERYN), after the step (FINAL, SUM) and at the start (SUM zeroing)."""
        micro = pprog.Sequence(debugContext="anchors/all")
        every = pprog.Sequence(debugContext="anchors/everyN")
        post = pprog.Sequence(debugContext="anchors/final")
        pre = pprog.Sequence(debugContext="anchors/sumZero")
        periods = set()
        graph = self.graph
        for aid in self.dataFlow.anchors():
            art = self.dataFlow.art(aid)
            t = self._anchor_tensor(aid, values)
            stream = graph.addDeviceToHostFIFO(
                f"anchor:{aid}", t.elementType(), max(t.numElements(), 1)
            )
            if art.id() == "ALL":
                micro.add(pprog.Copy(t, stream))
            elif art.id() == "FINAL":
                post.add(pprog.Copy(t, stream))
            elif art.id() == "EVERYN":
                periods.add(art.rp())
                every.add(pprog.Copy(t, stream))
            else:  # SUM over the step's batches
                total = like(graph, t, f"anchor/{aid}/sum")
                popops.zero(graph, total, pre, f"anchor/{aid}/sumZero")
                popops.addInPlace(graph, total, t, micro, f"anchor/{aid}/sum")
                post.add(pprog.Copy(total, stream))
            self._anchors[aid] = _Anchor(aid, art, t)
        return micro, every, post, pre, periods

    def _main_program(
        self,
        batch: pprog.Program,
        every: pprog.Sequence,
        post: pprog.Sequence,
        pre: pprog.Sequence,
        periods: set,
    ) -> pprog.Program:
        bps = self.dataFlow.batchesPerStep
        if not periods:
            return pprog.Sequence(pre, pprog.Repeat(bps, batch), post, debugContext="main")
        if len(periods) > 1:
            raise popart_exception(
                f"{self._kind}: EVERYN anchors with different periods {sorted(periods)} "
                "are not supported; hint: use one period"
            )
        n = periods.pop()
        if bps % n:
            raise popart_exception(
                f"{self._kind}: AnchorReturnType('EVERYN', {n}) needs batchesPerStep "
                f"({bps}) to be a multiple of {n}"
            )
        group = pprog.Sequence(pprog.Repeat(n - 1, batch), batch, every)
        return pprog.Sequence(pre, pprog.Repeat(bps // n, group), post, debugContext="main")

    def _compile(self, main: pprog.Program) -> None:
        try:
            self.engine = Engine(self.graph, [main], self.options.engineOptions or None)
        except OutOfMemoryError as exc:
            raise OutOfMemoryException(
                f"{self._kind}.prepareDevice: {exc}\nhint: fewer or smaller tensors per "
                "tile (more tiles, gradient accumulation, recomputation, "
                "setAvailableMemoryProportion), or SessionOptions.engineOptions = "
                '{"debug.allowOutOfMemory": "true"} to get the session and its reports',
                exc.report,
            ) from None
        except PoplarError as exc:
            raise popart_exception(f"{self._kind}.prepareDevice: {exc}") from None
        for aid in self._anchors:
            self.engine.connectStreamToCallback(f"anchor:{aid}", self._anchors[aid].take)
        for tid in self._inputs:
            self.engine.connectStreamToCallback(f"input:{tid}", self._inputs[tid].fill)

    def _finish_build(self, values: dict) -> None:
        raise NotImplementedError

    # -------------------------------------------------------------------- run
    def _engine(self, what: str) -> Engine:
        if self.engine is None:
            raise popart_exception(f"{self._kind}.{what}: call prepareDevice() first")
        return self.engine

    def weightsFromHost(self) -> None:
        """Write the model's weights (initializers) to the device."""
        engine = self._engine("weightsFromHost")
        if not self._loaded:
            engine.load(self.deviceInfo.device)
            self._loaded = True
        for tid, arr in self._weights.items():
            engine.writeTensor(f"weight:{tid}", arr)
        seed = self.options.randomSeed or 0
        engine.writeTensor("randomSeed", np.array([seed & 0xFFFFFFFF, 0], np.uint32))

    def seed_step(self) -> pprog.Sequence:
        """The program advancing the device seed's counter (one per micro-batch), or an
        empty one when no op draws random numbers."""
        prog = pprog.Sequence(debugContext="randomSeed/advance")
        if any(
            r.op_type == "Dropout" and len(r.outputs) > 2 and r.outputs[2] is not None
            for r in self._records
        ):
            popops.addInPlace(self.graph, self._seed.slice(1, 2, 0), 1, prog, "randomSeed/advance")
        return prog

    _loaded = False

    def weightsToHost(self) -> None:
        """Read the weights from the device into the session's host copies."""
        engine = self._engine("weightsToHost")
        for tid in self._weights:
            arr = np.asarray(engine.readTensor(f"weightRead:{tid}"))
            shape = self._weights[tid].shape
            self._weights[tid] = (
                arr.reshape(-1, *shape)[0].copy()
                if self.replicas > 1
                else arr.reshape(shape).copy()
            )

    def readWeights(self, weightsIo: PyWeightsIO) -> None:
        """Copy the host copies of the weights (``weightsToHost``) into ``weightsIo``."""
        for tid, arr in weightsIo.weights.items():
            if tid not in self._weights:
                raise popart_exception(
                    f"{self._kind}.readWeights: '{tid}' is not a weight; weights: "
                    f"{sorted(self._weights)}"
                )
            arr[...] = self._weights[tid].reshape(arr.shape)

    def writeWeights(self, weightsIo: PyWeightsIO) -> None:
        """Set the host copies of weights (written by the next ``weightsFromHost``)."""
        for tid, arr in weightsIo.weights.items():
            if tid not in self._weights:
                raise popart_exception(
                    f"{self._kind}.writeWeights: '{tid}' is not a weight; weights: "
                    f"{sorted(self._weights)}"
                )
            want = self._weights[tid].shape
            if np.shape(arr) != want:
                raise popart_exception(
                    f"{self._kind}.writeWeights: '{tid}' needs shape {list(want)}, got "
                    f"{list(np.shape(arr))}"
                )
            self._weights[tid] = np.asarray(arr, self._weights[tid].dtype).copy()

    def resetHostWeights(
        self,
        modelProtoOrFilename: Any,
        ignoreWeightsInModelWithoutCorrespondingHostWeight: bool = False,
    ) -> None:
        """Take the weights of another model (same weight ids and shapes) as the host
        copies; ``weightsFromHost`` then writes them."""
        model = load_model(modelProtoOrFilename, f"{self._kind}.resetHostWeights")
        for init in model.graph.initializer:
            if init.name not in self._weights:
                if ignoreWeightsInModelWithoutCorrespondingHostWeight:
                    continue
                raise popart_exception(
                    f"{self._kind}.resetHostWeights: the model's weight '{init.name}' is not a "
                    "weight of this session; hint: "
                    "ignoreWeightsInModelWithoutCorrespondingHostWeight=True"
                )
            self.writeWeights(PyWeightsIO({init.name: numpy_helper.to_array(init)}))

    def modelToHost(self, fn: str) -> None:
        """Write the model with the device's current weights to the ONNX file ``fn``."""
        self.weightsToHost()
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for init in model.graph.initializer:
            if init.name in self._weights:
                init.CopyFrom(numpy_helper.from_array(self._weights[init.name], init.name))
        onnx.save(model, fn)

    def _anchor_shape(self, a: _Anchor) -> list[int]:
        art, bps = a.art, self.dataFlow.batchesPerStep
        shape = list(a.tensor.shape())
        lead = [self.replicas] if self.replicas > 1 else []
        if art.id() == "ALL":
            lead = [n for n in (bps, self.accumulation) if n > 1] + lead
        elif art.id() == "EVERYN" and bps // art.rp() > 1:
            lead = [bps // art.rp(), *lead]
        return [*lead, *shape]

    def initAnchorArrays(self) -> dict[str, np.ndarray]:
        """Zeroed numpy arrays for the anchors, shaped as PopART shapes them: leading
        ``[batchesPerStep, accumulationFactor, replicas]`` dimensions for ``ALL``
        anchors, each only when it is > 1."""
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
        raise popart_exception(f"{self._kind}.getInfo: '{tensorId}' is no input or anchor")

    def _input_shape(self, inp: _Input) -> list[int]:
        lead = [
            n for n in (self.dataFlow.batchesPerStep, self.accumulation, self.replicas) if n > 1
        ]
        return [*lead, *inp.shape]

    def run(self, stepio: PyStepIO, debugName: str = "") -> None:
        """Run one step: ``batchesPerStep`` batches from ``stepio.inputs`` into
        ``stepio.outputs``. Input arrays are ``[batchesPerStep, accumulationFactor,
        replicas, *shape]``, each leading dimension only when it is > 1.

        Raises
        ------
        popart_exception
            A missing or unknown input, an input of the wrong shape or kind of type, or
            a missing or wrongly shaped anchor array (all named, with the shapes).
        """
        engine = self._engine("run")
        if not self._loaded:
            engine.load(self.deviceInfo.device)
            self._loaded = True
        what = f"{self._kind}.run"
        if not isinstance(stepio, PyStepIO):
            raise popart_exception(f"{what}: expected a popart.PyStepIO")
        extra = sorted(set(stepio.inputs) - set(self._inputs) - set(self._synthetic))
        if extra:
            raise popart_exception(
                f"{what}: {extra} are not inputs of the model; inputs: {sorted(self._inputs)}"
            )
        calls = self.dataFlow.batchesPerStep * self.accumulation * self.replicas
        for tid, inp in self._inputs.items():
            if tid not in stepio.inputs:
                raise popart_exception(
                    f"{what}: no data for input '{tid}' in the PyStepIO; inputs needed: "
                    f"{sorted(self._inputs)}"
                )
            inp.data, inp.index = self._step_input(tid, inp, stepio.inputs[tid], calls, what), 0
        for aid, a in self._anchors.items():
            out = stepio.outputs.get(aid)
            want = self._anchor_shape(a)
            if not isinstance(out, np.ndarray) or list(out.shape) != want:
                got = list(out.shape) if isinstance(out, np.ndarray) else type(out).__name__
                raise popart_exception(
                    f"{what}: anchor '{aid}' needs an array of shape {want}, got {got}; hint: "
                    "session.initAnchorArrays()"
                )
            a.out, a.index = out.reshape([-1, *a.tensor.shape()]), 0
        try:
            engine.run(0, debugName)
        except PoplarError as exc:
            raise popart_exception(f"{what}: {exc}") from None

    def _step_input(self, tid: str, inp: _Input, data: Any, calls: int, what: str) -> np.ndarray:
        arr = np.asarray(data)
        host = _HOST[inp.type]
        want = self._input_shape(inp)
        if list(arr.shape) != want and not (calls == 1 and list(arr.shape) == [1, *inp.shape]):
            raise popart_exception(
                f"{what}: input '{tid}' has shape {list(arr.shape)}; it needs {want} "
                f"(batchesPerStep={self.dataFlow.batchesPerStep}, accumulationFactor="
                f"{self.accumulation}, replicas={self.replicas}; dimensions of 1 dropped; "
                f"tensor shape {inp.shape})"
            )
        if np.dtype(host).kind != arr.dtype.kind and not (
            np.dtype(host).kind == "f" and arr.dtype.kind in "iu"
        ):
            raise popart_exception(
                f"{what}: input '{tid}' is {arr.dtype}; the model's input is {np.dtype(host)}"
            )
        return np.ascontiguousarray(arr, dtype=host).reshape([calls, *inp.shape])

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

    def getCycleCount(self) -> int:
        """Simulated cycles of the last ``run``."""
        runs = self.getExecutionReport().get("runs") or []
        if not runs:
            raise popart_exception(f"{self._kind}.getCycleCount: no run yet; call run() first")
        return int(runs[-1]["cyclesTo"] - runs[-1]["cyclesFrom"])


class InferenceSession(_Session):
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
    userOptions
        :class:`~popart_api.options.SessionOptions` (virtual graphs, pipelining,
        replication, engine options).
    patterns, name
        Accepted for PopART compatibility.

    Raises
    ------
    popart_exception
        Unreadable model, an anchor that is no tensor of the model, an input without a
        shape, bad options, or no device.
    """

    _kind = "InferenceSession"

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Any = None,
        userOptions: SessionOptions | None = None,
        name: str = "inference",
    ) -> None:
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name)

    def _finish_build(self, values: dict) -> None:
        if self.options.enablePipelining and self.ipus > 1:
            from popart_api.pipeline import inference_program

            self._compile(inference_program(self, values))
            return
        from popart_api.training import transient_variables

        micro, every, post, pre, periods = self._make_anchors(values)
        undef = [
            pprog.WriteUndef(t) for t in transient_variables(self.graph, [self._forward_variables])
        ]
        batch = pprog.Sequence(
            *undef,
            *self._input_progs.values(),
            *self._fwd_progs,
            micro,
            debugContext="batch",
        )
        self._compile(self._main_program(batch, every, post, pre, periods))


class TrainingSession(_Session):
    """Train an ONNX model on a simulated device: forward pass, the loss's gradient,
    backward pass (autodiff of every op), optimizer update, per batch.

    Parameters
    ----------
    fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name
        As :class:`InferenceSession`.
    loss
        The id of the loss tensor (the output of ``aiGraphcore.nllloss``/``l1loss``/
        ``identityloss``, or any FLOAT scalar).
    optimizer
        :class:`~popart_api.optimizers.ConstSGD`, ``SGD`` or ``Adam``.

    Raises
    ------
    popart_exception
        As :class:`InferenceSession`, plus a loss that is no tensor of the model, a
        missing or unknown optimizer, an op without a gradient between a weight and
        the loss.
    """

    _kind = "TrainingSession"

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        loss: str | None = None,
        optimizer: Optimizer | None = None,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Any = None,
        userOptions: SessionOptions | None = None,
        name: str = "training",
        losses: Any = None,
    ) -> None:
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name)
        if loss is None and losses:
            loss = losses[0] if isinstance(losses, list | tuple) else losses
        if not isinstance(loss, str) or loss not in self._known:
            raise popart_exception(
                f"TrainingSession: loss {loss!r} is not a tensor of the model; hint: the id "
                "returned by builder.aiGraphcore.nllloss(...) / l1loss / identityloss"
            )
        if not isinstance(optimizer, Optimizer):
            raise popart_exception(
                "TrainingSession: optimizer must be popart.ConstSGD, SGD or Adam, got "
                f"{type(optimizer).__name__}"
            )
        self.loss = loss
        self.optimizer = optimizer

    def _trained(self) -> list[str]:
        """Weights the optimizer updates: every FLOAT/FLOAT16 initializer."""
        return [w for w, v in self._weight_vars.items() if autodiff.is_float(v)]

    def _finish_build(self, values: dict) -> None:
        loss = values[self.loss]
        if not autodiff.is_float(loss):
            raise popart_exception(
                f"TrainingSession: loss '{self.loss}' is not a FLOAT tensor (got "
                f"{type(loss).__name__}); hint: the output of a loss op"
            )
        trained = self._trained()
        sources = set(trained)
        sources |= {
            a[len(autodiff.GRADIENT_PREFIX) :]
            for a in self.dataFlow.anchors()
            if self._is_grad_anchor(a)
        }
        from popart_api.training import build_training

        build_training(self, values, loss, trained, sources)

    def weightsFromHost(self) -> None:
        """Write the weights and the optimizer's values to the device; zero the
        optimizer state (velocities, moments)."""
        super().weightsFromHost()
        engine = self._engine("weightsFromHost")
        for handle, value in self._optimizer_writes(self.optimizer):
            engine.writeTensor(handle, value)
        for handle, shape, dtype in self._state_handles:
            engine.writeTensor(handle, np.zeros(shape, dtype))

    def _optimizer_writes(self, optimizer: Optimizer) -> list[tuple[str, np.ndarray]]:
        shape, dtype = self._seed_shape
        seed = np.full(shape, optimizer.getLossScalingVal(), dtype)
        return [("lossScaling:seed", seed)] + [
            (sc.handle, np.float32(sc.value(optimizer))) for sc in self._opt_lowering.scalars
        ]

    def updateOptimizerFromHost(self, optimizer: Optimizer) -> None:
        """Write a new optimizer's values (same kind; constant values unchanged)."""
        engine = self._engine("updateOptimizerFromHost")
        if type(optimizer) is not type(self.optimizer):
            raise popart_exception(
                f"TrainingSession.updateOptimizerFromHost: the session was built with "
                f"{type(self.optimizer).__name__}; got {type(optimizer).__name__}"
            )
        old = self.optimizer
        for name in old.DEFAULTS:
            for wid in [None, *old.specific_ids(), *optimizer.specific_ids()]:
                a, const = old.value(name, wid)
                b, _ = optimizer.value(name, wid)
                if const and a != b:
                    raise popart_exception(
                        f"TrainingSession.updateOptimizerFromHost: {name} "
                        + (f"of '{wid}' " if wid else "")
                        + f"is constant ({a}) and cannot change to {b}; hint: make it "
                        "(value, False) when building the session"
                    )
        new_specific = sorted(set(optimizer.specific_ids()) - set(old.specific_ids()))
        if new_specific:
            raise popart_exception(
                "TrainingSession.updateOptimizerFromHost: weights "
                f"{new_specific} have their own values (insertSpecific) only in the new "
                "optimizer; the session shares the default values for them; hint: give "
                "them (non-constant) specific values when building the session"
            )
        for attr in ("mode", "weight_decay_mode"):
            if getattr(old, attr, None) != getattr(optimizer, attr, None):
                raise popart_exception(
                    f"TrainingSession.updateOptimizerFromHost: {attr} "
                    f"{getattr(optimizer, attr).value} differs from the session's "
                    f"{getattr(old, attr).value}; it cannot change after prepareDevice"
                )
        if hasattr(old, "uses_momentum") and old.uses_momentum() != optimizer.uses_momentum():
            raise popart_exception(
                "TrainingSession.updateOptimizerFromHost: the session was built "
                + ("with" if old.uses_momentum() else "without")
                + " momentum; hint: build it with a non-constant momentum, e.g. "
                "'defaultMomentum': (0.0, False), to change it later"
            )
        self.optimizer = optimizer
        self._opt_lowering.optimizer = optimizer
        for handle, value in self._optimizer_writes(optimizer):
            engine.writeTensor(handle, value)


__all__ = [
    "AnchorReturnType",
    "DataFlow",
    "InferenceSession",
    "InputShapeInfo",
    "PyStepIO",
    "PyWeightsIO",
    "TrainingSession",
]
