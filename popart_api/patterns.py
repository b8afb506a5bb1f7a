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

* ``InPlace``: elementwise ops overwrite their input when it is a fresh activation
  nothing else reads, and view ops (Reshape, Transpose, Slice, Concat, ...) are views;
  off, each op writes a new tensor and view ops copy (:mod:`popart_api.inplace`).
* ``SoftmaxGradDirect`` / ``NlllWithSoftmaxGradDirect``: the gradient of the logits of
  a Softmax feeding only an Nll loss is ``(p - onehot)·w`` in one step; with both off,
  the Nll gradient and the Softmax gradient are computed one after the other (more
  cycles and memory).
* ``OpToIdentity``, ``PostNRepl``, ``PreUniRepl``, ``NegativeOneScale``, ``ExpandCast``,
  ``SumToAdd``: rewrites of the ONNX model before it is lowered
  (:mod:`popart_api.graph_patterns`).

``docs/popart.md`` has the table of all 55 and what each does here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from popart_api.errors import popart_exception

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


__all__ = [
    "PATTERNS",
    "Patterns",
    "PatternsLevel",
    "as_patterns",
]
