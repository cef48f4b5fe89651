"""The find target under real Snakemake on the default family's ladder (SmolLM2-135M, seven rungs):
only the rungs the walk visits are measured, the answer equals the full ladder's on the same tokens,
and a second run does nothing. KLD on one corpus is the only figure accepted (the cheapest that runs
the whole DAG: quantize, reference log-probs, perplexity passes, the checkpoints)."""

from __future__ import annotations

import json

import pytest
from scipy.stats import norm
from scipy.stats import t as t_dist

from pipeline_util import small_config, snakemake, write_config
from quantladder import card as qcard
from quantladder import find as qfind
from quantladder.io import read_json
from quantladder.stats import tokens

FAM = "smollm2-135m-instruct"
LADDER = ("Q8_0", "Q4_K_M", "Q4_K_M-imat", "Q2_K", "IQ4_XS", "MXFP4", "Q2_K-attn8")  # config/config.yaml's
ACCEPT = "kld:manual-es<=0.2"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    work = tmp_path_factory.mktemp("find")
    cfg = small_config(rungs=LADDER)
    cfg["measures"]["perplexity"].update(corpus="manual-es", corpora=["manual-es"])
    cfg["quantize"]["imatrix_settings"] = {"n_ctx": 512, "chunks": 4}  # the matrix's cost, not its quality, here
    cfg["find"] = {"family": FAM, "mem": "8GiB", "ctx": "16k", "accept": ACCEPT}
    path = write_config(work, cfg)
    card = qcard.label(cfg.get("card"))
    target = qfind.ANSWER.format(card=card, family=FAM)
    snakemake(work, target, config=path, timeout=3600)
    return work, path, cfg, card, target


def test_walk_measures_only_visited_rungs(walked):
    work, _, cfg, card, target = walked
    ans = json.loads((work / target).read_text())
    visited = [p["rung"] for p in ans["path"]]
    points = work / "results" / card / "points" / FAM
    measured = sorted(p.name for p in points.iterdir() if (p / "f16" / "perplexity").exists())
    assert measured == sorted(visited)  # the reference has no pass of its own: KLD reads its stored log-probs
    assert ans["cost"]["points_measured"] == len(visited) < ans["cost"]["points_full_ladder"] == 6
    assert ans["cost"]["walk_job_hours"] < ans["cost"]["full_ladder_job_hours"]
    assert ans["verdict"] == "acceptable" and ans["rung"] in visited and ans["below"] in visited
    assert ans["evidence"]["verdict"] == "acceptable" and ans["below_evidence"]["verdict"] != "acceptable"
    f, level = ans["evidence"]["figures"][0], ans["evidence"]["alpha"]
    assert level == ans["levels"]["down"] and f["bound"] <= 0.2
    # the bound, by hand from the pass's row: the chunk-level t bound on G − 1 df, widened for the KLD's
    # skew (the lognormal GCI of its chunk means) — never the per-token z bound
    row = next(r for r in read_json(points / ans["rung"] / "f16" / "perplexity" / "manual-es-n256" / "metrics.json")["rows"]
               if r["metric"] == "kld_mean" and r["subset"] == "manual-es")
    rec = row["interval"]
    t_bound = f["value"] + t_dist.ppf(1 - level, rec["n_chunks"] - 1) * f["stderr"]
    gci = tokens.lognormal_gci(rec["log_mean"], rec["log_var"], rec["clusters_eff"], 1 - 2 * level)[1]
    assert f["bound"] == pytest.approx(max(t_bound, gci), rel=1e-9)
    assert f["bound"] > f["value"] + norm.ppf(1 - level) * f["stderr"] and rec["n_chunks"] == row["n_clusters"] == 4
    assert ans["memory"]["predicted_bytes"] == ans["memory"]["weights_bytes"] + ans["memory"]["kv_bytes"] < 8 << 30
    for p in ans["path"]:  # each visited rung is an ordinary point with its manifest
        assert (points / p["rung"] / "f16" / "perplexity" / "manual-es-n256" / "manifest.json").exists()


def test_answer_equals_the_full_ladders(walked):
    work, path, cfg, card, target = walked
    ans = json.loads((work / target).read_text())
    sp = qfind.spec(cfg)
    # the full ladder on the same tokens: every candidate's pass
    snakemake(work, *[qfind.figure_files(sp, cfg, card, r)[0] for r in sp.rungs], config=path, timeout=3600)
    infos = {r: read_json(work / qfind.sidecar(cfg, FAM, r))["info"] for r in (*sp.rungs, sp.reference)}
    full = qfind.fixed_sequence(sp, cfg, card, infos, work)
    assert len(full["measured"]) == 6 and full["rung"] == ans["rung"]
    assert qfind.answer(qfind.replay(sp, cfg, card, infos, work))["rung"] == ans["rung"]


def test_second_run_does_nothing(walked):
    work, path, _, _, target = walked
    r = snakemake(work, "-n", target, config=path)
    assert "Nothing to be done" in r.stdout + r.stderr


def test_a_killed_walk_resumes_where_it_stopped(walked, tmp_path):
    """The walk's Snakemake killed (SIGKILL to its process group: a node lost) once its first rung is
    measured; after `--unlock` (the lock a killed Snakemake leaves), the same command again (`make run`'s,
    with --rerun-incomplete) keeps that rung's figures, measures only what is left, and gives the same
    answer as the uninterrupted walk."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    from pipeline_util import REPO, SNAKEMAKE

    _, _, cfg, card, target = walked
    done = json.loads((walked[0] / target).read_text())
    work = tmp_path / "killed"
    work.mkdir()
    path = write_config(work, cfg)
    # What the walk reads and does not make (the rungs' models and the matrix, the corpus, the reference's
    # log-probs, the tool gate: the same config made them) hard-linked from the module's run, mtimes kept:
    # Snakemake finds them up to date, and the run killed here is the walk's own steps and passes
    for d in ("resources", f"results/{card}/reference_logits", f"results/{card}/anchors"):
        shutil.copytree(walked[0] / d, work / d, copy_function=os.link)
    cmd = [SNAKEMAKE, target, "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--cores", "2",
           "--rerun-incomplete", "--configfile", str(path)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    first = done["path"][0]["rung"]
    first_pass = work / qfind.figure_files(qfind.spec(cfg), cfg, card, first)[0]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 1800
        while not first_pass.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert first_pass.exists() and proc.poll() is None, "the walk ended before its first rung was measured"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (work / target).exists()
    kept = first_pass.stat().st_mtime_ns
    # a killed Snakemake leaves its lock: it says to --unlock, as README's table does
    locked = snakemake(work, target, "--rerun-incomplete", config=path, check=False)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    snakemake(work, target, "--unlock", config=path)
    snakemake(work, target, "--rerun-incomplete", config=path, timeout=3600)
    assert first_pass.stat().st_mtime_ns == kept  # measured before the kill: not measured again
    again = json.loads((work / target).read_text())
    assert (again["rung"], again["verdict"]) == (done["rung"], done["verdict"])
    assert [p["rung"] for p in again["path"]] == [p["rung"] for p in done["path"]]
    dry = snakemake(work, "-n", target, config=path)
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_bisection_on_the_same_points(walked):
    """The same request with `find.strategy: bisect` over the points the full ladder left: Snakemake
    runs only the walk's steps (every rung is an ordinary point, reused), the walk probes no more
    rungs than its bound, each at α/m, and its answer is the replay's over the same points: a rung
    shown acceptable at that level whose neighbour below is measured and not shown."""
    work, path, cfg, card, target = walked
    sp = qfind.spec(cfg)
    snakemake(work, *[qfind.figure_files(sp, cfg, card, r)[0] for r in sp.rungs], config=path, timeout=3600)
    bis = dict(cfg, find={**cfg["find"], "strategy": "bisect"})
    bpath = work / "bisect.yaml"
    bpath.write_text(json.dumps(bis))
    r = snakemake(work, target, config=bpath, timeout=1800)
    ran = r.stdout + r.stderr
    assert "rule perplexity:" not in ran and "rule quantize:" not in ran, ran[-3000:]
    ans = json.loads((work / target).read_text())
    lv = ans["levels"]
    assert lv["strategy"] == "bisect" and lv["each"] == pytest.approx(0.025 / lv["probes"])
    assert 1 <= len(ans["path"]) <= lv["probes"] and all(p["alpha"] == lv["each"] for p in ans["path"])
    bsp = qfind.spec(bis)
    infos = {x: read_json(work / qfind.sidecar(bis, FAM, x))["info"] for x in (*bsp.rungs, bsp.reference)}
    assert qfind.answer(qfind.replay(bsp, bis, card, infos, work))["rung"] == ans["rung"]
    if ans["verdict"] == "acceptable":
        assert ans["evidence"]["verdict"] == "acceptable" and ans["evidence"]["alpha"] == lv["each"]
        assert ans["below"] is None or ans["below_evidence"]["verdict"] != "acceptable"
