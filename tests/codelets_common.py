"""Vertex classes and graph helpers that many Poplar-API tests use.

A test file imports what it needs (``from codelets_common import Bump, tiny_graph``);
a vertex whose body is what a test is about stays in that test file. Everything here
runs on the 8-tile ``tiny`` preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poplar_api import INT, Device, Engine, Graph, IPUModel
from poplar_api.codelet import InOut, Vertex

__all__ = ["Bump", "loaded", "tiny_device", "tiny_graph"]


class Bump(Vertex):
    """``c += 1`` on one INT: a vertex whose runs can be counted from its output."""

    c = InOut(INT)

    @staticmethod
    def compute(c):
        c[0] += 1
        return True


def tiny_device() -> Device:
    """A fresh device of the ``tiny`` preset (one IPU, 8 tiles)."""
    return IPUModel("tiny").createDevice()


def tiny_graph() -> Graph:
    """An empty graph for the ``tiny`` preset's target."""
    return Graph(tiny_device().getTarget())


def loaded(
    graph: Graph,
    programs: Any,
    device: Device | None = None,
    options: Mapping[str, Any] | None = None,
) -> Engine:
    """An engine for ``graph`` and ``programs``, loaded on ``device`` (a new tiny
    device when None), not yet run."""
    engine = Engine(graph, programs, options)
    engine.load(device or tiny_device())
    return engine
