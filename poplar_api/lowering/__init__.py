"""Lowering: a graph and its programs compiled to the machine's IR and memory plan.

``lowering.compile`` (:func:`poplar_api.lowering.pipeline.compile`) runs the named
steps validate, emit IR (with the exchanges planned around each compute set),
liveness and memory placement; ``Engine`` and ``compileGraph`` both call it.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # imported on first use: the graph imports lowering.context, and the pipeline
    # imports the graph
    if name == "compile":
        from poplar_api.lowering.pipeline import compile

        return compile
    raise AttributeError(f"module 'poplar_api.lowering' has no attribute {name!r}")
