"""Programs: the control program of a graph, as Poplar's ``poplar::program`` classes.

Programs are plain descriptions; the Engine lowers them to the machine's IR.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from numbers import Integral
from typing import Any

from poplar_api.errors import GraphError

_next_id = [0]


class Program:
    """Base class of every program; each instance gets a unique ``id``."""

    def __init__(self, debugName: str = "") -> None:
        self.id = _next_id[0]
        _next_id[0] += 1
        self.debugName = debugName

    def children(self) -> list[Program]:
        """Programs nested in this one."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}#{self.id}"


def _check_program(value: Any, what: str) -> Program:
    if not isinstance(value, Program):
        raise GraphError(
            f"{what}: expected a program (Sequence, Execute, Copy, ...), got "
            f"{type(value).__name__}; hint: wrap compute sets in Execute(cs)"
        )
    return value


class Sequence(Program):
    """Run programs one after another: ``Sequence(p1, p2)`` or ``Sequence([p1, p2])``."""

    def __init__(self, *programs: Program | Iterable[Program], debugName: str = "") -> None:
        super().__init__(debugName)
        self.programs: list[Program] = []
        for p in programs:
            if isinstance(p, Program):
                self.add(p)
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
    """Run a compute set."""

    def __init__(self, cs: Any, debugName: str = "") -> None:
        super().__init__(debugName)
        from poplar_api.graph import ComputeSet

        if not isinstance(cs, ComputeSet):
            raise GraphError(
                f"Execute: expected a ComputeSet from graph.addComputeSet, got {type(cs).__name__}"
            )
        self.computeSet = cs


class Copy(Program):
    """Copy tensor → tensor (through views), stream → tensor or tensor → stream."""

    def __init__(self, src: Any, dst: Any, dontOutline: bool = False, debugName: str = "") -> None:
        super().__init__(debugName)
        self.src = src
        self.dst = dst


class Repeat(Program):
    """Run ``body`` ``count`` times."""

    def __init__(self, count: int, body: Program, debugName: str = "") -> None:
        super().__init__(debugName)
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 0:
            raise GraphError(f"Repeat: count {count!r} must be an int >= 0")
        self.count = int(count)
        self.body = _check_program(body, "Repeat body")

    def children(self) -> list[Program]:
        return [self.body]


class RepeatWhileTrue(Program):
    """Run ``cond``, then ``body`` while the scalar ``predicate`` is non-zero."""

    whileTrue = True

    def __init__(self, cond: Program, predicate: Any, body: Program, debugName: str = "") -> None:
        super().__init__(debugName)
        self.cond = _check_program(cond, f"{type(self).__name__} condition")
        self.predicate = predicate
        self.body = _check_program(body, f"{type(self).__name__} body")

    def children(self) -> list[Program]:
        return [self.cond, self.body]


class RepeatWhileFalse(RepeatWhileTrue):
    """Run ``cond``, then ``body`` while the scalar ``predicate`` is zero."""

    whileTrue = False


class If(Program):
    """Run ``trueBody`` when the scalar ``predicate`` is non-zero, else ``falseBody``."""

    def __init__(
        self,
        predicate: Any,
        trueBody: Program,
        falseBody: Program | None = None,
        debugName: str = "",
    ) -> None:
        super().__init__(debugName)
        self.predicate = predicate
        self.trueBody = _check_program(trueBody, "If true body")
        self.falseBody = _check_program(falseBody or Sequence(), "If false body")

    def children(self) -> list[Program]:
        return [self.trueBody, self.falseBody]


class Switch(Program):
    """Run the case whose value equals the scalar ``control`` tensor, else the default."""

    def __init__(
        self,
        control: Any,
        cases: Iterable[tuple[int, Program]] = (),
        defaultCaseBody: Program | None = None,
        debugName: str = "",
    ) -> None:
        super().__init__(debugName)
        self.control = control
        self.cases: list[tuple[int, Program]] = []
        self.defaultCaseBody = _check_program(defaultCaseBody or Sequence(), "Switch default")
        for value, body in cases:
            self.add(value, body)

    def add(self, value: int, body: Program) -> Switch:
        """Add a case; a value may appear once."""
        if any(v == value for v, _ in self.cases):
            raise GraphError(f"Switch: case value {value} is already present")
        self.cases.append((int(value), _check_program(body, f"Switch case {value}")))
        return self

    def children(self) -> list[Program]:
        return [b for _, b in self.cases] + [self.defaultCaseBody]


class PrintTensor(Program):
    """Print a tensor at run time: ``PrintTensor(tensor)`` or ``PrintTensor(title, tensor)``."""

    def __init__(self, titleOrTensor: Any, tensor: Any = None, debugName: str = "") -> None:
        super().__init__(debugName)
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

    def __init__(self, syncType: SyncType = SyncType.INTERNAL, debugName: str = "") -> None:
        super().__init__(debugName)
        self.syncType = SyncType(syncType)


class Call(Program):
    """Run a function made by ``graph.addFunction``."""

    def __init__(self, function: Any, debugName: str = "") -> None:
        super().__init__(debugName)
        from poplar_api.graph import Function

        if not isinstance(function, Function):
            raise GraphError(
                f"Call: expected a Function from graph.addFunction, got {type(function).__name__}"
            )
        self.function = function


class WriteUndef(Program):
    """Mark a tensor's contents as undefined from here on (ends its liveness)."""

    def __init__(self, tensor: Any, debugName: str = "") -> None:
        super().__init__(debugName)
        self.tensor = tensor


__all__ = [
    "Call",
    "Copy",
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
