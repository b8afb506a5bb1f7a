"""Shared helper of the replica tests: a replicated ``poplin.matMul`` engine.

Not a test module (no ``test_`` prefix); imported by ``test_replica_images.py`` and
``test_replica_constants.py``, which both run ``x @ w`` on every replica of the ``tiny``
IPU Model (one IPU per replica) so that the convolution partials read every replica's
image.
"""

from __future__ import annotations

from typing import Any

from poplar_api import Engine, Graph, IPUModel, poplin
from poplar_api import program as prog


def matmul_engine(
    replicas: int, dtype: Any, m: int, k: int, n: int, options: dict | None = None
) -> tuple[Engine, Any]:
    """An engine (not loaded) of ``[m, k] @ [k, n]`` on every replica, and its device.

    Streams: ``"in"`` (the ``m * k`` left operand of a replica), ``"out"`` (its
    ``m * n`` product); host write ``"w"`` (the right operand).
    """
    model = IPUModel("tiny")
    model.numIPUs = replicas
    device = model.createDevice()
    g = Graph(device.getTarget(), replication_factor=replicas)
    poplin.addCodelets(g)
    a = poplin.createMatMulInputLHS(g, dtype, [m, k], [k, n], "x")
    b = poplin.createMatMulInputRHS(g, dtype, [m, k], [k, n], "w")
    seq = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", dtype, m * k), a))
    y = poplin.matMul(g, a, b, seq, "mm")
    seq.add(prog.Copy(y, g.addDeviceToHostFIFO("out", dtype, m * n)))
    g.createHostWrite("w", b)
    return Engine(g, seq, options or {}), device
