"""RULER end to end on the embedded model (SmolLM2-135M-Instruct, Q8_0) at a short length, with
an f16 and a q8_0 KV cache: items -> the one generation loop -> the one score stage -> metrics.json.
A second, slow test runs the same through Snakemake's rules.

The 135M model is not expected to retrieve well; what is checked is that every figure is there,
with its unit, length and KV type, and that the files follow the contracts in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import json

import pytest
import yaml

from quantladder import config as qconfig
from quantladder import generation, scoring
from quantladder.benchmarks import ScoringContext, ruler
from quantladder.engine import Engine
from quantladder.gguf_meta import read_info
from quantladder.io import read_jsonl, sha256_file
from quantladder.points import Point

LENGTH = 1024
TASKS = ["niah_single_1", "vt"]


@pytest.fixture(scope="module")
def bench():
    return ruler.Ruler({"enabled": True, "tasks": TASKS, "lengths": [LENGTH], "samples": 1, "seed": 42})


@pytest.fixture(scope="module")
def items(bench, smollm_q8):
    source = bench.fetch_source("unused")
    its, facts = bench.build_items(source, reference_gguf=str(smollm_q8), family={"chat": True})
    return its, source, facts


def _point(cfg, model, kv):
    record = {"sha256": sha256_file(model), "info": read_info(model).as_dict()}
    return Point(config=cfg, card="test-card", family=qconfig.families(cfg)[0], rung="Q8_0", kv=kv,
                 benchmark="ruler", model_path=str(model), model_record=record, anchor={}, threads=1)


@pytest.mark.parametrize("kv", ["f16", "q8_0"])
def test_ruler_point_end_to_end(tmp_path, smollm_q8, bench, items, kv, repo_root):
    """Items in the model's own tokens -> the one loop (each length its own context, the point's KV
    types) -> the one score stage -> rows -> metrics.json."""
    its, source, facts = items
    cfg = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    cfg["card"] = "test-card"
    cfg["kv_types"] = ["f16", "q8_0"]
    pt = _point(cfg, smollm_q8, kv)
    assert facts["lengths"] == [LENGTH] and all(it.n_ctx == LENGTH for it in its)

    def loop(**kw):
        return generation.Loop(bench, its, key="k", store_dir=tmp_path, n_parallel=2,
                               engine_for=lambda n: Engine(pt.model_path, pt.engine_settings(n_ctx=n, n_parallel=2)),
                               env=bench.open_env(source, "generate"), **kw)

    r0 = loop(time_budget_s=0.0).run()  # the cap passes after the first wave: fewer than all, said so
    r1 = loop().run()
    assert r1.meta["complete"] and len(r1.records) == len(its) == len(TASKS)
    eng = r1.meta["engine"][str(LENGTH)]
    assert eng["n_ctx"] == LENGTH and (eng["type_k"], eng["type_v"]) == (pt.type_k, pt.type_v)
    assert eng["flash_attn"] == (kv == "q8_0")  # a quantized V cache needs flash attention
    for g in r1.records:
        assert g["n_prompt_tokens"] + g["n_gen_tokens"] <= LENGTH
        assert g["n_gen_tokens"] <= {"niah_single_1": 128, "vt": 30}[g["subset"]]
        assert isinstance(g["degenerate"], bool) and g["n_ctx"] == LENGTH
    assert r0.meta["generated"] <= len(its)

    out = scoring.score(bench, its, r1.records, r1.meta, key="s", store_dir=tmp_path,
                        ctx=ScoringContext(bench.open_env(source, "score")), kv_info=read_info(smollm_q8), kv=kv)
    assert {v["subset"] for v in out.verdicts} == set(TASKS)
    for v in out.verdicts:
        assert v["correct"] == (v["score"] == 1.0) and (v["error_type"] is None) == v["correct"]
    by = {(r["metric"], r["subset"], r["n_ctx"]): r for r in out.rows}
    for t in TASKS:
        row = by[("score", t, LENGTH)]
        assert row["unit"] == "%" and row["n"] == 1 and 0 <= row["value"] <= 100
    assert by[("score_avg", None, LENGTH)]["unit"] == "%"
    assert by[("effective_length", None, None)]["value"] in (0, LENGTH)
    assert by[("degenerate_items", None, None)]["n"] == len(TASKS)
    kv_pred = by[("kv_bytes_predicted", None, LENGTH)]
    info = read_info(smollm_q8)
    assert kv_pred["unit"] == "bytes" and kv_pred["value"] == info.kv_bytes(LENGTH, pt.type_k, pt.type_v)
    assert by[("peak_mem_bytes", "rss", LENGTH)]["value"] > kv_pred["value"]
    assert by[("generation_seconds", None, LENGTH)]["unit"] == "s"

    data = {"name": "ruler", "version": ruler.RULER_VERSION, "sha256": source["sha256"],
            "kv_cache": {"kv": kv, "type_k": pt.type_k, "type_v": pt.type_v}}
    doc = pt.write_metrics(tmp_path / "metrics.json", out.rows, data=data, engine=r1.meta["engine"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["benchmark"] == "ruler" and saved["status"] == "unanchored"
    assert saved["manifest"]["point"]["kv"] == kv and saved["manifest"]["data"]["sha256"] == data["sha256"]
    assert saved["manifest"]["engine_resolved"][str(LENGTH)]["type_v"] == pt.type_v
    assert len(saved["rows"]) == len(out.rows) == len(doc["rows"])
    assert (tmp_path / "manifest.json").exists()


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
    meta = json.loads((tmp_path / f"resources/benchmarks/ruler/{fam}/items.json").read_text())
    assert meta["lengths"] == [768] and meta["lengths_dropped"] == [16384]  # SmolLM2 trained at 8192
    for kv, target in zip(("f16", "q8_0"), targets):
        m = json.loads((tmp_path / target).read_text())
        assert m["status"] in ("ok", "unanchored") and not m["incomplete"]
        assert m["manifest"]["point"]["type_k"] == kv
        assert m["manifest"]["data"]["items_sha256"] == meta["sha256"]
        metrics = {(r["metric"], r["subset"], r["n_ctx"]) for r in m["rows"]}
        assert ("score", "niah_single_1", 768) in metrics and ("kv_bytes_predicted", None, 768) in metrics
        point_dir = (tmp_path / target).parent
        assert json.loads((point_dir / "generations.json").read_text())["complete"]
        assert len(read_jsonl(point_dir / "generations.jsonl")) == 1
        assert len(read_jsonl(point_dir / "verdicts.jsonl")) == 1
