"""Your tasks end to end through the real rules (benchmark_source, benchmark_items, generate, score with
the Python checks in the sandbox, aggregate): a reference rung and a quantized rung of the embedded
model answer the example task set, and each rung's paired verdict on it lands in points.parquet.
Then the two edits a user makes: a check edit re-scores and generates nothing (no generate job is
even planned); a prompt edit regenerates that item only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quantladder.benchmarks.tasks import reading
from quantladder.io import read_jsonl
from pipeline_util import planned_jobs, scratch_snakemake, task_workdir

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config" / "tasks"
FAM, CARD = "smollm2", "testcard"
RUNGS = {"F16": "reference", "Q8_0": "quantized"}

pytestmark = pytest.mark.slow


def _snakemake(wd: Path, *args: str) -> subprocess.CompletedProcess:
    return scratch_snakemake(wd, *args, f"results/{CARD}/points.parquet")


def _point(wd: Path, rung: str) -> Path:
    return wd / f"results/{CARD}/points/{FAM}/{rung}/f16/tasks"


@pytest.fixture(scope="module")
def run(smollm_f16, smollm_q8, tmp_path_factory):
    wd = tmp_path_factory.mktemp("tasks-e2e")
    tasks = wd / "my-tasks"
    shutil.copytree(EXAMPLE, tasks)
    cfg = {
        "card": CARD,
        "threads": 1,
        "families": {FAM: {"source": {"path": str(smollm_f16)}, "reference": "F16", "rungs": ["Q8_0"]}},
        "measures": {m: {"enabled": False} for m in ("perplexity", "speed", "memory", "energy")},
        # the whole section a user writes: where the file is
        "benchmarks": {"tasks": {"enabled": True, "source": {"path": str(tasks / "example.jsonl")}}},
        "generation": {"n_parallel": 1, "noise_floor": {"enabled": False}},
    }
    task_workdir(wd, cfg, {"F16": ("reference", smollm_f16), "Q8_0": ("quantized", smollm_q8)}, "tasks")
    proc = _snakemake(wd)
    return {"wd": wd, "tasks": tasks / "example.jsonl", "log": proc.stderr}


def _stores(wd):
    return {r: (_point(wd, r) / ".generations.store.jsonl").read_text() for r in RUNGS}


def test_each_rung_gets_its_paired_verdict_in_points_parquet(run):
    import pandas as pd

    wd = run["wd"]
    n = len(read_jsonl(run["tasks"]))
    for rung in RUNGS:
        d = _point(wd, rung)
        verdicts = read_jsonl(d / "verdicts.jsonl")
        assert len(verdicts) == n and all(v["checks_total"] >= 1 for v in verdicts)
        py = [c for v in verdicts for c in v["checks"] if c["kind"] == "python"]
        assert py and all(c["error"] in (None, "python") for c in py), py  # ran in the sandbox, decided there
        m = json.loads((d / "metrics.json").read_text())
        assert m["status"] in ("ok", "unanchored") and m["incomplete"] is False
        assert m["scoring"]["sandbox"].startswith("bubblewrap")
    df = pd.read_parquet(wd / f"results/{CARD}/points.parquet")
    rows = df[(df.benchmark == "tasks") & (df.metric == "all_checks_pass") & df.subset.isna()]
    assert set(rows.rung) == set(RUNGS)
    q8 = rows[rows.rung == "Q8_0"].iloc[0]
    assert q8.n == n and isinstance(q8.verdict_text, str) and q8.verdict_text
    assert "no paired comparison" not in q8.verdict_text, q8.verdict_text
    assert not pd.isna(q8.delta)
    from quantladder import report

    html = report.render(df, CARD)
    answer = html[html.index('class="answer"'):]
    answer = answer[:answer.index("</section>")]
    assert "all_checks_pass" in answer  # the report's first screen: the headline of your tasks, per rung


def test_points_made_from_other_inputs_are_not_shown_as_measured(run):
    """The partial report and the jobs left know what Snakemake will run again (issue 41, case 6): a
    finished run with its task file edited (the same mechanism as a user's traffic file laid over the
    default's) counted "2 of 2 finished, 0 jobs left" from the files present and showed the old checks'
    figures as measured. Now both points are not measured yet, each with Snakemake's reason, the jobs
    left are Snakemake's plan (two score jobs and the aggregate), and the partial dataset holds no
    figure of them; reverted, they are the config's again."""
    import pandas as pd
    import yaml

    from quantladder import config as qconfig
    from quantladder import progress

    wd, path = run["wd"], run["tasks"]
    cfg = qconfig.validate_config(yaml.safe_load((wd / "config.yaml").read_text()))
    snakefile = wd / "Snakefile"
    if "default_target" not in snakefile.read_text():  # `snakemake` with no target builds the dataset
        snakefile.write_text(snakefile.read_text() + f'\nrule all:\n    default_target: True\n'
                                                      f'    input: "results/{CARD}/points.parquet"\n')
    _, _, before = progress.partial_report(cfg, CARD, wd)
    assert before["finished"] == before["planned"] and before["planned"] >= len(RUNGS)
    assert before["jobs_left"] == []
    original = path.read_text()
    path.write_text(original.replace('"value": 48}', '"value": 48, "abs_tol": 1000000}'))
    try:
        parquet, html, p = progress.partial_report(cfg, CARD, wd)
    finally:
        path.write_text(original)
    assert p["finished"] == p["planned"] - len(RUNGS)
    assert {j["rule"]: j["jobs"] for j in p["jobs_left"]} == {"score": len(RUNGS), "aggregate": 1}
    tasks = [m for m in p["missing"] if m["measure"] == "tasks"]
    assert {m["rung"] for m in tasks} == set(RUNGS) and p["rerun"] == len(RUNGS)
    assert all("param" in m["rerun"].lower() for m in tasks), tasks  # Snakemake's own reason
    assert p["counted_from"] == before["counted_from"] == "snakemake"
    df = pd.read_parquet(parquet)
    assert df.empty or "tasks" not in set(df.benchmark)  # no figure of the old checks, as measured
    import html as _html

    page = _html.unescape(html.read_text())
    assert "measured from other inputs than the configuration's: runs again" in page
    assert "Snakemake's own plan" in page
    text = progress.summary_text(p)
    assert f"{p['finished']} of {p['planned']} point-measures finished" in text and "Snakemake's own plan" in text
    _, _, after = progress.partial_report(cfg, CARD, wd)
    assert after["finished"] == after["planned"] and after["jobs_left"] == [] and after["rerun"] == 0


def test_a_check_edit_rescores_and_generates_nothing(run):
    wd, path = run["wd"], run["tasks"]
    stores = _stores(wd)
    gens = {r: (_point(wd, r) / "generations.jsonl").stat().st_mtime_ns for r in RUNGS}
    text = path.read_text()
    path.write_text(text.replace('"value": 48}', '"value": 48, "abs_tol": 1000000}'))  # now any number passes
    dry = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-n", "-s", str(wd / "Snakefile"),
                          "-d", str(wd), "--nolock", f"results/{CARD}/points.parquet"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "workflow")})
    rules = {rule for rule, _ in planned_jobs(dry.stdout + dry.stderr)}
    assert rules == {"score", "aggregate"}, rules
    _snakemake(wd)
    assert _stores(wd) == stores
    assert {r: (_point(wd, r) / "generations.jsonl").stat().st_mtime_ns for r in RUNGS} == gens
    for rung in RUNGS:
        v = {v["item_id"]: v for v in read_jsonl(_point(wd, rung) / "verdicts.jsonl")}
        gen = {g["item_id"]: g for g in read_jsonl(_point(wd, rung) / "generations.jsonl")}
        read = reading.last_number(gen["arith-pencils"]["text"])  # one number, as the numeric check reads it
        assert v["arith-pencils"]["correct"] == (read is not None and read.value is not None)


def test_a_prompt_edit_regenerates_the_items_it_touches(run):
    wd, path = run["wd"], run["tasks"]
    n = len(read_jsonl(path))
    path.write_text(path.read_text().replace("How many pencils are in 4 boxes?", "How many pencils are in 5 boxes?"))
    _snakemake(wd)
    for rung in RUNGS:
        log = (wd / f"logs/generate/{CARD}/points/{FAM}/{rung}/f16/tasks.log").read_text()
        assert f"{n - 1} already generated, 1 to go" in log, log[-2000:]
        assert len(read_jsonl(_point(wd, rung) / "verdicts.jsonl")) == n


def _edited_after_planning(wd: Path, path: Path, old: str, new: str, *args: str) -> subprocess.CompletedProcess:
    """Snakemake plans the run from the file as it is, then (its `onstart` handler, after the DAG is
    built and before any job starts) the file is edited: every job reads the edited file."""
    snakefile = wd / "Snakefile.edit-after-planning"
    snakefile.write_text((wd / "Snakefile").read_text() + (
        "\nonstart:\n"
        f"    _p = {str(path)!r}\n"
        f"    _t = open(_p).read().replace({old!r}, {new!r})\n"
        "    open(_p, 'w').write(_t)\n"))
    return subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(snakefile), "-d", str(wd),
                           "--cores", "2", "--nolock", *args, f"results/{CARD}/points.parquet"],
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(REPO / "workflow")})


def _logs(wd: Path, rule: str) -> str:
    return "".join(p.read_text() for p in sorted((wd / "logs" / rule).rglob("*.log")))


def test_a_check_edited_after_planning_stops_every_score_job_and_a_revert_recomputes(run):
    """Issue 41, case 1: a check changed after the run was planned. Before, each score job compared two
    reads of its own and scored with the edited check under the planned key; after a revert,
    `snakemake -n` said nothing was to be done while verdicts held a check no file had."""
    from quantladder.benchmarks.tasks import taskfile

    wd, path = run["wd"], run["tasks"]
    before = {r: (_point(wd, r) / "verdicts.jsonl").read_text() for r in RUNGS}
    planned = taskfile.read(path, "auto", None).checks_sha256
    proc = _edited_after_planning(wd, path, '"value": 48', '"value": 49', "--keep-going", "--forcerun", "score")
    assert proc.returncode != 0, proc.stderr[-3000:]
    edited = taskfile.read(path, "auto", None).checks_sha256
    assert edited != planned
    log = _logs(wd, "score") + proc.stderr
    assert re.search(rf"{re.escape(str(path))}: its checks digest is {edited} as this job read it, but the run was "
                     rf"planned with {planned}", log), log[-3000:]
    for rung in RUNGS:  # no figure from the edited check, none left looking complete
        assert not (_point(wd, rung) / "metrics.json").exists()
    path.write_text(path.read_text().replace('"value": 49', '"value": 48'))  # the edit reverted
    _snakemake(wd)
    for rung in RUNGS:
        assert (_point(wd, rung) / "verdicts.jsonl").read_text() == before[rung]
        m = json.loads((_point(wd, rung) / "metrics.json").read_text())
        assert m["manifest"]["data"]["digests"] == {"checks_sha256": planned}  # what the point was made from


def test_a_prompt_edited_after_planning_stops_the_items_job(run):
    """The same for the prompt half: the items job reads the file through the source record; before,
    items.json recorded a prompts digest that no file matched, and every reply held the edited prompt."""
    from quantladder.benchmarks.tasks import taskfile

    wd, path = run["wd"], run["tasks"]
    planned = taskfile.read(path, "auto", None).prompts_sha256
    proc = _edited_after_planning(wd, path, "pencils", "crayons", "--forcerun", "benchmark_items")
    assert proc.returncode != 0
    log = _logs(wd, "benchmark_items") + proc.stderr
    assert re.search(rf"its prompts digest is [0-9a-f]{{64}} as this job read it, but the run was planned with "
                     rf"{planned}", log), log[-3000:]
    assert not (wd / f"resources/benchmarks/tasks/{FAM}/items.json").exists()
    path.write_text(path.read_text().replace("crayons", "pencils"))
    _snakemake(wd)
    meta = json.loads((wd / f"resources/benchmarks/tasks/{FAM}/items.json").read_text())
    assert meta["prompts_sha256"] == planned


def test_two_points_made_from_different_checks_are_not_paired(run, tmp_path):
    """Rule 13: a delta never compares two exams. A point whose recorded check digest differs from its
    reference's (what a file edited between two score jobs on a cluster leaves) is refused, naming both."""
    from quantladder import aggregate

    wd = run["wd"]
    paths = []
    for rung in RUNGS:
        d = tmp_path / rung
        shutil.copytree(_point(wd, rung), d)
        paths.append(d / "metrics.json")
    m = json.loads(paths[1].read_text())
    m["manifest"]["data"]["digests"] = {"checks_sha256": "0" * 64}
    paths[1].write_text(json.dumps(m))
    with pytest.raises(Exception, match=rf"{re.escape(str(paths[1]))} and {re.escape(str(paths[0]))} were made "
                                        rf"from different inputs \(checks_sha256: 0{{64}} against [0-9a-f]{{64}}\)"):
        aggregate.collect([str(p) for p in paths])
