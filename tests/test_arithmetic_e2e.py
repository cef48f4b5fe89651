"""Arithmetic end to end through the real rules (benchmark_source, benchmark_items, generate, score,
aggregate) on the default run's shape: the embedded model's reference, its noise floor and the two
task rungs of config/config.yaml answer the default config's offline set; each rung's paired verdict
lands in points.parquet and the report ranks it. The jobs' own CPU times (their `benchmark:` files) are
what the default run pays for the exam: printed, and held under the budget the default allows. One
llama.cpp thread, so that a job's CPU time is its time on an idle core whatever else the machine runs
(two threads spin-wait for each other when the machine is loaded, and their wall time is the load's)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from quantladder.io import read_jsonl
from pipeline_util import default_config, scratch_snakemake, task_workdir

REPO = Path(__file__).resolve().parents[1]
FAM, CARD = "smollm2", "testcard"
BUDGET_S = 60  # the default run's allowance for this exam: ~60 s of job time

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(smollm_f16, smollm_q4km, smollm_q2k, tmp_path_factory):
    wd = tmp_path_factory.mktemp("arith-e2e")
    default = default_config()
    rungs = {"F16": ("reference", smollm_f16), "Q4_K_M": ("quantized", smollm_q4km), "Q2_K": ("quantized", smollm_q2k)}
    cfg = {
        "card": CARD, "threads": 1,
        "families": {FAM: {"source": {"path": str(smollm_f16)}, "reference": "F16", "rungs": ["Q4_K_M", "Q2_K"]}},
        "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory", "energy")},
        "benchmarks": {"arithmetic": default["benchmarks"]["arithmetic"]},  # the default run's section as it is
        "generation": default["generation"],
    }
    task_workdir(wd, cfg, rungs, "arithmetic")
    scratch_snakemake(wd, f"results/{CARD}/points.parquet")
    return wd


def _job_times(wd: Path) -> dict[str, tuple[float, float]]:
    """(wall s, CPU s) of every job, from Snakemake's benchmark files."""
    out = {}
    for tsv in sorted((wd / "logs" / "benchmarks").rglob("*.tsv")):
        with open(tsv) as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        out[str(tsv.relative_to(wd / "logs" / "benchmarks"))] = (float(row["s"]), float(row["cpu_time"]))
    return out


def test_every_rung_is_scored_and_compared_with_its_reference(run):
    import pandas as pd

    n = len(read_jsonl(run / f"results/{CARD}/points/{FAM}/F16/f16/arithmetic/verdicts.jsonl"))
    assert n == 16  # 2 kinds x 4 levels x 2
    for series, rung in (("points", "F16"), ("points", "Q4_K_M"), ("points", "Q2_K"), ("noise", "F16")):
        verdicts = read_jsonl(run / f"results/{CARD}/{series}/{FAM}/{rung}/f16/arithmetic/verdicts.jsonl")
        assert len(verdicts) == n
        assert all(v["error_type"] in (None, "no_number", "wrong_answer") for v in verdicts)
        assert all((v["extracted"] == v["answer"]) == v["correct"] for v in verdicts)
    df = pd.read_parquet(run / f"results/{CARD}/points.parquet")
    head = df[(df.benchmark == "arithmetic") & (df.metric == "exact_match") & df.subset.isna()]
    assert set(head.rung) == {"F16", "Q4_K_M", "Q2_K"}
    for rung in ("Q4_K_M", "Q2_K"):
        r = head[head.rung == rung].iloc[0]
        assert r.n == n and not pd.isna(r.delta) and r.delta_ci_low <= r.delta <= r.delta_ci_high
        assert isinstance(r.verdict, str) and r.verdict
    flips = df[(df.benchmark == "arithmetic") & (df.metric == "flip_rate") & (df.rung == "Q2_K")]
    assert not flips.empty  # per-item verdicts flow through the flips like every exam's
    assert not df[(df.benchmark == "arithmetic") & (df.metric == "noise_flip_rate")].empty
    from quantladder import report

    html = report.render(df, CARD)
    first = html[html.index('id="losesfirst-'):]
    assert 'data-domain="arithmetic"' in first[:first.index("</section>")]


def test_the_default_runs_exam_costs_what_it_may(run):
    times = _job_times(run)
    wall, cpu = (round(sum(t[i] for t in times.values()), 1) for i in (0, 1))
    print("arithmetic jobs (wall s, CPU s):", times, f"total wall {wall} s, CPU {cpu} s")
    assert sum(k.startswith("generate/") for k in times) == 4 and sum(k.startswith("score/") for k in times) == 4
    assert cpu < BUDGET_S, times
