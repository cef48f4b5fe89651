# Teacher-forced fidelity of task points (quantladder.measures.fidelity; docs/your-tasks.md):
#
#   reply_logits  the reference rung through its own replies, log-probs stored once per (card, family, task)
#   fidelity      per task point: first divergence, reply length and loop change against the reference's
#                 replies, and the KLD / same-top-token rate of the rung teacher-forced through them
#
# Planned for the benchmarks listed in `fidelity.benchmarks` (quantladder.targets.fidelity_tasks).


rule reply_logits:
    input:
        gguf=get_reference_gguf,
        info=get_reference_info,
        generations=get_reference_generations,
    output:
        logits="results/{card}/reference_logits/{family}/replies-{task}.qlogits",
        info="results/{card}/reference_logits/{family}/replies-{task}.json",
    log:
        "logs/reply_logits/{card}/{family}/{task}.log",
    benchmark:
        "logs/benchmarks/reply_logits/{card}/{family}/{task}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("reply_logits"),
        mem_mb=qres.mem_mb("inference"),
        # learned only from jobs timed after the replies they read were made (other replies: other work)
        runtime=qres.runtime_fixed("reply_logits", 30, config, work=("generations",)),
    params:
        spec=get_fidelity_spec,
    script:
        "../scripts/fidelity.py"


rule fidelity:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        reference="results/{card}/reference_logits/{family}/replies-{task}.qlogits",
        reference_info="results/{card}/reference_logits/{family}/replies-{task}.json",
        reference_generations=get_reference_generations,
        generations="results/{card}/points/{family}/{rung}/{kv}/{task}/generations.jsonl",
    output:
        metrics="results/{card}/points/{family}/{rung}/{kv}/fidelity-{task}/metrics.json",
        manifest="results/{card}/points/{family}/{rung}/{kv}/fidelity-{task}/manifest.json",
    log:
        "logs/fidelity/{card}/{family}/{rung}/{kv}/{task}.log",
    benchmark:
        "logs/benchmarks/fidelity/{card}/{family}/{rung}/{kv}/{task}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("fidelity"),
        mem_mb=qres.mem_mb("inference"),
        runtime=qres.runtime_fixed(
            "fidelity", 30, config, work=("generations", "reference_generations")
        ),
    params:
        spec=get_fidelity_spec,
    script:
        "../scripts/fidelity.py"
