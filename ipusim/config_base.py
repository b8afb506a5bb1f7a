"""The base of every machine config section: a frozen pydantic model that refuses
unknown keys, infinities and booleans where a number is expected (see
:mod:`ipusim.config_sections`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["Section", "is_numeric"]


class Section(BaseModel):
    """A config section: frozen, no unknown keys, no infinities or NaN."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse ``true``/``yes``/``on`` where a number is expected.

        Python's ``bool`` is an ``int`` and YAML 1.1 reads ``yes``, ``no``, ``on``,
        ``off``, ``true`` and ``false`` as booleans, so without this check
        ``tiles_per_ipu: yes`` would silently become 1 tile.
        """
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if is_numeric(annotation):
                raise ValueError(
                    f"found {value!r} (a boolean); expected a number; hint: YAML reads "
                    f"yes/no/on/off/true/false as booleans, write the number instead"
                )
        return value


def is_numeric(annotation: Any) -> bool:
    """Whether a field annotation is ``int``, ``float`` or an optional one of them."""
    if annotation in (int, float):
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and all(a in (int, float, type(None)) for a in args)
