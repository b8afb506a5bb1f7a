"""``poplin::addCodelets``: register the poplin vertex classes with a graph.

Kept in its own module so the package's ``__init__`` can export it as
``poplin.addCodelets``.
"""

from __future__ import annotations

from poplar_api.graph import Graph
from poplar_api.library_checks import add_library_codelets
from poplar_api.poplin import vertices as vx
from poplar_api.poplin.conv_planner import AMP_UNITS
from poplar_api.poplin.conv_vertices import conv_vertex
from poplar_api.poplin.outer_product import outer_product_vertex
from poplar_api.types import FLOAT, HALF

__all__ = ["addCodelets", "vertex_classes"]


def vertex_classes() -> list[type]:
    """The convolution partial-sum (and outer-product) and reduction vertex classes of
    every instantiation.

    The solver vertices (``poplin::Cholesky<...>`` and friends) exist in estimator
    versions that share one Poplar name, so they are registered when a solver adds
    them rather than here (registering one version would reject the other).
    """
    types = {"half": HALF, "float": FLOAT}
    out: list[type] = []
    for limited in (True, False):
        for (fp, acc), (allowed, elems) in AMP_UNITS.items():
            for units in allowed:
                for method in ("AMP_1x1", "AMP"):
                    out.append(conv_vertex(method, types[fp], types[acc], limited, units, elems))
        for fp, acc in (("half", "half"), ("half", "float"), ("float", "float")):
            out.append(conv_vertex("HMAC", types[fp], types[acc], limited))
        for acc in ("half", "float"):
            for cgpg in (4, 8, 16):
                out.append(conv_vertex("VMAC", HALF, types[acc], limited, 8, 2, cgpg))
    out += [outer_product_vertex(t) for t in (FLOAT, HALF)]
    return out + list(vx._REDUCE.values())


def addCodelets(graph: Graph) -> None:
    """Register the poplin vertices with ``graph`` (``poplin::addCodelets``).

    Library functions register what they use as they add vertices, so this is
    optional; afterwards the vertices can also be added by their Poplar names. Calling
    it again is harmless.

    Raises
    ------
    GraphError
        ``graph`` is not a poplar_api Graph.
    """
    add_library_codelets(graph, vertex_classes(), "poplin.addCodelets")
