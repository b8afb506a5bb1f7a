"""Which operations each basic block of a counted kernel holds: the classification of
counted execution (:mod:`poplar_api.counted`, docs/counted_cycles.md).

:func:`block_profile` walks the typed IR of a counting compilation (where Numba knows
every value's type) and classifies every statement into the classes of
:data:`ipusim.tile.counted.OP_CLASSES`: loads and stores by width, integer and float
arithmetic by type, compares, branches, loop iterations, math and other calls, and the
instructions of :mod:`poplar_api.ipu_intrinsics` as the instructions they are. The
rules (what a statement costs as IPU instructions) are listed in the docs.

Two rules look beyond one statement:

* ``rpt`` loops: a ``for`` loop over :func:`poplar_api.ipu_intrinsics.rpt` has no
  loop-step cost, and the blocks of its body are marked ``rpt_body`` (they run as
  bundles); a body with a conditional branch or a nested loop is refused, as the
  hardware's repeat body cannot hold one;
* address folding: an integer ``index ± constant`` used only as indices of loads and
  stores (``a[i + 1]``, a memory intrinsic's index) is part of the instruction's
  addressing (``ld32 $a, $mBase, $mIndex, imm``: an immediate offset, or a
  post-incremented pointer), not an ``int_alu``;
* an integer ``//`` or ``%`` by a constant power of two is a shift or a mask.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba.core import ir
from numba.core import types as nb_types
from numba.core.analysis import compute_cfg_from_blocks

from ipusim.tile.counted import DELAY_CLASS, OP_CLASSES, RPT_BODY_CLASS
from poplar_api import ipu_intrinsics
from poplar_api.errors import CodeletError

__all__ = ["BlockProfile", "block_profile"]

#: ``int64[blocks, len(OP_CLASSES)]``: the operations of each block of a kernel.
BlockProfile = np.ndarray

#: Name of the counters argument added to a counted kernel.
COUNTS_ARG = "ipusim_block_counts_"
#: Prefix of the temporaries of the counter statements.
PREFIX = "$ipusim_cnt"

_COLUMN = {name: k for k, name in enumerate(OP_CLASSES)}

_COMPARE = {operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne}
_DIVIDE = {
    operator.truediv,
    operator.itruediv,
    operator.floordiv,
    operator.ifloordiv,
    operator.mod,
    operator.imod,
}
_MUL = {operator.mul, operator.imul}
_SHIFTABLE = {operator.floordiv, operator.ifloordiv, operator.mod, operator.imod}
_ADD_SUB = {operator.add, operator.iadd, operator.sub, operator.isub}
#: Intrinsic -> positions of its index arguments (memory instructions).
_INDEX_ARGS: dict[Any, tuple[int, ...]] = {
    ipu_intrinsics.load_float2: (1,),
    ipu_intrinsics.store_float2: (1,),
    ipu_intrinsics.load_half4: (1,),
    ipu_intrinsics.store_half4: (1,),
    ipu_intrinsics.ld2x64pace: (2,),
    ipu_intrinsics.ld2xst64pace: (2, 4),
}
_POW = {operator.pow, operator.ipow}
_MATH_NAMES = frozenset(
    {
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "cbrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "erf",
        "erfc",
        "gamma",
        "lgamma",
        "pow",
        "power",
        "hypot",
        "arcsin",
        "arccos",
        "arctan",
        "arctan2",
        "arcsinh",
        "arccosh",
        "arctanh",
    }
)
_SELECT_NAMES = frozenset({"min", "max", "abs", "fabs", "absolute", "minimum", "maximum"})
_FREE_EXPRS = frozenset(
    {"pair_first", "pair_second", "exhaust_iter", "cast", "build_tuple", "phi", "dummy"}
)


def _float_class(typ: Any) -> str | None:
    """``float_arith``/``half_arith``/``double_arith`` for a float type, else None."""
    if isinstance(typ, nb_types.Float):
        return {16: "half_arith", 32: "float_arith"}.get(typ.bitwidth, "double_arith")
    return None


def _width_class(kind: str, dtype: Any) -> list[str]:
    """Load or store classes for one element of ``dtype``."""
    size = getattr(dtype, "bitwidth", 32) // 8
    if isinstance(dtype, nb_types.Complex):
        size = dtype.bitwidth // 8
    if size <= 2:
        return [f"{kind}_narrow"]
    if size <= 4:
        return [f"{kind}_32"]
    return [f"{kind}_64"] * max(1, size // 8)


def _binop(fn: Any, lhs: Any, rhs: Any) -> list[str]:
    if isinstance(lhs, nb_types.Array) or isinstance(rhs, nb_types.Array):
        return ["array_op"]
    floats = [c for c in (_float_class(lhs), _float_class(rhs)) if c is not None]
    if fn in _COMPARE:
        return ["float_compare" if floats else "int_compare"]
    if fn in _POW:
        return ["math_call"]
    if floats:
        if fn in _DIVIDE:
            return ["float_div"]
        order = ("half_arith", "float_arith", "double_arith")
        return [max(floats, key=order.index)]
    if fn in _MUL:
        return ["int_mul"]
    if fn in _SHIFTABLE and _power_of_two(rhs):
        return ["int_alu"]  # a shift or a mask, as any compiler makes it
    if fn in _DIVIDE:
        return ["float_div"] if fn in (operator.truediv, operator.itruediv) else ["int_div"]
    return ["int_alu"]


def _power_of_two(typ: Any) -> bool:
    """Whether ``typ`` is an integer literal that is a positive power of two."""
    value = getattr(typ, "literal_value", None)
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


def _intrinsic(fnty: Any) -> Any:
    """The :mod:`poplar_api.ipu_intrinsics` function a call type calls, else None."""
    if isinstance(fnty, nb_types.Dispatcher):
        found = fnty.dispatcher
        return found if found in ipu_intrinsics.INSTRUCTIONS else None
    return None


def _callee_name(fnty: Any) -> str:
    """The Python name of the function a typed ``call`` calls ('' if unknown)."""
    key = getattr(fnty, "typing_key", None)
    if key is None:
        templates = getattr(fnty, "templates", ())
        key = getattr(templates[0], "key", None) if templates else None
    return getattr(key, "__name__", "") or str(key or "")


@dataclass
class _Scan:
    """What the classification knows about the kernel's variables (found in a first
    pass over every block)."""

    typemap: dict[str, Any]
    #: integer (and other) constants by variable name
    consts: dict[str, Any] = field(default_factory=dict)
    #: tests of range loops (part of brnzdec)
    loop_tests: set[str] = field(default_factory=set)
    #: variables holding an rpt range or its iterator
    rpt_vars: set[str] = field(default_factory=set)
    #: ``index ± constant`` results folded into a load's or store's addressing
    folded: set[str] = field(default_factory=set)


def _first_pass(blocks: dict[int, ir.Block], typemap: dict[str, Any]) -> _Scan:
    """Constants, loop tests, ``rpt`` ranges and the index offsets folded into
    addressing, over every statement of the kernel."""
    scan = _Scan(typemap)
    uses: dict[str, int] = {}
    index_uses: dict[str, int] = {}
    offsets: list[str] = []
    stmts = [s for label in sorted(blocks) for s in blocks[label].body]
    for stmt in stmts:
        if isinstance(stmt, ir.Del):
            continue
        if isinstance(stmt, ir.Assign):
            value = stmt.value
            used = (
                value.list_vars()
                if isinstance(value, ir.Expr)
                else ([value] if isinstance(value, ir.Var) else [])
            )
            if isinstance(value, ir.Const | ir.Global | ir.FreeVar):
                scan.consts[stmt.target.name] = value.value
            elif isinstance(value, ir.Var) and value.name in scan.rpt_vars:
                scan.rpt_vars.add(stmt.target.name)
            elif isinstance(value, ir.Expr):
                fnty = scan.typemap.get(value.func.name) if value.op == "call" else None
                found = _intrinsic(fnty)
                if found is ipu_intrinsics.rpt:
                    scan.rpt_vars.add(stmt.target.name)
                elif found in _INDEX_ARGS:
                    for pos in _INDEX_ARGS[found]:
                        if pos < len(value.args):
                            name = value.args[pos].name
                            index_uses[name] = index_uses.get(name, 0) + 1
                elif value.op == "getitem" and _addressable(typemap.get(value.value.name)):
                    name = value.index.name
                    index_uses[name] = index_uses.get(name, 0) + 1
                elif value.op == "getiter" and value.value.name in scan.rpt_vars:
                    scan.rpt_vars.add(stmt.target.name)
                elif value.op == "pair_second":
                    scan.loop_tests.add(stmt.target.name)
                elif value.op in ("binop", "inplace_binop") and value.fn in _ADD_SUB:
                    offsets.append(stmt.target.name)
        else:
            used = stmt.list_vars()
            if isinstance(stmt, ir.SetItem) and _addressable(typemap.get(stmt.target.name)):
                index_uses[stmt.index.name] = index_uses.get(stmt.index.name, 0) + 1
        for var in used:
            uses[var.name] = uses.get(var.name, 0) + 1
    for name in offsets:
        if uses.get(name, 0) and index_uses.get(name, 0) == uses[name]:
            scan.folded.add(name)
    for stmt in stmts:  # an integer offset by an integer constant only
        if isinstance(stmt, ir.Assign) and stmt.target.name in scan.folded:
            expr = stmt.value
            const = [
                scan.consts.get(v.name)
                for v in (expr.lhs, expr.rhs)
                if isinstance(scan.consts.get(v.name), int)
            ]
            if not const or not isinstance(typemap.get(stmt.target.name), nb_types.Integer):
                scan.folded.discard(stmt.target.name)
    return scan


def _addressable(typ: Any) -> bool:
    """Whether indexing a value of ``typ`` is a load or store with an address (a field
    array, or a VectorList's vectors)."""
    return isinstance(typ, nb_types.Array | nb_types.List | nb_types.ListType)


def _intrinsic_classes(found: Any, expr: ir.Expr, scan: _Scan) -> list[Any]:
    cls = ipu_intrinsics.INSTRUCTIONS[found][1]
    if cls != DELAY_CLASS:
        return [cls]
    operand = scan.consts.get(expr.args[0].name) if expr.args else None
    if not isinstance(operand, int) or isinstance(operand, bool) or operand < 0:
        raise CodeletError(
            f"counted execution: delay({expr.args[0].name if expr.args else ''}) at "
            f"{expr.loc.short()}: the operand must be a constant number of cycles >= 0 (the "
            "instruction's immediate), found a value known only at run time; hint: "
            "write delay(1000) or a module constant"
        )
    return [(DELAY_CLASS, operand)]


def _call(expr: ir.Expr, scan: _Scan, result: Any) -> list[Any]:
    typemap = scan.typemap
    fnty = typemap.get(expr.func.name)
    found = _intrinsic(fnty)
    if found is not None:
        return _intrinsic_classes(found, expr, scan)
    if isinstance(fnty, nb_types.Dispatcher):
        return ["call"]
    args = [typemap.get(a.name) for a in expr.args]
    if isinstance(fnty, nb_types.NumberClass):  # np.float32(x), np.int32(x)
        if all(a.name in scan.consts for a in expr.args):
            return []  # a constant, made at compile time
        src = args[0]
        same_kind = isinstance(src, nb_types.Float) == isinstance(
            fnty.instance_type, nb_types.Float
        )
        return [] if same_kind and src == fnty.instance_type else ["convert"]
    name = _callee_name(fnty)
    if name in ("range", "bool", "prange"):
        return []
    if name == "len":
        return ["load_32"]
    if name in ("int", "float"):
        return ["convert"]
    if name in _MATH_NAMES:
        if any(isinstance(a, nb_types.Array) for a in args):
            return ["array_op"]
        return ["math_call"]
    if name in _SELECT_NAMES:
        if any(isinstance(a, nb_types.Array) for a in args):
            return ["array_op"]
        cls = _float_class(result)
        return [cls] if cls is not None else ["int_alu"]
    return ["call"]


def _expr(expr: ir.Expr, scan: _Scan, target: str) -> list[Any]:
    typemap = scan.typemap
    op = expr.op
    if op in _FREE_EXPRS:
        return []
    result = typemap.get(target)
    if op in ("binop", "inplace_binop"):
        if target in scan.folded:
            return []
        return _binop(expr.fn, typemap.get(expr.lhs.name), typemap.get(expr.rhs.name))
    if op == "unary":
        typ = typemap.get(expr.value.name)
        if isinstance(typ, nb_types.Array):
            return ["array_op"]
        cls = _float_class(typ)
        return [cls] if cls is not None else ["int_alu"]
    if op in ("getitem", "static_getitem", "typed_getitem"):
        base = typemap.get(expr.value.name)
        if isinstance(base, nb_types.Array):
            if isinstance(result, nb_types.Array):
                return ["int_alu"]  # a view: the address of its first element
            return _width_class("load", base.dtype)
        if isinstance(base, nb_types.BaseTuple):
            return []
        if isinstance(base, nb_types.List | nb_types.ListType):
            return ["load_64"]  # a VectorList's vector: its pointer and size
        return ["int_alu"]
    if op == "getattr":
        base = typemap.get(expr.value.name)
        if isinstance(base, nb_types.Array) and expr.attr in ("shape", "size"):
            return ["load_32"]  # the field's size word in the vertex state
        return []
    if op == "call":
        return _call(expr, scan, result)
    if op == "getiter":
        return [] if expr.value.name in scan.rpt_vars else ["int_alu"]
    if op == "iternext":
        return [] if expr.value.name in scan.rpt_vars else ["loop_backedge"]
    if op == "arrayexpr":
        return ["array_op"]
    return []


def _statement(stmt: Any, scan: _Scan) -> list[Any]:
    """Operation classes of one typed IR statement (a class, or (class, count))."""
    typemap = scan.typemap
    if isinstance(stmt, ir.Assign):
        if isinstance(stmt.value, ir.Expr):
            return _expr(stmt.value, scan, stmt.target.name)
        return []
    if isinstance(stmt, ir.SetItem | ir.StaticSetItem):
        typ = typemap.get(stmt.target.name)
        if isinstance(typ, nb_types.Array):
            index = getattr(stmt, "index", None)
            index_type = typemap.get(index.name) if isinstance(index, ir.Var) else None
            if isinstance(index_type, nb_types.SliceType) or isinstance(
                getattr(stmt, "index", None), slice
            ):
                return ["array_op"]
            return _width_class("store", typ.dtype)
        return ["call"]
    if isinstance(stmt, ir.Branch):
        # a range loop's test is part of its brnzdec (counted at iternext)
        return [] if stmt.cond.name in scan.loop_tests else ["branch"]
    return []


def _counter_index(stmt: Any, consts: dict[str, int]) -> int | None:
    """The block number of a counter's store (a constant index, or one Numba's rewrites
    made static), else None."""
    if isinstance(stmt, ir.StaticSetItem) and stmt.target.name == COUNTS_ARG:
        return int(stmt.index)
    if (
        isinstance(stmt, ir.SetItem)
        and stmt.target.name == COUNTS_ARG
        and stmt.index.name in consts
    ):
        return consts[stmt.index.name]
    return None


def _is_counter(stmt: Any) -> bool:
    if isinstance(stmt, ir.SetItem | ir.StaticSetItem):
        return stmt.target.name == COUNTS_ARG
    if isinstance(stmt, ir.Assign):
        return stmt.target.name.startswith(PREFIX)
    return False


def _rpt_bodies(blocks: dict[int, ir.Block], scan: _Scan) -> set[int]:
    """Labels of the blocks of ``rpt`` loop bodies; a body that branches is refused."""
    if not scan.rpt_vars:
        return set()
    cfg = compute_cfg_from_blocks(blocks)
    found: set[int] = set()
    for loop in cfg.loops().values():
        header = blocks[loop.header]
        is_rpt = any(
            isinstance(s, ir.Assign)
            and isinstance(s.value, ir.Expr)
            and s.value.op == "iternext"
            and s.value.value.name in scan.rpt_vars
            for s in header.body
        )
        if not is_rpt:
            continue
        body = set(loop.body) - {loop.header}
        for label in sorted(body):
            term = blocks[label].terminator
            if isinstance(term, ir.Branch) or label in {
                other.header for other in cfg.loops().values() if other is not loop
            }:
                raise CodeletError(
                    f"counted execution: the body of the rpt loop at {header.loc.short()} "
                    f"branches (at {term.loc.short()}): a hardware repeat body is straight "
                    "code (no if, while or inner loop); hint: use range() for this loop, "
                    "or move the condition out of it"
                )
        found |= body
    return found


def block_profile(cres: Any, num_blocks: int) -> BlockProfile:
    """``int64[num_blocks, len(OP_CLASSES)]``: the operations of each counted block of
    the compiled function ``cres`` (a Numba compile result of a counting kernel).

    A statement belongs to the block of the latest counter before it in its IR block
    (blocks that Numba merged after counting keep their counters in order); the few
    statements Numba placed before any counter go to the block of the next one. The
    counted blocks of ``rpt`` loop bodies get 1 in the ``rpt_body`` column.
    """
    annotation = cres.type_annotation
    blocks = annotation.blocks
    scan = _first_pass(blocks, annotation.typemap)
    consts: dict[str, int] = {
        name: int(value) for name, value in scan.consts.items() if name.startswith(f"{PREFIX}_k")
    }
    bodies = _rpt_bodies(blocks, scan)
    profile = np.zeros((num_blocks, len(OP_CLASSES)), np.int64)

    def add(k: int, classes: list[Any]) -> None:
        for cls in classes:
            if isinstance(cls, tuple):
                profile[k, _COLUMN[cls[0]]] += cls[1]
            else:
                profile[k, _COLUMN[cls]] += 1

    for label in sorted(blocks):
        current: int | None = None
        waiting: list[Any] = []
        for stmt in blocks[label].body:
            k = _counter_index(stmt, consts)
            if k is not None:
                current = k
                add(k, waiting)
                waiting = []
                if label in bodies:
                    profile[k, _COLUMN[RPT_BODY_CLASS]] = 1
                continue
            if _is_counter(stmt):
                continue
            classes = _statement(stmt, scan)
            if current is None:
                waiting += classes
            else:
                add(current, classes)
    return profile
