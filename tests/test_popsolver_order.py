"""popsolver's order of search over equally costed partitions
(:mod:`poplar_api.poplin.popsolver_order`), on cases worked by hand from its rule: the
least domain first (``max - min``), then the first created, each value from the least up."""

from __future__ import annotations

import pytest

from poplar_api.poplin.popsolver_order import VARIABLES, search_first

#: Row 15's form (docs/planner.md): a 14 x 14 output field, 3 kernel rows, batch 32, one
#: output-channel grain and two input-channel grains, on 1,472 tiles.
BOUNDS = {"fieldSplit[0]": 14, "fieldSplit[1]": 14, "kernelSplit[0]": 3, "batchSplit": 32,
          "convGroupSplit": 1, "outChanSplit.parallel": 1, "outChanSplit.serial": 1,
          "inChanSplit.parallel": 2, "inChanSplit.serial": 2}  # fmt: skip


def _p(batch: int, f0: int, f1: int, k: int = 3, ci: int = 2) -> dict[str, int]:
    one = dict.fromkeys(VARIABLES, 1)
    return {**one, "batchSplit": batch, "fieldSplit[0]": f0, "fieldSplit[1]": f1,
            "kernelSplit[0]": k, "inChanSplit.parallel": ci}  # fmt: skip


def test_row_15_field_split_before_batch() -> None:
    # domains after the channel and kernel splits: fieldSplit[0] 1..14 (13), fieldSplit[1]
    # 1..14, batchSplit 1..32 (31): fieldSplit[0] is branched first, 5 before 7
    a, b = _p(11, 7, 3), _p(16, 5, 3)
    assert search_first([a, b], BOUNDS, 1472) is b
    assert search_first([b, a], BOUNDS, 1472) is b


def test_a_smaller_domain_is_branched_first() -> None:
    # a batch of 8 (domain size 7 < 13): the batch split decides, 11 before 16 reversed
    bounds = {**BOUNDS, "batchSplit": 8}
    a, b = _p(4, 7, 3), _p(8, 5, 3)
    assert search_first([a, b], bounds, 1472) is a


def test_equal_domains_go_in_order_of_creation() -> None:
    # fieldSplit[0] and fieldSplit[1] both 1..14: fieldSplit[0] (created first) decides
    a, b = _p(16, 5, 3), _p(16, 3, 5)
    assert search_first([a, b], BOUNDS, 1472) is b


def test_the_tiles_narrow_the_domains() -> None:
    # a 20-row field (1..20, size 19) and a batch of 14 (1..14, size 13), nothing else
    # split: on 1,472 tiles the batch split is branched first (2 before 5)
    bounds = {**BOUNDS, "fieldSplit[0]": 20, "fieldSplit[1]": 1, "kernelSplit[0]": 1,
              "batchSplit": 14, "inChanSplit.parallel": 1, "inChanSplit.serial": 1}  # fmt: skip
    a, b = _p(5, 2, 1, k=1, ci=1), _p(2, 5, 1, k=1, ci=1)
    assert search_first([a, b], bounds, 1472) is b
    # on 10 tiles both are 1..10 (size 9): fieldSplit[0], created first, decides
    assert search_first([a, b], bounds, 10) is a


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="no partitions"):
        search_first([], BOUNDS, 1472)
    with pytest.raises(ValueError, match="lacks"):
        search_first([{"batchSplit": 1}], BOUNDS, 1472)
