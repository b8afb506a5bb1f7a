"""Errors raised by the simulator.

Every error names the thing at fault (config path, tile, step, stream), the value
found, what was required and, where possible, a hint. Each subclasses
:class:`IpusimError` and the matching built-in exception so callers can catch either.
"""

from __future__ import annotations

from typing import Any


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending in ``...``), for an error line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class IpusimError(Exception):
    """Base class of every error raised by :mod:`ipusim`."""


class ConfigError(IpusimError, ValueError):
    """A machine config is invalid; ``problems`` lists every problem found.

    Parameters
    ----------
    problems
        One human-readable line per problem, each naming file, field path, value
        and what was expected.
    """

    def __init__(self, problems: list[str], header: str = "invalid machine config") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{header} ({len(self.problems)} problem(s)):\n{lines}")


class IRValidationError(IpusimError, ValueError):
    """A machine program is malformed (tile out of range, inconsistent arrays, ...).

    ``problems`` lists every problem found, each naming the step and the field.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid machine program ({len(self.problems)} problem(s)):\n{lines}")


class HostLinkError(IpusimError, ValueError):
    """A host transfer breaks a host-link rule (for example the per-copy size limit)."""


class RunAborted(IpusimError, RuntimeError):
    """A functional effect stopped the run on purpose (a program's abort).

    The machine stops the run, sets ``trace`` to what was measured until then (an
    incomplete trace) and raises the same exception object on.
    """

    def __init__(self, message: str, trace: Any = None) -> None:
        super().__init__(message)
        self.trace = trace


class SimulationTimeout(IpusimError, TimeoutError):
    """The run went past ``max_cycles``; ``trace`` holds what was measured until then."""

    def __init__(self, message: str, trace: Any = None) -> None:
        super().__init__(message)
        self.trace = trace
