"""Element types: names, sizes, storage and kernel dtypes, lookup by name."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from poplar_api import types as pt
from poplar_api.errors import GraphError, PoplarError, TypeMismatchError

# (constant, Poplar name, bytes, storage dtype, kernel dtype, floating, integral)
TABLE = [
    (pt.FLOAT, "FLOAT", "float", 4, np.float32, np.float32, True, False),
    (pt.HALF, "HALF", "half", 2, np.float16, np.float32, True, False),
    (pt.INT, "INT", "int", 4, np.int32, np.int32, False, True),
    (pt.UNSIGNED_INT, "UNSIGNED_INT", "unsigned int", 4, np.uint32, np.uint32, False, True),
    (pt.SHORT, "SHORT", "short", 2, np.int16, np.int16, False, True),
    (pt.UNSIGNED_SHORT, "UNSIGNED_SHORT", "unsigned short", 2, np.uint16, np.uint16, False, True),
    (pt.CHAR, "CHAR", "char", 1, np.int8, np.int8, False, True),
    (pt.UNSIGNED_CHAR, "UNSIGNED_CHAR", "unsigned char", 1, np.uint8, np.uint8, False, True),
    (pt.BOOL, "BOOL", "bool", 1, np.bool_, np.bool_, False, False),
]


@pytest.mark.parametrize(
    ("t", "constant", "name", "size", "storage", "kernel", "floating", "integral"), TABLE
)
def test_type_attributes(t, constant, name, size, storage, kernel, floating, integral) -> None:
    assert t.name == name
    assert str(t) == name
    assert t.toString() == name
    assert repr(t) == constant
    assert t.size == size
    # The device size agrees with the storage dtype's itemsize.
    assert np.dtype(storage).itemsize == size
    assert t.numpy == np.dtype(storage)
    assert t.kernel_numpy == np.dtype(kernel)
    assert t.is_floating is floating
    assert t.is_integral is integral


@pytest.mark.parametrize("row", TABLE, ids=[r[1] for r in TABLE])
def test_lookup_by_poplar_name_and_constant_name(row) -> None:
    t, constant, name = row[0], row[1], row[2]
    assert pt.type_from_name(name) is t
    assert pt.type_from_name(constant) is t
    assert pt.type_from_name(t) is t


def test_all_types_lists_the_nine_constants_once() -> None:
    assert len(pt.ALL_TYPES) == 9
    assert set(pt.ALL_TYPES) == {row[0] for row in TABLE}


def test_half_is_stored_narrow_and_computed_wide() -> None:
    # 1/3 stored as float16 is 0.333251953125 (binary 0.0101010101 with 11 significant
    # bits: 1365/4096); widened to float32 it keeps that exact value.
    stored = np.asarray(1 / 3).astype(pt.HALF.numpy)
    assert float(stored) == 1365 / 4096
    assert float(stored.astype(pt.HALF.kernel_numpy)) == 1365 / 4096


def test_types_are_frozen_and_hashable() -> None:
    with pytest.raises(AttributeError):
        pt.FLOAT.size = 8  # type: ignore[misc]
    assert {pt.FLOAT: 1}[pt.type_from_name("float")] == 1
    assert pt.FLOAT != pt.INT


def test_pickle_round_trip_keeps_identity() -> None:
    assert pickle.loads(pickle.dumps(pt.UNSIGNED_SHORT)) is pt.UNSIGNED_SHORT


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(GraphError) as err:
        pt.type_from_name("double")
    msg = str(err.value)
    assert "'double'" in msg
    assert "'unsigned int'" in msg and "UNSIGNED_INT" in msg
    assert isinstance(err.value, PoplarError) and isinstance(err.value, ValueError)


def test_lookup_is_exact_about_spelling() -> None:
    with pytest.raises(GraphError):
        pt.type_from_name("Float")
    with pytest.raises(GraphError):
        pt.type_from_name("unsigned_int")


def test_non_string_name_is_a_type_error() -> None:
    with pytest.raises(TypeMismatchError, match="int 4"):
        pt.type_from_name(4)  # type: ignore[arg-type]
