# Anchor gate per (card, benchmark): runs before any point of that benchmark measures.
# A task benchmark's gate has two steps, as its points do: the anchor model's replies are generated
# on the GPU host (anchor_generate), and scored, then judged, where the benchmark's points are scored
# (anchor_gate: the scoring host, whose sandbox runs the code benchmarks' model-written code).


rule anchor_generate:
    output:
        "results/{card}/anchor_generations/{task}.json",
    log:
        "logs/anchor_generate/{card}/{task}.log",
    benchmark:
        "logs/benchmarks/anchor_generate/{card}/{task}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("anchor_generate"),
        mem_mb=16384,
        runtime=runtime_for("anchor_generate", 480),
    params:
        spec=get_anchor_generate_spec,
        anchors=anchors_file(),
    script:
        "../scripts/anchor_generate.py"


rule anchor_gate:
    input:
        generated=get_anchor_generations,
    output:
        "results/{card}/anchors/{benchmark}.json",
    log:
        "logs/anchor_gate/{card}/{benchmark}.log",
    benchmark:
        "logs/benchmarks/anchor_gate/{card}/{benchmark}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=4096,
        runtime=runtime_for("anchor_gate", 240),
    params:
        spec=get_anchor_spec,
        anchors=anchors_file(),
    script:
        "../scripts/anchor_gate.py"


# The offline gates of perplexity and speed, per (card, family): llama-perplexity / llama-bench on
# the family's reference rung against the harness's own figures (quantladder.tool_gates).
rule tool_anchor_gate:
    input:
        gguf=get_reference_gguf,
        info=get_reference_info,
        corpus=get_gate_corpus,
        tools=get_llama_tools,
    output:
        "results/{card}/anchors/{benchmark}/{family}.json",
    log:
        "logs/tool_anchor_gate/{card}/{benchmark}/{family}.log",
    benchmark:
        "logs/benchmarks/tool_anchor_gate/{card}/{benchmark}/{family}.tsv"
    wildcard_constraints:
        benchmark="perplexity|speed",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("tool_anchor_gate"),
        mem_mb=qres.mem_mb("inference", n_ctx=PPL_CONTEXT),
        runtime=runtime_for("tool_anchor_gate", 60),
    params:
        spec=get_tool_gate_spec,
    script:
        "../scripts/tool_anchor_gate.py"
