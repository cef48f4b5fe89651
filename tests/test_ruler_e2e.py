"""RULER end to end on the embedded model (SmolLM2-135M-Instruct, Q8_0) at a short length, with
an f16 and a q8_0 KV cache: items -> answers (resumable) -> verdicts -> metric rows -> metrics.json.
A second, slow test runs the same through Snakemake's rules.

The 135M model is not expected to retrieve well; what is checked is that every figure is there,
with its unit, length and KV type, and that the files follow the contracts in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import json

import pytest
import yaml

from quantladder import config as qconfig
from quantladder.benchmarks import ruler
from quantladder.benchmarks.ruler import build, haystack
from quantladder.benchmarks.ruler import run as ruler_run
from quantladder.benchmarks.ruler import score as ruler_score
from quantladder.corpora import pydoc_topics_text
from quantladder.engine import Engine, EngineSettings
from quantladder.gguf_meta import read_info
from quantladder.io import read_jsonl, sha256_file
from quantladder.points import Point

LENGTH = 1024
TASKS = ["niah_single_1", "vt"]


@pytest.fixture(scope="module")
def items(smollm_q8, tmp_path_factory):
    with Engine(smollm_q8, EngineSettings(n_ctx=256, n_threads=1)) as eng:
        fmt = build.PromptFormat(eng)
        path = tmp_path_factory.mktemp("items") / "items.jsonl"
        its = build.build_items(fmt=fmt, tasks=TASKS, lengths=[LENGTH], n_samples=1, seed=42,
                                words=haystack.word_lists(), essay=haystack.essay_words(pydoc_topics_text()),
                                out_path=path)
    return its, path


def _point(cfg, model, kv):
    record = {"sha256": sha256_file(model), "info": read_info(model).as_dict()}
    return Point(config=cfg, card="test-card", family=qconfig.families(cfg)[0], rung="Q8_0", kv=kv,
                 benchmark="ruler", model_path=str(model), model_record=record, anchor={}, threads=1)


@pytest.mark.parametrize("kv", ["f16", "q8_0"])
def test_ruler_point_end_to_end(tmp_path, smollm_q8, items, kv, repo_root):
    its, items_path = items
    cfg = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    cfg["card"] = "test-card"
    cfg["kv_types"] = ["f16", "q8_0"]
    pt = _point(cfg, smollm_q8, kv)
    gen = tmp_path / "generations.jsonl"

    # A budget of zero answers nothing and says so: the point would be marked incomplete.
    r0 = ruler_run.generate(its, pt.model_path, pt.engine_settings, gen, time_budget_s=0.0)
    assert r0["done"] == 0 and not r0["complete"] and r0["stopped_by_budget"]

    r1 = ruler_run.generate(its, pt.model_path, pt.engine_settings, gen)
    assert r1["complete"] and r1["done"] == len(its) == len(TASKS)
    eng = r1["engine"][LENGTH]
    assert eng["n_ctx"] == LENGTH and (eng["type_k"], eng["type_v"]) == (pt.type_k, pt.type_v)
    assert eng["flash_attn"] == (kv == "q8_0")  # a quantized V cache needs flash attention
    gens = read_jsonl(gen)
    for g in gens:
        assert g["n_prompt_tokens"] + g["n_gen_tokens"] <= LENGTH
        assert g["n_gen_tokens"] <= {"niah_single_1": 128, "vt": 30}[g["task"]]
        assert isinstance(g["degenerate"], bool) and g["peak_rss_bytes"] > 0 and g["seconds"] > 0

    # Resume: a rerun finds every item done and appends nothing.
    r2 = ruler_run.generate(its, pt.model_path, pt.engine_settings, gen)
    assert r2["complete"] and r2["engine"] == {} and len(read_jsonl(gen)) == len(gens)

    verdicts = ruler_run.verdicts(its, gens)
    assert {v["subset"] for v in verdicts} == set(TASKS)
    for v in verdicts:
        assert v["correct"] == (v["score"] == 1.0) and (v["error_type"] is None) == v["correct"]
    rows, summary = ruler_score.aggregate(verdicts)
    rows += ruler_run.memory_rows(gens, read_info(smollm_q8), pt.type_k, pt.type_v, [LENGTH])
    rows += ruler_run.timing_rows(gens)
    by = {(r["metric"], r["subset"], r["n_ctx"]): r for r in rows}
    for t in TASKS:
        row = by[("score", t, LENGTH)]
        assert row["unit"] == "%" and row["n"] == 1 and 0 <= row["value"] <= 100
    assert by[("score_avg", None, LENGTH)]["unit"] == "%"
    assert by[("effective_length", None, None)]["value"] in (0, LENGTH)
    assert by[("degenerate_items", None, None)]["n"] == len(TASKS)
    kv_pred = by[("kv_cache_predicted_bytes", None, LENGTH)]
    info = read_info(smollm_q8)
    assert kv_pred["unit"] == "bytes" and kv_pred["value"] == info.kv_bytes(LENGTH, pt.type_k, pt.type_v)
    assert by[("peak_rss_bytes", None, LENGTH)]["value"] > kv_pred["value"]
    assert by[("seconds_per_item", None, LENGTH)]["unit"] == "s"

    data = {"name": "ruler", "version": ruler.RULER_VERSION, "sha256": sha256_file(items_path),
            "kv_cache": {"kv": kv, "type_k": pt.type_k, "type_v": pt.type_v}}
    doc = pt.write_metrics(tmp_path / "metrics.json", rows, data=data, engine={str(LENGTH): eng})
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["benchmark"] == "ruler" and saved["status"] == "unanchored"
    assert saved["manifest"]["point"]["kv"] == kv and saved["manifest"]["data"]["sha256"] == data["sha256"]
    assert saved["manifest"]["engine_resolved"][str(LENGTH)]["type_v"] == pt.type_v
    assert len(saved["rows"]) == len(rows) == len(doc["rows"])
    assert (tmp_path / "manifest.json").exists()

    # Answers of another run (other items, model or KV) are moved aside, never resumed from.
    r3 = ruler_run.generate(its, pt.model_path, pt.engine_settings, gen, time_budget_s=0.0, run_key="other")
    assert r3["done"] == 0 and read_jsonl(gen) == []
    assert len(read_jsonl(next(tmp_path.glob(".generations.jsonl.*.stale")))) == len(gens)


def test_q8_0_kv_predicts_about_half_the_f16_cache(smollm_q8):
    info = read_info(smollm_q8)
    f16, q8 = info.kv_bytes(LENGTH, "f16", "f16"), info.kv_bytes(LENGTH, "q8_0", "q8_0")
    assert q8 / f16 == pytest.approx(34 / 64)


@pytest.mark.slow
def test_ruler_rules_through_snakemake(tmp_path):
    """The rules: items once per family, answers and scores per (rung, kv), metrics.json + verdicts."""
    from pipeline_util import small_config, snakemake, write_config

    cfg = small_config(rungs=("Q8_0",), benchmarks_on=("ruler",))
    cfg["card"] = "test-card"
    cfg["kv_types"] = ["f16", "q8_0"]
    cfg["benchmarks"]["ruler"].update({"tasks": ["niah_single_1"], "lengths": [768, 16384], "samples": 1})
    conf = write_config(tmp_path, cfg)
    fam = qconfig.families(cfg)[0]
    targets = [f"results/test-card/points/{fam}/Q8_0/{kv}/ruler/metrics.json" for kv in ("f16", "q8_0")]
    # Targets before --configfile: that option takes every word after it.
    snakemake(tmp_path, *targets, "--configfile", str(conf))
    meta = json.loads((tmp_path / f"resources/ruler/{fam}/items.json").read_text())
    assert meta["lengths"] == [768] and meta["lengths_dropped"] == [16384]  # SmolLM2 trained at 8192
    for kv, target in zip(("f16", "q8_0"), targets):
        m = json.loads((tmp_path / target).read_text())
        assert m["status"] in ("ok", "unanchored") and not m["incomplete"]
        assert m["manifest"]["point"]["type_k"] == kv
        assert m["manifest"]["data"]["sha256"] == meta["sha256"]
        metrics = {(r["metric"], r["subset"], r["n_ctx"]) for r in m["rows"]}
        assert ("score", "niah_single_1", 768) in metrics and ("kv_cache_predicted_bytes", None, 768) in metrics
        point_dir = (tmp_path / target).parent
        assert json.loads((point_dir / "generations.done.json").read_text())["complete"]
        assert len(read_jsonl(point_dir / "generations.jsonl")) == 1
        assert len(read_jsonl(point_dir / "verdicts.jsonl")) == 1
