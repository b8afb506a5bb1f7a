"""PopART's logging: ``getLogger`` and the ``POPART_LOG_*`` environment variables, through
Python's :mod:`logging`.

As PopART's ``LoggingContext`` (graphcore/popart ``willow/src/logging.cpp``, commit
4ab3372) and its User Guide ("Turning on execution tracing", "Environment variables"):

* ``POPART_LOG_LEVEL``: every module's level, one of ``TRACE``, ``DEBUG``, ``INFO``,
  ``WARN``, ``ERR``, ``CRITICAL``, ``OFF`` (the default);
* ``POPART_LOG_DEST``: ``stdout``, ``stderr`` (the default) or a file name (truncated
  when logging starts);
* ``POPART_LOG_CONFIG``: a JSON file of ``module: level`` pairs that override
  ``POPART_LOG_LEVEL`` for those modules (``{"devicex": "INFO", "session": "WARN"}``;
  a key may also be written ``popart:devicex``, as PopART's code looks it up).

Modules are PopART's: ``session``, ``ir``, ``devicex``, ``popart``, ``transform``,
``pattern``, ``builder``, ``op``, ``opx``, ``ces``, ``python``; the Python logger of
module ``m`` is ``popart.m`` (``popart`` itself for module ``popart``). A line has
spdlog's default pattern, which PopART keeps unless ``POPART_LOG_FORMAT`` is set:
``[2026-11-28 20:31:05.123] [popart:session] [info] message``.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import IO

from popart_api.errors import popart_exception

#: PopART's level names -> Python logging levels.
LEVELS = {
    "TRACE": 5,  # below DEBUG, as PopART's trace level
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


#: PopART's logging modules: ``enum class Module`` of graphcore/popart
#: ``willow/include/popart/logging.hpp`` (d2f20d78), without its ``none``.
MODULES = (
    "session",
    "ir",
    "devicex",
    "popart",
    "transform",
    "pattern",
    "builder",
    "op",
    "opx",
    "ces",
    "python",
)
#: spdlog's names of the levels (``%l`` of its default pattern).
_SPDLOG_NAMES = {5: "trace", 10: "debug", 20: "info", 30: "warning", 40: "error", 50: "critical"}


def _python_logger(module: str) -> logging.Logger:
    return logging.getLogger("popart" if module in ("all", "popart") else f"popart.{module}")


class _Formatter(logging.Formatter):
    """spdlog's default pattern ``[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v`` (UTC), with
    PopART's logger name ``popart:<module>``."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        stamp = when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"
        module = record.name.split(".", 1)[1] if "." in record.name else "popart"
        level = _SPDLOG_NAMES.get(record.levelno, record.levelname.lower())
        return f"[{stamp}] [popart:{module}] [{level}] {record.getMessage()}"


def _level(value: str, what: str) -> int:
    key = str(value).strip().upper()
    if key not in LEVELS:
        raise popart_exception(f"{what}={value!r} is not a level; use one of {list(LEVELS)}")
    return LEVELS[key]


_state: dict[str, object] = {}


def configure() -> None:
    """Apply ``POPART_LOG_LEVEL``, ``POPART_LOG_DEST`` and ``POPART_LOG_CONFIG`` to the
    ``popart`` loggers (again whenever they changed since the last call).

    Raises
    ------
    popart_exception
        A level that is not one of PopART's, a config file that cannot be read or is
        not a JSON object of module names to levels (naming the file, the key and the
        value), or a destination file that cannot be opened.
    """
    env = tuple(os.environ.get(f"POPART_LOG_{k}") for k in ("LEVEL", "DEST", "CONFIG"))
    if _state.get("env") == env:
        return
    level_text, dest, config = env
    if not any(env):
        return  # nothing asked for: Python's logging configuration is left alone
    default = _level(level_text or "OFF", "POPART_LOG_LEVEL")
    levels = dict.fromkeys(MODULES, default)
    if config:
        levels.update(_read_config(config))
    handler = _handler(dest or "stderr")
    handler.setFormatter(_Formatter())
    old = _state.get("handler")
    for module, level in levels.items():
        log = _python_logger(module)
        log.setLevel(level)
        if isinstance(old, logging.Handler) and old in log.handlers:
            log.removeHandler(old)
    root = _python_logger("popart")
    root.addHandler(handler)
    if isinstance(old, logging.Handler):
        old.close()
    _state.update(env=env, handler=handler)


def _read_config(path: str) -> dict[str, int]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise popart_exception(
            f"POPART_LOG_CONFIG={path!r}: cannot read it as JSON ({exc}); hint: a JSON "
            'object of module: level pairs, e.g. {"devicex": "INFO"}'
        ) from None
    if not isinstance(data, dict):
        raise popart_exception(
            f"POPART_LOG_CONFIG={path!r}: holds a {type(data).__name__}; it must be a JSON "
            "object of module: level pairs"
        )
    out: dict[str, int] = {}
    for key, value in data.items():
        module = str(key).removeprefix("popart:")
        if module not in MODULES:
            raise popart_exception(
                f"POPART_LOG_CONFIG={path!r}: {key!r} is not a PopART module; modules: "
                f"{list(MODULES)}"
            )
        out[module] = _level(value, f"POPART_LOG_CONFIG {path!r}: module {key!r}")
    return out


def _handler(dest: str) -> logging.Handler:
    if dest in ("stdout", "stderr"):
        stream: IO[str] = sys.stdout if dest == "stdout" else sys.stderr
        return logging.StreamHandler(stream)
    try:
        return logging.FileHandler(dest, mode="w", encoding="utf-8")
    except OSError as exc:
        raise popart_exception(
            f"POPART_LOG_DEST={dest!r}: cannot open it for writing ({exc.strerror}); "
            "hint: stdout, stderr or a writable file name"
        ) from None


class Logger:
    """A PopART logger: ``popart.getLogger().setLevel("DEBUG")``.

    Messages of the sessions (``prepareDevice`` timings, the graph's size) go to the
    Python logger ``popart`` (or ``popart.<name>``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger = _python_logger(name)

    def setLevel(self, level: str) -> None:
        """Set the level: TRACE, DEBUG, INFO, WARN, ERR, CRITICAL or OFF."""
        key = str(level).upper()
        if key not in LEVELS:
            raise popart_exception(
                f"Logger.setLevel: '{level}' is not a level; use one of {list(LEVELS)}"
            )
        self._logger.setLevel(LEVELS[key])

    def getLevel(self) -> str:
        """The level's PopART name."""
        value = self._logger.getEffectiveLevel()
        return next((k for k, v in LEVELS.items() if v == value), "INFO")

    def debug(self, msg: str) -> None:
        self._logger.debug(msg)

    def info(self, msg: str) -> None:
        self._logger.info(msg)

    def warn(self, msg: str) -> None:
        self._logger.warning(msg)

    def err(self, msg: str) -> None:
        self._logger.error(msg)


def getLogger(name: str = "all") -> Logger:
    """The logger of module ``name`` (``"all"``: every module)."""
    return Logger(name)


__all__ = ["LEVELS", "MODULES", "Logger", "configure", "getLogger"]
