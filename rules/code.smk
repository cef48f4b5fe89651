# Code benchmarks: HumanEval (offline) and BigCodeBench-Hard, one path for both suites.
# generate_code runs on the GPU host and never executes what the model wrote; score_code runs the
# saved replies' tests in the sandbox only (quantladder.sandbox). The Slurm profile places
# score_code on its own partition (the scoring host), by rule name.


wildcard_constraints:
    suite="|".join(CODE_SUITES),


rule generate_code:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_code_anchor,
    output:
        done="results/{card}/points/{family}/{rung}/{kv}/{suite}/generations.done.json",
    log:
        "logs/generate_code/{card}/{family}/{rung}/{kv}/{suite}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb("inference", n_ctx=8192),
        runtime=qres.runtime_min("generate", config, rule="generate_code"),
    params:
        spec=get_code_spec,
    script:
        "../scripts/code_generate.py"


rule score_code:
    input:
        done="results/{card}/points/{family}/{rung}/{kv}/{suite}/generations.done.json",
        gguf=get_rung_gguf,  # not read: the point's identity (manifest) comes with its sidecar
        info=get_rung_info,
        anchor=get_code_anchor,
        env=get_code_scoring_env,
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/{suite}/metrics.json",
        verdicts="results/{card}/points/{family}/{rung}/{kv}/{suite}/verdicts.jsonl",
    log:
        "logs/score_code/{card}/{family}/{rung}/{kv}/{suite}.log",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=4096,
        runtime=runtime_for("score_code", 120),
    params:
        spec=get_code_spec,
        scorer=get_code_scorer_version,
    script:
        "../scripts/code_score.py"
