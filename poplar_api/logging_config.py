"""Poplar's and Poplibs' logging, through Python's :mod:`logging`.

Poplar and Poplibs log through spdlog, configured from environment variables that the
Poplar and Poplibs User Guide lists ("Environment variables", "Logging"):

* ``POPLAR_LOG_LEVEL`` and ``POPLIBS_LOG_LEVEL``: the level of every module of the
  library, one of ``TRACE``, ``DEBUG``, ``INFO``, ``WARN``, ``ERR``, ``OFF`` (the
  default, also for an empty value);
* ``POPLAR_<MODULE>_LOG_LEVEL`` and ``POPLIBS_<MODULE>_LOG_LEVEL``: one module's level,
  over the library's (Poplar's modules ``CODELETS``, ``ENGINE``, ``GRAPH``,
  ``PROFILER``, ``PROGRAM``, ``TARGET``, ``TENSOR``; Poplibs' ``POPFLOAT``, ``POPLIN``,
  ``POPNN``, ``POPOPS``, ``POPRAND``, ``POPSOLVER``, ``POPSPARSE``, ``POPUTIL``);
* ``POPLAR_LOG_DEST`` and ``POPLIBS_LOG_DEST``: ``stdout``, ``stderr`` (the default) or
  a file name (the file is truncated when logging starts).

Each message is one line in the pattern of Poplibs' ``lib/poplibs_support/logging.cpp``
(graphcore/poplibs, ``LoggingContext::LoggingContext``): the UTC time to the
microsecond, ``PL:`` (Poplibs) or ``PO:`` (Poplar) and the module name padded to the
library's longest, the process and thread ids, the level's letter and the message::

    2026-11-28T20:31:05.123456Z PL:POPOPS    4242.4242 I: reduce: 2 stages

On a terminal the line is coloured by level as Poplibs colours it (trace bright
black, debug cyan, warning yellow, error bold red). Python loggers: ``poplar.<module>``
and ``poplibs.<module>`` (lower case); :func:`logger` returns one, configured from the
environment the first time a logger is asked for; :func:`configure` reads the
environment again.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import IO

from poplar_api.errors import PoplarError

__all__ = [
    "POPLAR_MODULES",
    "POPLIBS_MODULES",
    "TRACE",
    "LoggingConfigError",
    "configure",
    "logger",
]

#: Python level of spdlog's ``trace`` (below DEBUG).
TRACE = 5
logging.addLevelName(TRACE, "TRACE")
_OFF = logging.CRITICAL + 10

POPLAR_MODULES = ("CODELETS", "ENGINE", "GRAPH", "PROFILER", "PROGRAM", "TARGET", "TENSOR")
POPLIBS_MODULES = (
    "POPFLOAT",
    "POPLIN",
    "POPNN",
    "POPOPS",
    "POPRAND",
    "POPSOLVER",
    "POPSPARSE",
    "POPUTIL",
)
#: Library -> (environment prefix, line prefix, modules).
_LIBRARIES = {
    "poplar": ("POPLAR", "PO", POPLAR_MODULES),
    "poplibs": ("POPLIBS", "PL", POPLIBS_MODULES),
}
_LEVELS = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "OFF": _OFF,
    "": _OFF,
}
#: spdlog's short level names (``%L``).
_LETTERS = {TRACE: "T", logging.DEBUG: "D", logging.INFO: "I", logging.WARNING: "W"}
_COLOURS = {TRACE: "\033[90m", logging.DEBUG: "\033[36m", logging.WARNING: "\033[33m"}
_ERROR_COLOUR = "\033[31m\033[1m"
_RESET = "\033[m"

_lock = threading.Lock()
_configured = False
_handlers: list[logging.Handler] = []


class LoggingConfigError(PoplarError, ValueError):
    """A logging environment variable has a value Poplar would refuse."""


class _Formatter(logging.Formatter):
    """One line in Poplibs' pattern; ``prefix`` is ``PO`` or ``PL``, ``width`` the
    length of the library's longest module name."""

    def __init__(self, prefix: str, width: int, colour: bool) -> None:
        super().__init__()
        self.prefix, self.width, self.colour = prefix, width, colour

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        module = record.name.rsplit(".", 1)[-1].upper()
        level = record.levelno
        letter = _LETTERS.get(level, "E" if level < logging.CRITICAL else "C")
        line = (
            f"{when:%Y-%m-%dT%H:%M:%S.%f}Z {self.prefix}:{module:<{self.width}} "
            f"{os.getpid()}.{threading.get_native_id()} {letter}: {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if self.colour:
            start = _COLOURS.get(level, _ERROR_COLOUR if level >= logging.ERROR else "")
            if start:
                line = f"{start}{line}{_RESET}"
        return line


def _level(variable: str, value: str) -> int:
    level = _LEVELS.get(value)
    if level is None:
        raise LoggingConfigError(
            f"{variable}={value!r} is not a logging level; allowed: TRACE, DEBUG, INFO, "
            f"WARN, ERR, OFF (upper case, as Poplar reads them); hint: {variable}=INFO"
        )
    return level


def _stream(variable: str, dest: str, files: dict[str, IO[str]]) -> tuple[IO[str], bool]:
    """The stream of ``dest`` and whether it is one this module opened."""
    if dest == "stdout":
        return sys.stdout, False
    if dest == "stderr":
        return sys.stderr, False
    path = os.path.abspath(dest)
    if path not in files:
        try:
            files[path] = open(path, "w", encoding="utf-8")  # noqa: SIM115 (kept open)
        except OSError as exc:
            raise LoggingConfigError(
                f"{variable}={dest!r}: the log file cannot be opened ({exc.strerror}); "
                f"hint: {variable}=stderr, or a path in a writable directory"
            ) from None
    return files[path], True


def configure(environ: Mapping[str, str] | None = None) -> None:
    """(Re)configure the ``poplar`` and ``poplibs`` loggers from ``environ``.

    Parameters
    ----------
    environ
        The environment to read (default :data:`os.environ`).

    Raises
    ------
    LoggingConfigError
        A level that is not one of Poplar's, or a log file that cannot be opened,
        naming the variable and its value.
    """
    global _configured
    env = os.environ if environ is None else environ
    with _lock:
        # every value is checked before anything changes
        plans = []
        for name, (var, prefix, modules) in _LIBRARIES.items():
            default = _level(f"{var}_LOG_LEVEL", env.get(f"{var}_LOG_LEVEL", "OFF"))
            levels = {}
            for module in modules:
                variable = f"{var}_{module}_LOG_LEVEL"
                levels[module] = _level(variable, env[variable]) if variable in env else default
            plans.append((name, var, prefix, modules, levels))
        files: dict[str, IO[str]] = {}
        streams = [
            _stream(f"{var}_LOG_DEST", env.get(f"{var}_LOG_DEST", "stderr"), files)
            for _, var, _, _, _ in plans
        ]
        _close_handlers()
        for (name, _, prefix, modules, levels), (stream, own) in zip(plans, streams, strict=True):
            isatty = getattr(stream, "isatty", None)
            colour = (not own) and callable(isatty) and bool(isatty())
            handler = _Handler(stream, own)
            handler.setFormatter(_Formatter(prefix, max(len(m) for m in modules), colour))
            parent = logging.getLogger(name)
            parent.handlers = [handler]
            parent.propagate = False
            parent.setLevel(logging.NOTSET)
            for module in modules:
                logging.getLogger(f"{name}.{module.lower()}").setLevel(levels[module])
            _handlers.append(handler)
        _configured = True


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that closes the log file it owns (shared by both libraries
    when their destinations are the same file)."""

    def __init__(self, stream: IO[str], own: bool) -> None:
        super().__init__(stream)
        self.own = own

    def close(self) -> None:
        if self.own and not self.stream.closed:
            self.stream.close()
        super().close()


def _close_handlers() -> None:
    for handler in _handlers:
        with contextlib.suppress(OSError, ValueError):  # a stream closed by its owner
            handler.flush()
        handler.close()
    _handlers.clear()


def logger(module: str) -> logging.Logger:
    """The Python logger of a Poplar or Poplibs module (``"ENGINE"``, ``"POPOPS"``, ...),
    configured from the environment on first use.

    Raises
    ------
    LoggingConfigError
        ``module`` is not a module of Poplar or Poplibs (the error lists them), or the
        environment's logging variables are wrong (see :func:`configure`).
    """
    name = module.upper()
    library = "poplar" if name in POPLAR_MODULES else "poplibs" if name in POPLIBS_MODULES else ""
    if not library:
        raise LoggingConfigError(
            f"logging module {module!r} is not one of Poplar's ({', '.join(POPLAR_MODULES)}) "
            f"nor Poplibs' ({', '.join(POPLIBS_MODULES)}); hint: logger('ENGINE')"
        )
    if not _configured:
        configure()
    return logging.getLogger(f"{library}.{name.lower()}")
