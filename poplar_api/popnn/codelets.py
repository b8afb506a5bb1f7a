"""``popnn::addCodelets``: register the popnn vertex classes with a graph."""

from __future__ import annotations

from poplar_api.graph import Graph
from poplar_api.library_checks import add_library_codelets
from poplar_api.popnn import pool_vertices as pv
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.nonlinearity import NonLinearityType
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT

__all__ = ["addCodelets", "vertex_classes"]


def vertex_classes() -> list[type]:
    """Every popnn vertex class for the float and half instantiations Poplibs makes."""
    out: list[type] = []
    ops = [t.name for t in NonLinearityType if not t.name.startswith("SOFTMAX")]
    for t in (FLOAT, HALF):
        for layout in ("1D", "2D"):
            for op in ("GELU", "SWISH"):
                out.append(vx.nonlinearity_vertex(op, t, layout, True))
            out.append(vx.nonlinearity_vertex("SWISH", t, layout, False))
            out.extend(vx.nonlinearity_grad_vertex(op, t, layout) for op in ops)
        for cross in (False, True):
            out.append(vx.loss_transform_vertex(t, cross))
    for label in (UNSIGNED_INT, INT):
        out.append(vx.calc_accuracy_vertex(label))
        for is_max in (True, False):
            for in_type in (FLOAT, HALF, INT, UNSIGNED_INT):
                out.append(vx.class_gather_vertex(in_type, label, is_max))
            for in_out in (FLOAT, INT, UNSIGNED_INT):
                out.append(vx.class_sparse_vertex(in_out, label, is_max))
    return out + pv.all_classes()


def addCodelets(graph: Graph) -> None:
    """Register the popnn vertices with ``graph`` (``popnn::addCodelets``).

    Library functions register the vertices they use as they add them, so calling this
    is optional; after it, vertices can also be added by their Poplar names
    (``graph.addVertex(cs, "popnn::MaxPooling<float>")``). Calling it again is
    harmless.

    Raises
    ------
    GraphError
        ``graph`` is not a poplar_api Graph.
    """
    add_library_codelets(graph, vertex_classes(), "popnn.addCodelets")
