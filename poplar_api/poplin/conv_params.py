"""Convolution parameters as Poplibs defines them, and the geometry they imply.

:class:`ConvParams` keeps Poplibs' fields (``include/poplin/ConvParams.hpp`` at
graphcore/poplibs ``7eac0f26``): batch size, input field shape, kernel shape, input and
output channels per conv group, the number of conv groups, and three transforms. The
convolution they describe is, per spatial dimension:

1. the input is truncated (``truncationLower/Upper``), dilated (``dilation - 1`` zeros
   between elements), zero-padded (``paddingLower/Upper``) and optionally flipped;
2. the kernel is transformed the same way by ``kernelTransform``;
3. the transformed kernel is slid over the transformed input without padding,
   giving ``transformedInput - transformedKernel + 1`` positions (a correlation: the
   kernel is not reversed unless ``flip`` says so);
4. the output is truncated, sub-sampled by ``stride`` and zero-padded by
   ``outputTransform``.

Tensor layouts are Poplar's: activations ``[batch, convGroups * channels, *field]``,
weights ``[convGroups, outChans, inChans, *kernel]``.

:func:`dim_maps` turns the transforms into, for each output position and each original
kernel position, the original input position it reads (or -1 when it reads a padding
or dilation zero): everything the lowering needs. :func:`getGradientParams` and
:func:`getWeightUpdateParams` derive the backward-data and weight-update convolutions
from the forward parameters by the identities in their docstrings (derived here; Poplibs
computes the same passes but its code is not followed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.types import FLOAT, HALF, Type

__all__ = [
    "ConvParams",
    "InputTransform",
    "OutputTransform",
    "dim_maps",
    "getGradientParams",
    "getWeightUpdateParams",
]

#: Element types a convolution takes.
CONV_TYPES = (FLOAT, HALF)


def _ints(values: Any, n: int, default: int, what: str, *, minimum: int | None = 0) -> tuple:
    if values is None:
        return (default,) * n
    if isinstance(values, int | np.integer) and not isinstance(values, bool):
        values = [int(values)] * n
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise GraphError(f"ConvParams: {what}={values!r} must be a list of ints") from None
    if len(out) != n:
        raise GraphError(
            f"ConvParams: {what}={list(out)} has {len(out)} entries; required one per field "
            f"dimension ({n}); hint: a 2-D convolution takes [height, width]"
        )
    if minimum is not None and any(v < minimum for v in out):
        raise GraphError(f"ConvParams: {what}={list(out)}; every entry must be >= {minimum}")
    return out


#: The field names of each transform class, in order (``dataclasses.fields`` walks the
#: class's fields at every call).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The names of the dataclass ``cls``'s fields, in order."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _as_dict(value: Any) -> dict[str, Any]:
    """The fields of the transform ``value`` as a new dict: ``dataclasses.asdict`` without
    its deep copy (a transform's fields are tuples of ints, shared as they are)."""
    return {k: getattr(value, k) for k in _field_names(type(value))}


def _made(value: Any, n: int, minimums: tuple[int | None, ...]) -> bool:
    """Whether the transform ``value`` is one ``make`` gives back unchanged for ``n``
    dimensions: each field named by ``minimums`` ``n`` ints, each at least its minimum
    (None: any), and an ``InputTransform``'s ``flip`` ``n`` bools. Such a transform is
    taken as it is instead of being taken apart and made again."""
    names = _field_names(type(value))
    for k, lo in zip(names, minimums, strict=False):
        v = getattr(value, k)
        if type(v) is not tuple or len(v) != n or any(type(x) is not int for x in v):
            return False
        if lo is not None and min(v) < lo:
            return False
    if len(names) > len(minimums):  # (flip)
        v = getattr(value, names[-1])
        if type(v) is not tuple or len(v) != n or any(type(x) is not bool for x in v):
            return False
    return True


def _transform_fields(cls: type, value: Any, what: str) -> dict[str, Any]:
    """``value`` (None, a ``cls`` instance or a dict) as a dict of ``cls``'s fields.

    Raises
    ------
    GraphError
        ``value`` names a field ``cls`` does not have; the message lists the known ones.
    """
    if isinstance(value, cls):
        value = _as_dict(value)
    value = dict(value or {})
    known = list(_field_names(cls))
    unknown = set(value) - set(known)
    if unknown:
        raise GraphError(f"ConvParams: {what} has unknown fields {sorted(unknown)}; known: {known}")
    return value


@dataclass(frozen=True)
class InputTransform:
    """Truncation, dilation, padding and flip of the input or the kernel (per dimension).

    Padding may be negative inside ipusim (it then drops transformed positions); the
    public constructors reject it, as Poplibs' unsigned fields do.
    """

    truncationLower: tuple[int, ...] = ()
    truncationUpper: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    paddingLower: tuple[int, ...] = ()
    paddingUpper: tuple[int, ...] = ()
    flip: tuple[bool, ...] = ()

    @classmethod
    def make(cls, n: int, what: str, value: Any = None, *, signed: bool = False) -> InputTransform:
        """An n-dimensional transform from ``value`` (None, an InputTransform or a dict)."""
        pad_min = None if signed else 0
        if type(value) is cls and _made(value, n, (0, 0, 1, pad_min, pad_min)):
            return value
        value = _transform_fields(cls, value, what)
        flips = value.get("flip")
        flip = (False,) * n if flips is None or flips == () else tuple(bool(f) for f in flips)
        if len(flip) != n:
            raise GraphError(f"ConvParams: {what}.flip={list(flip)} needs {n} entries")
        dil = _ints(value.get("dilation") or None, n, 1, f"{what}.dilation", minimum=1)
        return cls(
            _ints(value.get("truncationLower") or None, n, 0, f"{what}.truncationLower"),
            _ints(value.get("truncationUpper") or None, n, 0, f"{what}.truncationUpper"),
            dil,
            _ints(value.get("paddingLower") or None, n, 0, f"{what}.paddingLower", minimum=pad_min),
            _ints(value.get("paddingUpper") or None, n, 0, f"{what}.paddingUpper", minimum=pad_min),
            flip,
        )

    def transformed_size(self, size: int, d: int) -> int:
        """Size of dimension ``d`` after truncation, dilation and padding."""
        kept = size - self.truncationLower[d] - self.truncationUpper[d]
        dilated = 0 if kept <= 0 else (kept - 1) * self.dilation[d] + 1
        return dilated + self.paddingLower[d] + self.paddingUpper[d]

    def positions(self, size: int, d: int) -> np.ndarray:
        """Transformed position of each original index of dimension ``d`` (-1: truncated)."""
        idx = np.arange(size, dtype=np.int64)
        lo, hi = self.truncationLower[d], size - self.truncationUpper[d]
        pos = self.paddingLower[d] + (idx - lo) * self.dilation[d]
        if self.flip[d]:
            pos = self.transformed_size(size, d) - 1 - pos
        out = np.where((idx >= lo) & (idx < hi), pos, -1)
        return out

    def inverse(self, size: int, d: int) -> np.ndarray:
        """Original index at each transformed position of dimension ``d`` (-1: a zero)."""
        t = max(self.transformed_size(size, d), 0)
        inv = np.full(t, -1, np.int64)
        pos = self.positions(size, d)
        ok = (pos >= 0) & (pos < t)
        inv[pos[ok]] = np.flatnonzero(ok)
        return inv


@dataclass(frozen=True)
class OutputTransform:
    """Truncation, striding and padding of the output (per dimension)."""

    truncationLower: tuple[int, ...] = ()
    truncationUpper: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    paddingLower: tuple[int, ...] = ()
    paddingUpper: tuple[int, ...] = ()

    @classmethod
    def make(cls, n: int, value: Any = None) -> OutputTransform:
        """An n-dimensional output transform from None, an OutputTransform or a dict."""
        w = "outputTransform"
        if type(value) is cls and _made(value, n, (0, 0, 1, 0, 0)):
            return value
        value = _transform_fields(cls, value, w)
        return cls(
            _ints(value.get("truncationLower") or None, n, 0, f"{w}.truncationLower"),
            _ints(value.get("truncationUpper") or None, n, 0, f"{w}.truncationUpper"),
            _ints(value.get("stride") or None, n, 1, f"{w}.stride", minimum=1),
            _ints(value.get("paddingLower") or None, n, 0, f"{w}.paddingLower"),
            _ints(value.get("paddingUpper") or None, n, 0, f"{w}.paddingUpper"),
        )


@dataclass(frozen=True)
class ConvParams:
    """A (grouped, multi-dimensional) convolution, as Poplibs' ``poplin::ConvParams``.

    Parameters
    ----------
    dataType
        Input (and, unless ``outputType`` is given, output) element type: FLOAT or HALF.
    batchSize, inputFieldShape, kernelShape
        ``B``, the input's spatial shape and the kernel's spatial shape (same rank).
    inputChannelsPerConvGroup, outputChannelsPerConvGroup, numConvGroups
        ``Ci``, ``Co`` and ``G``: activations carry ``G * Ci`` channels in, ``G * Co`` out.
    inputTransform, kernelTransform, outputTransform
        :class:`InputTransform` / :class:`OutputTransform`, or dicts of their fields;
        omitted fields take the identity.
    outputType
        Output element type (default ``dataType``).

    The shortcuts ``stride``, ``paddingLower``, ``paddingUpper``, ``dilation`` (the
    kernel's) and ``inputDilation`` set the usual fields of the transforms.
    """

    inputType: Type
    outputType: Type
    batchSize: int
    inputFieldShape: tuple[int, ...]
    kernelShape: tuple[int, ...]
    inputChannelsPerConvGroup: int
    outputChannelsPerConvGroup: int
    numConvGroups: int
    inputTransform: InputTransform = field(default_factory=InputTransform)
    kernelTransform: InputTransform = field(default_factory=InputTransform)
    outputTransform: OutputTransform = field(default_factory=OutputTransform)

    def __init__(
        self,
        dataType: Type,
        batchSize: int,
        inputFieldShape: Sequence[int],
        kernelShape: Sequence[int],
        inputChannelsPerConvGroup: int,
        outputChannelsPerConvGroup: int,
        numConvGroups: int = 1,
        inputTransform: Any = None,
        kernelTransform: Any = None,
        outputTransform: Any = None,
        *,
        outputType: Type | None = None,
        stride: Sequence[int] | int | None = None,
        paddingLower: Sequence[int] | int | None = None,
        paddingUpper: Sequence[int] | int | None = None,
        dilation: Sequence[int] | int | None = None,
        inputDilation: Sequence[int] | int | None = None,
        _signed: bool = False,
    ) -> None:
        for t, what in ((dataType, "dataType"), (outputType, "outputType")):
            if t is not None and t not in CONV_TYPES:
                raise GraphError(
                    f"ConvParams: {what}={t!r} is not supported; convolutions take FLOAT or "
                    f"HALF (hint: cast first)"
                )
        try:
            field_shape = tuple(int(x) for x in inputFieldShape)
            kernel_shape = tuple(int(x) for x in kernelShape)
        except (TypeError, ValueError):
            raise GraphError(
                f"ConvParams: inputFieldShape={inputFieldShape!r} and kernelShape="
                f"{kernelShape!r} must be lists of ints"
            ) from None
        if len(field_shape) != len(kernel_shape) or not field_shape:
            raise GraphError(
                f"ConvParams: inputFieldShape={list(field_shape)} and kernelShape="
                f"{list(kernel_shape)} must have the same number (>= 1) of field dimensions"
            )
        for name, v in (
            ("batchSize", batchSize),
            ("inputChannelsPerConvGroup", inputChannelsPerConvGroup),
            ("outputChannelsPerConvGroup", outputChannelsPerConvGroup),
            ("numConvGroups", numConvGroups),
        ):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise GraphError(f"ConvParams: {name}={v!r} must be an int >= 1")
        if min(field_shape) < 1 or min(kernel_shape) < 1:
            raise GraphError(
                f"ConvParams: inputFieldShape={list(field_shape)}, kernelShape="
                f"{list(kernel_shape)}: every size must be >= 1"
            )
        n = len(field_shape)
        # a transform given as one, with no shortcut changing it, goes to ``make`` as it
        # is (``make`` takes it whole when it is already an n-dimensional one)
        it, kt, ot = inputTransform, kernelTransform, outputTransform
        shortcuts = paddingLower is not None or paddingUpper is not None
        if not isinstance(it, InputTransform) or shortcuts or inputDilation is not None:
            it = _as_dict(it) if isinstance(it, InputTransform) else dict(it or {})
        if not isinstance(kt, InputTransform) or dilation is not None:
            kt = _as_dict(kt) if isinstance(kt, InputTransform) else dict(kt or {})
        if not isinstance(ot, OutputTransform) or stride is not None:
            ot = _as_dict(ot) if isinstance(ot, OutputTransform) else dict(ot or {})
        if paddingLower is not None:
            it["paddingLower"] = _ints(paddingLower, n, 0, "paddingLower")
        if paddingUpper is not None:
            it["paddingUpper"] = _ints(paddingUpper, n, 0, "paddingUpper")
        if inputDilation is not None:
            it["dilation"] = _ints(inputDilation, n, 1, "inputDilation", minimum=1)
        if dilation is not None:
            kt["dilation"] = _ints(dilation, n, 1, "dilation", minimum=1)
        if stride is not None:
            ot["stride"] = _ints(stride, n, 1, "stride", minimum=1)
        set_ = object.__setattr__
        set_(self, "inputType", dataType)
        set_(self, "outputType", outputType or dataType)
        set_(self, "batchSize", int(batchSize))
        set_(self, "inputFieldShape", field_shape)
        set_(self, "kernelShape", kernel_shape)
        set_(self, "inputChannelsPerConvGroup", int(inputChannelsPerConvGroup))
        set_(self, "outputChannelsPerConvGroup", int(outputChannelsPerConvGroup))
        set_(self, "numConvGroups", int(numConvGroups))
        set_(self, "inputTransform", InputTransform.make(n, "inputTransform", it, signed=_signed))
        set_(self, "kernelTransform", InputTransform.make(n, "kernelTransform", kt, signed=_signed))
        set_(self, "outputTransform", OutputTransform.make(n, ot))
        self._check_sizes()
        # (made once: a plan search asks a convolution's output shape for every cost)
        set_(self, "_output_shape", tuple(self._output_size(d) for d in range(n)))

    # -------------------------------------------------------------- queries
    def getNumFieldDims(self) -> int:
        return len(self.inputFieldShape)

    def getBatchSize(self) -> int:
        return self.batchSize

    def getNumConvGroups(self) -> int:
        return self.numConvGroups

    def getNumInputChansPerConvGroup(self) -> int:
        return self.inputChannelsPerConvGroup

    def getNumOutputChansPerConvGroup(self) -> int:
        return self.outputChannelsPerConvGroup

    def getNumInputChans(self) -> int:
        return self.inputChannelsPerConvGroup * self.numConvGroups

    def getNumOutputChans(self) -> int:
        return self.outputChannelsPerConvGroup * self.numConvGroups

    def getInputFieldShape(self) -> list[int]:
        return list(self.inputFieldShape)

    def getKernelShape(self) -> list[int]:
        return list(self.kernelShape)

    def getTransformedInputSize(self, dim: int) -> int:
        return self.inputTransform.transformed_size(self.inputFieldShape[dim], dim)

    def getTransformedKernelSize(self, dim: int) -> int:
        return self.kernelTransform.transformed_size(self.kernelShape[dim], dim)

    def getUntransformedOutputSize(self, dim: int) -> int:
        return self.getTransformedInputSize(dim) - self.getTransformedKernelSize(dim) + 1

    def getOutputSize(self, dim: int) -> int:
        return self._output_shape[dim]

    def _output_size(self, dim: int) -> int:
        ot = self.outputTransform
        kept = self.getUntransformedOutputSize(dim) - ot.truncationLower[dim]
        kept -= ot.truncationUpper[dim]
        strided = 0 if kept <= 0 else -(-kept // ot.stride[dim])
        return strided + ot.paddingLower[dim] + ot.paddingUpper[dim]

    def getOutputFieldShape(self) -> list[int]:
        return list(self._output_shape)

    def inputShape(self) -> list[int]:
        """Shape of the activations ``[B, G * Ci, *field]``."""
        return [self.batchSize, self.getNumInputChans(), *self.inputFieldShape]

    def weightsShape(self) -> list[int]:
        """Shape of the weights ``[G, Co, Ci, *kernel]``."""
        return [
            self.numConvGroups,
            self.outputChannelsPerConvGroup,
            self.inputChannelsPerConvGroup,
            *self.kernelShape,
        ]

    def outputShape(self) -> list[int]:
        """Shape of the output ``[B, G * Co, *outField]``."""
        return [self.batchSize, self.getNumOutputChans(), *self.getOutputFieldShape()]

    def getNumberOfMACs(self) -> int:
        """Multiply-accumulates that read a real (non-zero-padding) input and kernel element."""
        macs = self.batchSize * self.numConvGroups
        macs *= self.inputChannelsPerConvGroup * self.outputChannelsPerConvGroup
        per_pos = 1
        for m in dim_maps(self):
            per_pos *= int((m >= 0).sum())
        return macs * per_pos

    def _check_sizes(self) -> None:
        for d in range(self.getNumFieldDims()):
            ti = self.getTransformedInputSize(d)
            tk = self.getTransformedKernelSize(d)
            if tk < 1:
                raise GraphError(
                    f"ConvParams: dimension {d}: the kernel of size {self.kernelShape[d]} is "
                    f"empty after kernelTransform truncation ({tk} positions)"
                )
            if ti < tk:
                raise GraphError(
                    f"ConvParams: dimension {d}: the transformed kernel ({tk} = "
                    f"{self.kernelShape[d]} with dilation {self.kernelTransform.dilation[d]}) "
                    f"is larger than the padded input ({ti} = {self.inputFieldShape[d]} + "
                    f"padding {self.inputTransform.paddingLower[d]}/"
                    f"{self.inputTransform.paddingUpper[d]}); hint: pad the input or use a "
                    f"smaller kernel"
                )
            ot = self.outputTransform
            if ot.truncationLower[d] + ot.truncationUpper[d] > self.getUntransformedOutputSize(d):
                raise GraphError(
                    f"ConvParams: dimension {d}: outputTransform truncation "
                    f"{ot.truncationLower[d]}+{ot.truncationUpper[d]} exceeds the "
                    f"{self.getUntransformedOutputSize(d)} output positions"
                )
            if self._output_size(d) < 1:
                raise GraphError(f"ConvParams: dimension {d}: the output is empty")

    def __str__(self) -> str:
        return (
            f"ConvParams({self.inputType.name}->{self.outputType.name}, batch "
            f"{self.batchSize}, field {list(self.inputFieldShape)}, kernel "
            f"{list(self.kernelShape)}, chans {self.inputChannelsPerConvGroup}->"
            f"{self.outputChannelsPerConvGroup} x {self.numConvGroups} groups, stride "
            f"{list(self.outputTransform.stride)}, padding "
            f"{list(self.inputTransform.paddingLower)}/{list(self.inputTransform.paddingUpper)}, "
            f"dilation {list(self.kernelTransform.dilation)})"
        )

    def with_channels(self, inputChannels: int, outputChannels: int) -> ConvParams:
        """This convolution with ``inputChannels`` / ``outputChannels`` channels a conv
        group (what a serial split's iteration convolves): equal to constructing it with
        them, without checking the field again (the channels change no field size)."""
        for name, v in (("inputChannels", inputChannels), ("outputChannels", outputChannels)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise GraphError(f"ConvParams.with_channels: {name}={v!r} must be an int >= 1")
        new = object.__new__(ConvParams)
        new.__dict__.update(self.__dict__)
        object.__setattr__(new, "inputChannelsPerConvGroup", int(inputChannels))
        object.__setattr__(new, "outputChannelsPerConvGroup", int(outputChannels))
        return new

    def key(self) -> tuple:
        """A hashable description (plan caches)."""
        return (
            self.inputType.name, self.outputType.name, self.batchSize, self.inputFieldShape,
            self.kernelShape, self.inputChannelsPerConvGroup, self.outputChannelsPerConvGroup,
            self.numConvGroups, self.inputTransform, self.kernelTransform, self.outputTransform,
        )  # fmt: skip


def dim_maps(params: ConvParams) -> list[np.ndarray]:
    """For each field dimension, ``int64[kernelSize, outputSize]``: the original input
    index each (original kernel index, output index) pair reads, or -1 when it reads a
    zero (padding, dilation hole, truncated element or padded output)."""
    out = []
    for d in range(params.getNumFieldDims()):
        inv_in = params.inputTransform.inverse(params.inputFieldShape[d], d)
        kpos = params.kernelTransform.positions(params.kernelShape[d], d)
        ot = params.outputTransform
        n_out = params.getOutputSize(d)
        o = np.arange(n_out, dtype=np.int64)
        inner = params.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
        real = (o >= ot.paddingLower[d]) & (o < ot.paddingLower[d] + inner)
        u = ot.truncationLower[d] + (o - ot.paddingLower[d]) * ot.stride[d]
        t = u[None, :] + kpos[:, None]
        ok = real[None, :] & (kpos[:, None] >= 0) & (t >= 0) & (t < inv_in.size)
        m = np.where(ok, inv_in[np.clip(t, 0, max(inv_in.size - 1, 0))], -1)
        out.append(m.astype(np.int64))
    return out


def _check_gradient_support(fwd: ConvParams, what: str) -> None:
    if any(fwd.inputTransform.flip):
        raise GraphError(
            f"{what}: a forward convolution with inputTransform.flip="
            f"{list(fwd.inputTransform.flip)} has no weight-update convolution in ipusim; "
            f"hint: flip the input tensor with Tensor.reverse instead"
        )


def getGradientParams(fwd: ConvParams) -> ConvParams:
    """The convolution that gives the input gradient from the output gradient.

    Used with ``convolution(..., transposeAndFlipWeights=True)``, which swaps the
    weights' channels and reverses the kernel in every field dimension, as Poplibs'
    ``getGradientParams`` (``lib/poplin/ConvUtil.cpp``) expects. Per dimension the
    output gradient is dilated by the forward stride and padded by ``transformedKernel
    - 1`` (plus the forward output truncation) so the result covers every transformed
    input position; the kernel's truncation and padding swap sides (it is reversed);
    the output transform keeps the positions of original inputs (truncation = forward
    padding, stride = forward input dilation, padding = forward input truncation). A
    flipped forward input flips the backward input and kernel.
    """
    n = fwd.getNumFieldDims()
    it, ot, kt = fwd.inputTransform, fwd.outputTransform, fwd.kernelTransform
    pl, pu = [], []
    for d in range(n):
        tk = fwd.getTransformedKernelSize(d)
        untr = fwd.getUntransformedOutputSize(d)
        inner = fwd.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
        u_last = ot.truncationLower[d] + (inner - 1) * ot.stride[d]
        pl.append(tk - 1 + ot.truncationLower[d])
        pu.append(tk - 1 + (untr - 1 - u_last))
    return ConvParams(
        fwd.outputType,
        fwd.batchSize,
        fwd.getOutputFieldShape(),
        fwd.kernelShape,
        fwd.outputChannelsPerConvGroup,
        fwd.inputChannelsPerConvGroup,
        fwd.numConvGroups,
        {
            "truncationLower": ot.paddingLower,
            "truncationUpper": ot.paddingUpper,
            "dilation": ot.stride,
            "paddingLower": pl,
            "paddingUpper": pu,
            "flip": it.flip,
        },
        {
            "truncationLower": kt.truncationUpper,
            "truncationUpper": kt.truncationLower,
            "dilation": kt.dilation,
            "paddingLower": kt.paddingUpper,
            "paddingUpper": kt.paddingLower,
            "flip": tuple(f != g for f, g in zip(kt.flip, it.flip, strict=True)),
        },
        {
            "truncationLower": it.paddingLower,
            "truncationUpper": it.paddingUpper,
            "stride": it.dilation,
            "paddingLower": it.truncationLower,
            "paddingUpper": it.truncationUpper,
        },
        outputType=fwd.inputType,
    )


def getWeightUpdateParams(fwd: ConvParams) -> ConvParams:
    """The convolution that gives the weight gradient.

    Batch and input channels swap roles (the batch becomes the channels summed over),
    the output gradient is the kernel (dilated by the forward stride), and the output
    is sampled at each original kernel position's transformed position (truncation =
    kernel padding, stride = kernel dilation, padding = kernel truncation). The result
    has batch ``Ci``, ``Co`` output channels and the kernel's field shape. Derived
    from the definition (see module docs).
    """
    _check_gradient_support(fwd, "getWeightUpdateParams")
    if any(fwd.kernelTransform.flip):
        raise GraphError(
            f"getWeightUpdateParams: kernelTransform.flip={list(fwd.kernelTransform.flip)} is "
            f"not supported for weight updates; hint: flip the weights tensor instead"
        )
    n = fwd.getNumFieldDims()
    ot, kt = fwd.outputTransform, fwd.kernelTransform
    kpl, kpu = [], []
    for d in range(n):
        untr = fwd.getUntransformedOutputSize(d)
        inner = fwd.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
        u_last = ot.truncationLower[d] + (inner - 1) * ot.stride[d]
        kpl.append(ot.truncationLower[d])
        kpu.append(untr - 1 - u_last)
    return ConvParams(
        fwd.inputType,
        fwd.inputChannelsPerConvGroup,
        fwd.inputFieldShape,
        fwd.getOutputFieldShape(),
        fwd.batchSize,
        fwd.outputChannelsPerConvGroup,
        fwd.numConvGroups,
        fwd.inputTransform,
        {
            "truncationLower": ot.paddingLower,
            "truncationUpper": ot.paddingUpper,
            "dilation": ot.stride,
            "paddingLower": kpl,
            "paddingUpper": kpu,
        },
        {
            "truncationLower": kt.paddingLower,
            "truncationUpper": kt.paddingUpper,
            "stride": kt.dilation,
            "paddingLower": kt.truncationLower,
            "paddingUpper": kt.truncationUpper,
        },
        outputType=FLOAT if fwd.inputType == FLOAT else fwd.inputType,
        _signed=True,
    )


def expand_all_dims(params: ConvParams) -> ConvParams:
    """The 1x1 convolution that Poplibs' ``expandDims`` transform makes of ``params``
    when it expands every field dimension (:func:`expand_dims` of all of them)."""
    return expand_dims(params)


def _expanded_set(params: ConvParams, dims: Sequence[int] | None) -> tuple[int, ...]:
    """``dims`` (None: every field dimension) as sorted distinct field dimensions."""
    n = params.getNumFieldDims()
    if dims is None:
        return tuple(range(n))
    out = tuple(sorted({int(d) for d in dims}))
    if any(d < 0 or d >= n for d in out):
        raise GraphError(
            f"ConvParams: expandDims={list(dims)} names a field dimension outside 0..{n - 1}; "
            f"required dimensions of the {n}-D convolution's field; hint: [1] expands the "
            f"width of a 2-D convolution"
        )
    return out


def expand_dims(params: ConvParams, dims: Sequence[int] | None = None) -> ConvParams:
    """The convolution Poplibs' ``expandDims`` transform makes of ``params`` when it
    expands the field dimensions ``dims`` (None: every one).

    Each expanded dimension is ``expandSpatialDim``'s (graphcore/poplibs ``7eac0f26``,
    ``lib/poplin/ConvTransforms.cpp``): its kernel positions join the input channels
    (channel ``c * prod(expanded kernel) + k``, ``k`` the flat position in the expanded
    dimensions' kernel), its kernel becomes one wide, its input becomes the output
    positions read (after the output truncation and stride) and every transform of it
    disappears but the output padding. Every other dimension keeps its field, kernel and
    transforms. The input of the expanded convolution is the gather
    :func:`expanded_input_index` describes (zeros where it reads padding or dilation).
    """
    dims = _expanded_set(params, dims)
    n = params.getNumFieldDims()
    it, kt, ot = params.inputTransform, params.kernelTransform, params.outputTransform
    field, kernel = list(params.inputFieldShape), list(params.kernelShape)
    ktot = int(math.prod([kernel[d] for d in dims]))
    for d in dims:
        field[d] = params.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
        kernel[d] = 1

    def kept(values: tuple, none: Any) -> list:
        return [none if d in dims else values[d] for d in range(n)]

    def in_transform(t: InputTransform) -> dict[str, list]:
        return {
            "truncationLower": kept(t.truncationLower, 0),
            "truncationUpper": kept(t.truncationUpper, 0),
            "dilation": kept(t.dilation, 1),
            "paddingLower": kept(t.paddingLower, 0),
            "paddingUpper": kept(t.paddingUpper, 0),
            "flip": kept(t.flip, False),
        }

    return ConvParams(
        params.inputType,
        params.batchSize,
        field,
        kernel,
        params.inputChannelsPerConvGroup * ktot,
        params.outputChannelsPerConvGroup,
        params.numConvGroups,
        in_transform(it),
        in_transform(kt),
        {
            "truncationLower": kept(ot.truncationLower, 0),
            "truncationUpper": kept(ot.truncationUpper, 0),
            "stride": kept(ot.stride, 1),
            "paddingLower": list(ot.paddingLower),
            "paddingUpper": list(ot.paddingUpper),
        },
        outputType=params.outputType,
        _signed=True,
    )


def expanded_input_index(
    params: ConvParams, act_ids: np.ndarray, dims: Sequence[int] | None = None
) -> np.ndarray:
    """Element ids of the input of :func:`expand_dims` ``(params, dims)``,
    ``[G, B, Ci * prod(expanded K), *field]`` (an expanded dimension's field its output
    positions, every other dimension's as in ``params``), from the original input's ids
    ``[G, B, Ci, *F]``; -1 marks a zero (padding, dilation)."""
    offset, valid = _expanded_reads(params, dims)
    n = params.getNumFieldDims()
    # one gather along the rows of [G * B * C, field] (not a gather of every element by
    # n index arrays)
    g, b, c = act_ids.shape[:3]
    rows = np.ascontiguousarray(act_ids).reshape(g * b * c, -1)
    out = np.take(rows, offset.reshape(-1), axis=1)  # [G * B * C, *K, *O]
    invalid = ~valid.reshape(-1)
    if invalid.any():
        out[:, invalid] = -1
    ktot = int(math.prod(valid.shape[:n]))
    return out.reshape(g, b, c * ktot, *valid.shape[n:])


def expanded_input_repeats(params: ConvParams, dims: Sequence[int] | None = None) -> bool:
    """Whether the input of :func:`expand_dims` ``(params, dims)`` certainly holds an
    element twice, whatever the original input's ids: two kernel and output positions of
    the expanded dimensions read one input position (overlapping windows), or it has
    more than one zero (the zeros of :func:`expanded_input_index`, one constant when
    made a tensor). Found from the positions one row reads, not from the ids."""
    offset, valid = _expanded_reads(params, dims)
    zeros = (valid.size - int(np.count_nonzero(valid))) * (
        params.numConvGroups * params.batchSize * params.inputChannelsPerConvGroup
    )
    read = offset[valid]
    return zeros > 1 or np.unique(read).size < read.size


def _expanded_reads(
    params: ConvParams, dims: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The flat field position of ``params``' input each position ``[*K, *O]`` of the
    expanded input reads (K 1 and O the input field in a dimension not expanded), and
    whether it reads one (False: a zero of padding or dilation)."""
    dims = _expanded_set(params, dims)
    ot = params.outputTransform
    n = params.getNumFieldDims()
    field = [int(x) for x in params.inputFieldShape]
    maps = dim_maps(params)
    cols = []
    for d in range(n):
        if d in dims:
            inner = params.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
            cols.append(maps[d][:, ot.paddingLower[d] : ot.paddingLower[d] + inner])
        else:  # (read as it lies: one kernel position, every input position)
            cols.append(np.arange(field[d], dtype=np.int64)[None, :])
    # index arrays broadcasting to [*K, *O] (K 1 in a dimension not expanded)
    idx = []
    for d, m in enumerate(cols):
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = m.shape
        idx.append(m.reshape(shape))
    valid = np.ones(np.broadcast_shapes(*[i.shape for i in idx]), bool)
    for i in idx:
        valid &= i >= 0
    offset = np.zeros(valid.shape, np.int64)
    for d, i in enumerate(idx):
        offset = offset * field[d] + np.maximum(i, 0)
    return offset, valid


def expanded_weights_order(params: ConvParams, dims: Sequence[int] | None = None) -> list[int]:
    """The permutation of the weights ``[G, Co, Ci, *K]`` that puts the expanded
    dimensions' kernel right after the input channels (then every other kernel
    dimension), so that a reshape to ``[G, Co, Ci * prod(expanded K), *kernel of
    expand_dims(params, dims)]`` orders the channels as :func:`expanded_input_index`."""
    dims = _expanded_set(params, dims)
    n = params.getNumFieldDims()
    rest = [d for d in range(n) if d not in dims]
    return [0, 1, 2, *(3 + d for d in dims), *(3 + d for d in rest)]


def expanded_kernel_offsets(params: ConvParams, dims: Sequence[int] | None = None) -> np.ndarray:
    """``int64[*K]``: for each kernel position, ``k`` of the expanded input channel
    ``c * prod(expanded K) + k`` its weights join in :func:`expand_dims` ``(params, dims)``
    (its flat position in the expanded dimensions' kernel, row-major)."""
    dims = _expanded_set(params, dims)
    kernel = [int(k) for k in params.kernelShape]
    coords = np.indices(kernel, dtype=np.int64)
    out = np.zeros(kernel, np.int64)
    for d in dims:
        out = out * kernel[d] + coords[d]
    return out
