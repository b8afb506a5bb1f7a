"""PopART's ``getLogger``: the ``popart`` Python logger, with PopART's level names."""

from __future__ import annotations

import logging

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


class Logger:
    """A PopART logger: ``popart.getLogger().setLevel("DEBUG")``.

    Messages of the sessions (``prepareDevice`` timings, the graph's size) go to the
    Python logger ``popart`` (or ``popart.<name>``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger = logging.getLogger("popart" if name == "all" else f"popart.{name}")

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


__all__ = ["LEVELS", "Logger", "getLogger"]
