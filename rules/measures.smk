# Per-point measures: perplexity + KLD against the reference rung, speed, memory.
# Measuring rules take all the job's cores so that nothing else runs beside a timed measure.


rule reference_logits:
    input:
        gguf=get_reference_gguf,
        info=get_reference_info,
        corpus="resources/corpora/{corpus}.txt",
        corpus_info="resources/corpora/{corpus}.json",
    output:
        logits="results/{card}/reference_logits/{family}/{corpus}-{ctx}.qlogits",
        info="results/{card}/reference_logits/{family}/{corpus}-{ctx}.json",
    log:
        "logs/reference_logits/{card}/{family}/{corpus}-{ctx}.log",
    benchmark:
        "logs/benchmarks/reference_logits/{card}/{family}/{corpus}-{ctx}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("reference_logits"),
        mem_mb=get_perplexity_mem_mb("reference_logits"),
        runtime=qres.runtime_min("reference_logits", config),
    params:
        spec=get_reference_logits_spec,
    script:
        "../scripts/reference_logits.py"


# One pass: a point on one corpus at one context (docs/corpora.md). Passes of a point are
# separate jobs, so adding a corpus computes only its passes.
rule perplexity:
    input:
        unpack(perplexity_inputs),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/perplexity/{corpus}-{ctx}/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/perplexity/{corpus}-{ctx}/manifest.json",
    log:
        "logs/perplexity/{card}/{family}/{rung}/{kv}/{corpus}-{ctx}.log",
    benchmark:
        "logs/benchmarks/perplexity/{card}/{family}/{rung}/{kv}/{corpus}-{ctx}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("perplexity"),
        mem_mb=get_perplexity_mem_mb("inference"),
        runtime=qres.runtime_min("perplexity", config),
    params:
        spec=get_perplexity_spec,
        calibration=get_calibration_spec,
    script:
        "../scripts/perplexity.py"


# The point's passes in one metrics file (rows keep their corpus as subset).
rule perplexity_point:
    input:
        passes=get_perplexity_passes,
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/perplexity/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/perplexity/manifest.json",
    log:
        "logs/perplexity_point/{card}/{family}/{rung}/{kv}.log",
    localrule: True
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=1024,
        runtime=10,
    params:
        spec=spec_hash("perplexity"),
        skipped=get_perplexity_skipped,
    script:
        "../scripts/perplexity.py"


rule speed:
    input:
        unpack(point_inputs("speed")),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/speed/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/speed/manifest.json",
    log:
        "logs/speed/{card}/{family}/{rung}/{kv}.log",
    benchmark:
        "logs/benchmarks/speed/{card}/{family}/{rung}/{kv}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("speed"),
        mem_mb=qres.mem_mb(
            "inference",
            n_ctx=(
                config["measures"]["speed"]["n_prompt"]
                + config["measures"]["speed"]["n_gen"]
                + max(config["measures"]["speed"]["depths"], default=0)
            )
            * max(config["measures"]["speed"]["parallel"], default=1),
        ),
        runtime=qres.runtime_min("speed", config),
    params:
        spec=spec_hash("speed"),
    script:
        "../scripts/speed.py"


rule memory:
    input:
        unpack(point_inputs("memory")),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/memory/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/memory/manifest.json",
    log:
        "logs/memory/{card}/{family}/{rung}/{kv}.log",
    benchmark:
        "logs/benchmarks/memory/{card}/{family}/{rung}/{kv}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("memory"),
        mem_mb=qres.mem_mb("inference", n_ctx=config["measures"]["memory"]["n_ctx"]),
        runtime=qres.runtime_min("memory", config),
    params:
        spec=spec_hash("memory"),
    script:
        "../scripts/memory.py"


rule energy:
    input:
        unpack(point_inputs("energy")),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/energy/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/energy/manifest.json",
    log:
        "logs/energy/{card}/{family}/{rung}/{kv}.log",
    benchmark:
        "logs/benchmarks/energy/{card}/{family}/{rung}/{kv}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("energy"),
        mem_mb=qres.mem_mb(
            "inference",
            n_ctx=config["measures"]["energy"]["n_prompt"]
            + config["measures"]["energy"]["n_gen"],
        ),
        runtime=qres.runtime_min("energy", config),
    params:
        spec=spec_hash("energy"),
        idle_cache="results/{card}/idle_power.json",
    script:
        "../scripts/energy.py"
