"""The data-plane protocol: how a caller gives a machine program its values.

The machine models time only. Whoever lowered the program (``poplar_api.Engine``, a
test, a script) supplies the functional side through this protocol: it applies the
effect of each step when the step runs, answers the predicates of control flow and
serves host streams (stream copies are steps with effects).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ipusim.errors import IpusimError


@runtime_checkable
class DataPlane(Protocol):
    """Functional side of a run.

    Effects are applied once per executed step, in program order; predicates are
    asked once per control decision, after every earlier effect was applied.
    """

    def apply(self, effect: int) -> None:
        """Apply functional effect ``effect`` (run a compute set, move data, ...)."""

    def predicate(self, predicate: int) -> int:
        """Value of predicate ``predicate`` now (non-zero is true; Switch uses the value)."""

    # Optional: ``counted_executions(step) -> tuple`` gives the counts of a counted
    # compute step's execution when its effect counted nothing (a replayed run; see
    # :class:`ScriptedDataPlane` and :mod:`ipusim.tile.counted`).


class NoDataPlane:
    """A data plane for timing-only runs: effects do nothing, predicates are an error."""

    def apply(self, effect: int) -> None:
        return None

    def predicate(self, predicate: int) -> int:
        raise IpusimError(
            f"the program asks predicate {predicate} but the run has no data plane; "
            "hint: pass data_plane= (for example ScriptedDataPlane) to Machine.run"
        )


class ScriptedDataPlane:
    """A data plane that answers predicates from scripted sequences.

    Parameters
    ----------
    answers
        For each predicate id, the values to return on successive asks.

    Attributes
    ----------
    applied
        Effect ids in the order they were applied.
    """

    @classmethod
    def from_trace(cls, trace: Any) -> ScriptedDataPlane:
        """The answers a run gave (its trace's ``decisions``): replaying them takes the
        same path through the program, so a run can be re-timed on another config
        without its values (values never depend on timing)."""
        answers: dict[int, list[int]] = {}
        for predicate, value in trace.decisions:
            answers.setdefault(int(predicate), []).append(int(value))
        plane = cls(answers)
        for rec in trace.records:  # counted compute steps: their counts, in order
            executions = getattr(rec.details, "executions", None)
            if executions:
                plane._counted.setdefault(id(rec.step), deque()).append(executions)
        return plane

    def __init__(self, answers: Mapping[int, Sequence[int]] | None = None) -> None:
        self._answers = {k: list(v) for k, v in (answers or {}).items()}
        self._pos = dict.fromkeys(self._answers, 0)
        self.applied: list[int] = []
        #: per counted compute step (by id): the counts of its executions, in order
        self._counted: dict[int, deque[tuple[Any, ...]]] = {}

    def counted_executions(self, step: Any) -> tuple[Any, ...]:
        """The counts of the next execution of a counted compute step in the replayed
        run (empty when the run recorded none), so that a re-timed run costs each
        execution from what it counted."""
        queue = self._counted.get(id(step))
        return queue.popleft() if queue else ()

    def apply(self, effect: int) -> None:
        self.applied.append(effect)

    def predicate(self, predicate: int) -> int:
        values = self._answers.get(predicate)
        if values is None or self._pos[predicate] >= len(values):
            asked = self._pos.get(predicate, 0) + 1
            raise IpusimError(
                f"scripted data plane has no answer for predicate {predicate} "
                f"(ask number {asked}); hint: add more values for it"
            )
        value = values[self._pos[predicate]]
        self._pos[predicate] += 1
        return int(value)
