"""Rule bfcl_score: per-item verdicts and metric rows from the saved generations (never generates).

Multi-turn items are replayed in the sandbox (the model's calls and the ground truth's in separate
runs); the state and response checks compare their snapshots here. Flips are counted against the
reference rung's verdicts when the point is not the reference itself.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import flips, points  # noqa: E402
from quantladder.benchmarks.bfcl import SCORER_VERSION, data, run as bfcl_run, score  # noqa: E402
from quantladder.benchmarks.bfcl.data import MULTI_TURN  # noqa: E402
from quantladder.errors import DataError  # noqa: E402
from quantladder.io import atomic_path, read_json, read_jsonl  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def write_verdicts(path, verdicts):
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(v, sort_keys=True, default=str) + "\n" for v in verdicts))


def run(smk):
    pt = points.from_snakemake(smk, "bfcl")
    s = bfcl_run.settings(smk.config["benchmarks"].get("bfcl"))
    done = read_json(smk.input.done)
    if pt.blocked or done.get("blocked"):
        write_verdicts(smk.output.verdicts, [])
        pt.write_metrics(smk.output.metrics, [])
        return
    record = read_json(smk.input.data)
    data.verify(record)
    items = data.load_items(record, s["categories"], s["limit"], s["limits"], s["seed"])
    if done.get("items_sha256") != data.items_hash(items):
        raise DataError(f"{smk.input.done}: generated for another item set; rerun rule bfcl_generate")
    gens = [g for g in read_jsonl(Path(smk.input.done).with_name("generations.jsonl"))
            if g.get("spec") == done.get("spec")]
    if not done.get("complete"):  # out of time: score what was generated, marked incomplete
        have = {g["item_id"] for g in gens}
        items = [it for it in items if it["id"] in have]
    executor = None
    if any(it["category"] in MULTI_TURN for it in items):
        from quantladder.benchmarks.bfcl.multiturn import SandboxExecutor

        executor = SandboxExecutor(record["root"], backend=s["sandbox_backend"], python=s["sandbox_python"],
                                   wall_s=s["sandbox_wall_s"])
    verdicts = bfcl_run.score(items, gens, executor=executor)
    write_verdicts(smk.output.verdicts, verdicts)
    rows = score.metric_rows(verdicts, s["categories"])
    if smk.input.get("reference_verdicts"):
        rows += flips.metric_rows(flips.flips(read_jsonl(smk.input.reference_verdicts), verdicts))
    n_ctx = (done.get("engine") or {}).get("n_ctx", s["n_ctx"])
    for r in rows:
        r["n_ctx"] = n_ctx
    pt.write_metrics(
        smk.output.metrics, rows, incomplete=not done.get("complete", False),
        data={"name": "bfcl", "version": record["version"], "sha256": record["sha256"], "origin": record["origin"],
              "items_sha256": data.items_hash(items), "n_items": len(items), "categories": s["categories"]},
        engine=done.get("engine"),
        extra={"scorer_version": SCORER_VERSION,
               "sandbox": executor.describe() if executor else None},
    )


main(run, snakemake)
