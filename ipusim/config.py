"""Machine configuration: load, override, validate and hash a :class:`MachineConfig`.

The config is a frozen pydantic model per hardware component
(:mod:`ipusim.config_sections`, bounded and cross-checked by
:mod:`ipusim.config_limits`). Every field carries its unit in its name; YAML files may
write quantities with units ("624 KiB", "1.33 GHz", "64 GB/s", "2 us", see
:mod:`ipusim.units`). Presets live as YAML in ``configs/`` (``ipusim/configs`` in an
installed wheel); a file may ``extends: <preset or path>`` another and override some of
its fields (:mod:`ipusim.config_files`).

:func:`load_config` turns a preset name, a YAML path or a mapping into a
:class:`MachineConfig`; every problem of a bad config is reported at once in one
:class:`~ipusim.errors.ConfigError`, one line per problem naming the file, the dotted
field path, the value found and what was expected.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import weakref
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ipusim.config_files import (
    Layer,
    layers_from_source,
    list_presets,
    load_yaml_text,
    merge,
    preset_path,
)
from ipusim.config_limits import cross_problems
from ipusim.config_sections import (
    CodeConfig,
    CountedConfig,
    ExchangeConfig,
    GWLinksConfig,
    HostConfig,
    LinksConfig,
    MachineConfig,
    MemoryConfig,
    RemoteConfig,
    SimConfig,
    SyncConfig,
    TileConfig,
    field_description,
    leaf_paths,
    section_model,
    suggest_path,
)
from ipusim.errors import ConfigError
from ipusim.errors import short_repr as _show

__all__ = [
    "CodeConfig",
    "CountedConfig",
    "ExchangeConfig",
    "GWLinksConfig",
    "HostConfig",
    "LinksConfig",
    "MachineConfig",
    "MemoryConfig",
    "OverrideCheck",
    "RemoteConfig",
    "SimConfig",
    "SyncConfig",
    "TileConfig",
    "config_hash",
    "config_to_yaml",
    "list_presets",
    "load_config",
    "load_yaml_text",
    "parse_overrides",
    "preset_path",
    "with_overrides",
]

_OVERRIDES_LABEL = "<overrides>"
_LEAVES = frozenset(leaf_paths())
#: The sections :func:`~ipusim.config_limits.cross_problems` checks against each other
#: (its parameters after ``num_ipus``).
_CROSS_SECTIONS = tuple(inspect.signature(cross_problems).parameters)[1:]
#: Fields that label a config without changing any simulated number (not hashed).
_HASH_EXCLUDED = ("name", "description", "provenance")


# Validation with readable problems ----------------------------------------------------------
_MISSING = object()


def _origin(layers: list[Layer], path: tuple[str, ...]) -> str:
    """Label of the most derived layer that sets ``path`` (or a parent of it)."""
    for label, data in reversed(layers):
        node: Any = data
        for part in path:
            if not isinstance(node, Mapping):
                break
            if part not in node:
                node = _MISSING
                break
            node = node[part]
        if node is not _MISSING:
            return label
    return layers[-1][0]


def _problem_line(layers: list[Layer], error: Mapping[str, Any]) -> str:
    path = tuple(str(part) for part in error["loc"])
    dotted = ".".join(path) or "top level"
    label = _origin(layers, path)
    kind = error["type"]
    value = error.get("input")
    description = field_description(path)
    hint = f" ({dotted}: {description})" if description else ""
    if kind == "extra_forbidden":
        return (
            f"{label}: {dotted}: unknown key (found with value {_show(value)}); "
            f"{suggest_path(path, ('extends',))}"
        )
    if kind == "missing":
        return f"{label}: {dotted}: missing required field; expected a value{hint}"
    message = str(error["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        return f"{label}: {dotted}: {message}{hint}"
    message = message[:1].lower() + message[1:]
    return f"{label}: {dotted}: found {_show(value)}; {message}{hint}"


def _cross_check_lines(layers: list[Layer], data: Mapping[str, Any]) -> list[str]:
    """Cross-section problems, for every section that is valid on its own."""

    def section(name: str, model: type[BaseModel]) -> Any:
        raw = data.get(name, {})
        try:
            return model.model_validate(raw)
        except ValidationError:
            return None

    num_ipus = data.get("num_ipus", 1)
    if isinstance(num_ipus, bool) or not isinstance(num_ipus, int) or num_ipus < 1:
        num_ipus = None
    problems = cross_problems(
        num_ipus,
        section("tile", TileConfig),
        section("memory", MemoryConfig),
        section("exchange", ExchangeConfig),
        section("sync", SyncConfig),
        section("host", HostConfig),
        section("links", LinksConfig),
    )
    return [f"{_origin(layers, path)}: {'.'.join(path)}: {msg}" for path, msg in problems]


def _validate(layers: list[Layer], problems: list[str] | None = None) -> MachineConfig:
    """Merge ``layers`` (base first) and validate; ``problems`` found earlier are added."""
    problems = list(problems or [])
    data: dict[str, Any] = {}
    for _, layer in layers:
        data = merge(data, layer)
    try:
        cfg = MachineConfig.model_validate(data)
    except ValidationError as exc:
        found = [_problem_line(layers, err) for err in exc.errors() if err["loc"]]
        found += _cross_check_lines(layers, data)
        if not found:  # pragma: no cover - every root-level error is a cross check
            found = [f"{layers[-1][0]}: {err['msg']}" for err in exc.errors()]
        problems += found
    else:
        if not problems:
            return cfg
    source = next((label for label, _ in reversed(layers) if label != _OVERRIDES_LABEL), "")
    raise ConfigError(problems, header=f"invalid machine config {source}".rstrip())


def _overrides_layer(overrides: Mapping[str, Any]) -> tuple[Layer, list[str]]:
    """A layer from dotted-path overrides, and one problem per unknown path."""
    leaves = _LEAVES
    problems = []
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        path = tuple(str(key).split("."))
        if ".".join(path) not in leaves and section_model(path) is None:
            problems.append(
                f"{_OVERRIDES_LABEL}: {key}: unknown config path (found with value "
                f"{_show(value)}); {suggest_path(path)}"
            )
            continue
        for part in reversed(path):
            value = {part: value}
        nested = merge(nested, value)
    return (_OVERRIDES_LABEL, nested), problems


# Public API ---------------------------------------------------------------------------------
def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> MachineConfig:
    """Load and validate a machine config.

    Parameters
    ----------
    source
        A preset name (``"mk2"``, see :func:`list_presets`), a path to a YAML file, or a
        mapping with the same content. ``extends: <preset or path>`` (a path relative to
        the extending file, or to the working directory for a mapping) merges the file
        over its base recursively, the extending file winning; chains are allowed.
    overrides
        Dotted paths and values, applied after ``extends``:
        ``{"sync.min_sync_delay_cycles": 0, "num_ipus": 2}``.

    Returns
    -------
    MachineConfig
        The frozen, validated config.

    Raises
    ------
    ConfigError
        Every problem found, one line each naming the file (or ``<mapping>``), the
        field path, the value found and what was expected.
    """
    layers = layers_from_source(source)
    problems: list[str] = []
    if overrides:
        layer, problems = _overrides_layer(overrides)
        layers.append(layer)
    return _validate(layers, problems)


def with_overrides(cfg: MachineConfig, overrides: Mapping[str, Any]) -> MachineConfig:
    """A copy of ``cfg`` with dotted-path ``overrides`` applied and everything re-validated.

    Raises
    ------
    ConfigError
        An override path is unknown (the message names the closest valid path) or a
        value is invalid.
    """
    base = cfg.model_dump(mode="python")
    layers: list[Layer] = [(f"<config {cfg.name!r}>", base)]
    layer, problems = _overrides_layer(overrides)
    layers.append(layer)
    return _validate(layers, problems)


class OverrideCheck:
    """Whether :func:`with_overrides` would accept overrides of one config, answered
    without building the config.

    A sweep axis over a config field may hold up to 100,000 values, and each must be
    checked before anything runs; building a whole config per value costs about
    0.5 ms (nearly a minute for such an axis). The answer depends only on the sections
    the overrides touch and on the checks across sections, so this validates just those
    sections (from the config's dump, made once) and runs the cross-section checks with
    the config's other sections as they are: some 30-50 us a value. Overrides of
    top-level fields (``num_ipus``, ``provenance``, ...) are checked the whole way.

    Parameters
    ----------
    cfg
        The config the overrides apply to.
    """

    def __init__(self, cfg: MachineConfig) -> None:
        self.cfg = cfg
        self._dump = cfg.model_dump(mode="python")
        try:  # a config whose dump does not validate again is checked the whole way
            with_overrides(cfg, {})
            self._sections_alone = True
        except ConfigError:
            self._sections_alone = False

    def accepts(self, overrides: Mapping[str, Any]) -> bool:
        """True when ``with_overrides(cfg, overrides)`` returns a config, False when it
        raises :class:`~ipusim.errors.ConfigError`."""
        if not self._sections_alone:  # (its dump refused: every answer the whole way)
            return self._whole(overrides)
        (_, nested), problems = _overrides_layer(overrides)
        if problems:
            return False
        sections: dict[str, BaseModel] = {}
        for name, value in nested.items():
            model = section_model((name,))
            if model is None or not isinstance(value, Mapping):
                return self._whole(overrides)
            try:
                sections[name] = model.model_validate(merge(self._dump.get(name, {}), value))
            except ValidationError:
                return False
        parts = {name: sections.get(name, getattr(self.cfg, name)) for name in _CROSS_SECTIONS}
        return not cross_problems(self.cfg.num_ipus, **parts)

    def _whole(self, overrides: Mapping[str, Any]) -> bool:
        try:
            with_overrides(self.cfg, overrides)
        except ConfigError:
            return False
        return True


#: Hashes of the configs hashed so far, by ``id``: the config (weakly, so a later
#: config at a freed config's address is not taken for it) and its hash.
_HASHES: dict[int, tuple[weakref.ref, str]] = {}


def config_hash(cfg: MachineConfig) -> str:
    """Content hash of a config: 16 hex digits of the SHA-256 of its canonical JSON.

    ``name`` and ``description`` are left out: they label a machine but change no
    simulated number, so two configs with the same values share a hash. A config is
    frozen, so its hash is computed once per config object and kept while it lives
    (the convolution planner keys every plan by it: some 0.3 ms a dump in a build).
    """
    kept = _HASHES.get(id(cfg))
    if kept is not None and kept[0]() is cfg:
        return kept[1]
    digest = _content_hash(cfg)
    key = id(cfg)
    _HASHES[key] = (weakref.ref(cfg, lambda _, key=key: _forget(key)), digest)
    return digest


def _forget(key: int) -> None:
    """Drop the hash kept at ``key`` once its config is freed (a newer config at the same
    address has replaced it already if its weak reference is alive)."""
    kept = _HASHES.get(key)
    if kept is not None and kept[0]() is None:
        del _HASHES[key]


def _content_hash(cfg: MachineConfig) -> str:
    """:func:`config_hash` computed from the config's values."""
    values = cfg.model_dump(mode="json", exclude=set(_HASH_EXCLUDED))
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def config_to_yaml(cfg: MachineConfig) -> str:
    """The resolved config as YAML (base units, model field order); loads back equal."""
    return yaml.safe_dump(
        cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=100
    )


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Command-line overrides as dotted paths and values (each value read as YAML).

    ``["tile.clock_hz=1.85 GHz", "num_ipus=2"]`` gives
    ``{"tile.clock_hz": "1.85 GHz", "num_ipus": 2}``, for :func:`load_config`.

    Raises
    ------
    ConfigError
        Every item that is not ``PATH=VALUE`` or whose value is refused YAML.
    """
    overrides: dict[str, Any] = {}
    problems = []
    for item in items:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            problems.append(
                f"--set: found {item!r}; expected PATH=VALUE, e.g. sync.min_sync_delay_cycles=0"
            )
            continue
        try:
            value = load_yaml_text(text, f"--set {path.strip()}") if text.strip() else text
        except yaml.YAMLError:  # not YAML: the text itself (e.g. a quantity such as 1:2)
            value = text
        except ConfigError as exc:  # duplicate keys, an alias bomb, ...
            problems += exc.problems
            continue
        overrides[path.strip()] = value
    if problems:
        raise ConfigError(problems, header="invalid command line overrides")
    return overrides
