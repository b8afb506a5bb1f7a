"""Programs: the control program of a graph, as Poplar's ``poplar::program`` classes.

Programs are plain descriptions; the Engine lowers them to the machine's IR. Names,
arguments and overloads follow Poplar's C++ API; where C++ picks an overload by
argument type, the constructors here do the same with the Python types (a ``str``
is the debug context, a ``bool`` a flag, a ``Tensor`` a tensor argument).

What is checked where: the arguments themselves (an overload that does not exist,
a Switch case value given twice or not an int, a Block with an empty name) raise
:class:`~poplar_api.errors.GraphError` when the program is made. Everything about the
tensors, compute sets, functions and streams a program uses (types, shapes, a copy
into a constant or onto its own source, a Switch control that is not a scalar
integral tensor, anything of another graph) is checked when the Engine compiles
it, and every problem is listed at once in a ``GraphValidationError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from numbers import Integral
from typing import Any

import numpy as np

from poplar_api.errors import GraphError

_next_id = [0]

#: Poplar's ``DebugContext``: here the debug name (a ``str``).
DebugContext = str

_INT32 = (-(2**31), 2**31 - 1)


def _debug_name(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise GraphError(
            f"{what}: debug context {value!r} ({type(value).__name__}) must be a str (the "
            "debug name)"
        )
    return value


class Program:
    """Base class of every program; each instance gets a unique ``id``."""

    def __init__(self, debugContext: DebugContext = "") -> None:
        self.id = _next_id[0]
        _next_id[0] += 1
        self.debugName = _debug_name(debugContext, type(self).__name__)

    def children(self) -> list[Program]:
        """Programs nested in this one."""
        return []

    def __repr__(self) -> str:
        name = f" '{self.debugName}'" if self.debugName else ""
        return f"{type(self).__name__}#{self.id}{name}"


def _check_program(value: Any, what: str) -> Program:
    if not isinstance(value, Program):
        raise GraphError(
            f"{what}: expected a program (Sequence, Execute, Copy, ...), got "
            f"{type(value).__name__}; hint: wrap compute sets in Execute(cs)"
        )
    return value


def _made_by_graph(value: Any, kind: str, maker: str, what: str) -> Any:
    """``value`` when it is a graph's ``kind`` (``"ComputeSet"``, ``"Function"``), the
    object ``graph.<maker>`` returns; otherwise a GraphError naming ``what``."""
    from poplar_api import graph

    if not isinstance(value, getattr(graph, kind)):
        raise GraphError(
            f"{what}: expected a {kind} from graph.{maker}, got {type(value).__name__}"
        )
    return value


def _tensor_type():
    from poplar_api.tensor import Tensor

    return Tensor


def _stream_type():
    from poplar_api.graph import DataStream

    return DataStream


class Sequence(Program):
    """Run programs one after another.

    ``Sequence()``, ``Sequence(p1, p2)``, ``Sequence([p1, p2])`` and, as Poplar's
    ``Sequence({p1, p2}, debugContext)``, ``Sequence([p1, p2], "name")``.
    """

    def __init__(
        self, *programs: Program | Iterable[Program] | str, debugContext: DebugContext = ""
    ) -> None:
        names = [p for p in programs if isinstance(p, str)]
        if len(names) > 1:
            raise GraphError(f"Sequence: more than one debug name given ({names!r})")
        super().__init__(names[0] if names else debugContext)
        self.programs: list[Program] = []
        for p in programs:
            if isinstance(p, str):
                continue
            if isinstance(p, Program) or not hasattr(p, "__iter__"):
                self.programs.append(_check_program(p, "Sequence"))
            else:
                for q in p:
                    self.add(q)

    def add(self, program: Program) -> Sequence:
        """Append a program; returns self so calls can be chained."""
        self.programs.append(_check_program(program, "Sequence.add"))
        return self

    def children(self) -> list[Program]:
        return list(self.programs)


class Execute(Program):
    """Run a compute set: ``Execute(cs, debugContext)``."""

    def __init__(self, cs: Any, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        self.computeSet = _made_by_graph(cs, "ComputeSet", "addComputeSet", "Execute")


class Block(Program):
    """A program scoping another, for lightweight profiling: ``Block(program, name)``.

    Every execution of a block whose name matches the engine option
    ``profiler.blocks.filter`` (a regular expression that must match the whole name)
    is recorded with the clock of each tile it ran on at its start and end; read them
    with ``engine.getBlockRecords()`` or in the execution profile's
    ``lightweightProfile``. A block the filter does not select runs its program
    unchanged and records nothing, as in Poplar.

    Raises
    ------
    GraphError
        ``program`` is not a program, or ``debugContext`` (the block's name) is empty.
    """

    def __init__(self, program: Program, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        self.program = _check_program(program, "Block")
        if not self.debugName.strip():
            raise GraphError(
                f"Block around {program!r}: the block name is {self.debugName!r}; a block "
                "needs a non-empty name, which profiler.blocks.filter selects and the block "
                "records carry; hint: Block(program, 'stage1')"
            )

    def children(self) -> list[Program]:
        return [self.program]


class Copy(Program):
    """Copy data between tensors, or between a data stream and a tensor.

    Overloads (Poplar's, picked by argument type):

    * ``Copy(src: Tensor, dst: Tensor, dontOutline=False, debugContext="")``: the
      element types and numbers of elements must match (shapes may differ: elements
      are copied in row-major order, as in Poplar); ``dst`` may not be (part of) a
      constant nor share elements with ``src`` (unless it is the very same view).
      ``dontOutline`` is accepted and has no effect: the simulator never outlines
      (shares the code of) copies.
    * ``Copy(stream: DataStream, dst: Tensor, optimiseMemory=False, debugContext="")``
      and ``Copy(src: Tensor, stream: DataStream, optimiseMemory=False,
      debugContext="")``: a host-to-device stream into a tensor, a tensor into a
      device-to-host stream; the stream's element type and size must be the tensor's.
    * ``Copy(stream: DataStream, dst: Tensor, expectedSize: Tensor,
      rearrangeOnHost=False, options=None, debugContext="")``: at run time only the
      first ``expectedSize`` elements (a scalar integral tensor) are taken from the
      stream into ``dst``'s first elements. The copy is costed for the whole of
      ``dst`` (the transfer is planned for the largest size).

    * ``Copy(src: Tensor, buffer: RemoteBuffer, debugContext="")``,
      ``Copy(src: Tensor, buffer: RemoteBuffer, offset: Tensor, debugContext="")`` and
      ``Copy(buffer: RemoteBuffer, dst: Tensor[, offset: Tensor], debugContext="")``:
      write rows of a remote buffer (``graph.addRemoteBuffer``) or read them; ``offset``
      (an integral tensor, read on the device when the copy runs) holds one row index
      per row of the tensor, which has ``offset.numElements() * buffer.numElements()``
      elements; without ``offset`` the copy moves row 0.

    A copy whose tensor is a non-replicated view (``getNonReplicatedTensor``) of a
    replicated graph is made as a :class:`NonReplicatedCopy`: it moves the elements of
    every replica at once (a stream of the non-replicated top-level graph, or another
    such view).
    """

    def __new__(cls, src: Any = None, dst: Any = None, *args: Any, **kwargs: Any) -> Copy:
        if cls is Copy and (_nonreplicated(src) or _nonreplicated(dst)):
            return object.__new__(NonReplicatedCopy)
        return object.__new__(cls)

    def __init__(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        tensor, stream = _tensor_type(), _stream_type()
        self.src, self.dst = src, dst
        self.expectedSize: Any = None
        self.dontOutline = False
        self.optimiseMemory = False
        self.rearrangeOnHost = False
        self.options: dict[str, str] = {}
        if isinstance(src, stream) and isinstance(dst, tensor):
            self.kind = "stream_to_tensor"
        elif isinstance(src, tensor) and isinstance(dst, stream):
            self.kind = "tensor_to_stream"
        elif isinstance(src, tensor) and isinstance(dst, tensor):
            self.kind = "tensor_to_tensor"
        elif isinstance(src, tensor) and isinstance(dst, _remote_type()):
            self.kind = "tensor_to_remote"
        elif isinstance(src, _remote_type()) and isinstance(dst, tensor):
            self.kind = "remote_to_tensor"
        else:
            raise GraphError(
                f"Copy from {_describe(src)} to {_describe(dst)}: no such copy; Copy takes "
                "(Tensor, Tensor), (DataStream, Tensor), (Tensor, DataStream), "
                "(Tensor, RemoteBuffer[, offset]) or (RemoteBuffer, Tensor[, offset])"
            )
        self.offset: Any = None
        if self.kind in ("tensor_to_remote", "remote_to_tensor"):
            super().__init__(self._parse_remote(args, kwargs))
            return
        super().__init__(self._parse(args, kwargs))

    def _parse_remote(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Arguments of a remote-buffer copy: an optional offset tensor and debug name."""
        tensor = _tensor_type()
        unknown = sorted(set(kwargs) - {"offset", "debugContext"})
        if unknown:
            raise GraphError(
                f"Copy from {_describe(self.src)} to {_describe(self.dst)}: unknown "
                f"argument(s) {unknown}; known: ['debugContext', 'offset']"
            )
        debug = kwargs.get("debugContext", "")
        self.offset = kwargs.get("offset")
        for a in args:
            if isinstance(a, str):
                debug = a
            elif isinstance(a, tensor) and self.offset is None:
                self.offset = a
            else:
                raise GraphError(
                    f"Copy from {_describe(self.src)} to {_describe(self.dst)}: argument "
                    f"{a!r} ({type(a).__name__}) fits no Copy overload; a remote-buffer copy "
                    "takes an offset (Tensor) and a debugContext (str)"
                )
        if self.offset is not None and not isinstance(self.offset, tensor):
            raise GraphError(
                f"Copy from {_describe(self.src)} to {_describe(self.dst)}: offset "
                f"{self.offset!r} ({type(self.offset).__name__}) must be a Tensor of row "
                "indices"
            )
        return debug

    def _parse(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Sort the optional arguments of the overload by type; returns the debug name."""
        tensor = _tensor_type()
        flag = {
            "tensor_to_tensor": "dontOutline",
            "stream_to_tensor": "optimiseMemory",
            "tensor_to_stream": "optimiseMemory",
        }[self.kind]
        known = {flag, "debugContext", "expectedSize", "rearrangeOnHost", "options"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise GraphError(
                f"Copy ({self.kind.replace('_', ' ')}): unknown argument(s) {unknown}; known: "
                f"{sorted(known)}"
            )
        debug = kwargs.get("debugContext", "")
        flags: list[bool] = []
        for a in args:
            if isinstance(a, str):
                debug = a
            elif isinstance(a, bool | np.bool_):
                flags.append(bool(a))
            elif isinstance(a, tensor) and self.kind == "stream_to_tensor":
                self.expectedSize = a
            elif isinstance(a, Mapping):
                self.options = {str(k): str(v) for k, v in a.items()}
            else:
                raise GraphError(
                    f"Copy from {_describe(self.src)} to {_describe(self.dst)}: argument "
                    f"{a!r} ({type(a).__name__}) fits no Copy overload; the optional arguments "
                    f"are {flag} (bool), debugContext (str)"
                    + (
                        " and, from a stream, expectedSize (Tensor), rearrangeOnHost "
                        "(bool), options (dict)"
                        if self.kind == "stream_to_tensor"
                        else ""
                    )
                )
        if "expectedSize" in kwargs and self.kind == "stream_to_tensor":
            self.expectedSize = kwargs["expectedSize"]
        if self.expectedSize is not None:
            # Poplar's size overload: (stream, dst, expectedSize, rearrangeOnHost, ...)
            self.rearrangeOnHost = bool(kwargs.get("rearrangeOnHost", flags[0] if flags else 0))
        else:
            setattr(self, flag, bool(kwargs.get(flag, flags[0] if flags else False)))
        if "options" in kwargs:
            self.options = {str(k): str(v) for k, v in dict(kwargs["options"] or {}).items()}
        return debug


class NonReplicatedCopy(Copy):
    """A :class:`Copy` of a non-replicated view (``getNonReplicatedTensor``): between
    such a view and a stream of the non-replicated top-level graph, or between two
    views. It addresses the elements of every replica (row ``k`` of the view is replica
    ``k``'s copy) and is lowered once for all replicas.
    """


def _nonreplicated(value: Any) -> bool:
    """Whether ``value`` is a tensor of a non-replicated view of a replicated graph."""
    if not isinstance(value, _tensor_type()):
        return False
    from poplar_api.graph import NonReplicatedView

    return isinstance(value.graph, NonReplicatedView)


def _remote_type():
    from poplar_api.remote import RemoteBuffer

    return RemoteBuffer


def _describe(value: Any) -> str:
    tensor, stream = _tensor_type(), _stream_type()
    if isinstance(value, tensor):
        return f"tensor '{value.name}'"
    if isinstance(value, stream):
        return f"stream '{value.handle}'"
    if isinstance(value, _remote_type()):
        return f"remote buffer '{value.handle()}'"
    return f"{value!r} ({type(value).__name__})"


class Repeat(Program):
    """Run ``body`` ``count`` times: ``Repeat(count, body, debugContext)``."""

    def __init__(self, count: int, body: Program, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 0:
            raise GraphError(f"Repeat: count {count!r} must be an int >= 0")
        self.count = int(count)
        self.body = _check_program(body, "Repeat body")

    def children(self) -> list[Program]:
        return [self.body]


class RepeatWhileTrue(Program):
    """Run ``cond``, then ``body`` while the scalar ``predicate`` is non-zero."""

    whileTrue = True

    def __init__(
        self, cond: Program, predicate: Any, body: Program, debugContext: DebugContext = ""
    ) -> None:
        super().__init__(debugContext)
        self.cond = _check_program(cond, f"{type(self).__name__} condition")
        self.predicate = predicate
        self.body = _check_program(body, f"{type(self).__name__} body")

    def children(self) -> list[Program]:
        return [self.cond, self.body]


class RepeatWhileFalse(RepeatWhileTrue):
    """Run ``cond``, then ``body`` while the scalar ``predicate`` is zero."""

    whileTrue = False


class If(Program):
    """Run ``trueBody`` when the scalar ``predicate`` is non-zero, else ``falseBody``.

    ``If(predicate, trueBody, debugContext)`` and
    ``If(predicate, trueBody, falseBody, debugContext)``.
    """

    def __init__(
        self,
        predicate: Any,
        trueBody: Program,
        falseBody: Program | DebugContext | None = None,
        debugContext: DebugContext = "",
    ) -> None:
        if isinstance(falseBody, str):
            falseBody, debugContext = None, falseBody
        super().__init__(debugContext)
        self.predicate = predicate
        self.trueBody = _check_program(trueBody, "If true body")
        self.falseBody = _check_program(falseBody or Sequence(), "If false body")

    def children(self) -> list[Program]:
        return [self.trueBody, self.falseBody]


class Switch(Program):
    """Run the case whose value equals the scalar integral ``control``, else the default.

    Overloads, as Poplar's:

    * ``Switch(control, debugContext="")`` and ``Switch(control, defaultCaseBody,
      debugContext="")``, with cases added by ``.add(value, body)``;
    * ``Switch(control, cases, debugContext="")`` and ``Switch(control, cases,
      defaultCaseBody, debugContext="")``, where ``cases`` is a list of
      ``(value, program)`` pairs or a ``{value: program}`` dict.

    Case values are 32-bit ints, each at most once. Without a default, a value with
    no case runs nothing. :meth:`switchWithBoundsChecking` and
    :meth:`switchWithUnreachableDefault` make a Switch whose run stops with an
    ``EngineError`` naming the value when no case matches.

    Raises
    ------
    GraphError
        A case value that is not an int, out of the int32 range or given twice, or a
        case or default that is not a program.

    A ``control`` that is not a scalar tensor of an integral type of the engine's graph
    is reported when the Engine compiles.
    """

    def __init__(self, control: Any, *args: Any, **kwargs: Any) -> None:
        cases: Any = kwargs.pop("cases", ())
        default: Any = kwargs.pop("defaultCaseBody", None)
        debug: Any = kwargs.pop("debugContext", "")
        if kwargs:
            raise GraphError(
                f"Switch: unknown argument(s) {sorted(kwargs)}; known: cases, "
                "defaultCaseBody, debugContext"
            )
        for a in args:
            if isinstance(a, str):
                debug = a
            elif isinstance(a, Program):
                default = a
            elif isinstance(a, Mapping | list | tuple):
                cases = a
            else:
                raise GraphError(
                    f"Switch: argument {a!r} ({type(a).__name__}) fits no Switch overload; "
                    "expected cases (list of (value, program) or dict), a default program or "
                    "a debug name"
                )
        super().__init__(debug)
        self.control = control
        self.cases: list[tuple[int, Program]] = []
        self.defaultCaseBody = _check_program(default or Sequence(), "Switch default")
        #: None, or "bounds"/"unreachable": no matching case stops the run with an error
        self.noCase: str | None = None
        for value, body in cases.items() if isinstance(cases, Mapping) else cases:
            self.add(value, body)

    def add(self, value: int, body: Program) -> Switch:
        """Add a case; a value may appear once. Returns self so calls can be chained."""
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise GraphError(
                f"Switch{self._label()}: case value {value!r} ({type(value).__name__}) must "
                "be an int"
            )
        if not _INT32[0] <= int(value) <= _INT32[1]:
            raise GraphError(
                f"Switch{self._label()}: case value {int(value)} is outside the int32 range "
                f"[{_INT32[0]}, {_INT32[1]}]"
            )
        if any(v == int(value) for v, _ in self.cases):
            raise GraphError(
                f"Switch{self._label()}: case value {int(value)} is already present (cases: "
                f"{[v for v, _ in self.cases]}); each value may have one case; hint: put both "
                "programs in one Sequence"
            )
        self.cases.append((int(value), _check_program(body, f"Switch case {value}")))
        return self

    def _label(self) -> str:
        ctl = getattr(self.control, "name", None)
        return f" on '{ctl}'" if ctl else ""

    @classmethod
    def switchWithBoundsChecking(
        cls,
        control: Any,
        cases: Iterable[tuple[int, Program]] | Mapping[int, Program],
        debugContext: DebugContext = "",
    ) -> Switch:
        """A Switch whose run stops with an error when ``control`` matches no case."""
        sw = cls(control, list(cases.items()) if isinstance(cases, Mapping) else list(cases))
        sw.debugName = _debug_name(debugContext, "Switch")
        sw.noCase = "bounds"
        return sw

    @classmethod
    def switchWithUnreachableDefault(cls, control: Any, debugContext: DebugContext = "") -> Switch:
        """A Switch (cases added with :meth:`add`) whose default must never run; the
        simulator stops the run with an error when it would."""
        sw = cls(control, debugContext)
        sw.noCase = "unreachable"
        return sw

    def children(self) -> list[Program]:
        return [b for _, b in self.cases] + [self.defaultCaseBody]


class PrintTensor(Program):
    """Print a tensor at run time: ``PrintTensor(tensor)`` or ``PrintTensor(title, tensor)``."""

    def __init__(
        self, titleOrTensor: Any, tensor: Any = None, debugContext: DebugContext = ""
    ) -> None:
        super().__init__(debugContext)
        if tensor is None:
            self.title, self.tensor = None, titleOrTensor
        else:
            self.title, self.tensor = str(titleOrTensor), tensor


class SyncType(str, Enum):
    """Scope of an explicit sync."""

    INTERNAL = "internal"
    EXTERNAL = "external"
    GLOBAL = "global"


class Sync(Program):
    """An explicit sync of the given scope."""

    def __init__(
        self, syncType: SyncType = SyncType.INTERNAL, debugContext: DebugContext = ""
    ) -> None:
        super().__init__(debugContext)
        self.syncType = SyncType(syncType)


class Call(Program):
    """Run a function made by ``graph.addFunction``: ``Call(function, debugContext)``.

    The function's program is compiled once however often it is called (its code is
    stored once); every call runs, and is costed, in full.
    """

    def __init__(self, function: Any, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        self.function = _made_by_graph(function, "Function", "addFunction", "Call")


def _message(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise GraphError(
            f"{what}: message {value!r} ({type(value).__name__}) must be a str; hint: "
            f"{what}('what went wrong')"
        )
    return value


class Abort(Program):
    """Stop the run with an error: ``Abort()`` or ``Abort(message, debugContext)``.

    As Poplar's ``Abort``: the message is reported to the host and ``Engine.run``
    raises :class:`~poplar_api.errors.ApplicationRuntimeError` carrying the message
    and, on an IPU Model, the trace of the run until then. Python has one overload:
    the first argument is the message (Poplar's ``Abort(debugContext)`` is
    ``Abort(debugContext=...)``).

    Timing: one internal sync (the tiles agree to stop), in which the run ends.
    """

    def __init__(self, message: str = "", debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        self.message = _message(message, "Abort")


class AbortOnCondition(Program):
    """Stop the run with an error when the scalar ``predicate`` is non-zero:
    ``AbortOnCondition(predicate, message="", debugContext="")``.

    The predicate is read as ``If`` reads its predicate (after an internal sync; any
    element type, non-zero is true); a false predicate lets the run go on. A true one
    stops it as :class:`Abort` does. Timing: the internal sync of the predicate, and
    when it is true one more internal sync in which the run ends.

    The predicate must be a one-element tensor of the engine's graph; that is checked
    when the Engine compiles.
    """

    def __init__(self, predicate: Any, message: str = "", debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        if not isinstance(predicate, _tensor_type()):
            raise GraphError(
                f"AbortOnCondition: predicate {predicate!r} ({type(predicate).__name__}) "
                "must be a Tensor (a scalar); hint: AbortOnCondition(flag, 'message')"
            )
        self.predicate = predicate
        self.message = _message(message, "AbortOnCondition")


class ErrorProgram(Program):
    """Print a message and a debug tensor, then stop the run with an error:
    ``ErrorProgram(message, debugTensor, debugContext="")``.

    As Poplar's ``ErrorProgram``: the host prints ``message`` and then
    ``debugTensor`` as :class:`PrintTensor` does, and ``Engine.run`` raises
    :class:`~poplar_api.errors.ApplicationRuntimeError` with the message. Timing: a
    :class:`PrintTensor` of ``debugTensor`` (host sync and device-to-host transfer),
    after which the run ends. Put it in an ``If`` to stop on a condition.
    """

    def __init__(self, message: str, debugTensor: Any, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        self.message = _message(message, "ErrorProgram")
        if not isinstance(debugTensor, _tensor_type()):
            raise GraphError(
                f"ErrorProgram: debugTensor {debugTensor!r} ({type(debugTensor).__name__}) "
                "must be a Tensor, printed after the message"
            )
        self.debugTensor = debugTensor


class AssumeEqualAcrossReplicas(Program):
    """Tell the compiler a tensor has the same value in every replica:
    ``AssumeEqualAcrossReplicas(tensor, debugContext="")``.

    Poplar uses it when checking replicated control flow for divergence. ipusim checks
    divergence when the program runs (every control value is compared across
    replicas), so it is accepted, checked (a tensor of the engine's graph) and changes
    nothing: no step, no cost.
    """

    def __init__(self, tensor: Any, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        if not isinstance(tensor, _tensor_type()):
            raise GraphError(
                f"AssumeEqualAcrossReplicas: expected a Tensor, got {type(tensor).__name__}"
            )
        self.tensor = tensor


class CrossReplicaCopy(Program):
    """Copy ``src`` of each replica to ``dst`` of another:
    ``CrossReplicaCopy(src, dst, replicaMap, debugContext="")``.

    ``replicaMap`` maps a source replica to its destination replica: ``dst`` of
    replica ``replicaMap[k]`` receives ``src`` of replica ``k`` (read before any is
    written, so ``{0: 1, 1: 0}`` swaps). ``src`` and ``dst`` are tensors of a
    replicated graph with the same element type and number of elements; replicas
    that are no destination keep their ``dst``. It is lowered to an external sync and
    one global exchange between the replicas' IPUs.

    Raises
    ------
    GraphError
        ``src`` or ``dst`` is not a tensor, or ``replicaMap`` is not a mapping of ints
        to ints. A replica outside ``[0, replicationFactor)``, a destination given
        twice, mismatched tensors or a graph that is not replicated are reported by
        the Engine (a ``GraphValidationError``).
    """

    def __init__(
        self, src: Any, dst: Any, replicaMap: Mapping[int, int], debugContext: DebugContext = ""
    ) -> None:
        super().__init__(debugContext)
        for what, t in (("src", src), ("dst", dst)):
            if not isinstance(t, _tensor_type()):
                raise GraphError(f"CrossReplicaCopy: {what} must be a Tensor, got {t!r}")
        if not isinstance(replicaMap, Mapping) or not all(
            isinstance(k, Integral)
            and isinstance(v, Integral)
            and not isinstance(k, bool)
            and not isinstance(v, bool)
            for k, v in replicaMap.items()
        ):
            raise GraphError(
                f"CrossReplicaCopy from '{src.name}' to '{dst.name}': replicaMap "
                f"{replicaMap!r} must map source replica (int) to destination replica (int), "
                "e.g. {0: 1, 1: 0}"
            )
        self.src, self.dst = src, dst
        self.replicaMap = {int(k): int(v) for k, v in replicaMap.items()}


class WriteUndef(Program):
    """Mark a tensor's contents as undefined from here on: ``WriteUndef(tensor)``.

    It costs nothing at run time. For memory, it ends the live range of the variables
    the tensor covers in full: a variable written-undef and written again later has
    two live ranges, and other variables may use its memory in between.
    """

    def __init__(self, tensor: Any, debugContext: DebugContext = "") -> None:
        super().__init__(debugContext)
        if not isinstance(tensor, _tensor_type()):
            raise GraphError(f"WriteUndef: expected a Tensor, got {type(tensor).__name__}")
        self.tensor = tensor


__all__ = [
    "Abort",
    "AbortOnCondition",
    "AssumeEqualAcrossReplicas",
    "Block",
    "Call",
    "Copy",
    "CrossReplicaCopy",
    "DebugContext",
    "ErrorProgram",
    "Execute",
    "If",
    "PrintTensor",
    "Program",
    "Repeat",
    "RepeatWhileFalse",
    "RepeatWhileTrue",
    "Sequence",
    "Switch",
    "Sync",
    "SyncType",
    "WriteUndef",
]
