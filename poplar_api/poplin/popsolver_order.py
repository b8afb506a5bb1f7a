"""Which of equally costed partitions Poplibs' planner returns: popsolver's order of search.

``choosePlan`` (graphcore/poplibs ``7eac0f26``, ``lib/poplin/ConvPlan.cpp``) minimises
``{totalCycles, totalTempBytes}`` (``PlanningObjective::MINIMIZE_CYCLES``) with popsolver's
``Model::minimize``. popsolver left Poplibs before that release (``06f1b393``, 2022-06);
its last public source, ``d3107a11``, is what this module restates (``lib/popsolver/Model.cpp``,
``include/popsolver/Model.hpp``, ``lib/popsolver/Scheduler.hpp``):

* ``minimize`` is a depth-first search. At each node it branches on the unassigned
  variable of the highest priority group, among those of one group the one whose
  ``Domain::size()`` (``max - min``; 0 when assigned) is least, and among equal sizes the
  first created (the loop over the variables replaces its pick only on a strictly higher
  priority). It tries the variable's values from its least up;
* a complete assignment replaces the solution only when ``foundLowerCostSolution``:
  lexicographically lower objectives, strictly. So of partitions of equal cycles and
  temporary bytes the first the search reaches is returned.

``constructModel`` (``lib/poplin/ConvModel.cpp``) puts the partition variables in one
priority group above the default one ("We explicitly prioritise the variables that form
the partitions"), created in this order for one IPU: per field dimension ``fieldSplit``
then ``kernelSplit`` (the innermost kernel dimension's a constant), ``batchSplit``,
``convGroupSplit``, ``outChanSplit.parallel``, ``inChanSplit.serial``,
``outChanSplit.serial``, ``inChanSplit.parallel`` (:data:`VARIABLES`). Each lies in
``[1, bound]`` (the field's, kernel's, batch's and groups' sizes in grains,
``lessOrEqual``), the product of the parallel ones is at most the tiles
(``getUsedTiles``) and of each channel pair at most its grains: ``Product::propagate``
lowers a variable's greatest value to the bound over the least values of the others
(:func:`search_first`). Not restated: a least value raised by propagation (the cycle
bound of the solution found so far, through ``constructModel``'s MAC inequality), which
can only shrink a domain; whether it changes the order is checked per case (the doc says
where it is used). Derived from the source, not a port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["VARIABLES", "search_first"]

#: ``constructModel``'s partition variables of a 2-D convolution in their order of creation
#: (``kernelSplit[1]``, a constant, is left out).
VARIABLES = ("fieldSplit[0]", "kernelSplit[0]", "fieldSplit[1]", "batchSplit", "convGroupSplit",
             "outChanSplit.parallel", "inChanSplit.serial", "outChanSplit.serial",
             "inChanSplit.parallel")  # fmt: skip
#: The variables whose product ``getUsedTiles`` bounds by the tiles.
_TILE_VARS = ("fieldSplit[0]", "kernelSplit[0]", "fieldSplit[1]", "batchSplit",
              "convGroupSplit", "outChanSplit.parallel", "inChanSplit.parallel")  # fmt: skip
#: Each channel split's partner in ``totalInChanSplit`` / ``totalOutChanSplit``.
_PAIRS = {"inChanSplit.parallel": "inChanSplit.serial", "inChanSplit.serial":
          "inChanSplit.parallel", "outChanSplit.parallel": "outChanSplit.serial",
          "outChanSplit.serial": "outChanSplit.parallel"}  # fmt: skip


def _greatest(var: str, bound: int, assigned: Mapping[str, int], tiles: int) -> int:
    """A variable's greatest value after ``Product::propagate`` with the values
    ``assigned`` (the others at their least, 1)."""
    top = bound
    if var in _TILE_VARS:
        used = 1
        for other in _TILE_VARS:
            used *= assigned.get(other, 1) if other != var else 1
        top = min(top, tiles // used)
    partner = _PAIRS.get(var)
    if partner is not None:
        top = min(top, bound // assigned.get(partner, 1))
    return top


def search_first(
    partitions: Sequence[Mapping[str, int]], bounds: Mapping[str, int], tiles: int
) -> Mapping[str, int]:
    """Of ``partitions`` (each a value of every name in :data:`VARIABLES`; equally costed),
    the one popsolver's search reaches first (module docstring). ``bounds``: each
    variable's greatest value before propagation (its size in grains).

    Raises
    ------
    ValueError
        When ``partitions`` is empty or a partition or ``bounds`` lacks a variable.
    """
    if not partitions:
        raise ValueError("search_first: no partitions (hint: pass the tied partitions)")
    for p in (*partitions, bounds):
        missing = [v for v in VARIABLES if v not in p]
        if missing:
            raise ValueError(f"search_first: {dict(p)} lacks {missing} (required: {VARIABLES})")
    left = list(partitions)
    assigned: dict[str, int] = {}
    while len(left) > 1:
        sizes = {v: _greatest(v, int(bounds[v]), assigned, tiles) - 1
                 for v in VARIABLES if v not in assigned}  # fmt: skip
        open_ = {v: s for v, s in sizes.items() if s > 0}
        if not open_:
            break
        # (least domain, then first created: dicts keep VARIABLES' order, min keeps the first)
        var = min(open_, key=open_.__getitem__)
        value = min(int(p[var]) for p in left)
        left = [p for p in left if int(p[var]) == value]
        assigned[var] = value
        for v, s in sizes.items():  # (a variable left with one value is assigned)
            if s == 0:
                assigned[v] = 1
    return left[0]
