"""The Poplibs release whose planning poplin follows, and what differs between releases.

The release is a setting of the run (``software.poplibs_release`` of the machine
config, :mod:`ipusim.config_software`), read here from the graph's target. Two releases
are modelled (graphcore/poplibs; docs/planner.md, "Poplibs releases"):

* ``7eac0f26`` (the newest public source, the default): ``constructModel``
  (``lib/poplin/ConvModel.cpp``) bounds a serial split by the channel grains only
  (``m.lessOrEqual(p.outChanSplit.serial, initialOutputChanGrains)``), and the
  convolution runs every iteration but the last with the grains shared out and rounded
  up (``getOutChansPerSerialSplit``, ``getInChansPerSerialSplit`` in
  ``lib/poplin/Convolution.cpp``), the last after the loop (``lastSlice``); an
  output-channel loop may broadcast its inputs before it (``broadcastInputBeforeLoop``).
* ``f927358`` (2021-03-10, the Poplibs of source J's measurements): ``constructModel``
  requires each serial split to be a factor of the channels
  (``m.factorOf(initialOutputChansPerGroup, p.outChanSplit.serial)`` and of the input
  channels: "we must avoid splitting the convolutions serially when it will produce
  different sized convolutions"), ``iteratePartitionSerial`` (``Convolution.cpp``) runs
  ``channels / serial`` channels an iteration, and there is no
  ``broadcastInputBeforeLoop`` (neither it nor ``lastSlice`` is in ``lib/poplin``).
  Its planner's estimate of ``ConvPartial1x1Out`` with HALF inputs and FLOAT partials
  (``lib/poplin/PerformanceEstimation.hpp``) is a few cycles higher: a worker's
  ``getConvPartial1x1SupervisorInnerLoopCycleEstimate`` ends in 2 (zeroing) or 4 cycles
  where 7eac0f26's ``...HalfFloat`` ends in 1 or 2 (38 or 40 for 3 and more positions,
  against 37 or 38), and ``getConvPartial1x1SupervisorOuterLoopCycleEstimate`` charges
  ``12 + (inGroups - 1)(16 + outGroups (19 + ...)) + (11 + outGroups (19 + ...))`` a
  conv group where 7eac0f26's ``commonHalfAndFloatPartialsCodePath`` gives
  ``13 + (inGroups - 1)(15 + ...) + (11 + outGroups (18 + ...))``;
  ``conv1x1WorkerRetentionSavings`` is ``(10, 2)`` there, ``(7, 3)`` at 7eac0f26.
  Its horizontal- and vertical-MAC estimates (HALF inputs, FLOAT partials) differ too
  (:data:`MAC_ESTIMATES`): there is no ``use1x1Implementation`` of the horizontal MAC
  (no ``canUseHorizontalMac1x1Vertex``, no ``convHzmacWorkerRetentionSavings``), so
  ``getConvPartialHorizontalMacCycleEstimate`` starts a worker at 16 (7eac0f26: 16 - 15)
  and a run at 19 (13 + 1), charges ``7 + D`` a position (``2 + D``),
  ``convHorizontalMacOverhead`` is 63 (``65 - 10``) with no ``15 W`` retention term in
  ``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate``, the partials are always
  zeroed (``addPartialCalcCycleEstimate``'s HMAC branch in ``ConvModel.cpp``; 7eac0f26
  skips ``estimateZeroSupervisorCycles`` for one input group), and
  ``getDenseDotProductCycles`` of HALF inputs into FLOAT partials is ``7 + n / 4`` for a
  multiple of 4, else ``7 + n`` (7eac0f26: ``6 + n / 4``, ``7 + n`` for even, ``7 + 2n``
  for odd ``n``); the vertical MAC's worker takes ``6 + 20`` cycles an entry
  (``getConvPartialVerticalMacCycleEstimate``: ``10 + 5 + getVerticalMacDotProductCycles``,
  5 for one kernel position; 7eac0f26: ``19 + 15`` an entry), its supervisor 100
  (``61 + 13 + 26``; 7eac0f26 101), zeroing ``4 + n`` (``4 + ceil(n / 2)``) and its
  reduction ``10 + ...`` (``getConvPartialVerticalReductionCycleEstimate``; 7eac0f26
  ``9 + ...``) in ``PerformanceEstimation.hpp``. Its vertex candidates of both MACs are
  7eac0f26's (``getConvVertexHMACCandidates``, ``getConvVertexVMACCandidates`` and
  ``sortConvVertexTypeCandidates`` in ``ConvVertexType.cpp`` differ only in names).

Other commits plan as a modelled release where their planner is that release's
(:data:`PLANS_AS`): ``1e4ea3b`` (authored 2021-02-26, the Poplibs of source K's ``v1`` rows) is
four commits before ``f927358``, and ``git diff 1e4ea3b f927358 -- lib include``
touches in ``lib/poplin`` only the solvers (``Cholesky.cpp``, the ``Cholesky`` and
``TriangularSolve`` codelets, ``codelets/Dot.hpp``, their estimators in
``poplinCycleEstimators.cpp``): ``ConvPlan.cpp``, ``ConvModel.cpp``,
``Convolution.cpp``, ``PerformanceEstimation.hpp``, ``lib/popops`` are the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipusim.config_software import POPLIBS_RELEASES

__all__ = [
    "DEFAULT_RELEASE",
    "MAC_ESTIMATES",
    "PLANS_AS",
    "POPLIBS_RELEASES",
    "MacEstimates",
    "amp_common_path_estimate",
    "broadcasts_before_loop",
    "mac_estimates",
    "pads_serial_splits",
    "planning_release_of",
    "poplibs_release",
]

#: The release a target without a software section plans as (the config's default).
DEFAULT_RELEASE = POPLIBS_RELEASES[0]
#: Poplibs commits (full hashes) that are not modelled releases but whose planner files
#: are a modelled release's, with that release (module docstring).
PLANS_AS: dict[str, str] = {"1e4ea3b225a40831ce6d8aec1160c5efd3b4cae7": "f927358"}
#: Releases whose serial splits may leave the last iteration smaller (padded).
_PADDED_SERIAL = frozenset({"7eac0f26"})
#: Releases with ``broadcastInputBeforeLoop``.
_BROADCAST = frozenset({"7eac0f26"})
#: Releases whose planner estimates ``ConvPartial1x1Out`` (HALF, FLOAT partials) with the
#: ``commonHalfAndFloatPartialsCodePath`` constants.
_COMMON_PATH = frozenset({"7eac0f26"})


@dataclass(frozen=True)
class MacEstimates:
    """The constants of a release's planner estimates of the horizontal and vertical MAC
    vertices for HALF inputs with FLOAT partials and a 1-wide kernel
    (``PerformanceEstimation.hpp``; the formulas are in :mod:`.poplibs_mac_estimates`)."""

    #: ``convHorizontalMacOverhead``: 65 - 10 on the 1x1 path (7eac0f26), 63 (f927358).
    hmac_overhead: int
    #: ``convHzmacWorkerRetentionSavings`` on the 1x1 path: a worker starts at 16 less it
    #: and the supervisor adds it per worker (15), or 0 where there is no 1x1 path.
    hmac_retention: int
    #: Cycles a non-empty run of positions starts with: ``13 + 1`` (the 1x1 path with one
    #: output channel a group, weights pointer preloaded) or 19.
    hmac_run: int
    #: Cycles a position adds besides its dot product: 2 (1x1 path) or 7.
    hmac_position: int
    #: Whether the partials of a tile with one input group are left unzeroed (the
    #: non-zeroing 1x1 path of ``addPartialCalcCycleEstimate``).
    hmac_skips_zeroing: bool
    #: ``getDenseDotProductCycles`` of ``n`` HALF inputs into a FLOAT partial, as
    #: ``(base for 4 | n, base for other n, slope of odd n)``: ``(6, 7, 2)`` gives
    #: ``6 + n / 4``, ``7 + n`` (even), ``7 + 2 n`` (odd); ``(7, 7, 1)`` gives ``7 + n / 4``
    #: and ``7 + n``.
    hmac_dot: tuple[int, int, int]
    #: ``61 + wkrCoreVMACInit + wkrStateRetentionInit``: 61 + 14 + 26 or 61 + 13 + 26.
    vmac_supervisor: int
    #: A vertical-MAC worker's start and cycles per worklist entry of one kernel position:
    #: ``(19, 7 + 5 + 3)`` or ``(6, 10 + 5 + 5)``.
    vmac_worker: tuple[int, int]
    #: Output elements zeroed a cycle (``...ZeroInnerLoopCycleEstimate``): 2 or 1.
    vmac_zero_per_cycle: int
    #: The constant of ``getConvPartialVerticalReductionCycleEstimate``: 9 or 10.
    vmac_reduction: int


#: Per release, its planner's MAC estimates (module docstring).
MAC_ESTIMATES: dict[str, MacEstimates] = {
    "7eac0f26": MacEstimates(55, 15, 14, 2, True, (6, 7, 2), 101, (19, 15), 2, 9),
    "f927358": MacEstimates(63, 0, 19, 7, False, (7, 7, 1), 100, (6, 20), 1, 10),
}


def poplibs_release(target: Any) -> str:
    """The Poplibs release the graph of ``target`` is planned as
    (``target.config.software.poplibs_release``)."""
    return str(target.config.software.poplibs_release)


def planning_release_of(commit: str) -> str | None:
    """The modelled release a graphcore/poplibs commit plans as: the release itself, or
    the one :data:`PLANS_AS` names for it; None for a commit whose planning is not
    modelled. ``commit`` and the known hashes are matched as prefixes either way (an
    abbreviated hash of at least 7 digits).

    Raises
    ------
    ValueError
        ``commit`` is not 7 to 40 hexadecimal digits.
    """
    c = commit.lower()
    if not (7 <= len(c) <= 40 and all(ch in "0123456789abcdef" for ch in c)):
        raise ValueError(
            f"Poplibs commit {commit!r}: expected 7 to 40 hexadecimal digits (a git hash "
            f"of graphcore/poplibs, e.g. 'f927358')"
        )
    for release in POPLIBS_RELEASES:
        if release.startswith(c) or c.startswith(release):
            return release
    for full, release in PLANS_AS.items():
        if full.startswith(c):
            return release
    return None


def _known(release: str) -> str:
    if release not in POPLIBS_RELEASES:
        raise ValueError(
            f"Poplibs release {release!r} is not modelled; expected one of {POPLIBS_RELEASES}"
        )
    return release


def pads_serial_splits(release: str) -> bool:
    """Whether ``release``'s planner allows a serial split that does not divide the
    channels (the last iteration then takes the rest); else splits are factors."""
    return _known(release) in _PADDED_SERIAL


def broadcasts_before_loop(release: str) -> bool:
    """Whether ``release``'s planner may broadcast the inputs before an output-channel
    serial loop (``broadcastInputBeforeLoop``)."""
    return _known(release) in _BROADCAST


def amp_common_path_estimate(release: str) -> bool:
    """Whether ``release``'s planner estimates ``ConvPartial1x1Out`` with HALF inputs and
    FLOAT partials with 7eac0f26's constants (module docstring); else f927358's."""
    return _known(release) in _COMMON_PATH


def mac_estimates(release: str) -> MacEstimates:
    """The horizontal- and vertical-MAC estimate constants of ``release``'s planner
    (:data:`MAC_ESTIMATES`)."""
    return MAC_ESTIMATES[_known(release)]
