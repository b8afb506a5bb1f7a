"""Convolution options: checked names and values, and the plan constraints ipusim honours.

The option names are Poplibs' ``ConvOptions`` (``lib/poplin/ConvOptions.cpp`` at
graphcore/poplibs ``7eac0f26``); unknown names and bad values are errors naming the
option, the value and what is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poplar_api.errors import GraphError
from poplar_api.types import FLOAT, HALF

__all__ = ["parse_options"]

_KNOWN = {
    "availableMemoryProportion", "partialsType", "pass", "use128BitConvUnitLoad",
    "enableMultiStageReduce", "enableFastReduce", "enableConvDithering",
    "remapOutputTensor", "gatherConvOutput", "planConstraints", "numIPUs", "tilesPerIPU",
    "startTileMultiplier", "disableSRForAMPVertices", "insertTransformsCycleCountProgs",
    "enableTransformsLayoutSelection", "partialsType.interIPU", "partialsType.interTile",
    "partialsType.intraTile", "use128BitLoad",
}  # fmt: skip

_PASSES = {
    "NONE", "NONE_MATMUL", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU",
    "FC_INFERENCE_FWD", "FC_TRAINING_FWD", "FC_TRAINING_BWD", "FC_TRAINING_WU",
}  # fmt: skip


def parse_options(options: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """Checked convolution options: unknown names and bad values are errors."""
    import difflib

    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise GraphError(f"{what}: options must be a mapping of str to str, got {options!r}")
    out: dict[str, Any] = {"partialsType": FLOAT, "method": None, "expand": None}
    for k, v in options.items():
        k = str(k)
        if k not in _KNOWN:
            close = difflib.get_close_matches(k, sorted(_KNOWN), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise GraphError(
                f"{what}: option {k!r} is not a convolution option{hint} (known: "
                f"{', '.join(sorted(_KNOWN))})"
            )
        s = str(v)
        if k == "partialsType":
            low = s.lower()
            if low not in ("float", "half"):
                raise GraphError(f"{what}: option partialsType={v!r}; required 'float' or 'half'")
            out[k] = FLOAT if low == "float" else HALF
        elif k == "pass":
            if s not in _PASSES:
                raise GraphError(f"{what}: option pass={v!r}; required one of {sorted(_PASSES)}")
            out[k] = s
        elif k == "planConstraints":
            out.update(_plan_constraints(s, what))
        elif k in ("enableFastReduce", "enableMultiStageReduce"):
            if s.lower() not in ("true", "false"):
                raise GraphError(f"{what}: option {k}={v!r}; required 'true' or 'false'")
            out[k] = s.lower()
        else:
            out[k] = s
    memory_limit_check = out.get("availableMemoryProportion")
    if memory_limit_check is not None:
        try:
            prop = float(memory_limit_check)
        except ValueError:
            prop = -1.0
        if not 0.0 < prop <= 1.0:
            raise GraphError(
                f"{what}: option availableMemoryProportion={memory_limit_check!r}; required a "
                f"number in (0, 1], e.g. '0.6'"
            )
    return out


def _plan_constraints(text: str, what: str) -> dict[str, Any]:
    """The parts of a Poplibs plan-constraints JSON ipusim honours: the ``method``, the
    ``expandDims`` transform (``[]``: no expansion; else the field dimensions expanded) and
    the ``swapOperands`` transform (matMul products only), ipusim's ``flattenDims``
    (Poplibs derives it, :mod:`.conv_flatten`; ``[]`` keeps a partial expansion
    unflattened), the kernel split
    (``partition.kernelSplit``, :mod:`.conv_kernel_split`) and, with a
    ``partition.fieldSplit``, the whole partition, ``method.convUnits``,
    ``inChansPerGroup`` and ``partialChansPerGroup`` (:mod:`.conv_constrained_plan`); at
    the top level or under level ``"0"``. Other constraints are accepted and ignored."""
    import json

    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"{what}: option planConstraints is not JSON ({exc}): {text!r}") from None
    if not isinstance(data, dict):
        raise GraphError(f"{what}: option planConstraints must be a JSON object, got {text!r}")
    out: dict[str, Any] = {}
    level = data.get("0") if isinstance(data.get("0"), dict) else {}
    method = method_tree = data.get("method", level.get("method"))
    if isinstance(method, dict):
        method = method.get("type")
    if method is not None:
        m = str(method).upper()
        if m not in ("AMP", "HMAC", "VMAC"):
            raise GraphError(
                f"{what}: planConstraints method {method!r} is not modelled; required AMP, "
                f"HMAC or VMAC"
            )
        out["method"] = m
    transform = data.get("transform", level.get("transform"))
    if isinstance(transform, dict) and "swapOperands" in transform:
        swap = transform["swapOperands"]
        if not isinstance(swap, bool):
            raise GraphError(
                f"{what}: planConstraints transform.swapOperands={swap!r} must be true or false"
            )
        out["swap"] = swap
    if isinstance(transform, dict) and "expandDims" in transform:
        dims = transform["expandDims"]
        if not isinstance(dims, list):
            raise GraphError(
                f"{what}: planConstraints transform.expandDims={dims!r} must be a list of "
                f"field dimensions"
            )
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise GraphError(
                f"{what}: planConstraints transform.expandDims={dims!r}; required field "
                f"dimensions (ints >= 0), e.g. [1] for the width of a 2-D convolution"
            )
        out["expand"] = bool(dims)
        if dims:  # (the lowering checks them against the convolution's dimensions)
            out["expand_dims"] = tuple(sorted(set(dims)))
    if isinstance(transform, dict) and "flattenDims" in transform:
        flat = transform["flattenDims"]
        if not isinstance(flat, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in flat
        ):
            raise GraphError(
                f"{what}: planConstraints transform.flattenDims={flat!r}; required a list of "
                f"Poplibs flatten dimensions (0 the batch, d + 1 field dimension d), e.g. [] "
                f"to keep a partially expanded convolution unflattened"
            )
        out["flatten_dims"] = tuple(flat)
    partition = data.get("partition", level.get("partition"))
    if isinstance(partition, dict) and "kernelSplit" in partition:
        out["kernel_split"] = _kernel_split(partition["kernelSplit"], what)
    if not (isinstance(partition, dict) and "fieldSplit" in partition):
        return out
    # a whole plan (:mod:`.conv_constrained_plan`): its partition, units and groupings
    out["partition"] = _partition(partition, what)
    units = method_tree.get("convUnits") if isinstance(method_tree, dict) else None
    for key, name in (("convUnits", "conv_units"), ("inChansPerGroup", "in_chans_per_group"),
                      ("partialChansPerGroup", "partial_chans_per_group")):  # fmt: skip
        value = units if key == "convUnits" else data.get(key)
        if value is not None:
            out[name] = _count(value, key, what)
    return out


def _count(value: Any, key: str, what: str) -> int:
    """A constraint's count: an int >= 1, or its digits as a string (Poplibs'
    ``getPlanConstraints`` JSON, written by a property tree, quotes every number)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        ok, value = True, int(value)
    if not ok:
        raise GraphError(f"{what}: planConstraints {key}={value!r}; required an int >= 1")
    return int(value)


def _partition(tree: dict[str, Any], what: str) -> dict[str, Any]:
    """A whole partition of Poplibs' ``partition`` constraint (``fieldSplit`` per field
    dimension, ``batchSplit``, ``outChanSplit`` and ``inChanSplit`` ``parallel`` and
    ``serial``, ``convGroupSplit``; a missing count is 1), for
    :mod:`.conv_constrained_plan`."""
    field = tree["fieldSplit"]
    if isinstance(field, list):
        field = {str(d): v for d, v in enumerate(field)}
    if not isinstance(field, dict) or not all(str(d).isdigit() for d in field):
        raise GraphError(
            f"{what}: planConstraints partition.fieldSplit={field!r}; required the parts of "
            f'each field dimension, e.g. {{"0": 14, "1": 100}} or [14, 100]'
        )
    out: dict[str, Any] = {"fieldSplit": tuple(
        _count(field.get(str(d), 1), f"partition.fieldSplit.{d}", what)
        for d in range(max(int(d) for d in field) + 1)
    )}  # fmt: skip
    for key in ("batchSplit", "convGroupSplit"):
        out[key] = _count(tree.get(key, 1), f"partition.{key}", what)
    for key in ("outChanSplit", "inChanSplit"):
        sub = tree.get(key, {})
        if not isinstance(sub, dict):
            raise GraphError(
                f"{what}: planConstraints partition.{key}={sub!r}; required an object "
                f'{{"parallel": n, "serial": m}}'
            )
        for kind in ("parallel", "serial"):
            out[f"{key}.{kind}"] = _count(sub.get(kind, 1), f"partition.{key}.{kind}", what)
    return out


def _kernel_split(value: Any, what: str) -> int:
    """The outer kernel dimension's split of a ``partition.kernelSplit`` constraint
    (Poplibs' per-dimension object ``{"0": n}`` or a list ``[n, 1, ...]``); every other
    dimension must be 1, as Poplibs' planner leaves the inner kernel dimension unsplit
    (``constructModel``, ``lib/poplin/ConvModel.cpp`` at graphcore/poplibs 7eac0f26)."""
    if isinstance(value, list):
        value = {str(d): v for d, v in enumerate(value)}
    ok = isinstance(value, dict) and all(
        str(d).isdigit() and isinstance(n, int) and not isinstance(n, bool) and n >= 1
        for d, n in value.items()
    )
    if not ok or any(int(d) > 0 and n != 1 for d, n in value.items()):
        raise GraphError(
            f"{what}: planConstraints partition.kernelSplit={value!r}; required the parts "
            f"of kernel dimension 0 (an int >= 1), every other dimension 1, e.g. "
            f'{{"0": 3}} or [3, 1] (the inner kernel dimension is not split)'
        )
    return int(value.get("0", 1))
