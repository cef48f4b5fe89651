"""rules/recommend.smk under real Snakemake: the JSON comes from points.parquet alone, its
parameters from the target's wildcards and the `recommend:` config section."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_recommend_rule(tmp_path, fixture_dataset):
    (tmp_path / "results" / "cpu-test").mkdir(parents=True)
    shutil.copy(fixture_dataset, tmp_path / "results" / "cpu-test" / "points.parquet")
    # the rule file needs only what rules/common.smk gives every rule: `json`, runtime_for() and the
    # validated config (its `recommend:` section with the schema's defaults filled in)
    (tmp_path / "Snakefile").write_text(
        "import json\n\nfrom quantladder import schemas\n\n"
        'config["recommend"] = schemas.filled(schemas.SCHEMA_PATH, config.get("recommend"), "recommend")\n\n\n'
        "def runtime_for(name, default):\n    return default\n\n\n"
        f'include: "{REPO / "rules" / "recommend.smk"}"\n')
    (tmp_path / "config.yaml").write_text("recommend:\n  weights: {bfcl: 1}\n  min_tg_tokens_per_s: 20\n")
    targets = ["results/cpu-test/recommendation/mem3000MiB-ctx32768.json",
               "results/cpu-test/recommendation/mem1GiB-ctx128k.json"]
    snakemake = Path(sys.executable).parent / "snakemake"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}  # the package of this checkout
    p = subprocess.run([str(snakemake), *targets, "--cores", "1", "--configfile", "config.yaml"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    ok = json.loads((tmp_path / targets[0]).read_text())
    assert ok["feasible"] and ok["best"]["name"] == "small/Q8_0/f16"
    assert ok["request"]["min_tg_tokens_per_s"] == 20 and ok["request"]["weights"] == {"bfcl": 1}
    assert ok["dataset"] == "results/cpu-test/points.parquet"
    no = json.loads((tmp_path / targets[1]).read_text())
    assert no["feasible"] is False and no["message"].startswith("Infeasible: nothing fits 1.00 GiB")
    log = (tmp_path / "logs" / "recommend" / "cpu-test" / "mem3000MiB-ctx32768.log").read_text()
    assert "best:  small/Q8_0/f16" in log
    # nothing changed: a second run has nothing to do
    p = subprocess.run([str(snakemake), *targets, "--cores", "1", "--configfile", "config.yaml", "-n"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and "Nothing to be done" in p.stdout + p.stderr
