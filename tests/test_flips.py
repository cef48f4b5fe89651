"""Flips: verdict changes between the reference rung and another rung, counted both ways."""

import math

from quantladder import flips


def v(pairs):
    return [{"item_id": i, "correct": c} for i, c in pairs]


def test_flips_counts_both_directions_and_hides_nothing_in_net_accuracy():
    ref = v([(1, True), (2, True), (3, False), (4, False), (5, True)])
    rung = v([(1, False), (2, True), (3, True), (4, False), (5, True)])
    f = flips.flips(ref, rung)
    # same accuracy (3/5 both), yet 2 of 5 items flipped
    assert (f["n_items"], f["right_to_wrong"], f["wrong_to_right"]) == (5, 1, 1)
    assert math.isclose(f["flip_rate_pct"], 40.0)
    assert math.isclose(f["flip_rate_err_pct"], 100 * math.sqrt(0.4 * 0.6 / 5))


def test_flips_only_compares_common_items():
    f = flips.flips(v([(1, True), (2, False)]), v([(2, True), (3, True)]))
    assert f["n_items"] == 1 and f["wrong_to_right"] == 1
    assert f["missing_in_reference"] == 1 and f["missing_in_rung"] == 1


def test_reference_against_itself_has_no_flips_and_rows_have_units():
    ref = v([(i, i % 3 == 0) for i in range(30)])
    f = flips.flips(ref, ref)
    assert f["flip_rate_pct"] == 0.0
    rows = flips.flip_metric_rows(f, subset="all")
    assert {r["metric"] for r in rows} == {"flip_rate", "flips_right_to_wrong", "flips_wrong_to_right"}
    assert all(r["unit"] == "%" and r["n"] == 30 for r in rows)
