"""Every logging variable of the table in docs/poplar_api.md ("Logging") does what the
table says: each level variable (and each module's own, for every module listed)
makes that module's lines appear, and each destination variable sends them where it
names. The table is read here, so a variable added to it without an effect fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poplar_api.logging_config import configure, logger

DOC = Path(__file__).resolve().parents[1] / "docs" / "poplar_api.md"


def _rows() -> list[tuple[str, str]]:
    """(variable, effect column) of every row of the Logging table."""
    text = DOC.read_text()
    start = text.index("## Logging")
    end = text.index("\n## ", start + 5)
    rows = re.findall(r"^\| `([A-Z_<>]+)` \| [^|]+ \| ([^\n]+) \|$", text[start:end], re.M)
    assert rows, "no Logging table in docs/poplar_api.md"
    return rows


def _cases() -> list[tuple[str, str]]:
    """(variable, module) pairs to try: ``<MODULE>`` rows expanded to every module the
    row lists; a library-wide level or destination is tried on the first module of its
    library's row."""
    rows = _rows()
    modules = {}
    for var, effect in rows:
        if "<MODULE>" in var:
            modules[var.split("_")[0]] = re.findall(r"`([A-Z]+)`", effect)
    cases = []
    for var, _ in rows:
        lib = var.split("_")[0]
        if lib not in modules or "_LOG_" not in var:  # not a logging variable
            continue
        if "<MODULE>" in var:
            cases += [(var.replace("<MODULE>", m), m) for m in modules[lib]]
        else:
            cases.append((var, modules[lib][0]))
    return cases


@pytest.fixture(autouse=True)
def restore():
    yield
    configure({})


def test_the_table_lists_the_variables_of_both_libraries():
    names = {var for var, _ in _rows()}
    for lib in ("POPLAR", "POPLIBS"):
        assert {f"{lib}_LOG_LEVEL", f"{lib}_<MODULE>_LOG_LEVEL", f"{lib}_LOG_DEST"} <= names
    # the one other variable of the table has its tests in test_summary_graph_report.py
    assert {n for n in names if "_LOG_" not in n} == {"POPLAR_GRAPH_REPORT_DEST"}


@pytest.mark.parametrize(("variable", "module"), _cases(), ids=lambda v: str(v))
def test_each_variable_has_its_effect(variable, module, tmp_path, capsys):
    lib = variable.split("_")[0]
    if variable.endswith("_LOG_DEST"):
        dest = tmp_path / "log.txt"
        configure({f"{lib}_LOG_LEVEL": "INFO", variable: str(dest)})
        logger(module).info("to the file")
        configure({})  # closes the file
        assert "to the file" in dest.read_text()
        assert "to the file" not in capsys.readouterr().err
        return
    configure({variable: "INFO"})
    logger(module).info("shown")
    logger(module).debug("below the level")
    err = capsys.readouterr().err
    assert "shown" in err and "below the level" not in err
