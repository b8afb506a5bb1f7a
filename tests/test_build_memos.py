"""What a build keeps instead of computing again gives what computing it again gives:
a config's hash kept per config object, tile geometries shared by convolutions of the
same dimension maps, and transforms taken whole by ``ConvParams`` (each against the
computation it replaces, on fuzzed inputs)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from ipusim import config as config_module
from ipusim.config import config_hash, load_config, with_overrides
from poplar_api import FLOAT, HALF, Graph, IPUModel
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_params import ConvParams, InputTransform, OutputTransform
from poplar_api.poplin.conv_splits import kept_dim_maps
from poplar_api.poplin.conv_vertex_estimates import geometry_cache
from poplar_api.poplin.conv_worklists import tile_geometry


# config_hash -----------------------------------------------------------------------------
def test_kept_config_hash_is_the_content_hash() -> None:
    """Every config's kept hash is the one its values give, asked for once or again, and
    configs of different values keep different hashes."""
    rng = np.random.default_rng(3)
    seen: dict[str, str] = {}
    for _ in range(12):
        delay = int(rng.integers(1, 64))
        cfg = with_overrides(load_config("tiny"), {"sync.min_sync_delay_cycles": delay})
        first = config_hash(cfg)
        assert first == config_module._content_hash(cfg)
        assert config_hash(cfg) == first  # (kept)
        assert seen.setdefault(str(delay), first) == first
    assert len(set(seen.values())) == len(seen)


def test_a_freed_configs_hash_is_not_taken_for_a_new_one() -> None:
    """A config made where a freed one was (the same ``id``) gets its own hash."""
    hashes = set()
    for delay in (3, 5, 7, 9):
        cfg = with_overrides(load_config("tiny"), {"sync.min_sync_delay_cycles": delay})
        h = config_hash(cfg)
        assert h == config_module._content_hash(cfg)
        hashes.add(h)
        del cfg
        gc.collect()
    assert len(hashes) == 4
    # the hashes of freed configs are dropped with them
    alive = [ref() for ref, _ in config_module._HASHES.values()]
    assert all(c is not None for c in alive)


# tile geometries shared by dimension maps ---------------------------------------------------
def _random_params(rng: np.random.Generator) -> ConvParams:
    nd = int(rng.integers(1, 3))
    field = [int(x) for x in rng.integers(3, 12, nd)]
    kernel = [int(rng.integers(1, f + 1)) for f in field]
    pad = [int(x) for x in rng.integers(0, 3, nd)]
    stride = [int(x) for x in rng.integers(1, 3, nd)]
    return ConvParams(FLOAT, int(rng.integers(1, 4)), field, kernel, int(rng.integers(1, 9)),
                      int(rng.integers(1, 9)), paddingLower=pad, paddingUpper=pad[::-1],
                      stride=stride)  # fmt: skip


def test_geometry_cache_is_shared_by_equal_maps_only() -> None:
    """Convolutions whose dimension maps are equal (other channels, batch, types) share
    one dict of geometries; others do not; each geometry in it is the one
    ``tile_geometry`` makes from either convolution's maps."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    workers = graph.getTarget().getNumWorkerContexts()
    rng = np.random.default_rng(11)
    for _ in range(25):
        p = _random_params(rng)
        q = p.with_channels(p.inputChannelsPerConvGroup + 3, p.outputChannelsPerConvGroup + 1)
        geoms = geometry_cache(graph, p)
        assert geometry_cache(graph, q) is geoms
        maps_p, maps_q = kept_dim_maps(p), kept_dim_maps(q)
        ranges = [(0, int(rng.integers(1, m.shape[1] + 1))) for m in maps_p]
        key = (1, tuple(ranges))
        geoms.setdefault(key, tile_geometry(maps_p, 1, ranges, workers))
        want = tile_geometry(maps_q, 1, ranges, workers)
        got = geometry_cache(graph, q)[key]
        assert got.window == want.window and got.positions == want.positions
        np.testing.assert_array_equal(got.entries, want.entries)
        assert [list(map(list, w)) for w in got.partitions] == [
            list(map(list, w)) for w in want.partitions
        ]
        other = _random_params(rng)
        same_maps = len(kept_dim_maps(other)) == len(maps_p) and all(
            a.shape == b.shape and np.array_equal(a, b)
            for a, b in zip(kept_dim_maps(other), maps_p, strict=False)
        )
        assert (geometry_cache(graph, other) is geoms) == same_maps


# ConvParams taking transforms whole -----------------------------------------------------------
def _fields(rng: np.random.Generator, n: int) -> dict:
    return {
        "truncationLower": [int(x) for x in rng.integers(0, 2, n)],
        "truncationUpper": [int(x) for x in rng.integers(0, 2, n)],
        "dilation": [int(x) for x in rng.integers(1, 3, n)],
        "paddingLower": [int(x) for x in rng.integers(0, 3, n)],
        "paddingUpper": [int(x) for x in rng.integers(0, 3, n)],
        "flip": [bool(x) for x in rng.integers(0, 2, n)],
    }


def _outcome(*args, **kwargs):  # type: ignore[no-untyped-def]
    """``ConvParams(*args, **kwargs)``'s key, output shape and transforms, or its error's
    message."""
    try:
        p = ConvParams(*args, **kwargs)
    except GraphError as exc:
        return ("error", str(exc))
    return (p.key(), p.getOutputFieldShape(), p.inputTransform, p.kernelTransform,
            p.outputTransform)  # fmt: skip


_OUT = ("truncationLower", "truncationUpper", "stride", "paddingLower", "paddingUpper")


@pytest.mark.parametrize("seed", range(4))
def test_transforms_taken_whole_make_the_same_params(seed: int) -> None:
    """A convolution given its transforms as instances (taken whole where ``make`` would
    give them back unchanged) equals the one given them as dicts of their fields, with
    or without the shortcuts; instances ``make`` would change or refuse (other lengths,
    numpy ints, negative padding, a stride of 0) give what the dicts give."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 4))
        field = [int(x) for x in rng.integers(4, 10, n)]
        kernel = [int(x) for x in rng.integers(1, 4, n)]
        it, kt = _fields(rng, n), _fields(rng, n)
        ot = {k: [int(x) for x in rng.integers(0, 2, n)] for k in _OUT}
        ot["stride"] = [int(x) for x in rng.integers(1, 3, n)]
        spoil = int(rng.integers(0, 6))
        if spoil == 1:  # (a field of another length)
            it["paddingLower"] = it["paddingLower"] + [0]
        elif spoil == 2:  # (numpy ints: made again as ints)
            kt["dilation"] = list(np.array(kt["dilation"], np.int64))
        elif spoil == 3:  # (negative padding: refused unless signed)
            it["paddingUpper"][0] = -1
        elif spoil == 4:  # (a stride of 0: refused)
            ot["stride"][0] = 0
        # instances built directly (no check), as a caller may hold them
        it_i = InputTransform(*(tuple(it[k]) for k in it))
        kt_i = InputTransform(*(tuple(kt[k]) for k in kt))
        ot_i = OutputTransform(*(tuple(ot[k]) for k in _OUT))
        shortcut = {}
        for name, lo in (("paddingLower", 0), ("stride", 1), ("dilation", 1)):
            if rng.integers(0, 3) == 0:
                shortcut[name] = [int(x) for x in rng.integers(lo, lo + 2, n)]
        head = (FLOAT if rng.integers(0, 2) else HALF, 2, field, kernel,
                int(rng.integers(1, 5)), int(rng.integers(1, 5)), 1)  # fmt: skip
        for signed in (False, True):
            whole = _outcome(*head, it_i, kt_i, ot_i, _signed=signed, **shortcut)
            dicts = _outcome(*head, dict(it), dict(kt), dict(ot), _signed=signed, **shortcut)
            assert whole == dicts
            if whole[0] != "error":  # a made convolution's transforms taken whole again
                p = ConvParams(*head, *whole[2:], _signed=signed)
                assert p.inputTransform is whole[2] and p.outputTransform is whole[4]
                again = [dict(vars(t)) for t in whole[2:]]
                assert p.key() == ConvParams(*head, *again, _signed=signed).key()
