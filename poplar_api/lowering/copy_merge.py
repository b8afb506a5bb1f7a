"""Stream-copy merging: adjacent host copies share one host sync, up to
``opt.maxCopyMergeSize`` bytes.

Poplar merges stream copies that follow each other in a program into one copy, up to
the engine option ``opt.maxCopyMergeSize`` bytes (Graphcore's TensorFlow backend:
"As long as the stream copies are scheduled right after each other, Poplar will attempt
to merge them according to ``opt.maxCopyMergeSize``", graphcore/tensorflow, its
``SendToHost`` op; Graphcore's examples set the option to limit merging). A merged
copy synchronises with the host once, so a program with many small copies pays one
host sync instead of one per copy.

When the option is not set, copies are not merged: Poplar's default limit is not
published, and the IPU Model profile Poplar recorded of tutorial 7 (SDK 2,
``tests/data/calibration/tut7_10000x1000_mk2_ipumodel_sdk2.txt``) pays a host sync
for each of its two adjacent input copies (4 KB and 40 MB): 1,134.8 sync cycles per
tile, three host syncs of 372 cycles and no fewer.

:func:`merge_stream_copies` works on the lowered children of one ``Sequence``: a run
of adjacent host transfers (each a host sync, its ``StreamCopy`` and its on-chip
exchange, as :meth:`~poplar_api.lowering.emission.Emission.host_transfer` makes them)
in the same direction keeps the first one's sync only, while the bytes of the run stay
within the limit. Each copy keeps its own data movement (link and exchange), so only
the syncs go. Remote-buffer copies and copies separated by anything else are not
merged.
"""

from __future__ import annotations

from typing import Any

from ipusim import ir

__all__ = ["max_copy_merge_size", "merge_stream_copies"]


def max_copy_merge_size(options: Any) -> int:
    """The engine option ``opt.maxCopyMergeSize`` in bytes (0 when it is not set:
    no merging, see the module docstring)."""
    value = str(options.get("opt.maxCopyMergeSize", "")).strip()
    return int(value, 0) if value else 0


def _host_copy(node: ir.Node) -> tuple[str, int] | None:
    """``(direction, bytes)`` of a lowered host transfer, else None."""
    if not isinstance(node, ir.Sequence) or type(node) is not ir.Sequence:
        return None
    body = node.body
    if len(body) != 3 or not isinstance(body[0], ir.Sync) or body[0].sync_kind.value != "host":
        return None
    copies = [s for s in body[1:] if type(s) is ir.StreamCopy]
    if len(copies) != 1:
        return None
    return str(copies[0].direction.value), int(sum(copies[0].num_bytes))


def merge_stream_copies(
    nodes: list[ir.Node], limit: int, touches: dict[int, list[Any]]
) -> list[ir.Node]:
    """``nodes`` with the host sync of every copy merged into the one before it dropped.

    Parameters
    ----------
    nodes
        The lowered children of a ``Sequence``, in order.
    limit
        Most bytes one merged copy may move (0: no merging).
    touches
        The emission's record of what each node accesses (for liveness): a rebuilt
        node takes over the record of the node it replaces.
    """
    if limit <= 0:
        return nodes
    out: list[ir.Node] = []
    run_dir: str | None = None
    run_bytes = 0
    for node in nodes:
        copy = _host_copy(node)
        if copy is None:
            run_dir = None
            out.append(node)
            continue
        direction, nbytes = copy
        fits = run_bytes + nbytes <= limit
        if run_dir == direction and fits:
            merged = ir.Sequence(node.body[1:], name=node.name)
            if id(node) in touches:
                touches[id(merged)] = touches.pop(id(node))
            out.append(merged)
            run_bytes += nbytes
            continue
        out.append(node)
        # a copy starts a run only if it fits in a merged copy itself
        run_dir = direction if nbytes <= limit else None
        run_bytes = nbytes
    return out
