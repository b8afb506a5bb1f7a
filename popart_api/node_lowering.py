"""How a session lowers one ONNX node: its lowering function, attributes and Poplibs
options. Shared by the session's node-by-node lowering and by outlining, which
lowers a repeated sequence of nodes once more into a Poplar function
(:mod:`popart_api.outline`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx

from popart_api import ops
from popart_api.builder import (
    MEMORY_PROPORTION_ATTRIBUTE,
    PIPELINE_STAGE_ATTRIBUTE,
    RECOMPUTE_ATTRIBUTE,
    VIRTUAL_GRAPH_ATTRIBUTE,
)
from popart_api.builder_extras import PARTIALS_TYPE_ATTRIBUTE
from popart_api.inplace import VIEW_OPS, copied_view_lowering, inplace_lowering
from popart_api.onnx_model import node_attrs
from popart_api.options import seed_word
from poplar_api import program as pprog

__all__ = ["NodeLowering", "node_lowering"]


@dataclass
class NodeLowering:
    """What lowering node ``i`` of a session's model takes.

    Attributes
    ----------
    name, domain, opset
        The node's name (or ``<op type>_<i>``), its domain and the model's opset of it.
    fn
        The op's lowering (in-place or copying-view variant where the session's
        patterns choose one).
    attrs
        The node's ONNX attributes without the session's placement attributes.
    options
        Poplibs options of its matMul and convolution calls.
    proportion
        ``availableMemoryProportion`` set on the node, if any.
    """

    name: str
    domain: str
    opset: int
    fn: Callable[..., Any]
    attrs: dict[str, Any]
    options: dict[str, str]
    proportion: Any

    def context(
        self,
        session: Any,
        node: onnx.NodeProto,
        side: pprog.Sequence,
        scope: dict | None,
        fetch: Callable[[str, Any], Any] | None,
    ) -> ops.LoweringContext:
        """The lowering context of the node in ``session`` (side effects into ``side``)."""
        return ops.LoweringContext(
            training=session._kind == "TrainingSession",
            options=self.options,
            seed=seed_word(session.options.randomSeed or 0),
            side_effects=side,
            opset=self.opset,
            seed_tensor=session._seed,
            num_outputs=len(node.output),
            scope=scope,
            fetch=fetch,
        )


def node_lowering(session: Any, node: onnx.NodeProto, i: int) -> NodeLowering:
    """How ``session`` lowers node ``i`` (``node``) of its model."""
    name = node.name or f"{node.op_type}_{i}"
    domain = node.domain or "ai.onnx"
    opset = session._opsets.get(domain, 1)
    fn = ops.lookup(domain, node.op_type, opset, name)
    if i in session._inplace:  # the InPlace pattern
        fn = inplace_lowering(node.op_type, session._inplace[i], fn)
    elif node.op_type in VIEW_OPS and domain == "ai.onnx" and not session.patterns.InPlace:
        fn = copied_view_lowering(fn)  # PopART's non-inplace view ops copy
    attrs = node_attrs(node)
    for key in (VIRTUAL_GRAPH_ATTRIBUTE, PIPELINE_STAGE_ATTRIBUTE, RECOMPUTE_ATTRIBUTE):
        attrs.pop(key, None)
    proportion = attrs.pop(MEMORY_PROPORTION_ATTRIBUTE, None)
    partials = attrs.pop(PARTIALS_TYPE_ATTRIBUTE, None)  # Builder.setPartialsType
    options = dict(session.options.convolutionOptions)
    options.update(session.options.matmulOptions)
    if proportion is not None:
        options["availableMemoryProportion"] = str(proportion)
    if partials is not None:
        text = partials.decode() if isinstance(partials, bytes) else str(partials)
        options["partialsType"] = text.lower()
    return NodeLowering(name, domain, opset, fn, attrs, options, proportion)
