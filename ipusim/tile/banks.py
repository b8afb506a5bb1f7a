"""Memory banks of a tile, and the bank conflicts of counted dual-access instructions.

What the hardware does (Graphcore's glossary, grade A; docs/sources.md): a memory bank
allows a single access per cycle (``memory.bank_bytes``, 16 KiB on Mk2 and in the Mk1 preset,
which follows Jia et al. 2019 where the glossary says 32 KiB: docs/sources.md); accesses to
addresses in different banks proceed in the same cycle. A tile's memory is two regions
of banks. In the non-interleaved region a memory element is one bank (64-bit accesses)
and addresses are contiguous within it. In the interleaved region an element is a pair
of banks that together serve a 128-bit access, so consecutive 64-bit words alternate
between the pair's two banks (grade D: the 128-bit access over a pair implies a 64-bit
interleave). One instruction issues per tile cycle, so only an instruction that makes
several accesses can meet another access in the same cycle: ``ld2x64pace`` (two 64-bit
loads) and ``ld2xst64pace`` (those and a 64-bit store). When two of its accesses hit one
bank, the later waits a cycle.

Counted execution knows how many such instructions each vertex ran, not their
addresses. Memory placement knows where every block of data the compute set's vertices
read and write lies on each tile (:class:`PlacedData`). The rule below takes the
expected number of colliding accesses when an instruction's accesses fall on the
tile's banks in proportion to the bytes read (loads) and written (store) in each
bank, independently of each other: with ``p_k`` the share of the read bytes in bank
``k`` and ``q_k`` that of the written bytes,

* two loads: ``Σ_k p_k²`` extra cycles (the chance both hit one bank);
* two loads and a store: ``3 - Σ_k (1 - (1 - p_k)² (1 - q_k))`` extra cycles (three
  accesses less the expected number of distinct banks they hit).

This is an estimate, not the addresses: data read from one bank makes every dual load
collide (exact); spread over many banks, few do. A vertex whose author placed its
operands in different elements (Poplar's ``elem(*a) != elem(*b)`` constraints) never
collides, which the rule does not know; that is why the charge is a switch
(``memory.bank_conflicts``, off in every preset) and not applied by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DataPlacement", "PlacedData", "bank_of", "bank_shares", "collision_rates"]

#: Region index of a placed block: the non-interleaved and the interleaved region.
NON_INTERLEAVED, INTERLEAVED = 0, 1


@dataclass(frozen=True)
class PlacedData:
    """The blocks of data a compute set's vertices touch on each tile, as placed.

    One row per (variable, tile) block: its tile, region (0 non-interleaved, 1
    interleaved), offset from the region's start and size in bytes, and the bytes of it
    the vertices' fields read (``in``, ``inout``) and write (``out``, ``inout``). The
    bytes read or written are taken as spread evenly over the block.
    """

    tile: np.ndarray
    region: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    read: np.ndarray
    written: np.ndarray

    def __len__(self) -> int:
        return int(np.asarray(self.tile).size)


class DataPlacement:
    """Where a counted compute set's data lies (:class:`PlacedData`), filled in by memory
    placement after the step is made (the step exists before memory is placed).

    ``touched`` holds what lowering found before placement: ``(keys, elements)`` of the
    data read and of the data written, ``keys`` being ``variable * num_tiles + tile``.
    """

    __slots__ = ("data", "touched")

    def __init__(self) -> None:
        self.data: PlacedData | None = None
        self.touched: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def __reduce__(self) -> tuple[Any, ...]:  # kept with an executable: the placed data
        return (_restore, (self.data,))


def _restore(data: PlacedData | None) -> DataPlacement:
    placement = DataPlacement()
    placement.data = data
    return placement


def bank_of(memory: Any, region: int, offset: int) -> int:
    """The bank holding byte ``offset`` of ``region`` (0 non-interleaved, 1 interleaved),
    numbered as :func:`bank_shares` numbers them: the interleaved banks after the
    non-interleaved ones, each pair's 64-bit words alternating between its two banks
    (the first word in the first), an odd last bank an element alone."""
    bank, o = int(memory.bank_bytes), int(offset)
    if region != INTERLEAVED:
        return o // bank
    element = o // (2 * bank)
    pair = element < int(memory.interleaved_bytes) // (2 * bank)
    return int(memory.non_interleaved_bytes) // bank + 2 * element + (o // 8 % 2 if pair else 0)


def bank_shares(
    memory: Any, placed: PlacedData
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(tile, bank, read, written)``: the bytes read and written in each bank of each
    tile (one row per bank holding some; banks of the interleaved region numbered after
    the non-interleaved ones).

    A block's bytes read and written are spread over its extent; in the interleaved
    region each element's part is split evenly between the element's two banks. An
    interleaved region of an odd number of banks (``tiny``'s three) ends in a bank with
    no partner: it is an element of its own, and holds all of its part.
    """
    bank = int(memory.bank_bytes)
    first_interleaved = int(memory.non_interleaved_bytes) // bank
    pairs = int(memory.interleaved_bytes) // (2 * bank)  # whole pairs of banks
    keep = (np.asarray(placed.size) > 0) & (np.asarray(placed.region) <= INTERLEAVED)
    tile = np.asarray(placed.tile, np.int64)[keep]
    inter = np.asarray(placed.region)[keep] == INTERLEAVED
    start = np.asarray(placed.offset, np.int64)[keep]
    size = np.asarray(placed.size, np.int64)[keep]
    read = np.asarray(placed.read, np.float64)[keep]
    written = np.asarray(placed.written, np.float64)[keep]
    unit = np.where(inter, 2 * bank, bank)  # an element: one bank, or a pair
    lo_el, hi_el = start // unit, (start + size - 1) // unit
    count = hi_el - lo_el + 1
    rows = np.repeat(np.arange(tile.size), count)
    step = np.arange(rows.size) - np.repeat(np.cumsum(count) - count, count)
    element = lo_el[rows] + step
    end = start + size
    overlap = np.minimum(end[rows], (element + 1) * unit[rows]) - np.maximum(
        start[rows], element * unit[rows]
    )
    share = overlap / size[rows]
    pair = inter[rows] & (element < pairs)  # (the odd bank at the end: no partner)
    # a non-interleaved element is its bank; an interleaved one gives half to each bank
    banks = np.where(inter[rows], first_interleaved + 2 * element, element)
    halves = np.where(pair, 0.5, 1.0) * share
    all_rows = np.concatenate([rows, rows[pair]])
    all_banks = np.concatenate([banks, banks[pair] + 1])
    all_share = np.concatenate([halves, halves[pair]])
    span = int(all_banks.max()) + 1 if all_banks.size else 1
    found, at = np.unique(tile[all_rows] * span + all_banks, return_inverse=True)
    out_read = np.bincount(at, weights=read[all_rows] * all_share, minlength=found.size)
    out_written = np.bincount(at, weights=written[all_rows] * all_share, minlength=found.size)
    return found // span, found % span, out_read, out_written


def collision_rates(
    memory: Any, placed: PlacedData, num_tiles: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(two_loads, two_loads_store)``: float64[num_tiles] expected extra cycles of one
    ``ld2x64pace`` and of one ``ld2xst64pace`` on each tile (module docstring). A tile
    with no placed data read has none (the rule has nothing to go by); with none written,
    the store collides with nothing."""
    tile, _, read, written = bank_shares(memory, placed)
    total_read = np.bincount(tile, weights=read, minlength=num_tiles)
    total_written = np.bincount(tile, weights=written, minlength=num_tiles)
    p = np.divide(read, total_read[tile], out=np.zeros_like(read), where=total_read[tile] > 0)
    q = np.divide(
        written, total_written[tile], out=np.zeros_like(written), where=total_written[tile] > 0
    )
    two = np.bincount(tile, weights=p * p, minlength=num_tiles)
    distinct = np.bincount(tile, weights=1.0 - (1.0 - p) ** 2 * (1.0 - q), minlength=num_tiles)
    three = 3.0 - distinct
    has_read = total_read > 0
    # no data written on the tile: the store's bank is none of these (two loads only)
    three = np.where(total_written > 0, three, two)
    return np.where(has_read, two, 0.0), np.where(has_read, three, 0.0)
