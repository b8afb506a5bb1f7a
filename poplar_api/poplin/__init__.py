"""poplin: linear algebra on the IPU model: convolutions and matrix multiplication.

``convolution(graph, in, weights, params, transposeAndFlipWeights, prog)`` runs a
:class:`ConvParams` convolution (1-D, 2-D or more field dimensions; stride, padding,
dilation, groups, every Poplibs transform), with the backward-data pass
(:func:`getGradientParams`), the weight update (:func:`calculateWeightDeltas`,
:func:`convolutionWeightUpdate`) and biases. A planner (:mod:`~poplar_api.poplin.conv_planner`)
weighs compute, exchange and memory to split the work over the tiles and choose the
Poplibs vertex family (:mod:`~poplar_api.poplin.conv_vertices`: ``ConvPartial1x1Out``,
``ConvPartialnx1``, ``ConvPartialHorizontalMac``), each with the Poplibs estimator.
``matMul`` is a convolution too (:mod:`~poplar_api.poplin.matmul`), as in Poplibs.
``addCodelets`` exists for Poplar compatibility; the library needs none added.
"""

from poplar_api.poplin import solvers as solvers
from poplar_api.poplin.codelets import addCodelets
from poplar_api.poplin.conv import (
    addBias,
    calculateWeightDeltas,
    convolution,
    convolutionBiasUpdate,
    convolutionWeightUpdate,
    createBiases,
    createInput,
    createWeights,
    getBwdFlops,
    getConvPlan,
    getFwdFlops,
    getWuFlops,
    reportPlanInfo,
)
from poplar_api.poplin.conv_params import (
    ConvParams,
    InputTransform,
    OutputTransform,
    getGradientParams,
    getWeightUpdateParams,
)
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.matmul import (
    createMatMulInputLHS,
    createMatMulInputRHS,
    getPlan,
    matMul,
    matMulAcc,
    matMulGrouped,
    matMulReportPlan,
)

__all__ = [
    "ConvParams",
    "ConvPlan",
    "InputTransform",
    "OutputTransform",
    "addBias",
    "addCodelets",
    "calculateWeightDeltas",
    "convolution",
    "convolutionBiasUpdate",
    "convolutionWeightUpdate",
    "createBiases",
    "createInput",
    "createMatMulInputLHS",
    "createMatMulInputRHS",
    "createWeights",
    "getBwdFlops",
    "getConvPlan",
    "getFwdFlops",
    "getGradientParams",
    "getPlan",
    "getWeightUpdateParams",
    "getWuFlops",
    "matMul",
    "matMulAcc",
    "matMulGrouped",
    "matMulReportPlan",
    "reportPlanInfo",
]
