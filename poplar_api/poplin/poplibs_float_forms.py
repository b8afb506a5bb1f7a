"""The convolutions Poplibs' planner costs for a FLOAT 2-D convolution's forms.

graphcore/poplibs ``7eac0f26``'s ``createPlan`` (``lib/poplin/ConvPlan.cpp``) costs a
convolution after its transforms: ``canonicalize`` (:func:`canonical`), the field
dimensions ``getExpandDimsCandidates`` offers expanded (:data:`FORMS`, :func:`_expands`)
and ``calculateFlattenedParams``' flattening (:func:`form_params`), or its operands
swapped with dimensions flattened into the output channels (:func:`swapped_params`, a
convolution no cheaper than that form). :mod:`.poplibs_float_conv2d` costs them.
Derived from the source, not a port.
"""

from __future__ import annotations

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.types import FLOAT

__all__ = ["FORMS", "canonical", "form_params", "swapped_params"]

#: The unswapped forms, by the field dimensions ``expandDims`` expands.
FORMS: dict[str, tuple[int, ...]] = {"plain": (), "expanded 0": (0,), "expanded 1": (1,),
                                      "expanded both": (0, 1)}  # fmt: skip


def canonical(params: ConvParams) -> ConvParams:
    """``params`` as ``ConvParams::canonicalize`` (graphcore/poplibs 7eac0f26,
    ``lib/poplin/ConvParams.cpp``) leaves it in the one step that applies to a padded input
    and a truncated output ("Remove padding if the input is padded and the output is
    truncated"): per field dimension and side, ``min(padding, truncation, untransformed
    output - 1)`` taken off both (``getGradientParams`` returns its parameters so
    canonicalized, ``ConvUtil.cpp``). Unflipped inputs only; other parameters unchanged."""
    it, ot = params.inputTransform, params.outputTransform
    if not any(ot.truncationLower) and not any(ot.truncationUpper):
        return params
    if any(it.flip):
        raise ValueError(f"canonical: {params} has a flipped input (hint: not covered)")
    lower, upper = list(it.paddingLower), list(it.paddingUpper)
    t_lower, t_upper = list(ot.truncationLower), list(ot.truncationUpper)
    for d in range(params.getNumFieldDims()):
        full = params.getOutputSize(d) + t_lower[d] + t_upper[d]  # (untransformed output)
        e = min(lower[d], t_lower[d], full - 1)
        lower[d], t_lower[d] = lower[d] - e, t_lower[d] - e
        e = min(upper[d], t_upper[d], full - 1)
        upper[d], t_upper[d] = upper[d] - e, t_upper[d] - e
    return ConvParams(
        params.inputType, params.batchSize, list(params.inputFieldShape),
        list(params.kernelShape), params.inputChannelsPerConvGroup,
        params.outputChannelsPerConvGroup, params.numConvGroups,
        {"paddingLower": lower, "paddingUpper": upper, "dilation": list(it.dilation),
         "truncationLower": list(it.truncationLower),
         "truncationUpper": list(it.truncationUpper)},
        params.kernelTransform,
        {"truncationLower": t_lower, "truncationUpper": t_upper,
         "stride": list(ot.stride), "paddingLower": list(ot.paddingLower),
         "paddingUpper": list(ot.paddingUpper)},
        outputType=params.outputType,
    )  # fmt: skip


def form_params(params: ConvParams, dims: tuple[int, ...]) -> ConvParams:
    """The convolution ``createPlan`` costs for ``params`` with the field dimensions
    ``dims`` expanded (``expandDim``: the dimension's kernel joins the input channels, its
    input becomes its output, no padding) and then flattened (``calculateFlattenedParams``:
    the batch into the outermost dimension of a one-wide unpadded kernel, and with both
    expanded the outer dimension into the inner one). A flipped kernel stays flipped
    (an expanded dimension's flip moves into the order of the channels)."""
    out = [int(x) for x in params.getOutputFieldShape()]
    field = [int(x) for x in params.inputFieldShape]
    kernel = [int(x) for x in params.kernelShape]
    lower = [int(x) for x in params.inputTransform.paddingLower]
    upper = [int(x) for x in params.inputTransform.paddingUpper]
    flip = [bool(x) for x in params.kernelTransform.flip]
    ci, batch = params.inputChannelsPerConvGroup, params.batchSize
    for d in dims:
        field[d], ci, kernel[d], lower[d], upper[d], flip[d] = (
            out[d],
            ci * kernel[d],
            1,
            0,
            0,
            False,
        )
    if set(dims) == {0, 1}:
        field, batch = [1, batch * field[0] * field[1]], 1
    elif dims:
        field[dims[0]] *= batch
        batch = 1
    return ConvParams(FLOAT, batch, field, kernel, ci, params.outputChannelsPerConvGroup,
                      paddingLower=lower, paddingUpper=upper,
                      kernelTransform={"flip": flip}, outputType=FLOAT)  # fmt: skip


def _expands(params: ConvParams, d: int) -> bool:
    """``getExpandDimsCandidates``' test of field dimension ``d``: its expansion changes the
    convolution (a kernel wider than one or padding) and its input is no smaller than
    its kernel."""
    it = params.inputTransform
    changes = int(params.kernelShape[d]) != 1 or it.paddingLower[d] or it.paddingUpper[d]
    return bool(changes) and int(params.inputFieldShape[d]) >= int(params.kernelShape[d])


def swapped_params(params: ConvParams, flat: tuple[int, ...]) -> ConvParams:
    """A convolution no cheaper than ``createPlan``'s swapped form of ``params`` with the
    field dimensions ``flat`` flattened into the output channels (``swapOperands``: batch
    and output channels exchanged, the input field the kernel; ``calculateFlattenedParams``
    with ``outChanFlattenDims``: a flattened dimension's outputs join the output channels,
    its kernel the input channels, then the batch flattens into the innermost dimension of
    a one-wide kernel): the same output field, batch, channels and kernel (the input's
    extent, its padding left out) with no padding, so that :func:`form_costs` with
    ``floor`` bounds it."""
    out = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.inputFieldShape]
    ci, co, batch = (
        params.inputChannelsPerConvGroup,
        params.batchSize,
        params.outputChannelsPerConvGroup,
    )
    for d in flat:
        co, ci = co * out[d], ci * int(params.kernelShape[d])
        out[d], kernel[d] = 1, 1
    flattenable = [d for d in range(2) if kernel[d] == 1]
    if flattenable:
        inner = flattenable[-1]
        for d in flattenable[:-1]:
            out[inner], out[d] = out[inner] * out[d], 1
        out[inner], batch = out[inner] * batch, 1
    field = [o + k - 1 for o, k in zip(out, kernel, strict=True)]
    return ConvParams(FLOAT, batch, field, kernel, ci, co, outputType=FLOAT)
