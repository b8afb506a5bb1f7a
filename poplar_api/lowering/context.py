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


class Storage:
    """Device memory image: one flat array per element type, indexed by element id."""

    def __init__(self, state: Any) -> None:
        self.arrays: dict[Type, np.ndarray] = {
            t: np.zeros(sp.size, t.numpy) for t, sp in state.spaces.items()
        }
        for t, ids, values in state.initial_parts:
            self.arrays[t][ids] = values

    def read(self, t: Type, ids: np.ndarray) -> np.ndarray:
        return self.arrays[t][ids]

    def write(self, t: Type, ids: np.ndarray, values: np.ndarray) -> None:
        # Narrowing (e.g. float32 kernel results to HALF) rounds, and overflows to inf as
        # the hardware does; that is expected, not worth a warning.
        with np.errstate(over="ignore"):
            self.arrays[t][ids] = np.asarray(values).astype(t.numpy, copy=False).reshape(-1)


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
