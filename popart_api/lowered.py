"""What a session's ``prepareDevice`` lowered of the forward pass: the record the
training, recomputation and pipelining builds (:mod:`popart_api.training`,
:mod:`popart_api.pipeline`) build on."""

from __future__ import annotations

from dataclasses import dataclass, field

from popart_api import autodiff
from poplar_api import Graph, Tensor
from poplar_api import program as pprog


@dataclass
class LoweredModel:
    """The forward pass ``prepareDevice`` lowered: what the training and pipelining
    builds (:mod:`popart_api.training`, :mod:`popart_api.pipeline`) build on.

    Attributes
    ----------
    graphs
        The graph of each IPU of a replica (its virtual graph, or the whole graph).
    records
        Per ONNX node, in order: what it was lowered from and to (autodiff's input).
    node_progs
        Per node: the program computing its outputs.
    fwd_progs
        Per node: its program, then what runs once per forward pass.
    side_progs
        Per node: what runs once per forward pass after its program and never when
        it is recomputed (BatchNormalization's running statistics).
    input_progs
        Per model input: the program filling it (a stream copy or synthetic data).
    weight_vars
        Per initializer of a device type: its variable.
    value_ipu
        Per tensor id: the IPU of a replica it lives on.
    node_stage
        Per node: its pipeline stage.
    forward_variables
        ``[first, last)``: ids of the variables the forward pass creates (its
        activations and temporaries).
    node_variables
        Per node: ``[first, last)`` ids of the variables its lowering created (its
        outputs, Poplibs temporaries, copies from other IPUs).
    pipeline_sends
        ``(stage, copy)``: copies sending a pipeline stage's outputs to the next IPU.
    """

    graphs: list[Graph] = field(default_factory=list)
    records: list[autodiff.NodeRecord] = field(default_factory=list)
    node_progs: list[pprog.Sequence] = field(default_factory=list)
    fwd_progs: list[pprog.Sequence] = field(default_factory=list)
    side_progs: list[pprog.Sequence] = field(default_factory=list)
    input_progs: dict[str, pprog.Sequence] = field(default_factory=dict)
    weight_vars: dict[str, Tensor] = field(default_factory=dict)
    value_ipu: dict[str, int] = field(default_factory=dict)
    node_stage: list[int] = field(default_factory=list)
    forward_variables: tuple[int, int] = (0, 0)
    node_variables: list[tuple[int, int]] = field(default_factory=list)
    pipeline_sends: list[tuple[int, pprog.Copy]] = field(default_factory=list)


__all__ = ["LoweredModel"]
