"""PrintTensor text: the tutorials' exact lines, C++ %g number formatting, layouts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api.errors import TypeMismatchError
from poplar_api.printing import format_number, format_tensor
from poplar_api.types import BOOL, CHAR, FLOAT, HALF, INT, UNSIGNED_INT, UNSIGNED_SHORT

# ----------------------------------------------------------------------------------
# The tutorials' printed lines (tutorials.md).


def test_tut1_lines() -> None:
    c1 = np.array([1.0, 1.5, 2.0, 2.5], dtype=np.float32)
    assert format_tensor("v1-debug", c1) == "v1-debug: {1,1.5,2,2.5}"
    assert format_tensor("v1-debug", np.zeros(4, np.float32)) == "v1-debug: {0,0,0,0}"
    v4_0 = np.arange(10, dtype=np.int32)
    assert format_tensor("v4-0", v4_0) == "v4-0: {0,1,2,3,4,5,6,7,8,9}"
    v4_1 = np.arange(10, 20, dtype=np.int32)
    assert format_tensor("v4-1", v4_1) == "v4-1: {10,11,12,13,14,15,16,17,18,19}"


def test_tut2_blocks() -> None:
    v3 = np.array([[5, 4.5], [4, 3.5]], dtype=np.float32)
    assert format_tensor("v3", v3) == "v3: {\n {5,4.5},\n {4,3.5}\n}"
    v4 = np.array([[9, 7.5], [6, 4.5]], dtype=np.float32)
    assert format_tensor("v4", v4) == "v4: {\n {9,7.5},\n {6,4.5}\n}"


def test_tut3_line() -> None:
    # v2[i] = sum of v1[i:]: 1+1.5+2+2.5 = 7, 1.5+2+2.5 = 6, 2+2.5 = 4.5, 2.5.
    v2 = np.array([7, 6, 4.5, 2.5], dtype=np.float32)
    assert format_tensor("v2", v2) == "v2: {7,6,4.5,2.5}"


# ----------------------------------------------------------------------------------
# Numbers: C++ operator<< on float, default precision 6.


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"),
        (7.0, "7"),
        (0.0, "0"),
        (-0.0, "-0"),
        (1e6, "1e+06"),
        (123456.0, "123456"),  # 6 significant digits still fit
        (1234567.0, "1.23457e+06"),  # 7 digits: rounded, exponent form
        (100000.0, "100000"),
        (0.0001, "0.0001"),  # exponent -4 still prints fixed
        (0.00001, "1e-05"),  # exponent -5 switches to e-form
        (1 / 3, "0.333333"),
        (-2.25, "-2.25"),
        (0.1, "0.1"),  # float32 0.100000001490116... rounds to 0.1
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_float_formatting(value: float, text: str) -> None:
    assert format_number(value, FLOAT) == text
    assert format_tensor("x", np.array([value], dtype=np.float32)) == f"x: {{{text}}}"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # 1/3 as half: 10-bit mantissa, 1365/4096 = 0.333251953125 -> 6 digits.
        (1 / 3, "0.333252"),
        # 0.1 as half: 1638/16384 = 0.0999755859375 -> 6 digits.
        (0.1, "0.0999756"),
        # 2049 lies halfway between halves 2048 and 2050; ties go to even -> 2048.
        (2049.0, "2048"),
        (65504.0, "65504"),  # largest finite half
        (70000.0, "inf"),  # beyond it overflows
    ],
)
def test_half_values_print_their_float16_value(value: float, text: str) -> None:
    assert format_number(value, HALF) == text
    assert format_tensor("h", np.array([value]), HALF) == f"h: {{{text}}}"


def test_half_array_prints_without_type_argument() -> None:
    h = np.array([1 / 3, 0.5], dtype=np.float16)
    assert format_tensor("h", h) == "h: {0.333252,0.5}"


@pytest.mark.parametrize(
    ("value", "etype", "text"),
    [
        (-5, INT, "-5"),
        (4294967295, UNSIGNED_INT, "4294967295"),
        (65535, UNSIGNED_SHORT, "65535"),
        (-128, CHAR, "-128"),
        (True, BOOL, "1"),
        (False, BOOL, "0"),
    ],
)
def test_integer_and_bool_formatting(value, etype, text) -> None:
    assert format_number(value, etype) == text


def test_bool_and_unsigned_arrays() -> None:
    assert format_tensor("b", np.array([True, False, True])) == "b: {1,0,1}"
    big = np.array([0, 4294967295], dtype=np.uint32)
    assert format_tensor("u", big) == "u: {0,4294967295}"


# ----------------------------------------------------------------------------------
# Layouts.


def test_rank_0_and_single_element() -> None:
    assert format_tensor("s", np.array(3, dtype=np.int32)) == "s: 3"
    assert format_tensor("s", np.float32(2.5)) == "s: 2.5"
    assert format_tensor("one", np.array([3], dtype=np.int32)) == "one: {3}"


def test_rank_3_nests_one_more_space_per_level() -> None:
    text = format_tensor("t", np.arange(8, dtype=np.int32).reshape(2, 2, 2))
    expected = "\n".join(
        [
            "t: {",
            " {",
            "  {0,1},",
            "  {2,3}",
            " },",
            " {",
            "  {4,5},",
            "  {6,7}",
            " }",
            "}",
        ]
    )
    assert text == expected


def test_empty_blocks() -> None:
    assert format_tensor("e", np.zeros(0, np.float32)) == "e: {}"
    assert format_tensor("e", np.zeros((0, 3), np.float32)) == "e: {}"
    assert format_tensor("e", np.zeros((2, 0), np.float32)) == "e: {\n {},\n {}\n}"


def test_name_with_percent_sign_is_kept_verbatim() -> None:
    assert format_tensor("50%", np.array([1], np.int32)) == "50%: {1}"


def _reference(values: np.ndarray, depth: int = 0) -> str:
    """Straightforward per-element recursion, the layout rule written out."""
    pad = " " * depth
    if values.ndim == 1:
        return pad + "{" + ",".join(f"{float(v):g}" for v in values) + "}"
    inner = ",\n".join(_reference(v, depth + 1) for v in values)
    return pad + "{\n" + inner + "\n" + pad + "}"


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 1, 2, 3)])
def test_random_values_match_per_element_reference(shape) -> None:
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(shape) * 10.0 ** rng.integers(-7, 8, size=shape)).astype(
        np.float32
    )
    assert format_tensor("r", values) == "r: " + _reference(values)


def test_large_tensor_formats_every_row() -> None:
    values = np.arange(300 * 400, dtype=np.float32).reshape(300, 400)
    lines = format_tensor("big", values).split("\n")
    # Header line, 300 row lines, closing brace.
    assert len(lines) == 302
    assert lines[1] == " {" + ",".join(str(i) for i in range(400)) + "},"
    assert lines[-2].startswith(" {119600,")  # last row starts at 299 * 400


# ----------------------------------------------------------------------------------
# Errors.


def test_unprintable_dtype_is_rejected() -> None:
    with pytest.raises(TypeMismatchError, match="complex128"):
        format_tensor("c", np.array([1 + 2j]))


def test_format_number_needs_a_type() -> None:
    with pytest.raises(TypeMismatchError, match="element_type"):
        format_number(1.0, "float")  # type: ignore[arg-type]
    with pytest.raises(TypeMismatchError, match="one value"):
        format_number([1.0, 2.0], FLOAT)
