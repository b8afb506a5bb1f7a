"""PopART's ``Patterns``: the graph transformations a session applies, by name.

The names, and which are on by default and which are mandatory, are PopART's
(graphcore/popart d2f20d78: each ``PatternCreator<...>("Name", enabled, mandatory)``
registration in ``willow/src/patterns/*.cpp``, and ``Patterns::Patterns`` in
``willow/src/patterns/patterns.cpp`` for the levels and ``InPlace``). As there:

* ``Patterns()`` / ``Patterns(PatternsLevel.Default)`` enables the patterns that are
  on by default and in-placing; ``All`` every pattern; ``Minimal`` the mandatory ones
  only, without in-placing; ``NoPatterns`` none (a session then refuses to build
  unless ``enableRuntimeAsserts(False)``: PopART's "Pattern 'X' must be enabled");
* ``Patterns(["InPlace", "SoftmaxGradDirect", ...])`` enables exactly those;
* ``enablePattern(name, on)`` / ``isPatternEnabled(name)`` and the properties
  (``InPlace``, ``SoftMaxGradDirect``, ``NlllWithSoftMaxGradDirect``, ...); turning a
  mandatory pattern off is an error, an unknown name too.

What the patterns change here (the others are accepted and recorded: their rewrites
are either what this layer lowers anyway, e.g. ``MatMulOp``, ``ConvDataGrad``, the
``...GradOp`` decompositions, or not modelled):

* ``InPlace``: a Relu, Sigmoid or Tanh whose input is a fresh activation read by
  nothing else runs in place on it (``popnn::nonLinearityInPlace``) instead of into a
  new tensor: less memory; PopART's ``Inplace`` pattern turns such ops into their
  ``...Inplace`` variants (``willow/src/patterns/inplace.cpp``).
* ``SoftmaxGradDirect`` / ``NlllWithSoftmaxGradDirect``: the gradient of the logits of
  a Softmax feeding only an Nll loss is ``(p - onehot)·w`` in one step; with both off,
  the Nll gradient and the Softmax gradient are computed one after the other (more
  cycles and memory).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from popart_api.errors import popart_exception
from poplar_api import FLOAT, HALF, Tensor, popnn
from poplar_api.popnn import NonLinearityType

#: PopART's pre-alias patterns: name -> (enabled by default, mandatory).
PATTERNS: dict[str, tuple[bool, bool]] = {
    "AbsGradOp": (True, True),
    "AllReduceToIdentity": (True, True),
    "Atan2Arg0GradOp": (True, True),
    "Atan2Arg1GradOp": (True, True),
    "ConvDataGrad": (True, True),
    "ConvFlipWeightsDoubleFlip": (True, False),
    "ConvFlipWeightsGradOp": (True, True),
    "ConvTranspose": (True, True),
    "CosGradOp": (True, True),
    "CoshOp": (True, True),
    "DecomposeBinaryConstScalar": (True, False),
    "DivArg0GradOp": (True, True),
    "DivArg1GradOp": (True, True),
    "ExpGradOp": (True, True),
    "ExpandCast": (True, False),
    "Expm1GradOp": (True, True),
    "FmodArg0GradOp": (True, True),
    "InitAccumulate": (True, False),
    "LSTMOp": (False, False),
    "LambSerialisedWeight": (True, False),
    "Log1pGradOp": (True, True),
    "LogGradOp": (True, True),
    "LoopScanOut": (True, True),
    "MatMulLhsGradOp": (True, True),
    "MatMulOp": (True, True),
    "MatMulRhsGradOp": (True, True),
    "MulArgGradOp": (True, True),
    "NegativeOneScale": (True, False),
    "NlllWithSoftmaxGradDirect": (True, False),
    "OpToIdentity": (True, False),
    "PackedDataBlock": (True, False),
    "PadSum": (True, False),
    "PostNRepl": (True, False),
    "PowArg0GradOp": (True, True),
    "PowArg1GradOp": (True, True),
    "PreUniRepl": (True, False),
    "RandomNormalLikeOpPattern": (True, True),
    "RandomUniformLikeOpPattern": (True, True),
    "ReciprocalGradOp": (True, True),
    "RemoveUnnecessaryLossGradCast": (True, False),
    "ScanToLoop": (True, True),
    "SinGradOp": (True, True),
    "Slice2SliceSubsample": (False, False),
    "SoftmaxGradDirect": (True, False),
    "SplitGather": (False, False),
    "SplitGradOpToConcat": (True, False),
    "SplitOp": (True, False),
    "SqrtGradOp": (True, True),
    "SubtractArg1GradOp": (True, True),
    "SumToAdd": (True, False),
    "TiedGather": (False, False),
    "TiedGatherAccumulate": (False, False),
    "TransposeToIdentityOrReshapePattern": (True, False),
    "UpsampleToResize": (True, False),
    "ZerosLikeOpPattern": (True, True),
}

#: Not pre-alias patterns; switched by name as PopART's ``enablePattern`` does.
SPECIAL = ("InPlace", "UpdateInplacePrioritiesForIpu")

#: Python property names of PopART's binding -> pattern names.
_PROPERTIES = {
    "PreUniRepl": "PreUniRepl",
    "PostNRepl": "PostNRepl",
    "SoftMaxGradDirect": "SoftmaxGradDirect",
    "NlllWithSoftMaxGradDirect": "NlllWithSoftmaxGradDirect",
    "OpToIdentity": "OpToIdentity",
    "MulArgGradOp": "MulArgGradOp",
    "MatMulOp": "MatMulOp",
    "MatMulLhsGradOp": "MatMulLhsGradOp",
    "MatMulRhsGradOp": "MatMulRhsGradOp",
    "InPlace": "InPlace",
}


class PatternsLevel(enum.Enum):
    """Which patterns ``Patterns(level)`` enables (``popart.PatternsLevel``)."""

    NoPatterns = "NoPatterns"
    Minimal = "Minimal"
    Default = "Default"
    All = "All"


class Patterns:
    """The patterns a session applies (``popart.Patterns``).

    Parameters
    ----------
    level_or_names
        A :class:`PatternsLevel` (default ``Default``) or a list of pattern names to
        enable (all others off, in-placing only if ``"InPlace"`` is listed).

    Raises
    ------
    popart_exception
        An unknown pattern name (``"Inplace"`` hints at ``InPlace``).
    """

    def __init__(self, level_or_names: PatternsLevel | Iterable[str] | None = None) -> None:
        self._settings: dict[str, bool] = {}
        self._runtime_asserts = True
        if level_or_names is None:
            level_or_names = PatternsLevel.Default
        if isinstance(level_or_names, PatternsLevel):
            level = level_or_names
            for name, (default, mandatory) in PATTERNS.items():
                if level is PatternsLevel.Default:
                    self._settings[name] = default
                elif level is PatternsLevel.All:
                    self._settings[name] = True
                elif level is PatternsLevel.Minimal:
                    self._settings[name] = mandatory
            self._settings["InPlace"] = level in (PatternsLevel.Default, PatternsLevel.All)
            self._settings["UpdateInplacePrioritiesForIpu"] = False
            return
        if isinstance(level_or_names, str):
            raise popart_exception(
                f"Patterns: expected a PatternsLevel or a list of names, got the string "
                f"{level_or_names!r}; hint: popart.Patterns([{level_or_names!r}])"
            )
        for name in level_or_names:
            self._check(str(name))
            self._settings[str(name)] = True

    @staticmethod
    def _check(name: str) -> None:
        if name in PATTERNS or name in SPECIAL:
            return
        hint = " (did you mean InPlace?)" if name.lower() == "inplace" else ""
        raise popart_exception(
            f"Patterns: unknown pattern '{name}'{hint}; known: "
            f"{', '.join([*SPECIAL, *sorted(PATTERNS)])}"
        )

    def isPatternEnabled(self, name: str) -> bool:
        """Whether pattern ``name`` is on."""
        self._check(name)
        return self._settings.get(name, False)

    def enablePattern(self, name: str, enabled: bool) -> Patterns:
        """Turn pattern ``name`` on or off; returns self.

        Raises
        ------
        popart_exception
            Unknown name, or turning off a mandatory pattern.
        """
        self._check(name)
        if not enabled and PATTERNS.get(name, (True, False))[1]:
            raise popart_exception(
                f"Patterns: pattern '{name}' is mandatory and cannot be disabled"
            )
        self._settings[name] = bool(enabled)
        return self

    def enableRuntimeAsserts(self, enabled: bool) -> Patterns:
        """Whether a session checks that every mandatory pattern is on."""
        self._runtime_asserts = bool(enabled)
        return self

    def check_mandatory(self, what: str) -> None:
        """Refuse a set of patterns without a mandatory one (PopART's
        ``ensureAllMandatoryPreAliasPatternsAreEnabled``), unless runtime asserts are
        off."""
        if not self._runtime_asserts:
            return
        for name, (_default, mandatory) in PATTERNS.items():
            if mandatory and not self._settings.get(name, False):
                raise popart_exception(
                    f"{what}: pattern '{name}' must be enabled (it is mandatory); hint: "
                    "popart.Patterns(popart.PatternsLevel.Minimal) or above, or "
                    "patterns.enableRuntimeAsserts(False)"
                )

    def enabled(self) -> list[str]:
        """Names of the patterns that are on."""
        return sorted(n for n, on in self._settings.items() if on)

    @property
    def fuse_softmax_grad(self) -> bool:
        """Whether Softmax -> Nll gets its direct gradient ``(p - onehot)·w``."""
        return self._settings.get("SoftmaxGradDirect", False) or self._settings.get(
            "NlllWithSoftmaxGradDirect", False
        )

    def __getattr__(self, key: str) -> Any:
        if key in _PROPERTIES:
            return self._settings.get(_PROPERTIES[key], False)
        raise AttributeError(key)

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _PROPERTIES:
            self.enablePattern(_PROPERTIES[key], bool(value))
        else:
            object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return f"Patterns({self.enabled()})"


def as_patterns(patterns: Any, what: str) -> Patterns:
    """A session's ``patterns`` argument as :class:`Patterns` (None: the default set),
    checked for the mandatory ones."""
    if patterns is None:
        out = Patterns()
    elif isinstance(patterns, Patterns):
        out = patterns
    elif isinstance(patterns, PatternsLevel):
        out = Patterns(patterns)
    else:
        raise popart_exception(
            f"{what}: patterns must be a popart.Patterns, got {type(patterns).__name__}; "
            "hint: popart.Patterns(popart.PatternsLevel.Default)"
        )
    out.check_mandatory(what)
    return out


#: Ops ``InPlace`` runs in place (their gradients read their output, not their input).
INPLACE_NONLINEARITIES = ("Relu", "Sigmoid", "Tanh")
#: Producers of fresh activations whose gradient does not read their output: a
#: non-linearity may overwrite that output.
INPLACE_PRODUCERS = frozenset({"MatMul", "Gemm", "Conv", "Add", "Sub"})


def inplace_candidates(
    model: Any, recomputed: list[bool] | None, anchors: Iterable[str] = ()
) -> set[int]:
    """Indices of the nodes ``InPlace`` runs in place: a Relu, Sigmoid or Tanh whose
    input is the output of a MatMul, Gemm, Conv, Add or Sub (a fresh tensor whose
    gradient does not read it), read by that node only, neither a graph output nor
    anchored; recomputed only together with its producer and every node between them
    (one replay writes the input again before the op overwrites it), never alone."""
    nodes = list(model.graph.node)
    made_by = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in model.graph.output} | set(anchors)
    out = set()
    for k, node in enumerate(nodes):
        if node.op_type not in INPLACE_NONLINEARITIES or (node.domain or "ai.onnx") != "ai.onnx":
            continue
        if not node.input:
            continue
        src = node.input[0]
        p = made_by.get(src)
        if p is None or nodes[p].op_type not in INPLACE_PRODUCERS:
            continue
        if readers.get(src, 0) != 1 or src in outputs:
            continue
        # recomputed: only with its producer in one segment (nothing kept between
        # them), where the replay writes the input again before the op overwrites it
        partly = recomputed and (recomputed[k] or recomputed[p])
        if partly and not all(recomputed[p : k + 1]):
            continue
        out.add(k)
    return out


def inplace_lowering(op_type: str, fallback: Callable) -> Callable:
    """The lowering of an in-placed ``op_type`` node: ``popnn.nonLinearityInPlace`` on
    its input, which becomes its output; ``fallback`` (the op's own lowering) when the
    input is not a float tensor of the graph."""
    kind = {
        "Relu": NonLinearityType.RELU,
        "Sigmoid": NonLinearityType.SIGMOID,
        "Tanh": NonLinearityType.TANH,
    }[op_type]

    def lower(graph: Any, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = inputs[0] if inputs else None
        if not isinstance(x, Tensor) or x.elementType() not in (FLOAT, HALF):
            return fallback(graph, inputs, attrs, prog, name)
        popnn.nonLinearityInPlace(graph, kind, x, prog, f"{name}/inplace")
        return [x]

    return lower


__all__ = [
    "PATTERNS",
    "Patterns",
    "PatternsLevel",
    "as_patterns",
    "inplace_candidates",
    "inplace_lowering",
]
