"""A session's traffic with the host: the inputs streamed in each step, the anchors
streamed out (and the programs copying them), the weights written and read, and the
reports.

:class:`SessionIO` is the part of a session that the host sees once the model is
lowered; :class:`~popart_api.session.InferenceSession` and ``TrainingSession`` build
on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ipusim.files import FileWriteError, write_bytes
from popart_api import ops
from popart_api.autodiff import GRADIENT_PREFIX
from popart_api.builder import TensorInfo
from popart_api.dataflow import AnchorReturnType, DataFlow, PyStepIO, PyStepIOCallback, PyWeightsIO
from popart_api.devices import DeviceInfo
from popart_api.errors import popart_exception
from popart_api.onnx_model import HOST_DTYPES, load_model
from popart_api.optimizers import like
from popart_api.options import SessionOptions, seed_word
from poplar_api import DataStream, Engine, Graph, Tensor, popops
from poplar_api import program as pprog
from poplar_api.errors import PoplarError


class HostInput:
    """A model input: its stream, device type and per-batch shape."""

    def __init__(self, tid: str, typ: Any, shape: list[int]) -> None:
        self.id, self.type, self.shape = tid, typ, shape
        self.data: np.ndarray | None = None
        self.index = 0

    def fill(self, buffer: np.ndarray) -> None:
        buffer[...] = self.data[self.index].reshape(buffer.shape)
        self.index += 1


class HostAnchor:
    """An anchor: its stream and where the values of the current run go."""

    def __init__(self, tid: str, art: AnchorReturnType, t: Tensor) -> None:
        self.id, self.art, self.tensor = tid, art, t
        self.out: np.ndarray | None = None
        self.index = 0

    def take(self, buffer: np.ndarray) -> None:
        self.out[self.index] = buffer.reshape(self.out.shape[1:])
        self.index += 1


class _ShapeOnly:
    """A stand-in for an anchor's tensor when only its shape is known."""

    def __init__(self, shape: list[int]) -> None:
        self._shape = shape

    def shape(self) -> list[int]:
        return list(self._shape)


class SessionIO:
    """Inputs, anchors, weights and reports of a session (see the module doc).

    The session that builds on it sets the attributes below when it is made and when
    ``prepareDevice`` lowers the model.
    """

    _kind = "Session"
    _loaded = False
    _weights_written = False  # weightsFromHost called (else run warns once)
    _last_cycles: int | None = None  # the last run's cycles, kept over a report fetch
    model: onnx.ModelProto
    dataFlow: DataFlow
    deviceInfo: DeviceInfo
    options: SessionOptions
    graph: Graph
    engine: Engine | None
    replicas: int
    accumulation: int
    _inputs: dict[str, HostInput]
    _synthetic: dict[str, HostInput]
    _anchors: dict[str, HostAnchor]
    _weights: dict[str, np.ndarray]

    # ------------------------------------------------------------- anchors
    def anchor_tensor(self, aid: str, values: dict) -> Tensor:
        """The tensor anchor ``aid`` copies out (``values``: tensor id -> lowered value)."""
        if aid not in values:
            raise popart_exception(
                f"{self._kind}: anchor '{aid}' has no value (a gradient nobody computes?); "
                "hint: anchor gradients of trained weights or of inputs on the loss's path"
            )
        return ops.tensor(self.graph, values[aid], f"anchor/{aid}")

    def anchor_streams(
        self, values: dict
    ) -> Iterator[tuple[str, AnchorReturnType, Tensor, DataStream]]:
        """Each anchor in the data flow's order: its id, return type, tensor (of
        ``values``: :meth:`anchor_tensor`) and the device-to-host stream ``anchor:ID``
        made for it (one element at least)."""
        for aid in self.dataFlow.anchors():
            art = self.dataFlow.art(aid)
            t = self.anchor_tensor(aid, values)
            stream = self.graph.addDeviceToHostFIFO(
                f"anchor:{aid}", t.elementType(), max(t.numElements(), 1)
            )
            yield aid, art, t, stream

    def anchor_programs(
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
        for aid, art, t, stream in self.anchor_streams(values):
            if t.numElements() == 0:  # nothing to copy: the host array stays empty
                self.add_anchor(aid, art, t)
                continue
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
            self.add_anchor(aid, art, t)
        return micro, every, post, pre, periods

    def add_anchor(self, aid: str, art: AnchorReturnType, t: Tensor) -> None:
        """Stream anchor ``aid`` (return type ``art``) from ``t`` to the host arrays."""
        self._anchors[aid] = HostAnchor(aid, art, t)

    def main_program(
        self,
        batch: pprog.Program,
        every: pprog.Sequence,
        post: pprog.Sequence,
        pre: pprog.Sequence,
        periods: set,
    ) -> pprog.Program:
        """The program of one step: ``pre``, then ``batchesPerStep`` times ``batch``
        (with ``every`` after each ``n``-th for an EVERYN period ``n``), then ``post``."""
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
        self._weights_written = True
        seed = seed_word(self.options.randomSeed or 0)
        engine.writeTensor("randomSeed", np.array([seed, 0], np.uint32))

    def setRandomSeed(self, seed: int) -> None:
        """Seed the device's random generator (Dropout masks, synthetic data) now, and
        on every later ``weightsFromHost``."""
        self.options.randomSeed = seed  # checked: an int in 0..2**64-1
        engine = self._engine("setRandomSeed")
        if not self._loaded:
            engine.load(self.deviceInfo.device)
            self._loaded = True
        engine.writeTensor("randomSeed", np.array([seed_word(int(seed)), 0], np.uint32))

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
        what = f"{self._kind}.writeWeights"
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
            held = held_as(np.asarray(arr), self._weights[tid].dtype, f"{what}: '{tid}'")
            self._weights[tid] = held.copy()

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
        """Write the model with the device's current weights to the ONNX file ``fn``.

        The file appears only once complete (:func:`ipusim.files.write_bytes`); a path
        that cannot be written is a popart_exception naming it and the reason."""
        self.weightsToHost()
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for init in model.graph.initializer:
            if init.name in self._weights:
                init.CopyFrom(numpy_helper.from_array(self._weights[init.name], init.name))
        try:  # whole or not at all: a stopped or failed write leaves no half model
            write_bytes(fn, model.SerializeToString(), what="modelToHost model")
        except FileWriteError as exc:
            raise popart_exception(f"{self._kind}.modelToHost: {exc}") from None

    def _anchor_shape(self, a: HostAnchor) -> list[int]:
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
        if self.engine is None:  # before prepareDevice: shapes from ONNX shape inference
            return self._inferred_anchor_arrays()
        return {
            aid: np.zeros(self._anchor_shape(a), HOST_DTYPES[a.tensor.elementType()])
            for aid, a in self._anchors.items()
        }

    def _inferred_anchor_arrays(self) -> dict[str, np.ndarray]:
        """The anchor arrays from the model's shapes (``onnx.shape_inference`` with the
        session's input shapes), for ``initAnchorArrays`` before ``prepareDevice``."""
        from onnx import TensorProto, helper, shape_inference

        from popart_api.onnx_model import ONNX_TYPES

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for vi in model.graph.input:
            if vi.name in self._input_infos:
                etype, shape = self._input_infos[vi.name]
                vi.CopyFrom(helper.make_tensor_value_info(vi.name, etype, shape))
        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as exc:
            raise popart_exception(
                f"{self._kind}.initAnchorArrays: the anchors' shapes cannot be inferred before "
                f"prepareDevice ({exc}); hint: call prepareDevice() first"
            ) from None
        infos = {
            v.name: v
            for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
        }
        out = {}
        for aid in self.dataFlow.anchors():
            # a gradient anchor has the shape and type of the tensor it is the gradient of
            base = aid[len(GRADIENT_PREFIX) :] if self._is_grad_anchor(aid) else aid
            vi = infos.get(base)
            tt = vi.type.tensor_type if vi is not None else None
            dims = list(tt.shape.dim) if tt is not None and tt.HasField("shape") else None
            if dims is None or any(not d.HasField("dim_value") for d in dims):
                raise popart_exception(
                    f"{self._kind}.initAnchorArrays: the shape of anchor '{aid}' is not known "
                    "before prepareDevice; hint: call prepareDevice() first"
                )
            etype = tt.elem_type if tt.elem_type in ONNX_TYPES else TensorProto.FLOAT
            shape = [d.dim_value for d in dims]
            anchor = HostAnchor(aid, self.dataFlow.art(aid), _ShapeOnly(shape))
            out[aid] = np.zeros(self._anchor_shape(anchor), ONNX_TYPES[etype][1])
        return out

    def getInfo(self, tensorId: str) -> TensorInfo:
        """The type and shape of an input or anchor (after ``prepareDevice``)."""
        if tensorId in self._inputs:
            i = self._inputs[tensorId]
            return TensorInfo(HOST_DTYPES[i.type], i.shape)
        if tensorId in self._anchors:
            t = self._anchors[tensorId].tensor
            return TensorInfo(HOST_DTYPES[t.elementType()], t.shape())
        raise popart_exception(f"{self._kind}.getInfo: '{tensorId}' is no input or anchor")

    def _input_shape(self, inp: HostInput) -> list[int]:
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
        if not self._weights_written and self._weights:
            self._weights_written = True  # said once
            logging.getLogger("popart").warning(
                "%s: weightsFromHost() was not called, so the device's %d weight(s) (e.g. "
                "'%s') do not hold the model's initializers; hint: call "
                "session.weightsFromHost() after prepareDevice()",
                what,
                len(self._weights),
                next(iter(self._weights)),
            )
        if isinstance(stepio, PyStepIOCallback):
            self._run_callbacks(stepio, debugName)
            return
        if not isinstance(stepio, PyStepIO):
            raise popart_exception(f"{what}: expected a popart.PyStepIO or PyStepIOCallback")
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
            # an empty anchor is never streamed (its array stays as it is)
            empty = a.tensor.numElements() == 0
            a.out, a.index = (out if empty else out.reshape([-1, *a.tensor.shape()])), 0
        try:
            engine.run(0, debugName)
        except PoplarError as exc:
            raise popart_exception(f"{what}: {exc}") from None

    def _run_callbacks(self, stepio: PyStepIOCallback, debugName: str) -> None:
        """One step whose inputs come from ``stepio``'s input callback (one array per
        micro-batch and replica) and whose anchor values go to its output callback."""
        what = f"{self._kind}.run"
        calls = self.dataFlow.batchesPerStep * self.accumulation * self.replicas
        inputs = {}
        for tid, inp in self._inputs.items():
            parts = []
            for _ in range(calls):
                arr = np.asarray(stepio.input_callback(tid, False))
                if list(arr.shape) != list(inp.shape):
                    raise popart_exception(
                        f"{what}: input_callback gave input '{tid}' an array of shape "
                        f"{list(arr.shape)}; required {inp.shape} (one micro-batch)"
                    )
                parts.append(arr)
                stepio.input_complete_callback(tid)
            inputs[tid] = np.stack(parts).reshape(self._input_shape(inp))
        anchors = self.initAnchorArrays()
        self.run(PyStepIO(inputs, anchors), debugName)
        for aid, a in self._anchors.items():
            shape = a.tensor.shape()
            for value in anchors[aid].reshape([-1, *shape]):
                out = stepio.output_callback(aid)
                if not isinstance(out, np.ndarray) or list(out.shape) != list(shape):
                    got = list(out.shape) if isinstance(out, np.ndarray) else type(out).__name__
                    raise popart_exception(
                        f"{what}: output_callback gave anchor '{aid}' {got}; required an "
                        f"array of shape {shape}"
                    )
                out[...] = value
                stepio.output_complete_callback(aid)

    def _step_input(self, tid: str, inp: HostInput, data: Any, calls: int, what: str) -> np.ndarray:
        arr = np.asarray(data)
        host = HOST_DTYPES[inp.type]
        want = self._input_shape(inp)
        # PopART checks the number of elements only (IStepIO::assertNumElements): a
        # replicated input may come as [batchesPerStep, replicas * batch, ...]
        size = int(np.prod(want, dtype=np.int64))
        if list(arr.shape) != want and arr.size != size:
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
        held = held_as(arr, host, f"{what}: input '{tid}'")
        return held.reshape([calls, *inp.shape])

    # -------------------------------------------------------------- reports
    # as PopART's (popart_api/report.py): JSON text or CBOR bytes, the runs forgotten
    # after a fetch unless resetProfile is False, "not enabled" without profiling
    def getSummaryReport(self, resetProfile: bool = True) -> str:
        """The profile summary (text), printed with ``SessionOptions.reportOptions``."""
        from popart_api.report import summary_report

        engine = self._engine("getSummaryReport")
        self._keep_cycle_count(engine)
        return summary_report(engine, self.options.reportOptions, resetProfile)

    def getGraphReport(self, useCbor: bool = False) -> Any:
        """The graph profile as JSON text (which also reads as a dict), or CBOR bytes."""
        from popart_api.report import graph_report

        return graph_report(self._engine("getGraphReport"), useCbor)

    def getExecutionReport(self, useCbor: bool = False, resetProfile: bool = True) -> Any:
        """The execution profile of the runs since the last fetch, as JSON text (which
        also reads as a dict) or CBOR bytes."""
        from popart_api.report import execution_report

        engine = self._engine("getExecutionReport")
        self._keep_cycle_count(engine)
        return execution_report(engine, useCbor, resetProfile)

    def getReport(self) -> Any:
        """The graph and execution profiles as a report object (compute sets, tiles'
        memory, execution steps; see :mod:`popart_api.report`)."""
        from popart_api.report import make_report

        engine = self._engine("getReport")
        return make_report(engine.getGraphProfile(), engine.getExecutionProfile())

    def _keep_cycle_count(self, engine: Engine) -> None:
        """Remember the last run's cycles before a report fetch forgets the runs.

        The cycles are the last trace's total, which is what the execution profile's
        last run spans (``cyclesTo - cyclesFrom``); read from the trace because making
        the profile lists every step of every run again, a record per step and tile
        block, for one number.
        """
        traces = engine.getTraces()
        if traces:
            self._last_cycles = int(traces[-1].total_cycles)

    def getCycleCount(self) -> int:
        """Simulated cycles of the last ``run``, also after a report fetch has reset the
        execution profile (PopART keeps the last run's cycle count)."""
        self._keep_cycle_count(self._engine("getCycleCount"))
        if self._last_cycles is None:
            raise popart_exception(f"{self._kind}.getCycleCount: no run yet; call run() first")
        return self._last_cycles


__all__ = ["HostAnchor", "HostInput", "SessionIO"]


def held_as(arr: np.ndarray, host: Any, what: str) -> np.ndarray:
    """``arr`` as a contiguous array of the dtype the model holds it in (``host``).

    A value the cast would change beyond rounding is refused rather than passed on: an
    integer outside the held type's range (an INT64 input is held as INT32, as PopART
    holds it, and would wrap) or a finite float that becomes infinite (float64 data
    past float32's or FLOAT16's largest value).

    Raises
    ------
    popart_exception
        Naming ``what``, the first such value, where it is and the held type's range.
    """
    with np.errstate(over="ignore"):  # an overflow is refused below, naming the value
        held = np.ascontiguousarray(arr, dtype=host)
    if held.dtype == arr.dtype or arr.size == 0:
        return held
    kind = held.dtype.kind
    if kind in "iu" and arr.dtype.kind in "iub":
        info = np.iinfo(held.dtype)
        outside = (arr < info.min) | (arr > info.max)
        limits = f"{held.dtype}'s range [{info.min}, {info.max}]"
    elif kind == "f" and not np.isfinite(held).all():
        outside = np.isfinite(arr) & ~np.isfinite(held)
        limits = f"{held.dtype}'s largest magnitude {np.finfo(held.dtype).max:g}"
    else:
        return held
    if not outside.any():
        return held
    where = np.unravel_index(int(np.argmax(outside)), arr.shape)
    at = [int(i) for i in where]
    raise popart_exception(
        f"{what}: value {arr[where].item()!r} at index {at} ({arr.dtype}) is outside {limits}, "
        f"the type the model holds it in, and would be changed by the cast; hint: give "
        f"values in that range, or data of type {held.dtype}"
    )
