"""Your traffic end to end through the real rules (benchmark_source, benchmark_items, generate, score,
reply_logits, fidelity, aggregate, report): the reference rung and a low rung of the embedded model
answer a user's traffic file, and the traffic rows land in points.parquet for the task rungs: clean
replies with their paired verdict, identical replies and flips, and the fidelity rows (teacher-forced
KLD on the reference's replies and on the logged ones, first divergence, length and loop change).
The file is the example's 8 conversations, 11 more, and one pasted log longer than traffic's context
(which once crashed every score job): that one is failed as ``prompt_too_long``, counted, named in
the point's reason and the report, and left out of the fidelity pass, and the run reaches its report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline_util import scratch_snakemake, task_workdir
from quantladder.io import read_json, read_jsonl

REPO = Path(__file__).resolve().parents[1]
FAM, CARD = "smollm2", "testcard"
RUNGS = {"F16": "reference", "Q2_K": "quantized"}

pytestmark = pytest.mark.slow


LONG = "paste-log"  # a pasted log: about 3,400 tokens, over traffic's n_ctx of 2048
SHORT = ["Name a colour.", "What is 2 + 2?", "Say hello in French.", "Name a fruit.", "What day follows Monday?",
         "Name a planet.", "What is the opposite of hot?", "Spell the word cat.", "Name a river.",
         "What colour is the sky?", "Count to three."]


def user_file(path: Path) -> Path:
    """20 conversations: the example's, 11 short ones and the pasted log (with a logged reply)."""
    lines = [json.loads(x) for x in (REPO / "config/traffic/example.jsonl").read_text().splitlines() if x.strip()]
    lines += [{"id": f"short-{i}", "messages": [{"role": "user", "content": q}]} for i, q in enumerate(SHORT)]
    log = "\n".join(f"2025-03-15 12:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 7} finished job {1000 + i} in "
                    f"{i % 13}.{i % 7}s" for i in range(88))
    lines.append({"id": LONG, "messages": [{"role": "user", "content": "Why is this job slow?\n\n" + log},
                                           {"role": "assistant", "content": "Worker 3 is slower than the others."}]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def run(smollm_f16, smollm_q2k, tmp_path_factory):
    wd = tmp_path_factory.mktemp("traffic-e2e")
    traffic = user_file(wd / "traffic.jsonl")
    cfg = {
        "card": CARD,
        "threads": 1,
        "families": {FAM: {"source": {"path": str(smollm_f16)}, "reference": "F16", "rungs": ["Q2_K"]}},
        "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory", "energy")},
        "benchmarks": {"traffic": {"enabled": True, "source": {"path": str(traffic)}, "max_new_tokens": 64}},
        "generation": {"n_parallel": 1, "noise_floor": {"enabled": False}},
    }
    task_workdir(wd, cfg, {"F16": ("reference", smollm_f16), "Q2_K": ("quantized", smollm_q2k)}, "traffic",
                 rules=("common", "tasks", "fidelity", "aggregate"))
    scratch_snakemake(wd, f"results/{CARD}/points.parquet", f"results/{CARD}/report.html", timeout=1800)
    return wd


def test_traffic_rows_land_in_the_dataset_for_every_task_rung(run):
    df = pd.read_parquet(run / f"results/{CARD}/points.parquet")
    t = df[df["benchmark"] == "traffic"]
    for rung in RUNGS:  # the headline, with its n, on both rungs
        r = t[(t["rung"] == rung) & (t["metric"] == "clean_reply") & t["subset"].isna()]
        assert len(r) == 1 and r["n"].iloc[0] == 20 and r["unit"].iloc[0] == "%"
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
    decoded = [g for g in gens if g["item_id"] != LONG]
    assert logged["n"] == sum(len(g.get("logged_ids") or []) for g in decoded) > 0
    info = read_json(run / f"results/{CARD}/reference_logits/{FAM}/replies-traffic.json")
    assert info["n_sequences"] == len([g for g in gens if g["reply_ids"]]) + 5
    assert info["left_out"]["items"] == [LONG] and "longer than its context" in info["left_out"]["reason"]


def test_a_conversation_longer_than_its_context_is_failed_counted_and_named(run):
    """The pasted log was never decoded: its verdict is prompt_too_long on every rung, counted in
    error_items, named in the point's reason (the dataset's and the report's); the other 19 are scored."""
    df = pd.read_parquet(run / f"results/{CARD}/points.parquet")
    t = df[df["benchmark"] == "traffic"]
    note = f"1 item longer than its context (ids {LONG})"
    for rung in RUNGS:
        mine = t[t["rung"] == rung]
        err = mine[(mine["metric"] == "error_items") & (mine["subset"] == "prompt_too_long")]
        assert list(err["value"]) == [1.0] and list(err["n"]) == [20]
        assert mine["status_reason"].str.contains(note, regex=False).any(), mine["status_reason"].unique()
        tokens = mine[(mine["metric"] == "reply_tokens") & mine["subset"].isna()]
        assert list(tokens["n"]) == [19]  # the mean length of the replies there are
        verdicts = read_jsonl(run / f"results/{CARD}/points/{FAM}/{rung}/f16/traffic/verdicts.jsonl")
        assert [v["error_type"] for v in verdicts if v["item_id"] == LONG] == ["prompt_too_long"]
        assert len(verdicts) == 20
    # the low rung's fidelity point (the reference has none) says what it left out
    fid = read_json(run / f"results/{CARD}/points/{FAM}/Q2_K/f16/fidelity-traffic/metrics.json")
    assert fid["left_out"]["items"] == [LONG] and fid["status"] != "failed"
    html = (run / f"results/{CARD}/report.html").read_text()
    assert note in html
