"""KLD by domain and language through the real pipeline: Gemma-3-270M with a rung calibrated on the
other half of the Debian Reference and one calibrated on the evaluation text itself (importance
matrices computed in the DAG by llama-imatrix), passes on English and Spanish text and a chat corpus;
the dataset's rows per corpus, the overlap flag, and a corpus added without recomputing the others."""

import copy
import json

import pandas as pd
import pytest
import yaml

from pipeline_util import REPO, default_config, planned_jobs, snakemake, stand_ins_off, write_config

from quantladder import card

pytestmark = pytest.mark.slow
SMOL, GEMMA = "smollm2-135m-instruct", "gemma3-270m"
CORPORA = ["prose-en", "manual-en", "manual-es", "chat-en"]


def corpora_config() -> dict:
    cfg = default_config()
    fams = cfg["families"]
    fams[SMOL].update(rungs=[], task_rungs=[])  # its reference point: the chat corpus's model
    fams[GEMMA].update(rungs=["Q4_K_M-imat-en", "Q4_K_M-imat-self"])
    fams[GEMMA]["rung_options"] = {"Q4_K_M-imat-en": {"type": "Q4_K_M", "imatrix": "manual-en.calib"},
                                   "Q4_K_M-imat-self": {"type": "Q4_K_M", "imatrix": "manual-en"}}
    cfg["families"] = {SMOL: fams[SMOL], GEMMA: fams[GEMMA]}
    cfg["quantize"]["imatrix_settings"] = {"n_ctx": 256, "chunks": 4}
    cfg["threads"] = 1  # one thread a job, two jobs at once (the fixture's --max-threads 1): see run()
    cfg["measures"]["perplexity"].update({"corpora": CORPORA, "n_ctx": 256, "n_batch": 512, "max_chunks": 2})
    # a long document decoded in pieces of 256 (the trained context takes the same path, at 8K / 32K)
    cfg["measures"]["perplexity"]["long"] = {"enabled": True, "corpora": ["manual-en.full"], "n_ctx": 1024,
                                             "n_batch": 256, "max_chunks": 1}
    for m in ("speed", "memory", "energy"):
        cfg["measures"][m]["enabled"] = False
    cfg["anchor_gates"] = {"perplexity": {"enabled": False}, "speed": {"enabled": False}}
    for section in (cfg.get("benchmarks") or {}).values():
        section["enabled"] = False
    cfg["anchors"] = str(REPO / "config" / "anchors.yaml")
    return stand_ins_off(cfg)  # SmolLM2 makes no Q4_K_M here: the default's copy of it is off


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("corpora")
    cfg = corpora_config()
    cfg_path = write_config(work, cfg)
    label = card.label()
    # Every rule here claims all the cores (threads: workflow.cores), so at --cores 2 its 46 short jobs
    # ran one after another, each mostly a Python start and a model load on one core; one thread a job
    # lets two run at once. Nothing asserted depends on the thread count.
    snakemake(work, "--max-threads", "1", f"results/{label}/points.parquet", config=cfg_path, timeout=3600)
    return work, cfg, label, pd.read_parquet(work / f"results/{label}/points.parquet")


def test_kld_rows_per_domain_and_language(run):
    work, _, label, df = run
    kld = df[df["metric"] == "kld_mean"]
    gem = kld[(kld["family"] == GEMMA) & (kld["n_ctx"] == 256)]  # the long pass is checked below
    assert set(gem["rung"]) == {"F16", "Q4_K_M-imat-en", "Q4_K_M-imat-self"}
    assert set(gem["subset"]) == {"prose-en", "manual-en", "manual-es"}  # a base model: no chat corpus
    assert (gem["n_ctx"] == 256).all() and (gem["n"] == 2 * 127).all() and (gem["unit"] == "nats").all()
    by = gem.set_index(["rung", "subset"])["value"]
    assert all(abs(by[("F16", s)]) < 1e-4 for s in ("prose-en", "manual-en", "manual-es"))
    assert all(by[("Q4_K_M-imat-en", s)] > 0 for s in ("prose-en", "manual-en", "manual-es"))
    smol = kld[(kld["family"] == SMOL) & (kld["n_ctx"] == 256)]
    assert set(smol["subset"]) == set(CORPORA)  # the chat model takes the chat corpus
    long = kld[kld["subset"] == "manual-en.full"]
    assert len(long) == 4 and (long["n_ctx"] == 1024).all() and (long["n"] == 511).all()
    assert long[long["rung"] != "F16"]["value"].gt(0).all()
    absent = df[(df["family"] == GEMMA) & (df["subset"] == "chat-en")]
    assert len(absent) and (absent["status"] == "absent").all() and absent["value"].isna().all()
    assert absent["status_reason"].str.contains("not a chat model").all()
    # every pass records its corpus (sha256 = the materialized file's) and its token stream
    man = json.loads((work / f"results/{label}/points/{GEMMA}/Q4_K_M-imat-en/f16/perplexity/manifest.json").read_text())
    corpora = man["data"]["corpora"]
    assert set(corpora) == {"prose-en-n256", "manual-en-n256", "manual-es-n256", "manual-en.full-n1024"}
    for name, rec in corpora.items():
        side = json.loads((work / f"resources/corpora/{rec['name']}.json").read_text())
        assert rec["sha256"] == side["sha256"] and len(rec["tokens_sha256"]) == 64
        assert (rec["domain"], rec["language"]) == tuple(rec["name"].split(".")[0].split("-", 1))


def test_a_pass_on_its_own_calibration_text_is_flagged(run):
    _, cfg, _, df = run
    ov = df[df["metric"].isin(["calibration_overlap", "calibration_overlap_flag"])]
    assert set(ov["rung"]) == {"Q4_K_M-imat-en", "Q4_K_M-imat-self"}  # only rungs with a matrix
    v = ov.set_index(["rung", "subset", "metric"])["value"]
    # the matrix of -self read the first 4 x 256 tokens of manual-en: the pass reads them too
    assert v[("Q4_K_M-imat-self", "manual-en", "calibration_overlap")] > 90
    assert v[("Q4_K_M-imat-self", "manual-en", "calibration_overlap_flag")] == 1
    assert v[("Q4_K_M-imat-self", "prose-en", "calibration_overlap_flag")] == 0
    # the Spanish guide keeps the English one's commands and listings: a real, smaller overlap
    assert v[("Q4_K_M-imat-self", "manual-es", "calibration_overlap")] < v[("Q4_K_M-imat-self", "manual-en",
                                                                           "calibration_overlap")]
    flag_pct = cfg["measures"]["perplexity"]["overlap"]["flag_pct"]
    pct = ov[ov["metric"] == "calibration_overlap"].set_index(["rung", "subset", "n_ctx"])["value"]
    flag = ov[ov["metric"] == "calibration_overlap_flag"].set_index(["rung", "subset", "n_ctx"])["value"]
    assert ((pct >= flag_pct) == (flag == 1)).all(), (pct, flag, flag_pct)
    for s in ("prose-en", "manual-en", "manual-es"):  # the default calibration half: disjoint
        assert v[("Q4_K_M-imat-en", s, "calibration_overlap")] < 1.0
        assert v[("Q4_K_M-imat-en", s, "calibration_overlap_flag")] == 0
    assert (ov[ov["metric"] == "calibration_overlap"]["unit"] == "%").all()


def test_adding_a_corpus_computes_only_its_passes(run, tmp_path):
    work, cfg, label, _ = run
    more = copy.deepcopy(cfg)
    more["measures"]["perplexity"]["corpora"] = CORPORA + ["manual-ja"]
    p = tmp_path / "more.yaml"
    p.write_text(yaml.safe_dump(more))
    r = snakemake(work, "-n", f"results/{label}/points.parquet", config=p)
    jobs = planned_jobs(r.stdout)
    passes = [wc for rule, wc in jobs if rule == "perplexity"]
    assert passes and all(wc["corpus"] == "manual-ja" for wc in passes), passes
    assert len(passes) == 1 + 3  # SmolLM2's reference point, Gemma's three points
    refs = [wc for rule, wc in jobs if rule == "reference_logits"]
    assert sorted(wc["family"] for wc in refs) == [GEMMA, SMOL] and all(wc["corpus"] == "manual-ja" for wc in refs)
    assert not any(rule in ("quantize", "imatrix") for rule, _ in jobs)
