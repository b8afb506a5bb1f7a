"""The op methods of PopART's ``Builder``: ``builder.aiOnnx`` and ``builder.aiGraphcore``.

``aiOnnx.<op>`` exists for every ONNX op (the method name is the op's name in lower case;
``And``, ``Or``, ``Not``, ``Xor`` and ``If`` are ``logical_and``... as in PopART, whose
generator renames the Python keywords); its parameters follow PopART's generated
methods (:mod:`popart_api.builder_args`). The ``aiGraphcore`` methods follow PopART's
hand-written ``AiGraphcoreOpset1`` bindings (``python/popart/popart_core/popart.cpp``
of graphcore/popart, commit d2f20d78db91): ``groupnormalization(args, num_groups,
epsilon=1e-05)`` returning the three output ids, ``scale(args, scale)``,
``l1loss(args, lambda, reduction)``, ``nllloss(args, reduction, ignoreIndex,
inputIsLogProbability)``, ``identityloss(args, reduction)``, ``gelu(args)``, each then
``debugContext``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import defs, numpy_helper

from popart_api.builder_args import op_arguments, op_signature, output_arity
from popart_api.errors import popart_exception

if TYPE_CHECKING:
    from popart_api.builder import Builder

GRAPHCORE_DOMAIN = "ai.graphcore"
#: ONNX op names that are Python keywords: PopART's methods are ``logical_<name>``.
KEYWORD_OPS = ("and", "or", "not", "xor", "if")


def onnx_ops() -> dict[str, str]:
    """Every ``ai.onnx`` op: method name (lower case, ``logical_and``...) -> op type."""
    ops = {}
    for s in defs.get_all_schemas():
        if s.domain == "":
            name = s.name.lower()
            ops["logical_" + name if name in KEYWORD_OPS else name] = s.name
    return ops


#: aiGraphcore method name -> op type, for the generic methods (``gelu``).
AI_GRAPHCORE_OPS = {"gelu": "Gelu"}


class Opset:
    """Op methods of one domain: ``getattr(opset, name)(inputs, *attrs, **attrs)``."""

    def __init__(self, builder: Builder, domain: str, ops: dict[str, str]) -> None:
        self._builder = builder
        self._domain = domain
        self._ops = ops

    def __getattr__(self, name: str) -> Any:
        ops = self.__dict__.get("_ops", {})
        if name.startswith("_") or name not in ops:
            known = ", ".join(sorted(ops))
            hint = f"logical_{name}" if name in KEYWORD_OPS else "the ONNX op name in lower case"
            raise AttributeError(
                f"Builder.{self._label()}.{name}: no such op; known: {known}; hint: {hint} "
                "(aiOnnx.maxpool, aiOnnx.logical_and)"
            )
        op_type = ops[name]
        opset = self._builder.opsets.get(self._domain or "ai.onnx", 0)
        many = output_arity(op_type, self._domain, opset)[2]

        def op(*positional: Any, **keywords: Any) -> Any:
            # PopART's order: the inputs (none for an op without), num_outputs (ops with
            # a variable number of outputs), the attributes, the debug context
            args, num_outputs, debug, attrs = op_arguments(
                op_type, self._domain, opset, positional, keywords
            )
            outs = self._builder._add_node(self._domain, op_type, args, attrs, debug, num_outputs)
            return outs if many else outs[0]

        op.__name__ = name
        op.__signature__ = op_signature(op_type, self._domain, opset)  # type: ignore[attr-defined]
        op.__doc__ = f"Add an ONNX ``{op_type}`` node; returns " + (
            "the list of its output ids." if many else "its output id."
        )
        return op

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._ops))

    def _label(self) -> str:
        return "aiGraphcore" if self._domain == GRAPHCORE_DOMAIN else "aiOnnx"


class AiOnnx(Opset):
    """``builder.aiOnnx``: the ``ai.onnx`` ops."""

    def constant(self, value: Any, is_value_sparse: Any = False, debugContext: str = "") -> str:
        """A ``Constant`` node holding ``value`` (a numpy array); returns its id.

        PopART's opset-11 method is ``constant(value, is_value_sparse=False,
        debugContext)`` (earlier opsets: ``constant(value, debugContext)``); a name given
        second is taken as the debug context, a sparse value is refused as PopART does.
        """
        if isinstance(is_value_sparse, str) and not debugContext:
            is_value_sparse, debugContext = False, is_value_sparse
        if is_value_sparse is not False and is_value_sparse not in (0, None):
            raise popart_exception(
                f"Builder.aiOnnx.constant: is_value_sparse={is_value_sparse!r}; sparse "
                "constants are not supported (PopART's neither); hint: leave it False"
            )
        arr = np.asarray(value)
        return self._builder._add_node(
            "", "Constant", [], {"value": numpy_helper.from_array(arr)}, debugContext
        )[0]


class AiGraphcore(Opset):
    """``builder.aiGraphcore``: the ``ai.graphcore`` ops, as PopART's ``AiGraphcoreOpset1``."""

    def groupnormalization(
        self,
        args: Sequence[str],
        num_groups: int,
        epsilon: float = 1e-05,
        debugContext: str = "",
    ) -> list[str]:
        """Group normalization of ``[x, scale, bias]`` over ``num_groups`` channel
        groups; returns the ids of ``[y, mean, invStdDev]`` (as PopART's)."""
        attrs = {"num_groups": num_groups, "epsilon": float(epsilon)}
        return self._builder._add_node(
            GRAPHCORE_DOMAIN, "GroupNormalization", args, attrs, debugContext, 3
        )

    def scale(self, args: Sequence[str], scale: float, debugContext: str = "") -> str:
        """``ai.graphcore`` ``Scale``: the input times ``scale``; returns the output id."""
        return self._add(args, "Scale", {"scale": float(scale)}, debugContext)

    def nllloss(
        self,
        args: Sequence[str],
        reduction: Any = None,
        ignoreIndex: int | None = None,
        inputIsLogProbability: bool = False,
        debugContext: str = "",
    ) -> str:
        """Negative log likelihood of ``[probs [..., C], labels [...]]``; reduction
        ``popart.ReductionType.Mean`` (default), ``Sum`` or ``NoReduction``."""
        attrs: dict[str, Any] = {
            "reduction": reduction_name(reduction),
            "inputIsLogProbability": int(bool(inputIsLogProbability)),
        }
        if ignoreIndex is not None:
            attrs["ignoreIndex"] = int(ignoreIndex)
        return self._add(args, "Nll", attrs, debugContext)

    def l1loss(
        self,
        args: Sequence[str],
        lambda_: float = 1.0,
        reduction: Any = None,
        debugContext: str = "",
        **kw: Any,
    ) -> str:
        """``lambda·|x|`` reduced (``lambda`` is the second argument, as in PopART)."""
        lam = kw.pop("lambda", lambda_)
        if kw:
            raise popart_exception(f"Builder.aiGraphcore.l1loss: unknown arguments {sorted(kw)}")
        return self._add(
            args,
            "L1",
            {"lambda": float(lam), "reduction": reduction_name(reduction)},
            debugContext,
        )

    def identityloss(
        self, args: Sequence[str], reduction: Any = None, debugContext: str = ""
    ) -> str:
        """The input reduced to a loss (sum or mean over all elements)."""
        return self._add(
            args, "IdentityLoss", {"reduction": reduction_name(reduction)}, debugContext
        )

    def _add(self, args: Sequence[str], op_type: str, attrs: dict, debugContext: str) -> str:
        return self._builder._add_node(GRAPHCORE_DOMAIN, op_type, args, attrs, debugContext)[0]


def reduction_name(reduction: Any) -> str:
    """The ``reduction`` attribute's text of a ``popart.ReductionType`` (or its name)."""
    if reduction is None:
        return "Mean"
    value = getattr(reduction, "value", reduction)
    if str(value) not in ("Sum", "Mean", "NoReduction"):
        raise popart_exception(
            f"Builder: reduction {reduction!r} is not one of Sum, Mean, NoReduction; hint: "
            "popart.ReductionType.Mean"
        )
    return str(value)


__all__ = [
    "AI_GRAPHCORE_OPS",
    "GRAPHCORE_DOMAIN",
    "KEYWORD_OPS",
    "AiGraphcore",
    "AiOnnx",
    "Opset",
    "onnx_ops",
    "reduction_name",
]
