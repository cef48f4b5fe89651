"""The offline thinking family end to end (issue 43, deliverables 4 and 5): config/examples/thinking.yaml
through the real workflow (the source's copy with llama.cpp's vendored QwQ template written into it by
acquire_source, the reference and the Q4_K_M rung made from it, the arithmetic items generated with the
thinking's budget forced by the engine, scored on the answer, aggregated and reported), the measures
switched off so it takes about a minute. The thinking figures in the dataset are checked against the
reply records they come from, the report shows them in "where each rung loses first", find's evidence
and recommend's accepted losses read them; the hub example plans under `snakemake -n`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quantladder import stats, thinking
from quantladder.io import read_json, read_jsonl
from pipeline_util import planned_jobs, snakemake

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config" / "examples" / "thinking.yaml"
FAM, CARD = "smollm2-thinking", "testcard"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("thinking-e2e")
    small = wd / "small.yaml"
    small.write_text(yaml.safe_dump({"card": CARD, "threads": 2,
                                     "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory",
                                                                                   "energy")}}))
    snakemake(wd, f"results/{CARD}/report.html", "--configfile", str(EXAMPLE), str(small))
    return wd, [str(EXAMPLE), str(small)]


def _gens(wd: Path, rung: str, series: str = "points") -> list[dict]:
    return read_jsonl(wd / f"results/{CARD}/{series}/{FAM}/{rung}/f16/arithmetic/generations.jsonl")


def test_the_source_copy_carries_the_vendored_thinking_template(run):
    wd, _ = run
    rec = read_json(wd / f"resources/models/{FAM}/source/source.gguf.json")
    assert rec["chat_template"]["vendored"] == "Qwen-QwQ-32B" and rec["sha256"] != rec["sha256_source"]
    for rung in ("F16", "Q4_K_M"):
        gens = _gens(wd, rung)
        # rendered as a thinking model's prompt, split, the budget forced: every record says how its thinking ended
        assert gens and all(g["reasoning_format"] == "think" and g["thinking_budget"] == 4 for g in gens)
        assert all(g["thinking_end"] in ("model", "budget", "stop", "context") for g in gens)
        forced = [g for g in gens if g["thinking_end"] == "budget"]
        assert all(g["text"].rstrip().endswith("</think>") or "</think>" in g["text"] for g in forced)


def test_the_dataset_holds_the_thinking_figures_the_records_give(run):
    import pandas as pd

    wd, _ = run
    df = pd.read_parquet(wd / f"results/{CARD}/points.parquet")
    t = df[(df.family == FAM) & df.metric.isin(metrics_thinking())]
    for rung in ("F16", "Q4_K_M"):
        gens = [g for g in _gens(wd, rung) if g["thinking_end"] is not None]
        row = t[(t.rung == rung) & (t.metric == "think_close_rate")].iloc[0]
        assert row.value == pytest.approx(100 * sum(g["thinking_end"] == "model" for g in gens) / len(gens))
        assert row.n == len(gens)
        cap = t[(t.rung == rung) & (t.metric == "think_cap_rate")].iloc[0]
        assert cap.value == pytest.approx(100 * sum(g["thinking_end"] in ("budget", "context") for g in gens) / len(gens))
        mean = t[(t.rung == rung) & (t.metric == "think_tokens_mean")].iloc[0]
        assert mean.value == pytest.approx(sum(g["thinking_tokens"] for g in gens) / len(gens))
    # paired against the reference on the same items: Tango's interval on the per-item closure
    ref = {g["item_id"]: g for g in _gens(wd, "F16")}
    rung = {g["item_id"]: g for g in _gens(wd, "Q4_K_M")}
    both = [i for i in ref if i in rung and ref[i]["thinking_end"] and rung[i]["thinking_end"]]
    loss = sum(ref[i]["thinking_end"] == "model" and rung[i]["thinking_end"] != "model" for i in both)
    gain = sum(ref[i]["thinking_end"] != "model" and rung[i]["thinking_end"] == "model" for i in both)
    row = t[(t.rung == "Q4_K_M") & (t.metric == "think_close_rate")].iloc[0]
    lo, hi = stats.tango_interval(loss, gain, len(both))
    assert (row.delta_ci_low, row.delta_ci_high) == pytest.approx((100 * lo, 100 * hi))
    assert row.verdict in ("loss", "gain", "no loss detectable", "loss within noise", "gain within noise")
    assert "noise floor" in row.verdict_text  # the reference generated again is its noise floor
    # the length ratio: measured where two or more items closed on their own in both, else absent with why
    closed = [i for i in both if ref[i]["thinking_end"] == rung[i]["thinking_end"] == "model"]
    ratio = t[(t.rung == "Q4_K_M") & (t.metric == "think_tokens_ratio")].iloc[0]
    if len(closed) >= 2:
        assert ratio.delta_ci_low + 1 <= ratio.value <= ratio.delta_ci_high + 1
    else:
        assert pd.isna(ratio.value) and ratio.verdict_text.startswith("absent:")
    # flips by cause sum to the flips
    flips = df[(df.family == FAM) & (df.rung == "Q4_K_M") & (df.metric == "flip_rate") & df.subset.isna()
               & (df.benchmark == "arithmetic")].iloc[0]
    split = t[(t.rung == "Q4_K_M") & t.metric.isin(["think_flip_cap_rate", "think_flip_answer_rate"])]
    assert split.value.sum() == pytest.approx(flips.value)
    # each part compared apart
    parts = t[(t.rung == "Q4_K_M") & (t.metric == "thinking_identical_to_reference")].iloc[0]
    assert parts.value == pytest.approx(100 * sum(ref[i]["reasoning"] == rung[i]["reasoning"] for i in rung) / len(rung))


def metrics_thinking() -> list[str]:
    from quantladder import metrics

    return metrics.in_group("thinking")


def test_the_report_shows_the_thinking_where_each_rung_loses_first(run):
    wd, _ = run
    html = (wd / f"results/{CARD}/report.html").read_text()
    first = html[html.index('id="losesfirst-'):]
    section = first[:first.index("</section>")]
    table = section[section.index(f"table-losses-{CARD}-{FAM}"):]
    assert "the thinking <small>" in table
    for m in ("think_close_rate", "think_cap_rate", "think_tokens_ratio", "think_flip_cap_rate"):
        assert f'data-think="{m}"' in table
    assert "the thinking " in table and ("loses on these items" in table or "shows no loss" in table)


def test_find_and_recommend_read_the_thinking_of_the_run(run):
    import pandas as pd

    from quantladder import find as qfind
    from quantladder.config import load_config

    wd, files = run
    cfg = load_config(files)
    sp = qfind.spec(cfg, {"family": FAM, "mem": "1TiB", "ctx": 1024, "reference": "F16", "rungs": ["Q4_K_M"],
                          "accept": "think_close>=-50pt, think_cap<=50pt"})
    ev = qfind.evidence(sp, cfg, CARD, "Q4_K_M", sp.alpha, root=wd)
    got = {f["figure"]: f for f in ev["figures"]}
    close = got["arithmetic:think_close_rate"]
    d = thinking.paired_figure("think_close_rate", _gens(wd, "F16"), _gens(wd, "Q4_K_M"), level=1 - 2 * sp.alpha)
    assert (close["ci_low"], close["ci_high"]) == pytest.approx((d["ci_low"], d["ci_high"]))
    # 6 items with no closure change: within 50 points, not within 2
    assert close["state"] == "non-inferior"
    df = pd.read_parquet(wd / f"results/{CARD}/points.parquet")
    wide, _ = thinking.accept_check(df, thinking.parse_accept("think_close>=-50pt"))
    narrow, _ = thinking.accept_check(df, thinking.parse_accept("think_close>=-2pt"))
    assert (FAM, "Q4_K_M", "f16") not in wide and "undetermined" in narrow[(FAM, "Q4_K_M", "f16")]


def test_the_hub_thinking_example_plans(tmp_path):
    """config/examples/thinking-hub.yaml (Qwen3 and gpt-oss from the hub, reasoning on with a budget,
    larger reply budgets and contexts) plans under `snakemake -n`: both families' files fetched,
    their exams generated, find's walk over the thinking figures and the recommendation planned."""
    example = REPO / "config" / "examples" / "thinking-hub.yaml"
    r = snakemake(tmp_path, "-n", "--configfile", str(example))
    jobs = planned_jobs(r.stdout + r.stderr)
    fams = {"qwen3-4b", "gpt-oss-20b"}
    assert {wc["family"] for rule, wc in jobs if rule == "acquire_source"} == fams
    gen = {(wc["family"], wc["task"]) for rule, wc in jobs if rule == "generate"}
    assert {f for f, _ in gen} == fams and ("gpt-oss-20b", "bfcl") in gen
    assert not any(b == "ruler" for _, b in gen)
    assert {rule for rule, _ in jobs} >= {"recommend", "report"}
    assert "checkpoint find_step:" in r.stdout + r.stderr  # the walk over qwen3-4b's thinking figures
    cfg = yaml.safe_load(example.read_text())
    assert cfg["generation"]["reasoning_budget"] > 0 and cfg["benchmarks"]["bfcl"]["n_ctx"] > 8192
