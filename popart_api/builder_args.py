"""PopART's positional op arguments for the generic ``aiOnnx.<op>`` methods.

PopART generates one method per ONNX op and opset (``gen_operators.py`` of
graphcore/popart, commit d2f20d78db91, writing ``python/popart/popart_opset6..11/
popart_opsetN.gen.cpp``): the input ids ``args`` (left out for an op without inputs),
then ``num_outputs`` only when the op's schema has a variable number of outputs
(``min_output != max_output``: Dropout, MaxPool from version 8, LSTM, Split...; not
TopK, whose two outputs are fixed), then the op's attributes, the required ones first,
then the optional ones, each group in the schema's (name) order, ``auto_pad`` left out
(``gemm(args, alpha, beta, transA, transB)``, ``maxpool(args, num_outputs,
kernel_shape, ceil_mode, dilations, pads, storage_order, strides)``), and last
``debugContext``. The method returns a list of ids when the schema allows more than one
output (``max_output > 1``), else one id. An optional list attribute given empty is left
out of the node, as PopART's generated code does. ``Cast`` takes its ``to`` as a type
name (``cast([x], "FLOAT")``). :func:`op_arguments` maps such a call onto ONNX
attributes; :func:`op_signature` describes it (``inspect.signature`` of the method).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto, defs, numpy_helper

from popart_api.errors import popart_exception

#: Attributes PopART's generated methods do not take by position.
NOT_POSITIONAL = frozenset({"auto_pad"})
_LISTS = (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS)


def positional_attributes(op_type: str, domain: str, opset: int) -> list[tuple[str, int]]:
    """``(name, AttributeProto type)`` of ``op_type``'s attributes in PopART's positional
    order (required, then optional, each by name); empty when ONNX has no schema."""
    schema = _schema(op_type, domain, opset)
    if schema is None:  # an ai.graphcore op or an unknown one: nothing by position
        return []
    attrs = [a for name, a in schema.attributes.items() if name not in NOT_POSITIONAL]
    order = sorted(attrs, key=lambda a: (not a.required, a.name))
    return [(a.name, int(a.type)) for a in order]


@functools.lru_cache(maxsize=1024)
def _schema(op_type: str, domain: str, opset: int) -> Any:
    """ONNX's schema of ``op_type`` at ``opset`` (read several times for each op call:
    kept), or None."""
    try:
        return defs.get_schema(op_type, opset, domain)
    except Exception:  # an ai.graphcore op or an unknown one
        return None


def output_arity(op_type: str, domain: str, opset: int) -> tuple[bool, int, bool]:
    """``(takes num_outputs, outputs made when it is not given, returns a list)``.

    As PopART's generator: ``num_outputs`` is a parameter only when the schema's output
    count varies; a fixed count above one (TopK's 2) is always made; a list is returned
    when more than one output is possible. An op without an ONNX schema makes one.
    """
    schema = _schema(op_type, domain, opset)
    if schema is None:
        return False, 1, False
    varies = schema.min_output != schema.max_output
    return varies, 1 if varies else int(schema.max_output), schema.max_output > 1


def op_signature(op_type: str, domain: str, opset: int) -> inspect.Signature:
    """The parameters of the ``aiOnnx`` method of ``op_type`` at ``opset``, in PopART's
    order; a required attribute has no default, an optional one defaults to ``None``
    (the attribute is left out, ONNX's default applies). ``num_outputs`` is shown
    without a default, as PopART's; left out, one output is made."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = []
    if not takes_no_inputs(op_type, domain, opset):
        params.append(inspect.Parameter("args", kind))
    if output_arity(op_type, domain, opset)[0]:
        params.append(inspect.Parameter("num_outputs", kind))
    schema = _schema(op_type, domain, opset)
    required = {n for n, a in schema.attributes.items() if a.required} if schema else set()
    for name, _ in positional_attributes(op_type, domain, opset):
        default = inspect.Parameter.empty if name in required else None
        params.append(inspect.Parameter(name, kind, default=default))
    params.append(inspect.Parameter("debugContext", kind, default=""))
    return inspect.Signature(params)


def takes_no_inputs(op_type: str, domain: str, opset: int) -> bool:
    """True for an op whose ONNX schema has no inputs (RandomNormal, RandomUniform):
    PopART's method for it takes no input list, the attributes come first."""
    schema = _schema(op_type, domain, opset)
    return schema is not None and schema.max_input == 0  # (no schema: it takes inputs)


def op_arguments(
    op_type: str,
    domain: str,
    opset: int,
    positional: Sequence[Any],
    keywords: Mapping[str, Any],
) -> tuple[Any, Any, str, dict[str, Any]]:
    """``(inputs, num_outputs, debugContext, attributes)`` of a PopART-style op call.

    Raises
    ------
    popart_exception
        More positional values than the op takes, an attribute given both by position
        and by name, or an unknown ``Cast`` type name; the message lists the op's
        attributes in their positional order.
    """
    what = f"Builder: {op_type}"
    kw = dict(keywords)
    rest = list(positional)
    if takes_no_inputs(op_type, domain, opset):
        args = kw.pop("args", [])
    elif rest:
        args = rest.pop(0)
    elif "args" in kw:
        args = kw.pop("args")
    else:
        raise popart_exception(
            f"{what}: no inputs given; hint: builder.aiOnnx.{op_type.lower()}([a, b], ...)"
        )
    varies, count, _ = output_arity(op_type, domain, opset)
    num_outputs = kw.pop("num_outputs", count)
    if not varies and num_outputs != count:
        raise popart_exception(
            f"{what}: num_outputs={num_outputs!r} but the op always has {count} output(s); "
            f"PopART's {op_type.lower()} takes no num_outputs; hint: leave it out"
        )
    debug = kw.pop("debugContext", "") or kw.pop("debugPrefix", "")
    if varies and rest and not isinstance(rest[0], str) and "num_outputs" not in keywords:
        num_outputs = rest.pop(0)
    order = positional_attributes(op_type, domain, opset)

    def takes_text(index: int) -> bool:
        name, kind = order[index]
        return kind == AttributeProto.STRING or (op_type == "Cast" and name == "to")

    if (
        rest
        and isinstance(rest[-1], str)
        and (len(rest) > len(order) or not takes_text(len(rest) - 1))
    ):
        debug = rest.pop()  # a trailing name is the debug context, as PopART's last parameter
    names = [name for name, _ in order]
    if len(rest) > len(order):
        raise popart_exception(
            f"{what}: {len(rest)} attribute value(s) given by position ({rest!r:.80}) but it "
            f"takes {len(order)}: {', '.join(names) or 'none'}, in that order; hint: give "
            "attributes by name, e.g. " + (f"{names[0]}=..." if names else "debugContext='x'")
        )
    attrs: dict[str, Any] = {}
    for name, value in zip(names, rest, strict=False):
        if name in kw:
            raise popart_exception(
                f"{what}: attribute {name!r} is given both by position ({value!r}) and by "
                f"name ({kw[name]!r}); hint: give it once"
            )
        attrs[name] = value
    attrs.update(kw)
    kinds = dict(order)
    schema = _schema(op_type, domain, opset)
    for name, value in list(attrs.items()):
        if kinds.get(name) == AttributeProto.TENSOR and isinstance(value, np.ndarray | np.generic):
            attrs[name] = numpy_helper.from_array(np.asarray(value))  # constantofshape's value
        elif (
            schema is not None
            and name in schema.attributes
            and not schema.attributes[name].required
            and kinds.get(name) in _LISTS
            and isinstance(value, list | tuple)
            and not value
            and not (name == "axes" and "Reduce" in op_type)  # PopART keeps axes=[]
        ):
            del attrs[name]  # PopART's generated code leaves an empty list out
    if op_type == "Cast" and isinstance(attrs.get("to"), str):
        attrs["to"] = _onnx_type(attrs["to"], what)
    return args, num_outputs, debug, attrs


def _onnx_type(name: str, what: str) -> int:
    """The ONNX element type of a PopART type name (``"FLOAT"``, ``"INT32"``, ...)."""
    try:
        return int(TensorProto.DataType.Value(name.upper()))
    except ValueError:
        known = [n for n in TensorProto.DataType.DESCRIPTOR.values_by_name if n != "UNDEFINED"]
        raise popart_exception(
            f"{what}: 'to' type {name!r} is not a data type name; required one of "
            f"{', '.join(known)} (or an onnx.TensorProto value)"
        ) from None
