"""Rule score: a task benchmark's verdicts and figures for one point, from the saved generations only.

Placed on the scoring host (the Slurm profile puts the rule on its own partition): code benchmarks
and BFCL multi-turn run model-written code here, in the sandbox and nowhere else; with no sandbox
backend the rule stops with install instructions before anything runs.
"""

import json
from pathlib import Path

from quantladder import budget, points, scoring
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.base import read_items
from quantladder.gguf_meta import GGUFInfo
from quantladder.io import GENERATIONS, JsonlFile, read_json, sha256_file
from quantladder.scriptutil import log, main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk)
    bench = pt.bench
    bench.expect(json.loads(smk.params.digests))  # the checks as planned, or no verdict is given
    # both declared files checked against the count and sha256 recorded beside them
    records, gen_meta = JsonlFile(smk.input.generations, GENERATIONS).read_declared()
    items, items_meta = read_items(smk.input.item_file)
    source = read_json(smk.input.source)
    bench.verify_source(source, str(smk.input.source))
    data = {"name": bench.name, "version": source.get("version"), "sha256": source.get("sha256"),
            "items_sha256": items_meta["sha256"], "n_items": items_meta["n_items"], "digests": bench.planned,
            "items": {k: v for k, v in items_meta.items() if k not in ("key",)}}
    if smk.input.get("env"):
        data["scoring_env"] = {"requirements": str(smk.input.env), "sha256": sha256_file(smk.input.env)}
    if pt.blocked or gen_meta.get("blocked"):
        pt.write_metrics(smk.output.metrics, [], data=data, status="blocked",
                         status_reason=gen_meta.get("reason") or pt.anchor.get("reason"),
                         extra=scoring.write_verdicts(smk.output.verdicts, []))
        return
    if gen_meta.get("items_sha256") != items_meta["sha256"]:
        raise ValueError(f"{smk.input.meta}: generated for another items file; rerun rule generate")
    if gen_meta.get("key") and gen_meta["key"] != smk.params.generation_key:
        # never score replies made under other generation settings as if they were this config's
        raise ValueError(f"{smk.input.meta}: generated with generation key {gen_meta['key']}, the config's is "
                         f"{smk.params.generation_key}; run snakemake again (it regenerates this point first)")
    left_out = gen_meta.get("not_regenerated") or {}
    if left_out:  # the noise series' items that had no batch mates at either setting (rule generate)
        items = [it for it in items if it.id not in set(left_out["items"])]
        data["not_regenerated"] = left_out
    setup = bench.scoring_setup()  # the sandbox backend is checked before anything runs
    info = GGUFInfo(**pt.model_record["info"]) if pt.model_record.get("info") else None
    env = bench.open_env(source, "score")
    ctx = ScoringContext(env=env, threads=int(smk.threads or 1), log=log)
    out = scoring.score(bench, items, records, gen_meta, key=smk.params.key,
                        store_dir=Path(smk.output.verdicts).parent, ctx=ctx, kv_info=info, kv=pt.kv,
                        budget=budget.from_snakemake(smk))
    status, reason = out.status, out.reason
    if status is None and reason:
        # a finished point with a note (items longer than their context, an early stop): kept beside
        # the anchor's reason, not dropped for having no status of its own
        status, anchored = pt.status
        reason = "; ".join(r for r in (anchored, reason) if r)
    pt.write_metrics(smk.output.metrics, out.rows, data=data, engine=gen_meta.get("engine"),
                     status=status, status_reason=reason,
                     keys={"generation": gen_meta.get("key")},
                     extra={"scorer_version": bench.scorer_version, "scoring": setup, **out.facts,
                            **scoring.write_verdicts(smk.output.verdicts, out.verdicts),
                            "generation": {k: gen_meta.get(k) for k in ("n_parallel", "wave_size", "n_waves",
                                                                       "replay_mismatches", "seconds", "stopped",
                                                                       "early_stop", "policy", "series")}})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
