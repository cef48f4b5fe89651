# Recommendation: which (family, rung, KV type) to run for a memory budget at the context actually
# used, chosen by an integer program (pulp) over the card's dataset. Reads points.parquet only.
#
#   snakemake results/<card>/recommendation/mem24GiB-ctx32768.json
#
# Optional config section `recommend:` (kv_types: [f16, q8_0], min_tg_tokens_per_s: 20, parallel: 1,
# weights: {bfcl: 1, ruler: 2}, tolerance: {pass_at_1: 1, kld_mean: 0.01}, cautious: false,
# corpora: [wikitext-2], accept: "think_close>=-2pt, think_tokens<=1.25x"); unset keys mean any KV type, no speed floor, equal task weights, the
# documented tolerances (docs/statistics.md), measured figures, every perplexity corpus.


rule recommend:
    input:
        points="results/{card}/points.parquet",
    output:
        report(
            "results/{card}/recommendation/mem{mem}-ctx{ctx}.json",
            caption="../workflow/quantladder/captions/recommendation.rst",
            category="Recommendation",
        ),
    log:
        "logs/recommend/{card}/mem{mem}-ctx{ctx}.log",
    wildcard_constraints:
        mem=r"[0-9]+(\.[0-9]+)?([KMGT]i?B?|[kmgt]i?b?)?",
        ctx=r"[0-9]+[kK]?",
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=2048,
        runtime=runtime_for("recommend", 5),
    params:
        # plain strings, so that changing a `recommend:` setting reruns the rule
        kv_types=json.dumps(config.get("recommend", {}).get("kv_types")),
        min_tg=json.dumps(config.get("recommend", {}).get("min_tg_tokens_per_s")),
        parallel=json.dumps(config["recommend"]["parallel"]),
        weights=json.dumps(
            config.get("recommend", {}).get("weights", {}), sort_keys=True
        ),
        tolerance=json.dumps(
            config.get("recommend", {}).get("tolerance", {}), sort_keys=True
        ),
        cautious=json.dumps(config["recommend"]["cautious"]),
        corpora=json.dumps(config.get("recommend", {}).get("corpora")),
        accept=json.dumps(config.get("recommend", {}).get("accept")),
    script:
        "../scripts/recommend.py"
