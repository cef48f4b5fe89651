# Code benchmarks: HumanEval (offline) and BigCodeBench-Hard, one path for both suites.
# generate_code runs on the GPU host and never executes what the model wrote; score_code runs the
# saved replies' tests in the sandbox only (quantladder.sandbox). The Slurm profile places
# score_code on its own partition (the scoring host), by rule name.

import os

CODE_SUITES = ["humaneval", "bigcodebench_hard"]
CODE_DIR = os.path.join(POINT_DIR, "{suite}")


wildcard_constraints:
    suite="|".join(CODE_SUITES),


def get_code_scorer_version(wildcards):
    from quantladder.benchmarks.code.score import SCORER_VERSION

    return SCORER_VERSION


def get_code_anchor(wildcards):
    return f"results/{wildcards.card}/anchors/{wildcards.suite}.json"


def get_code_spec(wildcards):
    return spec_hash(wildcards.suite)(wildcards)


def get_code_scoring_env(wildcards):
    """The pinned scoring environment (its hash enters the manifest); HumanEval needs none."""
    if wildcards.suite == "bigcodebench_hard":
        return "envs/bigcodebench-eval.txt"
    return []


rule generate_code:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_code_anchor,
    output:
        done=os.path.join(CODE_DIR, "generations.done.json"),
    log:
        "logs/generate_code/{card}/{family}/{rung}/{kv}/{suite}.log",
    threads: workflow.cores
    resources:
        mem_mb=mem_mb_from_input(1.5),
        runtime=runtime_for("generate_code", 240),
    params:
        spec=get_code_spec,
    script:
        "../scripts/code_generate.py"


rule score_code:
    input:
        done=os.path.join(CODE_DIR, "generations.done.json"),
        gguf=get_rung_gguf,  # not read: the point's identity (manifest) comes with its sidecar
        info=get_rung_info,
        anchor=get_code_anchor,
        env=get_code_scoring_env,
    output:
        metrics=os.path.join(CODE_DIR, "metrics.json"),
        verdicts=os.path.join(CODE_DIR, "verdicts.jsonl"),
    log:
        "logs/score_code/{card}/{family}/{rung}/{kv}/{suite}.log",
    threads: workflow.cores
    resources:
        mem_mb=4096,
        runtime=runtime_for("score_code", 120),
    params:
        spec=get_code_spec,
        scorer=get_code_scorer_version,
    script:
        "../scripts/code_score.py"
