"""``reportPlanInfo``'s text: a convolution plan as Poplibs prints it.

Poplibs' ``poplin::reportPlanInfo`` (``lib/poplin/Convolution.cpp`` at
graphcore/poplibs ``7eac0f26``) writes the estimated cost (cycles and temporary
bytes), then the plan (``operator<<(std::ostream &, const Plan &)`` in
``ConvPlan.cpp``): per level of the hierarchy its transform, its partition and its
types, then the vertex's channel grouping, method and tile count. ipusim's plans have
two levels: level 0 splits the convolution over the IPU's tiles (serially over output
or input channels, then in parallel), level 1 is the tile, whose vertex computes the block.
The phases of the estimate are listed too (exchange, partial sums, reduction or cast).
A matMul product planned with swapped operands (``plan.swapped``) is printed with the
convolution it runs, ``B^T A^T``, and ``swapOperands true`` at level 0; a pass of a
fully-connected layer's joint plan with ``isJointPlan true``.
"""

from __future__ import annotations

import numpy as np

from poplar_api.poplin.conv_kernel_split import kernel_ranges
from poplar_api.poplin.conv_params import ConvParams, expand_dims
from poplar_api.poplin.conv_planner import ConvPlan

__all__ = ["format_plan", "plan_summary", "vertex_name"]

#: Poplibs codelet of each planner method.
_VERTICES = {
    "AMP": "poplin::ConvPartialnx1",
    "HMAC": "poplin::ConvPartialHorizontalMac",
    "VMAC": "poplin::ConvPartialVerticalMac",
    "OUTER_PRODUCT": "poplin::OuterProduct",
}


def vertex_name(plan: ConvPlan, params: ConvParams) -> str:
    """The partial-sum vertex of ``plan``: ``ConvPartial1x1Out`` for an AMP plan whose
    (possibly expanded) kernel is one position on a tile without striding, else by
    method."""
    if plan.method == "AMP":  # (a tile's kernel: its part's rows of a kernel split)
        one = int(np.prod(_kernel_block(plan, params))) == 1
        if one and all(int(s) == 1 for s in params.outputTransform.stride):
            return "poplin::ConvPartial1x1Out"
    return _VERTICES.get(plan.method, plan.method)


def format_plan(params: ConvParams, plan: ConvPlan, release: str | None = None) -> str:
    """The text :func:`~poplar_api.poplin.reportPlanInfo` writes for ``plan``, planned as
    Poplibs ``release`` plans (the graph's ``software.poplibs_release``; not printed when
    None). The plan's last lines: the channels of every serial pass but the last when a
    split pads its last pass (``serialChansPerPass``, 0 otherwise), whether the inputs
    are broadcast before the loop (Poplibs' ``broadcastInputBeforeLoop``), and the
    release (``poplibsRelease``)."""
    nd = params.getNumFieldDims()
    parts = plan.parts
    out_type, partials = params.outputType.name.lower(), plan.partials_type.name.lower()
    reduced = parts[-1] * plan.kernel_split > 1 or plan.partials_type != params.outputType
    kernel = [plan.kernel_split, *[1] * (nd - 1)]
    # (a kernel-split plan's block gives its kernel rows)
    kernel_block = f"kernel {_kernel_block(plan, params)}, " if plan.kernel_split > 1 else ""
    cost = plan.cost
    serial = plan.serial > 1 or plan.in_serial > 1
    dims = range(nd) if plan.expanded_dims is None else plan.expanded_dims
    expanded = ", ".join(map(str, dims)) if plan.expanded else ""
    lines = [
        f"  Estimated cost {{cycles {cost.get('total', 0)}, temporary bytes {plan.memory_bytes}}}",
        f"  Estimated cycles by phase {{exchange {cost.get('exchange', 0)}, partial sums "
        f"{cost.get('compute', 0)}, {'reduction' if parts[-1] * plan.kernel_split > 1 else 'cast'} "
        f"{cost.get('reduce', 0)}"
        + (
            f", serial slices, updates and sums {cost.get('serial_copy', 0)}}} for "
            f"{plan.serial * plan.in_serial} serial passes"
            if serial
            else "}"
        ),
        "",
        "Plan:",
        "transform #0",
        f"        swapOperands             {'true' if plan.swapped else 'false'}",
        f"        expandDims               {{{expanded}}}",
        "        outChanFlattenDims       {}",
        *(  # (Poplibs prints flattenDims always; here only when a partial expansion has it)
            [f"        flattenDims              {{{', '.join(map(str, plan.flatten_dims))}}}"]
            if plan.flatten_dims
            else []
        ),
        "",
        "partition #0",
        f"        fieldSplit               {{{', '.join(str(p) for p in parts[2 : 2 + nd])}}}",
        f"        batchSplit               {parts[1]}",
        f"        outChanSplit.serial      {plan.serial}",
        f"        outChanSplit.parallel    {parts[-2]}",
        f"        kernelSplit              {{{', '.join(str(k) for k in kernel)}}}",
        f"        inChanSplit.serial       {plan.in_serial}",
        f"        inChanSplit.parallel     {parts[-1]}",
        f"        convGroupSplit           {parts[0]}",
        "",
        "types #0",
        f"        partialType              {partials}",
        f"        resultType               {out_type}",
        "",
        "transform #1",
        "        swapOperands             false",
        "        expandDims               {}",
        "",
        "types #1",
        f"        partialType              {partials}",
        f"        resultType               {partials if reduced else out_type}",
        "",
        f"        tile block               {{G {plan.blocks[0]}, B {plan.blocks[1]}, field "
        f"{list(plan.blocks[2 : 2 + nd])}, {kernel_block}Co {plan.blocks[-2]}, "
        f"Ci {plan.blocks[-1]}}}",
        f"        convGroupsPerGroup       {plan.conv_groups_per_group}",
        f"        inChansPerGroup          {plan.in_chans_per_group}",
        f"        partialChansPerGroup     {plan.out_chans_per_group}",
        f"        method                   {plan.method}",
        f"        isJointPlan              {'true' if plan.joint else 'false'}",
        f"        vertex                   {vertex_name(plan, params)}",
        f"        totalTiles               {plan.num_tiles_used}",
        f"        serialChansPerPass       {plan.serial_chans}",
        f"        broadcastInputBeforeLoop {'true' if plan.broadcast else 'false'}",
    ]
    if release is not None:
        lines.append(f"        poplibsRelease           {release}")
    return "\n".join(lines) + "\n"


def _kernel_block(plan: ConvPlan, params: ConvParams) -> list[int]:
    """The kernel of the largest tile block: its part's rows of the outer dimension
    (Poplibs' ``getParallelSplitBegin``), the whole of every other (1 when expanded)."""
    kernel = (expand_dims(params, plan.expanded_dims) if plan.expanded else params).kernelShape
    rows = max(b - a for a, b in kernel_ranges(kernel[0], plan.kernel_split))
    return [rows, *[int(k) for k in kernel[1:]]]


def _short_vertex(plan: ConvPlan, params: ConvParams) -> str:
    name = vertex_name(plan, params).split("::")[-1]
    return {"ConvPartial1x1Out": "AMP 1x1", "ConvPartialnx1": "AMP nx1"}.get(name, plan.method)


def plan_summary(plan: ConvPlan, params: ConvParams, limit: float | None = None) -> str:
    """One line of ``plan`` as docs/planner.md's tables give it.

    The vertex (``AMP 1x1``, ``AMP nx1``, ``HMAC``, ``VMAC``, ``OUTER_PRODUCT``), the transforms
    (``expanded``, ``flattened``, ``swapped``; ``joint`` for a pass of a joint plan), the
    serial passes, then the parallel split of the convolution the plan runs (``params``:
    for a swapped matMul, ``B^T A^T``; for a flattened plan, the flattened convolution)
    as parts of each dimension (groups and batch only when the
    convolution has more than one, field dimensions joined by a dot) with the blocks of
    one tile, the tiles used and the temporary bytes of the largest tile (``of limit``
    when given). A serial split whose last pass is padded gives the channels of the
    others.
    """
    sep = " \N{MULTIPLICATION SIGN} "
    nd = params.getNumFieldDims()
    names = ["G", "B", "field", "Co", "Ci"]
    keep = [params.numConvGroups > 1, params.batchSize > 1, True, True, True]
    groups = [[0], [1], list(range(2, 2 + nd)), [2 + nd], [3 + nd]]
    parts, blocks = [], []
    for name, on, dims in zip(names, keep, groups, strict=True):
        if name == "Co" and plan.kernel_split > 1:  # (the kernel rows' parts and rows)
            parts.append(f"kernel {plan.kernel_split}")
            blocks.append(str(_kernel_block(plan, params)[0]))
        if on:
            parts.append(f"{name} " + "\N{MIDDLE DOT}".join(str(plan.parts[d]) for d in dims))
            blocks.append("\N{MIDDLE DOT}".join(str(plan.blocks[d]) for d in dims))
    head = ", ".join(
        [_short_vertex(plan, params)]
        + (["expanded"] if plan.expanded else [])
        + (["flattened"] if plan.flattened else [])
        + (["swapped"] if plan.swapped else [])
        + (["joint"] if plan.joint else [])
    )
    split = f"{sep.join(parts)} (blocks {sep.join(blocks)})"
    # a split whose last pass is padded: the channels of every pass but the last
    padded = f" ({plan.serial_chans} channels, the last padded)" if plan.serial_chans else ""
    if plan.serial > 1:
        split = f"{plan.serial} serial passes{padded} of {split}"
        if plan.broadcast:
            split += ", inputs broadcast before the loop"
    if plan.in_serial > 1:
        split = f"{plan.in_serial} input-channel serial passes{padded} of {split}"
    memory = f"{plan.memory_bytes:,} B" + (f" of {round(limit):,}" if limit is not None else "")
    return f"{head}, {split}, {plan.num_tiles_used} tiles, {memory}"
