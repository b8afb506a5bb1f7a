"""PopART's positional op arguments for the generic ``aiOnnx.<op>`` methods.

PopART generates one method per ONNX op, taking the input ids, then (for ops with
optional outputs) ``num_outputs``, then the op's attributes — the required ones first,
then the optional ones, each group in name order (``gemm(args, alpha, beta, transA,
transB)``, ``maxpool(args, num_outputs, kernel_shape, ceil_mode, dilations, pads,
storage_order, strides)``, ``lrn(args, size, alpha, beta, bias)``; ``auto_pad`` is left
out) — and last the debug context. ``Cast`` takes its ``to`` as a type name
(``cast([x], "FLOAT")``). :func:`op_arguments` maps such a call onto ONNX attributes,
so a PopART program passing attributes by position builds the node it means instead
of taking ``0`` for ``num_outputs`` or dropping the attribute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnx import AttributeProto, TensorProto, defs

from popart_api.errors import popart_exception

#: Attributes PopART's generated methods do not take by position.
NOT_POSITIONAL = frozenset({"auto_pad"})


def positional_attributes(op_type: str, domain: str, opset: int) -> list[tuple[str, int]]:
    """``(name, AttributeProto type)`` of ``op_type``'s attributes in PopART's positional
    order (required, then optional, each by name); empty when ONNX has no schema."""
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except Exception:  # an ai.graphcore op or an unknown one: nothing by position
        return []
    attrs = [a for name, a in schema.attributes.items() if name not in NOT_POSITIONAL]
    order = sorted(attrs, key=lambda a: (not a.required, a.name))
    return [(a.name, int(a.type)) for a in order]


def takes_no_inputs(op_type: str, domain: str, opset: int) -> bool:
    """True for an op whose ONNX schema has no inputs (RandomNormal, RandomUniform):
    PopART's method for it takes no input list, the attributes come first."""
    try:
        return defs.get_schema(op_type, opset, domain).max_input == 0
    except Exception:  # an ai.graphcore op or an unknown one: it takes inputs
        return False


def op_arguments(
    op_type: str,
    domain: str,
    opset: int,
    multi: bool,
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
    num_outputs = kw.pop("num_outputs", 1)
    debug = kw.pop("debugContext", "") or kw.pop("debugPrefix", "")
    if multi and rest and not isinstance(rest[0], str) and "num_outputs" not in keywords:
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
