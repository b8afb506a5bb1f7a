"""Machine config files: presets, safe YAML reading and the ``extends`` chain.

Presets live as YAML in ``configs/`` (``ipusim/configs`` in an installed wheel). A file
may ``extends: <preset or path>`` another; the chain is read into *layers* (label,
data), base first, which :func:`merge` joins and :mod:`ipusim.config` validates, so
that each problem can name the file that set the bad value.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ipusim.errors import ConfigError
from ipusim.errors import short_repr as _show

__all__ = [
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "Layer",
    "layers_from_source",
    "list_presets",
    "load_yaml_text",
    "merge",
    "preset_path",
    "read_yaml_mapping",
]

# Presets --------------------------------------------------------------------------------
_YAML_SUFFIXES = (".yaml", ".yml")
_MAPPING_LABEL = "<mapping>"


def _preset_dirs() -> list[Path]:
    """Directories holding preset YAML files, most preferred first.

    An installed wheel carries the presets as ``ipusim/configs``; a source checkout
    (or an editable install) has them in ``configs/`` next to the package directory.
    The checkout's directory is used only beside ``pyproject.toml``, so that an unrelated
    ``configs/`` next to an installed package (in site-packages) is never read.
    """
    package_dir = Path(__file__).resolve().parent
    dirs = [package_dir / "configs"]
    if (package_dir.parent / "pyproject.toml").is_file():
        dirs.append(package_dir.parent / "configs")
    return [d for d in dirs if d.is_dir()]


def list_presets() -> list[str]:
    """Names of the preset machine configs (``mk1``, ``mk2``, ...), sorted."""
    names = {path.stem for directory in _preset_dirs() for path in directory.glob("*.yaml")}
    return sorted(names)


def preset_path(name: str) -> Path:
    """Path of the YAML file of preset ``name``.

    Raises
    ------
    ConfigError
        ``name`` is not a preset; the message lists the presets.
    """
    if name and "/" not in name and os.sep not in name:
        for directory in _preset_dirs():
            path = directory / f"{name}.yaml"
            if path.is_file():
                return path
    raise ConfigError([_unknown_preset(name, "preset")])


def _unknown_preset(name: object, where: str) -> str:
    presets = ", ".join(list_presets()) or "(none found)"
    return (
        f"{where}: unknown preset {name!r}; expected one of: {presets} "
        f"(or a path to a YAML file ending in .yaml)"
    )


# Reading and merging ----------------------------------------------------------------------
Layer = tuple[str, dict[str, Any]]


def _looks_like_path(text: str) -> bool:
    return text.endswith(_YAML_SUFFIXES) or "/" in text or os.sep in text


#: Most nodes a YAML config may expand to, counting every alias as a copy of its anchor.
#: A preset has a few hundred; a "billion laughs" alias bomb has 10^9.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and lists in a YAML config (a preset nests 4 deep).
MAX_YAML_DEPTH = 64

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _YamlInputError(Exception):
    """A YAML document that parses but is refused (duplicate key, alias bomb, ...)."""

    def __init__(self, where: yaml.Mark | None, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


def _mark_text(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def _check_nodes(root: yaml.Node) -> None:
    """Refuse duplicate keys, recursive aliases, deep nesting and alias bombs.

    Runs on the composed node graph, before any Python object is built: an alias is
    one shared node there, so the expanded size of the document (every alias counted as
    a full copy, memoised per node) is found in time linear in the file, and a bomb is
    refused without ever being expanded.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def walk(node: yaml.Node, path: str, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: an alias refers to a node that contains it "
                f"(a recursive structure); expected a tree of mappings, lists and values",
            )
        if depth > MAX_YAML_DEPTH:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: nested more than {MAX_YAML_DEPTH} levels deep; "
                f"expected a YAML document a few levels deep (a machine config's or an "
                f"experiment's sections)",
            )
        active.add(key)
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                    name = (key_node.tag, key_node.value)
                    if name in seen:
                        where = f"{path}." if path else ""
                        raise _YamlInputError(
                            key_node.start_mark,
                            f"duplicate key '{where}{key_node.value}' (first at "
                            f"{_mark_text(seen[name])}); expected each key once per mapping "
                            f"(YAML would silently keep the last value); hint: delete or "
                            f"merge one of them",
                        )
                    seen[name] = key_node.start_mark
                child = f"{path}.{key_node.value}" if path else str(key_node.value)
                if not isinstance(key_node, yaml.ScalarNode):
                    child = f"{path}.<key>" if path else "<key>"
                size += walk(key_node, child, depth + 1) + walk(value_node, child, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                size += walk(item, f"{path}[{index}]", depth + 1)
        if size > MAX_YAML_NODES:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: the document expands to more than "
                f"{MAX_YAML_NODES:,} values (aliases counted as copies: an alias bomb?); "
                f"expected a machine config (a preset has a few hundred values)",
            )
        active.discard(key)
        sizes[key] = size
        return size

    walk(root, "", 0)


def load_yaml_text(text: str, label: str) -> Any:
    """Parse YAML ``text`` like :func:`yaml.safe_load`, refusing what a config never holds.

    PyYAML silently keeps the last of two equal keys and expands aliases without limit;
    a config with either is almost certainly a mistake (or an attack), so both are
    refused, as are recursive aliases and nesting deeper than :data:`MAX_YAML_DEPTH`.

    A text is parsed once per process (the last few texts are kept): programs, sweeps
    and the tests build many machines from the same few presets, and PyYAML's parser
    takes 15-25 ms of CPU for a preset where a copy of the parsed document takes
    0.2 ms. Each call returns its own deep copy, which the caller may change.

    Parameters
    ----------
    text
        The YAML document.
    label
        The file (or ``--set`` item) named in messages.

    Returns
    -------
    Any
        The parsed document (``None`` for an empty one).

    Raises
    ------
    yaml.YAMLError
        A YAML syntax error.
    ConfigError
        A duplicate key, an alias bomb, a recursive alias, too deep nesting or a number
        too long to read; the message names ``label``, the line and the key path.
    """
    return copy.deepcopy(_parsed_yaml_text(text, label))


@functools.lru_cache(maxsize=32)
def _parsed_yaml_text(text: str, label: str) -> Any:
    """:func:`load_yaml_text`'s document, parsed and checked (kept: never change it)."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(
                [
                    f"{label}: nested too deeply to read; expected a YAML document a few "
                    f"levels deep (a machine config's or an experiment's sections)"
                ]
            ) from None
        if node is None:
            return None
        try:
            _check_nodes(node)
        except _YamlInputError as exc:
            raise ConfigError([f"{label}: {_mark_text(exc.where)}: {exc.message}"]) from None
        try:
            return loader.construct_document(node)
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise ConfigError(
                [f"{label}: a value cannot be read ({exc}); expected a number of usual size"]
            ) from None
    finally:
        loader.dispose()


def read_yaml_mapping(path: Path, label: str, missing: str, wanted: str) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path`` (a machine config or an
    experiment), read safely (:func:`load_yaml_text`).

    Parameters
    ----------
    path, label
        The file, and how messages name it.
    missing
        What a message says after ``file not found;`` (what the file should have been).
    wanted
        What a message says of a top level that is not a mapping (``"expected a mapping
        of ..."``).

    Raises
    ------
    ConfigError
        One problem: the file is missing or unreadable, a value cannot be read, or the
        top level is not a mapping.
    yaml.YAMLError
        The text is not YAML; the caller words the problem for its kind of file.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{label}: file not found; {missing}"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{label}: cannot read the file ({exc})"]) from None
    data = load_yaml_text(text, label)
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"{_show(data)} ({type(data).__name__})"
        raise ConfigError([f"{label}: top level: found {found}; {wanted}"])
    return data


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    """Parse one YAML config file into a dict, or raise a one-problem ConfigError."""
    try:
        return read_yaml_mapping(
            path,
            label,
            f"expected a YAML machine config or a preset name ({', '.join(list_presets())})",
            "expected a mapping of config sections (name, tile, memory, exchange, sync, "
            "host, links, ...)",
        )
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(label, exc)]) from None


def _yaml_problem(label: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return (
        f"{label}: {where}: YAML syntax error: {detail}; expected valid YAML "
        f"(check indentation, a ':' after each key and closed quotes/brackets)"
    )


def _extends_target(value: Any, base_dir: Path, label: str) -> tuple[Path, str]:
    """Resolve an ``extends`` value to a file path and a label for messages."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            [
                f"{label}: extends: found {_show(value)}; expected a preset name "
                f"({', '.join(list_presets())}) or a path to a YAML file"
            ]
        )
    if _looks_like_path(value):
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = Path(os.path.normpath(base_dir / path))
        if not path.is_file():
            raise ConfigError(
                [
                    f"{label}: extends: found {value!r}, but {path} is not a file; expected a "
                    f"preset name or a path relative to the extending file"
                ]
            )
        return path, str(path)
    try:
        path = preset_path(value)
    except ConfigError:
        raise ConfigError([_unknown_preset(value, f"{label}: extends")]) from None
    return path, str(path)


def _resolve_layers(
    data: dict[str, Any], label: str, base_dir: Path, chain: list[tuple[Path, str]]
) -> list[Layer]:
    """Follow the ``extends`` chain of ``data``; layers come back base first."""
    data = dict(data)
    if "extends" not in data:
        return [(label, data)]
    parent_path, parent_label = _extends_target(data.pop("extends"), base_dir, label)
    resolved = parent_path.resolve()
    for seen_path, _ in chain:
        if seen_path == resolved:
            names = [lbl for _, lbl in chain] + [parent_label]
            raise ConfigError(
                [
                    f"{label}: extends: cycle {' -> '.join(names)}; expected a chain of "
                    f"'extends' that ends in a file without 'extends'"
                ]
            )
    parent = _read_yaml(parent_path, parent_label)
    chain = [*chain, (resolved, parent_label)]
    return [*_resolve_layers(parent, parent_label, parent_path.parent, chain), (label, data)]


def layers_from_source(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[Layer]:
    if isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
        return _resolve_layers(data, _MAPPING_LABEL, Path.cwd(), [])
    if isinstance(source, str) and not _looks_like_path(source):
        if source in list_presets():
            path = preset_path(source)
        elif Path(source).is_file():
            path = Path(source)
        else:
            raise ConfigError([_unknown_preset(source, "config")])
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
    else:
        raise ConfigError(
            [
                f"config: found {_show(source)} ({type(source).__name__}); expected a preset "
                f"name, a path to a YAML file or a mapping"
            ]
        )
    label = str(path)
    data = _read_yaml(path, label)
    return _resolve_layers(data, label, path.parent, [(path.resolve(), label)])


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive merge: mappings merge key by key, anything else in ``over`` wins."""
    out = dict(base)
    for key, value in over.items():
        if key == "provenance":  # a record of one file's values: never mixed with a base's
            out[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out
