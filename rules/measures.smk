# Per-point measures: perplexity + KLD against the reference rung, speed, memory.
# Measuring rules take all the job's cores so that nothing else runs beside a timed measure.


rule reference_logits:
    input:
        gguf=get_reference_gguf,
        info=get_reference_info,
        corpus="resources/corpora/{corpus}.txt",
    output:
        logits="results/{card}/reference_logits/{family}/{corpus}-n{n_ctx}.qlogits",
        info="results/{card}/reference_logits/{family}/{corpus}-n{n_ctx}.json",
    log:
        "logs/reference_logits/{card}/{family}/{corpus}-n{n_ctx}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb("reference_logits", n_ctx=PPL_CONTEXT),
        runtime=qres.runtime_min("reference_logits", config),
    params:
        spec=get_reference_logits_spec,
    script:
        "../scripts/reference_logits.py"


rule perplexity:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        corpus=get_corpus_file,
        reference=get_reference_logits,
        anchor=get_anchor_status("perplexity"),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/perplexity/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/perplexity/manifest.json",
    log:
        "logs/perplexity/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb("inference", n_ctx=PPL_CONTEXT),
        runtime=qres.runtime_min("perplexity", config),
    params:
        spec=spec_hash("perplexity"),
    script:
        "../scripts/perplexity.py"


rule speed:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("speed"),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/speed/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/speed/manifest.json",
    log:
        "logs/speed/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb(
            "inference",
            n_ctx=config["measures"]["speed"]["n_prompt"]
            + config["measures"]["speed"]["n_gen"],
        ),
        runtime=qres.runtime_min("speed", config),
    params:
        spec=spec_hash("speed"),
    script:
        "../scripts/speed.py"


rule memory:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("memory"),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/memory/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/memory/manifest.json",
    log:
        "logs/memory/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb("inference", n_ctx=config["measures"]["memory"]["n_ctx"]),
        runtime=qres.runtime_min("memory", config),
    params:
        spec=spec_hash("memory"),
    script:
        "../scripts/memory.py"


rule energy:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("energy"),
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/energy/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/energy/manifest.json",
    log:
        "logs/energy/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb(
            "inference",
            n_ctx=config["measures"]["energy"]["n_prompt"]
            + config["measures"]["energy"]["n_gen"],
        ),
        runtime=qres.runtime_min("speed", config, rule="energy"),
    params:
        spec=spec_hash("energy"),
        idle_cache="results/{card}/idle_power.json",
    script:
        "../scripts/energy.py"
