"""Verdict parity with the official BFCL checker on a curated set of outputs.

tests/fixtures/bfcl/parity.json holds BFCL items, hand-written model outputs (optional parameters,
int-for-float, nested lists, tuples, parallel order, dotted names, Java/JavaScript types, dict
values, (ir)relevance, parse failures) and the verdict the official bfcl-eval checker gave each
(built by tests/fixtures/bfcl/build_parity.py; the official package is not needed here).
"""

import json
from pathlib import Path

import pytest

from quantladder.benchmarks.bfcl.score import verdict

FIXTURE = Path(__file__).parent / "fixtures" / "bfcl" / "parity.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def test_fixture_is_curated():
    cats = {c["category"] for c in CASES}
    assert {"simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
            "irrelevance", "live_relevance"} <= cats
    assert len(CASES) >= 90
    assert 0.2 < sum(c["valid"] for c in CASES) / len(CASES) < 0.8


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['id']}" for i, c in enumerate(CASES)])
def test_verdict_equals_official(case):
    item = {k: case[k] for k in ("id", "category", "function")}
    if "ground_truth" in case:
        item["ground_truth"] = case["ground_truth"]
    v = verdict(item, case["output"])
    assert v["correct"] == case["valid"], (case["output"], v)
    assert v["error_type"] == case["error_type"], (case["output"], v)
