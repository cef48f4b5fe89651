"""What a run has left: the per-rule table `snakemake -n` prints (quantladder.progress) counts the
same jobs as Snakemake's own dry run, for the default config and the full one, in an empty directory
(the real workflow, no job run)."""

import re

import pytest

from pipeline_util import REPO, snakemake


def _snakemake_counts(text: str) -> dict[str, int]:
    block = text.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", block, re.M)}


def _our_table(text: str) -> dict[str, tuple[int, float, str, str]]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("quantladder:") and "point-measures" in ln)
    out = {}
    for ln in lines[start + 2:]:
        m = re.match(r"^  (\w+)\s+(\d+)\s+([\d.]+)\s+(gpu|sandbox|cpu|local)\s+(measured|estimate)$", ln)
        if not m:
            break
        out[m.group(1)] = (int(m.group(2)), float(m.group(3)), m.group(4), m.group(5))
    return out


@pytest.mark.parametrize("extra", [[], ["--configfile", str(REPO / "config" / "full.yaml")],
                                   ["--configfile", str(REPO / "config" / "examples" / "hub-qwen2.5-7b-gpu.yaml")],
                                   ["--configfile", str(REPO / "config" / "examples" / "hub-ifeval.yaml")]],
                         ids=["default", "full", "hub-example", "hub-ifeval"])
def test_the_dry_run_table_counts_what_snakemake_plans(tmp_path, extra):
    r = snakemake(tmp_path, "-n", *extra)
    text = r.stdout + r.stderr
    ours, theirs = _our_table(text), _snakemake_counts(text)
    assert ours, text[-3000:]
    for rule, (jobs, minutes, _, basis) in ours.items():
        assert theirs.get(rule) == jobs, (rule, jobs, theirs.get(rule))
        assert minutes > 0 and basis == "estimate"  # nothing has run here: every figure is a guess
    # every rule that does a point's work is in the table
    assert {"generate", "score", "perplexity", "speed", "memory", "quantize"} <= set(ours)
    head = next(ln for ln in text.splitlines() if "point-measures finished" in ln)
    assert head.startswith("quantladder: 0 of ")


def test_the_default_plan_is_smaller_than_the_full_one(tmp_path):
    """The default answers in minutes: a fraction of the full ladder's jobs, every kind still there."""
    d = _snakemake_counts((lambda r: r.stdout + r.stderr)(snakemake(tmp_path / "d", "-n")))
    f = _snakemake_counts((lambda r: r.stdout + r.stderr)(
        snakemake(tmp_path / "f", "-n", "--configfile", str(REPO / "config" / "full.yaml"))))
    assert set(d) == set(f)
    assert sum(d.values()) * 2 < sum(f.values())


def test_a_report_before_any_point_has_finished(tmp_path):
    """`quantladder report` at the start of a run: an empty dataset, a page that lists the plan and
    its guessed cost (no figure, nothing as zero)."""
    import pandas as pd

    from quantladder import config as qconfig
    from quantladder import progress

    cfg = qconfig.load_config([])
    parquet, html, p = progress.partial_report(cfg, "some-card", tmp_path)
    assert p["finished"] == 0 and p["planned"] == len(p["missing"]) > 0
    assert pd.read_parquet(parquet).empty
    text = html.read_text()
    assert "partial report: 0 of" in text and "Not measured yet" in text
    assert all(j["basis"] == "estimate" for j in p["jobs_left"])
