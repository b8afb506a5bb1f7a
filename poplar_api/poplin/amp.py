"""The Poplibs 1x1 AMP partial-sum vertex ``poplin::ConvPartial1x1Out`` and its estimator.

Source
------
Formula and constants are carried over (as facts; the code is ours) from
graphcore/poplibs at commit ``7eac0f266ced5b064b3284a3cd90d491745b387c`` (2023-08-11,
SDK 3.x era, the last public snapshot):

* ``lib/poplin/PerformanceEstimation.hpp``:
  ``getConvPartial1x1SupervisorCycleEstimate``, which adds
  ``getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat`` (per-worker cost of
  one AMP pass over a worker's field elements, with and without output zeroing) into
  ``getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat`` (supervisor loops over
  conv groups, input-channel groups and output-channel groups, weight loads by
  ``getConvPartialAmpSupervisorWeightLoadCycleEstimate``), and
  ``conv1x1WorkerRetentionSavings``.
* ``lib/poplin/poplinCycleEstimators.cpp``: the ``ConvPartial1x1Out`` estimator, which
  reads the worklist (one ``(outOffset, numFieldElems - 3, inOffset)`` entry per
  worker), takes ``weightBytesPerConvUnit = convChainLength * convInputLoadElems *
  sizeof(fpType)`` and halves the coefficient load bandwidth when the template
  argument ``use128BitConvUnitLoad`` is false.
* ``lib/poplin/codelets/ConvPartial1x1Out.cpp``: the vertex, template
  ``ConvPartial1x1Out<FPType, AccumType, useLimitedVer, use128BitLoad, numConvUnits,
  convInputLoadElems, disableSR>``, its fields and the meaning of the worklist. The
  ipu2 instantiations are ``(half, half, 8|16, 4)``, ``(half, float, 8, 4)`` and
  ``(float, float, 8|16, 2)``.

The formula (half or float activations; ``W`` worker contexts; ``n_w`` field elements
(rows) of worker ``w``; ``z`` = 1 with output zeroing, 0 without)::

    common = (half activations and numConvUnits == 16) or float partials
    save   = (7, 3) if half activations and (float partials or numConvUnits == 16)
             else (0, 0)                         # worker state retention savings
    core   = 8 if float activations else 4       # worker cycles per extra row
    zpg    = 8 if float acts and 16 units else 4 if float partials else 2
    worker(n, z) - save[0], with worker(n, z) =
        float acts:   n=0: 24; n=1: 47 + (2 + zpg) z; n=2: 46 + (2 + 2 zpg) z;
                      n>=3: 46 + (2 + zpg n) z + (n - 3) core
        half, common: n=0: 20 + (1 if z else 2); n=1: 31 + (1|2); n=2: 40 + (1|2);
                      n>=3: (37 if z else 38) + (n - 3) core
        half, other:  n=0: 24; n=1: 39 + (2 + zpg) z; n=2: 40 + (2 + 2 zpg) z;
                      n>=3: 41 + (2 + zpg n) z + (n - 3) core
    inner(z) = max(max_w W worker_w, min_w W worker_w + 14)
    loads    = numConvUnits * weightBytesPerConvUnit // coeffLoadBytesPerCycle
    passes   = ceil(outChansPerGroup / numConvUnits)
    cycles = 50 + W (save[0] + save[1] (numInGroups numConvGroups - 1))
             + numConvGroups (12 + common
                 + (numInGroups - 1) (15 - common + 1
                      + numOutGroups (19 + passes (6 + loads + inner(0))))
                 + 10 + 1 + numOutGroups (19 - common + passes (7 + loads + inner(1))))

Target values (ipu2 = Mk2 and Bow): ``numConvUnits`` is a template argument (16 for
half partials from half inputs, 8 otherwise, as tessellate-ipu's
``IpuConvPartial1x1StaticArgs`` chooses them); the AMP chain length
(``getConvUnitMaxPipelineDepth``) is 4, so the input channels per group are ``4 *
convInputLoadElems`` = 16 half / 8 float (derived: the only sizes tessellate-ipu's
``make_conv_partial1x1_attributes`` accepts, and the ``convUnitPipelineDepth = 4`` of
early Poplibs' ``DeviceInfo``); ``getConvUnitCoeffLoadBytesPerCycle`` is taken as 16
(one 128-bit load per cycle, docs/sources.md "Tile memory"), 8 when
``use128BitLoad`` is false. Poplar itself is closed, so these three are grade D.

Not modelled: quarter (fp8) inputs and the ipu21 ``convInputLoadElems = 8``
instantiations, input strides other than 1, flipped output, the non-limited
version's separate cost (Poplibs estimates it as the limited one, T12902), stochastic
rounding, and more than one worklist entry per worker (Poplibs asserts it never
happens).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.types import FLOAT, HALF, UNSIGNED_INT, UNSIGNED_SHORT, Type

#: Poplibs commit the estimator is taken from.
POPLIBS_COMMIT = "7eac0f266ced5b064b3284a3cd90d491745b387c"
#: AMP chain length (``getConvUnitMaxPipelineDepth``) on ipu1/ipu2, both partials types.
AMP_CHAIN_LENGTH = 4
#: Coefficient load bytes per cycle with 128-bit loads (halved without).
AMP_COEFF_LOAD_BYTES_PER_CYCLE = 16
#: The worklist stores ``numFieldElems - 3``.
WORKLIST_NUM_ELEMS_BIAS = 3
#: ipu2 instantiations ``(fpType, accumType) -> allowed (numConvUnits, convInputLoadElems)``.
IPU2_INSTANTIATIONS: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {
    ("half", "half"): ((16, 4), (8, 4)),
    ("half", "float"): ((8, 4),),
    ("float", "float"): ((8, 2), (16, 2)),
}

_SUPERVISOR_NONLOOP = 50
_OUT_PASS_OVERHEAD = 7
_EXCESS_IN_CHAN_OVERHEAD = 1
_WORKER_TAG_CYCLES = 14


def retention_savings(
    float_activations: bool, float_partials: bool, num_conv_units: int
) -> tuple[int, int]:
    """Worker cycles saved by state retention: ``(total, per extra input-channel group)``.

    Poplibs ``conv1x1WorkerRetentionSavings``: ``(7, 3)`` for half activations with float
    partials or with 16 conv units, ``(0, 0)`` otherwise.
    """
    if not float_activations and (float_partials or num_conv_units == 16):
        return 7, 3
    return 0, 0


def _common_path(float_activations: bool, float_partials: bool, num_conv_units: int) -> bool:
    # half acts with 16 units share the code path of half acts with float partials.
    return (not float_activations and num_conv_units == 16) or float_partials


def worker_pass_cycles(
    num_elems: int,
    output_zeroing: bool,
    float_activations: bool,
    float_partials: bool,
    num_conv_units: int,
) -> int:
    """Worker (thread) cycles of one AMP pass over ``num_elems`` field elements.

    ``getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat``, one worker, retention
    savings subtracted. See the module docstring for the table.
    """
    if num_elems < 0:
        raise ValueError(
            f"num_elems={num_elems}: a worker's field elements must be >= 0; hint: the "
            f"worklist stores numFieldElems - {WORKLIST_NUM_ELEMS_BIAS}"
        )
    z = int(bool(output_zeroing))
    core = 8 if float_activations else 4
    zpg = 8 if float_activations and num_conv_units == 16 else 4 if float_partials else 2
    n = num_elems
    if float_activations:
        fixed = (24, 47 + (2 + zpg) * z, 46 + (2 + 2 * zpg) * z)
        big = 46 + (2 + zpg * n) * z
    elif _common_path(float_activations, float_partials, num_conv_units):
        tail = 1 if z else 2
        fixed = (20 + tail, 31 + tail, 40 + tail)
        big = 37 if z else 38
    else:
        fixed = (24, 39 + (2 + zpg) * z, 40 + (2 + 2 * zpg) * z)
        big = 41 + (2 + zpg * n) * z
    cycles = fixed[n] if n < 3 else big + (n - 3) * core
    return cycles - retention_savings(float_activations, float_partials, num_conv_units)[0]


def inner_loop_cycles(
    worker_elems: Sequence[int],
    num_worker_contexts: int,
    output_zeroing: bool,
    float_activations: bool,
    float_partials: bool,
    num_conv_units: int,
) -> int:
    """Tile cycles of one AMP pass of all workers: the slowest worker times ``W``, at
    least the fastest plus 14 (the tag cost Poplibs charges the least loaded worker)."""
    per = [
        num_worker_contexts
        * worker_pass_cycles(n, output_zeroing, float_activations, float_partials, num_conv_units)
        for n in worker_elems
    ]
    lo = min(per) if len(per) >= num_worker_contexts else 0
    return max(max(per, default=0), lo + _WORKER_TAG_CYCLES)


def weight_load_cycles(
    weight_bytes_per_conv_unit: int, num_conv_units: int, coeff_load_bytes_per_cycle: int
) -> int:
    """Cycles to load one weight block into the conv units (1x1: no ld64 fallback)."""
    return (num_conv_units * weight_bytes_per_conv_unit) // coeff_load_bytes_per_cycle


def conv_partial_1x1_cycles(
    worker_elems: Sequence[int],
    *,
    num_conv_groups: int = 1,
    num_in_groups: int = 1,
    num_out_groups: int = 1,
    out_chans_per_group: int,
    weight_bytes_per_conv_unit: int,
    num_conv_units: int,
    coeff_load_bytes_per_cycle: int,
    num_worker_contexts: int,
    float_activations: bool,
    float_partials: bool,
) -> int:
    """Poplibs ``getConvPartial1x1SupervisorCycleEstimate`` (half/float activations).

    Parameters
    ----------
    worker_elems
        Field elements (output rows) of each worker's single worklist entry.
    num_conv_groups, num_in_groups, num_out_groups
        Conv groups, input-channel groups and output-channel groups of the vertex.
    out_chans_per_group
        Output channels per group (one AMP pass per ``num_conv_units`` of them).
    weight_bytes_per_conv_unit
        ``convChainLength * convInputLoadElems * sizeof(fpType)`` (32 for half on ipu2).
    num_conv_units
        AMP conv units the vertex uses (template argument, 8 or 16).
    coeff_load_bytes_per_cycle
        Weight load bandwidth (16 with 128-bit loads, 8 without).
    num_worker_contexts
        Worker contexts per tile (6).
    float_activations, float_partials
        Whether inputs, and partials (accumulation/output), are FLOAT rather than HALF.

    Returns
    -------
    int
        Supervisor (tile) cycles of one vertex call.
    """
    for name, value in (
        ("num_conv_groups", num_conv_groups),
        ("num_in_groups", num_in_groups),
        ("num_out_groups", num_out_groups),
        ("out_chans_per_group", out_chans_per_group),
        ("num_conv_units", num_conv_units),
        ("coeff_load_bytes_per_cycle", coeff_load_bytes_per_cycle),
    ):
        if value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")
    args = (float_activations, float_partials, num_conv_units)
    inner_z = inner_loop_cycles(worker_elems, num_worker_contexts, True, *args)
    inner_nz = inner_loop_cycles(worker_elems, num_worker_contexts, False, *args)
    save_total, save_in = retention_savings(*args)
    common = int(_common_path(*args))
    loads = weight_load_cycles(
        weight_bytes_per_conv_unit, num_conv_units, coeff_load_bytes_per_cycle
    )
    passes = -(-out_chans_per_group // num_conv_units)
    later_in_groups = (num_in_groups - 1) * (
        15
        - common
        + _EXCESS_IN_CHAN_OVERHEAD
        + num_out_groups * (19 + passes * (6 + loads + inner_nz))
    )
    first_in_group = (
        10
        + _EXCESS_IN_CHAN_OVERHEAD
        + num_out_groups * (19 - common + passes * (_OUT_PASS_OVERHEAD + loads + inner_z))
    )
    return (
        _SUPERVISOR_NONLOOP
        + num_worker_contexts * (save_total + save_in * (num_in_groups * num_conv_groups - 1))
        + num_conv_groups * (12 + common + later_in_groups + first_in_group)
    )


# ----------------------------------------------------------------------------- worklists
def split_field_elems(num_elems: int, num_workers: int) -> list[int]:
    """Field elements per worker, split evenly, the first ``num_elems % W`` workers one more
    (the split tessellate-ipu's ``make_num_elements_per_worker`` gave the PF vertex)."""
    base, rem = divmod(num_elems, num_workers)
    return [base + (1 if w < rem else 0) for w in range(num_workers)]


def make_worklist(
    worker_elems: Sequence[int],
    in_chans_per_group: int,
    out_chans_per_group: int,
    fp_size: int,
    accum_size: int,
    limited: bool = True,
) -> np.ndarray:
    """The ``worklists`` field: ``(outOffset, numFieldElems - 3, inOffset)`` per worker.

    Offsets are in 8-byte units (the vertex divides them by ``chans * size / 8`` to get
    rows); workers take consecutive rows. Returns uint16 (limited) or uint32 values, the
    signed middle entry stored in two's complement.

    Raises
    ------
    ValueError
        A count or offset does not fit the limited version's 16-bit fields.
    """
    in_row_units = in_chans_per_group * fp_size // 8
    out_row_units = out_chans_per_group * accum_size // 8
    dtype, sdtype = (np.uint16, np.int16) if limited else (np.uint32, np.int32)
    hi = np.iinfo(dtype).max
    rows = np.concatenate(([0], np.cumsum(np.asarray(worker_elems, np.int64))))
    entries = []
    for w, n in enumerate(worker_elems):
        out_off, in_off = int(rows[w]) * out_row_units, int(rows[w]) * in_row_units
        stored = int(n) - WORKLIST_NUM_ELEMS_BIAS
        if max(out_off, in_off) > hi or stored > np.iinfo(sdtype).max:
            raise ValueError(
                f"worker {w}: {n} field elements from row {int(rows[w])} do not fit the "
                f"{'limited (16-bit)' if limited else '32-bit'} worklist (offsets "
                f"{out_off}, {in_off} > {hi}); hint: use fewer rows per vertex or "
                f"limited=False"
            )
        entries.append((out_off, stored, in_off))
    flat = np.asarray(entries, np.int64).reshape(-1)
    return flat.astype(sdtype).view(dtype) if flat.size else flat.astype(dtype)


def decode_worklist(
    values: np.ndarray, in_row_units: int, out_row_units: int, limited: bool
) -> list[tuple[int, int, int]]:
    """``(out_row, num_elems, in_row)`` per worker from raw worklist values."""
    sdtype = np.int16 if limited else np.int32
    raw = np.asarray(values).astype(np.uint16 if limited else np.uint32)
    signed = raw.view(sdtype).astype(np.int64)
    unsigned = raw.astype(np.int64)
    out = []
    for w in range(raw.size // 3):
        n = int(signed[3 * w + 1]) + WORKLIST_NUM_ELEMS_BIAS
        out_row = int(unsigned[3 * w]) // out_row_units
        out.append((out_row, n, int(unsigned[3 * w + 2]) // in_row_units))
    return out


# ------------------------------------------------------------------------------- vertex
class _ConvPartial1x1OutBase(MultiVertex):
    """``out[cg, og] (=|+=) sum_ig in[cg, ig] @ weights[cg, ig, og].T`` for each worker's rows.

    Fields (Poplibs names): ``in`` — ``numConvGroups * numInGroups`` vectors of ``[N,
    inChansPerGroup]``; ``weights`` — ``numConvGroups * numInGroups * numOutGroups``
    vectors of ``[outChansPerGroup, inChansPerGroup]`` (row ``cg * og_n * ig_n + ig *
    og_n + (og_n - 1 - og)``, the output groups reversed as in Poplibs); ``out`` —
    ``numConvGroups * numOutGroups`` vectors of ``[N, outChansPerGroup]``; ``worklists``
    — one ``(outOffset, numFieldElems - 3, inOffset)`` entry per worker. The Poplibs
    scalar fields are implied: the group counts by the list lengths, ``inChansPerGroup``
    = ``4 * convInputLoadElems``, ``outChansPerGroup`` by the weight vector size, input
    and output strides 1, no flip.

    ``getCycleEstimate`` sees field sizes only, so it assumes the even split of
    :func:`split_field_elems`; :func:`add_conv_partial_1x1_out` sets each vertex's
    estimate from its actual worklist.
    """

    fp_type: tuple[Type, ...] = (HALF,)
    accum_type: tuple[Type, ...] = (HALF,)
    limited: bool = True
    use_128bit_load: bool = True
    num_conv_units: int = 16
    conv_input_load_elems: int = 4
    disable_sr: bool = False

    @classmethod
    def in_chans_per_group(cls) -> int:
        """Input channels of one AMP pass: chain length x input load elements."""
        return AMP_CHAIN_LENGTH * cls.conv_input_load_elems

    @classmethod
    def geometry(cls, sizes: Mapping[str, Any]) -> dict[str, int]:
        """Group counts, channels per group and field elements from field sizes.

        Raises
        ------
        ValueError
            The sizes are not those of a valid vertex; the message names the field, the
            value found and what was required.
        """
        name = cls.typeName
        ins, ws, outs = (list(sizes[f]) for f in ("in", "weights", "out"))
        if not ins or not ws or not outs:
            raise ValueError(
                f"{name}: fields in/weights/out have {len(ins)}/{len(ws)}/{len(outs)} "
                f"vectors; each needs at least one"
            )
        cg_ig, cg_og, cg_ig_og = len(ins), len(outs), len(ws)
        if (cg_ig * cg_og) % cg_ig_og or cg_ig_og % cg_og or cg_ig_og % cg_ig:
            raise ValueError(
                f"{name}: {cg_ig} 'in', {cg_og} 'out' and {cg_ig_og} 'weights' vectors are "
                f"not numConvGroups*numInGroups, numConvGroups*numOutGroups and their "
                f"product over numConvGroups"
            )
        num_cg = cg_ig * cg_og // cg_ig_og
        num_ig, num_og = cg_ig // num_cg, cg_og // num_cg
        ic = cls.in_chans_per_group()
        w0 = int(ws[0])
        if any(int(w) != w0 for w in ws) or w0 % ic or w0 == 0:
            raise ValueError(
                f"{name}: field 'weights' vectors have {sorted(set(map(int, ws)))} elements; "
                f"required: all equal to outChansPerGroup x inChansPerGroup with "
                f"inChansPerGroup={ic} (AMP chain {AMP_CHAIN_LENGTH} x convInputLoadElems "
                f"{cls.conv_input_load_elems})"
            )
        oc = w0 // ic
        if oc % cls.num_conv_units:
            raise ValueError(
                f"{name}: outChansPerGroup={oc} (weights {w0} / inChansPerGroup {ic}) is not "
                f"a multiple of numConvUnits={cls.num_conv_units}; hint: pad the output "
                f"channels or use the 8-unit vertex"
            )
        in0 = int(ins[0])
        if any(int(x) != in0 for x in ins) or in0 % ic:
            raise ValueError(
                f"{name}: field 'in' vectors have {sorted(set(map(int, ins)))} elements; "
                f"required: all equal, a multiple of inChansPerGroup={ic} (N rows of {ic})"
            )
        n = in0 // ic
        if any(int(x) != n * oc for x in outs):
            raise ValueError(
                f"{name}: field 'out' vectors have {sorted(set(map(int, outs)))} elements; "
                f"required: N x outChansPerGroup = {n} x {oc} = {n * oc}"
            )
        return {
            "num_conv_groups": num_cg,
            "num_in_groups": num_ig,
            "num_out_groups": num_og,
            "in_chans_per_group": ic,
            "out_chans_per_group": oc,
            "num_field_elems": n,
        }

    @classmethod
    def cycles_for_worklist(
        cls, sizes: Mapping[str, Any], worker_elems: Sequence[int], target: Any
    ) -> int:
        """The Poplibs estimate of this vertex for given per-worker field elements."""
        g = cls.geometry(sizes)
        workers = target.getNumWorkerContexts()
        if len(worker_elems) != workers:
            raise ValueError(
                f"{cls.typeName}: worklist has {len(worker_elems)} entries; required one "
                f"per worker context ({workers})"
            )
        fp = cls.fp_type[0]
        coeff = AMP_COEFF_LOAD_BYTES_PER_CYCLE // (1 if cls.use_128bit_load else 2)
        return conv_partial_1x1_cycles(
            worker_elems,
            num_conv_groups=g["num_conv_groups"],
            num_in_groups=g["num_in_groups"],
            num_out_groups=g["num_out_groups"],
            out_chans_per_group=g["out_chans_per_group"],
            weight_bytes_per_conv_unit=g["in_chans_per_group"] * fp.size,
            num_conv_units=cls.num_conv_units,
            coeff_load_bytes_per_cycle=coeff,
            num_worker_contexts=workers,
            float_activations=fp == FLOAT,
            float_partials=cls.accum_type[0] == FLOAT,
        )

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        g = cls.geometry(sizes)
        workers = target.getNumWorkerContexts()
        if int(sizes["worklists"]) != 3 * workers:
            raise ValueError(
                f"{cls.typeName}: field 'worklists' has {sizes['worklists']} elements; "
                f"required 3 per worker context = {3 * workers}"
            )
        split = split_field_elems(g["num_field_elems"], workers)
        return cls.cycles_for_worklist(sizes, split, target)

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        a, b, c, wl = (batches[f] for f in ("in", "weights", "out", "worklists"))
        fp_size, acc_size = cls.fp_type[0].size, cls.accum_type[0].size
        ok = np.ones(num_vertices, dtype=bool)
        for v in range(num_vertices):
            ins = _inner(a, v)
            ws = _inner(b, v)
            outs = _inner(c, v)
            sizes = {"in": [x.size for x in ins], "weights": [x.size for x in ws],
                     "out": [x.size for x in outs]}  # fmt: skip
            try:
                g = cls.geometry(sizes)
            except ValueError:
                ok[v] = False
                continue
            ic, oc, n = g["in_chans_per_group"], g["out_chans_per_group"], g["num_field_elems"]
            num_ig, num_og = g["num_in_groups"], g["num_out_groups"]
            entries = decode_worklist(
                wl.data[wl.offsets[v] : wl.offsets[v + 1]],
                ic * fp_size // 8,
                oc * acc_size // 8,
                cls.limited,
            )
            if any(k < 0 or r_in + k > n or r_out + k > n for r_out, k, r_in in entries):
                ok[v] = False
                continue
            for cg in range(g["num_conv_groups"]):
                for og in range(num_og):
                    acc = np.zeros((n, oc), np.float32)
                    written = np.zeros(n, bool)
                    for ig in range(num_ig):
                        x = ins[cg * num_ig + ig].reshape(n, ic).astype(np.float32)
                        w_row = cg * num_og * num_ig + ig * num_og + (num_og - 1 - og)
                        w = ws[w_row].reshape(oc, ic).astype(np.float32)
                        for r_out, k, r_in in entries:
                            acc[r_out : r_out + k] += x[r_in : r_in + k] @ w.T
                            written[r_out : r_out + k] = True
                    dst = outs[cg * num_og + og].reshape(n, oc)
                    dst[written] = acc[written]
        return ok


def _inner(batch: FieldBatch, v: int) -> list[np.ndarray]:
    """Views of vertex ``v``'s inner vectors of a VectorList batch (writable)."""
    assert batch.inner_offsets is not None
    lo, hi = int(batch.offsets[v]), int(batch.offsets[v + 1])
    bounds = batch.inner_offsets[lo : hi + 1].tolist()
    return [batch.data[s:e] for s, e in itertools.pairwise(bounds)]


def _bool(b: bool) -> str:
    return "true" if b else "false"


@functools.cache
def conv_partial_1x1_out_vertex(
    fp_type: Type = HALF,
    accum_type: Type = HALF,
    limited: bool = True,
    use_128bit_load: bool = True,
    num_conv_units: int | None = None,
    conv_input_load_elems: int | None = None,
    disable_sr: bool = False,
) -> type:
    """The ``poplin::ConvPartial1x1Out<...>`` class for an ipu2 instantiation.

    Parameters
    ----------
    fp_type, accum_type
        Input and partials (output) types: (HALF, HALF), (HALF, FLOAT) or (FLOAT, FLOAT).
    limited, use_128bit_load, disable_sr
        Template flags (16-bit worklists; 128-bit weight loads; stochastic rounding off).
    num_conv_units, conv_input_load_elems
        Default: the first ipu2 instantiation of the types (16 units for half partials
        from half inputs, else 8; 4 elements for half, 2 for float).

    Raises
    ------
    ValueError
        Poplibs has no ipu2 instantiation with these arguments (the message lists them).
    """
    key = (fp_type.name, accum_type.name)
    allowed = IPU2_INSTANTIATIONS.get(key)
    if allowed is None:
        raise ValueError(
            f"ConvPartial1x1Out: fp_type={fp_type.name}, accum_type={accum_type.name} has no "
            f"ipu2 instantiation; required one of {sorted(IPU2_INSTANTIATIONS)}"
        )
    units = allowed[0][0] if num_conv_units is None else num_conv_units
    elems = allowed[0][1] if conv_input_load_elems is None else conv_input_load_elems
    if (units, elems) not in allowed:
        raise ValueError(
            f"ConvPartial1x1Out<{key[0]},{key[1]}>: num_conv_units={units}, "
            f"conv_input_load_elems={elems} is not instantiated for ipu2; required one of "
            f"{list(allowed)} (numConvUnits, convInputLoadElems)"
        )
    type_name = (
        f"poplin::ConvPartial1x1Out<{fp_type.name},{accum_type.name},{_bool(limited)},"
        f"{_bool(use_128bit_load)},{units},{elems},{_bool(disable_sr)}>"
    )
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{type_name}: AMP 1x1 partial sums (see _ConvPartial1x1OutBase).",
        "typeName": type_name,
        "fp_type": (fp_type,),
        "accum_type": (accum_type,),
        "limited": limited,
        "use_128bit_load": use_128bit_load,
        "num_conv_units": units,
        "conv_input_load_elems": elems,
        "disable_sr": disable_sr,
        "in_": Input(VectorList(fp_type)),
        "weights": Input(VectorList(fp_type)),
        "out": Output(VectorList(accum_type)),
        "worklists": Input(Vector(UNSIGNED_SHORT if limited else UNSIGNED_INT)),
    }
    cls_name = f"ConvPartial1x1Out_{fp_type.constant}_{accum_type.constant}_{units}_{elems}"
    return type(cls_name, (_ConvPartial1x1OutBase,), attrs)


def add_conv_partial_1x1_out(
    graph: Any,
    cs: Any,
    tile: int,
    lhs: Any,
    rhs: Any,
    out: Any,
    *,
    accum_type: Type | None = None,
    worker_elems: Sequence[int] | None = None,
    use_128bit_load: bool = True,
    name: str = "worklists",
) -> Any:
    """Add one ``ConvPartial1x1Out`` vertex computing ``out = lhs @ rhs.T`` on ``tile``.

    Parameters
    ----------
    graph, cs, tile
        Graph, compute set, and the tile of the vertex and of its worklist constant.
    lhs, rhs, out
        Tensors ``[N, inChans]``, ``[outChans, inChans]`` (rhs contracted on its second
        axis, as PF's ``dot_general``) and ``[N, outChans]``; one conv group, one input
        and one output channel group.
    accum_type
        Partials type; default the output's element type.
    worker_elems
        Rows per worker; default :func:`split_field_elems`.

    Returns
    -------
    VertexRef
        The vertex; its perf estimate is the Poplibs formula for its worklist.

    Raises
    ------
    ValueError
        Shapes, types or worklist do not fit the vertex (message names the argument).
    """
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    fp = lhs.elementType()
    acc = accum_type or out.elementType()
    cls = conv_partial_1x1_out_vertex(fp, acc, use_128bit_load=use_128bit_load)
    ic = cls.in_chans_per_group()
    if len(lhs.shape()) != 2 or lhs.shape()[1] != ic:
        raise ValueError(
            f"add_conv_partial_1x1_out: lhs shape {lhs.shape()}; required [N, {ic}] "
            f"(inChansPerGroup of {cls.typeName}); hint: split the contraction into "
            f"chunks of {ic} input channels"
        )
    n = lhs.shape()[0]
    if len(rhs.shape()) != 2 or rhs.shape()[1] != ic or rhs.shape()[0] % cls.num_conv_units:
        raise ValueError(
            f"add_conv_partial_1x1_out: rhs shape {rhs.shape()}; required [outChans, {ic}] "
            f"with outChans a multiple of numConvUnits={cls.num_conv_units}"
        )
    oc = rhs.shape()[0]
    if list(out.shape()) != [n, oc]:
        raise ValueError(f"add_conv_partial_1x1_out: out shape {out.shape()}; required [{n}, {oc}]")
    split = list(split_field_elems(n, workers) if worker_elems is None else worker_elems)
    if len(split) != workers or any(k < 0 for k in split) or sum(split) != n:
        raise ValueError(
            f"add_conv_partial_1x1_out: worker_elems={split}; required {workers} counts >= 0 "
            f"summing to N={n}"
        )
    values = make_worklist(split, ic, oc, fp.size, acc.size, cls.limited)
    wtype = UNSIGNED_SHORT if cls.limited else UNSIGNED_INT
    wl = graph.addConstant(wtype, [values.size], values, name)
    graph.setTileMapping(wl, tile)
    graph.addCodelets(cls)
    v = graph.addVertex(
        cs,
        cls.typeName,
        {
            "in": [lhs.flatten()],
            "weights": [rhs.flatten()],
            "out": [out.flatten()],
            "worklists": wl,
        },
    )
    graph.setTileMapping(v, tile)
    sizes = {"in": [n * ic], "weights": [oc * ic], "out": [n * oc], "worklists": values.size}
    graph.setPerfEstimate(v, cls.cycles_for_worklist(sizes, split, target))
    return v


__all__ = [
    "AMP_CHAIN_LENGTH",
    "AMP_COEFF_LOAD_BYTES_PER_CYCLE",
    "IPU2_INSTANTIATIONS",
    "POPLIBS_COMMIT",
    "add_conv_partial_1x1_out",
    "conv_partial_1x1_cycles",
    "conv_partial_1x1_out_vertex",
    "decode_worklist",
    "inner_loop_cycles",
    "make_worklist",
    "retention_savings",
    "split_field_elems",
    "weight_load_cycles",
    "worker_pass_cycles",
]
