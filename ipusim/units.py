"""Quantities with units for machine configs: "624 KiB", "1.33 GHz", "64 GB/s", "2 us".

Config files are written by people, who think in KiB and GHz rather than in raw bytes
and hertz. This module turns such strings into plain numbers in the base unit of each
field (bytes, hertz, bytes per second, seconds) and rejects anything it cannot read
without guessing.

Rules
-----
* SI prefixes ``k``, ``M``, ``G``, ``T`` are powers of 1000; binary prefixes ``Ki``,
  ``Mi``, ``Gi``, ``Ti`` are powers of 1024.
* ``B`` is a byte and ``bit`` a bit (one eighth of a byte). A lone ``b`` is refused
  because it is read as bit by some people and as byte by others.
* A bare prefix ("64G") is refused: it does not say which unit is meant.
* Plain numbers (``int``/``float``, or a string holding only a number) are taken to be
  in the base unit already.
* Arithmetic is exact (:class:`fractions.Fraction`), so byte counts come out as exact
  integers and a fractional byte count ("1.5 B", "12 bit") is an error.

The pydantic types :data:`Bytes`, :data:`Hertz`, :data:`BytesPerSecond` and
:data:`Seconds` apply these rules to a model field before pydantic's own checks.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from ipusim.errors import IpusimError
from ipusim.errors import short_repr as _short

__all__ = [
    "Bytes",
    "BytesPerSecond",
    "Hertz",
    "Kind",
    "Seconds",
    "UnitError",
    "accepted_units",
    "parse_bytes",
    "parse_bytes_per_second",
    "parse_hertz",
    "parse_quantity",
    "parse_seconds",
]

Kind = Literal["bytes", "hertz", "bytes_per_second", "seconds"]


class UnitError(IpusimError, ValueError):
    """A quantity string has an unknown, ambiguous or unsuitable unit."""


_SI = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}
_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
_PREFIXES = {**_SI, **_BINARY}


def _data_units() -> dict[str, Fraction]:
    """Every byte and bit unit with its size in bytes."""
    units: dict[str, Fraction] = {}
    for prefix, factor in _PREFIXES.items():
        units[f"{prefix}B"] = Fraction(factor)
        units[f"{prefix}bit"] = Fraction(factor, 8)
    return units


_DATA = _data_units()
_UNITS: dict[str, dict[str, Fraction]] = {
    "bytes": _DATA,
    "bytes_per_second": {f"{unit}/s": size for unit, size in _DATA.items()},
    "hertz": {f"{prefix}Hz": Fraction(factor) for prefix, factor in _SI.items()},
    "seconds": {
        "s": Fraction(1),
        "ms": Fraction(1, 10**3),
        "us": Fraction(1, 10**6),
        "\u00b5s": Fraction(1, 10**6),  # micro sign
        "\u03bcs": Fraction(1, 10**6),  # Greek small mu
        "ns": Fraction(1, 10**9),
        "ps": Fraction(1, 10**12),
    },
}
_KIND_NAMES: dict[str, str] = {
    "bytes": "a byte count",
    "bytes_per_second": "a data rate",
    "hertz": "a frequency",
    "seconds": "a time",
}
_NUMBER = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?)\s*(.*)$")
#: Largest magnitude of a quantity in its base unit (about the largest float). Far
#: beyond every physical bound of the config (those are checked by the fields), it keeps
#: the exact arithmetic cheap and every value convertible to a float.
MAX_MAGNITUDE = 10**308
#: Longest run of digits read in a number; more digits carry no meaning for a config.
_MAX_DIGITS = 100


def accepted_units(kind: Kind) -> list[str]:
    """Unit spellings accepted for ``kind`` (for error messages and docs)."""
    return [u for u in _UNITS[kind] if u != "\u03bcs"]


def _accepted_text(kind: Kind) -> str:
    examples = {
        "bytes": "'624 KiB', '128 MB', 4096",
        "bytes_per_second": "'64 GB/s', '128 Gibit/s', 32e9",
        "hertz": "'1.33 GHz', '1600 MHz', 1.6e9",
        "seconds": "'15 ns', '2 us', '1.5 ms', 2e-6",
    }[kind]
    return f"accepted units: {', '.join(accepted_units(kind))} (e.g. {examples})"


def _diagnose(unit: str, kind: Kind) -> str:
    """Explain why ``unit`` is not accepted for ``kind``."""
    stem = unit.removesuffix("/s")
    if stem in _PREFIXES or stem == "K":
        return f"'{unit}' is ambiguous: a prefix alone does not say which unit is meant"
    if stem.endswith("b") and stem[:-1] in (*_PREFIXES, "K"):
        return f"'{unit}' is ambiguous: 'b' may mean bit or byte (write 'bit' or 'B')"
    if stem.startswith("K") and not stem.startswith("Ki"):
        return (
            f"'{unit}' is ambiguous: 'K' is not an SI prefix (write 'k' for 1000 or 'Ki' for 1024)"
        )
    for other, table in _UNITS.items():
        if other != kind and unit in table:
            return f"'{unit}' is a unit of {_KIND_NAMES[other]}, not of {_KIND_NAMES[kind]}"
    return f"unknown unit '{unit}'"


def parse_quantity(value: Any, kind: Kind) -> Fraction:
    """Read ``value`` as a quantity of ``kind`` and return it exactly in the base unit.

    Parameters
    ----------
    value
        A number (already in the base unit) or a string such as ``"624 KiB"``.
    kind
        ``"bytes"``, ``"hertz"``, ``"bytes_per_second"`` or ``"seconds"``.

    Returns
    -------
    Fraction
        The value in bytes, hertz, bytes per second or seconds.

    Raises
    ------
    UnitError
        The value is not a number, not finite, or its unit is unknown, ambiguous or of
        another kind. The message shows what was found and the accepted forms.
    """
    if kind not in _UNITS:
        raise ValueError(f"unknown quantity kind {kind!r}; expected one of {sorted(_UNITS)}")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnitError(
            f"found {value!r} ({type(value).__name__}); expected {_KIND_NAMES[kind]} as a "
            f"number or a string with a unit; {_accepted_text(kind)}"
        )
    if isinstance(value, int):
        return _in_range(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnitError(f"found {value!r}; expected a finite number")
        return _in_range(Fraction(value), value)
    match = _NUMBER.match(value.strip())
    if match is None:
        raise UnitError(
            f"cannot read {value!r} as {_KIND_NAMES[kind]}: expected a number followed by "
            f"a unit; {_accepted_text(kind)}"
        )
    number, exponent, unit = match.group(1), match.group(2), match.group(3)
    if len(number) > _MAX_DIGITS or (exponent is not None and abs(int(exponent)) > 400):
        raise UnitError(
            f"cannot read {_short(value)} as {_KIND_NAMES[kind]}: the number is out of range; "
            f"expected a magnitude below 1e308 written in at most {_MAX_DIGITS} characters"
        )
    magnitude = Fraction(number)
    if unit:
        factor = _UNITS[kind].get(unit)
        if factor is None:
            raise UnitError(
                f"cannot read {value!r} as {_KIND_NAMES[kind]}: {_diagnose(unit, kind)}; "
                f"{_accepted_text(kind)}"
            )
        magnitude *= factor
    return _in_range(magnitude, value)


def _in_range(amount: Fraction, value: Any) -> Fraction:
    """``amount``, or a UnitError if its magnitude is beyond :data:`MAX_MAGNITUDE`."""
    if abs(amount) > MAX_MAGNITUDE:
        raise UnitError(f"found {_short(value)}; expected a magnitude below 1e308")
    return amount


def parse_bytes(value: Any) -> int:
    """Read a byte count ("624 KiB", 4096) as an exact ``int``; fractional bytes fail."""
    amount = parse_quantity(value, "bytes")
    if amount.denominator != 1:
        raise UnitError(
            f"found {value!r} = {float(amount)!r} bytes; expected a whole number of bytes"
        )
    return int(amount)


def parse_hertz(value: Any) -> float:
    """Read a frequency ("1.33 GHz", "1600 MHz", 1.6e9) in hertz."""
    return float(parse_quantity(value, "hertz"))


def parse_bytes_per_second(value: Any) -> float:
    """Read a data rate ("64 GB/s", "512 Gbit/s") in bytes per second."""
    return float(parse_quantity(value, "bytes_per_second"))


def parse_seconds(value: Any) -> float:
    """Read a time ("15 ns", "2 us", "1.5 ms") in seconds."""
    return float(parse_quantity(value, "seconds"))


def _lenient(parse: Any) -> Any:
    """Wrap ``parse`` so that values of a type it does not handle reach pydantic as-is.

    Lists, mappings and ``None`` then get pydantic's own wrong-type message.
    """

    def validate(value: Any) -> Any:
        if isinstance(value, int | float | str):  # bool is an int: parse rejects it
            return parse(value)
        return value

    validate.__name__ = f"lenient_{parse.__name__}"
    validate.__doc__ = parse.__doc__
    return validate


Bytes = Annotated[int, BeforeValidator(_lenient(parse_bytes))]
"""An ``int`` count of bytes; accepts "624 KiB", "128 MB", "1 Kibit"."""

Hertz = Annotated[float, BeforeValidator(_lenient(parse_hertz))]
"""A ``float`` frequency in hertz; accepts "1.33 GHz", "1600 MHz"."""

BytesPerSecond = Annotated[float, BeforeValidator(_lenient(parse_bytes_per_second))]
"""A ``float`` data rate in bytes per second; accepts "64 GB/s", "128 Gibit/s"."""

Seconds = Annotated[float, BeforeValidator(_lenient(parse_seconds))]
"""A ``float`` time in seconds; accepts "15 ns", "2 us", "1.5 ms"."""
