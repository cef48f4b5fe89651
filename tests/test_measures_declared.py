"""Measures are declared once, by their own modules (quantladder.measures), and nothing else lists them.

Two checks: the declarations agree with what reads them (the schema's `measures:` sections, the hosts,
the cost axes, the anchor gates), and the recipe of docs/ARCHITECTURE.md ("A measure": its module, its
script, its rule, its schema section) is enough for a new one. For the second, a toy measure — the
tensor count of a rung's GGUF, read with the `gguf` package — is written into a copy of this checkout
from the recipe alone, and the real Snakemake runs it into the dataset; the copy's resources, timings
and progress place and price it from its declaration.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from quantladder import anchors, card, dataset_view, measures, metrics, resources, schemas
from quantladder.report import pareto

sys.path.insert(0, str(Path(__file__).parent))
import pipeline_util as pu  # noqa: E402

REPO = pu.REPO


def test_every_measure_is_declared_with_its_schema_section_host_and_figures():
    decl = measures.declared()
    assert {"perplexity", "speed", "memory", "energy", "fidelity"} <= set(decl)
    sections = schemas.load(schemas.SCHEMA_PATH)["properties"]["measures"]["properties"]
    # a point's measure is a section of `measures:`, and every section is a declared measure
    assert set(measures.point_measures()) == set(sections)
    for name, m in decl.items():
        assert m.anchor, name
        for rule, rc in m.rules.items():  # every rule that loads a model is placed on the card's host
            assert resources.host(rule) == rc.host, (name, rule)
        # its figures: declared with it as a writer (fidelity writes rows of task points)
        assert any(name in mt.writers for mt in metrics.registry().values()) or not m.per_point, name
    # the readers hold no list of their own
    assert dataset_view.COST_BENCHMARKS == ("memory", "speed", "energy")
    assert [a for a, _, _ in pareto.COST_AXES] == ["memory", "speed", "energy"]
    assert anchors.tool_gates() == {"perplexity": "llama-perplexity", "speed": "llama-bench"}
    assert resources.ALONE == frozenset({"speed", "energy"})


def test_a_measure_declared_twice_differently_or_without_its_rule_is_refused():
    m = measures.Measure("toy_twice", "a toy", rules={"toy_twice": measures.RuleCost()}, anchor="none")
    measures.declare(m)
    try:
        measures.declare(m)  # the same again: harmless (a module imported twice)
        try:
            measures.declare(measures.Measure("toy_twice", "another toy", rules={"toy_twice": measures.RuleCost()},
                                              anchor="none"))
        except ValueError as e:
            assert "declared twice" in str(e)
        else:
            raise AssertionError("a second, different declaration was taken")
    finally:
        measures._DECLARED.pop("toy_twice")
    for bad in (dict(rules={}, anchor="none"), dict(rules={"toy": measures.RuleCost()}, anchor=""),
                dict(rules={"toy": measures.RuleCost(host="moon")}, anchor="none")):
        try:
            measures.Measure("toy", "a toy", **bad)
        except ValueError as e:
            assert "toy" in str(e)
        else:
            raise AssertionError(f"{bad} was taken")


# -- the recipe: three files and a schema section --------------------------------------------------

TOY_MODULE = '''"""A toy measure: the number of tensors in a rung's GGUF (tests/test_measures_declared.py)."""

from gguf import GGUFReader

from ..metrics import Metric, row
from ..metrics import declare as declare_figures
from . import GPU, Measure, RuleCost, declare

NAME = "tensor_count"
MEASURE = declare(Measure(NAME, "tensors in the rung's GGUF", rules={NAME: RuleCost(GPU, runtime=(5, 0), guess_s=2)},
                          anchor="a count read from the file: no anchor"))
declare_figures(Metric("tensor_count", "tensors", "tensors in the rung's GGUF", (NAME,), higher_is_better=None))


def rows(path: str) -> list[dict]:
    return [row("tensor_count", len(GGUFReader(path).tensors))]
'''

TOY_SCRIPT = '''"""Rule tensor_count: the toy measure of tests/test_measures_declared.py."""

from quantladder import points
from quantladder.measures import tensor_count
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk, "tensor_count")
    pt.write_metrics(smk.output.metrics, tensor_count.rows(pt.model_path))


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
'''

TOY_RULE = '''

rule tensor_count:
    input:
        unpack(point_inputs("tensor_count")),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/tensor_count/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/tensor_count/manifest.json",
    log:
        "logs/tensor_count/{card}/{family}/{rung}/{kv}.log",
    benchmark:
        "logs/benchmarks/tensor_count/{card}/{family}/{rung}/{kv}.tsv"
    threads: 1
    resources:
        gpu=qres.gpus("tensor_count"),
        mem_mb=qres.mem_mb("inference", n_ctx=0),
        runtime=qres.runtime_min("tensor_count", config),
    params:
        spec=spec_hash("tensor_count"),
    script:
        "../scripts/tensor_count.py"
'''


def _checkout_copy(dest: Path) -> Path:
    """This checkout's files as git sees them (tracked and untracked, not ignored) under ``dest``."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                         check=True).stdout.decode().split("\0")
    for rel in filter(None, out):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_a_toy_measure_from_the_recipe_runs_into_the_dataset(tmp_path):
    repo = _checkout_copy(tmp_path / "repo")
    # 1. the module: its declaration, its figure, its rows
    (repo / "workflow/quantladder/measures/tensor_count.py").write_text(TOY_MODULE)
    # 2. the script
    (repo / "scripts/tensor_count.py").write_text(TOY_SCRIPT)
    # 3. the rule
    with open(repo / "rules/measures.smk", "a") as f:
        f.write(TOY_RULE)
    # 4. the schema section
    schema_path = repo / "config/config.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    schema["properties"]["measures"]["properties"]["tensor_count"] = {
        "type": "object", "additionalProperties": False, "default": {},
        "properties": {"enabled": {"type": "boolean", "default": True}}}
    schema_path.write_text(yaml.safe_dump(schema, sort_keys=False))

    env = {**os.environ, "PYTHONPATH": str(repo / "workflow")}
    # the copy's readers place and price it from its declaration alone
    probe = subprocess.run([sys.executable, "-c", (
        "import json; from quantladder import manifest, measures, progress, resources, timings\n"
        "from types import SimpleNamespace as S\n"
        "print(json.dumps({'host': resources.host('tensor_count'), 'gpus': resources.gpus('tensor_count'),\n"
        "  'runtime': resources.RUNTIME_KINDS['tensor_count'], 'guess': progress.GUESS_S['tensor_count'],\n"
        "  'kind': timings.kind_of('tensor_count', S(family='f')), 'points': list(measures.point_measures())}))")],
        capture_output=True, text=True, env=env, cwd=repo, check=True)
    placed = json.loads(probe.stdout)
    assert placed == {"host": "gpu", "gpus": 1, "runtime": [5, 0], "guess": 2, "kind": "f",
                      "points": ["energy", "memory", "perplexity", "speed", "tensor_count"]}

    cfg = pu.small_config(rungs=("Q8_0",))
    for name in ("perplexity", "speed", "memory", "energy"):
        cfg["measures"][name]["enabled"] = False
    cfg["measures"]["tensor_count"] = {"enabled": True}
    work = tmp_path / "work"
    work.mkdir()
    conf = pu.write_config(work, cfg)
    label = card.label()
    parquet = f"results/{label}/points.parquet"
    r = subprocess.run([pu.SNAKEMAKE, parquet, "--snakefile", str(repo / "Snakefile"), "--directory", str(work),
                        "--cores", "2", "--configfile", str(conf)], capture_output=True, text=True, env=env,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]

    df = pd.read_parquet(work / parquet)
    rows = df[df["benchmark"] == "tensor_count"]
    assert set(rows["rung"]) == {"F16", "Q8_0"}, df[["benchmark", "rung", "metric"]].drop_duplicates()
    from gguf import GGUFReader

    family = next(iter(cfg["families"]))
    for _, rw in rows.iterrows():
        gguf = work / f"resources/models/{family}" / ("reference" if rw["rung"] == "F16" else "quantized") / \
            f"{rw['rung']}.gguf"
        assert rw["metric"] == "tensor_count" and rw["unit"] == "tensors"
        assert rw["value"] == len(GGUFReader(str(gguf)).tensors)
    # its key is the measure's: its settings from the schema section, the point's engine
    man = json.loads((work / f"results/{label}/points/{family}/Q8_0/f16/tensor_count/manifest.json").read_text())
    assert man["benchmark"] == "tensor_count" and man["settings"] == {} and "measure" in man["keys"]
    # it was timed as its declaration says, under its family
    assert list((work / "logs/benchmarks/tensor_count").rglob("*.tsv"))


def test_the_aggregate_alone_knows_every_measures_figures():
    """The measures declare their figures in their own modules, so a process that builds the dataset and
    imports no measure (the aggregate job: scripts/aggregate.py) must still see them declared, or the
    paired columns of the per-token figures come out empty (they did, until aggregate imported the
    catalog: tests/test_pipeline.py's partial report caught it)."""
    code = ("import sys; from quantladder import aggregate, metrics, deltas\n"
            "missing = [m for m in ('kld_mean', 'ln_ppl_ratio', 'same_top_token', 'tg_tokens_per_s', 'weights_bytes',\n"
            "           'joules_per_generated_token', 'teacher_kld') if m not in metrics.registry()]\n"
            "assert not missing, missing\n"
            "assert deltas.comparison_family('perplexity', 'kld_mean', 'prose-en') == deltas.TOKENS\n"
            "assert 'quantladder.measures.perplexity' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(REPO / "workflow")})
