"""Counted execution of vertex kernels: how often each basic block of a ``compute`` ran,
and which operations each block holds, for the cycles a hardware IPU would take.

A codelet's ``compute`` is compiled a second time by Numba with one extra argument, an
``int64`` array of block counters, and a compiler pass (:class:`_CountBlocks`, run right
after Numba builds its IR) that adds ``counters[k] += 1`` at the start of every basic
block ``k``. The driver loop of a compute set gives each execution (vertex, or worker of
a multi-vertex) its own row of counters, so the run yields ``runs[execution, block]``.

The operations of each block come from the same compilation's typed IR (Numba knows
every value's type there): :func:`poplar_api.counted_ops.block_profile` classifies
every statement into the classes of :data:`ipusim.tile.counted.OP_CLASSES` (loads and
stores by width, integer and float arithmetic by type, compares, branches, loop
iterations, math and other calls, and the instructions of
:mod:`poplar_api.ipu_intrinsics`), giving ``profile[block, class]``. The counters'
own statements are left out. ``runs @ profile`` are the exact operation counts of the
code the user wrote; :mod:`ipusim.tile.counted` prices them with the machine config's
``counted`` section.

What the mapping from Numba operations to IPU instructions assumes is in
docs/counted_cycles.md (one instruction per scalar operation; an iteration of a
``range`` loop is one ``brnzdec``; Python ints and floats are priced as the 32-bit
values a C++ codelet would use unless configured otherwise).
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import hashlib
import inspect
import io
import operator
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba.core import compiler, ir
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.untyped_passes import IRProcessing
from numba.typed import List

import ipusim.tile.counted
from ipusim.files import write_bytes
from ipusim.tile.counted import OP_CLASSES
from poplar_api import counted_ops, driver_cache
from poplar_api.codelet_base import RUN_CHECKS_BOUNDS, RUN_NUM_WORKERS, VertexType
from poplar_api.codelet_compile import (
    InPlaceField,
    _as_ok,
    _driver_source,
    _first_call,
    _lowered_args,
    _numba_summary,
    _run_driver,
    _uses_num_workers,
    _worker_globals,
)
from poplar_api.counted_ops import COUNTS_ARG, PREFIX, BlockProfile, block_profile
from poplar_api.errors import CodeletError
from poplar_api.fields import FieldBatch

__all__ = [
    "VERTEX_CYCLE_MODES",
    "BlockProfile",
    "counting_kernel",
    "execute_counted",
    "operationCounts",
    "vertexCycles",
    "vertex_cycles_mode",
]

#: Values of the engine option ``debug.vertexCycles``: ``estimate`` (every vertex its
#: estimate, as the IPU Model), ``counted`` (every vertex whose kernel ipusim runs is
#: counted, library vertices included), ``auto`` (as Poplar: counted on hardware
#: devices for user codelets, estimates on IPU Model devices and for Poplibs vertices).
VERTEX_CYCLE_MODES = ("estimate", "auto", "counted")

#: The mode lowering uses when the engine does not pass ``debug.vertexCycles``.
_MODE: contextvars.ContextVar[str] = contextvars.ContextVar(
    "ipusim_vertex_cycles", default="estimate"
)

_COUNTS_ARG = COUNTS_ARG
_PREFIX = PREFIX


@contextlib.contextmanager
def vertexCycles(mode: str) -> Iterator[None]:
    """Where vertex cycles come from in graphs compiled inside a ``with`` block, for
    engines given no ``debug.vertexCycles`` option (see :data:`VERTEX_CYCLE_MODES`)."""
    if mode not in VERTEX_CYCLE_MODES:
        raise CodeletError(
            f"vertexCycles: mode {mode!r} is not one of {', '.join(VERTEX_CYCLE_MODES)}"
        )
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def vertex_cycles_mode(options: Any = None) -> str:
    """The mode of the engine option ``debug.vertexCycles`` in ``options`` (a mapping),
    else of the enclosing :func:`vertexCycles` block, else ``estimate``."""
    value = None if options is None else options.get("debug.vertexCycles")
    if value is None:
        return _MODE.get()
    mode = str(value).strip()
    if mode not in VERTEX_CYCLE_MODES:
        raise CodeletError(
            f"engine option debug.vertexCycles: found {value!r}; expected one of "
            f"{', '.join(VERTEX_CYCLE_MODES)}"
        )
    return mode


# --------------------------------------------------------------- the counting pass
@register_pass(mutates_CFG=True, analysis_only=False)
class _CountBlocks(FunctionPass):
    """Add ``counters[k] += 1`` at the start of every basic block ``k`` (blocks in label
    order) of a function whose last argument is the counters array."""

    _name = "ipusim_count_blocks"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        func_ir = state.func_ir
        if not func_ir.arg_names or func_ir.arg_names[-1] != _COUNTS_ARG:
            return False
        labels = sorted(func_ir.blocks)
        expected = getattr(state.func_id.func, "_ipusim_blocks", None)
        if expected != len(labels):
            raise CodeletError(
                f"counted execution of {state.func_id.func_qualname}: the kernel has "
                f"{len(labels)} blocks, {expected} were expected; hint: run it with the "
                "engine option debug.vertexCycles=estimate"
            )
        entry = labels[0]
        for k, label in enumerate(labels):
            block = func_ir.blocks[label]
            loc, scope = block.loc, block.scope
            counts = ir.Var(scope, _COUNTS_ARG, loc)
            index = ir.Var(scope, f"{_PREFIX}_k{k}", loc)
            one = ir.Var(scope, f"{_PREFIX}_one{k}", loc)
            old = ir.Var(scope, f"{_PREFIX}_old{k}", loc)
            new = ir.Var(scope, f"{_PREFIX}_new{k}", loc)
            stmts = [
                ir.Assign(ir.Const(k, loc), index, loc),
                ir.Assign(ir.Expr.getitem(counts, index, loc), old, loc),
                ir.Assign(ir.Const(1, loc), one, loc),
                ir.Assign(ir.Expr.binop(operator.add, old, one, loc), new, loc),
                ir.SetItem(counts, index, new, loc),
            ]
            at = 0
            if label == entry:  # after the arguments are bound
                for i, stmt in enumerate(block.body):
                    if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Arg):
                        at = i + 1
            block.body[at:at] = stmts
        return True


class _CountingCompiler(CompilerBase):
    """Numba's nopython pipeline with :class:`_CountBlocks` after IR processing."""

    def define_pipelines(self) -> list[Any]:
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(_CountBlocks, IRProcessing)
        pm.finalize()
        return [pm]


def _with_counters(py_func: Callable[..., Any], glob: dict[str, Any]) -> Callable[..., Any]:
    """A copy of ``py_func`` (from its source) taking the counters as a last argument."""
    try:
        source = textwrap.dedent(inspect.getsource(py_func))
    except (OSError, TypeError) as exc:
        raise CodeletError(
            f"counted execution of {py_func.__qualname__}: its source is not available "
            f"({exc}); hint: define compute in a file, or use the engine option "
            "debug.vertexCycles=estimate"
        ) from None
    if py_func.__closure__:
        raise CodeletError(
            f"counted execution of {py_func.__qualname__}: compute uses variables of an "
            "enclosing function (a closure); hint: make them globals or fields"
        )
    tree = ast.parse(source)
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    fdef.decorator_list = []
    last = fdef.args.args[-1] if fdef.args.args else fdef
    fdef.args.args.append(ast.copy_location(ast.arg(arg=_COUNTS_ARG), last))
    module = ast.Module(body=[fdef], type_ignores=[])
    ast.increment_lineno(module, py_func.__code__.co_firstlineno - 1)
    filename = py_func.__code__.co_filename
    namespace: dict[str, Any] = {}
    exec(compile(module, filename, "exec"), glob, namespace)
    func = namespace[fdef.name]
    func.__qualname__ = py_func.__qualname__ + "<counted>"
    func.__module__ = py_func.__module__
    func.__defaults__ = py_func.__defaults__
    func._ipusim_blocks = len(compiler.run_frontend(func).blocks)  # type: ignore[attr-defined]
    return func


@dataclass
class CountingKernel:
    """A kernel compiled with block counters: the Numba dispatcher and its block count."""

    dispatcher: Any
    num_blocks: int
    _profiles: dict[Any, np.ndarray]

    def profile(self) -> np.ndarray:
        """``int64[num_blocks, len(OP_CLASSES)]`` of the latest compiled signature."""
        if not self.dispatcher.overloads:
            raise CodeletError("counted kernel: not compiled yet")
        sig, cres = list(self.dispatcher.overloads.items())[-1]
        found = self._profiles.get(sig)
        if found is None:
            found = self._profiles[sig] = block_profile(cres, self.num_blocks)
        return found


_COUNTING: dict[tuple[Any, bool, int | None], CountingKernel] = {}
#: drivers of counted execution, by (codelet class, bounds checks, worker count)
_DRIVERS: dict[tuple[type, bool, int | None], Any] = {}
#: the kernel profile of each driver and call signature run so far
_PROFILES: dict[tuple[Any, tuple[Any, ...]], np.ndarray] = {}


def counting_kernel(
    py_func: Callable[..., Any], glob: dict[str, Any] | None, checked: bool, key: int | None
) -> CountingKernel:
    """The (cached) counting compilation of ``py_func`` with globals ``glob``."""
    cache_key = (py_func, checked, key)
    kernel = _COUNTING.get(cache_key)
    if kernel is None:
        func = _with_counters(py_func, py_func.__globals__ if glob is None else glob)
        dispatcher = numba.njit(pipeline_class=_CountingCompiler, boundscheck=checked or None)(func)
        kernel = _COUNTING[cache_key] = CountingKernel(dispatcher, func._ipusim_blocks, {})
    return kernel


@functools.lru_cache(maxsize=1)
def _counting_code() -> str:
    """Digest of the code a counted driver depends on besides its kernel: the counting
    pass (this module), the classification of operations (:mod:`counted_ops`) and the
    operation classes (:mod:`ipusim.tile.counted`); part of the disk cache's keys."""
    modules = (sys.modules[__name__], counted_ops, ipusim.tile.counted)
    digests = [hashlib.sha256(Path(m.__file__).read_bytes()).hexdigest() for m in modules]
    return "counted " + " ".join(digests)


def _stored_profile(path: Path, num_blocks: int) -> np.ndarray | None:
    """The kernel profile stored at ``path`` beside a disk-cached counted driver, or
    None when it is missing or unusable (an unusable file is removed)."""
    try:
        profile = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    if profile.dtype != np.int64 or profile.shape != (num_blocks, len(OP_CLASSES)):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return profile


def execute_counted(
    vtype: VertexType,
    fields: Mapping[str, FieldBatch | InPlaceField],
    num_vertices: int,
    num_workers: int,
    *,
    vertex_ids: np.ndarray,
    tiles: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`execute_lowered` with counted execution (:mod:`poplar_api.counted`).

    Returns
    -------
    tuple
        ``ok`` (bool per vertex), ``runs`` (``int64[executions, blocks]``: how often
        each execution ran each block of the kernel; an execution is a vertex, or a
        worker of a multi-vertex at row ``v * num_workers + w``) and the kernel's
        ``profile`` (``int64[blocks, len(OP_CLASSES)]``: its operations by class).

    A kernel that fails is run again uncounted, whose error names the vertex.
    """
    args, batches = _lowered_args(vtype, fields)
    checked = RUN_CHECKS_BOUNDS.get()
    per_count = _uses_num_workers(vtype)
    raw = inspect.getattr_static(vtype.cls, "compute").__func__
    py_func = getattr(raw, "py_func", raw)
    glob = _worker_globals(py_func, num_workers) if per_count else None
    kernel = counting_kernel(py_func, glob, checked, num_workers if per_count else None)
    key = (vtype.cls, checked, num_workers if per_count else None)
    driver = _DRIVERS.get(key)
    if driver is None:
        namespace = {"kernel": kernel.dispatcher, "List": List, "_as_ok": _as_ok}
        text = f"# counted driver of vertex type {vtype.name}\n" + _driver_source(vtype, True)
        reached = [*namespace.values(), _counting_code()]
        driver = _DRIVERS[key] = driver_cache.jit_source(text, "driver", namespace, reached)
    rows = num_vertices * num_workers if vtype.kind == "multi" else num_vertices
    counts = np.zeros((rows, kernel.num_blocks), np.int64)
    ok = np.ones(num_vertices, np.bool_)
    where = np.array((-1, -1), np.int64)
    if not num_vertices:
        return ok, counts, np.zeros((kernel.num_blocks, 0), np.int64)
    call = (num_vertices, num_workers, ok, where, counts, *args)
    sig = tuple(driver.typeof_pyval(a) for a in call)
    profile = _PROFILES.get((driver, sig))
    side = None if profile is not None else driver_cache.side_file(driver, call, "profile.npy")
    if side is not None:
        profile = _stored_profile(side, kernel.num_blocks)
        if profile is None:  # the code may be on disk, its profile is not: compile
            driver_cache.forget(driver)
    token = RUN_NUM_WORKERS.set(num_workers)
    try:
        try:
            _first_call(driver, num_vertices, num_workers, ok, where, [counts, *args])
        except Exception as exc:
            _run_driver(vtype, batches, args, num_vertices, num_workers, None, vertex_ids, tiles)
            raise CodeletError(
                f"vertex type {vtype.name!r}: counted execution failed: "
                f"{type(exc).__name__}: {_numba_summary(exc)}; hint: run with the engine "
                "option debug.vertexCycles=estimate"
            ) from exc
    finally:
        RUN_NUM_WORKERS.reset(token)
    if profile is None:
        # the kernel the driver calls: an entry's module made before holds its first one
        called = driver.py_func.__globals__["kernel"]
        if called is not kernel.dispatcher:
            kernel = CountingKernel(called, kernel.num_blocks, {})
        profile = kernel.profile()
        if side is not None:
            with contextlib.suppress(OSError):
                buffer = io.BytesIO()
                np.save(buffer, profile)
                write_bytes(side, buffer.getvalue(), what="counted kernel profile")
    _PROFILES[(driver, sig)] = profile
    return ok, counts, profile


def operationCounts(trace: Any) -> dict[str, dict[str, int]]:
    """The operations counted vertices executed in a run, by vertex type and class.

    Parameters
    ----------
    trace
        A run's trace (``engine.getTraces()[-1]``).

    Returns
    -------
    dict
        Vertex type -> {operation class -> count} (classes of
        :data:`ipusim.tile.counted.OP_CLASSES` that occurred), summed over every
        execution of every counted vertex of the type in the run (with several
        replicas, over replicas too). Empty when nothing was counted.
    """
    totals: dict[str, np.ndarray] = {}
    for rec in trace.records:
        executions = getattr(rec.details, "executions", None)
        if not executions:
            continue
        step = rec.step
        for execution in executions:
            for part in execution.parts:
                kinds = np.unique(step.vertex_type[part.positions])
                name = step.vertex_type_names[int(kinds[0])]
                found = part.operations().sum(axis=0)
                totals[name] = totals.get(name, 0) + found
    return {
        name: {OP_CLASSES[k]: int(v) for k, v in enumerate(counts.tolist()) if v}
        for name, counts in sorted(totals.items())
    }
