"""The exception of the PopART layer."""

from __future__ import annotations


class popart_exception(RuntimeError):  # noqa: N801 - PopART's Python name
    """A PopART-layer error: a bad model, op, tensor, option or run argument.

    The message names what was wrong (op type, node, tensor id, attribute or value),
    what was required, and a hint.
    """


#: Readable alias.
PopartError = popart_exception


class OutOfMemoryException(popart_exception):
    """The model does not fit in tile memory (PopART's ``popart.OutOfMemoryException``).

    ``getSummaryReport()`` gives the memory report (per-tile use against capacity), so
    nothing is lost; ``report`` is the report object. Compile with
    ``SessionOptions.engineOptions = {"debug.allowOutOfMemory": "true"}`` to get the
    session and every profile anyway.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report

    def getSummaryReport(self) -> str:
        """The memory report as text."""
        return str(self)


__all__ = ["OutOfMemoryException", "PopartError", "popart_exception"]
