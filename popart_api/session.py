"""PopART's ``InferenceSession`` and ``TrainingSession`` on the simulator.

``InferenceSession(fnModel, dataFlow, deviceInfo)`` reads an ONNX model;
``prepareDevice()`` lowers it to a poplar_api graph for the device (inputs, weights
and constants mapped linearly over the tiles, one host-to-device stream per input and
one device-to-host stream per anchor, program ``Repeat(batchesPerStep, body)``) and
compiles it. What the host does with a prepared session (``weightsFromHost()``,
``run(PyStepIO(...))`` of ``batchesPerStep`` batches, anchors, reports) is in
:mod:`popart_api.stepio`; ``DataFlow``, ``PyStepIO`` and the other host-side
descriptions are in :mod:`popart_api.dataflow` and imported from here too.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ipusim import progress
from ipusim.files import FileWriteError, write_json
from popart_api import autodiff, ops
from popart_api.dataflow import (
    AnchorReturnType,
    DataFlow,
    InputShapeInfo,
    PyStepIO,
    PyWeightsIO,
)
from popart_api.devices import DeviceInfo
from popart_api.errors import OutOfMemoryException, popart_exception
from popart_api.graph_patterns import rewrite_session_model
from popart_api.inplace import inplace_candidates
from popart_api.io_tiles import input_program, overlapped_program, split_graphs
from popart_api.logger import LEVELS
from popart_api.logger import configure as configure_logging
from popart_api.lowered import LoweredModel
from popart_api.node_lowering import node_lowering
from popart_api.onnx_model import (
    HOST_DTYPES,
    ONNX_TYPES,
    WEIGHT_TYPES,
    check_assignments,
    load_model,
)
from popart_api.ops_control import node_record
from popart_api.optimizers import Optimizer
from popart_api.options import SessionOptions, SyntheticDataMode, VirtualGraphMode
from popart_api.outline import outline_repeats
from popart_api.patterns import as_patterns
from popart_api.pipeline import check_stage_order, place_nodes
from popart_api.stepio import HostAnchor, HostInput, SessionIO
from poplar_api import (
    FLOAT,
    HALF,
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
from poplar_api.graph_bulk import bulk_construction
from poplar_api.poputil import mapTensorLinearly

#: PopART's log levels (``POPART_LOG_LEVEL``) -> Python logging levels.
LOG_LEVELS = LEVELS
#: The oldest ``ai.onnx`` opset PopART builds (its opset tables cover 6 to 11).
MIN_AI_ONNX_OPSET = 6
logger = logging.getLogger("popart")


def _configure_logging() -> None:
    """Apply ``POPART_LOG_LEVEL``, ``POPART_LOG_DEST`` and ``POPART_LOG_CONFIG``
    (:func:`popart_api.logger.configure`)."""
    configure_logging()


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
    try:  # whole or not at all
        write_json(path, out, what="POPART_TENSOR_TILE_MAP", separators=(", ", ": "))
    except FileWriteError as exc:
        raise popart_exception(f"POPART_TENSOR_TILE_MAP: {exc}") from None


class _Session(SessionIO):
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
        self.patterns = as_patterns(patterns, what)
        self.name = name
        self._shape_info = inputShapeInfo or InputShapeInfo()
        graph = self.model.graph
        self._opsets = {(i.domain or "ai.onnx"): i.version for i in self.model.opset_import}
        newest = onnx.defs.onnx_opset_version()
        for domain, version, top in (
            ("ai.onnx", self._opsets.get("ai.onnx", 0), newest),
            ("ai.graphcore", self._opsets.get("ai.graphcore", 0), 1),
        ):
            if version > top:
                raise popart_exception(
                    f"{self._kind}: the model imports opset {version} of '{domain}'; the "
                    f"newest there is {top}; hint: export the model with opset <= {top}"
                )
        # PopART's opset tables (graphcore/popart d2f20d78 willow/src/opsets.gen.hpp)
        # start at ai.onnx 6; with strictOpVersions (its default) ``getOpid`` in
        # willow/src/opsets.cpp refuses a model whose opset has no table.
        oldest = self._opsets.get("ai.onnx", MIN_AI_ONNX_OPSET)
        if oldest < MIN_AI_ONNX_OPSET:
            raise popart_exception(
                f"{self._kind}: the model imports opset {oldest} of 'ai.onnx'; PopART supports "
                f"ai.onnx opsets from {MIN_AI_ONNX_OPSET} (its opset tables start there); "
                f"hint: convert the model with onnx.version_converter.convert_version(model, "
                f"{MIN_AI_ONNX_OPSET}) or newer"
            )
        check_assignments(graph, self._kind)
        self._init_names = {t.name for t in graph.initializer}
        self._input_infos: dict[str, tuple[int, list[int]]] = {}
        for vi in graph.input:
            if vi.name not in self._init_names:
                self._input_infos[vi.name] = self._input_info(vi)
        self._known = set(self._input_infos) | self._init_names
        self._known |= {o for n in graph.node for o in n.output}
        self._check_options()
        self.engine: Engine | None = None
        self._inputs: dict[str, HostInput] = {}
        self._anchors: dict[str, HostAnchor] = {}
        self._weights: dict[str, np.ndarray] = {}
        self.lowered = LoweredModel()

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
        with progress.activity(f"{self._kind}.prepareDevice"):  # a line while it runs long
            self._prepare_device(loadEngine)

    @bulk_construction
    def _prepare_device(self, loadEngine: bool) -> None:
        """The body of :meth:`prepareDevice`."""
        _configure_logging()
        started = time.perf_counter()
        applied = rewrite_session_model(self, autodiff.GRADIENT_PREFIX)  # PopART's patterns
        logger.info("patterns applied: %s", applied)
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
        split = split_graphs(self, graph, tiles)  # SessionOptions.numIOTiles
        if split is not None:
            self.lowered.graphs, self._whole = split, False
        elif self.options.virtualGraphMode is VirtualGraphMode.Off or self.ipus == 1:
            self.lowered.graphs = [graph] * max(self.ipus, 1)
            self._whole = True
        else:
            self.lowered.graphs = [
                graph.createVirtualGraph(i * tiles, (i + 1) * tiles) for i in range(self.ipus)
            ]
            self._whole = False
        node_ipu, node_stage = place_nodes(
            self.model, self.options.virtualGraphMode, self.ipus, self._kind,
            self.deviceInfo.numIpus, self.replicas,
        )  # fmt: skip
        if self.options.enablePipelining:
            check_stage_order(self.model, node_stage, self._kind)
        self._node_ipu, self.lowered.node_stage = node_ipu, node_stage
        first_ipu: dict[str, int] = {}
        for node, ipu in zip(self.model.graph.node, node_ipu, strict=True):
            for i in node.input:
                first_ipu.setdefault(i, ipu)
        values: dict[str, Any] = {}
        self.lowered.value_ipu = {}
        for init in self.model.graph.initializer:
            arr = numpy_helper.to_array(init)
            if init.data_type in WEIGHT_TYPES:
                typ = ONNX_TYPES[init.data_type][0]
                ipu = first_ipu.get(init.name, 0)
                var = self.lowered.graphs[ipu].addVariable(typ, list(arr.shape), init.name)
                mapTensorLinearly(self.lowered.graphs[ipu], var)
                graph.createHostWrite(f"weight:{init.name}", var)
                graph.createHostRead(f"weightRead:{init.name}", var)
                self._weights[init.name] = arr.astype(HOST_DTYPES[typ])
                self.lowered.weight_vars[init.name] = var
                values[init.name] = var
                self.lowered.value_ipu[init.name] = ipu
            else:  # e.g. INT64 shapes: known when the graph is built
                values[init.name] = arr
        self.lowered.input_progs = {}
        self._seed = graph.addVariable(UNSIGNED_INT, [2], "randomSeed")
        graph.setTileMapping(self._seed, 0)
        graph.createHostWrite("randomSeed", self._seed)
        synthetic = self.options.syntheticDataMode
        self._synthetic: dict[str, HostInput] = {}
        for tid, (etype, shape) in self._input_infos.items():
            if etype not in ONNX_TYPES:
                raise popart_exception(
                    f"{self._kind}: input '{tid}' has type "
                    f"{onnx.TensorProto.DataType.Name(etype)}; supported input types: "
                    f"{', '.join(onnx.TensorProto.DataType.Name(t) for t in ONNX_TYPES)} "
                    "(INT64 held as INT32)"
                )
            typ = ONNX_TYPES[etype][0]
            ipu = first_ipu.get(tid, 0)
            var = self.lowered.graphs[ipu].addVariable(typ, shape, tid)
            mapTensorLinearly(self.lowered.graphs[ipu], var)
            values[tid] = var
            self.lowered.value_ipu[tid] = ipu
            if synthetic is not SyntheticDataMode.Off:
                self.lowered.input_progs[tid] = self._synthetic_input(var, tid, synthetic)
                self._synthetic[tid] = HostInput(tid, typ, shape)
                continue
            self.lowered.input_progs[tid] = input_program(self, graph, tid, typ, var, ipu)
            self._inputs[tid] = HostInput(tid, typ, shape)
        self._copies: dict[tuple[str, int], Any] = {}
        self._copy_progs: dict[tuple[str, int], pprog.Copy] = {}
        self._side_progs: list[pprog.Sequence] = []
        #: pipeline stage of each node output; (stage, copy) sending outputs onwards
        self._value_stage: dict[str, int] = {}
        self.lowered.pipeline_sends = []
        node_progs = []
        first = variable_count(graph)
        self.lowered.node_variables = []
        self._inplace: dict[int, int] = {}
        if self.patterns.InPlace:
            recomputed = None
            training = self._kind == "TrainingSession"
            if training:
                from popart_api.training import recompute_flags

                recomputed = recompute_flags(self)
            self._inplace = inplace_candidates(
                self.model, recomputed, self.dataFlow.anchors(), training
            )
        nodes = self.model.graph.node
        with progress.activity("lower nodes", total=len(nodes), unit="nodes") as step:
            for i, node in enumerate(nodes):
                before = variable_count(graph)
                node_progs.append(self._lower(node, i, values))
                self.lowered.node_variables.append((before, variable_count(graph)))
                step(1)
        #: ids of the variables the forward pass creates (its activations, temporaries)
        self.lowered.forward_variables = (first, variable_count(graph))
        self.lowered.node_progs = node_progs
        self.lowered.side_progs = self._side_progs
        #: per node: its program, then what runs once per forward pass
        self.lowered.fwd_progs = [
            pprog.Sequence(p, side) for p, side in zip(node_progs, self._side_progs, strict=True)
        ]
        logger.info("lowered %d nodes in %.3f s", len(node_progs), time.perf_counter() - started)
        self._finish_build(values)
        logger.info("compiled in %.3f s (total)", time.perf_counter() - started)
        tile_map = os.environ.get("POPART_TENSOR_TILE_MAP")
        if tile_map:
            _write_tile_map(graph, values, tile_map)
        # the per-node records are what the training and pipelining builds read; built,
        # they would keep every value's index arrays for the session's life (0.31 GB
        # in ResNet-50 inference)
        self.lowered.records = []
        self._loaded = False
        if loadEngine:
            with progress.activity("Engine load"):
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
        src = self.lowered.value_ipu.get(tid, ipu)
        if not isinstance(value, Tensor) or src == ipu or self._whole:
            return value
        key = (tid, ipu)
        if key not in self._copies:
            g = self.lowered.graphs[ipu]
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
                self.lowered.pipeline_sends.append((stage, pprog.Copy(value, carrier)))
                self._copy_progs[key] = pprog.Copy(carrier, dst)
            else:
                self._copy_progs[key] = pprog.Copy(value, dst)
        prog.add(self._copy_progs[key])
        return self._copies[key]

    def _lower(self, node: onnx.NodeProto, i: int, values: dict) -> pprog.Sequence:
        how = node_lowering(self, node, i)
        name, domain, opset, fn, attrs = how.name, how.domain, how.opset, how.fn, how.attrs
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
        side = pprog.Sequence(debugContext=f"{name}/once")
        fetched: dict[str, Any] = {}  # enclosing values a subgraph reads, on this IPU

        def fetch(tid: str, value: Any) -> Any:
            if tid not in fetched:
                fetched[tid] = self._on_ipu(tid, value, ipu, prog)
            return fetched[tid]

        ctx = how.context(self, node, side, values, fetch)
        try:
            with ops.lowering_context(ctx):
                outs = list(fn(self.lowered.graphs[ipu], inputs, attrs, prog, name))
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
                self.lowered.value_ipu[tid] = ipu
                self._value_stage[tid] = self.lowered.node_stage[i]
        self._side_progs.append(side)
        stage = self.lowered.node_stage[i]
        record = node_record(node, name, domain, opset, attrs, inputs, outs, ipu, stage)
        self.lowered.records.append(record)
        return prog

    def compile_program(self, main: pprog.Program, values: dict | None = None) -> None:
        """Compile ``main`` (the step program) into the session's engine and connect
        the input and anchor streams to the host arrays.

        What only the build reads is freed first, since the compile and the load are
        the session's largest host memory: the per-node records and, given the build's
        ``values`` (model tensor id -> tensor), those values, whose index arrays no
        program keeps (unless ``POPART_TENSOR_TILE_MAP`` asks for their mapping)."""
        self.lowered.records = []
        if values is not None and not os.environ.get("POPART_TENSOR_TILE_MAP"):
            values.clear()
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

    def seed_step(self) -> pprog.Sequence:
        """The program advancing the device seed's counter (one per micro-batch), or an
        empty one when no op draws random numbers."""
        prog = pprog.Sequence(debugContext="randomSeed/advance")
        if any(
            r.op_type == "Dropout" and len(r.outputs) > 2 and r.outputs[2] is not None
            for r in self.lowered.records
        ):
            popops.addInPlace(self.graph, self._seed.slice(1, 2, 0), 1, prog, "randomSeed/advance")
        return prog


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
    patterns
        A :class:`~popart_api.patterns.Patterns` (None: PopART's default set): the
        ``InPlace`` and Softmax-gradient patterns change the graph.
    name
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
        if self.io_graphs:  # PopART's overlapped I/O on the I/O tiles
            self.compile_program(overlapped_program(self, values), values)
            return
        if self.options.enablePipelining and self.ipus > 1:
            from popart_api.pipeline import inference_program

            self.compile_program(inference_program(self, values), values)
            return
        from popart_api.training import transient_variables

        micro, every, post, pre, periods = self.anchor_programs(values)
        undef = [
            pprog.WriteUndef(t)
            for t in transient_variables(self.graph, [self.lowered.forward_variables])
        ]
        batch = pprog.Sequence(
            *undef,
            *self.lowered.input_progs.values(),
            *outline_repeats(self)[0],
            micro,
            debugContext="batch",
        )
        self.compile_program(self.main_program(batch, every, post, pre, periods), values)


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
        return [w for w, v in self.lowered.weight_vars.items() if autodiff.is_float(v)]

    def _finish_build(self, values: dict) -> None:
        loss = values[self.loss]
        if not autodiff.is_float(loss):
            raise popart_exception(
                f"TrainingSession: loss '{self.loss}' is not a FLOAT tensor (got "
                f"{type(loss).__name__}); hint: the output of a loss op"
            )
        count = loss.numElements() if hasattr(loss, "numElements") else 1
        if count != 1:
            raise popart_exception(
                f"TrainingSession: loss '{self.loss}' has shape {loss.shape()} ({count} "
                "elements); the loss to train on must be a scalar; hint: reduce it "
                "(a loss op with reduction Mean or Sum, or aiOnnx.reducemean)"
            )
        trained = self._trained()
        sources = set(trained)
        sources |= {
            a[len(autodiff.GRADIENT_PREFIX) :]
            for a in self.dataFlow.anchors()
            if self._is_grad_anchor(a)
        }
        from popart_api.training import build_training

        with progress.activity("backward pass and optimizer"):
            built = build_training(self, values, loss, trained, sources)
        self._opt_lowering = built.lowering
        self._seed_shape = built.seed_shape
        self._slot_handles = built.slot_handles
        self.compile_program(built.program, values)

    def weightsFromHost(self) -> None:
        """Write the weights and the optimizer's values to the device; zero the
        optimizer state (velocities, moments)."""
        super().weightsFromHost()
        engine = self._engine("weightsFromHost")
        for handle, value in self._optimizer_writes(self.optimizer):
            engine.writeTensor(handle, value)
        for handle, shape, dtype in self._slot_handles:
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
