"""Convolution plans shared by every graph of the process, as Poplibs' ``PlanningCache``.

Poplibs keeps the plans it makes in a ``PlanningCache`` keyed by the convolution's
parameters, its options and the target (``PlanningCacheImpl::Key``,
``lib/poplin/PlanningCache.hpp``; ``getPlan`` in ``lib/poplin/ConvPlan.cpp`` at
graphcore/poplibs 7eac0f26 plans into a temporary cache when the caller passes none,
and looks a plan up first when it does). ipusim keeps each graph's plans in the graph
(:meth:`~poplar_api.Graph.libraryCache`, ``conv_serial.PLAN_CACHE``), and this module
keeps the plans it searched for in the process as well, so that a second graph with
the same convolutions on the same machine (a PopART inference session after the
training session of the same model, a test building a graph again) takes them instead
of searching again. The plans are the same either way; only host time is saved.

What a plan depends on is the key: the planner reads the convolution
(``ConvParams.key()``), its parsed options and the target, and the target only
through its machine config (worker contexts, memory, exchange, the Poplibs release it
plans as) and its tile count, so the target's part of the key is the config's content
hash (:func:`ipusim.config.config_hash`: every value but the config's name and
description) and ``getNumTiles()``: a virtual graph's target has its parent's config
but only its own tiles. Only the plan is kept (its tile array made read-only): the tile
geometries the search made for its estimates stay with the graph that searched, and
the lowering of a shared plan makes the few it reads (handing them over too saved
no measurable time: PopART CNN builds, medians of eight alternated builds 0.332 s
either way, and they are up to a megabyte a search).

At most :data:`MAX_PLANS` searches are kept, the least recently used dropped first;
:func:`clear` forgets them all (``benchmarks/bench_library.py`` clears them to time
the planning a program that builds one graph pays). The key holds what the planner
reads, not the planner's code: code that replaces part of the search while a process
runs (a test patching an estimator or a constant of the planner) clears them first,
or a plan searched before the change is taken.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ipusim.config import config_hash
from poplar_api.poplin import conv_splits
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.poplibs_conv2d_model import _partition_grid
from poplar_api.poplin.poplibs_float_candidates import _float_1x1

__all__ = ["MAX_PLANS", "clear", "plan_key", "shared_plan", "size"]

#: Plan searches kept for the process (least recently used dropped first).
MAX_PLANS = 512


_PLANS: OrderedDict[tuple, ConvPlan] = OrderedDict()


def plan_key(target: Any, params: ConvParams, opts: Mapping[str, Any]) -> tuple:
    """The process-wide key of ``params``' plan on ``target`` with the parsed options
    ``opts``: the machine config's content hash, the target's tiles (a virtual graph's
    are fewer than its config's), the convolution and the options."""
    options = tuple(sorted((k, str(v)) for k, v in opts.items()))
    return (config_hash(target.config), target.getNumTiles(), params.key(), options)


def shared_plan(
    graph: Any, params: ConvParams, opts: Mapping[str, Any], search: Callable[[], ConvPlan]
) -> ConvPlan:
    """The plan of ``params`` on ``graph``'s target: the one searched for before in this
    process under the same key (:func:`plan_key`), or ``search()``'s, kept.

    Parameters
    ----------
    graph
        The graph the plan is for (its target).
    params, opts
        The convolution and its parsed options.
    search
        ``search() -> plan``: plans ``params`` on ``graph``.
    """
    key = plan_key(graph.getTarget(), params, opts)
    plan = _PLANS.get(key)
    if plan is not None:
        _PLANS.move_to_end(key)
        return plan
    plan = search()
    plan.tiles.setflags(write=False)
    _PLANS[key] = plan
    while len(_PLANS) > MAX_PLANS:
        _PLANS.popitem(last=False)
    return plan


def clear() -> None:
    """Forget every plan kept for the process, the partition grids the planners
    enumerated (:func:`~.poplibs_conv2d_model._partition_grid`) and the FLOAT
    ``ConvPartial1x1Out`` tile estimates they priced
    (:func:`~.poplibs_float_candidates._float_1x1`) and the options and dimension maps
    the planner kept (:func:`~.conv_splits.clear`), so that the next search pays for
    what a program's first search pays."""
    _PLANS.clear()
    _partition_grid.cache_clear()
    _float_1x1.cache_clear()
    conv_splits.clear()


def size() -> int:
    """Plan searches kept for the process."""
    return len(_PLANS)
