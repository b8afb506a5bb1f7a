"""The constants of :meth:`Graph.addConstants`: many small constants made in one call.

Libraries make tens of thousands of small constants (a convolution's worklists and
parameters, a pooling vertex's offsets, one set per vertex on its tile).
:func:`add_constants` makes them column by column, exactly as one ``addConstant`` (and
``setTileMapping``) per constant would, and :class:`Constants` hands them back as a
sequence of tensors made on demand, which :meth:`Constants.concat` joins as one field
view without a tensor per constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, overload

import numpy as np

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph_connections import _int_array
from poplar_api.graph_state import _shape_of
from poplar_api.tensor import Tensor, clip_name, concat
from poplar_api.types import Type, type_from_name

__all__ = ["Constants", "add_constants", "add_packed_constants"]


class Constants(Sequence[Tensor]):
    """The constants one :meth:`Graph.addConstants` call made, in order.

    A sequence of tensors, each made when first asked for; :meth:`concat` joins many of
    them without making one tensor per constant (libraries connect the worklists and
    parameters of thousands of vertices as one field view).
    """

    __slots__ = ("_bases", "_dims", "_flat_types", "_labels", "_made", "_sizes", "_state", "_types")

    def __init__(
        self,
        state: Any,
        types: list[Type],
        bases: np.ndarray,
        sizes: np.ndarray,
        dims: list[tuple[int, ...]],
        labels: list[str],
        flat_types: np.ndarray | None = None,
    ) -> None:
        self._state, self._types, self._dims, self._labels = state, types, dims, labels
        self._bases, self._sizes = bases, sizes
        self._made: list[Tensor | None] = [None] * len(types)
        #: when every constant is 1-D: each one's element type as a number, equal for
        #: the same Type object (``concat`` then checks the constants in one pass)
        self._flat_types = flat_types

    def __len__(self) -> int:
        return len(self._types)

    @overload
    def __getitem__(self, i: int) -> Tensor: ...

    @overload
    def __getitem__(self, i: slice) -> list[Tensor]: ...

    def __getitem__(self, i: int | slice) -> Tensor | list[Tensor]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        t = self._made[i]
        if t is None:
            t = self._made[i] = Tensor._consecutive(
                self._state, self._types[i], int(self._bases[i]), self._dims[i], self._labels[i]
            )
        return t

    def numElements(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Elements of each constant ``indices`` (int64)."""
        return self._sizes[np.asarray(indices, np.int64)]

    def concat(self, indices: Sequence[int] | np.ndarray) -> Tensor:
        """``concat([self[i] for i in indices])`` (dimension 0: the same ids, shape and
        name), without a tensor per constant. The constants must share their element
        type and their dimensions after the first."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        if idx.size == 0:
            raise TensorError("concat() needs at least one tensor, got an empty sequence")
        first = int(idx[0])
        if idx.size == 1:
            return self[first]
        type_, after = self._types[first], self._dims[first][1:]
        codes = self._flat_types
        if codes is not None:  # 1-D: one type is all to check, and the rows are the sizes
            if not bool((codes[idx] == codes[first]).all()):
                return concat([self[j] for j in idx.tolist()])  # its checks and errors
            rows = int(self._sizes[idx].sum())
        else:
            for k in idx.tolist():
                if self._types[k] is not type_ or self._dims[k][1:] != after:
                    return concat([self[j] for j in idx.tolist()])  # its checks and errors
            rows = sum(self._dims[k][0] for k in idx.tolist())
        names = [self._labels[k] for k in idx[:3].tolist()]
        if idx.size > 3:
            names.append(f"+{idx.size - 3} more")
        name = clip_name(f"concat({','.join(names)})")
        starts, sizes = self._bases[idx], self._sizes[idx]
        if np.array_equal(starts[1:], starts[:-1] + sizes[:-1]):  # one run of ids
            return Tensor._consecutive(self._state, type_, int(starts[0]), (rows, *after), name)
        ids = _runs(starts, sizes)
        return Tensor._new(self._state, type_, ids.reshape(rows, *after), name, name)


def _per_constant(value: Any, n: int, kind: str, what: str) -> list[Any]:
    """``value`` as a list of ``n`` (one value for all, or a sequence of ``n``)."""
    if isinstance(value, Type | str) or value is None:
        return [value] * n
    items = list(value)
    if len(items) != n:
        raise GraphError(f"{what}: {n} shapes but {len(items)} {kind}; give one per constant")
    return items


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The ids ``starts[k], ..., starts[k] + lengths[k] - 1`` of each run in turn."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(starts - ends + lengths, lengths)


def _fast_constants(
    types: list, shapes: Any, values: Any, labels: list, vid0: int
) -> tuple[np.ndarray, list[np.ndarray], list[tuple[int, ...]]] | None:
    """Sizes, flat value arrays and dimensions of constants that all have a Type, a
    one-int shape and a 1-D array of that many values (names filled in), or None
    when one of them does not (then each is checked on its own)."""
    n = len(types)
    if not n:
        return np.zeros(0, np.int64), [], []
    # each test a pass in C over the column (no Python statement per constant)
    if set(map(type, types)) != {Type} or set(map(type, shapes)) != {list}:
        return None
    if set(map(len, shapes)) != {1}:
        return None
    firsts = list(map(itemgetter(0), shapes))
    if set(map(type, firsts)) != {int} or set(map(type, values)) != {np.ndarray}:
        return None
    if set(map(attrgetter("ndim"), values)) != {1}:
        return None
    sizes = np.fromiter(firsts, np.int64, n)
    have = np.fromiter(map(attrgetter("size"), values), np.int64, n)
    if (sizes < 0).any() or (have != sizes).any():
        return None
    if not all(labels):
        for i in range(n):
            if not labels[i]:
                labels[i] = f"var{vid0 + i}"
    return sizes, list(values), list(zip(firsts, strict=True))


def add_constants(
    graph: Any, type_: Any, shapes: Any, values: Any, names: Any, tiles: Any
) -> Constants:
    """The constants of :meth:`Graph.addConstants`: variables, element ids, initial
    values and tiles exactly as one ``addConstant`` (and ``setTileMapping``) per
    constant would make them, in one allocation per element size."""
    what = "addConstants"
    if isinstance(shapes, str | bytes) or not hasattr(shapes, "__len__"):
        raise GraphError(f"{what}: shapes {shapes!r} must be a list of shapes, one per constant")
    n = len(shapes)
    types = _per_constant(type_, n, "types", what)
    if str in set(map(type, types)):  # Poplar's names ("float", "unsigned int")
        types = [type_from_name(t) if type(t) is str else t for t in types]
    labels = _per_constant(names, n, "names", what)
    if isinstance(values, str | bytes) or not hasattr(values, "__len__") or len(values) != n:
        got = len(values) if hasattr(values, "__len__") else type(values).__name__
        raise TensorError(f"{what}: {n} shapes but {got} value lists; give one per constant")
    state = graph._state
    vid0 = len(state.variables)
    dims_of: list[tuple[int, ...]] = []
    arrays: list[np.ndarray] = []
    sizes = np.empty(n, np.int64)
    ndarray = np.ndarray
    fast = _fast_constants(types, shapes, values, labels, vid0)
    if fast is not None:  # the common case checked a column at a time
        sizes, arrays, dims_of = fast
    for i in range(0 if fast is not None else n):
        t, shape, label = types[i], shapes[i], labels[i] or f"var{vid0 + i}"
        if type(t) is not Type and not isinstance(t, Type):
            raise TypeMismatchError(
                f"{what}: constant {i} '{label}': element type {t!r} is not a poplar_api Type "
                "(FLOAT, ...)"
            )
        if type(shape) is list and len(shape) == 1 and type(shape[0]) is int and shape[0] >= 0:
            size = shape[0]  # a list of one int: the common case, checked inline
            dims = (size,)
        else:
            dims = _shape_of(shape, f"{what}: constant {i} '{label}'")
            size = math.prod(dims)
        arr = values[i]
        if type(arr) is not ndarray:
            arr = np.asarray(arr)
        if arr.size != size:
            if arr.size != 1:
                raise TensorError(
                    f"{what}: constant {i} '{label}' has {size} elements (shape {list(dims)}) "
                    f"but {arr.size} values were given"
                )
            arr = np.broadcast_to(arr.reshape(()), (size,))
        arrays.append(arr if arr.ndim == 1 else arr.reshape(-1))
        dims_of.append(dims)
        sizes[i] = size
        labels[i] = label

    def typed_values(t: Type, idx: np.ndarray) -> np.ndarray:
        # each value array is cast to the type on its own, as ``setInitialValue`` does
        parts = arrays if idx.size == n else [arrays[k] for k in idx.tolist()]  # (one type)
        return np.concatenate(parts, dtype=t.numpy, casting="unsafe")

    return _make(graph, what, types, sizes, dims_of, labels, tiles, fast is not None, typed_values)


def add_packed_constants(
    graph: Any, type_: Any, sizes: Any, values: Any, names: Any, tiles: Any, starts: Any
) -> Constants:
    """The constants of :meth:`~poplar_api.graph_bulk.BulkGraphMethods.addPackedConstants`:
    the graph :func:`add_constants` makes of 1-D constants whose values are segments
    of one array (constant ``i``: ``sizes[i]`` values from ``starts[i]``), checked and
    cast a column at a time, with no array per constant."""
    what = "addPackedConstants"
    sizes = _int_array(sizes, f"{what}: sizes")
    n = sizes.size
    if sizes.ndim != 1 or (n and int(sizes.min()) < 0):
        raise GraphError(
            f"{what}: sizes must be a 1-D array of element counts >= 0, got shape "
            f"{list(sizes.shape)}{f' with {int(sizes.min())}' if n else ''}; hint: one size "
            "per constant"
        )
    values = np.asarray(values)
    if values.ndim != 1:
        raise TensorError(
            f"{what}: values must be 1-D (the constants' values one after another), got "
            f"shape {list(values.shape)}"
        )
    if starts is None:
        total = int(sizes.sum())
        if values.size != total:
            raise TensorError(
                f"{what}: the {n} constants hold {total} elements but {values.size} values "
                "were given; hint: their values one after another, or give starts"
            )
        starts = np.cumsum(sizes) - sizes
    else:
        starts = _int_array(starts, f"{what}: starts")
        if starts.shape != sizes.shape:
            raise GraphError(
                f"{what}: {starts.size} starts for {n} sizes; give one start per constant"
            )
        ends = starts + sizes
        bad = np.flatnonzero((starts < 0) | (ends > values.size))
        if bad.size:
            i = int(bad[0])
            raise TensorError(
                f"{what}: constant {i}: values [{int(starts[i])}, {int(ends[i])}) are not all "
                f"among the {values.size} values given"
            )
    types = _per_constant(type_, n, "types", what)
    if str in set(map(type, types)):  # Poplar's names ("float", "unsigned int")
        types = [type_from_name(t) if type(t) is str else t for t in types]
    if set(map(type, types)) - {Type}:
        i, t = next((i, t) for i, t in enumerate(types) if not isinstance(t, Type))
        raise TypeMismatchError(
            f"{what}: constant {i}: element type {t!r} is not a poplar_api Type (FLOAT, ...)"
        )
    labels = _per_constant(names, n, "names", what)
    if not all(labels):
        vid0 = len(graph._state.variables)
        labels = [label or f"var{vid0 + i}" for i, label in enumerate(labels)]
    dims_of = list(zip(sizes.tolist(), strict=True))

    def typed_values(t: Type, idx: np.ndarray) -> np.ndarray:
        if idx.size == n and np.array_equal(starts[1:], starts[:-1] + sizes[:-1]):
            s0 = int(starts[0]) if n else 0
            picked = values[s0 : s0 + int(sizes.sum())]
        else:
            picked = values[_runs(starts[idx], sizes[idx])] if idx.size else values[:0]
        return picked.astype(t.numpy, casting="unsafe")

    return _make(graph, what, types, sizes, dims_of, labels, tiles, True, typed_values)


def _make(
    graph: Any, what: str, types: list[Type], sizes: np.ndarray, dims_of: list[tuple[int, ...]],
    labels: list[str], tiles: Any, flat: bool, typed_values: Callable,
) -> Constants:  # fmt: skip
    """The constants of checked columns (``flat``: all 1-D): their tiles checked, ids
    allocated one element size at a time, variables added, and their initial values
    (``typed_values(t, idx)``: the values of constants ``idx``, all of type ``t``, one
    after another in ``t``'s dtype) kept as one part per element type."""
    state = graph._state
    n = len(types)
    vid0 = len(state.variables)
    root = None
    if tiles is not None:
        if type(tiles) is np.ndarray and tiles.shape == (n,) and tiles.dtype.kind in "iu":
            items, arr = tiles, tiles  # (no Python int per constant)
        else:
            items = _per_constant(tiles, n, "tiles", what)
            arr = np.asarray(items) if n else np.zeros(0, np.int64)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            i = next(
                (
                    k
                    for k, x in enumerate(items)
                    if type(x) is bool or not isinstance(x, int | np.integer)
                ),
                0,
            )
            raise GraphError(
                f"{what}: constant {i} '{labels[i]}': tile {items[i]!r} must be an int"
            )
        bad = np.flatnonzero((arr < 0) | (arr >= graph._num_tiles))
        if bad.size:
            i = int(bad[0])
            raise GraphError(
                f"{what}: constant {i} '{labels[i]}': tile {int(arr[i])} is out of range "
                f"[0, {graph._num_tiles}) of this graph; hint: the target has "
                "getNumTiles() tiles"
            )
        root = graph._tiles[arr.astype(np.int64)]
    # the constants of each distinct type (equal types, in order of first use), found
    # by object identity first: hashing a Type per constant is slow
    idents, first, which = np.unique(
        np.fromiter(map(id, types), np.int64, n), return_index=True, return_inverse=True
    )
    distinct: list[Type] = []
    code_of_ident = np.empty(idents.size, np.int64)
    for k in np.argsort(first, kind="stable").tolist():  # in order of first use
        t = types[int(first[k])]
        c = next((j for j, r in enumerate(distinct) if r == t), len(distinct))
        if c == len(distinct):
            distinct.append(t)
        code_of_ident[k] = c
    codes = code_of_ident[which.reshape(-1)]
    by_type = {t: np.flatnonzero(codes == c) for c, t in enumerate(distinct)}
    # one allocation per element size, in the order of the constants
    bases = np.empty(n, np.int64)
    by_size: dict[int, list[int]] = {}
    for c, t in enumerate(distinct):
        by_size.setdefault(t.size, []).append(c)
    for size_codes in by_size.values():
        sel = np.flatnonzero(np.isin(codes, size_codes))
        space = state.space(types[int(sel[0])])
        first = space.size
        bases[sel] = space.allocate_many(sizes[sel], (sel + vid0).tolist())
        if root is not None:
            space.tile[first : space.size] = np.repeat(root[sel], sizes[sel])
    base_list, size_list = bases.tolist(), sizes.tolist()
    elements = np.array([t.size for t in distinct], np.int64)[codes]
    state.variables.extend(list(types), base_list, size_list, dims_of, labels, True, elements)
    flat_types = which.reshape(-1) if flat else None
    out = Constants(state, types, bases, sizes, dims_of, labels, flat_types)
    # initial values: one part per element type (its ids a range when consecutive)
    for t, idx in by_type.items():
        b, s = bases[idx], sizes[idx]
        start, stop = int(b[0]), int(b[-1] + s[-1])
        if stop - start == int(s.sum()):
            ids: np.ndarray | range = range(start, stop)
        else:
            keep = s > 0
            ids = _runs(b[keep], s[keep])
        state.initial_parts.append((t, ids, typed_values(t, idx)))
    return out
