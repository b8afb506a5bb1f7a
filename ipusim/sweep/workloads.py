"""Workload specs of an experiment: where they live, what they take, and their content hash.

A sweep checks every workload *before* any point runs, and it must do so without
running (or even importing) the workload: importing one builds codelets and may take
seconds, and :mod:`ipusim` never imports the layer above it (``poplar_api``). So the
workload's source is read and parsed with :mod:`ast`: the file (or the module's file)
must exist and define the function at top level, and the function must take every
parameter the experiment gives it. A name bound some other way (imported, assigned)
is accepted without looking at its parameters; the run then reports any problem.

The *workload hash* of a point is the SHA-256 of the source file's bytes, the
function name and the parameters (canonical JSON): it changes when the workload's own
file changes, not when a helper it imports does (bump the ipusim version or use a
fresh output directory for that).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_FUNCTION",
    "WorkloadSource",
    "canonical_json",
    "is_file_spec",
    "resolve_workload",
    "split_spec",
    "workload_hash",
]

#: The function a spec names when it has no ``:func`` part (as for ``ipusim run``).
DEFAULT_FUNCTION = "workload"


def canonical_json(value: Any) -> str:
    """``value`` as compact JSON with sorted keys: the form every hash of a sweep reads.

    Raises
    ------
    TypeError
        ``value`` holds something JSON cannot encode (the caller names the field).
    ValueError
        ``value`` holds NaN or an infinity, which have no canonical JSON form.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def split_spec(spec: str) -> tuple[str, str]:
    """``"a/b.py:build"`` -> ``("a/b.py", "build")``; the function defaults to ``workload``.

    The same rule as ``ipusim run``: the part after the last ``:`` is the function
    only when it is a Python identifier.
    """
    target, sep, func = spec.rpartition(":")
    if not sep or not func.isidentifier():
        return spec, DEFAULT_FUNCTION
    return target, func


def is_file_spec(target: str) -> bool:
    """True when ``target`` names a file (ends in ``.py`` or has a path separator)."""
    return target.endswith(".py") or "/" in target or "\\" in target


@dataclass(frozen=True)
class WorkloadSource:
    """A workload spec resolved to its source.

    Attributes
    ----------
    spec
        The spec to run: a file target made absolute, with ``:func`` when not default.
    function
        Name of the workload function.
    path
        The source file (the module's file for a module spec); None when a module has
        no readable source (a compiled or namespace module).
    problem
        Why the spec cannot be run (file missing, no such function, ...), or None.
    parameters
        Names of the parameters the function takes after ``device``; None when unknown
        (not found by parsing) or when it takes ``**kwargs``.
    required
        Parameters without a default.
    types
        Parameter -> ``int``, ``float``, ``str`` or ``bool``: its annotation when it
        is one of these names, else the type of a literal default.
    """

    spec: str
    function: str
    path: Path | None
    problem: str | None = None
    parameters: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()
    types: Mapping[str, str] = field(default_factory=dict)

    def type_problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` does not suit parameter ``name`` (by :attr:`types`), or None.

        The rule of ``ipusim run``: an int is a float, a bool is not a number.
        """
        want = self.types.get(name)
        if want is None:
            return None
        if want == "float":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        elif want == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, {"str": str, "bool": bool}[want])
        if ok:
            return None
        return f"{value!r} is a {type(value).__name__}; {self.function}() expects {want}"


def _module_file(target: str) -> tuple[Path | None, str | None]:
    """The source file of module ``target`` (found without importing it)."""
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError) as exc:
        return None, f"workload module {target!r} not found ({type(exc).__name__}: {exc})"
    if found is None:
        return None, f"workload module {target!r} not found on sys.path"
    origin = found.origin
    if not origin or not origin.endswith(".py"):
        return None, None  # exists, but has no Python source to read
    return Path(origin), None


_SIMPLE_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _simple_types(args: ast.arguments) -> dict[str, str]:
    """Parameter -> simple type name, from annotations (``rows: int``) or literal
    defaults (``rows=100``)."""
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    pairs = [
        *zip(positional, defaults, strict=True),
        *zip(args.kwonlyargs, args.kw_defaults, strict=True),
    ]
    out: dict[str, str] = {}
    for arg, default in pairs[1:] if positional else pairs:
        annotation = arg.annotation
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            name = annotation.value  # a string annotation ("int")
        elif isinstance(annotation, ast.Name):
            name = annotation.id
        else:
            name = ""
        if name in _SIMPLE_TYPES:
            out[arg.arg] = name
        elif annotation is None and isinstance(default, ast.Constant):
            kind = type(default.value).__name__
            if kind in _SIMPLE_TYPES:
                out[arg.arg] = kind
    return out


def _function_signature(
    tree: ast.Module, function: str
) -> tuple[bool, tuple[str, ...] | None, tuple[str, ...], dict[str, str]]:
    """Whether ``function`` is bound at the top level of ``tree``, its parameters after
    the first (None when not a plain ``def`` or it takes ``**kwargs``), the required
    ones and the simple types of those that have one."""
    bound = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            args = node.args
            positional = [*args.posonlyargs, *args.args][1:]  # after ``device``
            first_default = len(positional) - len(args.defaults)
            names = [a.arg for a in positional] + [a.arg for a in args.kwonlyargs]
            required = [a.arg for i, a in enumerate(positional) if i < first_default]
            required += [
                a.arg
                for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if default is None
            ]
            params = None if args.kwarg is not None else tuple(names)
            return True, params, tuple(required), _simple_types(args)
        names_bound: set[str] = set()
        if isinstance(node, ast.Import | ast.ImportFrom):
            names_bound = {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            names_bound = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names_bound = {node.target.id}
        elif isinstance(node, ast.ClassDef):
            names_bound = {node.name}
        if function in names_bound or "*" in names_bound:
            bound = True
    return bound, None, (), {}


def _defined_functions(tree: ast.Module) -> list[str]:
    return sorted(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
    )


@lru_cache(maxsize=256)
def _parse(path: Path, mtime_ns: int) -> ast.Module | str:
    """The parsed source of ``path`` or a problem line (cached by modification time)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"workload file {str(path)!r} cannot be read ({exc})"
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return f"workload file {str(path)!r} has a syntax error at line {exc.lineno}: {exc.msg}"


def resolve_workload(spec: str, base_dir: Path) -> WorkloadSource:
    """Resolve ``spec`` (a file relative to ``base_dir``, or a module) and inspect it.

    Parameters
    ----------
    spec
        ``path/file.py[:func]`` or ``package.module[:func]``.
    base_dir
        Directory a relative file path is relative to (the experiment file's).

    Returns
    -------
    WorkloadSource
        With ``problem`` set when the spec cannot run; never raises for a bad spec.
    """
    target, function = split_spec(spec.strip())
    suffix = "" if function == DEFAULT_FUNCTION and ":" not in spec else f":{function}"
    if is_file_spec(target):
        path = (base_dir / Path(target).expanduser()).resolve()
        resolved = f"{path}{suffix}"
        if not path.is_file():
            return WorkloadSource(
                resolved,
                function,
                path,
                f"workload file {target!r} not found (looked for {str(path)!r}); hint: "
                "a relative path is relative to the experiment file's directory",
            )
    else:
        resolved = f"{target}{suffix}"
        found, problem = _module_file(target)
        if problem is not None:
            return WorkloadSource(
                resolved,
                function,
                None,
                f"{problem}; hint: give a path to a .py file (relative to the experiment "
                "file) or a module importable from sys.path",
            )
        if found is None:
            return WorkloadSource(resolved, function, None)
        path = found
    parsed = _parse(path, path.stat().st_mtime_ns)
    if isinstance(parsed, str):
        return WorkloadSource(resolved, function, path, parsed)
    bound, params, required, types = _function_signature(parsed, function)
    if not bound:
        have = ", ".join(_defined_functions(parsed)) or "(none)"
        return WorkloadSource(
            resolved,
            function,
            path,
            f"workload {target!r} has no function {function!r} (its functions: {have}); "
            f"hint: define def {function}(device, **params) or name another with "
            f"{target}:FUNCTION",
        )
    return WorkloadSource(resolved, function, path, None, params, required, types)


@lru_cache(maxsize=256)
def _file_digest(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def workload_hash(source: WorkloadSource, params: Mapping[str, Any]) -> str:
    """16 hex digits: SHA-256 of the workload's source bytes, function name and params.

    The file's location is left out, so moving a checkout keeps every hash. A module
    without readable source is hashed by its spec instead.
    """
    if source.path is not None and source.path.is_file():
        stat = source.path.stat()
        content = _file_digest(source.path, stat.st_mtime_ns, stat.st_size)
    else:
        content = "spec:" + source.spec
    text = canonical_json({"source": content, "function": source.function, "params": params})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
