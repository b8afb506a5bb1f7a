"""Compute sets, vertices and their connections: the vertex half of the Graph API.

:class:`VertexMethods` holds ``addCodelets``, ``addComputeSet``, ``addVertex``,
``connect``, ``setFieldSize`` and ``setPerfEstimate``; :class:`~poplar_api.graph.Graph`
inherits them. Vertices are rows of the graph state's
:class:`~poplar_api.vertices.VertexTable`; :class:`VertexRef` and :class:`FieldRef`
are the handles users hold.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from poplar_api.codelet import VertexType, collect_codelets, vertex_type
from poplar_api.errors import GraphError
from poplar_api.fields import FieldSpec
from poplar_api.graph_bulk import MAX_ESTIMATE
from poplar_api.graph_state import ComputeSet
from poplar_api.tensor import Tensor
from poplar_api.vertices import VertexInstance, connection_ids

if TYPE_CHECKING:
    from poplar_api.graph import Graph

__all__ = ["FieldRef", "VertexMethods", "VertexRef"]

_new_object = object.__new__


class FieldRef:
    """``v["field"]`` or ``v["field"][i]``: a field (or one vector of a VectorList)."""

    __slots__ = ("index", "name", "vertex")

    def __init__(self, vertex: VertexRef, name: str, index: int | None = None) -> None:
        self.vertex = vertex
        self.name = name
        self.index = index

    def __getitem__(self, i: int) -> FieldRef:
        if self.index is not None:
            raise GraphError(f"{self.vertex!r} field '{self.name}'[{self.index}] cannot be indexed")
        return FieldRef(self.vertex, self.name, int(i))

    def __repr__(self) -> str:
        idx = "" if self.index is None else f"[{self.index}]"
        return f"{self.vertex!r}['{self.name}']{idx}"


class VertexRef:
    """Handle of a vertex returned by :meth:`Graph.addVertex`."""

    __slots__ = ("graph", "id")

    def __init__(self, graph: Graph, vid: int) -> None:
        self.graph = graph
        self.id = vid

    def __getitem__(self, name: str) -> FieldRef:
        # raises with the list of fields when unknown
        self.graph._state.vertices.vtype(self.id).field(name)
        return FieldRef(self, name)

    def __repr__(self) -> str:
        return f"vertex {self.id} ({self.graph._state.vertices.vtype(self.id).name})"


class VertexMethods:
    """Vertex methods of :class:`~poplar_api.graph.Graph` (see the module docstring)."""

    def _check_vertex(self, v: Any, what: str) -> VertexInstance:
        """The vertex of a handle, which must come from this graph (or a virtual one)."""
        if not isinstance(v, VertexRef):
            raise GraphError(f"{what}: expected a vertex (graph.addVertex), got {type(v).__name__}")
        if v.graph._state is not self._state:
            raise GraphError(
                f"{what}: vertex {v.id} belongs to another graph; hint: use the vertices this "
                "graph's addVertex returned"
            )
        return self._state.vertices[v.id]

    # --------------------------------------------------------------- codelets
    def addCodelets(self, codelets: Any, compileFlags: str = "") -> None:
        """Register vertex classes: a class, a module, a codelet file path or a list.

        Parameters
        ----------
        codelets
            A Vertex/MultiVertex/SupervisorVertex subclass, a module, the path of a
            Python file (``graph.addCodelets("my_codelets.py")`` imports it and
            registers every vertex class it defines), or a list of these.
        compileFlags
            Accepted for Poplar compatibility (``"-O3"``, ...) and ignored: kernels are
            compiled by Numba.

        Raises
        ------
        CodeletError
            A bad codelet class, a file with a syntax error or an import error (naming
            file and line) or with no vertex class; ``CodeletFileError`` (also a
            ``FileNotFoundError``) for a missing file.
        GraphError
            Another vertex type of the same name is already registered.
        """
        if not isinstance(compileFlags, str):
            raise GraphError(f"addCodelets: compileFlags must be a str, got {compileFlags!r}")
        for cls in collect_codelets(codelets):
            vt = vertex_type(cls)
            known = self._state.codelets.get(vt.name)
            if known is not None and known.cls is not cls:
                raise GraphError(
                    f"addCodelets: a different vertex type named '{vt.name}' is already "
                    "registered; hint: give one of them a distinct typeName"
                )
            self._state.codelets[vt.name] = vt

    def _vertex_type(self, type_: Any) -> VertexType:
        if isinstance(type_, type):
            known = self._state.codelets.get(type_.__dict__.get("typeName") or type_.__name__)
            if known is not None and known.cls is type_:
                return known  # registered already
            self.addCodelets(type_)
            return vertex_type(type_)
        vt = self._state.codelets.get(str(type_))
        if vt is None:
            names = sorted(self._state.codelets)
            close = difflib.get_close_matches(str(type_), names, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "add it with graph.addCodelets"
            raise GraphError(
                f"addVertex: unknown vertex type '{type_}' (registered: {names or 'none'}); {hint}"
            )
        return vt

    # ------------------------------------------------------- compute & vertices
    def addComputeSet(self, debugName: str = "") -> ComputeSet:
        """A new, empty compute set."""
        cid = len(self._state.compute_sets)
        cs = ComputeSet(cid, debugName or f"cs{cid}")
        self._state.compute_sets.append(cs)
        return cs

    def createComputeSet(self, debugName: str = "") -> ComputeSet:
        """Poplar's earlier name of :meth:`addComputeSet` (older SDKs' tutorials)."""
        return self.addComputeSet(debugName)

    def addVertex(
        self, cs: ComputeSet, vertexType: Any, connections: Mapping[str, Any] | None = None
    ) -> VertexRef:
        """Add a vertex of ``vertexType`` (name or class) to ``cs``, with connections."""
        if self._wide:
            self._refuse_on_parent("addVertex")
        state = self._state
        sets = state.compute_sets
        if type(cs) is not ComputeSet or not (0 <= cs.id < len(sets) and sets[cs.id] is cs):
            raise GraphError(
                f"addVertex: {cs!r} is not a compute set of this graph (another graph made it); "
                "hint: use the compute sets this graph's addComputeSet returned"
            )
        vt = state.codelets.get(vertexType) if type(vertexType) is str else None
        if vt is None:
            vt = self._vertex_type(vertexType)
        vertices = state.vertices
        vid = vertices.append(vt, cs.id)
        ref = _new_object(VertexRef)
        ref.graph = self
        ref.id = vid
        if connections:
            type_runs = vertices.type_runs[vertices.type_code[vid]]
            check = type_runs.check
            runs = type_runs.runs
            base = vertices.row[vid] * type_runs.width
            try:
                for name, value in connections.items():
                    fast = check.get(name)
                    if (  # a run of this graph's ids on a Vector or scalar field: inline
                        fast is not None
                        and type(value) is Tensor
                        and value._graph is state
                        and value._type is fast[1]
                        and value._start >= 0
                    ):
                        n = math.prod(value._shape)
                        if fast[2] or n == 1:
                            at = base + fast[0]
                            runs[at] = value._start
                            runs[at + 1] = value._start + n
                            continue
                    spec = vt.field_map.get(name)
                    if spec is not None:
                        self._connect_field(vertices[vid], spec, value)
                    else:
                        self.connect(ref[name], value)  # raises: no such field
            except Exception:
                vertices.pop()  # a failed call leaves no half-built vertex
                raise
        cs.vertices.append(vid)
        return ref

    def connect(self, fieldRef: FieldRef, value: Any) -> None:
        """Connect a tensor (or, for a VectorList field, a list of tensors) to a field."""
        if not isinstance(fieldRef, FieldRef):
            raise GraphError(f"connect: expected v['field'], got {type(fieldRef).__name__}")
        inst = self._check_vertex(fieldRef.vertex, f"connect of field '{fieldRef.name}'")
        spec = inst.vtype.field(fieldRef.name)
        if fieldRef.index is None:
            self._connect_field(inst, spec, value)
            return
        where = f"{inst.describe()} field '{spec.name}'"
        if spec.kind != "vectorlist":
            raise GraphError(f"{where}: only VectorList fields take [i]")
        size = inst.list_sizes.get(spec.name)
        if size is None or not 0 <= fieldRef.index < size:
            raise GraphError(
                f"{where}[{fieldRef.index}]: index out of range (field size "
                f"{size if size is not None else 'not set'}); hint: call setFieldSize first"
            )
        t = self.checkTensor(value, where)
        spec.check([t.numElements()], t.elementType(), where)
        slots = inst.fields.setdefault(spec.name, [None] * size)
        slots[fieldRef.index] = t._index

    def _connect_field(self, inst: VertexInstance, spec: FieldSpec, value: Any) -> None:
        """Connect ``value`` to the whole field ``spec`` of ``inst`` (checked)."""
        if spec.kind == "vectorlist":
            if isinstance(value, Tensor):
                value = [value]
            state, ftype = self._state, spec.element_type
            if isinstance(value, list) and all(
                type(v) is Tensor and v._graph is state and v._type is ftype for v in value
            ):
                tensors = list(value)  # of this graph and the field's type: nothing to check
            else:
                where = f"{inst.describe()} field '{spec.name}'"
                tensors = [self.checkTensor(v, where) for v in value]
                for t in tensors:
                    spec.check([t.numElements()], t.elementType(), where)
            inst.fields[spec.name] = [t._index for t in tensors]
            inst.list_sizes[spec.name] = len(tensors)
            return
        where = f"{inst.describe()} field '{spec.name}'"
        t = self.checkTensor(value, where)
        spec.check(t.numElements(), t.elementType(), where)
        inst.table.set_field(inst.id, spec.name, connection_ids(t))

    def setFieldSize(self, fieldRef: FieldRef, size: int) -> None:
        """Number of vectors of a VectorList field, before connecting ``v[f][i]``."""
        if not isinstance(fieldRef, FieldRef):
            raise GraphError(f"setFieldSize: expected v['field'], got {type(fieldRef).__name__}")
        inst = self._check_vertex(fieldRef.vertex, f"setFieldSize of field '{fieldRef.name}'")
        spec = inst.vtype.field(fieldRef.name)
        if spec.kind != "vectorlist":
            raise GraphError(
                f"{inst.describe()} field '{spec.name}': setFieldSize applies to VectorList "
                f"fields; this one is {spec.describe()}"
            )
        inst.list_sizes[spec.name] = int(size)
        inst.fields[spec.name] = [None] * int(size)

    def setPerfEstimate(self, v: VertexRef, cycles: int) -> None:
        """The vertex's cycle estimate (thread cycles; tile cycles for a MultiVertex)."""
        fast = type(cycles) is int and 0 <= cycles < MAX_ESTIMATE and type(v) is VertexRef
        if fast and v.graph._state is self._state:  # the common case, inline
            self._state.vertices.estimate[v.id] = cycles
            return
        inst = self._check_vertex(v, "setPerfEstimate")
        if (
            isinstance(cycles, bool)
            or not isinstance(cycles, int | np.integer)
            or not 0 <= cycles < MAX_ESTIMATE
        ):
            raise GraphError(
                f"setPerfEstimate of {inst.describe()}: {cycles!r} must be an int >= 0 "
                "and < 2**62 (the thread cycles of one run of the vertex)"
            )
        inst.perf_estimate = int(cycles)

    def setCycleEstimate(self, v: VertexRef, cycles: int) -> None:
        """The SDK 1.x name of :meth:`setPerfEstimate` (same arguments and checks)."""
        self.setPerfEstimate(v, cycles)
