# BFCL v4 function calling (Patil et al., gorilla.cs.berkeley.edu/leaderboard), prompting mode
# through the raw completion path. Data once (from the bfcl-eval wheel, without its dependencies,
# or the hub), answers per point (resumable, GPU host), verdicts per point from the saved answers
# (scoring host: multi-turn calls run there, in the sandbox).


rule bfcl_data:
    output:
        record="resources/bfcl/data.json",
        root=directory("resources/bfcl/data"),
    log:
        "logs/bfcl_data.log",
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=runtime_for("bfcl_data", 15),
    params:
        source=get_bfcl_source,
    script:
        "../scripts/bfcl_data.py"


rule bfcl_generate:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("bfcl"),
        data="resources/bfcl/data.json",
    output:
        done="results/{card}/points/{family}/{rung}/{kv}/bfcl/generations.done.json",
    log:
        "logs/bfcl_generate/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb(
            "inference", n_ctx=config["benchmarks"].get("bfcl", {}).get("n_ctx")
        ),
        runtime=qres.runtime_min("generate", config, rule="bfcl_generate"),
    params:
        spec=spec_hash("bfcl"),
    script:
        "../scripts/bfcl_generate.py"


rule bfcl_score:
    input:
        done="results/{card}/points/{family}/{rung}/{kv}/bfcl/generations.done.json",
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("bfcl"),
        data="resources/bfcl/data.json",
        reference_verdicts=get_bfcl_reference_verdicts,
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/bfcl/metrics.json",
        verdicts="results/{card}/points/{family}/{rung}/{kv}/bfcl/verdicts.jsonl",
    log:
        "logs/bfcl_score/{card}/{family}/{rung}/{kv}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=runtime_for("bfcl_score", 60),
    params:
        spec=spec_hash("bfcl"),
        scorer=get_bfcl_scorer_version,
    script:
        "../scripts/bfcl_score.py"
