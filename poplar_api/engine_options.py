"""Engine options: the names Poplar's ``Engine`` accepts, their values and what ipusim
does with each.

Every option of Poplar's Engine reference (engine creation options and the runtime
options of ``poplar::RuntimeOptions``) is accepted: either *honoured* (it changes what
ipusim does) or *inert* (validated, recorded in the profiles' options, and a no-op
because ipusim does not model what it controls). A few options are ipusim's own
(``ipusim: ...`` in their description). docs/poplar_api.md, "Engine options", lists
every option with its status and where its name comes from; a test checks that table
against :data:`ENGINE_OPTIONS`.

Values are checked as Poplar's option parser reads them: booleans ``true``/``false``
(any case), enumerations by their words, integers decimal or ``0x`` hexadecimal
(non-negative), decimals as floats (non-negative), filters as regular expressions.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poplar_api.errors import EngineError

__all__ = ["ENGINE_OPTIONS", "EngineOption", "check_engine_options", "option"]

_BOOL = ("true", "false")


@dataclass(frozen=True)
class EngineOption:
    """One engine option: what values it takes, its default and what ipusim does with it.

    Attributes
    ----------
    kind
        ``"bool"`` (``true``/``false``), ``"enum"`` (one of ``choices``), ``"int"`` (a
        non-negative integer, decimal or ``0x`` hexadecimal, or one of ``choices`` such
        as ``unlimited``), ``"float"`` (a non-negative decimal) or ``"str"`` (any
        string; ``"regex"`` for a regular expression).
    choices
        Allowed words (enum) or extra words allowed besides a number.
    default
        Poplar's default, as a string.
    doc
        What the option does.
    honoured
        Whether ipusim acts on it; False means accepted and recorded in the
        profiles' options but a no-op (see docs/poplar_api.md, "Engine options").
    """

    kind: str
    choices: tuple[str, ...] = ()
    default: str = ""
    doc: str = ""
    honoured: bool = False

    def __iter__(self) -> Any:  # (allowed, default, doc), the former tuple form
        allowed = _BOOL if self.kind == "bool" else self.choices if self.kind == "enum" else None
        return iter((allowed, self.default, self.doc))


def _b(default: str, doc: str, honoured: bool = False) -> EngineOption:
    return EngineOption("bool", _BOOL, default, doc, honoured)


def _e(choices: tuple[str, ...], default: str, doc: str, honoured: bool = False) -> EngineOption:
    return EngineOption("enum", choices, default, doc, honoured)


def _i(default: str, doc: str, words: tuple[str, ...] = (), honoured: bool = False) -> EngineOption:
    return EngineOption("int", words, default, doc, honoured)


def _f(default: str, doc: str) -> EngineOption:
    return EngineOption("float", (), default, doc)


def _s(default: str, doc: str, honoured: bool = False, kind: str = "str") -> EngineOption:
    return EngineOption(kind, (), default, doc, honoured)


#: Every engine option the engine accepts: name -> :class:`EngineOption`. The one
#: place the known set is kept (docs/poplar_api.md, "Engine options", lists each with
#: its status and source).
ENGINE_OPTIONS: dict[str, EngineOption] = {
    # ---- autoReport: profile files written after each run
    "autoReport.all": _b("false", "write every profile file after each run", True),
    "autoReport.directory": _s("./profiles", "directory of the autoReport files", True),
    "autoReport.outputGraphProfile": _b("false", "write the graph profile", True),
    "autoReport.outputExecutionProfile": _b("false", "write the execution profile", True),
    "autoReport.outputLoweredVars": _b("false", "lowered variables file (not written)"),
    "autoReport.outputArchive": _b("true", "graph archive (not written)"),
    "autoReport.outputSerializedGraph": _b("false", "serialized graph (not written)"),
    "autoReport.outputDebugInfo": _b("false", "debug information file (not written)"),
    "autoReport.executionProfileProgramRunCount": _i("2", "runs to profile (all are kept)"),
    "autoReport.streamAtEachRun": _b("true", "write after each run (always done)"),
    # ---- debug
    "debug.allowOutOfMemory": _b("false", "compile even if a tile overflows", True),
    "debug.instrument": _b("false", "all instrumentation (compute, external exchange)", True),
    "debug.instrumentCompute": _b("false", "per-tile/per-vertex compute cycles", True),
    "debug.instrumentControlFlow": _b("false", "recorded; program trace is always kept", True),
    "debug.instrumentExternalExchange": _b("false", "per-tile stream copy cycles", True),
    "debug.computeInstrumentationLevel": _e(
        ("vertex", "tile", "ipu", "device"), "tile", "detail of compute cycles", True
    ),
    "debug.outputAllSymbols": _b("false", "keep all symbols in the binary"),
    "debug.retainDebugInformation": _b("true", "keep debug information"),
    "debug.loweredVarDumpFile": _s("", "file of lowered variables (not written)"),
    "debug.verify": _b("false", "Poplar's own compile-time checks"),
    "debug.runtimeVerify": _b("false", "Poplar's run-time checks of its own code"),
    "debug.checkForSpuriousCycles": _b("false", "check the exchange code for stray cycles"),
    "debug.nanOverflowException": _b(
        "false", "IPU exception on a NaN result (see debug.floatingPointExceptions)"
    ),
    "debug.nanOverflowMode": _b(
        "false", "NaN on overflow (the tiles' NANOO mode); ipusim's arithmetic is IEEE"
    ),
    "debug.floatPointOpException": _b(
        "false",
        "IPU exception on an invalid operation, division by zero or overflow: the check of "
        "debug.floatingPointExceptions",
        True,
    ),
    "debug.supervisorStackSizeInBytes": _i("", "supervisor stack size in bytes"),
    "debug.workerStackSizeInBytes": _i("", "worker stack size in bytes"),
    "debug.profilingTile": _i("", "tile that holds the profiling buffers"),
    "debug.branchRecordTile": _i("", "tile that records branches"),
    "debug.branchRecordFlush": _b("false", "flush the branch record"),
    "debug.cpuMultiThreadExecution": _b("true", "run a CPU device's vertices on threads"),
    "debug.executionProfile": _e(
        ("none", "compute_sets", "single_tile_compute_sets", "vertices", "external_exchanges"),
        "none",
        "SDK 1.x name of the execution profile's instrumentation (its profilerMode): "
        "compute_sets, vertices and single_tile_compute_sets instrument compute at level "
        "tile, vertex and ipu, external_exchanges the stream copies",
        True,
    ),
    "debug.globalExchangeViaDebug": _b("false", "global exchange through the debug path"),
    "debug.checkVertexBounds": _b("true", "ipusim: bounds-check vertex code", True),
    "debug.floatingPointExceptions": _b(
        "false",
        "ipusim: a vertex that writes NaN or an infinity into a FLOAT or HALF field stops "
        "the run (FloatingPointException naming the vertex, tile and compute set)",
        True,
    ),
    "debug.vertexCycles": _e(
        ("estimate", "auto", "counted"),
        "estimate",
        "ipusim: where vertex cycles come from: estimates; auto (as Poplar: counted "
        "execution of codelets on hardware devices); counted (every kernel ipusim runs)",
        True,
    ),
    "debug.maxCycles": _i(
        "unlimited",
        "ipusim: end a run whose tile clock passes this many cycles (SimulationTimeout, "
        "partial profile kept)",
        ("unlimited",),
        True,
    ),
    # ---- exchange
    "exchange.streamBufferOverlap": _e(
        ("none", "hostRearrangeOnly", "any"),
        "hostRearrangeOnly",
        "stream buffers sharing tile memory (not modelled)",
    ),
    "exchange.enablePrefetch": _b("true", "prefetch host-to-device streams", True),
    "exchange.multicastPolicy": _s("", "multicast exchange policy"),
    "exchange.maxStreamBufferSize": _i("", "largest stream buffer in bytes"),
    # ---- opt
    "opt.maxCopyMergeSize": _i(
        "",
        "largest merged stream copy in bytes: adjacent stream copies share one host sync "
        "up to this size (not set or 0: no merging)",
        (),
        True,
    ),
    "opt.maxComputeSetsPerLoweredCopy": _i("6", "compute sets one lowered copy may use"),
    "opt.enableMultiAccessCopies": _b("true", "multi-access copies"),
    "opt.enableSwSyncs": _b("false", "software syncs in place of hardware syncs"),
    "opt.limitVertexStateToLower256K": _b("false", "vertex state in the lowest 256 KiB"),
    "opt.useAutoloader": _b("true", "load code on demand"),
    "opt.internalExchangeOptimisationTarget": _e(
        ("balanced", "cycles", "memory"), "cycles", "what exchange code optimises"
    ),
    "opt.maxCompilationThreads": _i("0", "compile threads (0: all)"),
    "opt.maxLinkerThreads": _i("0", "link threads (0: all)"),
    "opt.maxComputeSetsPerLoweringThread": _i("", "compute sets one lowering thread takes"),
    "opt.enableInlining": _b("true", "inline called functions in the binary"),
    "opt.shareAll": _b("false", "share identical vertex state structures between tiles"),
    "opt.sharedStructureBytesPerStep": _i("", "bytes of shared structures copied per step"),
    # ---- prng
    "prng.enable": _b("false", "SDK 1.x switch of the hardware random number generators"),
    "prng.enableStochasticRounding": _b("false", "stochastic rounding of float results"),
    "prng.seed": _i("", "seed of the hardware random number generators"),
    # ---- profiler
    "profiler.format": _e(
        ("json", "cbor", "v1", "v2", "v3"), "json", "format of the autoReport profiles", True
    ),
    "profiler.programs.filter": _s(
        "", "programs to instrument with an implicit Block (regex)", True, kind="regex"
    ),
    "profiler.blocks.filter": _s("", "Block programs to instrument (regex)", True, kind="regex"),
    "profiler.blocks.implicitFlush": _b("true", "flush block buffers implicitly"),
    "profiler.includeFlopEstimates": _b("false", "FLOP estimates in the profile"),
    "profiler.includeCycleEstimates": _b("false", "cycle estimates in the profile"),
    "profiler.perExecutionStreamCopyCycles": _b("false", "stream copy cycles per run"),
    "profiler.replicaToProfile": _i("", "replica whose execution is profiled"),
    "profiler.useUnstableFormat": _b("false", "profile in the format under development"),
    # ---- stream callbacks (runtime options: also POPLAR_RUNTIME_OPTIONS in Poplar)
    "streamCallbacks.maxLookahead": _i("0", "callbacks run ahead", ("unlimited",)),
    "streamCallbacks.multiThreadMode": _e(
        ("singleThread", "collaborative", "dedicated", "none"),
        "singleThread",
        "host threads for callbacks (none: the former name of singleThread)",
    ),
    "streamCallbacks.numWorkerThreads": _i("0", "host callback threads", ("auto",)),
    "streamCallbacks.numaAware": _b("false", "NUMA-aware callback threads"),
    # ---- target (syncMethod .. hostSyncTimeout are runtime options)
    "target.syncMethod": _e(
        ("polling", "hybrid", "default"), "default", "how the host learns of a sync"
    ),
    "target.syncPollPeriodUs": _i("0", "host sync polling period in microseconds"),
    "target.exceptionPollPeriodUs": _i("250000", "device exception polling period (us)"),
    "target.hostSyncTimeout": _f("300.00", "seconds to wait for a host sync (0: none)"),
    "target.syncReplicasIndependently": _b("false", "replicas sync with the host alone"),
    "target.useBufferedCompletions": _b("true", "host learns of finished copies in batches"),
    "target.saveArchive": _s("", "file to save the graph archive to (not written)"),
    "target.extendedMemory": _b("false", "use extended memory addressing"),
    "target.deterministicWorkers": _e(("true", "false", "portable"), "true", "worker seeds"),
    "target.workerStackSizeInBytes": _i("", "worker stack size in bytes"),
    "target.supervisorStackSizeInBytes": _i("", "supervisor stack size in bytes"),
    "target.gatewayMode": _b("true", "IPU-Machine gateway mode"),
    "target.gatewayWriteCombining": _b("false", "combine writes through the gateway"),
    "target.firstRuntimeReplica": _i("0", "first replica of this process"),
    "target.numberRuntimeReplica": _i("", "replicas of this process"),
    "target.maxStreamCallbackThreadsPerNumaNode": _i(
        "", "host threads for stream callbacks on each NUMA node", ("auto",)
    ),
}


def _number(text: str, kind: str) -> float | None:
    """``text`` as a non-negative number of ``kind`` (int: decimal or 0x hex), or None."""
    try:
        if kind == "int":
            value: float = int(text, 16) if text.lower().startswith("0x") else int(text)
        else:
            value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def _check_value(name: str, spec: EngineOption, value: str) -> str | None:
    """The problem with ``value`` for option ``name`` (None when it is fine)."""
    text = str(value).strip()
    if spec.kind in ("bool", "enum"):
        if text.lower() not in (c.lower() for c in spec.choices):
            return f"engine option {name!r} has value {value!r}; allowed: {', '.join(spec.choices)}"
    elif spec.kind in ("int", "float"):
        if text.lower() in spec.choices or _number(text, spec.kind) is not None:
            return None
        what = "integer" if spec.kind == "int" else "decimal"
        words = f" or {', '.join(spec.choices)}" if spec.choices else ""
        hexa = " (decimal or 0x hexadecimal)" if spec.kind == "int" else ""
        return (
            f"engine option {name!r} has value {value!r}; allowed: a non-negative "
            f"{what}{words}{hexa}"
        )
    elif spec.kind == "regex":
        try:
            re.compile(text)
        except re.error as exc:
            return (
                f"engine option {name!r} has value {value!r}, which is not a regular "
                f"expression ({exc}); allowed: a regular expression such as 'stage.*'"
            )
    return None


def check_engine_options(options: Mapping[str, str]) -> None:
    """Raise if an option is unknown or has a value it cannot take.

    Raises
    ------
    EngineError
        Naming the option, the value found, the closest known name (for a
        misspelling) or the allowed values, and the known options.
    """
    problems: list[str] = []
    unknown = False
    by_lower = {n.lower(): n for n in ENGINE_OPTIONS}
    for name, value in options.items():
        known = ENGINE_OPTIONS.get(name)
        if known is None:
            unknown = True
            close = [by_lower[name.lower()]] if name.lower() in by_lower else []
            close = close or difflib.get_close_matches(name, list(ENGINE_OPTIONS), 1, 0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"unknown engine option {name!r} (value {value!r}){hint}")
            continue
        problem = _check_value(name, known, value)
        if problem is not None:
            problems.append(problem)
    if problems:
        listed = ""
        if unknown:
            listed = "\nknown options: " + ", ".join(sorted(ENGINE_OPTIONS))
        raise EngineError(
            "bad engine options (from the Engine's options or POPLAR_ENGINE_OPTIONS):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + listed
        )


def option(options: Mapping[str, str], name: str) -> str:
    """Value of engine option ``name``, or its default (lower-cased for bool/enum options)."""
    spec = ENGINE_OPTIONS[name]
    value = str(options.get(name, spec.default)).strip()
    return value.lower() if spec.kind in ("bool", "enum") else value
