"""popnn: neural-network functions (non-linearities, softmax, losses, accuracy, pooling).

Functions keep Poplibs' names and argument order; each adds compute sets of its own
vertices (:mod:`poplar_api.popnn.vertices`, :mod:`poplar_api.popnn.pool_vertices`) to
the ``prog`` sequence it is given. Pooling is the submodule :mod:`popnn.pooling`
(``popnn::pooling`` in Poplibs): ``popnn.pooling.pool(graph, params, in_, prog)``.
"""

from poplar_api.popnn import pooling
from poplar_api.popnn.codelets import addCodelets
from poplar_api.popnn.loss import (
    MASKED_LABEL_CODE,
    LossType,
    argMax,
    argMin,
    calcAccuracy,
    calcLoss,
    maxAndArgMax,
    minAndArgMin,
)
from poplar_api.popnn.nonlinearity import (
    NonLinearityType,
    nonLinearity,
    nonLinearityInPlace,
    nonLinearityInputGradient,
)
from poplar_api.popnn.onehot import encodeOneHot
from poplar_api.popnn.pooling import PoolingType, PoolParams

__all__ = [
    "MASKED_LABEL_CODE",
    "LossType",
    "NonLinearityType",
    "PoolParams",
    "PoolingType",
    "addCodelets",
    "argMax",
    "argMin",
    "calcAccuracy",
    "calcLoss",
    "encodeOneHot",
    "maxAndArgMax",
    "minAndArgMin",
    "nonLinearity",
    "nonLinearityInPlace",
    "nonLinearityInputGradient",
    "pooling",
]
