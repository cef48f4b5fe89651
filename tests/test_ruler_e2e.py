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


@pytest.mark.parametrize("kv", ["f16", "q8_0", "q4_0"])
def test_ruler_point_end_to_end(tmp_path, smollm_q8, bench, items, kv, repo_root):
    """Items in the model's own tokens -> the one loop (each length its own context, the point's KV
    types: the KV cross of config/full.yaml) -> the one score stage -> rows -> metrics.json."""
    its, source, facts = items
    cfg = qconfig.load(repo_root / "config" / "config.yaml")  # validated, as a run's: the schema's defaults filled
    cfg["card"] = "test-card"
    cfg["kv_types"] = ["f16", "q8_0", "q4_0"]
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
    assert eng["flash_attn"] == (kv != "f16")  # a quantized V cache needs flash attention
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
    assert saved["incomplete"] is False
    # the run stopped at its time budget: scored as incomplete, and the file's flag says so (issue 45.4:
    # the flag was false on every file, whatever its status)
    if r0.meta["generated"] < len(its):
        part = scoring.score(bench, its, r0.records, r0.meta, key="s0", store_dir=tmp_path / "s0",
                             ctx=ScoringContext(bench.open_env(source, "score")), kv_info=info, kv=kv)
        assert part.status == "incomplete"
        doc0 = pt.write_metrics(tmp_path / "partial" / "metrics.json", part.rows, data=data,
                                engine=r0.meta["engine"], status=part.status, status_reason=part.reason)
        assert doc0["status"] == "incomplete" and doc0["incomplete"] is True


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
    cfg["benchmarks"]["ruler"].update({"tasks": ["niah_single_1"], "lengths": [768, 16384], "samples": 1, "cells": []})
    conf = write_config(tmp_path, cfg)
    fam = qconfig.families(cfg)[0]
    targets = [f"results/test-card/points/{fam}/Q8_0/{kv}/ruler/metrics.json" for kv in ("f16", "q8_0")]
    # Targets before --configfile: that option takes every word after it.
    snakemake(tmp_path, *targets, "--configfile", str(conf))
    meta = json.loads((tmp_path / f"resources/benchmarks/ruler/{fam}/items.json").read_text())
    assert meta["lengths"] == [768] and meta["lengths_dropped"] == [16384]  # SmolLM2 trained at 8192
    for kv, target in zip(("f16", "q8_0"), targets):
        m = json.loads((tmp_path / target).read_text())
        assert m["status"] in ("ok", "unanchored") and m["incomplete"] is False
        assert m["manifest"]["point"]["type_k"] == kv
        assert m["manifest"]["data"]["items_sha256"] == meta["sha256"]
        metrics = {(r["metric"], r["subset"], r["n_ctx"]) for r in m["rows"]}
        assert ("score", "niah_single_1", 768) in metrics and ("kv_bytes_predicted", None, 768) in metrics
        point_dir = (tmp_path / target).parent
        assert json.loads((point_dir / "generations.json").read_text())["complete"]
        assert len(read_jsonl(point_dir / "generations.jsonl")) == 1
        assert len(read_jsonl(point_dir / "verdicts.jsonl")) == 1


# The generate job's work at the trained context, in a process of its own (its peak RSS is then the
# job's alone, as in a generate job): items, the one loop at the config's batch policy, the KV cache
# llama.cpp reports allocating, the peak, and the score stage's rows.
_TRAINED_JOB = r"""
import json, sys
from quantladder import generation, scoring
from quantladder.benchmarks import ScoringContext, ruler
from quantladder.engine import Engine, EngineSettings
from quantladder.generation_policy import GenerationPolicy
from quantladder.gguf_meta import read_info
from quantladder.measures.memory import LlamaLog, peak_rss_bytes

model, store, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
bench = ruler.Ruler(cfg["benchmarks"]["ruler"])
source = bench.fetch_source("unused")
items, facts = bench.build_items(source, reference_gguf=model, family={"chat": True})
info = read_info(model)
n_par = GenerationPolicy.of(cfg, "ruler").n_parallel_for(info, max(it.n_ctx for it in items))
logs = {}

def engine_for(n_ctx):
    with LlamaLog() as lg:
        eng = Engine(model, EngineSettings(n_ctx=n_ctx, n_parallel=n_par, n_threads=2, prefix_cache=True))
    logs[n_ctx] = lg.buffers()
    return eng

before = peak_rss_bytes()
r = generation.Loop(bench, items, key="k", store_dir=store, n_parallel=n_par, engine_for=engine_for,
                    env=bench.open_env(source, "generate")).run()
out = scoring.score(bench, items, r.records, r.meta, key="s", store_dir=store,
                    ctx=ScoringContext(bench.open_env(source, "score")), kv_info=info)
print(json.dumps({"facts": facts, "n_parallel": n_par, "buffers": logs, "peak_before_bytes": before,
                  "meta": r.meta, "records": r.records, "verdicts": out.verdicts, "rows": out.rows,
                  "weights_bytes": info.tensor_bytes}))
"""


@pytest.mark.slow
def test_an_item_at_the_trained_context_scores_and_stays_in_its_kv_budget(tmp_path, smollm_q8, repo_root):
    """One RULER item at `trained` (SmolLM2: 8192 tokens, read from the GGUF) through the one loop at the
    default config's batch policy: it generates, scores, and the job's memory is what the KV budget
    predicted: llama.cpp allocates exactly n_parallel x the per-sequence KV cache of the GGUF's metadata,
    within generation.kv_budget_mb, and the peak RSS grows by that cache, the weights and the compute
    buffers, not more."""
    import os
    import subprocess
    import sys

    from quantladder.gguf_meta import read_info
    from quantladder.kv_policy import kv_cache_bytes

    cfg = qconfig.load(repo_root / "config" / "config.yaml")  # the schema's defaults filled in
    cfg["benchmarks"]["ruler"] = {"enabled": True, "tasks": ["vt"], "lengths": ["trained"], "samples": 1, "seed": 42}
    env = {**os.environ, "PYTHONPATH": str(repo_root / "workflow")}
    proc = subprocess.run([sys.executable, "-c", _TRAINED_JOB, str(smollm_q8), str(tmp_path), json.dumps(cfg)],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    info = read_info(smollm_q8)
    assert got["facts"]["lengths"] == [8192] == [info.n_ctx_train]
    (rec,) = got["records"]
    assert rec["n_ctx"] == 8192 and 8192 - 200 < rec["n_prompt_tokens"] and rec["n_prompt_tokens"] + 30 <= 8192
    (v,) = got["verdicts"]
    assert v["n_ctx"] == 8192 and 0 <= v["score"] <= 1
    rows = {(r["metric"], r["subset"], r["n_ctx"]): r for r in got["rows"]}
    assert 0 <= rows[("score", "vt", 8192)]["value"] <= 100

    n_par = got["n_parallel"]
    kv_all = kv_cache_bytes(info, 8192, n_par)
    assert kv_all <= cfg["generation"]["kv_budget_mb"] << 20 < kv_cache_bytes(info, 8192, 2 * n_par)
    buf = got["buffers"]["8192"]
    assert abs(buf["kv_bytes"] - kv_all) <= n_par * (1 << 20) // 100  # llama.cpp logs MiB to 2 decimals
    assert rows[("kv_bytes_predicted", None, 8192)]["value"] * n_par == kv_all
    peak = rows[("peak_mem_bytes", "rss", 8192)]["value"]
    grew = peak - got["peak_before_bytes"]
    predicted = got["weights_bytes"] + kv_all + buf["compute_bytes"]
    # the cache is resident (llama.cpp clears it), and nothing beyond the prediction grew by more than
    # the logits rows and allocator slack
    assert kv_all <= grew <= predicted + (256 << 20), (grew, predicted)
    print(f"8K item: n_parallel {n_par}, KV {kv_all / 2**20:.0f} MiB (budget {cfg['generation']['kv_budget_mb']} MiB), "
          f"peak RSS {peak / 2**20:.0f} MiB, grew {grew / 2**20:.0f} MiB of {predicted / 2**20:.0f} MiB predicted, "
          f"{got['meta']['seconds']:.0f} s")


@pytest.mark.slow
def test_the_default_dry_run_plans_the_trained_context_cell_and_the_full_one_the_kv_cross(tmp_path, repo_root):
    """`snakemake -n` in an empty directory: the default config plans RULER on the reference and both task
    rungs (and the noise run) at 1K and one needle item at the trained context (8192 for SmolLM2: the
    generate job is sized for it); config/full.yaml widens the cell to five tasks, adds the lengths
    between, RULER alone at q8_0 and q4_0 on those points, and bfcl_haystack."""
    from pipeline_util import planned_jobs, snakemake

    from quantladder.benchmarks.ruler import build

    cfg = qconfig.load(repo_root / "config" / "config.yaml")
    fam = "smollm2-135m-instruct"
    task_points = {qconfig.reference_rung(cfg, fam), *cfg["families"][fam]["task_rungs"]}
    jobs = planned_jobs(snakemake(tmp_path / "d", "-n").stdout)
    gen = {(w["series"], w["rung"], w["kv"]) for r, w in jobs if r == "generate" and w.get("task") == "ruler"}
    assert gen == {("points", r, "f16") for r in task_points} | {("noise", "F16", "f16")}
    assert ("benchmark_items", {"task": "ruler", "family": fam}) in jobs
    bench = ruler.Ruler(cfg["benchmarks"]["ruler"])
    blocks, facts = build.plan_blocks(bench.settings, 8192)
    assert blocks == [(1024, t, 1) for t in cfg["benchmarks"]["ruler"]["tasks"]] + [(8192, "niah_single_1", 1)]
    assert facts["lengths"] == [1024, 8192] and bench.max_n_ctx(8192) == 8192
    full = yaml.safe_load((repo_root / "config" / "full.yaml").read_text())["benchmarks"]["ruler"]
    bench = ruler.Ruler({**cfg["benchmarks"]["ruler"], **full})
    blocks, facts = build.plan_blocks(bench.settings, 8192)
    assert (8192, "niah_single_1", 2) in blocks and facts["lengths"][-1] == 8192 and bench.max_n_ctx(8192) == 8192

    jobs = planned_jobs(snakemake(tmp_path / "f", "-n", "--configfile", str(repo_root / "config" / "full.yaml")).stdout)
    full_rungs = {"F16", "Q8_0", "Q4_K_M", "Q2_K"}
    by_kv = {}
    for r, w in jobs:
        if r == "generate" and w["family"] == fam and w["series"] == "points":
            by_kv.setdefault(w["kv"], set()).add((w["task"], w["rung"]))
    assert by_kv["q4_0"] == by_kv["q8_0"] == {("ruler", r) for r in full_rungs}
    assert {("bfcl_haystack", r) for r in full_rungs} <= by_kv["f16"]
    assert not any(r in ("perplexity", "speed") and w.get("kv") != "f16" for r, w in jobs)
