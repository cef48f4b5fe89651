# RULER long-context retrieval (Hsieh et al. 2024, github.com/NVIDIA/RULER).
# Items once per family (they depend on the tokenizer only), answers per point (resumable, GPU
# host), scores per point from the saved answers (scoring host). KV types come from the point.
# Input functions live in quantladder.benchmarks.ruler.rules; paths are full literals (--lint).

import quantladder.benchmarks.ruler as qruler
import quantladder.benchmarks.ruler.rules as qruler_rules

RULER_ITEMS = "resources/ruler/{family}/items.jsonl"
RULER_ITEMS_META = "resources/ruler/{family}/items.json"
RULER_DONE = "results/{card}/points/{family}/{rung}/{kv}/ruler/generations.done.json"

get_ruler_items_spec = qruler_rules.items_spec(config)
get_ruler_reference_info = qruler_rules.sidecar_of(get_reference_gguf)
ruler_mem_mb = qruler_rules.mem_mb(config)


rule ruler_items:
    input:
        gguf=get_reference_gguf,
        info=get_ruler_reference_info,
    output:
        item_file=RULER_ITEMS,
        meta=RULER_ITEMS_META,
    log:
        "logs/ruler_items/{family}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=qres.mem_mb("inference"),
        runtime=runtime_for("ruler_items", 60),
    params:
        spec=get_ruler_items_spec,
    script:
        "../scripts/ruler_items.py"


rule ruler_generate:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("ruler"),
        item_file=RULER_ITEMS,
        meta=RULER_ITEMS_META,
    output:
        # generations.jsonl lives beside this marker and is not declared: see scripts/ruler_generate.py.
        done=RULER_DONE,
    log:
        "logs/ruler_generate/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=ruler_mem_mb,
        runtime=runtime_for("ruler_generate", 240),
    params:
        spec=spec_hash("ruler"),
        version=qruler.RULER_VERSION,
    script:
        "../scripts/ruler_generate.py"


rule ruler_score:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("ruler"),
        item_file=RULER_ITEMS,
        meta=RULER_ITEMS_META,
        done=RULER_DONE,
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/ruler/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/ruler/manifest.json",
        verdicts="results/{card}/points/{family}/{rung}/{kv}/ruler/verdicts.jsonl",
    log:
        "logs/ruler_score/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=runtime_for("ruler_score", 10),
    params:
        spec=spec_hash("ruler"),
        version=qruler.RULER_VERSION,
    script:
        "../scripts/ruler_score.py"
