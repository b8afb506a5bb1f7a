"""PopART's optimizers: ``ConstSGD``, ``SGD`` and ``Adam``, and their weight updates.

Hyperparameters are given as PopART gives them: ``SGD({"defaultLearningRate": (0.1,
False), "defaultMomentum": (0.9, True), ...})`` — each a value and whether it is
constant — or as plain numbers (constant). ``insertSpecific(weightId, {...})`` sets
values for one weight. Non-constant values live on the device as scalars the host
writes (``weightsFromHost`` and ``updateOptimizerFromHost``); changing a constant one
after ``prepareDevice`` is an error.

The updates are PopART's (``willow/include/popart/sgd.hpp`` and ``adam.hpp``),
written with the gradient ``a`` summed over gradient-accumulation micro-batches and
replicas (divided by their number when ``accumulationAndReplicationReductionType``
is Mean) and the loss scaling ``ls`` divided out:

* SGD without momentum: ``w <- w·(1 - lr·(1-dm)·wd) - lr·(1-dm)/ls · a``;
* SGD with momentum ``mm``: ``v <- mm·v + (1-dm)·vs/ls · a + (1-dm)·wd·vs · w`` then
  ``w <- w - lr/vs · v`` (``vs`` the velocity scaling; ``v`` starts at 0); Nesterov:
  ``w <- w - lr/vs · (vs·(a/ls + wd·w) + mm·v)``;
* Adam (decoupled weight decay, PopART's ``WeightDecayMode.Decay`` default, or
  ``L2Regularization``): ``s = a/ls (+ wd·w for L2)``, ``m <- b1·m + (1-b1)·s``,
  ``v <- b2·v + (1-b2)·s²``, ``t <- t+1``, ``x = (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)``,
  ``w <- w - lr·(x + wd·w)`` (without ``wd·w`` for L2). ``AdamMode.AdamNoBias`` drops
  the bias corrections.

Each update is one or a few ``popops.map`` vertices per weight, as Poplibs' fused
``ScaledAdd``-style codelets.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from popart_api.errors import popart_exception
from poplar_api import FLOAT, Graph, Tensor, popops
from poplar_api.popops import expr as pe
from poplar_api.poputil import mapTensorLinearly


class AdamMode(enum.Enum):
    """Adam variant (``popart.AdamMode``)."""

    Adam = "Adam"
    AdamNoBias = "AdamNoBias"


class WeightDecayMode(enum.Enum):
    """How weight decay enters Adam (``popart.WeightDecayMode``)."""

    Decay = "Decay"
    L2Regularization = "L2Regularization"


def _pair(value: Any, key: str, default_const: bool) -> tuple[float, bool]:
    if isinstance(value, tuple | list):
        if len(value) != 2:
            raise popart_exception(f"optimizer: '{key}' must be (value, isConst), got {value!r}")
        v, const = value
    else:
        v, const = value, default_const
    try:
        return float(v), bool(const)
    except (TypeError, ValueError):
        raise popart_exception(f"optimizer: '{key}' value {v!r} is not a number") from None


class Optimizer:
    """Base of the optimizers: default and per-weight hyperparameters."""

    #: Hyperparameter name (without "default") -> default (value, isConst).
    DEFAULTS: dict[str, tuple[float, bool]] = {}
    kind = "optimizer"

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._defaults = dict(self.DEFAULTS)
        self._specific: dict[str, dict[str, tuple[float, bool]]] = {}
        for key, value in (values or {}).items():
            name = self._name(key)
            self._defaults[name] = _pair(value, key, True)
        self._check_values(self._defaults, "default")

    def _name(self, key: str) -> str:
        name = key[len("default") :] if key.startswith("default") else key
        name = name[:1].lower() + name[1:]
        if name not in self.DEFAULTS:
            known = ", ".join(
                "lossScaling" if k == "lossScaling" else "default" + k[:1].upper() + k[1:]
                for k in self.DEFAULTS
            )
            raise popart_exception(f"{self.kind}: unknown hyperparameter '{key}'; known: {known}")
        return name

    #: Hyperparameters PopART refuses below 0 (``>= 0``) or at or below 0 (``> 0``):
    #: its ``SGD::runValueChecks`` and ``Adam::runValueChecks`` (willow/src/sgd.cpp,
    #: adam.cpp of graphcore/popart d2f20d78db91). Loss scaling must be > 0 here.
    LOWER_BOUNDS: dict[str, str] = {
        "learningRate": ">= 0",
        "weightDecay": ">= 0",
        "momentum": ">= 0",
        "dampening": ">= 0",
        "beta1": ">= 0",
        "beta2": ">= 0",
        "velocityScaling": "> 0",
        "eps": "> 0",
        "lossScaling": "> 0",
    }

    def _check_values(self, values: Mapping[str, tuple[float, bool]], where: str) -> None:
        for name, (v, _) in values.items():
            if not np.isfinite(v):
                raise popart_exception(f"{self.kind}: {where} {name} is {v}; it must be finite")
            bound = self.LOWER_BOUNDS.get(name)
            if (bound == ">= 0" and v < 0) or (bound == "> 0" and v <= 0):
                key = name
                if where == "default" and name != "lossScaling":
                    key = "default" + name[:1].upper() + name[1:]
                raise popart_exception(
                    f"{self.kind}: {where} {name} is {v}; it must be {bound} (as PopART's "
                    f"checks); hint: {{'{key}': (value, isConst)}} with a value {bound}"
                )
        nesterov = values.get("nesterov", self._defaults.get("nesterov", (0.0, True)))[0]
        dampening = values.get("dampening", self._defaults.get("dampening", (0.0, True)))[0]
        if nesterov and dampening > 0:
            raise popart_exception(
                f"{self.kind}: {where} Nesterov momentum with dampening {dampening}; PopART "
                "requires dampening 0 with nesterov; hint: defaultDampening (0.0, True)"
            )

    def insertSpecific(self, weightId: str, values: Mapping[str, Any]) -> None:
        """Hyperparameters for the weight ``weightId`` only (keys without ``default``:
        ``{"learningRate": (0.01, False)}``)."""
        own = {self._name(k): _pair(v, k, True) for k, v in values.items()}
        self._check_values(own, f"weight '{weightId}'")
        self._specific[weightId] = own

    def hasSpecific(self, weightId: str) -> bool:
        """Whether ``weightId`` has its own hyperparameters."""
        return weightId in self._specific

    def value(self, name: str, weightId: str | None = None) -> tuple[float, bool]:
        """``(value, isConst)`` of hyperparameter ``name`` for ``weightId``."""
        if weightId is not None and name in self._specific.get(weightId, {}):
            return self._specific[weightId][name]
        return self._defaults[name]

    def getLossScalingVal(self) -> float:
        """The loss scaling."""
        return self.value("lossScaling")[0]

    def specific_ids(self) -> list[str]:
        """Weights with their own values."""
        return list(self._specific)

    def __repr__(self) -> str:
        vals = {k: v[0] for k, v in self._defaults.items()}
        return f"{type(self).__name__}({vals})"


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum, dampening, weight decay,
    velocity scaling, Nesterov momentum and loss scaling (``popart.SGD``).

    ``SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, True)})`` or
    ``SGD(0.1)`` (a learning rate).
    """

    DEFAULTS = {
        "learningRate": (0.1, False),
        "weightDecay": (0.0, False),
        "momentum": (0.0, True),
        "dampening": (0.0, True),
        "velocityScaling": (1.0, True),
        "nesterov": (0.0, True),
        "lossScaling": (1.0, True),
    }
    kind = "SGD"

    def __init__(self, values: Mapping[str, Any] | float | None = None, **kwargs: Any) -> None:
        if isinstance(values, int | float) and not isinstance(values, bool):
            values = {"defaultLearningRate": (float(values), False)}
        super().__init__(values)

    def uses_momentum(self) -> bool:
        """Whether any weight has momentum, may get it later (a non-constant momentum)
        or uses Nesterov: the velocity is kept."""
        ids = [None, *self._specific]
        return any(
            self.value("momentum", w)[0] != 0
            or not self.value("momentum", w)[1]
            or self.value("nesterov", w)[0]
            for w in ids
        )


class ConstSGD(SGD):
    """SGD with constant learning rate, weight decay and loss scaling
    (``popart.ConstSGD(learning_rate, weight_decay=0, loss_scaling=1)``)."""

    kind = "ConstSGD"

    def __init__(
        self, learning_rate: float, weight_decay: float = 0.0, loss_scaling: float = 1.0
    ) -> None:
        super().__init__(
            {
                "defaultLearningRate": (learning_rate, True),
                "defaultWeightDecay": (weight_decay, True),
                "lossScaling": (loss_scaling, True),
            }
        )


class Adam(Optimizer):
    """Adam / AdamW (``popart.Adam({...}, mode=AdamMode.Adam,
    weight_decay_mode=WeightDecayMode.Decay)``)."""

    DEFAULTS = {
        "learningRate": (0.001, False),
        "weightDecay": (0.0, False),
        "beta1": (0.9, True),
        "beta2": (0.999, True),
        "eps": (1e-6, True),
        "lossScaling": (1.0, True),
    }
    kind = "Adam"

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        mode: AdamMode | str = AdamMode.Adam,
        weight_decay_mode: WeightDecayMode | str = WeightDecayMode.Decay,
        **kwargs: Any,
    ) -> None:
        super().__init__(values)
        try:
            self.mode = AdamMode(getattr(mode, "value", mode))
            self.weight_decay_mode = WeightDecayMode(
                getattr(weight_decay_mode, "value", weight_decay_mode)
            )
        except ValueError as exc:
            raise popart_exception(f"Adam: {exc}; modes: Adam, AdamNoBias") from None
        for w in [None, *self._specific]:
            for b in ("beta1", "beta2"):
                v = self.value(b, w)[0]
                if not 0.0 <= v < 1.0:
                    raise popart_exception(f"Adam: {b} {v} must be in [0, 1)")


# ---------------------------------------------------------------- lowering
@dataclass
class Scalar:
    """A hyperparameter-derived scalar on the device and how the host computes it."""

    tensor: Tensor
    name: str
    weight: str | None
    compute: Any  # (Optimizer, weight id) -> float
    #: the host-write handle the session gives it
    handle: str = ""

    def value(self, optimizer: Optimizer) -> float:
        """The scalar's value under ``optimizer`` (its weight's, or the defaults)."""
        return float(self.compute(optimizer, self.weight))


class OptimizerLowering:
    """The device side of an optimizer: scalars, state tensors and the update programs.

    Made by the session once per graph; :meth:`update` appends the update of one
    weight; each of :attr:`scalars` gives its value for the host to write.
    """

    def __init__(self, graph: Graph, optimizer: Optimizer, grad_divisor: float) -> None:
        self.graph = graph
        self.optimizer = optimizer
        self.grad_divisor = grad_divisor
        self.scalars: list[Scalar] = []
        self._cache: dict[tuple, Tensor] = {}
        self.state: dict[str, Tensor] = {}
        self.step_counter: Tensor | None = None
        #: a scalar read by the update of a weight -> the tensor that update reads
        #: (in a sharded graph the scalar's copy on the weight's IPU; None: itself)
        self.scalar_on: Any = None
        if isinstance(optimizer, Adam):
            self.step_counter = graph.addVariable(FLOAT, [], "optimizer/step")
            graph.setTileMapping(self.step_counter, 0)

    def _scalar(self, name: str, weight: str, compute: Any) -> Tensor:
        shared = not self.optimizer.hasSpecific(weight)
        key = (name, None if shared else weight)
        if key not in self._cache:
            t = self.graph.addVariable(
                FLOAT, [], f"optimizer/{name}" + ("" if shared else f"/{weight}")
            )
            self.graph.setTileMapping(t, 0)
            self._cache[key] = t
            self.scalars.append(Scalar(t, name, None if shared else weight, compute))
        t = self._cache[key]
        return t if self.scalar_on is None else self.scalar_on(t, weight)

    def _slot(self, weight: Tensor, wid: str, what: str) -> Tensor:
        """A new optimizer state tensor (velocity, moment) of weight ``wid``, laid out
        like the weight."""
        t = like(self.graph, weight, f"{what}/{wid}")
        self.state[f"{what}/{wid}"] = t
        return t

    def update(self, wid: str, w: Tensor, a: Tensor, prog: Any, name: str) -> None:
        """Append the update of weight ``w`` (id ``wid``) by gradient ``a`` to ``prog``."""
        opt = self.optimizer
        div = self.grad_divisor
        g = self.graph
        if isinstance(opt, Adam):
            self._adam(wid, w, a, prog, name)
            return
        if not opt.uses_momentum():
            wdsf = self._scalar(
                "wdsf0",
                wid,
                lambda o, k: (
                    1.0
                    - o.value("learningRate", k)[0]
                    * (1 - o.value("dampening", k)[0])
                    * o.value("weightDecay", k)[0]
                ),
            )
            slr = self._scalar(
                "slr0",
                wid,
                lambda o, k: (
                    o.value("learningRate", k)[0]
                    * (1 - o.value("dampening", k)[0])
                    / (o.value("lossScaling")[0] * div)
                ),
            )
            popops.mapInPlace(g, pe._1 * pe._3 - pe._2 * pe._4, [w, a, wdsf, slr], prog, name)
            return
        v = self._slot(w, wid, "accl")
        mm = self._scalar("momentum", wid, lambda o, k: o.value("momentum", k)[0])
        dpsf = self._scalar(
            "dpsf1",
            wid,
            lambda o, k: (
                (1 - o.value("dampening", k)[0])
                * o.value("velocityScaling", k)[0]
                / (o.value("lossScaling")[0] * div)
            ),
        )
        swd = self._scalar(
            "swd1",
            wid,
            lambda o, k: (
                (1 - o.value("dampening", k)[0])
                * o.value("weightDecay", k)[0]
                * o.value("velocityScaling", k)[0]
            ),
        )
        slr = self._scalar(
            "slr1",
            wid,
            lambda o, k: o.value("learningRate", k)[0] / o.value("velocityScaling", k)[0],
        )
        popops.mapInPlace(g, pe._1 * pe._2 + pe._3 * pe._4, [v, mm, a, dpsf], prog, f"{name}/v")
        popops.mapInPlace(g, pe._1 + pe._2 * pe._3, [v, w, swd], prog, f"{name}/vDecay")
        if opt.value("nesterov", wid)[0]:
            # w -= lr/vs · (vs·(a/ls + wd·w) + mm·v); vs·a/ls and vs·wd·w via dpsf, swd
            # without the dampening factor (PopART applies Nesterov with dm = 0).
            nes = self._scalar(
                "nesterovGrad",
                wid,
                lambda o, k: o.value("velocityScaling", k)[0] / (o.value("lossScaling")[0] * div),
            )
            nwd = self._scalar(
                "nesterovWd",
                wid,
                lambda o, k: o.value("weightDecay", k)[0] * o.value("velocityScaling", k)[0],
            )
            step = popops.map(g, pe._1 * pe._2 + pe._3 * pe._4, [a, nes, w, nwd], prog, f"{name}/n")
            popops.mapInPlace(g, pe._1 + pe._2 * pe._3, [step, v, mm], prog, f"{name}/nm")
            popops.mapInPlace(g, pe._1 - pe._2 * pe._3, [w, step, slr], prog, f"{name}/w")
        else:
            popops.mapInPlace(g, pe._1 - pe._2 * pe._3, [w, v, slr], prog, f"{name}/w")

    def _adam(self, wid: str, w: Tensor, a: Tensor, prog: Any, name: str) -> None:
        opt = self.optimizer
        g = self.graph
        div = self.grad_divisor
        m = self._slot(w, wid, "accl1")
        v = self._slot(w, wid, "accl2")
        ils = self._scalar(
            "invLossScaling", wid, lambda o, k: 1.0 / (o.value("lossScaling")[0] * div)
        )
        b1 = self._scalar("beta1", wid, lambda o, k: o.value("beta1", k)[0])
        b2 = self._scalar("beta2", wid, lambda o, k: o.value("beta2", k)[0])
        s = popops.map(g, pe._1 * pe._2, [a, ils], prog, f"{name}/unscale")
        l2 = opt.weight_decay_mode is WeightDecayMode.L2Regularization
        if l2:
            wd = self._scalar("weightDecay", wid, lambda o, k: o.value("weightDecay", k)[0])
            popops.mapInPlace(g, pe._1 + pe._2 * pe._3, [s, w, wd], prog, f"{name}/l2")
        popops.mapInPlace(g, pe._1 * pe._3 + pe._2 * (1.0 - pe._3), [m, s, b1], prog, f"{name}/m")
        popops.mapInPlace(
            g, pe._1 * pe._3 + pe._2 * pe._2 * (1.0 - pe._3), [v, s, b2], prog, f"{name}/v"
        )
        eps = self._scalar("eps", wid, lambda o, k: o.value("eps", k)[0])
        step = self.step_counter
        if step is not None and self.scalar_on is not None:
            step = self.scalar_on(step, wid)
        if opt.mode is AdamMode.Adam:
            c1 = popops.map(
                g,
                1.0 / (1.0 - pe.Pow(pe._1, pe._2)),
                [b1, step],
                prog,
                f"{name}/biasCorrection1",
            )
            c2 = popops.map(
                g,
                1.0 / (1.0 - pe.Pow(pe._1, pe._2)),
                [b2, step],
                prog,
                f"{name}/biasCorrection2",
            )
            den = popops.map(
                g, pe.Sqrt(pe._1 * pe._2) + pe._3, [v, c2, eps], prog, f"{name}/denominator"
            )
            x = popops.map(g, (pe._1 * pe._2) / pe._3, [m, c1, den], prog, f"{name}/updater")
        else:
            den = popops.map(g, pe.Sqrt(pe._1) + pe._2, [v, eps], prog, f"{name}/denominator")
            x = popops.map(g, pe._1 / pe._2, [m, den], prog, f"{name}/updater")
        lr = self._scalar("learningRate", wid, lambda o, k: o.value("learningRate", k)[0])
        if l2:
            popops.mapInPlace(g, pe._1 - pe._2 * pe._3, [w, x, lr], prog, f"{name}/w")
        else:
            wdsf = self._scalar(
                "decayFactor",
                wid,
                lambda o, k: 1.0 - o.value("learningRate", k)[0] * o.value("weightDecay", k)[0],
            )
            popops.mapInPlace(g, pe._1 * pe._4 - pe._2 * pe._3, [w, x, lr, wdsf], prog, f"{name}/w")

    def begin_update(self, prog: Any) -> None:
        """Before the updates of one optimizer step: advance Adam's step counter."""
        if self.step_counter is not None:
            popops.addInPlace(self.graph, self.step_counter, 1.0, prog, "optimizer/step")

    def state_tensors(self) -> list[Tensor]:
        """The optimizer's state (velocities, moments, step counter): zeroed at
        ``weightsFromHost``."""
        out = list(self.state.values())
        if self.step_counter is not None:
            out.append(self.step_counter)
        return out


def like(graph: Graph, t: Tensor, name: str) -> Tensor:
    """A new variable of ``t``'s type and shape, mapped as ``t`` is (element by element,
    in one bulk call: a tile mapping as per-tile interval lists costs a Python object
    per interval, tens of thousands for a convolution's weights)."""
    new = graph.addVariable(t.elementType(), t.shape(), name)
    tiles = graph.elementTiles(t, readonly=True)
    if tiles.size and int(tiles.min()) < 0:  # unmapped, or on tiles not of this graph
        mapTensorLinearly(graph, new)  # no mapping to copy: spread it instead
    else:
        graph.mapElements(new, tiles)
    return new


__all__ = [
    "SGD",
    "Adam",
    "AdamMode",
    "ConstSGD",
    "Optimizer",
    "OptimizerLowering",
    "WeightDecayMode",
    "like",
]
