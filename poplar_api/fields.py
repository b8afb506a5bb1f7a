"""Field declarations of codelets and the packed per-field data a kernel runs on.

A codelet (vertex class) declares its fields as class attributes::

    in_ = Input(Vector(FLOAT))   # called "in" in Poplar
    out = Output(FLOAT)          # scalar

:class:`FieldSpec` is the checked, resolved form of one declaration; :class:`FieldBatch`
holds the elements of one field for every vertex of a compute set, packed into one
array, so that a single compiled driver can run the kernel over all vertices.
"""

from __future__ import annotations

import itertools
import keyword
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from numbers import Integral
from typing import Any, ClassVar, Literal

import numpy as np

from poplar_api.errors import CodeletError, GraphError, TypeMismatchError
from poplar_api.types import Type

Direction = Literal["in", "out", "inout"]
Kind = Literal["scalar", "vector", "vectorlist"]


class VectorLayout(str, Enum):
    """Poplar's ``poplar::VectorLayout``: how a vertex stores a vector field's pointer.

    On an IPU the layout decides how many bytes of vertex state the field takes and
    whether the size is stored at all (``ONE_PTR`` stores only the pointer; the
    codelet must know the length from elsewhere). ipusim stores the layout with the
    field; the kernel always receives a sized 1-D array, and bounds checks apply to
    every layout.
    """

    ONE_PTR = "ONE_PTR"
    SPAN = "SPAN"
    SHORT_SPAN = "SHORT_SPAN"
    SCALED_PTR32 = "SCALED_PTR32"
    SCALED_PTR64 = "SCALED_PTR64"
    SCALED_PTR128 = "SCALED_PTR128"
    COMPACT_PTR = "COMPACT_PTR"


class VectorListLayout(str, Enum):
    """Poplar's ``poplar::VectorListLayout``: how a vertex stores a list of vectors."""

    DELTAN = "DELTAN"
    DELTANELEMENTS = "DELTANELEMENTS"
    COMPACT_DELTAN = "COMPACT_DELTAN"


def _check_layout(what: str, enum: type[Enum], layout: Any, align: Any) -> Any:
    """Return ``layout`` as a member of ``enum``; raise naming the value and the choices."""
    try:
        member = enum(layout.value if isinstance(layout, Enum) else layout)
    except ValueError:
        choices = ", ".join(m.value for m in enum)
        raise CodeletError(
            f"{what}: layout {layout!r} is not a {enum.__name__}; allowed: {choices}; hint: "
            f"write {enum.__name__}.{next(iter(enum)).value}"
        ) from None
    if isinstance(align, bool) or not isinstance(align, Integral) or align < 1:
        raise CodeletError(f"{what}: minAlign must be a positive int (bytes), got {align!r}")
    if align & (align - 1):
        raise CodeletError(f"{what}: minAlign must be a power of two, got {align}")
    return member


@dataclass(frozen=True)
class Vector:
    """A one-dimensional field of ``element_type`` (any length, one tensor region).

    Parameters
    ----------
    element_type
        Element :class:`~poplar_api.types.Type`.
    layout
        A :class:`VectorLayout` (default ``SPAN``, Poplar's default), as in
        ``Vector<float, VectorLayout::ONE_PTR, 8>``.
    minAlign
        Minimum alignment of the data in bytes (a power of two; default 1).
    """

    element_type: Any
    layout: Any = VectorLayout.SPAN
    minAlign: int = 1

    def __post_init__(self) -> None:
        member = _check_layout("Vector", VectorLayout, self.layout, self.minAlign)
        object.__setattr__(self, "layout", member)

    def __repr__(self) -> str:
        extra = "" if self.layout is VectorLayout.SPAN else f", VectorLayout.{self.layout.value}"
        extra += f", minAlign={self.minAlign}" if self.minAlign != 1 else ""
        return f"Vector({self.element_type!r}{extra})"


@dataclass(frozen=True)
class VectorList:
    """A field holding a list of one-dimensional vectors of ``element_type``.

    ``layout`` is a :class:`VectorListLayout` (default ``DELTANELEMENTS``) and
    ``minAlign`` the alignment of each vector in bytes, as in
    ``VectorList<float, VectorListLayout::DELTAN, 8>``.
    """

    element_type: Any
    layout: Any = VectorListLayout.DELTANELEMENTS
    minAlign: int = 1

    def __post_init__(self) -> None:
        member = _check_layout("VectorList", VectorListLayout, self.layout, self.minAlign)
        object.__setattr__(self, "layout", member)

    def __repr__(self) -> str:
        extra = (
            ""
            if self.layout is VectorListLayout.DELTANELEMENTS
            else f", VectorListLayout.{self.layout.value}"
        )
        extra += f", minAlign={self.minAlign}" if self.minAlign != 1 else ""
        return f"VectorList({self.element_type!r}{extra})"


class FieldDecl:
    """Base of :class:`Input`, :class:`Output` and :class:`InOut`.

    Parameters
    ----------
    spec
        A :class:`~poplar_api.types.Type` (scalar field), :class:`Vector` or
        :class:`VectorList`. Checked when the vertex class is registered, so the
        error can name the class and the field.
    interleaved
        Memory placement hint (the field's data should live in interleaved memory).
        Stored only.
    name
        The field's Poplar name. Defaults to the attribute name, with the trailing
        underscore of a Python keyword removed (``in_`` becomes ``in``).
    """

    direction: ClassVar[Direction]

    __slots__ = ("interleaved", "name", "spec")

    def __init__(self, spec: Any, *, interleaved: bool = False, name: str | None = None) -> None:
        self.spec = spec
        self.interleaved = interleaved
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class Input(FieldDecl):
    """A field the kernel only reads (read-only inside ``compute``)."""

    direction: ClassVar[Direction] = "in"


class Output(FieldDecl):
    """A field the kernel writes."""

    direction: ClassVar[Direction] = "out"


class InOut(FieldDecl):
    """A field the kernel reads and writes.

    Its values live in the connected tensor, so what one run writes is what the next
    run reads (vertex state kept across ``Engine.run`` calls, as on an IPU).
    """

    direction: ClassVar[Direction] = "inout"


def _type_label(element_type: Any) -> str:
    return element_type.name if isinstance(element_type, Type) else repr(element_type)


def poplar_field_name(attribute: str) -> str:
    """Return the Poplar name of a field declared as class attribute ``attribute``.

    A Python keyword cannot be an attribute name, so ``in_`` (any keyword plus a
    trailing underscore) stands for ``in``; other names are kept.
    """
    if attribute.endswith("_") and keyword.iskeyword(attribute[:-1]):
        return attribute[:-1]
    return attribute


def is_field_like(value: Any) -> bool:
    """Whether a class attribute is, or looks like an attempt at, a field declaration."""
    return isinstance(value, FieldDecl | Vector | VectorList | Type)


@dataclass(frozen=True)
class FieldSpec:
    """One checked field of a vertex type.

    Attributes
    ----------
    name
        Poplar name (``"in"`` for an attribute ``in_``).
    direction
        ``"in"``, ``"out"`` or ``"inout"``.
    kind
        ``"scalar"`` (kernel sees a 1-element array), ``"vector"`` (1-D array) or
        ``"vectorlist"`` (``numba.typed.List`` of 1-D arrays).
    element_type
        Element :class:`~poplar_api.types.Type` of the connected tensor.
    interleaved
        Memory placement hint.
    attribute
        The class attribute that declares the field.
    layout
        The Vector/VectorList layout name (``"SPAN"``, ``"ONE_PTR"``, ``"DELTAN"``,
        ...); empty for scalar fields.
    min_align
        Minimum alignment of the field's data in bytes.
    """

    name: str
    direction: Direction
    kind: Kind
    element_type: Type
    interleaved: bool = False
    attribute: str = ""
    layout: str = ""
    min_align: int = 1

    @property
    def kernel_dtype(self) -> np.dtype:
        """Dtype of the arrays the kernel sees (HALF fields are float32)."""
        return np.dtype(self.element_type.kernel_numpy)

    @property
    def writes(self) -> bool:
        """Whether the kernel may write the field (Output or InOut)."""
        return self.direction != "in"

    def describe(self) -> str:
        """Human-readable declaration, e.g. ``Input(Vector(float))``."""
        label = {"in": "Input", "out": "Output", "inout": "InOut"}[self.direction]
        inner = repr(self.element_type)
        if self.kind == "vector":
            inner = f"Vector({inner})"
        elif self.kind == "vectorlist":
            inner = f"VectorList({inner})"
        return f"{label}({inner})"

    def check(
        self, num_elements_or_sizes: int | Sequence[int], element_type: Type, where: str
    ) -> None:
        """Check that a connection fits this field.

        Parameters
        ----------
        num_elements_or_sizes
            Number of elements of the connected tensor (scalar and vector fields) or
            the list of the connected tensors' element counts (vector-list fields).
        element_type
            Element type of the connected tensor(s).
        where
            Names the connection in messages, e.g. ``"vertex 3 (SumVertex) field 'in'"``.

        Raises
        ------
        TypeMismatchError
            The element type differs from the declared one.
        GraphError
            A scalar field does not get exactly one element, a vector field gets a
            list or a vector-list field gets a single tensor.
        """
        if element_type != self.element_type:
            raise TypeMismatchError(
                f"{where}: connected tensor has element type {_type_label(element_type)} but "
                f"the field is declared {self.describe()}; hint: cast the tensor to "
                f"{self.element_type.name} or change the field's declaration"
            )
        value = num_elements_or_sizes
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if self.kind == "vectorlist":
            if isinstance(value, Integral) or not isinstance(value, Sequence):
                raise GraphError(
                    f"{where}: field is declared {self.describe()} and needs a list of "
                    f"tensors, got a single tensor ({value!r}); hint: connect a list, "
                    f"e.g. [t] for one vector"
                )
            bad = [s for s in value if not isinstance(s, Integral) or s < 0]
            if bad:
                raise GraphError(
                    f"{where}: vector sizes must be non-negative integers, got {bad[0]!r}"
                )
            return
        if not isinstance(value, Integral):
            raise GraphError(
                f"{where}: field is declared {self.describe()} and needs a single tensor, "
                f"got {value!r}; hint: declare the field VectorList to connect a list"
            )
        if self.kind == "scalar" and value != 1:
            raise GraphError(
                f"{where}: scalar field ({self.describe()}) needs exactly 1 element, the "
                f"connected tensor has {int(value)}; hint: connect one element (e.g. t[i]) "
                f"or declare the field Vector({self.element_type!r})"
            )
        if value < 0:
            raise GraphError(f"{where}: number of elements must be >= 0, got {int(value)}")


def resolve_field(class_name: str, attribute: str, decl: Any) -> FieldSpec:
    """Turn the declaration ``class_name.attribute = decl`` into a :class:`FieldSpec`.

    Raises
    ------
    CodeletError
        The declaration is not Input/Output/InOut, its element is not a Type, or its
        options are of the wrong type.
    """
    where = f"vertex class {class_name!r} field {attribute!r}"
    if not isinstance(decl, FieldDecl):
        raise CodeletError(
            f"{where}: declared as {decl!r}, which has no direction; hint: write "
            f"Input({decl!r}), Output({decl!r}) or InOut({decl!r})"
        )
    spec = decl.spec
    layout, align = "", 1
    if isinstance(spec, Vector | VectorList):
        kind: Kind = "vector" if isinstance(spec, Vector) else "vectorlist"
        element = spec.element_type
        layout, align = spec.layout.value, spec.minAlign
    else:
        kind, element = "scalar", spec
    if not isinstance(element, Type):
        raise CodeletError(
            f"{where}: element type {element!r} (a {type(element).__name__}) is not a "
            f"poplar_api Type; hint: use a constant from poplar_api.types such as FLOAT, "
            f"e.g. Input(Vector(FLOAT))"
        )
    if not isinstance(decl.interleaved, bool):
        raise CodeletError(f"{where}: interleaved must be True or False, got {decl.interleaved!r}")
    name = poplar_field_name(attribute) if decl.name is None else decl.name
    if not isinstance(name, str) or not name.isidentifier():
        raise CodeletError(
            f"{where}: field name {name!r} is not a valid identifier; hint: pass name='in' "
            f"style names (letters, digits, underscores)"
        )
    return FieldSpec(
        name=name,
        direction=decl.direction,
        kind=kind,
        element_type=element,
        interleaved=decl.interleaved,
        attribute=attribute,
        layout=layout,
        min_align=align,
    )


@dataclass
class FieldBatch:
    """Elements of one field for every vertex of a compute set, packed.

    Attributes
    ----------
    data
        1-D array in the field's kernel dtype: every vertex's elements, concatenated
        in vertex order. Kernels write outputs here in place.
    offsets
        ``int64[num_vertices + 1]``. Scalar/vector fields: vertex ``v`` owns
        ``data[offsets[v]:offsets[v + 1]]``. Vector-list fields: vertex ``v`` owns the
        inner vectors ``offsets[v] .. offsets[v + 1] - 1``.
    inner_offsets
        Vector-list fields only: ``int64[total_inner + 1]``; inner vector ``j`` is
        ``data[inner_offsets[j]:inner_offsets[j + 1]]``.
    """

    data: np.ndarray
    offsets: np.ndarray
    inner_offsets: np.ndarray | None = None

    @classmethod
    def pack(cls, per_vertex: Sequence[Any], dtype: Any) -> FieldBatch:
        """Pack one array (or scalar) per vertex for a scalar or vector field.

        ``dtype`` is the kernel dtype (``FieldSpec.kernel_dtype``).
        """
        arrays = [np.asarray(a, dtype=dtype).ravel() for a in per_vertex]
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
        return cls(data=np.ascontiguousarray(data, dtype=dtype), offsets=offsets)

    @classmethod
    def pack_lists(cls, per_vertex: Sequence[Sequence[Any]], dtype: Any) -> FieldBatch:
        """Pack one list of arrays per vertex for a vector-list field."""
        counts = np.fromiter((len(v) for v in per_vertex), dtype=np.int64, count=len(per_vertex))
        offsets = np.zeros(len(per_vertex) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        inner = cls.pack([a for vec_list in per_vertex for a in vec_list], dtype)
        return cls(data=inner.data, offsets=offsets, inner_offsets=inner.offsets)

    def unpack(self) -> list[np.ndarray]:
        """Per-vertex views of ``data`` (scalar and vector fields)."""
        bounds = self.offsets.tolist()
        return [self.data[a:b] for a, b in itertools.pairwise(bounds)]
