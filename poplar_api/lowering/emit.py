"""Lowering of the program tree to the machine's IR: the dispatch and control flow.

:class:`Emitter` walks a program tree and lowers each program by its class; the
shared state and helpers of the lowering are an
:class:`~poplar_api.lowering.emission.Emission`. Programs with their own module:

* ``Execute``: :mod:`poplar_api.lowering.execute` (exchanges around a compute set;
  on several IPUs the elements that cross IPUs go first, as an external sync and a
  ``GlobalExchange`` per destination IPU, see :mod:`poplar_api.lowering.exchange`).
* ``Copy`` and ``PrintTensor``: :mod:`poplar_api.lowering.copies`.
* ``CrossReplicaCopy``, copies of non-replicated views and GCL collectives:
  :mod:`poplar_api.lowering.collective`.

Here:

* Control flow becomes IR control nodes; predicates are read from device memory
  after an internal sync, or on several IPUs after an external sync of all of them
  (every IPU follows the same control flow, so the value must reach each).
* ``Block`` programs whose name matches the engine option ``profiler.blocks.filter``,
  and every named program whose name matches ``profiler.programs.filter`` (implicit
  blocks), become IR ``Block`` nodes; the machine records their per-tile cycles. Both
  options are regular expressions that must match the whole name (``re.fullmatch``).
  Other ``Block`` programs lower to their body alone.
* Every entry program (what ``Engine.run`` runs) ends with an internal sync of all
  tiles (:meth:`Emitter.entry`), as a Poplar run does before control returns to the
  host.
* ``WriteUndef`` lowers to no step; it is recorded for memory liveness
  (``Emission.undefs``). ``Call`` lowers a function's program once.
* ``Abort`` is an internal sync whose effect stops the run
  (:class:`~poplar_api.errors.ApplicationRuntimeError`); ``AbortOnCondition`` is an
  ``If`` around one; ``ErrorProgram`` is a ``PrintTensor`` of its debug tensor whose
  effect prints the message and stops the run. ``AssumeEqualAcrossReplicas`` lowers
  to nothing (the Engine checks at run time that replicas agree on every predicate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ipusim import ir
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.errors import ApplicationRuntimeError
from poplar_api.lowering.collective import (
    lower_collective,
    lower_cross_replica_copy,
    lower_nonreplicated_copy,
)
from poplar_api.lowering.copies import lower_copy, lower_print_tensor
from poplar_api.lowering.copy_merge import max_copy_merge_size, merge_stream_copies
from poplar_api.lowering.emission import Emission, HostIO, prefetch_option, with_effect
from poplar_api.lowering.execute import lower_execute
from poplar_api.printing import format_tensor

__all__ = ["END_OF_RUN_SYNC", "Emitter", "HostIO", "prefetch_option"]

#: Name of the internal sync that ends every run (:meth:`Emitter.entry`).
END_OF_RUN_SYNC = "EndOfRun/Sync"


class Emitter:
    """Lowers programs of one graph into IR nodes; problems go to ``em.problems``.

    Parameters
    ----------
    em
        The emission: the graph, where effects are registered, what is recorded.
    step
        Called with 1 as each program is lowered (a progress meter's count), or None.
    """

    def __init__(self, em: Emission, step: Callable[[int], None] | None = None) -> None:
        self.em = em
        self.step = step
        #: function index -> its lowered program (each lowered once)
        self.functions: dict[int, ir.Node] = {}
        #: opt.maxCopyMergeSize: most bytes of adjacent stream copies merged into one
        self.merge_limit = max_copy_merge_size(em.options)

    def lower(self, prog: P.Program) -> ir.Node:
        """IR of one program (problems are appended to ``self.em.problems``)."""
        method: Callable[[Any], ir.Node] | None = getattr(self, f"_{type(prog).__name__}", None)
        if method is None:
            for base in type(prog).__mro__[1:]:
                method = getattr(self, f"_{base.__name__}", None)
                if method is not None:
                    break
        if method is None or not isinstance(prog, P.Program):
            self.em.problems.append(f"{prog!r} is not a program this engine can run")
            return ir.Sequence()
        self.em.programs.append(prog)
        node = method(prog)
        if self.step is not None:
            self.step(1)
        name = _program_name(prog)
        implicit = self.em.programs_filter
        # profiler.programs.filter: a named program it matches runs in an implicit Block
        wrap = implicit is not None and name and not isinstance(prog, P.Block)
        if wrap and implicit.fullmatch(name):
            node = ir.Block((node,), name=name, program_id=self.em.pid(prog))
        return node

    def entry(self, prog: P.Program) -> ir.Node:
        """IR of an entry program (what ``Engine.run`` runs): the program, then an
        internal sync of every tile of each IPU.

        A Poplar run hands control back to the host only once every tile has finished,
        so it ends with a sync whose delay the run pays (nothing with
        ``minIPUSyncDelay = 0`` and ``NO_DELAY``; docs/machine.md, "The end of a run").
        """
        body = self.lower(prog)
        end = self.em.sync(self.em.pid(prog), "internal", END_OF_RUN_SYNC)
        return ir.Sequence((body, end))

    def _Block(self, prog: P.Block) -> ir.Node:
        body = self.lower(prog.program)
        selected = self.em.blocks_filter
        if selected is None or not selected.fullmatch(prog.debugName):
            return body  # an unselected Block is its program alone, as in Poplar
        return ir.Block((body,), name=prog.debugName, program_id=self.em.pid(prog))

    def _Sequence(self, prog: P.Sequence) -> ir.Node:
        nodes = [self.lower(p) for p in prog.programs]
        # adjacent stream copies share one host sync (copy_merge.py)
        nodes = merge_stream_copies(nodes, self.merge_limit, self.em.touches)
        return ir.Sequence(nodes, name=prog.debugName)

    def _Repeat(self, prog: P.Repeat) -> ir.Node:
        return ir.Repeat(prog.count, self.lower(prog.body))

    def _RepeatWhileTrue(self, prog: P.RepeatWhileTrue) -> ir.Node:
        pred = self.em.predicate(prog.predicate, type(prog).__name__)
        sync = self.em.touch(self.em.predicate_sync(self.em.pid(prog)), prog.predicate)
        cond = ir.Sequence([self.lower(prog.cond), sync])
        return ir.RepeatWhile(
            cond, -1 if pred is None else pred, self.lower(prog.body), prog.whileTrue
        )

    def _If(self, prog: P.If) -> ir.Node:
        pred = self.em.predicate(prog.predicate, "If")
        node = ir.If(
            -1 if pred is None else pred, self.lower(prog.trueBody), self.lower(prog.falseBody)
        )
        return ir.Sequence(
            [self.em.touch(self.em.predicate_sync(self.em.pid(prog)), prog.predicate), node]
        )

    def _Switch(self, prog: P.Switch) -> ir.Node:
        what = "Switch" + (f" '{prog.debugName}'" if prog.debugName else "")
        strict = tuple(v for v, _ in prog.cases) if prog.noCase else None
        ctl = self.em.predicate(prog.control, what, integral=True, cases=strict)
        cases = [(v, self.lower(b)) for v, b in prog.cases]
        node = ir.Switch(-1 if ctl is None else ctl, cases, self.lower(prog.defaultCaseBody))
        return ir.Sequence(
            [self.em.touch(self.em.predicate_sync(self.em.pid(prog)), prog.control), node]
        )

    def _Sync(self, prog: P.Sync) -> ir.Node:
        kind = {"internal": "internal", "external": "external", "global": "host"}
        return self.em.sync(self.em.pid(prog), kind[prog.syncType.value], prog.debugName or "sync")

    def _Call(self, prog: P.Call) -> ir.Node:
        fn = prog.function
        funcs = self.em.state.functions
        if not (0 <= fn.index < len(funcs) and funcs[fn.index] is fn):
            self.em.problems.append(
                f"Call #{self.em.pid(prog)}: function {fn.index} (of {fn.program!r}) was made by "
                "another graph's addFunction; hint: call graph.addFunction on the engine's graph"
            )
            return ir.Sequence()
        if fn.index not in self.functions:
            self.functions[fn.index] = ir.Sequence()  # placeholder while lowering
            self.functions[fn.index] = self.lower(fn.program)
        return ir.Call(fn.index)

    def _WriteUndef(self, prog: P.WriteUndef) -> ir.Node:
        t = self.em.tensor(prog.tensor, "WriteUndef")
        node = ir.Sequence(name=prog.debugName or "WriteUndef")
        if t is not None:
            # a variable's ids stay a range until liveness reads them, one undef at a
            # time (a training step undefines every activation: as int64 arrays their
            # ids would all be held at once until the compile ends)
            self.em.undefs[id(node)] = [(t.elementType(), t._flat_ids())]
        return node

    # ------------------------------------------------------------------ abort
    def _abort_effect(self, prog: P.Program, message: str, before: Callable[[], None] | None):
        """An effect that (after ``before``) stops the run with ``message``."""
        label = repr(prog)
        text = f"{label} stopped the run" + (f": {message}" if message else " (no message)")

        def stop() -> None:
            if before is not None:
                before()
            raise ApplicationRuntimeError(text, message, label)

        return self.em.lowered.effect(stop)

    def _abort_step(self, prog: P.Program, message: str) -> ir.Step:
        name = prog.debugName or type(prog).__name__
        step = self.em.sync(self.em.pid(prog), "internal", f"{name}/Abort")
        return with_effect(step, self._abort_effect(prog, message, None))

    def _Abort(self, prog: P.Abort) -> ir.Node:
        return self._abort_step(prog, prog.message)

    def _AbortOnCondition(self, prog: P.AbortOnCondition) -> ir.Node:
        pred = self.em.predicate(prog.predicate, f"AbortOnCondition #{self.em.pid(prog)}")
        node = ir.If(-1 if pred is None else pred, self._abort_step(prog, prog.message))
        return ir.Sequence(
            [self.em.touch(self.em.predicate_sync(self.em.pid(prog)), prog.predicate), node]
        )

    def _ErrorProgram(self, prog: P.ErrorProgram) -> ir.Node:
        t = self.em.tensor(prog.debugTensor, f"ErrorProgram #{self.em.pid(prog)} debugTensor")
        if t is None:
            return ir.Sequence()
        storage, host, typ, ids, shape = (
            self.em.lowered.storage, self.em.host, t.elementType(), t.flat_index(), t.shape()
        )  # fmt: skip
        message, name = prog.message, t.name

        def report() -> None:
            host.print(message)
            host.print(format_tensor(name, storage.read(typ, ids).reshape(shape), typ))

        effect = self._abort_effect(prog, message, report)
        label = prog.debugName or f"ErrorProgram {name}"
        return self.em.host_transfer(prog, t, label, False, effect)

    def _AssumeEqualAcrossReplicas(self, prog: P.AssumeEqualAcrossReplicas) -> ir.Node:
        self.em.tensor(prog.tensor, f"AssumeEqualAcrossReplicas #{self.em.pid(prog)}")
        return ir.Sequence(name=prog.debugName)

    def _CrossReplicaCopy(self, prog: P.CrossReplicaCopy) -> ir.Node:
        return lower_cross_replica_copy(self.em, prog)

    def _NonReplicatedCopy(self, prog: P.NonReplicatedCopy) -> ir.Node:
        return lower_nonreplicated_copy(self.em, prog)

    def _GclCollective(self, prog: Any) -> ir.Node:
        return lower_collective(self.em, prog)

    def function_nodes(self) -> tuple[ir.Node, ...]:
        """Lowered functions, indexed as ``graph.addFunction`` numbered them."""
        n = len(self.em.state.functions)
        return tuple(self.functions.get(i, ir.Sequence()) for i in range(n))

    def _Execute(self, prog: P.Execute) -> ir.Node:
        return lower_execute(self.em, prog)

    def _Copy(self, prog: P.Copy) -> ir.Node:
        return lower_copy(self.em, prog)

    def _PrintTensor(self, prog: P.PrintTensor) -> ir.Node:
        return lower_print_tensor(self.em, prog)


def _program_name(prog: P.Program) -> str:
    """The name ``profiler.programs.filter`` matches: the debug name, or for an
    ``Execute`` without one the compute set's name."""
    if prog.debugName:
        return prog.debugName
    if isinstance(prog, P.Execute):
        return prog.computeSet.name
    return ""


def count_programs(programs: Sequence[P.Program], functions: Sequence[Any]) -> int:
    """Programs :class:`Emitter` lowers for ``programs``: every program in their trees,
    as often as it occurs, with each called function's program counted once (an
    emitter lowers a function at its first call). The total of the compile's progress
    meter; a walk of the programs, quick beside lowering them."""
    count, seen = 0, set()
    todo = list(programs)
    while todo:
        prog = todo.pop()
        count += 1
        todo.extend(prog.children())
        fn = getattr(prog, "function", None) if isinstance(prog, P.Call) else None
        index = getattr(fn, "index", None)
        known = index is not None and 0 <= index < len(functions) and functions[index] is fn
        if known and index not in seen:  # a function made by this graph, first call
            seen.add(index)
            todo.append(fn.program)
    return count
