"""One vocabulary and one walk: step kinds and phases come from ipusim.ir, and every
walk of a program's control nodes goes through ir.children and ir.Visitor."""

from __future__ import annotations

import ast
import collections
import pathlib
import subprocess
import sys
import textwrap

import pytest
from source_trees import parsed

from ipusim import ir
from ipusim.ir_validation import validate_program
from ipusim.measured import PHASES as MEASURED_PHASES
from ipusim.measured_json import _TILE_CYCLE_KEYS
from ipusim.measured_summary import _PHASE_LABELS
from ipusim.profile.execution import STEP_TYPES, TILE_CYCLE_PHASES
from ipusim.profile.frames import IPU_COLUMNS, TILE_COLUMNS
from ipusim.sweep.analysis import PHASE_COLUMNS
from ipusim.sweep.store import PHASE_COLUMNS as STORED_PHASE_COLUMNS
from ipusim.sync.controller import SYNC_KINDS
from ipusim.timing import COMPONENTS

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ------------------------------------------------------------ derived vocabularies
@pytest.mark.parametrize("kind", sorted(ir.STEP_KINDS))
def test_every_step_kind_reaches_every_table(kind):
    info = ir.STEP_KINDS[kind]
    assert ir.STEP_CLASSES[kind].kind == kind
    assert STEP_TYPES[kind] == info.tag
    assert info.component is None or info.component in COMPONENTS
    phase = info.phase
    key = ir.PHASE_NAMES[phase].profile_key
    assert phase in ir.PHASES
    assert phase in MEASURED_PHASES
    assert phase in PHASE_COLUMNS
    assert phase in STORED_PHASE_COLUMNS
    assert phase in TILE_COLUMNS and phase in IPU_COLUMNS
    assert TILE_CYCLE_PHASES[key] == phase
    assert _TILE_CYCLE_KEYS[key] == phase
    label = ir.PHASE_NAMES[phase].label.lower()
    assert _PHASE_LABELS[f"{label} cycles"] == phase


def test_the_phases_are_those_of_the_step_kinds_in_report_order():
    assert set(ir.PHASES) == {k.phase for k in ir.STEP_KINDS.values()}
    assert list(ir.PHASE_NAMES) == list(ir.PHASES)
    assert ir.PHASES == ("compute", "internal_exchange", "global_exchange", "host_exchange", "sync")
    assert PHASE_COLUMNS == ir.PHASES
    assert list(TILE_CYCLE_PHASES.values()) == list(ir.PHASES)
    assert ("total", "compute", "compute_active", *ir.PHASES[1:]) == MEASURED_PHASES


def test_the_sync_controller_knows_every_sync_kind():
    assert tuple(k.value for k in ir.SyncKind) == SYNC_KINDS


def test_kinds_of_a_step_class_include_its_subclasses():
    assert ir.kinds_of(ir.StreamCopy) == {"stream_copy", "remote_buffer_copy"}
    assert ir.kinds_of(ir.Exchange, ir.GlobalExchange) == {"exchange", "global_exchange"}
    assert ir.kinds_of(ir.Step) == set(ir.STEP_KINDS)


NEW_KIND = """
import importlib.util, sys, pathlib
path = pathlib.Path({ir_path!r})
source = path.read_text()
source = source.replace(
    '        StepKind("sync", "Sync", "sync", None),\\n',
    '        StepKind("sync", "Sync", "sync", None),\\n'
    '        StepKind("dma", "DoDma", "dma_transfer", None),\\n',
)
source = source.replace(
    '    "sync": PhaseNames("sync", "sync"),\\n',
    '    "sync": PhaseNames("sync", "sync"),\\n    "dma_transfer": PhaseNames("dma", "DMA"),\\n',
)
assert "dma_transfer" in source
spec = importlib.util.spec_from_loader("ipusim.ir", loader=None, origin=str(path))
module = importlib.util.module_from_spec(spec)
sys.modules["ipusim.ir"] = module
exec(compile(source, str(path), "exec"), module.__dict__)
import ipusim
ipusim.ir = module
from ipusim.measured import PHASES
from ipusim.measured_json import _TILE_CYCLE_KEYS
from ipusim.measured_summary import _PHASE_LABELS
from ipusim.profile.execution import STEP_TYPES, TILE_CYCLE_PHASES
from ipusim.profile.frames import TILE_COLUMNS
from ipusim.sweep.analysis import PHASE_COLUMNS
from ipusim.trace import PHASES as TRACE_PHASES
print(PHASES[-1], PHASE_COLUMNS[-1], TRACE_PHASES[-1], TILE_COLUMNS[-3],
      TILE_CYCLE_PHASES["dma"], _TILE_CYCLE_KEYS["dma"], _PHASE_LABELS["dma cycles"],
      STEP_TYPES["dma"])
"""


def test_a_new_step_kind_flows_into_every_table():
    code = textwrap.dedent(NEW_KIND).format(ir_path=str(ROOT / "ipusim" / "ir.py"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["dma_transfer"] * 7 + ["DoDma"]


#: Literals allowed to hold several names of the vocabulary: the timing components
#: (named after config sections; each step kind names its component in STEP_KINDS).
ALLOWED_LITERALS = {("ipusim/timing.py", "COMPONENTS")}


def _vocabulary() -> set[str]:
    names = set(ir.STEP_KINDS) | set(ir.PHASES) | {k.value for k in ir.SyncKind}
    names |= {k.tag for k in ir.STEP_KINDS.values()}
    names |= {p.profile_key for p in ir.PHASE_NAMES.values()}
    return names


def _literals_restating_the_vocabulary(path: pathlib.Path, names: set[str]) -> list[str]:
    """``path:line`` of each tuple, list, set or dict literal holding two or more
    distinct names of ``names`` (outside the literals of ALLOWED_LITERALS)."""
    tree = parsed(path)
    rel = str(path.relative_to(ROOT))
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and (rel, t.id) in ALLOWED_LITERALS for t in targets):
                allowed.update(id(inner) for inner in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None] + node.values
        else:
            continue
        hits = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if len(hits & names) >= 2:
            found.append(f"{rel}:{node.lineno}: {sorted(hits & names)}")
    return found


def test_no_module_restates_the_kinds_or_phases():
    names = _vocabulary()
    found = []
    for path in sorted((ROOT / "ipusim").rglob("*.py")):
        if path.name != "ir.py":
            found += _literals_restating_the_vocabulary(path, names)
    assert found == [], "derive these from ipusim.ir:\n" + "\n".join(found)


def test_the_literal_check_finds_a_restated_list(tmp_path):
    path = ROOT / "ipusim" / "ir.py"  # ir.py itself states them
    found = _literals_restating_the_vocabulary(path, _vocabulary())
    assert any("'compute'" in line and "'internal_exchange'" in line for line in found)


CONTROL_CLASSES = {"Sequence", "Block", "Repeat", "RepeatWhile", "If", "Switch", "Call"}


def _control_dispatches(tree: ast.AST, defines: bool = False) -> list[tuple[str, int]]:
    """(function, line) of each function telling control classes apart: two or more
    ``isinstance`` tests against them (an if/elif chain over node classes restates the
    shape of the tree; one test, such as "is it a loop", does not). A class counts as
    ``ir.<Class>`` or as a name imported from ``ipusim.ir`` (any name of one with
    ``defines``: the module ir.py itself)."""
    imported = {"ir"}  # names bound to the module ipusim.ir, and its classes
    if defines:
        imported |= {f".{name}" for name in CONTROL_CLASSES}
    # One breadth-first walk (the order of ast.walk) collects the imports, the functions
    # and each isinstance call with the functions around it (a call inside a nested
    # function counts for the outer one too).
    functions: list[ast.FunctionDef] = []
    calls: list[tuple[ast.Call, tuple[int, ...]]] = []
    queue = collections.deque([(tree, ())])
    while queue:
        node, around = queue.popleft()
        if isinstance(node, ast.ImportFrom) and node.module in ("ipusim", "ipusim.ir"):
            for alias in node.names:
                if node.module == "ipusim.ir" and alias.name in CONTROL_CLASSES:
                    imported.add(f".{alias.asname or alias.name}")
                elif alias.name == "ir":
                    imported.add(alias.asname or "ir")
        elif isinstance(node, ast.FunctionDef):
            around = (*around, len(functions))
            functions.append(node)
        elif around and isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
            calls.append((node, around))
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                queue.append((value, around))
            elif isinstance(value, list):
                queue.extend((item, around) for item in value if isinstance(item, ast.AST))

    def control(n: ast.AST) -> bool:
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            return n.value.id in imported and n.attr in CONTROL_CLASSES
        return isinstance(n, ast.Name) and f".{n.id}" in imported

    tests = [0] * len(functions)
    for call, around in calls:
        if any(control(n) for n in ast.walk(call.args[1])):
            for index in around:
                tests[index] += 1
    return [(f.name, f.lineno) for f, n in zip(functions, tests, strict=True) if n >= 2]


def test_no_module_dispatches_on_control_nodes_outside_ir():
    """A walk of the control nodes is an ir.Visitor or goes through ir.children: no
    module but ir.py tells the control classes apart itself (the machine, the
    values-only interpreter, validation, profiles and the lowering's walks alike)."""
    found = []
    for package in ("ipusim", "poplar_api", "popart_api"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT) != pathlib.Path("ipusim/ir.py"):
                tree = parsed(path)
                rel = path.relative_to(ROOT)
                found += [f"{rel}:{line} {name}" for name, line in _control_dispatches(tree)]
    assert found == []


def test_the_dispatch_check_finds_a_walk_of_its_own():
    source = textwrap.dedent(
        """
        from collections.abc import Sequence
        from ipusim import ir
        from ipusim.ir import Repeat

        def run(node):
            if isinstance(node, ir.Sequence):
                for child in node.body:
                    run(child)
            elif isinstance(node, Repeat):
                run(node.body)

        def items(data):
            return isinstance(data, Sequence) or isinstance(data, tuple | list)
        """
    )
    assert _control_dispatches(ast.parse(source)) == [("run", 6)]
    in_ir = _control_dispatches(parsed(ROOT / "ipusim" / "ir.py"), True)
    assert [name for name, _ in in_ir] == ["children", "named_children"]


# -------------------------------------------------------------------- the walks
def _compute(name):
    return ir.Compute(name=name, vertex_tile=[0], vertex_cycles=[1])


def test_named_children_give_each_child_its_role():
    a, b, c = _compute("a"), _compute("b"), _compute("c")
    assert ir.named_children(ir.Sequence([a, b])) == [("0", a), ("1", b)]
    assert ir.named_children(ir.Repeat(2, a)) == [("body", a)]
    assert ir.named_children(ir.RepeatWhile(a, 3, b)) == [("condition", a), ("body", b)]
    assert ir.named_children(ir.If(1, a, b)) == [("then", a), ("else", b)]
    node = ir.Switch(4, ((1, a), (7, b)), c)
    assert ir.named_children(node) == [("case 1", a), ("case 7", b), ("default", c)]
    assert ir.named_children(a) == [] and ir.named_children(ir.Call(0)) == []


def test_a_visitor_sees_a_block_as_a_sequence_unless_it_asks():
    class Names(ir.Visitor):
        def __init__(self):
            self.seen = []

        def visit_step(self, node, *args):
            self.seen.append(node.name)

        def visit_sequence(self, node, *args):
            self.seen.append(f"seq {node.name}")
            self.generic_visit(node)

        def visit_other(self, node, *args):
            self.seen.append(f"other {node!r}")

    tree = ir.Sequence([ir.Block((_compute("a"),), name="blk"), ir.Repeat(3, _compute("b"))])
    names = Names()
    names.visit(ir.Sequence([tree, "junk"], name="top"))
    assert names.seen == ["seq top", "seq ", "seq blk", "a", "b", "other 'junk'"]


def test_execution_order_follows_the_predicates_and_marks_blocks():
    a, b, c, d, e = (_compute(n) for n in "abcde")
    asked = []
    answers = {10: [1, 1, 0], 11: [0], 12: [7]}

    def predicate(pid):
        asked.append(pid)
        return answers[pid].pop(0)

    block = ir.Block((e,), name="blk")
    body = ir.Sequence(
        [
            ir.RepeatWhile(ir.Sequence([a]), 10, b),  # a b a b a
            ir.If(11, c, d),  # d
            ir.Switch(12, ((3, c), (7, ir.Call(0))), a),  # the function: block e
            ir.Repeat(2, b),  # b b
        ]
    )
    program = ir.Program(entries=(body,), functions=(block,))
    items = list(ir.ExecutionOrder(program, predicate, blocks=True).visit(body))
    shown = [x.name if isinstance(x, ir.Step) else f"{x[0]} {x[1].name}" for x in items]
    assert shown == ["a", "b", "a", "b", "a", "d", "enter blk", "e", "exit blk", "b", "b"]
    assert asked == [10, 10, 10, 11, 12]
    plain = ir.ExecutionOrder(program, lambda pid: 0).visit(ir.Sequence([ir.Call(0)]))
    assert [x.name for x in plain] == ["e"]


def test_execution_order_asks_a_predicate_only_when_the_path_reaches_it():
    a, b = _compute("a"), _compute("b")
    asked = []
    order = ir.ExecutionOrder(
        ir.Program(entries=()), lambda pid: asked.append(pid) or 1, blocks=False
    )
    items = order.visit(ir.Sequence([a, ir.If(5, b)]))
    assert next(items) is a and asked == []
    assert next(items) is b and asked == [5]


def test_validation_names_each_bad_control_node_by_its_path():
    a = _compute("a")
    bad = ir.Sequence(
        [a, ir.If(1, ir.Repeat(-1, a), ir.Switch(2, ((1, a), (1, a)))), ir.Call(3), "junk"]
    )
    with pytest.raises(ir.IRValidationError) as err:
        validate_program(bad, num_tiles=4, tiles_per_ipu=4)
    text = str(err.value)
    assert "Repeat at entry 0/1/then: count -1 must be an int >= 0" in text
    assert "Switch at entry 0/1/else: duplicate case values [1, 1]" in text
    assert "Call at entry 0/2: function 3 does not exist (the program has 0 function(s))" in text
    assert "entry 0/3: str is not an IR node" in text
