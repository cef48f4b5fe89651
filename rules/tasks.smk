# Task benchmarks (BFCL, HumanEval, BigCodeBench-Hard, RULER, ...): four generic rules for all of
# them. A benchmark is a module (quantladder.benchmarks.*) plus a config section: nothing here to copy.
#
#   benchmark_source  the data, fetched and pinned once (may download: runs on the submitting host)
#   benchmark_items   the family's items, fixed and ordered (RULER fits them to the family's tokenizer)
#   generate          per point: the one generation loop (GPU host; resumable; batched)
#   score             per point, from the saved generations only (scoring host: the sandbox)
#
# Keys (quantladder.manifest): items_key, generation_key, scoring_key. A scoring-only change re-plans
# score jobs only. `series` is `points` (the ladder) or `noise` (the reference rung generated again at
# another batch setting: the harness's own noise floor beside every rung's flips).


wildcard_constraints:
    task="|".join(TASKS) if TASKS else "no-task",
    series="points|noise",


rule benchmark_source:
    output:
        "resources/benchmarks/{task}/source.json",
    log:
        "logs/benchmark_source/{task}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=runtime_for("benchmark_source", 30),
    params:
        key=get_source_key,
    script:
        "../scripts/benchmark_source.py"


rule benchmark_items:
    input:
        source="resources/benchmarks/{task}/source.json",
        gguf=get_reference_gguf,
        info=get_reference_info,
    output:
        item_file="resources/benchmarks/{task}/{family}/items.jsonl",
        meta="resources/benchmarks/{task}/{family}/items.json",
    log:
        "logs/benchmark_items/{task}/{family}.log",
    benchmark:
        "logs/benchmarks/benchmark_items/{task}/{family}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=qres.mem_mb("inference"),
        runtime=runtime_for("benchmark_items", 60),
    params:
        key=get_items_key,
        digests=get_items_digests,
    script:
        "../scripts/benchmark_items.py"


rule generate:
    input:
        unpack(generate_inputs),
    output:
        generations="results/{card}/{series}/{family}/{rung}/{kv}/{task}/generations.jsonl",
        meta="results/{card}/{series}/{family}/{rung}/{kv}/{task}/generations.json",
    log:
        "logs/generate/{card}/{series}/{family}/{rung}/{kv}/{task}.log",
    benchmark:
        "logs/benchmarks/generate/{card}/{series}/{family}/{rung}/{kv}/{task}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("generate"),
        mem_mb=qres.generate_mem_mb(config),
        runtime=qres.runtime_min(
            "generate", config, rule="generate", work=("item_file",)
        ),
    params:
        key=get_generation_key,
        anchor_key=get_task_anchor_key,
    script:
        "../scripts/generate.py"


rule score:
    input:
        unpack(score_inputs),
    output:
        metrics="results/{card}/{series}/{family}/{rung}/{kv}/{task}/metrics.json",
        manifest="results/{card}/{series}/{family}/{rung}/{kv}/{task}/manifest.json",
        verdicts="results/{card}/{series}/{family}/{rung}/{kv}/{task}/verdicts.jsonl",
    log:
        "logs/score/{card}/{series}/{family}/{rung}/{kv}/{task}.log",
    benchmark:
        "logs/benchmarks/score/{card}/{series}/{family}/{rung}/{kv}/{task}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=4096,
        runtime=runtime_for("score", 120),
    params:
        key=get_scoring_key,
        generation_key=get_generation_key,
        digests=get_scoring_digests,
    script:
        "../scripts/score.py"
