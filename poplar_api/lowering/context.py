"""What lowering produces besides the IR: device memory, effects and predicates.

The Engine's data plane applies effect ``k`` by calling ``effects[k]()`` and answers
predicate ``p`` with ``predicates[p]()``; both close over :class:`Storage`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poplar_api.types import Type

#: The raw storage dtype of each element size: the bits of every type of that size.
RAW_DTYPES: dict[int, np.dtype] = {
    4: np.dtype(np.uint32),
    2: np.dtype(np.uint16),
    1: np.dtype(np.uint8),
}


class Storage:
    """Device memory image: the raw bits of one flat array per element size.

    Element types of one size share an id space (see :mod:`poplar_api.graph`), so a
    tensor and its ``reinterpret`` views address the same bits. Reads return a numpy
    ``view`` of the bits as the accessing type, writes store the bits of the values
    converted to that type: reinterpreting is bit-exact, as ``ndarray.view``. A BOOL
    read gives True for any non-zero byte.
    """

    def __init__(self, state: Any) -> None:
        self.arrays: dict[int, np.ndarray] = {
            size: np.zeros(sp.size, RAW_DTYPES[size]) for size, sp in state.spaces.items()
        }
        for t, ids, values in state.initial_parts:
            self.write(t, ids, values)

    def read(self, t: Type, ids: np.ndarray) -> np.ndarray:
        """Values of elements ``ids`` as type ``t`` (a new array of ``t.numpy``)."""
        raw = self.arrays[t.size][ids]
        if t.numpy.kind == "b":
            return raw != 0
        return raw.view(t.numpy)

    def write(self, t: Type, ids: np.ndarray, values: np.ndarray) -> None:
        """Store ``values`` (converted to ``t``) into elements ``ids``."""
        # Narrowing (e.g. float32 kernel results to HALF) rounds, and overflows to inf as
        # the hardware does; that is expected, not worth a warning.
        with np.errstate(over="ignore"):
            typed = np.ascontiguousarray(np.asarray(values).astype(t.numpy, copy=False))
        self.arrays[t.size][ids] = typed.reshape(-1).view(RAW_DTYPES[t.size])


@dataclass
class Lowered:
    """Effects and predicates registered while lowering (closures over storage)."""

    storage: Storage
    effects: list[Callable[[], None]] = field(default_factory=list)
    predicates: list[Callable[[], int]] = field(default_factory=list)

    def effect(self, fn: Callable[[], None]) -> int:
        self.effects.append(fn)
        return len(self.effects) - 1

    def predicate(self, fn: Callable[[], int]) -> int:
        self.predicates.append(fn)
        return len(self.predicates) - 1
