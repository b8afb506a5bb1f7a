"""The exception of the PopART layer."""

from __future__ import annotations


class popart_exception(RuntimeError):  # noqa: N801 - PopART's Python name
    """A PopART-layer error: a bad model, op, tensor, option or run argument.

    The message names what was wrong (op type, node, tensor id, attribute or value),
    what was required, and a hint.
    """


#: Readable alias.
PopartError = popart_exception

__all__ = ["PopartError", "popart_exception"]
