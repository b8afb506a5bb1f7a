"""Convolution plans shared by the graphs of a process (``poplin.shared_plans``, Poplibs'
``PlanningCache``): a second graph of the same convolution, options and machine values
takes the plan the first searched for; any other machine value or option searches
again. Searches are counted by a spy on the planner's entry point."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ipusim.config import MachineConfig, with_overrides
from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.poplin import conv as conv_module
from poplar_api.poplin import shared_plans

PARAMS = poplin.ConvParams(FLOAT, 2, [8, 8], [3, 3], 4, 8, 1,
                           paddingLower=[1, 1], paddingUpper=[1, 1])  # fmt: skip
OTHER = poplin.ConvParams(FLOAT, 2, [6, 6], [1, 1], 8, 4, 1)


def _graph(config: str | MachineConfig = "tiny") -> Graph:
    return Graph(IPUModel(config).createDevice().getTarget())


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple]]:
    """The convolutions the planner searched plans for (``plan_convolution`` calls)."""
    calls: list[tuple] = []
    real = conv_module.plan_convolution

    def counting(params, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(params.key())
        return real(params, *args, **kwargs)

    monkeypatch.setattr(conv_module, "plan_convolution", counting)
    shared_plans.clear()
    yield calls
    shared_plans.clear()


def test_a_second_graph_takes_the_first_graphs_plan(searches) -> None:
    first = poplin.getConvPlan(_graph(), PARAMS)
    assert len(searches) == 2  # the direct and the expanded form
    second = poplin.getConvPlan(_graph(), PARAMS)
    assert second is first and len(searches) == 2
    assert not first.tiles.flags.writeable


def test_the_shared_plan_is_the_plan_a_search_gives(searches) -> None:
    shared = poplin.getConvPlan(_graph(), PARAMS)
    shared_plans.clear()
    fresh = poplin.getConvPlan(_graph(), PARAMS)
    assert fresh is not shared and len(searches) == 4
    assert str(fresh) == str(shared) and fresh.cost == shared.cost
    np.testing.assert_array_equal(fresh.tiles, shared.tiles)


def test_a_machine_value_the_planner_reads_makes_another_key(searches) -> None:
    tiny = IPUModel("tiny").config
    poplin.getConvPlan(_graph(tiny), PARAMS)
    poplin.getConvPlan(_graph(with_overrides(tiny, {"name": "renamed"})), PARAMS)
    assert len(searches) == 2  # a name is not a value
    faster = with_overrides(tiny, {"exchange.bytes_per_cycle": tiny.exchange.bytes_per_cycle * 2})
    poplin.getConvPlan(_graph(faster), PARAMS)
    assert len(searches) == 4
    release = "f927358" if tiny.software.poplibs_release != "f927358" else "7eac0f26"
    poplin.getConvPlan(_graph(with_overrides(tiny, {"software.poplibs_release": release})), PARAMS)
    assert len(searches) == 6


def test_a_virtual_graph_plans_for_its_own_tiles(searches) -> None:
    """A virtual graph's target has its parent's config but fewer tiles: the plan made
    for the whole machine is not its plan."""
    whole = poplin.getConvPlan(_graph(), PARAMS)
    assert int(whole.tiles.max()) >= 2
    part = poplin.getConvPlan(_graph().createVirtualGraph(0, 2), PARAMS)
    assert part is not whole and len(searches) == 4
    assert set(np.unique(part.tiles)) <= {0, 1}
    assert poplin.getConvPlan(_graph().createVirtualGraph(4, 6), PARAMS) is part


def test_options_make_another_key(searches) -> None:
    poplin.getConvPlan(_graph(), PARAMS)
    poplin.getConvPlan(_graph(), PARAMS, {"availableMemoryProportion": 0.3})
    assert len(searches) == 4


def test_the_least_recently_used_search_is_dropped(searches, monkeypatch) -> None:
    monkeypatch.setattr(shared_plans, "MAX_PLANS", 2)
    poplin.getConvPlan(_graph(), PARAMS)  # 2 searches
    poplin.getConvPlan(_graph(), OTHER)  # 1 (a 1x1 kernel has no expanded form)
    poplin.getConvPlan(_graph(), PARAMS)  # kept: used last now
    assert len(searches) == 3 and shared_plans.size() == 2
    poplin.getConvPlan(_graph(), poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 2, 2, 1))
    poplin.getConvPlan(_graph(), PARAMS)  # kept
    poplin.getConvPlan(_graph(), OTHER)  # dropped: searched again
    assert len(searches) == 5


def test_kept_options_and_dimension_maps_are_fresh_ones_read_only_until_cleared() -> None:
    # the planner's options and dimension maps, kept for the process, equal those made
    # anew, cannot be written, and are made again after clear (a program's first search
    # pays for them)
    from poplar_api.poplin import conv_splits
    from poplar_api.poplin.conv_params import dim_maps

    shared_plans.clear()
    first = conv_splits.kept_dim_maps(PARAMS)
    for params in (PARAMS, OTHER):
        kept = conv_splits.kept_dim_maps(params)
        assert conv_splits.kept_dim_maps(params) is kept
        fresh = dim_maps(params)
        assert len(kept) == len(fresh)
        for a, b in zip(kept, fresh, strict=True):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype and not a.flags.writeable
    parts, block = conv_splits.options(37, 16, 4)
    units = -(-37 // 4)
    want = sorted({-(-37 // min(-(-units // s) * 4, 37)) for s in range(1, 11)})
    assert parts.tolist() == [p for p in want if p <= 16]
    assert block.tolist() == [min(-(-units // p) * 4, 37) for p in parts.tolist()]
    assert not parts.flags.writeable and not block.flags.writeable
    assert conv_splits.options(37, 16, 4)[0] is parts
    shared_plans.clear()
    assert conv_splits.kept_dim_maps(PARAMS) is not first
    assert conv_splits.options(37, 16, 4)[0] is not parts
