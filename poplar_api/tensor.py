"""Tensor views: Poplar's ``poplar::Tensor`` as an index map over graph elements.

A :class:`Tensor` holds no data. It is the triple *(graph, element type, index
array)*: the index array is an ``int64`` ndarray with the tensor's shape whose entries
are element ids in the graph's element space of that type's size (the graph gives
every variable a contiguous id range there; :meth:`Tensor.reinterpret` views the same
ids as another type of the same size). A variable's index array is made when first
asked for: its rows, dimension-0 slices and reshapes know their ids are one block and
are passed to the graph and the lowering as such, so a large variable used only
through them never holds one int64 per element. Every view operation (slice,
reshape, dimShuffle, broadcast, ...) transforms the index array with numpy, so views of
views stay numpy views where numpy can express them; only the index metadata is ever
copied (for example by :func:`concat`), never device data.

Method names and argument names follow Poplar's C++ API (camelCase). Dimensions are
non-negative as in Poplar; ``t[i]`` indexing additionally follows Python (negative
integers, slices with steps, tuples). Errors raise at the call and name the tensor,
the argument, the value found and the valid range:

* :class:`~poplar_api.errors.TensorIndexError` (an ``IndexError``) for positions and
  dimensions outside the tensor;
* :class:`~poplar_api.errors.TensorError` (a ``ValueError``) for incompatible shapes,
  bad permutations and bad counts;
* :class:`~poplar_api.errors.TypeMismatchError` (a ``TypeError``) for wrong argument
  kinds and mixed element types.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from poplar_api.errors import TensorError, TensorIndexError, TypeMismatchError
from poplar_api.tensor_views import (
    Interval,
    TensorViews,
    UpsampleMethod,
    _as_int,
    _Described,
    _fmt_shape,
)
from poplar_api.types import Type

__all__ = ["Interval", "Tensor", "UpsampleMethod", "append", "concat"]

#: Derived debug names longer than this are shortened to ``root.(...)<last op>``.
MAX_NAME_LENGTH = 80


class Tensor(TensorViews):
    """A view of graph elements with a shape, as ``poplar::Tensor``.

    Parameters
    ----------
    graph
        The graph owning the elements. Opaque here; only its identity matters
        (tensors of different graphs cannot be concatenated).
    element_type
        The element type; ids in ``index`` live in the graph's id space of its size.
    index
        Integer array of non-negative element ids with the tensor's shape. It is
        converted to ``int64`` (without copying when it already is) and exposed
        read-only; the caller's array object keeps its flags but must not be
        modified afterwards, since the tensor may share its memory.
    name
        Debug name. Views derive theirs from it, e.g. ``"v3.slice([1,1],[2,4])"``.

    Notes
    -----
    ``Tensor.index`` is the index array (the contract the Graph and Engine build on),
    so Poplar's ``Tensor::index({i, j})`` is spelled ``t[i, j]`` (or ``t[i][j]``) here.
    ``len(t)`` is ``t.dim(0)``; iteration yields ``t[0], t[1], ...``; ``bool(t)`` is
    always True (a tensor reference is valid even when it has no elements).
    """

    __slots__ = ("_flat", "_graph", "_ix", "_label", "_root", "_shape", "_start", "_type")

    def __init__(self, graph: object, element_type: Type, index: np.ndarray, name: str) -> None:
        if not isinstance(name, str):
            raise TypeMismatchError(
                f"Tensor name must be a str, got {type(name).__name__} {name!r}"
            )
        if not isinstance(element_type, Type):
            raise TypeMismatchError(
                f"tensor '{name}': element_type must be a poplar_api.types.Type such as "
                f"FLOAT, got {type(element_type).__name__} {element_type!r}"
            )
        arr = np.asarray(index)
        if arr.dtype.kind not in "iu":
            raise TypeMismatchError(
                f"tensor '{name}': index must be an integer array of element ids, "
                f"got dtype {arr.dtype}"
            )
        if arr.size and int(arr.min()) < 0:
            raise TensorError(f"tensor '{name}': element ids must be >= 0, found {int(arr.min())}")
        arr = arr.astype(np.int64, copy=False).view()
        arr.flags.writeable = False
        self._graph = graph
        self._type = element_type
        self._ix: np.ndarray | None = arr
        self._shape: tuple[int, ...] = arr.shape
        self._label: str | tuple = name
        self._root = name
        self._flat: np.ndarray | None = None
        #: first id when the ids in row-major order are known to be consecutive, else -1
        self._start = -1

    # ------------------------------------------------------------------ internals
    @classmethod
    def _new(
        cls, graph: object, element_type: Type, index: np.ndarray, name: str, root: str
    ) -> Tensor:
        """Build a tensor from an already valid int64 index array (no checks)."""
        t = object.__new__(cls)
        if index.flags.writeable:
            index = index.view()
            index.flags.writeable = False
        t._graph = graph
        t._type = element_type
        t._ix = index
        t._shape = index.shape
        t._label = name if len(name) <= MAX_NAME_LENGTH else f"{root}.(...)"
        t._root = root
        t._flat = None
        t._start = -1
        return t

    @classmethod
    def _of_ids(cls, graph: object, element_type: Type, index: np.ndarray, name: str) -> Tensor:
        """``Tensor(graph, element_type, index, name)`` for an int64 array of valid element
        ids that library code built and hands over (it is made read-only): the same
        tensor, without the checks."""
        index.flags.writeable = False
        t = object.__new__(cls)
        t._graph = graph
        t._type = element_type
        t._ix = index
        t._shape = index.shape
        t._label = name  # kept whole, as the constructor does
        t._root = name
        t._flat = None
        t._start = -1
        return t

    @classmethod
    def _consecutive(
        cls, graph: object, element_type: Type, start: int, shape: tuple[int, ...], name: str
    ) -> Tensor:
        """A tensor of the consecutive ids ``start, start + 1, ...`` in ``shape`` (a
        variable), whose index array is made only when first asked for: views that keep
        ids consecutive (rows, dimension-0 slices, reshapes) never need it."""
        t = object.__new__(cls)
        t._graph = graph
        t._type = element_type
        t._ix = None
        t._shape = tuple(shape)
        t._label = name
        t._root = name
        t._flat = None
        t._start = start
        return t

    @property
    def _index(self) -> np.ndarray:
        """The index array; a tensor of consecutive ids makes it at each use and keeps
        none (a model's activations and weights are such tensors: an int64 id kept per
        element of each held 0.7 GB of a ResNet-50 training step's graph)."""
        ix = self._ix
        if ix is None:
            n = math.prod(self._shape)
            ix = np.arange(self._start, self._start + n, dtype=np.int64).reshape(self._shape)
            ix.flags.writeable = False
        return ix

    def _flat_ids(self) -> np.ndarray | range:
        """The element ids in row-major order: a ``range`` for consecutive ids (made
        without the index array), else :meth:`flat_index`."""
        if self._start >= 0:
            return range(self._start, self._start + math.prod(self._shape))
        return self.flat_index()

    def _broadcast_row(self) -> np.ndarray | None:
        """The element ids of every position of dimension 0 (row-major), when the
        tensor repeats one row along it (a view broadcast along dimension 0, whose index
        steps by 0 there) and has more than one: the row's ids, made without the ids of
        the whole tensor; else None."""
        ix = self._ix
        if ix is None or ix.ndim == 0 or ix.shape[0] < 2 or ix.strides[0] != 0:
            return None
        row = ix[0].reshape(-1)
        if row.flags.writeable:
            row.flags.writeable = False
        return row

    def _row_ids(self) -> list[np.ndarray | range] | None:
        """The element ids of each position of dimension 0, each row-major (as
        :meth:`_flat_ids` gives the whole tensor's), without the ids of the whole: the
        rows of consecutive ids as ranges, those of a C-contiguous index as views of it,
        those of a tensor broadcast along dimension 0 as one array they share. None for
        a scalar, or when a row's ids would have to be copied out of the index."""
        if not self._shape:
            return None
        n, per = self._shape[0], math.prod(self._shape[1:])
        if self._start >= 0:
            return [range(self._start + p * per, self._start + (p + 1) * per) for p in range(n)]
        row = self._broadcast_row()
        if row is not None:
            return [row] * n
        if self._ix is None or not self._ix.flags.c_contiguous:
            return None
        flat = self.flat_index()  # (a view of the index)
        return [flat[p * per : (p + 1) * per] for p in range(n)]

    def _id_index(self) -> np.ndarray | slice:
        """What selects this tensor's elements (row-major) in an array over its id
        space: a slice for consecutive ids (no index array made), else the ids."""
        if self._start >= 0:
            return slice(self._start, self._start + math.prod(self._shape))
        return self.flat_index()

    def _derive(self, index: np.ndarray, op: str) -> Tensor:
        """A view of this tensor with index array ``index``, named ``name + op`` (when
        first asked for its name)."""
        t = Tensor._new(self._graph, self._type, index, "", self._root)
        t._label = (self._parent_label(), op)
        return t

    def _reshaped(self, shape: Sequence[int], op: str) -> Tensor:
        """This tensor's ids in another ``shape`` of the same size (in the same
        row-major order, so a tensor of consecutive ids stays one)."""
        if self._ix is None:
            return self._view(None, op, self._start, tuple(shape))
        ix = self._ix
        if self._flat is not None and not ix.flags.c_contiguous and 0 not in ix.strides:
            # the ids already copied out row-major (flat_index): a view of them, where
            # reshaping the index would copy them again
            ix = self._flat
        t = self._derive(ix.reshape(shape), op)
        t._start = self._start
        return t

    def _view(
        self,
        index: np.ndarray | None,
        op: str,
        start: int = -1,
        shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        """:meth:`_derive` for ``index``, a numpy view of this tensor's (read-only) index
        (``start``: its first id when its ids are known to be consecutive, else -1);
        ``index`` None with ``start`` and ``shape`` for consecutive ids made on use. The
        name is made when first asked for."""
        t = _new_object(Tensor)
        t._graph = self._graph
        t._type = self._type
        t._ix = index
        t._shape = index.shape if index is not None else shape
        t._label = (self._parent_label(), op)
        t._root = self._root
        t._flat = None
        t._start = start
        return t

    def _parent_label(self) -> str | tuple:
        """This tensor's label for a view of it: a view of a view of a view gets its
        parent's name made (once; it is kept), so labels nest at most two deep and a
        long chain of views is named, pickled and copied in linear time."""
        label = self._label
        if type(label) is tuple and type(label[0]) is tuple:
            return self._name
        return label

    @property
    def _name(self) -> str:
        """The debug name, made from the parent's name and the view's operation on first
        use (views are made by the million while building graphs; few are ever named)."""
        label = self._label
        if type(label) is str:
            return label
        name = _resolve_label(label, self._root)
        self._label = name
        return name

    def _describe(self) -> str:
        return f"tensor '{self._name}' (shape {_fmt_shape(self._shape)}, {self._type.name})"

    def _check_dim(
        self, dimension: Any, what: str = "dimension", *, allow_end: bool = False
    ) -> int:
        """Validate a dimension number; ``allow_end`` also accepts ``rank``."""
        # (the description only for an error: naming a view resolves its parents' names)
        d = dimension if type(dimension) is int else _as_int(dimension, what, _Described(self))
        limit = self.rank() + (1 if allow_end else 0)
        if not 0 <= d < limit:
            if limit == 0:
                raise TensorIndexError(
                    f"{self._describe()}: {what} {d} is invalid because the tensor has rank 0 "
                    f"(no dimensions). Hint: expand([0]) gives it a dimension"
                )
            raise TensorIndexError(
                f"{self._describe()}: {what} {d} is out of range; valid range is 0..{limit - 1}"
            )
        return d

    # ------------------------------------------------------------ contract API
    @property
    def graph(self) -> object:
        """The graph whose elements this tensor references."""
        return self._graph

    @property
    def index(self) -> np.ndarray:
        """Read-only int64 array of element ids, with the tensor's shape."""
        return self._index

    @property
    def name(self) -> str:
        """Debug name (derived for views, e.g. ``"v3.slice([1,1],[2,4])"``)."""
        return self._name

    def flat_index(self) -> np.ndarray:
        """Element ids in row-major order as a read-only 1-D int64 array (cached, but
        made at each use for consecutive ids, as :attr:`_index`)."""
        if self._ix is None:
            return self._index.reshape(-1)
        if self._flat is None:
            if len(self._shape) == 1:  # already flat (and read-only)
                self._flat = self._index
                return self._index
            flat = self._index.reshape(-1)
            if flat.flags.writeable:
                flat.flags.writeable = False
            self._flat = flat
        return self._flat

    # ------------------------------------------------------------- shape queries
    def shape(self) -> list[int]:
        """The dimensions of the tensor."""
        return list(self._shape)

    def rank(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    def numElements(self) -> int:
        """The number of elements (the product of the dimensions)."""
        return math.prod(self._shape)

    def elementType(self) -> Type:
        """The element type."""
        return self._type

    def dim(self, i: int) -> int:
        """The size of dimension ``i``."""
        return int(self._shape[self._check_dim(i)])

    def valid(self) -> bool:
        """Always True: every constructed Tensor refers to graph elements."""
        return True

    # ------------------------------------------------------------ element type
    def reinterpret(self, type: Type) -> Tensor:
        """The same elements seen as another element type of the same size.

        As Poplar's ``Tensor::reinterpret``: no data moves; the result is a view of the
        same device memory whose bits are read and written as ``type``. Types of one
        size reinterpret into each other: FLOAT, INT and UNSIGNED_INT (4 bytes); HALF,
        SHORT and UNSIGNED_SHORT (2 bytes); CHAR, UNSIGNED_CHAR and BOOL (1 byte).
        Values are bit-exact, as numpy's ``ndarray.view`` (a BOOL read of a non-zero
        byte is True). The shape, tile mapping and memory are the source's.

        Parameters
        ----------
        type
            The new element type (a :class:`~poplar_api.types.Type`).

        Raises
        ------
        TypeMismatchError
            ``type`` is not a Type, or its size differs from this tensor's type's.
        """
        if not isinstance(type, Type):
            raise TypeMismatchError(
                f"{self._describe()}: reinterpret needs an element type such as INT, got "
                f"{builtins.type(type).__name__} {type!r}"
            )
        if type.size != self._type.size:
            same = ", ".join(t.constant for t in _types_of_size(self._type.size))
            raise TypeMismatchError(
                f"{self._describe()}: cannot reinterpret {self._type.name} "
                f"({self._type.size} byte(s)) as {type.name} ({type.size} byte(s)); the "
                f"types must have the same size; hint: reinterpret as one of {same}, or "
                "convert the values with popops.cast"
            )
        if type == self._type:
            return self
        t = self._view(self._ix, f".reinterpret({type.name})", self._start, self._shape)
        t._type = type
        return t

    # --------------------------------------------------------------- queries
    def isContiguous(self) -> bool:
        """True if the element ids, row-major, are consecutive and increasing.

        Tensors with fewer than two elements are contiguous.
        """
        if self._start >= 0:  # known consecutive (a variable, its rows, ...)
            return True
        flat = self.flat_index()
        if flat.size < 2:
            return True
        return bool(np.all(np.diff(flat) == 1))

    def containsAliases(self) -> bool:
        """True if some element appears more than once (e.g. after broadcast).

        Consecutive ids have none, found without their index; other ids are tested in
        one compiled pass (:func:`_repeats`), not sorted, where they span a range of at
        most a few times their count (the views libraries write into in place).
        """
        if self._start >= 0:
            return False
        return bool(_repeats(self.flat_index()))

    def intersectsWith(self, other: Tensor) -> bool:
        """True if this tensor and ``other`` share at least one element."""
        if not isinstance(other, Tensor):
            raise TypeMismatchError(
                f"{self._describe()}: intersectsWith needs a Tensor, got {type(other).__name__}"
            )
        if other._graph is not self._graph or other._type.size != self._type.size:
            return False  # types of one size share elements (reinterpret views)
        return bool(np.isin(self.flat_index(), other.flat_index()).any())

    # ------------------------------------------------------- python protocol
    def __eq__(self, other: object) -> bool:
        """Poplar's equality: same graph, type and shape, and the same elements."""
        if not isinstance(other, Tensor):
            return NotImplemented
        if other._graph is not self._graph or other._type != self._type:
            return False
        if other._shape != self._shape:
            return False
        if self._start >= 0 and other._start >= 0:  # consecutive ids: the first decides
            return self._start == other._start or self.numElements() == 0
        return bool(np.array_equal(other._index, self._index))

    def __hash__(self) -> int:
        return hash((id(self._graph), self._type, self._shape))

    def __repr__(self) -> str:
        return f"Tensor('{self._name}', {self._type!r}, shape={self.shape()})"


def _types_of_size(size: int) -> list[Type]:
    """Every element type of ``size`` bytes, in Poplar's order."""
    from poplar_api.types import ALL_TYPES

    return [t for t in ALL_TYPES if t.size == size]


_new_object = object.__new__


def _resolve_label(label: tuple, root: str) -> str:
    """The name of a view labelled ``label``: its parent's name and the operation,
    shortened to ``root.(...)op`` (then ``root.(...)``) when longer than
    MAX_NAME_LENGTH, one operation at a time from the oldest."""
    chain = []
    while type(label) is tuple:
        chain.append(label)
        label = label[0]
    name = label
    for item in reversed(chain):
        op = item[1] if len(item) == 2 else item[1].format(item[2], item[3])
        name += op
        if len(name) > MAX_NAME_LENGTH:
            name = f"{root}.(...){op}"
            if len(name) > MAX_NAME_LENGTH:
                name = f"{root}.(...)"
    return name


def clip_name(name: str) -> str:
    """Shorten a derived name to at most MAX_NAME_LENGTH characters."""
    if len(name) <= MAX_NAME_LENGTH:
        return name
    return name[: MAX_NAME_LENGTH - 4] + "...)"


def _short_names(tensors: Sequence[Tensor]) -> str:
    names = [t.name for t in tensors[:3]]
    if len(tensors) > 3:
        names.append(f"+{len(tensors) - 3} more")
    return ",".join(names)


def concat(
    first: Tensor | Sequence[Tensor],
    second: Tensor | int | None = None,
    dimension: int = 0,
) -> Tensor:
    """Join tensors end to end along ``dimension``.

    ``concat([a, b, c], dimension)``, ``concat([a, b, c])`` or ``concat(a, b, dimension)``,
    as Poplar's two overloads. All tensors must belong to the same graph (identity),
    have the same element type and rank, and agree in every dimension but
    ``dimension``. The result aliases the inputs' elements.
    """
    if isinstance(first, Tensor):
        if not isinstance(second, Tensor):
            raise TypeMismatchError(
                f"concat({first.name!r}, ...): the second argument must be a Tensor, got "
                f"{type(second).__name__} {second!r}. Hint: concat([tensors], dimension)"
            )
        tensors: list[Any] = [first, second]
    else:
        if isinstance(first, str) or not isinstance(first, Sequence):
            raise TypeMismatchError(
                f"concat() needs a Tensor or a sequence of Tensors, got {type(first).__name__}"
            )
        tensors = list(first)
        if second is not None:
            if isinstance(second, Tensor) or dimension != 0:
                raise TypeMismatchError(
                    "concat(tensors, dimension): give the dimension once, as an integer"
                )
            dimension = second
    if not tensors:
        raise TensorError("concat() needs at least one tensor, got an empty sequence")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeMismatchError(
                f"concat(): item {i} must be a Tensor, got {type(t).__name__} {t!r}"
            )
    head = tensors[0]
    d = head._check_dim(dimension)
    graph, type_, shape = head._graph, head._type, head._shape
    before, after = shape[:d], shape[d + 1 :]
    for i, t in enumerate(tensors[1:], start=1):
        ts = t._shape
        if (  # same graph, type and other dimensions: the common case, checked inline
            t._graph is graph
            and t._type is type_
            and len(ts) == len(shape)
            and ts[:d] == before
            and ts[d + 1 :] == after
        ):
            continue
        if t.graph is not head.graph:
            raise TensorError(
                f"concat(): {t._describe()} (item {i}) belongs to graph {t.graph!r} but "
                f"{head._describe()} belongs to graph {head.graph!r}; tensors of "
                "different graphs cannot be joined"
            )
        if t.elementType() != head.elementType():
            raise TypeMismatchError(
                f"concat(): {t._describe()} (item {i}) has element type "
                f"{t.elementType().name} but {head._describe()} has "
                f"{head.elementType().name}; all must match"
            )
        other_dims_match = t.rank() == head.rank() and all(
            a == b for k, (a, b) in enumerate(zip(t.shape(), head.shape(), strict=True)) if k != d
        )
        if not other_dims_match:
            raise TensorError(
                f"concat() along dimension {d}: {t._describe()} (item {i}) does not match "
                f"{head._describe()}; ranks and all dimensions except {d} must be equal"
            )
    if len(tensors) == 1:
        return head
    suffix = "" if d == 0 else f";{d}"
    name = clip_name(f"concat({_short_names(tensors)}{suffix})")
    if d == 0 and head._start >= 0:  # runs one after another stay one run
        end = head._start
        for t in tensors:
            if t._start != end:
                break
            end += math.prod(t._shape)
        else:
            rows = sum(t._shape[0] for t in tensors)
            return Tensor._consecutive(graph, type_, head._start, (rows, *after), name)
        if all(t._ix is None and t._start >= 0 for t in tensors):
            # runs of consecutive ids (e.g. many small constants): their ids in one
            # vectorised step rather than one small index array per tensor
            n = len(tensors)
            starts = np.fromiter((t._start for t in tensors), np.int64, n)
            sizes = np.fromiter((math.prod(t._shape) for t in tensors), np.int64, n)
            ends = np.cumsum(sizes)
            ids = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(starts - ends + sizes, sizes)
            rows = sum(t._shape[0] for t in tensors)
            return Tensor._new(graph, type_, ids.reshape(rows, *after), name, name)
    index = np.concatenate([t._index for t in tensors], axis=d)
    return Tensor._new(graph, type_, index, name, name)


def append(first: Tensor, second: Tensor, dimension: int = 0) -> Tensor:
    """Append ``second`` as one more position of ``first`` along ``dimension``.

    ``second`` has rank ``first.rank() - 1`` and matches ``first`` in the other
    dimensions; the result is ``concat(first, second.expand([dimension]), dimension)``.
    """
    for what, t in (("first", first), ("second", second)):
        if not isinstance(t, Tensor):
            raise TypeMismatchError(f"append(): {what} must be a Tensor, got {type(t).__name__}")
    d = first._check_dim(dimension)
    if second.rank() != first.rank() - 1:
        raise TensorError(
            f"append() along dimension {d}: {second._describe()} must have rank "
            f"{first.rank() - 1}, one less than {first._describe()}"
        )
    joined = concat([first, second.expand([d])], d)
    suffix = "" if d == 0 else f";{d}"
    name = clip_name(f"append({first.name},{second.name}{suffix})")
    return Tensor._new(joined.graph, joined.elementType(), joined.index, name, name)


#: Ids spanning at most this many times their count are tested for repeats with one
#: flag per id of the span (a byte each); wider spans are sorted.
_FLAGS_PER_ID = 4


@numba.njit(cache=True, nogil=True)
def _repeats(ids):  # pragma: no cover - compiled
    """Whether some id of the 1-D array ``ids`` occurs more than once: one pass finds
    whether they ascend (then none repeats) and their least and greatest, a second
    flags each id in that span (a repeat is an id already flagged); ids spanning more
    than :data:`_FLAGS_PER_ID` times their count are sorted and neighbours compared."""
    n = ids.size
    if n < 2:
        return False
    lo = hi = np.int64(ids[0])
    ascending = True
    for k in range(1, n):
        v = np.int64(ids[k])
        if v <= ids[k - 1]:
            ascending = False
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    if ascending:
        return False
    span = hi - lo + 1
    if span < n:  # more ids than distinct values
        return True
    if span <= _FLAGS_PER_ID * n:
        seen = np.zeros(span, np.bool_)
        for k in range(n):
            j = np.int64(ids[k]) - lo
            if seen[j]:
                return True
            seen[j] = True
        return False
    s = np.sort(ids)
    for k in range(1, n):  # noqa: SIM110 (no generators in Numba)
        if s[k] == s[k - 1]:
            return True
    return False
