"""The import rules of DESIGN §2: ipusim never imports poplar_api; poplar_api never simpy."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imported_modules(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_ipusim_never_imports_poplar_api():
    offenders = [p for p, names in imported_modules("ipusim").items() if "poplar_api" in names]
    assert offenders == []


def test_poplar_api_never_imports_simpy():
    offenders = [p for p, names in imported_modules("poplar_api").items() if "simpy" in names]
    assert offenders == []


def test_importing_the_machine_loads_no_poplar_api():
    code = "import sys, ipusim.machine, ipusim.cli; print('poplar_api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
