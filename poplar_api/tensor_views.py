"""Tensor view operations: slices, indexing, gathers, reshapes, dimension reorders,
sampling and broadcasting.

Each operation returns a new :class:`~poplar_api.tensor.Tensor` over the same
elements: it transforms the index array with numpy (a numpy view where numpy can
express it) and keeps a tensor of consecutive ids consecutive where it can (rows,
dimension-0 slices, reshapes, runs of :meth:`TensorViews.elements`), so graphs and
lowering handle it as a run. :class:`~poplar_api.tensor.Tensor` inherits them; the
argument checks raise the errors described in :mod:`poplar_api.tensor`.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from poplar_api.errors import TensorError, TensorIndexError, TypeMismatchError

if TYPE_CHECKING:
    from poplar_api.tensor import Tensor

__all__ = ["Interval", "TensorViews", "UpsampleMethod", "piece_runs"]

#: Operations of lazily named views (``(parent label, format, a, b)`` labels).
_ITEM = "[{}]"
#: The ids :func:`_take` gets when a view's ids are computed from its start: read-only
#: like a tensor's own index, so that both calls use one compiled ``_take``.
_NO_IDS = np.empty(0, np.int64)
_NO_IDS.flags.writeable = False
_SLICE = ".slice({},{})"
_new_object = object.__new__
_minimum = np.minimum.reduce
_maximum = np.maximum.reduce


@numba.njit(cache=True, nogil=True)
def _take(src, start, pos, n, out):  # pragma: no cover - compiled
    # out[k] = src[pos[k]] (start + pos[k] when start >= 0: consecutive ids): (first k
    # whose position is outside [0, n) or -1, positions ascending consecutive?, ids
    # ascending consecutive?). The positions' bounds come from one pass without a
    # branch (their least and greatest), the gather tests nothing per element and
    # each run test stops at its first break: on C-contiguous arrays (TAKE_TYPES) some
    # 8 instructions an element, where one loop testing everything at every element
    # over arrays of any strides took 22 (4 M elements a PopART CNN build).
    m = pos.size
    pos_run = True
    for k in range(1, m):
        if pos[k] != pos[k - 1] + 1:
            pos_run = False
            break
    lo = pos[0] if m else 0
    hi = lo
    for k in range(m):
        p = pos[k]
        lo = min(lo, p)
        hi = max(hi, p)
    if lo < 0 or hi >= n:
        for k in range(m):
            if pos[k] < 0 or pos[k] >= n:
                return k, False, False
    if start >= 0:
        for k in range(m):
            out[k] = start + pos[k]
    else:
        for k in range(m):
            out[k] = src[np.uint64(pos[k])]  # (in bounds: unsigned, no test for < 0)
    id_run = True
    for k in range(1, m):
        if out[k] != out[k - 1] + 1:
            id_run = False
            break
    return -1, pos_run, id_run


#: The one tuple of argument types :func:`_take` is compiled for: a view's ids and the
#: positions taken, read-only C-contiguous int64 (a strided index or positions are
#: copied first: indexing arrays of any strides costs the gather twice the
#: instructions). Numba compiles a function once per tuple of types, and C-contiguous
#: and strided ids, or int32 and int64 positions, are two.
TAKE_TYPES = (
    numba.types.Array(numba.types.int64, 1, "C", readonly=True),
    numba.types.int64,
    numba.types.Array(numba.types.int64, 1, "C", readonly=True),
    numba.types.int64,
    numba.types.int64[::1],
)


def _compiled_take() -> Any:
    """:func:`_take` compiled (or loaded from the disk cache) for :data:`TAKE_TYPES`
    alone; other types are not compiled (callers hand it C-contiguous arrays)."""
    if not _take.overloads:
        _take.compile(TAKE_TYPES)
        _take.disable_compile()
    return _take


@numba.njit(cache=True, nogil=True)
def _is_run(flat):  # pragma: no cover - compiled
    # ascending consecutive ids? (stops at the first break; no generators in Numba)
    for k in range(1, flat.size):  # noqa: SIM110
        if flat[k] != flat[k - 1] + 1:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def piece_runs(ids, begins, sizes, out):  # pragma: no cover - compiled
    """``out[i]``: whether piece ``ids[begins[i] : begins[i] + sizes[i]]`` is a run of
    ascending consecutive ids (empty pieces are not); each piece compared until its
    first break. The pieces must lie within ``ids``."""
    for i in range(sizes.shape[0]):
        a, n = begins[i], sizes[i]
        run = n > 0
        for k in range(a + 1, a + n):
            if ids[k] != ids[k - 1] + 1:
                run = False
                break
        out[i] = run


class UpsampleMethod(enum.Enum):
    """How :meth:`Tensor.upsample` fills the new positions (Poplar has only REPEAT)."""

    REPEAT = "REPEAT"


class _Described:
    """A tensor's description for error messages, formatted only when one is raised."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self._tensor = tensor

    def __format__(self, spec: str) -> str:
        return format(self._tensor._describe(), spec)

    def __str__(self) -> str:
        return self._tensor._describe()


def _as_int(value: Any, what: str, context: Any) -> int:
    """Return ``value`` as a Python int, rejecting bools, floats and other kinds."""
    if isinstance(value, bool | np.bool_):
        raise TypeMismatchError(f"{context}: {what} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeMismatchError(
            f"{context}: {what} must be an integer, got {type(value).__name__} {value!r}"
        ) from None


def _as_int_list(values: Any, what: str, context: Any) -> list[int]:
    """Return a sequence of integers as a list, with the errors of :func:`_as_int`."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeMismatchError(
            f"{context}: {what} must be a sequence of integers, "
            f"got {type(values).__name__} {values!r}"
        )
    return [_as_int(v, f"{what}[{i}]", context) for i, v in enumerate(values)]


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(map(str, map(int, shape))) + "]"


class Interval:
    """A half-open range ``[begin, end)`` of positions, as ``poplar::Interval``.

    Parameters
    ----------
    begin, end
        Integers with ``0 <= begin <= end``.
    """

    __slots__ = ("_begin", "_end")

    def __init__(self, begin: int, end: int) -> None:
        b = _as_int(begin, "begin", "Interval")
        e = _as_int(end, "end", "Interval")
        if not 0 <= b <= e:
            raise TensorError(f"Interval({b}, {e}) is invalid: require 0 <= begin <= end")
        self._begin = b
        self._end = e

    def begin(self) -> int:
        """First position in the interval."""
        return self._begin

    def end(self) -> int:
        """One past the last position in the interval."""
        return self._end

    def size(self) -> int:
        """Number of positions, ``end - begin``."""
        return self._end - self._begin

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Interval):
            return NotImplemented
        return self._begin == other._begin and self._end == other._end

    def __hash__(self) -> int:
        return hash((Interval, self._begin, self._end))

    def __repr__(self) -> str:
        return f"Interval({self._begin}, {self._end})"


class TensorViews:
    """The view operations of :class:`~poplar_api.tensor.Tensor` (see the module
    docstring)."""

    __slots__ = ()

    # --------------------------------------------------------------- slicing
    def slice(
        self,
        begin: int | Sequence[int] | Interval,
        end: int | Sequence[int] | None = None,
        dimension: int = 0,
    ) -> Tensor:
        """Return the sub-tensor in a range of positions.

        Three forms, as in Poplar:

        * ``slice(begin, end, dimension=0)``: positions ``[begin, end)`` of one
          dimension, ``0 <= begin <= end <= dim(dimension)``;
        * ``slice(begins, ends)``: one range per dimension (lists of length ``rank``),
          e.g. ``v3.slice([1, 1], [2, 4])``;
        * ``slice(Interval(begin, end), dimension=0)``.

        The rank is unchanged; an empty range gives a dimension of size 0.
        """
        if type(begin) is int and type(end) is int and type(dimension) is int and dimension == 0:
            shape = self._shape  # slice(b, e) of dimension 0: the common case, inline
            if shape and 0 <= begin <= end <= shape[0]:
                start = self._start
                one_dim = len(shape) == 1
                if start >= 0 and begin:  # rows of a consecutive tensor: still consecutive
                    start += begin if one_dim else begin * math.prod(shape[1:])
                t = _new_object(type(self))
                t._graph = self._graph
                t._type = self._type
                ix = self._ix
                if ix is None:
                    t._ix = None
                    t._shape = (end - begin,) if one_dim else (end - begin, *shape[1:])
                else:
                    t._ix = ix = ix[begin:end]
                    t._shape = ix.shape
                t._label = (self._parent_label(), _SLICE, begin, end)
                t._root = self._root
                t._flat = None
                t._start = start
                return t
        if isinstance(begin, Interval):
            if end is not None:
                if dimension != 0:
                    raise TypeMismatchError(
                        f"{self._describe()}: slice(Interval, ...) takes one dimension, "
                        f"got both {end!r} and dimension={dimension!r}"
                    )
                dimension = end  # slice(Interval(b, e), dim) passed positionally
            return self._slice_one(begin.begin(), begin.end(), dimension)
        if isinstance(begin, Sequence | np.ndarray) and not isinstance(begin, str):
            return self._slice_multi(begin, end, dimension)
        if end is None:
            raise TypeMismatchError(
                f"{self._describe()}: slice({begin!r}) needs an end position, "
                "e.g. slice(begin, end, dimension) or slice(Interval(begin, end))"
            )
        return self._slice_one(begin, end, dimension)

    def _slice_one(self, begin: Any, end: Any, dimension: Any) -> Tensor:
        ctx = _Described(self)
        d = self._check_dim(dimension)
        b = _as_int(begin, "slice begin", ctx)
        e = _as_int(end, "slice end", ctx)
        size = self._shape[d]
        if not 0 <= b <= e <= size:
            raise TensorIndexError(
                f"{ctx}: slice [{b}, {e}) of dimension {d} is out of range; "
                f"require 0 <= begin <= end <= {size}"
            )
        key = (slice(None),) * d + (slice(b, e),)
        op = f".slice({b},{e})" if d == 0 else f".slice({b},{e},{d})"
        return self._derive(self._index[key], op)

    def _slice_multi(self, begins: Any, ends: Any, dimension: Any) -> Tensor:
        ctx = _Described(self)
        if dimension != 0:
            raise TypeMismatchError(
                f"{ctx}: slice(begins, ends) slices every dimension and takes no "
                f"dimension argument, got dimension={dimension!r}"
            )
        bs = _as_int_list(begins, "begins", ctx)
        es = _as_int_list(ends, "ends", ctx)
        if len(bs) != self.rank() or len(es) != self.rank():
            raise TensorError(
                f"{ctx}: slice(begins={bs}, ends={es}) needs one begin and one end per "
                f"dimension ({self.rank()} each)"
            )
        for d, (b, e, size) in enumerate(zip(bs, es, self._shape, strict=True)):
            if not 0 <= b <= e <= size:
                raise TensorIndexError(
                    f"{ctx}: slice(begins={bs}, ends={es}): range [{b}, {e}) of dimension "
                    f"{d} is out of range; require 0 <= begin <= end <= {size}"
                )
        key = tuple(slice(b, e) for b, e in zip(bs, es, strict=True))
        return self._derive(self._index[key], f".slice({_fmt_shape(bs)},{_fmt_shape(es)})")

    def slices(
        self, intervals: Sequence[Interval | tuple[int, int] | int], dimension: int = 0
    ) -> list[Tensor]:
        """Return one slice per interval along ``dimension``.

        Each item may be an :class:`Interval`, a ``(begin, end)`` pair or a single
        position ``i`` (meaning ``[i, i + 1)``, as Poplar's ``slices(indices)``).
        """
        ctx = _Described(self)
        if isinstance(intervals, str) or not isinstance(intervals, Sequence):
            raise TypeMismatchError(
                f"{ctx}: slices() needs a sequence of Interval, (begin, end) pairs or "
                f"positions, got {type(intervals).__name__}"
            )
        out = []
        for item in intervals:
            if isinstance(item, Interval):
                out.append(self._slice_one(item.begin(), item.end(), dimension))
            elif isinstance(item, tuple) and len(item) == 2:
                out.append(self._slice_one(item[0], item[1], dimension))
            else:
                i = _as_int(item, "slices position", ctx)
                out.append(self._slice_one(i, i + 1, dimension))
        return out

    # ------------------------------------------------------------ gathering
    def elements(self, indices: Any) -> Tensor:
        """A view of this tensor's flattened elements at positions ``indices``.

        The bulk way to make a view of scattered elements (libraries build the
        per-tile or per-vertex views of a convolution or reduction this way): element
        ``k`` of the result (row-major, in the shape of ``indices``) is flat element
        ``indices[k]`` of this tensor. Positions in one ascending consecutive run give
        a view known to be consecutive, which graphs and lowering keep as a run.

        Parameters
        ----------
        indices
            Integers ``0 <= i < numElements()``: an int array of any shape, a list, a
            ``range`` of step 1, or one int (a rank-0 view).

        Raises
        ------
        TypeMismatchError
            ``indices`` does not hold integers.
        TensorIndexError
            A position outside ``[0, numElements())`` (the message names the first).
        """
        n = math.prod(self._shape)
        if type(indices) is range and indices.step == 1:
            b, e = indices.start, max(indices.start, indices.stop)
            if not 0 <= b <= e <= n:
                raise TensorIndexError(
                    f"{self._describe()}: elements({indices!r}) is outside positions "
                    f"[0, {n}) of the flattened tensor"
                )
            return self._elements_run(b, (e - b,))
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            if idx.size or idx.dtype.kind != "f":
                raise TypeMismatchError(
                    f"{self._describe()}: elements() needs integer positions, got "
                    f"{type(indices).__name__} of dtype {idx.dtype}"
                )
            idx = idx.astype(np.int64)
        size = idx.size
        if size > 64:
            return self._elements_gathered(idx, n)
        if size:
            flat = idx.reshape(-1)
            if not flat.dtype.isnative:  # compiled code reads native byte order only
                flat = flat.astype(flat.dtype.newbyteorder("="))
            wide = flat.astype(np.int64)  # differences in int64: unsigned ones would wrap
            run = size == 1 or bool((wide[1:] - wide[:-1] == 1).all())
            low, high = _minimum(flat), _maximum(flat)
            if run and low >= 0 and high < n:  # ascending consecutive positions: a run
                return self._elements_run(int(flat[0]), idx.shape)
            if int(low) < 0 or int(high) >= n:
                k = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
                raise TensorIndexError(
                    f"{self._describe()}: elements(): indices[{k}] = {int(flat[k])} is out of "
                    f"range; flat positions are 0..{n - 1}; hint: positions index the "
                    "flattened tensor (row-major)"
                )
        if self._start >= 0:
            index = idx.astype(np.int64) + self._start
            index.flags.writeable = False
            return self._view(index, ".elements(...)")
        return self._elements_of(self.flat_index()[idx])

    def _elements_gathered(self, idx: np.ndarray, n: int) -> Tensor:
        """:meth:`elements` of more than a few positions: ids gathered, positions checked
        and both tested for runs in one compiled pass."""
        # (int64: no wrap-around) C-contiguous, the one type _take is compiled for
        flat = np.ascontiguousarray(idx.reshape(-1), np.int64)
        flat = flat.view()  # read-only however the caller holds it: one compiled _take
        flat.flags.writeable = False
        out = np.empty(flat.size, np.int64)
        src = _NO_IDS
        if self._start < 0:
            src = self.flat_index()
            if not src.flags.c_contiguous:  # (a broadcast or strided 1-D index)
                src = np.ascontiguousarray(src)
                src.flags.writeable = False
        bad, pos_run, id_run = _compiled_take()(src, self._start, flat, n, out)
        if bad >= 0:
            raise TensorIndexError(
                f"{self._describe()}: elements(): indices[{bad}] = {idx.reshape(-1)[bad]} is "
                f"out of range; flat positions are 0..{n - 1}; hint: positions index the "
                "flattened tensor (row-major)"
            )
        if pos_run:  # ascending consecutive positions: a run of this tensor
            return self._elements_run(int(flat[0]), idx.shape)
        index = out.reshape(idx.shape)
        index.flags.writeable = False
        start = int(out[0]) if id_run and self._start < 0 else -1
        return self._view(index, ".elements(...)", start)

    def _elements_run(self, begin: int, shape: tuple[int, ...]) -> Tensor:
        """:meth:`elements` of the consecutive positions ``begin, begin + 1, ...``."""
        if self._start >= 0:
            return self._view(None, ".elements(...)", self._start + begin, tuple(shape))
        return self._elements_of(self.flat_index()[begin : begin + math.prod(shape)].reshape(shape))

    def _elements_of(self, index: np.ndarray) -> Tensor:
        """A view with element ids ``index``, known to be consecutive when they are."""
        if index.flags.writeable:
            index.flags.writeable = False
        flat = index.reshape(-1)
        spans = flat.size and int(flat[-1]) - int(flat[0]) == flat.size - 1
        consecutive = spans and (flat.size == 1 or bool(_is_run(flat)))
        start = int(flat[0]) if consecutive else -1
        return self._view(index, ".elements(...)", start)

    # -------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        """Index like Python/numpy basic indexing.

        An integer selects one position of dimension 0 and drops that dimension
        (Poplar's ``operator[]``); negative integers count from the end. Slices
        (with steps), ``...``, ``None`` (a new dimension of size 1) and tuples of
        these are accepted. Lists and arrays (gathers) are not: a Tensor is a view.
        """
        if type(key) is int:  # t[i]: the common case, checked inline
            shape = self._shape
            if shape and -shape[0] <= key < shape[0]:
                start = self._start
                if start >= 0:  # a row of a consecutive tensor: still consecutive
                    rest = len(shape)
                    stride = 1 if rest == 1 else shape[1] if rest == 2 else math.prod(shape[1:])
                    start += (key % shape[0]) * stride
                t = _new_object(type(self))
                t._graph = self._graph
                t._type = self._type
                ix = self._ix
                t._ix = None if ix is None else ix[key, ...]
                t._shape = shape[1:]
                t._label = (self._parent_label(), _ITEM, key, None)
                t._root = self._root
                t._flat = None
                t._start = start
                return t
        ctx = _Described(self)
        items = key if isinstance(key, tuple) else (key,)
        norm: list[Any] = []
        consumed = 0
        ellipses = 0
        for item in items:
            if item is Ellipsis:
                ellipses += 1
                norm.append(item)
            elif item is None:
                norm.append(item)
            elif isinstance(item, slice):
                parts = [
                    None if p is None else _as_int(p, "slice bound", ctx)
                    for p in (item.start, item.stop, item.step)
                ]
                if parts[2] == 0:
                    raise TensorError(f"{ctx}: index {key!r} has a slice step of 0")
                norm.append(slice(*parts))
                consumed += 1
            elif isinstance(item, bool | np.bool_) or not hasattr(item, "__index__"):
                raise TypeMismatchError(
                    f"{ctx}: index {key!r} contains {type(item).__name__} {item!r}; "
                    "use integers, slices, ... or None. Hint: a Tensor is a view and has "
                    "no gather; concat() slices to combine positions"
                )
            else:
                norm.append(operator.index(item))
                consumed += 1
        if ellipses > 1:
            raise TensorIndexError(f"{ctx}: index {key!r} has more than one '...'")
        rank = self.rank()
        if consumed > rank:
            raise TensorIndexError(
                f"{ctx}: index {key!r} indexes {consumed} dimensions but the tensor has rank {rank}"
            )
        d = 0
        for item in norm:
            if item is Ellipsis:
                d += rank - consumed
            elif isinstance(item, slice):
                d += 1
            elif isinstance(item, int):
                size = self._shape[d]
                if not -size <= item < size:
                    valid = f"valid range is {-size}..{size - 1}" if size else "it has size 0"
                    raise TensorIndexError(
                        f"{ctx}: index {item} of dimension {d} is out of range; {valid}"
                    )
                d += 1
        full = tuple(norm) if ellipses else (*norm, Ellipsis)
        ix = self._ix
        index = _block_ids(self._start, self._shape, full) if ix is None else ix[full]
        return self._derive(index, "[" + ",".join(map(_fmt_key, norm)) + "]")

    def __len__(self) -> int:
        if self.rank() == 0:
            raise TensorError(f"{self._describe()}: len() of a rank-0 tensor is undefined")
        return int(self._shape[0])

    def __iter__(self) -> Iterator[Tensor]:
        """Yield ``self[0], self[1], ...`` along dimension 0."""
        n = len(self)
        for i in range(n):
            yield self[i]

    def __bool__(self) -> bool:
        return True

    # ------------------------------------------------------------- reshaping
    def reshape(self, shape: Sequence[int]) -> Tensor:
        """Return the same elements, row-major, with a new shape of equal size."""
        ctx = _Described(self)
        new = _as_int_list(shape, "shape", ctx)
        if any(s < 0 for s in new):
            raise TensorError(f"{ctx}: reshape to {_fmt_shape(new)}: dimensions must be >= 0")
        if math.prod(new) != self.numElements():
            raise TensorError(
                f"{ctx}: cannot reshape {self.numElements()} elements to {_fmt_shape(new)} "
                f"({math.prod(new)} elements); the element counts must match"
            )
        return self._reshaped(new, f".reshape({_fmt_shape(new)})")

    def reshapePartial(self, beginIndex: int, endIndex: int, newDims: Sequence[int]) -> Tensor:
        """Replace dimensions ``[beginIndex, endIndex)`` by ``newDims`` (same size)."""
        ctx = _Described(self)
        b = self._check_dim(beginIndex, "beginIndex", allow_end=True)
        e = self._check_dim(endIndex, "endIndex", allow_end=True)
        if b > e:
            raise TensorIndexError(
                f"{ctx}: reshapePartial needs beginIndex <= endIndex, got {b} > {e}"
            )
        dims = _as_int_list(newDims, "newDims", ctx)
        old = self.shape()
        if any(s < 0 for s in dims) or math.prod(dims) != math.prod(old[b:e]):
            raise TensorError(
                f"{ctx}: reshapePartial({b}, {e}, {_fmt_shape(dims)}): dimensions "
                f"{_fmt_shape(old[b:e])} hold {math.prod(old[b:e])} elements per position, "
                f"newDims must hold the same and be >= 0"
            )
        new = old[:b] + dims + old[e:]
        return self._reshaped(new, f".reshapePartial({b},{e},{_fmt_shape(dims)})")

    def flatten(self, dimBegin: int | None = None, dimEnd: int | None = None) -> Tensor:
        """Flatten to 1-D, or merge dimensions ``[dimBegin, dimEnd)`` into one."""
        if dimBegin is None and dimEnd is None:
            return self._reshaped((self.numElements(),), ".flatten()")
        ctx = _Described(self)
        if dimBegin is None or dimEnd is None:
            raise TypeMismatchError(
                f"{ctx}: flatten() takes no arguments or both dimBegin and dimEnd"
            )
        b = self._check_dim(dimBegin, "dimBegin", allow_end=True)
        e = self._check_dim(dimEnd, "dimEnd", allow_end=True)
        if b >= e:
            raise TensorIndexError(
                f"{ctx}: flatten({b}, {e}) needs dimBegin < dimEnd <= rank ({self.rank()})"
            )
        old = self.shape()
        new = [*old[:b], math.prod(old[b:e]), *old[e:]]
        return self._reshaped(new, f".flatten({b},{e})")

    def expand(self, indices: Sequence[int]) -> Tensor:
        """Insert singleton dimensions.

        Each entry of ``indices`` is a position ``0..rank`` in this tensor's
        dimensions before which a size-1 dimension is inserted; repeat an index to
        insert several there. E.g. shape ``[2,3]`` with ``expand([0, 2])`` gives
        ``[1,2,3,1]``.
        """
        ctx = _Described(self)
        idx = [
            self._check_dim(i, "expand index", allow_end=True)
            for i in _as_int_list(indices, "indices", ctx)
        ]
        old = self.shape()
        new: list[int] = []
        for pos in range(len(old) + 1):
            new.extend([1] * idx.count(pos))
            if pos < len(old):
                new.append(old[pos])
        return self._reshaped(new, f".expand({_fmt_shape(idx)})")

    def squeeze(self, indices: Sequence[int]) -> Tensor:
        """Remove the size-1 dimensions numbered ``indices`` (distinct, each of size 1)."""
        ctx = _Described(self)
        idx = [self._check_dim(i, "squeeze index") for i in _as_int_list(indices, "indices", ctx)]
        if len(set(idx)) != len(idx):
            raise TensorError(f"{ctx}: squeeze({idx}) names a dimension twice")
        old = self.shape()
        for i in idx:
            if old[i] != 1:
                raise TensorError(
                    f"{ctx}: squeeze({idx}): dimension {i} has size {old[i]}, only size-1 "
                    "dimensions can be squeezed"
                )
        new = [s for i, s in enumerate(old) if i not in idx]
        return self._reshaped(new, f".squeeze({_fmt_shape(idx)})")

    # ---------------------------------------------------- dimension reordering
    def transpose(self) -> Tensor:
        """Swap the two dimensions of a rank-2 tensor."""
        if self.rank() != 2:
            raise TensorError(
                f"{self._describe()}: transpose() needs a rank-2 tensor, this one has rank "
                f"{self.rank()}. Hint: use dimShuffle(permutation) for other ranks"
            )
        return self._derive(self._index.T, ".transpose()")

    def dimShuffle(self, permutation: Sequence[int]) -> Tensor:
        """Reorder dimensions: dimension ``i`` of the result is ``permutation[i]`` of this.

        Element ``[a][b][c]`` moves to ``[c][a][b]`` under permutation ``[2, 0, 1]``.
        """
        ctx = _Described(self)
        perm = _as_int_list(permutation, "permutation", ctx)
        if sorted(perm) != list(range(self.rank())):
            raise TensorError(
                f"{ctx}: dimShuffle({perm}) is not a permutation of 0..{self.rank() - 1}; "
                f"it must list each dimension exactly once"
            )
        return self._derive(np.transpose(self._index, perm), f".dimShuffle({_fmt_shape(perm)})")

    def dimShufflePartial(self, source: Sequence[int], destination: Sequence[int]) -> Tensor:
        """Move dimensions ``source[i]`` to positions ``destination[i]``.

        The other dimensions keep their relative order.
        """
        ctx = _Described(self)
        src = [self._check_dim(s, "source dimension") for s in _as_int_list(source, "source", ctx)]
        dst = [
            self._check_dim(s, "destination dimension")
            for s in _as_int_list(destination, "destination", ctx)
        ]
        if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise TensorError(
                f"{ctx}: dimShufflePartial({src}, {dst}) needs equally long lists of "
                "distinct dimensions"
            )
        return self._derive(
            np.moveaxis(self._index, src, dst),
            f".dimShufflePartial({_fmt_shape(src)},{_fmt_shape(dst)})",
        )

    def dimRoll(self, dimIdx: int, newIdx: int = 0) -> Tensor:
        """Move dimension ``dimIdx`` to position ``newIdx``; the others keep their order."""
        src = self._check_dim(dimIdx, "dimIdx")
        dst = self._check_dim(newIdx, "newIdx")
        return self._derive(np.moveaxis(self._index, src, dst), f".dimRoll({src},{dst})")

    def reverse(self, dimension: int) -> Tensor:
        """Reverse the order of positions along ``dimension``."""
        d = self._check_dim(dimension)
        return self._derive(np.flip(self._index, d), f".reverse({d})")

    # ------------------------------------------------------ sampling, repeating
    def subSample(self, stride: int, dimension: int) -> Tensor:
        """Keep every ``stride``-th position (0, stride, 2*stride, ...) of ``dimension``."""
        ctx = _Described(self)
        s = _as_int(stride, "stride", ctx)
        d = self._check_dim(dimension)
        if s < 1:
            raise TensorError(f"{ctx}: subSample stride must be >= 1, got {s}")
        key = (slice(None),) * d + (slice(None, None, s),)
        return self._derive(self._index[key], f".subSample({s},{d})")

    def broadcast(self, N: int, dim: int) -> Tensor:
        """Repeat the whole tensor ``N`` times along ``dim`` (Poplar's broadcast).

        The copies are laid end to end, like ``numpy.tile``: ``[a, b].broadcast(2, 0)``
        is ``[a, b, a, b]``; on a size-1 dimension this is the usual broadcast. Use
        :meth:`upsample` to repeat each position instead. ``N = 0`` gives an empty
        dimension. All copies alias the same elements.
        """
        ctx = _Described(self)
        n = _as_int(N, "N", ctx)
        d = self._check_dim(dim, "dim")
        if n < 0:
            raise TensorError(f"{ctx}: broadcast count N must be >= 0, got {n}")
        old = self.shape()
        spread = np.broadcast_to(np.expand_dims(self._index, d), [*old[:d], n, *old[d:]])
        new = [*old[:d], n * old[d], *old[d + 1 :]]
        return self._derive(spread.reshape(new), f".broadcast({n},{d})")

    def upsample(
        self, scale: int, dimension: int, method: UpsampleMethod = UpsampleMethod.REPEAT
    ) -> Tensor:
        """Repeat each position of ``dimension`` ``scale`` times (``numpy.repeat``).

        ``[[1,2,3]]`` upsampled by 2 in dimension 1 is ``[[1,1,2,2,3,3]]``; scale 0
        gives an empty dimension and scale 1 is the identity.
        """
        ctx = _Described(self)
        s = _as_int(scale, "scale", ctx)
        d = self._check_dim(dimension)
        if method is not UpsampleMethod.REPEAT:
            raise TypeMismatchError(
                f"{ctx}: upsample method must be UpsampleMethod.REPEAT, got {method!r}"
            )
        if s < 0:
            raise TensorError(f"{ctx}: upsample scale must be >= 0, got {s}")
        old = self.shape()
        spread = np.broadcast_to(
            np.expand_dims(self._index, d + 1), [*old[: d + 1], s, *old[d + 1 :]]
        )
        new = [*old[:d], old[d] * s, *old[d + 1 :]]
        return self._derive(spread.reshape(new), f".upsample({s},{d})")


def _block_ids(start: int, shape: tuple[int, ...], key: tuple) -> np.ndarray:
    """The ids of ``key`` (basic indexing) in a tensor of ``shape`` holding the
    consecutive ids from ``start``, made without the ids of the whole tensor (a slice
    of a large weight, a serial convolution's, would keep them all as its base): the
    sum of each dimension's id step, broadcast over the shape and indexed by ``key``."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    out = np.full((), start, np.int64)
    for d, (size, stride) in enumerate(zip(shape, strides, strict=True)):
        axis = np.arange(size, dtype=np.int64) * stride
        axis = axis.reshape((1,) * d + (size,) + (1,) * (len(shape) - d - 1))
        out = out + np.broadcast_to(axis, shape)[key]
    out = np.asarray(out, np.int64)  # (a numpy scalar for one element: made an array)
    out.flags.writeable = False
    return out


def _fmt_key(item: Any) -> str:
    """Compact text of one normalised ``__getitem__`` key item, for debug names."""
    if item is Ellipsis:
        return "..."
    if item is None:
        return "None"
    if isinstance(item, slice):
        text = ("" if item.start is None else str(item.start)) + ":"
        text += "" if item.stop is None else str(item.stop)
        if item.step is not None:
            text += f":{item.step}"
        return text
    return str(item)
