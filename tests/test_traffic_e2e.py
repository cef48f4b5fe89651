"""Your traffic end to end through the real rules (benchmark_source, benchmark_items, generate, score,
reply_logits, fidelity, aggregate): the reference rung and a low rung of the embedded model answer the
example traffic file, and the traffic rows land in points.parquet for the task rungs: clean replies
with their paired verdict, identical replies and flips, and the fidelity rows (teacher-forced KLD on
the reference's replies and on the logged ones, first divergence, length and loop change)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pipeline_util import scratch_snakemake, task_workdir
from quantladder.io import read_json, read_jsonl

REPO = Path(__file__).resolve().parents[1]
FAM, CARD = "smollm2", "testcard"
RUNGS = {"F16": "reference", "Q2_K": "quantized"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(smollm_f16, smollm_q2k, tmp_path_factory):
    wd = tmp_path_factory.mktemp("traffic-e2e")
    cfg = {
        "card": CARD,
        "threads": 1,
        "families": {FAM: {"source": {"path": str(smollm_f16)}, "reference": "F16", "rungs": ["Q2_K"]}},
        "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory", "energy")},
        "benchmarks": {"traffic": {"enabled": True, "source": {"path": str(REPO / "config/traffic/example.jsonl")},
                                   "max_new_tokens": 64}},
        "generation": {"n_parallel": 1, "noise_floor": {"enabled": False}},
    }
    task_workdir(wd, cfg, {"F16": ("reference", smollm_f16), "Q2_K": ("quantized", smollm_q2k)}, "traffic",
                 rules=("common", "tasks", "fidelity", "aggregate"))
    scratch_snakemake(wd, f"results/{CARD}/points.parquet", timeout=1800)
    return wd


def test_traffic_rows_land_in_the_dataset_for_every_task_rung(run):
    df = pd.read_parquet(run / f"results/{CARD}/points.parquet")
    t = df[df["benchmark"] == "traffic"]
    for rung in RUNGS:  # the headline, with its n, on both rungs
        r = t[(t["rung"] == rung) & (t["metric"] == "clean_reply") & t["subset"].isna()]
        assert len(r) == 1 and r["n"].iloc[0] == 8 and r["unit"].iloc[0] == "%"
    low = t[t["rung"] == "Q2_K"]
    got = {(m, s): v for m, s, v in zip(low["metric"], low["subset"].fillna(""), low["value"])}
    for key in [("identical_to_reference", ""), ("flip_rate", ""), ("reply_length_change", ""),
                ("degenerate_change", ""), ("teacher_kld", "reference_replies"), ("teacher_same_top", "reference_replies"),
                ("teacher_kld", "logged_replies"), ("teacher_same_top", "logged_replies")]:
        assert key in got, key
    assert got[("teacher_kld", "reference_replies")] > 0 and 0 < got[("teacher_same_top", "reference_replies")] <= 100
    kld = low[(low["metric"] == "teacher_kld") & (low["subset"] == "reference_replies")].iloc[0]
    assert kld["stderr"] > 0 and kld["unit"] == "nats"
    # the paired verdict of the headline, as for every exam
    head = low[(low["metric"] == "clean_reply") & low["subset"].isna()].iloc[0]
    assert "delta" in low.columns and pd.notna(head["delta"])
    # the teacher-forced rows count every reply token of the reference's replies
    gens = read_jsonl(run / f"results/{CARD}/points/{FAM}/F16/f16/traffic/generations.jsonl")
    assert kld["n"] == sum(len(g["reply_ids"]) for g in gens if g["reply_ids"])
    logged = low[(low["metric"] == "teacher_kld") & (low["subset"] == "logged_replies")].iloc[0]
    assert logged["n"] == sum(len(g.get("logged_ids") or []) for g in gens) > 0
    info = read_json(run / f"results/{CARD}/reference_logits/{FAM}/replies-traffic.json")
    assert info["n_sequences"] == len([g for g in gens if g["reply_ids"]]) + 5
