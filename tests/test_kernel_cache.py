"""The package kernels' disk cache is stamped with the code they reach in other files.

Numba reuses a ``cache=True`` kernel's machine code while the kernel's own file is
unchanged; a callee or constant of another file compiled into it is not looked at.
:mod:`ipusim.kernel_cache` stamps the packages' kernels with all they reach. Each case
here runs a small package of two files in fresh processes (as a later program would
find the cache), edits the callee's file only, and runs again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CALLEE = """\
import numba

FACTOR = 2


@numba.njit(cache=True)
def scale(x):
    return x * 2
"""

CALLER = """\
import numba

from kpkg import b


@numba.njit(cache=True)
def kernel(x):
    return b.scale(x) + b.FACTOR
"""

#: Runs kpkg's kernel in a new process: prints its value and the cache hits.
RUNNER = """\
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import ipusim.kernel_cache as kernel_cache
if sys.argv[2] == "stamped":
    kernel_cache.PACKAGE_DIRS.append(Path(sys.argv[1]).resolve() / "kpkg")
kernel_cache.install()
from kpkg import a
value = a.kernel(5)
locator = type(a.kernel._cache._impl.locator)
print(json.dumps({"value": int(value), "hits": sum(a.kernel.stats.cache_hits.values()),
                  "locator": locator.__module__}))
"""


def _package(tmp_path: Path) -> Path:
    package = tmp_path / "kpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(CALLER)
    (package / "b.py").write_text(CALLEE)
    return tmp_path


def _run(where: Path, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    # the edited callee must not come back from a .pyc of the same size and second
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(where), mode],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


EDITS = {
    "the callee's code": ("return x * 2", "return x * 3", 5 * 3 + 2),
    "a constant": ("FACTOR = 2", "FACTOR = 7", 5 * 2 + 7),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_kernel_is_compiled_again_when_only_a_file_it_calls_changes(tmp_path, edit):
    old, new, expected = EDITS[edit]
    where = _package(tmp_path)
    first = _run(where, "stamped")
    assert first == {"value": 12, "hits": 0, "locator": "ipusim.kernel_cache"}
    again = _run(where, "stamped")
    assert again["value"] == 12 and again["hits"] == 1, "an unchanged kernel is loaded"
    callee = where / "kpkg" / "b.py"
    callee.write_text(callee.read_text().replace(old, new))
    edited = _run(where, "stamped")
    assert edited["value"] == expected and edited["hits"] == 0
    assert _run(where, "stamped")["hits"] == 1, "the new entry is loaded the next time"


def test_numba_alone_keeps_the_stale_kernel(tmp_path):
    """What the stamps are for: a kernel outside the stamped directories is cached by
    Numba's own stamp and runs the callee's old code after the callee's file changed.
    (If a Numba release stops doing so, this fails, and the stamps may be redundant.)"""
    where = _package(tmp_path)
    assert _run(where, "numba")["value"] == 12
    callee = where / "kpkg" / "b.py"
    callee.write_text(callee.read_text().replace("return x * 2", "return x * 3"))
    stale = _run(where, "numba")
    assert stale == {"value": 12, "hits": 1, "locator": "numba.core.caching"}


#: Every cache=True kernel of the packages imported by a program, and its locator.
KERNELS = """\
import sys
{first}
import popart_api, poplar_api.lowering.runs, ipusim.machine
from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher
from ipusim import kernel_cache
for name, module in sorted(sys.modules.items()):
    if not kernel_cache._in_packages(getattr(module, "__file__", None) or ""):
        continue
    for attr, value in sorted(vars(module).items()):
        if isinstance(value, Dispatcher) and not isinstance(value._cache, NullCache):
            print(name, attr, type(value._cache._impl.locator).__module__)
"""


@pytest.mark.parametrize("first", ["", "import numba", "import ipusim"])
def test_every_package_kernel_is_stamped_whatever_is_imported_first(first):
    """``import ipusim`` installs the locators before the packages' first kernel is
    decorated, whether Numba was loaded before it or after."""
    out = subprocess.run(
        [sys.executable, "-c", KERNELS.format(first=first)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) > 100  # the packages have some 170 cached kernels
    assert [r for r in rows if r[2] != "ipusim.kernel_cache"] == []
