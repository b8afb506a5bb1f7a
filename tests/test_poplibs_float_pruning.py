"""The FLOAT model's floors computed cheaply decide as the full floors do.

:func:`~poplar_api.poplin.poplibs_float_conv2d.form_floors` skips the serial counts and
swapped forms whose least partial sums already pass the limit, and costs a serial
partition's partial sums only while its other terms and serial terms are under the cap.
The reference here costs every count of every serial form and every swapped form in full
(no limit) and is compared, form by form, on whether it passes the limit. The bounds that
let it skip work are checked against full costing each: a serial count's bound before any
partition is costed, the costs with a limit (and a bytes bound) and a ``ConvPartialnx1``
tile's floor.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.poplin import poplibs_float_conv2d as pfc
from poplar_api.poplin import poplibs_float_partials as pfp
from poplar_api.poplin.poplibs_float_candidates import amp_candidates


def _target(preset: str = "mk2-ipumodel"):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def _conv(batch, field, ci, co, pad=1, kernel=3):
    return poplin.ConvParams(FLOAT, batch, field, [kernel, kernel], ci, co,
                             paddingLower=[pad, pad], paddingUpper=[pad, pad])  # fmt: skip


def _full_serial(sub, target, rearrange):
    """Every serial count of every vertex and kind costed in full."""
    best = None
    ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    for vertex in amp_candidates(target):
        for kind, chans, grain in (("in", ci, vertex[1]), ("out", co, vertex[2])):
            grains = -(-chans // grain)
            for count in range(2, grains + 1):
                n = -(-grains // count) * grain
                low = _count_cost(sub, target, rearrange, vertex, kind, count, n)
                best = low if best is None else min(best, low)
    return best


def _count_cost(sub, target, rearrange, vertex, kind, count, n):
    """``count`` serial iterations of ``n`` channels of ``kind`` (``in`` or ``out``), every
    partition of an iteration costed in full: their least cycles times ``count``."""
    ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    it = poplin.ConvParams(
        FLOAT, sub.batchSize, list(sub.inputFieldShape), list(sub.kernelShape),
        n if kind == "in" else ci, n if kind == "out" else co,
        paddingLower=list(sub.inputTransform.paddingLower),
        paddingUpper=list(sub.inputTransform.paddingUpper), outputType=FLOAT,
    )  # fmt: skip
    skip = pfc._SERIAL_SKIP + (("input transform",) if kind == "out" else ())
    parts = pfc._partitions(it, target, vertex[1], vertex[2])
    c = pfc.form_costs(it, target, vertex, parts, rearrange, floor=True, skip=skip)
    extra = pfc._serial_terms(sub, it, vertex, parts, count, kind, target)
    return count * int((c["cycles"] + extra).min())


def _full_floors(params, target):
    """:func:`form_floors` with nothing skipped and no limit."""
    params = pfc.canonical(params)
    out = {}
    for form, dims in pfc.FORMS.items():
        sub = pfc.form_params(params, dims)
        out[f"{form} serial"] = _full_serial(sub, target, (bool(dims), bool(dims), False))
    for flat, name in {(): "none", (0,): "0", (1,): "1", (0, 1): "both"}.items():
        sub = pfc.swapped_params(params, flat)
        least = pfc._inner_kernel_floor(int(sub.kernelShape[1]), target)
        one = pfc._one_pass_floor(sub, target, (False, True, True), 10**12)
        serial = _full_serial(sub, target, (False, True, True))
        out[f"swapped, flattened {name}"] = max(one, least)
        out[f"swapped, flattened {name} serial"] = None if serial is None else max(serial, least)
    return out


# the full reference costs tens of thousands of partitions (row 13 alone about 50 s of CPU,
# "batch 1, 5x5, 20x20" 10 s); "batch 1, 5x5" is the default case (the same forms, every one
# with serial counts, on a smaller field and fewer channels: about 1.4 s) and fails as row 13
# does with the iteration floor overstated
_SLOW = pytest.mark.slow
CONVS = {
    # docs/planner.md rows 13-15 (the CNN step's conv1, conv2 and conv2's input gradient)
    "row 13": (_conv(32, [28, 28], 1, 8), "TRAINING_FWD"),
    "row 14": (_conv(32, [14, 14], 8, 16), "TRAINING_FWD"),
    "row 15": (_conv(32, [14, 14], 16, 8), "TRAINING_BWD"),
    "more channels": (_conv(4, [14, 14], 32, 24), "TRAINING_FWD"),
    "batch 1, 5x5, 20x20": (_conv(1, [20, 20], 8, 8, pad=2, kernel=5), "NONE"),
    "batch 1, 5x5": (_conv(1, [8, 8], 4, 4, pad=2, kernel=5), "NONE"),
}
_SLOW_ROWS = ("row 13", "row 14", "row 15", "more channels", "batch 1, 5x5, 20x20")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_SLOW) if n in _SLOW_ROWS else n for n in CONVS]
)
def test_floors_decide_as_the_full_floors(name) -> None:
    """At the least form's cost (and half, twice and eight times it), every floor passes the limit
    exactly when the fully costed floor does, and a fast floor is never above the full
    one where it is at most the limit (it is then the exact least)."""
    params, conv_pass = CONVS[name]
    target = _target()
    full = _full_floors(params, target)
    cost = pfc.best_plan(params, conv_pass, target)["cost"][0]
    for limit in (cost, cost // 2, 2 * cost, 8 * cost):
        fast = pfc.form_floors(params, conv_pass, target, limit)
        assert fast.keys() == full.keys()
        for key, exact in full.items():
            got = fast[key]
            assert (exact is not None and exact <= limit) == (got is not None and got <= limit), (
                key, limit, exact, got)  # fmt: skip
            if exact is not None and exact <= limit:
                assert got == exact, (key, limit)
            if got is not None:
                assert exact is not None and got <= exact, (key, limit)  # (a lower bound)


#: Small shapes whose every serial count is cheap to cost in full: channels, batch, padding
#: and kernels (strided convolutions are not covered by the model).
SMALL = {
    "channels": _conv(1, [6, 6], 24, 40),
    "batch, no padding": _conv(4, [6, 6], 16, 16, pad=0),
    "1x1 kernel": _conv(2, [5, 5], 32, 24, pad=0, kernel=1),
}


def _subs(params):
    """Every unswapped form and swapped bound of ``params`` with its rearrangements."""
    params = pfc.canonical(params)
    out = [(pfc.form_params(params, dims), (bool(dims), bool(dims), False))
           for dims in pfc.FORMS.values()]  # fmt: skip
    out += [(pfc.swapped_params(params, flat), (False, True, True))
            for flat in ((), (0,), (1,), (0, 1))]  # fmt: skip
    return out


#: SMALL's cases in the default suite (the others marked slow).
_SMALL = [pytest.param(n, marks=_SLOW) if n == "channels" else n for n in SMALL]


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_SLOW) if n != "1x1 kernel" else n for n in SMALL]
)
def test_count_floors_bound_every_count(name) -> None:
    """A serial count's bound before any partition is costed (``_count_floors``) is at most
    its least cost over every partition costed in full, for every form, vertex and kind."""
    target = _target()
    for sub, rearrange in _subs(SMALL[name]):
        ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
        for vertex in amp_candidates(target):
            per_it = pfc._iteration_floor(sub, vertex, target)
            for kind, chans, grain in (("in", ci, vertex[1]), ("out", co, vertex[2])):
                grains = -(-chans // grain)
                counts = np.arange(2, grains + 1)
                sizes = -(-grains // counts) * grain
                lows = pfc._count_floors(sub, vertex, counts, sizes, kind, per_it, target)
                for count, n, low in zip(counts.tolist(), sizes.tolist(), lows.tolist(),
                                         strict=True):  # fmt: skip
                    full = _count_cost(sub, target, rearrange, vertex, kind, count, n)
                    assert low <= full, (name, vertex, kind, count, low, full)


@pytest.mark.parametrize("name", _SMALL)
def test_capped_costs_are_the_full_costs_within_the_limit(name) -> None:
    """``form_costs`` with a limit gives each partition within the limit its full cycles
    and terms, and every other one a lower bound above the limit; with a bytes bound as
    well, the same up to the least ok cost within the bytes (which it finds first); the
    least ok partition within the bytes, and its ties, are those of costing all in full."""
    target = _target()
    nbytes = int(target.getBytesPerTile() * 0.6)
    for sub, rearrange in _subs(SMALL[name])[:4]:
        for vertex in amp_candidates(target):
            parts = pfc._partitions(sub, target, vertex[1], vertex[2])
            full = pfc.form_costs(sub, target, vertex, parts, rearrange)
            fit = full["ok"] & (full["bytes"] <= nbytes)
            least = int(full["cycles"][fit].min())
            for limit in (least, least + 100, 2 * least, least - 1):
                for bound in (None, nbytes):
                    got = pfc.form_costs(sub, target, vertex, parts, rearrange, limit=limit,
                                         bound=bound)  # fmt: skip
                    # (with the bound, exact up to the least ok cost within the bytes)
                    cap = limit if bound is None else min(limit, least)
                    within = full["cycles"] <= cap
                    for key in full:
                        assert np.array_equal(got[key][within], full[key][within]), key
                    assert (got["cycles"][~within] > cap).all()
                    assert (got["cycles"][~within] <= full["cycles"][~within]).all()
                    assert np.array_equal(got["bytes"], full["bytes"])
                    if limit >= least:
                        ok = got["ok"] & (got["bytes"] <= nbytes)
                        assert int(got["cycles"][ok].min()) == least
                        ties = np.flatnonzero(ok & (got["cycles"] == least))
                        assert np.array_equal(ties, np.flatnonzero(fit & (full["cycles"] == least)))


def test_nx1_floor_bounds_every_tile_estimate() -> None:
    """``_nx1_floor`` is at most the ``ConvPartialnx1`` estimate of every tile shape (batch,
    rows, row length, kernel, input and output groups), for every FLOAT AMP candidate."""
    target = _target()
    workers = target.getNumWorkerContexts()
    shapes = np.array(list(itertools.product((1, 3), (1, 2, 5), (1, 7, 17, 40), (1, 2, 3, 5),
                                             (1, 3), (1, 2), (1, 3))))  # fmt: skip
    b, h, w, k, kw, ig, og = shapes.T
    for vertex in amp_candidates(target):
        cit, cot = ig * vertex[1], og * vertex[2]
        for inner in (1, 3):
            at = kw == inner
            low = pfp._nx1_floor(vertex, (b * h * w)[at], k[at], inner, cit[at], cot[at], workers)
            est = [pfp._partial(vertex, 2, int(b[i]), (int(h[i]), int(w[i])), (int(k[i]), inner),
                                int(cit[i]), int(cot[i]), workers)
                   for i in np.flatnonzero(at)]  # fmt: skip
            assert (low <= np.array(est)).all(), vertex


def _bounds_ratio(sub, rearrange, vertex, target):
    """``_vertex_floor`` of ``sub`` with ``vertex`` and the least of its partitions' cycles
    as ``form_costs`` gives them with nothing estimated (other terms plus least partial
    sums)."""
    parts = pfc._partitions(sub, target, vertex[1], vertex[2])
    low = pfp._vertex_floor(sub, vertex, target)
    bounds = pfc.form_costs(sub, target, vertex, parts, rearrange, floor=True, limit=-1)
    return low, int(bounds["cycles"].min()), parts


def test_vertex_floor_bounds_every_partition() -> None:
    """A candidate's bound before any partition is made (``_vertex_floor``) is at most
    every partition's cycles as ``form_costs`` gives them with nothing estimated (what a
    floor with a limit below that bound gives each), for every form and swapped bound of
    the small shapes and the 20x20 5x5 floor case, each AMP candidate; and it is no
    trivial bound: it reaches half of the least such cycles in some case of the latter."""
    target = _target()
    ratios = []
    for params in [*SMALL.values(), CONVS["batch 1, 5x5, 20x20"][0]]:
        for sub, rearrange in _subs(params):
            for vertex in amp_candidates(target):
                low, least, _ = _bounds_ratio(sub, rearrange, vertex, target)
                assert 0 < low <= least, (params, vertex, low, least)
                ratios.append(low / least)
    assert max(ratios) > 0.5, ratios


@pytest.mark.slow  # (every partition of 144 candidates estimated: about 10 s of CPU)
@pytest.mark.parametrize("name", SMALL)
def test_vertex_floor_bounds_every_full_cost(name) -> None:
    """``_vertex_floor`` is at most the full cost of every partition the MAC inequality
    allows, for every form and swapped bound and each AMP candidate."""
    target = _target()
    for sub, rearrange in _subs(SMALL[name]):
        for vertex in amp_candidates(target):
            low, _, parts = _bounds_ratio(sub, rearrange, vertex, target)
            full = pfc.form_costs(sub, target, vertex, parts, rearrange, floor=True)
            assert low <= full["cycles"][full["ok"]].min(initial=np.iinfo(np.int64).max)


@pytest.mark.parametrize("name", SMALL)
def test_costs_of_iterations_together_are_each_alone(name) -> None:
    """``form_costs`` of the partitions of several serial iterations in one call (``chans``:
    each partition's channels) gives every partition the terms, bytes and ``ok`` of its
    iteration costed alone, with no limit and with a limit a partition drawn at random
    (so that some are costed in full and some only bounded), over every form, vertex and
    kind; channels padded differently are refused."""
    target = _target()
    rng = np.random.default_rng(5)
    for sub, rearrange in _subs(SMALL[name]):
        ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
        for vertex in amp_candidates(target):
            for kind, chans, grain in (("in", ci, vertex[1]), ("out", co, vertex[2])):
                grains = -(-chans // grain)
                sizes = sorted({-(-grains // k) * grain for k in (1, 2, 3, 5)})
                its = [sub.with_channels(n if kind == "in" else ci, n if kind == "out" else co)
                       for n in sizes]  # fmt: skip
                grids = [pfc._partitions(it, target, vertex[1], vertex[2]) for it in its]
                rows = [len(g["batchSplit"]) for g in grids]
                parts = {k: np.concatenate([g[k] for g in grids]) for k in grids[0]}
                n = np.repeat(sizes, rows)
                both = (n, np.full(n.shape, co)) if kind == "in" else (np.full(n.shape, ci), n)
                skip = pfc._SERIAL_SKIP + (("input transform",) if kind == "out" else ())
                alone = [pfc.form_costs(it, target, vertex, g, rearrange, floor=True, skip=skip)
                         for it, g in zip(its, grids, strict=True)]  # fmt: skip
                full = {k: np.concatenate([a[k] for a in alone]) for k in alone[0]}
                limit = rng.integers(0, 2 * int(full["cycles"].max()) + 1, n.size)
                got = pfc.form_costs(sub, target, vertex, parts, rearrange, floor=True,
                                     skip=skip, chans=both)  # fmt: skip
                for k in full:
                    assert np.array_equal(got[k], full[k]), (name, vertex, kind, k)
                start = np.cumsum([0, *rows])
                capped = pfc.form_costs(sub, target, vertex, parts, rearrange, floor=True,
                                        skip=skip, chans=both, limit=limit)  # fmt: skip
                for i, (it, g) in enumerate(zip(its, grids, strict=True)):
                    at = slice(start[i], start[i + 1])
                    one = pfc.form_costs(it, target, vertex, g, rearrange, floor=True,
                                         skip=skip, limit=limit[at])  # fmt: skip
                    for k in one:
                        assert np.array_equal(capped[k][at], one[k]), (name, vertex, kind, k)
    parts = pfc._partitions(sub, target, 4, 8)
    mixed = np.where(np.arange(len(parts["batchSplit"])) % 2 == 0, 8, 6)
    with pytest.raises(ValueError, match="not all padded alike"):
        pfc.form_costs(sub, target, (8, 4, 8), parts, chans=(mixed, np.full(mixed.shape, 8)))


def _form_plan_in_order(params, conv_pass, target, form):
    """:func:`form_plan` with nothing skipped: every AMP candidate in Poplibs' order, every
    partition costed in full, a later candidate kept only when strictly lower."""
    params = pfc.canonical(params)
    sub = pfc.form_params(params, pfc.FORMS[form])
    nbytes = int(target.getBytesPerTile() * 0.6)
    expanded = bool(pfc.FORMS[form])
    best = None
    for vertex in amp_candidates(target):
        parts = pfc._partitions(sub, target, vertex[1], vertex[2])
        c = pfc.form_costs(sub, target, vertex, parts, (expanded, expanded, False))
        fit = np.flatnonzero(c["ok"] & (c["bytes"] <= nbytes))
        if not fit.size:
            continue
        i = int(fit[np.lexsort((c["bytes"][fit], c["cycles"][fit]))[0]])
        cost = (int(c["cycles"][i]), int(c["bytes"][i]))
        if best is None or cost < best[0]:
            same = fit[(c["cycles"][fit] == cost[0]) & (c["bytes"][fit] == cost[1])]
            tied = [{k: int(v[j]) for k, v in parts.items()} for j in same.tolist()]
            best = (cost, vertex, tied, pfc._search_first(sub, vertex, tied, target))
    return best


def _exact_floor(sub, vertex, target):
    """The least ok cycles of ``sub``'s partitions with ``vertex`` (every partition costed in
    full; with no partition ok, the largest int64), less one for the last candidate."""
    parts = pfc._partitions(sub, target, vertex[1], vertex[2])
    c = pfc.form_costs(sub, target, vertex, parts)  # (exact for the plain form)
    least = int(c["cycles"][c["ok"]].min(initial=np.iinfo(np.int64).max))
    return least - (vertex == amp_candidates(target)[-1])


#: Convolutions whose forms' candidates rank in different orders by their bounds.
FORM_PLAN_CASES = {
    **{k: (v, "NONE") for k, v in SMALL.items()},
    "row 13 on 16 tiles": (_conv(32, [28, 28], 1, 8), "TRAINING_FWD"),
    "row 14 on 16 tiles": (_conv(32, [14, 14], 8, 16), "TRAINING_FWD"),
    "row 15 on 16 tiles": (_conv(32, [14, 14], 16, 8, pad=2), "TRAINING_BWD"),
    "odd channels": (_conv(2, [9, 7], 3, 5), "INFERENCE_FWD"),
    # (three candidates of one least cycles and bytes: the first in Poplibs' order kept)
    "candidates tied on 16 tiles": (_conv(2, [5, 6], 1, 1, pad=0, kernel=1), "NONE"),
    # (a candidate's bound within 1 % of the least)
    "bound near the least on 16 tiles": (_conv(2, [9, 5], 12, 16), "NONE"),
    "bound within 3 % on 16 tiles": (_conv(4, [14, 13], 1, 32), "NONE"),
    "one output channel on 16 tiles": (_conv(4, [7, 14], 8, 1), "NONE"),
}


@pytest.mark.parametrize("order", ["bounds", "reversed", "exact bounds"])
@pytest.mark.parametrize("name", FORM_PLAN_CASES)
def test_form_plan_skips_only_candidates_that_cannot_win(name, order, monkeypatch) -> None:
    """:func:`form_plan` (candidates in the order of their bounds, those whose bound passes
    the least so far not costed) gives, for every form, the plan, cost, ties and tied
    partitions of costing every candidate in Poplibs' order in full; with a limit, the
    same where that plan is within it, else a cost above it or None. So it does with bounds that
    put the candidates in reverse order (none skipped) and with each candidate's bound
    its least cost, less one for the last (the tightest bounds: a candidate tied with
    the last but earlier in Poplibs' order is costed after it, its bound equal to the
    least so far)."""
    params, conv_pass = FORM_PLAN_CASES[name]
    if order == "reversed":
        monkeypatch.setattr(pfc, "_vertex_floor", lambda s, v, t: -amp_candidates(t).index(v))
    elif order == "exact bounds":
        monkeypatch.setattr(pfc, "_vertex_floor", _exact_floor)
    model = IPUModel("mk2-ipumodel")
    if "16 tiles" in name:  # (the PopART CNN's tiles: few partitions, bounds that differ)
        model.tilesPerIPU = 16
    target = Graph(model.createDevice().getTarget()).getTarget()
    for form, dims in pfc.FORMS.items():
        if not all(pfc._expands(pfc.canonical(params), d) for d in dims):
            continue
        ref = _form_plan_in_order(params, conv_pass, target, form)
        if ref is None:
            with pytest.raises(ValueError, match="fits"):
                pfc.form_plan(params, conv_pass, target, form)
            continue
        cost, vertex, tied, first = ref
        for limit in (None, cost[0], cost[0] + 1, cost[0] - 1, cost[0] // 2):
            got = pfc.form_plan(params, conv_pass, target, form, limit=limit)
            if limit is not None and cost[0] > limit:
                # (a cost above the limit, or None: no candidate's bound within it)
                assert got is None or got["cost"][0] > limit, (form, limit)
                continue
            assert got is not None, (form, limit)
            assert (got["cost"], got["vertex"], got["splits"]) == (cost, vertex, first), form
            assert got["tied splits"] == tied and got["ties"] == len(tied), form


@pytest.mark.parametrize("order", ["bounds", "exact bounds"])
@pytest.mark.parametrize("name", FORM_PLAN_CASES)
def test_least_form_is_the_least_of_every_form_costed_in_full(name, order, monkeypatch) -> None:
    """``poplibs_float_plans._least_form`` (each form costed up to the least so far, a
    candidate whose bound passes it not costed) gives the least form's plan of costing
    every form's every candidate in full, or None when two forms tie at the least; with
    the tightest bounds (each candidate's least cost, less one for the last) too."""
    from poplar_api.poplin import poplibs_float_plans as pfl

    params, conv_pass = FORM_PLAN_CASES[name]
    if order == "exact bounds":
        monkeypatch.setattr(pfc, "_vertex_floor", _exact_floor)
    model = IPUModel("mk2-ipumodel")
    if "16 tiles" in name:
        model.tilesPerIPU = 16
    target = Graph(model.createDevice().getTarget()).getTarget()
    full = {}
    for form, dims in pfc.FORMS.items():
        if all(pfc._expands(pfc.canonical(params), d) for d in dims):
            ref = _form_plan_in_order(params, conv_pass, target, form)
            if ref is not None:
                full[form] = ref
    least = min(c[0][0] for c in full.values())
    at_least = [form for form, c in full.items() if c[0][0] == least]
    got = pfl._least_form(params, conv_pass, target)
    if len(at_least) > 1:
        assert got is None, at_least
        return
    cost, vertex, _, first = full[at_least[0]]
    assert got is not None
    assert (got["form"], got["cost"], got["vertex"], got["splits"]) == (
        at_least[0], cost, vertex, first)  # fmt: skip


def _random_sub(rng: np.random.Generator):
    """A random covered FLOAT convolution's unswapped or swapped form, and its rearranges."""
    from poplar_api.poplin.poplibs_float_forms import canonical, form_params, swapped_params

    field = [int(x) for x in rng.integers(3, 24, 2)]
    kernel = [int(rng.integers(1, min(f, 5) + 1)) for f in field]
    params = poplin.ConvParams(FLOAT, int(rng.integers(1, 9)), field, kernel,
                               int(rng.integers(1, 70)), int(rng.integers(1, 70)),
                               paddingLower=[int(x) for x in rng.integers(0, 2, 2)],
                               paddingUpper=[int(x) for x in rng.integers(0, 2, 2)])  # fmt: skip
    if rng.random() < 0.5:
        return form_params(canonical(params), ()), (False, False, False)
    return swapped_params(canonical(params), ()), (False, True, True)


def test_count_floors_of_many_candidates_and_kinds_are_each_ones() -> None:
    """Fuzz: ``_count_floors`` of rows of several vertices, kinds and iteration floors
    gives each row what one call of its vertex and kind gives it."""
    target = _target()
    rng = np.random.default_rng(67)
    vertices = amp_candidates(target)
    for _ in range(40):
        sub, _ = _random_sub(rng)
        n = int(rng.integers(1, 30))
        which = rng.integers(0, len(vertices), n)
        out = rng.random(n) < 0.5
        counts = rng.integers(2, 9, n)
        sizes = rng.integers(1, 80, n)
        per_it = rng.integers(1, 5000, n)
        rows = np.array([vertices[i] for i in which.tolist()], np.int64)
        got = pfc._count_floors(sub, rows, counts, sizes, out, per_it, target)
        for j in range(n):
            one = pfc._count_floors(sub, vertices[int(which[j])], counts[j : j + 1],
                                    sizes[j : j + 1], "out" if out[j] else "in",
                                    int(per_it[j]), target)  # fmt: skip
            assert got[j] == one[0], (sub, j)


def _serial_floor_one_call_each(sub, target, limit, rearrange):
    """``_serial_floor`` as it was: the counts of each vertex and kind bounded by a call
    of their own, after the bounds of those before had lowered the least so far."""
    best = None
    ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    base = poplin.ConvParams(FLOAT, sub.batchSize, list(sub.inputFieldShape),
                             list(sub.kernelShape), ci, co,
                             paddingLower=list(sub.inputTransform.paddingLower),
                             paddingUpper=list(sub.inputTransform.paddingUpper),
                             outputType=FLOAT)  # fmt: skip
    for vertex in amp_candidates(target):
        per_it = pfc._iteration_floor(sub, vertex, target)
        for kind, chans, grain in (("in", ci, vertex[1]), ("out", co, vertex[2])):
            grains = -(-chans // grain)
            counts = np.arange(2, min(grains, limit // pfp._LEAST_VERTEX) + 1, dtype=np.int64)
            counts = counts[-(-grains // counts) != -(-grains // (counts - 1))]
            if not counts.size:
                continue
            m = limit if best is None else min(limit, best)
            over = np.flatnonzero(counts * per_it > m)
            if over.size:
                low = int(counts[over[0]]) * per_it
                best = low if best is None else min(best, low)
                counts = counts[: over[0]]
            sizes = -(-grains // counts) * grain
            lows = pfc._count_floors(sub, vertex, counts, sizes, kind, per_it, target)
            passed = lows > m
            if passed.any():
                low = int(lows[passed].min())
                best = low if best is None else min(best, low)
            counts, sizes = counts[~passed], sizes[~passed]
            if counts.size:
                low = pfc._counts_floor(sub, base, vertex, counts, sizes, kind, m, rearrange,
                                        target)  # fmt: skip
                best = low if best is None else min(best, low)
    return best


def test_serial_floor_bounds_all_counts_in_one_call_as_one_call_each() -> None:
    """Fuzz: ``_serial_floor``, which bounds the counts of every vertex and kind in one
    ``_count_floors`` call, gives what bounding each vertex's and kind's counts in a call
    of their own gives, at limits below, near and above the floors; both kinds of
    result occur (a floor, and None or one past the limit)."""
    target = _target()
    rng = np.random.default_rng(26)
    seen = set()
    for _ in range(25):
        sub, rearrange = _random_sub(rng)
        for limit in (int(rng.integers(500, 20_000)), int(rng.integers(20_000, 400_000))):
            want = _serial_floor_one_call_each(sub, target, limit, rearrange)
            assert pfc._serial_floor(sub, target, limit, rearrange) == want, (sub, limit)
            seen.add(want is None or want > limit)
    assert seen == {False, True}
