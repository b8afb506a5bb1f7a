"""Every command and code example of the docs runs as written and prints what they show.

The documents are README.md, docs/*.md and examples/**/README.md. Each fenced block of
language ``sh``, ``console`` or ``python`` is run from a scratch copy of the repository
root (every top-level entry linked, so files a command writes land in the scratch
directory), the way a reader runs it after the README's two set-up commands: the
virtual environment's ``bin`` is *not* on the PATH, so a command must name
``.venv/bin/ipusim`` or ``.venv/bin/python`` itself.

* ``sh`` blocks run in one ``bash -e -o pipefail`` script and must exit 0;
* ``console`` blocks hold ``$ command`` lines, each followed by the output it shows;
  every command must exit 0 unless the next command is ``echo $?``;
* ``python`` blocks run as a script file with the venv's Python;
* a ``text`` block right after a runnable block (only blank lines between) is its
  shown output.

Shown output is compared with the real one line by line: runs of spaces count as one,
numbers may differ by the block's relative tolerance (default 0.5 %, or half a unit of
the last digit shown), host times are masked, and a line ``...`` stands for any number
of lines. HTML comments before a block change how it runs (``docs/doc_examples.md``):
``<!-- doc-test: skip REASON -->``, ``<!-- doc-test: slow -->``,
``<!-- doc-test: continue -->`` (run after the previous runnable block of the document,
in the same directory; python blocks share one process),
``<!-- doc-test: tolerance 2% -->`` and ``<!-- doc-test: file NAME -->`` (the block is
not run but written to the file NAME, for the blocks that continue it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

#: Documents whose examples are checked.
DOCUMENTS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("README.md")]
)
RUNNABLE = {"sh", "console", "python"}
#: Relative tolerance of shown numbers when a block gives none.
DEFAULT_TOLERANCE = 0.005
#: Seconds one chain of blocks may take before it is stopped.
TIMEOUT_S = 1800

_FENCE = re.compile(r"^(`{3,})(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
#: Printed host (wall-clock) times: masked on both sides before comparing.
_HOST_TIME = (
    re.compile(r"host time [0-9.]+ s; (?:[0-9,]+|-) simulated cycles per host second"),
    re.compile(r"[0-9.]+ host seconds"),
    re.compile(r"Host seconds:[^\n]*"),
    re.compile(r"\b[0-9.]+ s\b"),
)
_SEPARATOR = "@@doc-test block@@"


@dataclass
class Block:
    """One fenced block: where it is, its language, code, shown output and directives."""

    doc: Path
    line: int
    lang: str
    code: str
    output: str | None = None
    skip: str | None = None
    slow: bool = False
    chained: bool = False
    tolerance: float = DEFAULT_TOLERANCE
    file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


@dataclass
class Chain:
    """Blocks run one after the other in one scratch directory (one test)."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.blocks[0].where

    @property
    def slow(self) -> bool:
        return any(b.slow for b in self.blocks)

    @property
    def skip(self) -> str | None:
        return next((b.skip for b in self.blocks if b.skip), None)


def parse_directives(text: str, where: str) -> dict[str, str]:
    """``{"skip": reason, "slow": "", ...}`` from the text of ``doc-test:`` comments."""
    out: dict[str, str] = {}
    for part in text.split(";"):
        word, _, rest = part.strip().partition(" ")
        if word not in ("skip", "slow", "continue", "tolerance", "file"):
            raise ValueError(
                f"{where}: unknown doc-test directive {word!r}; expected skip REASON, slow, "
                "continue, tolerance PCT% or file PATH"
            )
        if word == "file" and not rest.strip():
            raise ValueError(f"{where}: 'doc-test: file' needs the file's path")
        if word == "skip" and not rest.strip():
            raise ValueError(f"{where}: 'doc-test: skip' needs a reason")
        out[word] = rest.strip()
    return out


def blocks_of(doc: Path) -> list[Block]:
    """The runnable blocks of ``doc``, each with its shown output and directives."""
    lines = doc.read_text().splitlines()
    blocks: list[Block] = []
    pending: dict[str, str] = {}
    last_end = -2  # index of the closing fence of the last runnable block
    i = 0
    while i < len(lines):
        d = _DIRECTIVE.match(lines[i])
        if d:
            pending.update(parse_directives(d[1], f"{doc}:{i + 1}"))
            i += 1
            continue
        m = _FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                pending = {} if not lines[i].startswith("<!--") else pending
            i += 1
            continue
        lang = m[2]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip() == m[1])
        body = "\n".join(lines[i + 1 : end]) + "\n"
        between = lines[last_end + 1 : i]
        if lang in ("yaml", "text") and "file" in pending:
            lang = "python"  # written to its file, like a python file block
        if lang == "text" and blocks and last_end >= 0 and not any(s.strip() for s in between):
            blocks[-1].output = body
        elif lang in RUNNABLE:
            tol = pending.get("tolerance")
            blocks.append(
                Block(
                    doc,
                    i + 1,
                    lang,
                    body,
                    skip=pending.get("skip"),
                    slow="slow" in pending,
                    chained="continue" in pending,
                    tolerance=float(tol.rstrip("%")) / 100 if tol else DEFAULT_TOLERANCE,
                    file=pending.get("file"),
                )
            )
            last_end = end
        pending = {}
        i = end + 1
    return blocks


def chains() -> list[Chain]:
    """Every document's blocks, grouped into chains by ``continue``."""
    out: list[Chain] = []
    for doc in DOCUMENTS:
        last: Chain | None = None  # the chain a `continue` block joins (never a skipped one)
        for block in blocks_of(doc):
            if block.chained and block.skip is None and last is not None:
                last.blocks.append(block)
                continue
            out.append(Chain([block]))
            if block.skip is None:
                last = out[-1]
    return out


# ------------------------------------------------------------------ comparing output
def mask(text: str) -> str:
    for pattern in _HOST_TIME:
        text = pattern.sub("<host time>", text)
    return text


def _number(token: str) -> tuple[float, float]:
    """Value of a shown number and half a unit of its last digit."""
    t = token.replace(",", "").replace("\u2212", "-")
    mantissa, _, exponent = t.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return float(t), 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def line_matches(shown: str, real: str, tolerance: float) -> bool:
    """Same text (runs of spaces as one) and numbers within ``tolerance``."""
    a, b = mask(shown).split(), mask(real).split()
    a_text = _NUMBER.sub("#", " ".join(a))
    b_text = _NUMBER.sub("#", " ".join(b))
    if a_text != b_text:
        return False
    for x, y in zip(_NUMBER.findall(" ".join(a)), _NUMBER.findall(" ".join(b)), strict=True):
        (vx, half), (vy, _) = _number(x), _number(y)
        if abs(vx - vy) > max(tolerance * max(abs(vx), abs(vy)), half * 1.001):
            return False
    return True


def output_matches(shown: str, real: str, tolerance: float) -> bool:
    """``real`` output shows ``shown``: line by line, ``...`` for any lines."""
    want = [s.rstrip() for s in shown.strip("\n").splitlines()]
    got = [s.rstrip() for s in real.strip("\n").splitlines()]

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and line_matches(want[i], got[j], tolerance) and match(i + 1, j + 1)

    return match(0, 0)


def assert_output(block: Block, shown: str, real: str) -> None:
    assert output_matches(shown, real, block.tolerance), (
        f"{block.where}: the output differs from what the document shows "
        f"(numbers within {block.tolerance:.1%}).\n--- shown\n{shown}\n--- real\n{real}"
    )


# ------------------------------------------------------------------ running blocks
#: Entries of the repository linked into a scratch directory (outputs such as
#: ``profiles/`` or ``runs/`` from earlier sessions are not, so nothing writes into them).
LINKED = (
    "README.md", "Makefile", "pyproject.toml", "benchmarks", "configs", "docs", "examples",
    "ipusim", "popart_api", "poplar_api", "tests",
)  # fmt: skip


def scratch_root(path: Path) -> Path:
    """``path`` with a link to each of :data:`LINKED` and to the venv (``.venv``)."""
    for name in LINKED:
        if (ROOT / name).exists():
            (path / name).symlink_to(ROOT / name)
    (path / ".venv").symlink_to(VENV_BIN.parent)
    return path


def reader_env() -> dict[str, str]:
    """The environment of a reader's shell: no venv on the PATH, no pytest variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "VIRTUAL_ENV"))}
    parts = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in parts if Path(p).resolve() != VENV_BIN.resolve())
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "100"
    return env


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=reader_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )


def console_commands(code: str) -> list[tuple[str, str]]:
    """``[(command, shown output)]`` of a console block (``$ `` prompts, ``\\`` joins)."""
    out: list[tuple[str, list[str]]] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = [line[2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            out.append(("\n".join(cmd), []))
        elif out:
            out[-1][1].append(line)
        else:
            raise ValueError(f"a console block starts with {line!r}; expected '$ command'")
        i += 1
    return [(c, "\n".join(o)) for c, o in out]


def run_console(block: Block, cwd: Path) -> None:
    commands = console_commands(block.code)
    script = ["__rc=0"]
    for k, (cmd, _) in enumerate(commands):
        script += [f"echo; echo '{_SEPARATOR} {k}'", "(exit $__rc)", cmd, "__rc=$?"]
        script.append(f"echo; echo '{_SEPARATOR} rc='$__rc")
    done = run(["bash", "-c", "\n".join(script)], cwd)
    parts = re.split(rf"\n{re.escape(_SEPARATOR)} (\d+)\n", "\n" + done.stdout)[1:]
    results = {}
    for k, text in zip(parts[::2], parts[1::2], strict=True):
        m = re.match(rf"(.*)\n{re.escape(_SEPARATOR)} rc=(\d+)\n?$", text, re.S)
        assert m, f"{block.where}: cannot split the output of the commands:\n{done.stdout}"
        results[int(k)] = (m[1], int(m[2]))
    for k, (cmd, shown) in enumerate(commands):
        assert k in results, f"{block.where}: {cmd!r} did not run:\n{done.stdout}"
        text, rc = results[k]
        checked = k + 1 < len(commands) and commands[k + 1][0].strip() == "echo $?"
        assert rc == 0 or checked, f"{block.where}: {cmd!r} exited with {rc}:\n{text}"
        assert_output(block, shown, text)


def run_chain(chain: Chain, cwd: Path) -> None:
    blocks = chain.blocks
    i = 0
    while i < len(blocks):
        block = blocks[i]
        if block.file is not None:
            (cwd / block.file).parent.mkdir(parents=True, exist_ok=True)
            (cwd / block.file).write_text(block.code)
            i += 1
            continue
        if block.lang == "console":
            run_console(block, cwd)
            i += 1
            continue
        if block.lang == "sh":
            done = run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd)
            assert done.returncode == 0, (
                f"{block.where}: the commands exited with {done.returncode}:\n{done.stdout}"
            )
            if block.output is not None:
                assert_output(block, block.output, done.stdout)
            i += 1
            continue
        # consecutive python blocks of a chain share one process
        group = [block]
        while (
            i + len(group) < len(blocks)
            and blocks[i + len(group)].lang == "python"
            and blocks[i + len(group)].file is None
        ):
            group.append(blocks[i + len(group)])
        sep = f"\nprint({_SEPARATOR!r}, flush=True)\n"
        script = cwd / f"doc_example_{block.line}.py"
        script.write_text(sep.join(b.code for b in group))
        done = run([str(VENV_BIN / "python"), script.name], cwd)
        outputs = done.stdout.split(_SEPARATOR + "\n")
        assert done.returncode == 0, f"{block.where}: the example failed:\n{done.stdout}"
        for b, text in zip(group, outputs, strict=True):
            if b.output is not None:
                assert_output(b, b.output, text)
        i += len(group)


CHAINS = chains()


@pytest.mark.parametrize(
    "chain",
    [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in CHAINS],
)
def test_doc_example(chain: Chain, tmp_path: Path) -> None:
    if chain.skip:
        pytest.skip(f"not run: {chain.skip}")
    run_chain(chain, scratch_root(tmp_path))


# ------------------------------------------------------------------ the checker itself
def test_output_comparison_rules() -> None:
    shown = "Total cycles:   1,000 (approx. 0.8 microseconds)\n...\nerror +0.5%\n"
    line = "Total cycles: {} (approx. 0.8 microseconds)"
    assert output_matches(shown, line.format("1,004") + "\nx\ny\nerror +0.5%", 0.005)
    assert not output_matches(shown, line.format("1,006") + "\nerror +0.5%", 0.005)
    assert not output_matches(shown, line.format("1,000") + "\nerror +0.6%", 0.005)
    assert not output_matches("a\nb\n", "a\n", 0.0)
    runs = "Runs: 1; host time {} s; {} simulated cycles per host second"
    assert output_matches(runs.format("0.693", "252,919"), runs.format("9.1", "5"), 0.0)
    assert not output_matches("mk1", "mk2", 0.5)
    assert output_matches("latency_s: 2.25e-06", "latency_s: 2.2504e-06", 0.0)
    assert not output_matches("latency_s: 2.25e-06", "latency_s: 2.26e-06", 0.0)
    assert output_matches("rel error \u22120.0%", "rel error -0.0%", 0.0)


def test_documents_have_runnable_examples() -> None:
    """The parser finds the blocks (a broken fence would hide every later example)."""
    found = {b.doc.name for c in CHAINS for b in c.blocks}
    assert {"README.md", "compare.md", "profiles.md", "workloads.md"} <= found


if __name__ == "__main__":  # list the chains
    for c in CHAINS:
        print(c.id, [b.lang for b in c.blocks], "slow" if c.slow else "", c.skip or "")
