"""popnn: neural-network functions (non-linearities, softmax, losses, accuracy).

Functions keep Poplibs' names and argument order; each adds compute sets of its own
vertices (:mod:`poplar_api.popnn.vertices`) to the ``prog`` sequence it is given.
"""

from poplar_api.popnn.loss import MASKED_LABEL_CODE, LossType, calcAccuracy, calcLoss
from poplar_api.popnn.nonlinearity import (
    NonLinearityType,
    nonLinearity,
    nonLinearityInPlace,
    nonLinearityInputGradient,
)
from poplar_api.popnn.onehot import encodeOneHot

__all__ = [
    "MASKED_LABEL_CODE",
    "LossType",
    "NonLinearityType",
    "calcAccuracy",
    "calcLoss",
    "encodeOneHot",
    "nonLinearity",
    "nonLinearityInPlace",
    "nonLinearityInputGradient",
]
