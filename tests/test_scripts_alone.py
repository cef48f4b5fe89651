"""Every rule script runs alone for debugging (PyPSA-Eur's way): ``python scripts/<rule>.py
WILDCARD=VALUE ...`` builds, from the real workflow, the job Snakemake would run, and the script
writes what the rule writes. No script edits sys.path: the package is installed in the rule env."""

import os
import shutil
import subprocess
import sys

import pytest

from pipeline_util import REPO, small_config, snakemake, write_config

SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
CORPUS = "prose-en"  # the cheapest job with params: CPython's pydoc topics, built in seconds


def run_alone(workdir, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    return subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_imports_the_installed_package_and_runs_alone(script):
    text = script.read_text()
    assert "sys.path" not in text
    assert 'if __name__ == "__main__":' in text and 'globals().get("snakemake") or mock_from_argv()' in text


def test_a_script_alone_writes_what_its_rule_writes(tmp_path):
    """The corpus job run alone and run by Snakemake: the same files, byte for byte. Snakemake's
    copy of the script then runs again under an interpreter that has no quantladder installed (-I -S:
    no PYTHONPATH, no site-packages), as in a conda env: its preamble alone brings the package; and
    under one whose quantladder is another checkout's, which the script refuses."""
    alone, under = tmp_path / "alone", tmp_path / "snakemake"
    for d in (alone, under):
        d.mkdir()
        cfg = write_config(d, small_config())
    r = run_alone(alone, "corpus.py", "--configfile", cfg.name, f"corpus={CORPUS}")
    assert r.returncode == 0, r.stderr
    assert f"logging to logs/corpus/{CORPUS}.log" in r.stderr
    assert f"corpus {CORPUS}:" in (alone / "logs" / "corpus" / f"{CORPUS}.log").read_text()
    outputs = [f"resources/corpora/{CORPUS}.txt", f"resources/corpora/{CORPUS}.json"]
    snakemake(under, "--skip-script-cleanup", outputs[0], config=under / cfg.name)
    for f in outputs:
        assert (alone / f).read_bytes() == (under / f).read_bytes(), f
        (under / f).unlink()
    [kept] = (under / ".snakemake" / "scripts").glob("*.corpus.py")
    bare = [sys.executable, "-I", "-S"]
    assert subprocess.run([*bare, "-c", "import quantladder"], cwd=under, capture_output=True).returncode != 0
    r = subprocess.run([*bare, str(kept)], cwd=under, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for f in outputs:
        assert (alone / f).read_bytes() == (under / f).read_bytes(), f
    # a package installed from another checkout (a shared venv) is refused, not run
    other = (tmp_path / "other").resolve()
    shutil.copytree(REPO / "workflow" / "quantladder", other / "workflow" / "quantladder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, str(kept)], cwd=under, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(other / "workflow")})
    assert r.returncode == 1 and f"imports quantladder from {other}, but belongs to {REPO}" in r.stderr


def test_a_script_of_two_rules_asks_which(tmp_path):
    r = run_alone(tmp_path, "perplexity.py", "card=x")
    assert r.returncode == 2 and "rules perplexity, perplexity_point: name one (--rule)" in r.stderr


def test_wrong_wildcards_and_missing_inputs_are_one_line_each(tmp_path):
    point = ["card=cpu-test", "family=smollm2-135m-instruct", "rung=Q4_K_M"]
    r = run_alone(tmp_path, "speed.py", *point)
    assert r.returncode == 2
    assert "rule speed takes the wildcards card, family, kv, rung; given: card, family, rung" in r.stderr
    r = run_alone(tmp_path, "speed.py", *point, "kv=F16")  # KV types are lower case
    assert r.returncode == 2 and "a wildcard value breaks its constraint" in r.stderr
    r = run_alone(tmp_path, "speed.py", *point, "kv=f16")
    assert r.returncode == 2 and "inputs not made yet" in r.stderr
    assert "resources/models/smollm2-135m-instruct/quantized/Q4_K_M.gguf" in r.stderr
    assert not (tmp_path / "results").exists()  # nothing written for a job that cannot run
