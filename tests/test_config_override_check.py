"""OverrideCheck answers as with_overrides does, without building the config."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ipusim.config import OverrideCheck, list_presets, load_config, with_overrides
from ipusim.config_sections import leaf_paths
from ipusim.errors import ConfigError

_LEAVES = sorted(leaf_paths())
_PRESETS = sorted(list_presets())
_CHECKS = {name: OverrideCheck(load_config(name)) for name in _PRESETS}


def _leaf(cfg: Any, path: str) -> Any:
    node = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


@st.composite
def _override(draw: st.DrawFn, cfg: Any) -> tuple[str, Any]:
    """A config path (rarely an unknown one) and a value near its current value, at a
    bound, of another type or far off, so both sides of every check are drawn."""
    path = draw(st.sampled_from([*_LEAVES, "tile.nope", "nope"]))
    here = _leaf(cfg, path) if path in _LEAVES else None
    near: list[Any] = []
    if isinstance(here, bool):
        near = [not here]
    elif isinstance(here, int | float):
        factor = draw(st.sampled_from([0, -1, 0.5, 1, 2, 1.5, 1000]))
        near = [here * factor, int(here * factor), here + 1, here - 1]
    value = draw(
        st.one_of(
            st.sampled_from(near or [None]),
            st.integers(-(2**40), 2**40),
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([None, "1.33 GHz", "624 KiB", "x", [], {}, True, "ipu", "tile"]),
        )
    )
    return path, value


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_override_check_agrees_with_with_overrides(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(_PRESETS))
    cfg = load_config(name)
    pairs = data.draw(st.lists(_override(cfg), min_size=1, max_size=3))
    overrides = dict(pairs)
    try:
        with_overrides(cfg, overrides)
        expected = True
    except ConfigError:
        expected = False
    assert _CHECKS[name].accepts(overrides) is expected, (name, overrides)


def test_a_changed_tile_count_is_checked_against_the_other_sections() -> None:
    """A value valid in its own section but refused across sections (the sync
    controller's tile beyond the chip) is refused, as with_overrides refuses it."""
    cfg = load_config("mk2")
    check = OverrideCheck(cfg)
    small = {"tile.tiles_per_ipu": 64, "tile.columns": 16}
    assert cfg.sync.controller_tile >= 64
    try:
        with_overrides(cfg, small)
        whole = True
    except ConfigError:
        whole = False
    assert whole is False
    assert check.accepts(small) is False
    assert check.accepts({**small, "sync.controller_tile": 32}) is True


def test_a_config_whose_dump_is_refused_is_checked_the_whole_way() -> None:
    """A config made without validation (``model_copy(update=...)``) whose dump
    with_overrides refuses: refused with no overrides as with any, as with_overrides
    refuses it."""
    cfg = load_config("mk2")
    bad = cfg.model_copy(update={"tile": cfg.tile.model_copy(update={"clock_hz": -1.0})})
    check = OverrideCheck(bad)
    for overrides in ({}, {"sync.min_sync_delay_cycles": 0}, {"tile.clock_hz": 1.0e9}):
        try:
            with_overrides(bad, overrides)
            whole = True
        except ConfigError:
            whole = False
        assert check.accepts(overrides) is whole, overrides
