"""The metric registry: producers write only declared metrics, consumers name only declared ones.

The bugs this guards against were real (found reading the code): the report looked for
`joules_per_token` and `peak_vram_bytes`, the recommender for `accuracy_items_run` and
`("memory", "n_ctx_train")`, and no producer wrote any of them, so charts stayed empty and tests
stayed green on a hand-written fixture.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from quantladder import catalog, dataset, metrics  # noqa: F401  (catalog: every figure declared)
from quantladder.metrics import Metric, MetricError

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "workflow" / "quantladder"
# The modules that read figures (the dataset view, report, recommender and its ranking, anchor gate, plan).
CONSUMERS = ["dataset_view.py", *sorted(f"report/{p.name}" for p in (PKG / "report").glob("*.py")), "recommend.py",
             "rank.py", "anchors.py", "plan.py"]
# A string literal that reads like a figure's name: what a consumer would misspell.
FIGURE_LIKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*_(bytes|per_s|token|tokens|rate|share|items|pct|s|w|j|"
                         r"mean|ratio|bits|seconds)$|^(ppl|kld_[a-z0-9_]+|pass_at_1|accuracy|score_avg|score|"
                         r"same_top_token|n_ctx_train|n_parallel|effective_length)$")


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


def test_every_metric_a_consumer_names_is_declared():
    reg = metrics.registry()
    missing = {}
    for name in CONSUMERS:
        path = PKG / name
        if not path.exists():
            continue
        bad = sorted(s for s in _literals(path) if FIGURE_LIKE.match(s) and s not in reg and s not in NOT_METRICS)
        if bad:
            missing[name] = bad
    assert not missing, f"consumers name metrics nobody declares: {missing}"


# Figure-looking strings in consumers that are not metric names (column names, JSON keys of a
# recommendation): listed so that the check above stays strict about everything else.
NOT_METRICS = {
    "n_items",  # report: a flips count key
    "n_parallel",  # a dataset column (the point's generation setting), and a key of generations.json
    # recommend: the answer's JSON keys
    "buffer_bytes", "context_tokens", "free_bytes", "kv_bytes", "memory_budget_bytes", "memory_bytes",
    "min_tg_tokens_per_s", "used_bytes",
    # anchors: the speed gate's comparison keys
    "deviation_pct", "ours_tokens_per_s", "stderr_pct", "theirs_tokens_per_s", "tolerance_pct",
    # plan: the answer's JSON keys
    "actual_s", "discordance_pct", "discordance_upper_pct", "output_tokens", "predicted_s", "prompt_tokens",
    "thinking_tokens",  # plan: a cost record's thinking tokens (the per-reply record's key, thinking.py)
    # find: the answer's JSON keys (its memory at the stated context)
    "predicted_bytes",
}


def test_the_checker_sees_a_misspelled_name(tmp_path):
    """The consumer check above is not vacuous: the old report's name is caught."""
    p = tmp_path / "consumer.py"
    p.write_text('COST = ("joules_per_token", "peak_vram_bytes", "tg_tokens_per_s")\n')
    reg = metrics.registry()
    bad = sorted(s for s in _literals(p) if FIGURE_LIKE.match(s) and s not in reg)
    assert bad == ["joules_per_token", "peak_vram_bytes"]


def test_writing_an_undeclared_metric_is_an_error():
    with pytest.raises(MetricError, match="joules_per_token.*not declared.*did you mean"):
        metrics.row("joules_per_token", 1.0)
    with pytest.raises(MetricError, match="declared in 'bytes'"):
        metrics.row("peak_mem_bytes", 10.0, unit="MiB")
    with pytest.raises(MetricError, match="without an uncertainty"):
        metrics.row("file_bytes", 10, stderr=1.0)
    with pytest.raises(MetricError, match="needs its reason"):
        metrics.row("ppl", None)
    with pytest.raises(MetricError, match="NaN"):
        metrics.row("ppl", float("nan"))
    r = metrics.row("ppl", None, status="absent", status_reason="no corpus")
    assert r["value"] is None and r["status"] == "absent"


def test_a_name_is_declared_once():
    m = metrics.get("ppl")
    metrics.declare(m)  # the same declaration again is harmless
    with pytest.raises(ValueError, match="declared twice"):
        metrics.declare(Metric("ppl", "nats", "another meaning", ("perplexity",)))


def test_every_benchmark_declares_a_headline_and_a_score():
    from quantladder import benchmarks

    for name in benchmarks.names():
        assert metrics.headlines(name), f"{name} declares no headline metric"
        s = metrics.score_metric(name)
        assert s is not None, f"{name} declares no recommendation score"
        m = metrics.get(s)
        assert m.unit == "%" and m.higher_is_better is True
        assert sum(1 for x in metrics.registry().values() if name in x.score_for) == 1


def test_every_declared_writer_exists():
    from quantladder import benchmarks

    known = set(benchmarks.names()) | {"perplexity", "speed", "memory", "energy", metrics.TASK}
    for m in metrics.registry().values():
        assert set(m.writers) <= known, (m.name, m.writers)


def test_dataset_doc_table_is_generated_from_the_registry():
    text = (REPO / "docs" / "dataset.md").read_text()
    assert metrics.markdown() in text, "docs/dataset.md: regenerate the metric table (python -m quantladder.docs)"
