"""The codelet of ``advanced_example.py``: the counterpart of the original's ``codelets.cpp``.

Loaded by file name, ``graph.addCodelets(path)``, as the original loads its codelets
file, so a saved executable finds the vertex class again from this file.
"""

from __future__ import annotations

from poplar_api import FLOAT
from poplar_api.codelet import Input, Output, Vector, Vertex


class VectorAdd(Vertex):
    """``z[i] = x[i] + y[i]`` for every element of ``x``."""

    x = Input(Vector(FLOAT))
    y = Input(Vector(FLOAT))
    z = Output(Vector(FLOAT))

    @staticmethod
    def compute(x, y, z):
        for i in range(x.shape[0]):
            z[i] = x[i] + y[i]
        return True
