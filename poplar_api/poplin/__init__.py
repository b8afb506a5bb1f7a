"""poplin: linear algebra on the IPU model (matrix multiplication with a planner).

``matMul(graph, A, B, prog)`` multiplies ``[M,K] x [K,N]`` (or grouped
``[G,M,K] x [G,K,N]``) tensors. A planner (:mod:`poplar_api.poplin.planner`) splits
M, N and K (and G) over the tiles from a cost model of compute (the AMP partial-matmul
vertex estimate), exchange and the reduction of K-split partials; the vertices and
their estimators are in :mod:`poplar_api.poplin.vertices` and
:mod:`poplar_api.poplin.estimators`. The library needs no codelets to be added.
:mod:`poplar_api.poplin.amp` holds the Poplibs AMP vertex ``ConvPartial1x1Out`` with the
Poplibs estimator (``add_conv_partial_1x1_out`` adds one with its worklist).
"""

from poplar_api.poplin import solvers as solvers
from poplar_api.poplin.matmul import (
    createMatMulInputLHS,
    createMatMulInputRHS,
    getPlan,
    matMul,
    matMulAcc,
    matMulGrouped,
)
from poplar_api.poplin.planner import MatMulPlan

__all__ = [
    "MatMulPlan",
    "createMatMulInputLHS",
    "createMatMulInputRHS",
    "getPlan",
    "matMul",
    "matMulAcc",
    "matMulGrouped",
]
