"""Builder methods PopART scripts call beyond building ops: saving the model, the
trainable tensors, a convolution's or matmul's partials type, and the PopART options
the simulator does not model (refused, naming the method, rather than an
``AttributeError``).

Signatures and attribute names as PopART's ``Builder`` (``python/popart/popart_core/
popart.cpp``, ``willow/src/builder.cpp``, ``willow/include/popart/names.hpp`` of
graphcore/popart, commit d2f20d78db91).
"""

from __future__ import annotations

from typing import Any, NoReturn

from ipusim.files import FileWriteError, write_bytes
from popart_api.errors import popart_exception

#: Node attribute holding a Conv's or MatMul's partials type, as PopART names it.
PARTIALS_TYPE_ATTRIBUTE = "__partials_type"
#: The ops ``setPartialsType`` applies to (as PopART's).
PARTIALS_OPS = ("Conv", "MatMul")


class BuilderExtras:
    """Mixed into :class:`popart_api.builder.Builder` (which provides the node helpers)."""

    def saveModelProto(self, filename: str) -> None:
        """Write the model (``getModelProto()``) to ``filename``, whole or not at all.

        Raises
        ------
        popart_exception
            The path cannot be written (naming it and the reason).
        """
        data = self.getModelProto()  # type: ignore[attr-defined]
        try:
            write_bytes(filename, data, what="saveModelProto model")
        except FileWriteError as exc:
            raise popart_exception(f"Builder.saveModelProto: {exc}") from None

    def getTrainableTensorIds(self) -> list[str]:
        """Ids of the weights (the model's initializers), which a training session
        updates; as PopART's, every initializer."""
        return [t.name for t in self._initializers]  # type: ignore[attr-defined]

    def setPartialsType(self, nodeOutputName: str, partialsType: str) -> None:
        """The partials type (``"FLOAT"`` or ``"HALF"``) of the Conv or MatMul making
        ``nodeOutputName``: its lowering's Poplibs option ``partialsType``."""
        what = "Builder.setPartialsType"
        node = self._producer(self._check_id(nodeOutputName, what), "setPartialsType")  # type: ignore[attr-defined]
        if node.op_type not in PARTIALS_OPS:
            raise popart_exception(
                f"{what}: '{nodeOutputName}' is made by a {node.op_type} node; the partials "
                f"type applies to {', '.join(PARTIALS_OPS)} only (as PopART's)"
            )
        if not isinstance(partialsType, str) or partialsType.lower() not in ("float", "half"):
            raise popart_exception(
                f"{what}: partialsType {partialsType!r}; required 'FLOAT' or 'HALF'"
            )
        self._set_attr(node, PARTIALS_TYPE_ATTRIBUTE, partialsType.upper())  # type: ignore[attr-defined]

    def getPartialsType(self, nodeOutputName: str) -> str:
        """The partials type set on the node making ``nodeOutputName``; ``"FLOAT"``
        (Poplar's default) when none was set."""
        try:
            value = self._node_attr(nodeOutputName, PARTIALS_TYPE_ATTRIBUTE, "getPartialsType")  # type: ignore[attr-defined]
        except popart_exception:
            self._check_id(nodeOutputName, "Builder.getPartialsType")  # type: ignore[attr-defined]
            return "FLOAT"
        return value.decode() if isinstance(value, bytes) else str(value)

    def setSerializeMatMul(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the simulator does not split matmuls (PopART's serialisation)."""
        _not_modelled(
            "setSerializeMatMul",
            "matmuls are not serialised here, so memory and cycles would be those of the "
            "whole matmul",
            "leave it out, or lower availableMemoryProportion (setAvailableMemoryProportion)",
        )

    def schedulePriority(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the simulator's scheduler does not take node priorities."""
        _not_modelled(
            "schedulePriority",
            "the scheduler does not take node priorities",
            "leave it out; the schedule follows the data dependencies",
        )

    def outputTensorLocation(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: tensors are not moved off chip (remote buffers) by node here."""
        _not_modelled(
            "outputTensorLocation",
            "per-node tensor locations (off-chip, remote buffers) are not modelled",
            "leave it out; every tensor stays in tile memory",
        )


def _not_modelled(method: str, why: str, hint: str) -> NoReturn:
    raise popart_exception(f"Builder.{method}: not supported by popart_api ({why}); hint: {hint}")


__all__ = ["PARTIALS_OPS", "PARTIALS_TYPE_ATTRIBUTE", "BuilderExtras"]
