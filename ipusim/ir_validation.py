"""Validation of a machine program against the machine that is to run it.

:func:`validate_program` checks every step's arrays (lengths, tile and IPU ranges,
non-negative counts, transfers that stay on or leave an IPU as their kind requires)
and the control nodes (loop counts, switch cases, called functions, recursion), and
reports every problem at once, each naming the step or node, the field, the value and
what was required.
"""

from __future__ import annotations

import numba
import numpy as np

from ipusim.errors import IRValidationError
from ipusim.ir import (
    COLLECTIVE_ALGORITHMS,
    COLLECTIVE_OPS,
    TOTALS,
    Call,
    Collective,
    Compute,
    Direction,
    Exchange,
    GlobalExchange,
    Node,
    Program,
    RemoteBufferCopy,
    Repeat,
    Step,
    StreamCopy,
    Switch,
    Sync,
    SyncKind,
    Visitor,
    as_program,
    iter_steps,
    named_children,
    walk,
)

__all__ = [
    "validate_program",
]


def validate_program(program: Program | Node, num_tiles: int, tiles_per_ipu: int) -> Program:
    """Check a program against a machine size; raise with every problem found.

    Raises
    ------
    IRValidationError
        Listing each problem with the step's name, the field, the value and what
        was required.
    """
    program = as_program(program)
    problems: list[str] = []
    num_ipus = max(1, num_tiles // tiles_per_ipu)
    replicas = program.replicas
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int | np.integer)
        or replicas < 1
        or num_ipus % replicas
    ):
        raise IRValidationError(
            [
                f"program replicas: found {replicas!r}; it must be an int >= 1 that divides "
                f"the machine's {num_ipus} IPU(s); hint: a replica needs a whole number of IPUs"
            ]
        )
    full_tiles = num_tiles
    num_tiles //= replicas  # steps name the tiles of replica 0
    replica_ipus = num_ipus // replicas

    def where(step: Step, fld: str) -> str:
        return f"{step.kind} step '{step.name}' field '{fld}'"

    def check_ipus(step: Step, fld: str, ipus: tuple[int, ...] | None, limit: int) -> None:
        bad = [i for i in ipus or () if not 0 <= i < limit]
        if bad:
            scope = "the machine" if limit == num_ipus else "replica 0"
            problems.append(
                f"{where(step, fld)}: IPU {bad[0]} is out of range [0, {limit}) of {scope}; "
                f"hint: the machine has {num_ipus} IPU(s) in {replicas} replica(s)"
            )

    def check_tiles(step: Step, fld: str, arr: np.ndarray, limit: int | None = None) -> None:
        limit = num_tiles if limit is None else limit
        first, count = _outside(arr, 0, limit - 1)
        if count:
            scope = "the machine has" if limit == full_tiles else "replica 0 has"
            problems.append(
                f"{where(step, fld)}: tile {int(arr[first])} at index {first} is out of "
                f"range [0, {limit}) ({count} bad entr{'y' if count == 1 else 'ies'}); "
                f"hint: {scope} {limit} tiles"
            )

    def check_nonneg(step: Step, fld: str, arr: np.ndarray) -> None:
        first, count = _outside(arr, 0, _INT64_MAX)
        if count:
            problems.append(
                f"{where(step, fld)}: value {int(arr[first])} at index {first} is "
                f"negative; required >= 0"
            )

    def check_lengths(step: Step, names: tuple[str, ...]) -> bool:
        sizes = {n: getattr(step, n).size for n in names}
        if len(set(sizes.values())) > 1:
            desc = ", ".join(f"{n}={s}" for n, s in sizes.items())
            problems.append(
                f"{step.kind} step '{step.name}': array lengths differ ({desc}); "
                "required one entry per vertex/transfer in each"
            )
            return False
        return True

    for step in iter_steps(program):
        if isinstance(step, Compute):
            fields = ("vertex_tile", "vertex_cycles", "vertex_multi", "vertex_type")
            if check_lengths(step, fields):
                check_tiles(step, "vertex_tile", step.vertex_tile)
                check_nonneg(step, "vertex_cycles", step.vertex_cycles)
                nt = len(step.vertex_type_names)
                first, count = _outside(step.vertex_type, 0, nt - 1)
                if count:
                    problems.append(
                        f"{where(step, 'vertex_type')}: type index {int(step.vertex_type[first])}"
                        f" is out of range [0, {nt}) of vertex_type_names"
                    )
        elif isinstance(step, Exchange) and step.is_totals:
            if check_lengths(step, TOTALS):
                check_tiles(step, "tile", step.tile)
                for name in TOTALS[1:]:
                    check_nonneg(step, name, getattr(step, name))
                if _repeats(step.tile, num_tiles):
                    problems.append(f"{where(step, 'tile')}: a tile is listed more than once")
                shared = step.bytes_shared
                if shared is not None and check_lengths(step, ("tile", "bytes_shared")):
                    over = np.flatnonzero((shared < 0) | (shared > step.bytes_received))
                    if over.size:
                        k = int(over[0])
                        problems.append(
                            f"{where(step, 'bytes_shared')}: {int(shared[k])} at index {k} "
                            f"(tile {int(step.tile[k])}); required 0 <= bytes_shared <= "
                            f"bytes_received ({int(step.bytes_received[k])})"
                        )
        elif isinstance(step, Exchange | GlobalExchange):
            names = ("src_tile", "dst_tile", "num_bytes")
            if isinstance(step, Exchange):
                names = (*names, "message")
            limit = num_tiles
            if isinstance(step, GlobalExchange):
                wide = not step.replicated
                limit = full_tiles if wide else num_tiles
                check_ipus(step, "ipus", step.ipus, num_ipus if wide else replica_ipus)
            if check_lengths(step, names):
                check_tiles(step, "src_tile", step.src_tile, limit)
                check_tiles(step, "dst_tile", step.dst_tile, limit)
                check_nonneg(step, "num_bytes", step.num_bytes)
                k = _wrong_ipu(
                    step.src_tile, step.dst_tile, limit, tiles_per_ipu, isinstance(step, Exchange)
                )
                if k >= 0:
                    s, d = int(step.src_tile[k]), int(step.dst_tile[k])
                    if isinstance(step, Exchange):
                        msg = "crosses IPUs; hint: use a GlobalExchange step"
                    else:
                        msg = "stays on one IPU; hint: use an Exchange step"
                    problems.append(f"{where(step, 'dst_tile')}: transfer {k} ({s}->{d}) {msg}")
        elif isinstance(step, Sync):
            check_ipus(step, "ipus", step.ipus, replica_ipus)
            if step.tiles is not None:
                check_tiles(step, "tiles", step.tiles)
                if step.sync_kind is SyncKind.EXTERNAL:
                    problems.append(
                        f"{where(step, 'tiles')}: set on an external sync; only internal "
                        "and host syncs take some tiles; hint: use ipus"
                    )
        elif isinstance(step, Collective):
            _check_collective(step, num_ipus, problems)
        elif isinstance(step, StreamCopy) and check_lengths(step, ("tile", "num_bytes")):
            check_tiles(step, "tile", step.tile)
            check_nonneg(step, "num_bytes", step.num_bytes)
            if step.tiles is not None:
                check_tiles(step, "tiles", step.tiles)
                outside = np.setdiff1d(step.tile[step.num_bytes > 0], step.tiles)
                if outside.size:
                    problems.append(
                        f"{where(step, 'tiles')}: tile {int(outside[0])} moves bytes but is "
                        f"not among the tiles taking part ({outside.size} such tiles); "
                        "hint: list every tile of the copy in tiles"
                    )
            prefetchable = step.direction is Direction.HOST_TO_DEVICE and not isinstance(
                step, RemoteBufferCopy
            )
            if step.prefetch and not prefetchable:
                problems.append(
                    f"{where(step, 'prefetch')}: True on a {step.kind} step of direction "
                    f"{step.direction.value}; only host-to-device stream copies are "
                    "prefetched; hint: set prefetch=False"
                )

    check = _StructureCheck(program, problems)
    for i, entry in enumerate(program.entries):
        check.visit(entry, f"entry {i}")
    for i, fn in enumerate(program.functions):
        check.visit(fn, f"function {i}")
    _check_call_cycles(program, problems)
    if problems:
        raise IRValidationError(problems)
    return program


class _StructureCheck(Visitor):
    """Problems of the control nodes: loop counts, switch cases, called functions and
    objects that are no IR node; each named by its path from the entry or function."""

    def __init__(self, program: Program, problems: list[str]) -> None:
        self.num_functions = len(program.functions)
        self.problems = problems

    def generic_visit(self, node: Node, *args: object) -> None:
        (path,) = args
        for role, child in named_children(node):
            self.visit(child, f"{path}/{role}")

    def visit_step(self, node: Step, *args: object) -> None:
        return None

    def visit_repeat(self, node: Repeat, *args: object) -> None:
        if not isinstance(node.count, int | np.integer) or node.count < 0:
            self.problems.append(f"Repeat at {args[0]}: count {node.count!r} must be an int >= 0")
        self.generic_visit(node, *args)

    def visit_switch(self, node: Switch, *args: object) -> None:
        values = [v for v, _ in node.cases]
        if len(set(values)) != len(values):
            self.problems.append(f"Switch at {args[0]}: duplicate case values {sorted(values)}")
        self.generic_visit(node, *args)

    def visit_call(self, node: Call, *args: object) -> None:
        if not 0 <= node.function < self.num_functions:
            self.problems.append(
                f"Call at {args[0]}: function {node.function} does not exist "
                f"(the program has {self.num_functions} function(s))"
            )

    def visit_other(self, node: object, *args: object) -> None:
        self.problems.append(f"{args[0]}: {type(node).__name__} is not an IR node")


#: Arrays of at most this many entries are checked with numpy, so that validating a
#: program of small steps does not load Numba's compiled checks (a fresh process spends
#: about half a second loading Numba's first compiled function).
_SMALL = 1 << 16


def _outside(values: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """(first index of a value outside ``[lo, hi]``, how many) or (-1, 0)."""
    if values.shape[0] > _SMALL:
        return _outside_compiled(values, lo, hi)
    bad = np.flatnonzero((values < lo) | (values > hi))
    return (int(bad[0]), int(bad.size)) if bad.size else (-1, 0)


def _repeats(tiles: np.ndarray, limit: int) -> bool:
    """Whether a tile id in ``[0, limit)`` occurs more than once (others are ignored)."""
    if tiles.shape[0] > _SMALL:
        return bool(_repeats_compiled(tiles, limit))
    inside = tiles[(tiles >= 0) & (tiles < limit)]
    # a count per tile id: numpy 2.4's np.unique hashes integers, about 240 us for 1,472
    return bool(np.bincount(inside).max(initial=0) > 1)


def _wrong_ipu(src: np.ndarray, dst: np.ndarray, limit: int, tiles_per_ipu: int, same: bool) -> int:
    """First transfer with both ends in ``[0, limit)`` whose ends are on different IPUs
    (``same``) or on one IPU (not ``same``); -1 if none."""
    if src.shape[0] > _SMALL:
        return int(_wrong_ipu_compiled(src, dst, limit, tiles_per_ipu, same))
    inside = (src >= 0) & (src < limit) & (dst >= 0) & (dst < limit)
    wrong = inside & ((src // tiles_per_ipu == dst // tiles_per_ipu) != same)
    at = np.flatnonzero(wrong)
    return int(at[0]) if at.size else -1


#: Upper bound of the non-negative checks.
_INT64_MAX = int(np.iinfo(np.int64).max)


@numba.njit(cache=True)
def _outside_compiled(values, lo, hi):  # pragma: no cover - compiled
    """(first index of a value outside ``[lo, hi]``, how many) or (-1, 0)."""
    first = -1
    count = 0
    for i in range(values.shape[0]):
        v = values[i]
        if v < lo or v > hi:
            if first < 0:
                first = i
            count += 1
    return first, count


@numba.njit(cache=True)
def _repeats_compiled(tiles, limit):  # pragma: no cover - compiled
    """Whether a tile id in ``[0, limit)`` occurs more than once (others are ignored)."""
    seen = np.zeros(limit, np.bool_)
    for i in range(tiles.shape[0]):
        t = tiles[i]
        if 0 <= t < limit:
            if seen[t]:
                return True
            seen[t] = True
    return False


@numba.njit(cache=True)
def _wrong_ipu_compiled(src, dst, limit, tiles_per_ipu, same):  # pragma: no cover - compiled
    """First transfer with both ends in ``[0, limit)`` whose ends are on different IPUs
    (``same``) or on one IPU (not ``same``); -1 if none."""
    for k in range(src.shape[0]):
        s = src[k]
        d = dst[k]
        inside = 0 <= s < limit and 0 <= d < limit
        if inside and (s // tiles_per_ipu == d // tiles_per_ipu) != same:
            return k
    return -1


def _check_collective(step: Collective, num_ipus: int, problems: list[str]) -> None:
    """Problems of a collective step: op, algorithm, groups, sizes and root."""
    where = f"collective step '{step.name}'"
    if step.op not in COLLECTIVE_OPS:
        problems.append(
            f"{where} field 'op': found {step.op!r}; expected one of {', '.join(COLLECTIVE_OPS)}"
        )
    if step.algorithm not in COLLECTIVE_ALGORITHMS:
        problems.append(
            f"{where} field 'algorithm': found {step.algorithm!r}; expected one of "
            f"{', '.join(COLLECTIVE_ALGORITHMS)}"
        )
    if len(step.num_bytes) != len(step.groups) or len(step.max_tile_bytes) != len(step.groups):
        problems.append(
            f"{where}: {len(step.groups)} group(s) but {len(step.num_bytes)} num_bytes and "
            f"{len(step.max_tile_bytes)} max_tile_bytes; required one of each per group"
        )
    if any(b < 0 for b in (*step.num_bytes, *step.max_tile_bytes)) or step.element_bytes < 1:
        problems.append(f"{where}: byte counts must be >= 0 and element_bytes >= 1")
    if len(step.member_tiles) != len(step.groups) or any(t < 1 for t in step.member_tiles):
        problems.append(
            f"{where}: member_tiles {step.member_tiles} must give one count >= 1 per group "
            f"({len(step.groups)} group(s))"
        )
    seen: set[int] = set()
    for k, group in enumerate(step.groups):
        if not group:
            problems.append(f"{where} group {k}: it is empty; a group needs at least one IPU")
        bad = [i for i in group if not 0 <= i < num_ipus]
        if bad:
            problems.append(
                f"{where} group {k}: IPU {bad[0]} is out of range [0, {num_ipus}); hint: "
                "collectives name machine-wide IPU ids"
            )
        twice = sorted(set(group) & seen | {i for i in group if group.count(i) > 1})
        if twice:
            problems.append(
                f"{where} group {k}: IPU {twice[0]} takes part more than once (in this or "
                "an earlier group); every IPU belongs to at most one group"
            )
        seen |= set(group)
        if group and not 0 <= step.root < len(group):
            problems.append(
                f"{where} field 'root': {step.root} is not a position in group {k} of "
                f"{len(group)} IPU(s)"
            )


def _check_call_cycles(program: Program, problems: list[str]) -> None:
    """Functions may not call themselves, directly or not (no recursion on the IPU)."""

    def calls(node: Node) -> set[int]:
        return {n.function for n in walk(node) if isinstance(n, Call)}

    graph = {i: calls(fn) for i, fn in enumerate(program.functions)}
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            f = stack.pop()
            if f == start:
                problems.append(f"function {start} calls itself (recursion is not supported)")
                break
            if f in seen or f not in graph:
                continue
            seen.add(f)
            stack.extend(graph[f])
