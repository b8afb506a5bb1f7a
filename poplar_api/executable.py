"""Compiled graphs: ``compileGraph``, :class:`Executable` and executable files.

Poplar separates compiling (``poplar::compileGraph`` gives an ``Executable``) from
running (``Engine(std::move(executable))``), so that a program compiled once can be
saved with ``Executable::serialize`` and loaded by a later process. Here:

* :func:`compileGraph` validates the graph, lowers the programs to the machine IR and
  places device memory once, exactly as ``Engine(graph, programs)`` does (both call
  :func:`poplar_api.lowering.compile`), and keeps the result in the
  :class:`Executable`; it makes no engine.
* ``Engine(executable, options)`` takes that compiled state over (Poplar moves the
  executable into the engine); it runs exactly as ``Engine(graph, programs)`` would,
  with the same traces. A second engine made from the same executable compiles again.
* :meth:`Executable.serialize` writes a file holding the graph state (variables, tile
  mappings, initial values, vertices and their connections, streams, functions) and
  the programs; vertex classes are stored by reference (module and name, or the path
  of the codelet file ``graph.addCodelets`` loaded), by value only when they cannot
  be imported (classes of ``__main__`` or made at run time). The machine IR, memory
  plan and Numba kernels are not stored: :meth:`Executable.deserialize` rebuilds the
  graph and compiles it again (kernels come from Numba's on-disk cache when they can).

The file is a header line, a JSON line (format version, ipusim version, target, sizes,
options, vertex types, SHA-256 and length of the payload) and a pickle payload.
Loading a file runs the code pickle names, so load only files you trust, as with any
pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import numpy as np

from ipusim import progress
from ipusim.config import MachineConfig
from ipusim.timing import TimingModel
from poplar_api import lowering
from poplar_api.codelet import VertexType, vertex_type
from poplar_api.errors import EngineError, PoplarError
from poplar_api.graph import Graph, replication_factor
from poplar_api.graph_bulk import bulk_construction
from poplar_api.lowering.pipeline import Compiled
from poplar_api.program import Program
from poplar_api.streams import HostStreams, prefetch_option
from poplar_api.tensor import MAX_NAME_LENGTH, Tensor
from poplar_api.vertices import ListBlock, VertexTable

#: First line of every executable file.
MAGIC = b"IPUSIM-EXECUTABLE\n"

#: Version of the file layout; files of another version are refused. Version 2: element
#: ids live in one space per element size (version 1 had one per element type).
#: Version 4: vertices are stored as columns, their consecutive connections as runs in
#: the columns of their type, other connections as element ids. Version 5: VectorLists
#: connected in bulk are stored as blocks (vectors per vertex, pieces of one id array).
FORMAT_VERSION = 5

#: Engine options that shape compilation, with their defaults. They are fixed by
#: ``compileGraph``; ``Engine(executable, options)`` may only repeat their values.
COMPILE_OPTIONS = {
    "profiler.blocks.filter": "",
    "profiler.programs.filter": "",
    "debug.allowOutOfMemory": "false",
    "debug.vertexCycles": "estimate",
}

#: Module name prefix of codelet files loaded by ``graph.addCodelets(path)``.
_CODELET_FILE_MODULE = "_ipusim_codelets_"


class ExecutableError(PoplarError, ValueError):
    """An executable cannot be saved or loaded (foreign or corrupt file, lost codelet)."""


#: A timing model for an engine: a :class:`~ipusim.timing.TimingModel` subclass (or any
#: callable making one from a machine config), a model itself, or None for the default.
TimingChoice = type[TimingModel] | Callable[[MachineConfig], TimingModel] | TimingModel | None


def timing_for(choice: TimingChoice, config: MachineConfig) -> TimingModel:
    """The timing model of ``choice`` for machine ``config``.

    A model is used as it is when made for ``config``, else its class is made for
    ``config`` (a graph's replica and the device running every replica have different
    configs); a class or factory is called with ``config``.

    Raises
    ------
    EngineError
        ``choice`` does not give a :class:`~ipusim.timing.TimingModel`.
    """
    if choice is None:
        return TimingModel(config)
    if isinstance(choice, TimingModel):
        return choice if choice.config is config else type(choice)(config)
    model = choice(config) if callable(choice) else None
    if not isinstance(model, TimingModel):
        raise EngineError(
            f"timing: expected a TimingModel subclass, a TimingModel or a function making "
            f"one from a machine config; {choice!r} gave {type(model).__name__}; hint: "
            "Engine(graph, programs, timing=MyTimingModel)"
        )
    return model


def engine_options(options: Mapping[str, Any] | None) -> dict[str, str]:
    """Engine options: ``POPLAR_ENGINE_OPTIONS`` (JSON) overridden by ``options``."""
    merged: dict[str, str] = {}
    env = os.environ.get("POPLAR_ENGINE_OPTIONS")
    if env:
        try:
            parsed = json.loads(env)
        except json.JSONDecodeError as exc:
            raise EngineError(
                f"POPLAR_ENGINE_OPTIONS is not valid JSON ({exc.msg} at position {exc.pos}): "
                f"{env!r}"
            ) from None
        if not isinstance(parsed, dict):
            raise EngineError(f"POPLAR_ENGINE_OPTIONS must be a JSON object, got {env!r}")
        merged.update({str(k): str(v) for k, v in parsed.items()})
    if options is not None and not isinstance(options, Mapping):
        raise EngineError(
            f"engine options must be a mapping of option names to values, got "
            f"{type(options).__name__} {options!r}; hint: {{'autoReport.all': 'true'}}"
        )
    for k, v in (options or {}).items():
        if v is None or isinstance(v, bytes | bytearray):
            raise EngineError(
                f"engine option {k!r}: found {v!r}; option values are strings (or numbers "
                f"and booleans written as strings); hint: {{{k!r}: 'true'}}"
            )
        merged[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return merged


def check_options(options: Mapping[str, str]) -> None:
    """Engine options checked: known names, valid values (see
    :func:`poplar_api.engine_options.check_engine_options`); the options in use are
    logged by the ENGINE module at DEBUG (``POPLAR_LOG_LEVEL=DEBUG``)."""
    from poplar_api.engine_options import check_engine_options
    from poplar_api.logging_config import logger

    check_engine_options(options)
    log = logger("ENGINE")
    if log.isEnabledFor(logging.DEBUG):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(options.items())) or "(none)"
        log.debug("Engine options: %s", shown)


def compile_inputs(
    graph: Any, programs: Any, options: Mapping[str, Any] | None, what: str
) -> tuple[list[Program], dict[str, str]]:
    """The checked inputs of a compilation: ``programs`` as a list (one program or
    several, at least one) and ``options`` merged over ``POPLAR_ENGINE_OPTIONS`` and
    checked (:func:`check_options`); ``what`` (``Engine``, ``compileGraph``) names the
    caller in the errors."""
    if not isinstance(graph, Graph):
        raise EngineError(f"{what}: expected a Graph, got {type(graph).__name__}")
    merged = engine_options(options)
    check_options(merged)
    progs = [programs] if isinstance(programs, Program) else _program_list(programs, what)
    if not progs:
        raise EngineError(f"{what}: no programs given")
    return progs, merged


def _program_list(programs: Any, what: str) -> list[Program]:
    """``programs`` as a list of programs, or an EngineError naming the first that is
    not one (a string or a mapping would otherwise be taken apart into characters or
    keys, and fail deep inside the compilation)."""
    hint = (
        "hint: pass one program or a list of them, e.g. "
        f"{what}(graph, [Sequence(...), Execute(cs)])"
    )
    listed = None
    if not isinstance(programs, str | bytes | Mapping):
        with contextlib.suppress(TypeError):
            listed = list(programs)
    if listed is None:
        raise EngineError(
            f"{what}: programs is {_short(programs)} of type {type(programs).__name__}; "
            f"expected a Program or a list of Programs; {hint}"
        )
    for index, program in enumerate(listed):
        if not isinstance(program, Program):
            raise EngineError(
                f"{what}: programs[{index}] is {_short(program)} of type "
                f"{type(program).__name__}; expected a Program (Sequence, Execute, Copy, "
                f"...); {hint}"
            )
    return listed


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@bulk_construction
def compile_programs(
    state: Any, programs: list[Program], options: Mapping[str, str], timing: TimingChoice = None
) -> Compiled:
    """:func:`poplar_api.lowering.compile` of ``programs`` with the engine's host side
    (host streams of every replica) and timing model."""
    from poplar_api.logging_config import logger

    replicas = replication_factor(state)
    host = HostStreams(prefetch_option(options), replicas)
    model = timing_for(timing, state.target.config)
    wall, cpu = time.perf_counter(), time.process_time()
    with progress.activity("Graph compilation"):
        compiled = lowering.compile(state, programs, host, options, model, replicas)
    logger("ENGINE").info(
        "compiled %d vertices in %.3f s (%.3f CPU s)",
        len(state.vertices),
        time.perf_counter() - wall,
        time.process_time() - cpu,
    )
    return compiled


def compileGraph(
    graph: Graph,
    programs: Program | Sequence[Program],
    options: Mapping[str, Any] | None = None,
    progressCallback: Callable[[int, int], Any] | None = None,
    *,
    timing: TimingChoice = None,
) -> Executable:
    """Compile ``programs`` of ``graph`` once, for one engine or for a file.

    Parameters
    ----------
    graph
        The graph; the executable keeps using its state, so do not change the graph
        until the engines made from it are done (as for ``Engine(graph, programs)``).
    programs
        One program or a list; ``engine.run(i)`` runs the i-th.
    options
        Engine options, merged over ``POPLAR_ENGINE_OPTIONS``; those that shape the
        compilation (:data:`COMPILE_OPTIONS`) are fixed here.
    progressCallback
        Called as ``progressCallback(step, total)``: ``(0, 1)`` before compiling and
        ``(1, 1)`` when done.
    timing
        The timing model (a :class:`~ipusim.timing.TimingModel` subclass) memory
        placement asks and engines made from the executable run with.

    Returns
    -------
    Executable
        Pass it to ``Engine(executable, options)`` or save it with ``serialize``.

    Raises
    ------
    GraphValidationError, OutOfMemoryError, EngineError
        As ``Engine(graph, programs, options)``.
    """
    if progressCallback is not None and not callable(progressCallback):
        raise EngineError(
            f"compileGraph: progressCallback must be callable (step, total), got "
            f"{type(progressCallback).__name__} {progressCallback!r}"
        )
    progs, merged = compile_inputs(graph, programs, options, "compileGraph")
    if progressCallback is not None:
        progressCallback(0, 1)
    compiled = compile_programs(graph._state, progs, merged, timing)
    if progressCallback is not None:
        progressCallback(1, 1)
    return Executable(graph._state, progs, merged, compiled, timing)


def _stream_name(target: Any) -> str:
    if isinstance(target, str | os.PathLike):
        return os.fspath(target)
    return str(getattr(target, "name", repr(target)))


class Executable:
    """A compiled graph and its programs, as ``poplar::Executable``.

    Made by :func:`compileGraph` or :meth:`deserialize`; run it with
    ``Engine(executable, options)``.
    """

    def __init__(
        self,
        state: Any,
        programs: list[Program],
        options: Mapping[str, str],
        compiled: Compiled | None,
        timing: TimingChoice = None,
    ) -> None:
        self._state = state
        self._programs = list(programs)
        self._options = dict(options)
        self._compiled = compiled
        self._timing = timing

    # ---------------------------------------------------------------- queries
    @property
    def options(self) -> dict[str, str]:
        """The engine options it was compiled with."""
        return dict(self._options)

    def getNumPrograms(self) -> int:
        """Number of programs (``engine.run`` takes indices ``0 .. n-1``)."""
        return len(self._programs)

    def getTarget(self) -> Any:
        """The target the graph was built for (of one replica, for a replicated graph)."""
        return self._state.target

    def getReplicationFactor(self) -> int:
        """Replicas of the compiled graph (1 when it is not replicated)."""
        return replication_factor(self._state)

    def __repr__(self) -> str:
        t = self._state.target
        r = replication_factor(self._state)
        replicas = f", {r} replicas" if r > 1 else ""
        return (
            f"Executable({len(self._programs)} program(s), {len(self._state.variables)} "
            f"variables, {len(self._state.vertices)} vertices, {t.config.name}: "
            f"{t.getNumTiles()} tiles{replicas})"
        )

    # ---------------------------------------------------------------- engines
    def _take(
        self, options: Mapping[str, Any] | None, timing: TimingChoice = None
    ) -> tuple[Compiled, list[Program], dict[str, str], TimingChoice]:
        """The compiled state an engine takes (``Engine(executable, options)``): the
        compiled graph, programs, options (the executable's, with ``options`` over
        them) and timing model.

        The first engine takes the state compiled by ``compileGraph`` or
        ``deserialize``; a later one gets a fresh compilation of the same graph, since
        an engine's device memory image and host buffers are its own.
        """
        if options is not None and not isinstance(options, Mapping):
            raise EngineError(
                f"Engine(executable, options): options must be a mapping of engine options, "
                f"got {type(options).__name__}; hint: the programs were fixed by compileGraph"
            )
        if timing is not None and timing is not self._timing:
            raise EngineError(
                f"Engine(executable, timing={timing!r}): the executable was compiled with "
                f"timing={self._timing!r}; the timing model shapes memory placement; hint: "
                "pass it to compileGraph instead"
            )
        runtime = engine_options(options)
        for name, default in COMPILE_OPTIONS.items():
            if name not in runtime:
                continue
            fixed = self._options.get(name, default)
            given = runtime[name]
            same = (
                given.strip().lower() == fixed.strip().lower()
                if name == "debug.allowOutOfMemory"
                else given == fixed
            )
            if not same:
                raise EngineError(
                    f"Engine(executable, options): engine option {name!r} is {given!r} but "
                    f"the executable was compiled with {fixed!r}; it shapes the compilation; "
                    "hint: pass it to compileGraph instead"
                )
        merged = {**self._options, **runtime}
        check_options(merged)
        compiled = self._compiled
        self._compiled = None
        if compiled is None:
            compiled = compile_programs(self._state, self._programs, self._options, self._timing)
        return compiled, list(self._programs), merged, self._timing

    # -------------------------------------------------------------- files
    def serialize(self, out: str | os.PathLike[str] | IO[bytes]) -> None:
        """Write the executable to a file path or a binary stream.

        Raises
        ------
        ExecutableError
            A vertex class can be neither imported by name nor pickled by value (the
            message names the vertex type), or ``out`` is not a binary stream.
        """
        data = self._to_bytes(_stream_name(out))
        if isinstance(out, str | os.PathLike):
            with open(out, "wb") as fh:
                fh.write(data)
            return
        try:
            out.write(data)
        except TypeError:
            raise ExecutableError(
                f"Executable.serialize: cannot write to {_stream_name(out)}: it must be "
                "opened in binary mode ('wb')"
            ) from None

    def _to_bytes(self, where: str) -> bytes:
        buf = io.BytesIO()
        _Pickler(buf, where).dump(
            {"state": self._state, "programs": self._programs, "options": self._options}
        )
        payload = buf.getvalue()
        target = self._state.target
        header = {
            "format": FORMAT_VERSION,
            "ipusim": _ipusim_version(),
            "python": sys.version.split()[0],
            "config": target.config.name,
            "arch": target.config.arch,
            "targetType": target.targetType.value,
            "numTiles": target.getNumTiles(),
            "replicationFactor": replication_factor(self._state),
            "numPrograms": len(self._programs),
            "numVariables": len(self._state.variables),
            "numVertices": len(self._state.vertices),
            "vertexTypes": sorted(self._state.codelets),
            "options": self._options,
            "payloadBytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
        return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload

    @staticmethod
    def deserialize(src: str | os.PathLike[str] | IO[bytes]) -> Executable:
        """Load an executable written by :meth:`serialize` and compile it again.

        Raises
        ------
        ExecutableError
            The file is missing, not an executable file, of another format version,
            truncated or corrupt, or a vertex class it names cannot be found; every
            message names the file.
        """
        where = _stream_name(src)
        try:
            if isinstance(src, str | os.PathLike):
                with open(src, "rb") as fh:
                    data = fh.read()
            else:
                data = src.read()
        except OSError as exc:
            raise ExecutableError(
                f"Executable.deserialize: cannot read {where!r}: {exc.strerror or exc}"
            ) from exc
        if not isinstance(data, bytes):
            raise ExecutableError(
                f"Executable.deserialize: {where!r} must be opened in binary mode ('rb')"
            )
        header, payload = _split(data, where)
        try:
            content = _Unpickler(io.BytesIO(payload), where).load()
            state, programs, options = content["state"], content["programs"], content["options"]
        except ExecutableError:
            raise
        except Exception as exc:
            raise ExecutableError(
                f"Executable.deserialize: {where!r} has a valid header but its payload cannot "
                f"be read ({type(exc).__name__}: {exc}); hint: write it again with "
                f"Executable.serialize (file made by ipusim {header.get('ipusim')})"
            ) from exc
        compiled = compile_programs(state, programs, options)
        return Executable(state, programs, options, compiled)


def _split(data: bytes, where: str) -> tuple[dict[str, Any], bytes]:
    """Header and payload of an executable file's bytes, checked."""
    what = f"Executable.deserialize: {where!r}"
    if not data.startswith(MAGIC):
        raise ExecutableError(
            f"{what} is not an ipusim executable file (it starts with {data[:24]!r}, "
            f"expected {MAGIC!r}); hint: load files written by Executable.serialize"
        )
    end = data.find(b"\n", len(MAGIC))
    try:
        if end < 0:
            raise ValueError("no end of header line")
        header = json.loads(data[len(MAGIC) : end])
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except ValueError as exc:
        raise ExecutableError(
            f"{what} has a corrupt header ({exc}); hint: write it again with Executable.serialize"
        ) from None
    version = header.get("format")
    if version != FORMAT_VERSION:
        raise ExecutableError(
            f"{what} has format version {version!r}; this ipusim reads version "
            f"{FORMAT_VERSION}; hint: compile and serialize it again with this version"
        )
    payload = data[end + 1 :]
    size = header.get("payloadBytes")
    if len(payload) != size or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ExecutableError(
            f"{what} is truncated or corrupt: its payload has {len(payload)} bytes "
            f"(header says {size}) and does not match the header's SHA-256; hint: "
            "write it again with Executable.serialize"
        )
    return header, payload


def _ipusim_version() -> str:
    try:
        from importlib.metadata import version

        return version("ipusim")
    except Exception:  # pragma: no cover - not installed as a distribution
        return "unknown"


def _class_ref(cls: type, where: str, name: str) -> tuple[Any, ...]:
    """How a vertex class is stored: by module, by codelet file, or by value."""
    module, qual = cls.__module__, cls.__qualname__
    if module.startswith(_CODELET_FILE_MODULE):
        path = getattr(sys.modules.get(module), "__file__", None)
        if path:
            return ("file", path, qual)
    if module != "__main__" and "<locals>" not in qual:
        try:
            if _resolve(importlib.import_module(module), qual) is cls:
                return ("module", module, qual)
        except Exception:
            pass
    from numba import cloudpickle  # numba's own copy: always installed with numba

    try:
        return ("value", cloudpickle.dumps(cls))
    except Exception as exc:
        raise ExecutableError(
            f"Executable.serialize to {where!r}: vertex type {name!r} (class {qual} of "
            f"module {module}) can be neither imported by name nor pickled by value "
            f"({type(exc).__name__}: {exc}); hint: define the vertex class at module level"
        ) from exc


def _resolve(obj: Any, qual: str) -> Any:
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _pack_index(index: np.ndarray) -> tuple[Any, ...]:
    """A tensor's element ids, compactly: a range when they are evenly spaced (most views
    of a variable), else int32 when they fit."""
    flat = index.reshape(-1)
    n = flat.size
    if n == 0:
        return ("empty", index.shape)
    step = int(flat[1] - flat[0]) if n > 1 else 1
    start = int(flat[0])
    if np.array_equal(flat, start + step * np.arange(n, dtype=np.int64)):
        return ("range", start, step, index.shape)
    if int(flat.max()) < 2**31:
        return ("array", index.astype(np.int32))
    return ("array", index)


def _unpack_index(packed: tuple[Any, ...]) -> np.ndarray:
    """The int64 ids :func:`_pack_index` packed (read-only, as a tensor's are)."""
    kind = packed[0]
    if kind == "empty":
        index = np.zeros(packed[1], np.int64)
    elif kind == "range":
        _, start, step, shape = packed
        n = int(np.prod(shape, dtype=np.int64))
        index = (start + step * np.arange(n, dtype=np.int64)).reshape(shape)
    else:
        index = np.ascontiguousarray(packed[1], dtype=np.int64)
    index.flags.writeable = False
    return index


def _rebuild_tensor(
    graph: Any, element_type: Any, packed: tuple[Any, ...], name: str, root: str
) -> Tensor:
    if packed[0] == "range" and packed[2] == 1 and len(name) <= MAX_NAME_LENGTH:
        # consecutive ids: a block again, whose index array is made only when asked for
        t = Tensor._consecutive(graph, element_type, packed[1], tuple(packed[3]), name)
        t._root = root
        return t
    return Tensor._new(graph, element_type, _unpack_index(packed), name, root)


def _packed_tensor_ids(t: Tensor) -> tuple[Any, ...]:
    """:func:`_pack_index` of a tensor's ids, without making a block's index array."""
    if t._ix is None:  # consecutive ids never made into an array
        return ("range", t._start, 1, t._shape) if t.numElements() else ("empty", t._shape)
    return _pack_index(t._ix)


def _pack_vertices(table: VertexTable) -> tuple[Any, ...]:
    """A vertex table's pickled form with its connections' id arrays packed compactly;
    an array several vertices share is packed once (pickle keeps the one tuple)."""
    state = table.__getstate__()
    packed: dict[int, tuple[Any, ...]] = {}

    def pack(value: Any) -> Any:
        if not isinstance(value, np.ndarray):
            return value  # a range, or None for an unconnected vector
        found = packed.get(id(value))
        if found is None:
            found = packed[id(value)] = ("ids", _pack_index(value))
        return found

    state["extra"] = {
        vid: {k: [pack(x) for x in v] if isinstance(v, list) else pack(v) for k, v in f.items()}
        for vid, f in state["extra"].items()
    }
    state["list_blocks"] = [
        (b.first, b.n, b.moved, {k: (*v[:3], pack(v[3])) for k, v in b.fields.items()})
        for b in state["list_blocks"]
    ]
    return (_rebuild_vertices, (state,))


def _rebuild_vertices(state: dict[str, Any]) -> VertexTable:
    """The vertex table :func:`_pack_vertices` packed (a shared array is shared again)."""
    arrays: dict[int, np.ndarray] = {}

    def unpack(value: Any) -> Any:
        if type(value) is not tuple:
            return value
        found = arrays.get(id(value))
        if found is None:
            found = arrays[id(value)] = _unpack_index(value[1])
        return found

    state["extra"] = {
        vid: {k: [unpack(x) for x in v] if isinstance(v, list) else unpack(v) for k, v in f.items()}
        for vid, f in state["extra"].items()
    }
    blocks = []
    for first, n, moved, fields in state["list_blocks"]:
        block = ListBlock(first, n, {k: (*v[:3], unpack(v[3])) for k, v in fields.items()})
        block.moved = moved
        blocks.append(block)
    state["list_blocks"] = blocks
    table = VertexTable.__new__(VertexTable)
    table.__setstate__(state)
    return table


class _Pickler(pickle.Pickler):
    """Pickles a graph state, storing vertex types as references to their classes and
    tensors by their compact element ids."""

    def __init__(self, file: IO[bytes], where: str) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._where = where

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Tensor:
            return (
                _rebuild_tensor,
                (obj._graph, obj._type, _packed_tensor_ids(obj), obj._name, obj._root),
            )
        if type(obj) is VertexTable:
            return _pack_vertices(obj)
        return NotImplemented

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, VertexType):
            return ("vertex", obj.name, _class_ref(obj.cls, self._where, obj.name))
        return None


class _Unpickler(pickle.Unpickler):
    """Rebuilds vertex types from their classes (compiling their kernels)."""

    def __init__(self, file: IO[bytes], where: str) -> None:
        super().__init__(file)
        self._where = where

    def persistent_load(self, pid: Any) -> Any:
        tag, name, ref = pid
        if tag != "vertex":
            raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")
        kind = ref[0]
        what = f"Executable.deserialize: {self._where!r} uses vertex type {name!r}"
        try:
            if kind == "module":
                cls = _resolve(importlib.import_module(ref[1]), ref[2])
            elif kind == "file":
                from poplar_api.codelet import load_codelet_file

                cls = _resolve(load_codelet_file(ref[1]), ref[2])
            elif kind == "value":
                cls = pickle.loads(ref[1])
            else:
                raise pickle.UnpicklingError(f"unknown class reference {kind!r}")
        except (ImportError, AttributeError, PoplarError) as exc:
            if kind == "value":  # pickled by value: its class refers to a lost name
                place = "a class stored by value"
            else:
                where = f"codelet file {ref[1]!r}" if kind == "file" else f"module {ref[1]!r}"
                place = f"class {ref[2]} of {where}"
            raise ExecutableError(
                f"{what}, {place}, which cannot be loaded "
                f"({type(exc).__name__}: {exc}); hint: make the module importable (sys.path) "
                "or the codelet file present where it was when the executable was saved"
            ) from exc
        return vertex_type(cls)


__all__ = ["COMPILE_OPTIONS", "Executable", "ExecutableError", "compileGraph"]
