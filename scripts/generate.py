"""Rule generate: a task benchmark's replies for one point, through the one generation loop.

Runs on the GPU host and never executes what the model wrote (BFCL multi-turn calls run in the
sandbox). Replies are appended to a store beside the outputs as each item finishes; a killed or
budget-stopped job (exit 75) resumes from it, and the declared outputs are written at the end.
"""

from pathlib import Path

from quantladder import budget, generation, points, reasoning
from quantladder.benchmarks.base import read_items
from quantladder.corpora import chat_template_of
from quantladder.engine import Engine
from quantladder.generation_policy import GenerationPolicy
from quantladder.gguf_meta import GGUFInfo
from quantladder.io import VERDICTS, JsonlFile, read_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk)
    bench = pt.bench
    items, items_meta = read_items(smk.input.item_file)
    if pt.blocked:  # the anchor gate failed on this card: generate nothing, say why
        generation.write_blocked(smk.output.generations, smk.output.meta, benchmark=bench.name,
                                 reason=pt.anchor.get("reason"), planned=items_meta["n_items"],
                                 items_sha256=items_meta["sha256"])
        return
    source = read_json(smk.input.source)
    bench.verify_source(source, str(smk.input.source))
    policy = GenerationPolicy.of(pt.config, bench.name)
    info = GGUFInfo(**pt.model_record["info"]) if pt.model_record.get("info") else None
    max_ctx = max((bench.n_ctx(it) for it in items), default=0)
    n_parallel = policy.n_parallel_for(info, max_ctx, pt.kv)
    env = bench.open_env(source, "generate")
    items = bench.order(items)
    alone: list[str] = []
    if pt.series == "noise":  # an item without batch mates in both series is one computation twice
        points_policy = GenerationPolicy.of(smk.config, bench.name)
        alone = [it.id for it in generation.alone_at_both(
            items, bench, points_policy.n_parallel_for(info, max_ctx, pt.kv), n_parallel, policy.wave_factor)]
        left_out = set(alone)
        items = [it for it in items if it.id not in left_out]
    stopper = None
    if smk.input.get("reference_verdicts"):  # early stopping on, and this is not the reference point
        from quantladder.benchmarks import ScoringContext
        from quantladder.early_stop import Stopper

        reference, _ = JsonlFile(smk.input.reference_verdicts, VERDICTS).read_declared()
        stopper = Stopper(bench, items, reference, ScoringContext(env, threads=1))
    # a thinking family renders with the reasoning kwargs, honours the thinking's budget and records
    # the split of every reply (docs/thinking.md); the rung's own template decides its format
    setup = reasoning.setup_for(pt.config, pt.family, chat_template_of(pt.model_path)[0],
                                source=f"config (family {pt.family}, rung {pt.rung})")

    def engine_for(n_ctx: int) -> Engine:
        eng = Engine(pt.model_path, pt.engine_settings(n_ctx=n_ctx, n_parallel=n_parallel,
                                                       prefix_cache=policy.prefix_cache,
                                                       batch_invariant=policy.batch_invariant))
        eng.reasoning = setup
        return eng

    loop = generation.Loop(
        bench, items, key=smk.params.key, store_dir=Path(smk.output.generations).parent,
        engine_for=engine_for,
        n_parallel=n_parallel, wave_factor=policy.wave_factor,
        budget=budget.from_snakemake(smk), time_budget_s=bench.settings.get("time_budget_s"),
        label=f"{bench.name} {pt.family}/{pt.rung}/{pt.kv}" + (" (noise floor)" if pt.series == "noise" else ""),
        env=env, stopper=stopper)
    result = loop.run()
    generation.write_outputs(result, smk.output.generations, smk.output.meta, extra={
        "blocked": False, "items_sha256": items_meta["sha256"], "policy": policy.record, "series": pt.series,
        **({"reasoning": setup.record()} if setup.explicit or setup.splits else {}),
        **({"not_regenerated": {"items": alone, "reason": generation.ALONE_REASON}} if alone else {})})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
