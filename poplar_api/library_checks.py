"""Argument checks shared by the library functions (poplin, popnn, poprand).

Poplibs functions take a graph, tensors of given element types and a program to append
to; a wrong argument is reported the same way whichever library was called, naming the
function, the argument, the value found and what is required. Keeping the checks here
keeps those messages alike and each library free of its own copy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = ["add_library_codelets", "check_element_type", "check_graph"]


def check_graph(graph: object, what: str) -> Graph:
    """``graph``, when it is a poplar_api Graph.

    Raises
    ------
    GraphError
        ``graph`` is something else; the message names ``what`` (the function) and the
        type found.
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"{what}: graph must be a poplar_api Graph, got {type(graph).__name__}")
    return graph


def check_element_type(
    t: Tensor, role: str, allowed: Collection[Type], what: str, required: str
) -> Tensor:
    """``t``, when its element type is one of ``allowed``.

    Parameters
    ----------
    t
        The tensor argument.
    role
        Its parameter name in the library function (``"modelOutputs"``).
    allowed
        The element types the function accepts.
    what
        The function's name, for the message.
    required
        What the message says is required (``"float or half is required"``).

    Raises
    ------
    TypeMismatchError
        Another element type; the message names the tensor and its type.
    """
    if t.elementType() not in allowed:
        raise TypeMismatchError(f"{what}: {role} '{t.name}' is {t.elementType().name}; {required}")
    return t


def add_library_codelets(graph: object, classes: Iterable[type], what: str) -> None:
    """Register a library's vertex ``classes`` with ``graph`` (its ``addCodelets``).

    Raises
    ------
    GraphError
        ``graph`` is not a poplar_api Graph.
    """
    check_graph(graph, what).addCodelets(list(classes))
