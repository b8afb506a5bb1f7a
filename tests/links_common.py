"""Helpers of the IPU-Link tests: a multi-IPU config on the test machine and the cost
of one global exchange given as plain lists.

The machine is the base of ``tests/conftest.py`` (``make_config``): 8 tiles per IPU,
1 GHz clock, one IPU-Link hop 8 GB/s unless ``link_gbs`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ipusim.config import MachineConfig
from ipusim.exchange.links import global_exchange_cost

__all__ = ["exchange_cost", "link_config"]


def link_config(
    make_config: Callable[..., MachineConfig],
    n: int,
    topology: str = "ring",
    *,
    link_gbs: float = 8.0,
    hop_latency: int = 0,
    **links: Any,
) -> MachineConfig:
    """The test machine with ``n`` IPUs wired as ``topology``; ``links`` sets further
    fields of the ``links`` section (``edges``, ``torus``, ``routing``)."""
    return make_config(
        num_ipus=n,
        links={
            "bandwidth_bytes_per_s": link_gbs * 1e9,
            "topology": topology,
            "hop_latency_cycles": hop_latency,
            **links,
        },
    )


def exchange_cost(
    cfg: MachineConfig, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int]
) -> Any:
    """:func:`~ipusim.exchange.links.global_exchange_cost` of transfers given as lists."""
    return global_exchange_cost(
        cfg,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(nbytes, dtype=np.int64),
    )
