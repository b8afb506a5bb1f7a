"""Unit strings in machine configs: "624 KiB", "1.33 GHz", "64 GB/s", "2 us"."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError

from ipusim.errors import IpusimError
from ipusim.units import (
    Bytes,
    BytesPerSecond,
    Hertz,
    Seconds,
    UnitError,
    accepted_units,
    parse_bytes,
    parse_bytes_per_second,
    parse_hertz,
    parse_quantity,
    parse_seconds,
)

BYTES = [
    ("624 KiB", 624 * 1024),
    ("208 KiB", 208 * 1024),
    ("128 MB", 128 * 10**6),
    ("128 MiB", 128 * 2**20),
    ("1 GiB", 2**30),
    ("2 TB", 2 * 10**12),
    ("1 TiB", 2**40),
    ("3 kB", 3000),
    ("16KiB", 16 * 1024),  # no space
    ("  8 B ", 8),
    ("1.5 KiB", 1536),  # 1.5 * 1024
    ("0.5 kB", 500),
    ("16 bit", 2),  # 16 / 8
    ("1 Kibit", 128),  # 1024 / 8
    ("1e3 B", 1000),
    ("4096", 4096),  # a plain number in a string is bytes
    (4096, 4096),
    (8.0, 8),
]


@pytest.mark.parametrize(("text", "expected"), BYTES)
def test_bytes_are_exact_ints(text, expected):
    value = parse_bytes(text)
    assert value == expected
    assert type(value) is int


HERTZ = [
    ("1.33 GHz", 1.33e9),
    ("1600 MHz", 1.6e9),
    ("1.85 GHz", 1.85e9),
    ("100 kHz", 1e5),
    ("50 Hz", 50.0),
    ("1 THz", 1e12),
    (1.6e9, 1.6e9),
    (1_000_000_000, 1e9),
    ("1e9", 1e9),  # YAML reads 1e9 as a string; it is still a number
]


@pytest.mark.parametrize(("text", "expected"), HERTZ)
def test_hertz(text, expected):
    assert parse_hertz(text) == pytest.approx(expected, rel=1e-15)


RATES = [
    ("64 GB/s", 64e9),
    ("32 GB/s", 32e9),
    ("128 Gibit/s", 128 * 2**30 / 8),
    ("512 Gbit/s", 512e9 / 8),
    ("100 MiB/s", 100 * 2**20),
    ("8 bit/s", 1.0),
    ("1 kB/s", 1000.0),
    (14602888806.4, 14602888806.4),
]


@pytest.mark.parametrize(("text", "expected"), RATES)
def test_bytes_per_second(text, expected):
    assert parse_bytes_per_second(text) == pytest.approx(expected, rel=1e-15)


TIMES = [
    ("15 ns", 15e-9),
    ("2 us", 2e-6),
    ("2 \u00b5s", 2e-6),  # micro sign
    ("1.5 ms", 1.5e-3),
    ("3 s", 3.0),
    ("250 ps", 250e-12),
    (2e-6, 2e-6),
    (0, 0.0),
]


@pytest.mark.parametrize(("text", "expected"), TIMES)
def test_seconds(text, expected):
    assert parse_seconds(text) == pytest.approx(expected, rel=1e-15)


BAD = [
    # (value, kind, words the message must contain)
    ("64G", "bytes", ["'64G'", "ambiguous", "KiB", "GB"]),
    ("64 Gb", "bytes", ["'64 Gb'", "bit or byte"]),
    ("64 Gb/s", "bytes_per_second", ["'64 Gb/s'", "bit or byte", "Gbit/s"]),
    ("64 KB", "bytes", ["'64 KB'", "'K' is not an SI prefix", "KiB"]),
    ("12 furlongs", "seconds", ["'12 furlongs'", "unknown unit 'furlongs'", "ns", "ms"]),
    ("1.33 GHz", "bytes", ["'1.33 GHz'", "frequency", "byte count"]),
    ("64 GB", "bytes_per_second", ["'64 GB'", "byte count", "data rate", "GB/s"]),
    ("fast", "hertz", ["'fast'", "GHz"]),
    ("", "seconds", ["''", "number followed by a unit"]),
    ("inf", "hertz", ["'inf'"]),
    (True, "bytes", ["True", "bool"]),
    ([1, 2], "bytes", ["[1, 2]", "list"]),
    (float("nan"), "seconds", ["nan", "finite"]),
]


@pytest.mark.parametrize(("value", "kind", "words"), BAD)
def test_bad_quantities_say_what_was_found_and_what_is_accepted(value, kind, words):
    with pytest.raises(UnitError) as info:
        parse_quantity(value, kind)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)


def test_unit_error_is_a_project_error_and_a_value_error():
    assert issubclass(UnitError, IpusimError)
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize("text", ["1.5 B", "12 bit", "0.3 B"])
def test_fractional_byte_counts_are_rejected(text):
    with pytest.raises(UnitError, match="whole number of bytes"):
        parse_bytes(text)


def test_fractional_plain_bytes_are_rejected():
    with pytest.raises(UnitError, match="whole number of bytes"):
        parse_bytes(1.5)


def test_exact_arithmetic_for_large_binary_sizes():
    # 1.1 TiB = 1.1 * 2**40 = 1209462790553.6 -> not whole; 1.25 TiB = 5 * 2**38 is
    assert parse_bytes("1.25 TiB") == 5 * 2**38
    with pytest.raises(UnitError):
        parse_bytes("1.1 TiB")


def test_accepted_units_cover_each_kind():
    assert {"B", "KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB", "TB", "bit", "Gibit"} <= set(
        accepted_units("bytes")
    )
    assert {"Hz", "kHz", "MHz", "GHz"} <= set(accepted_units("hertz"))
    assert {"GB/s", "Gbit/s", "Gibit/s"} <= set(accepted_units("bytes_per_second"))
    assert {"s", "ms", "us", "ns"} <= set(accepted_units("seconds"))


class _Model(BaseModel):
    size: Bytes
    clock: Hertz
    rate: BytesPerSecond
    wait: Seconds


def test_annotated_types_parse_inside_pydantic_models():
    m = _Model(size="624 KiB", clock="1.33 GHz", rate="128 Gibit/s", wait="15 ns")
    assert m.size == 624 * 1024 and type(m.size) is int
    assert m.clock == pytest.approx(1.33e9, rel=1e-15)
    assert m.rate == pytest.approx(128 * 2**30 / 8, rel=1e-15)
    assert math.isclose(m.wait, 15e-9, rel_tol=1e-15)


def test_annotated_types_turn_unit_errors_into_validation_errors():
    with pytest.raises(ValidationError) as info:
        _Model(size="64G", clock=None, rate="1 GB/s", wait="1 ns")
    errors = {e["loc"]: e for e in info.value.errors()}
    assert "ambiguous" in errors[("size",)]["msg"]
    # None is left to pydantic, which reports the wrong type itself
    assert errors[("clock",)]["type"] == "float_type"
