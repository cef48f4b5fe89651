# Anchor gate per (card, benchmark): runs before any point of that benchmark measures.


rule anchor_gate:
    output:
        "results/{card}/anchors/{benchmark}.json",
    log:
        "logs/anchor_gate/{card}/{benchmark}.log",
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
