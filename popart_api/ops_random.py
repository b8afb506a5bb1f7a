"""Lowerings of ONNX's random generators: RandomUniform, RandomNormal and their
``...Like`` forms, by ``poprand::uniform``/``poprand::normal`` with the session's seed
(as PopART's ``RandomUniformOpx``/``RandomNormalOpx``: the seed tensor and a per-op
modifier). A ``seed`` attribute is a modifier here: the values depend on it and on the
session's ``randomSeed``, not on numpy's generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from popart_api.errors import popart_exception
from popart_api.ops import context, register, value_shape
from poplar_api import FLOAT, HALF, UNSIGNED_INT, Graph, Tensor, poprand
from poplar_api.poputil import mapTensorLinearly

_TYPES = {onnx.TensorProto.FLOAT: FLOAT, onnx.TensorProto.FLOAT16: HALF}


def _seed(graph: Graph, name: str) -> Tensor:
    seed = context().seed_tensor
    if seed is None:  # outside a session: a fixed seed
        seed = graph.addConstant(
            UNSIGNED_INT, [2], np.array([context().seed, 0], np.uint32), f"{name}/seed"
        )
        graph.setTileMapping(seed, 0)
    return seed


def _dtype(attrs: dict, default: Any, op: str, name: str) -> Any:
    if "dtype" not in attrs:
        return default
    code = int(attrs["dtype"])
    if code not in _TYPES:
        raise popart_exception(
            f"{op} (node '{name}'): dtype {onnx.TensorProto.DataType.Name(code)} is not "
            "supported; required FLOAT or FLOAT16"
        )
    return _TYPES[code]


def _random(op: str, like: bool) -> Any:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        if like:
            ref_value = inputs[0]
            default = ref_value.elementType() if isinstance(ref_value, Tensor) else FLOAT
            shape = value_shape(ref_value)
        else:
            if "shape" not in attrs:
                raise popart_exception(f"{op} (node '{name}'): attribute 'shape' is required")
            shape = [int(d) for d in attrs["shape"]]
            default = FLOAT
        typ = _dtype(attrs, default, op, name)
        if typ not in (FLOAT, HALF):
            raise popart_exception(
                f"{op} (node '{name}'): type {typ.name} is not supported; required FLOAT or FLOAT16"
            )
        ref = graph.addVariable(typ, shape, f"{name}/reference")
        mapTensorLinearly(graph, ref)
        modifier = (int(attrs.get("seed", 0)) * 7919 + sum(map(ord, name))) & 0xFFFFFFFF
        seed = _seed(graph, name)
        if op.startswith("RandomUniform"):
            lo, hi = float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))
            out = poprand.uniform(graph, seed, modifier, ref, typ, lo, hi, prog, name)
        else:
            mean, scale = float(attrs.get("mean", 0.0)), float(attrs.get("scale", 1.0))
            out = poprand.normal(graph, seed, modifier, ref, typ, mean, scale, prog, name)
        return [out]

    return lower


register("RandomUniform", since=1)(_random("RandomUniform", False))
register("RandomNormal", since=1)(_random("RandomNormal", False))
register("RandomUniformLike", since=1)(_random("RandomUniformLike", True))
register("RandomNormalLike", since=1)(_random("RandomNormalLike", True))

__all__: list[str] = []
