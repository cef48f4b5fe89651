# BFCL v4 function calling (Patil et al., gorilla.cs.berkeley.edu/leaderboard), prompting mode
# through the raw completion path. Data once (from the bfcl-eval wheel, without its dependencies,
# or the hub), answers per point (resumable, GPU host), verdicts per point from the saved answers
# (scoring host: multi-turn calls run there, in the sandbox).

BFCL_DATA = "resources/bfcl"
BFCL_DIR = POINT_DIR + "/bfcl"
BFCL_DEFAULT_SOURCE = {"wheel": {"version": "2026.3.23"}}


def bfcl_section():
    return config["benchmarks"].get("bfcl", {})


def get_bfcl_source(wildcards):
    return json.dumps(bfcl_section().get("source", BFCL_DEFAULT_SOURCE), sort_keys=True)


def get_bfcl_scorer_version(wildcards):
    from quantladder.benchmarks.bfcl import SCORER_VERSION

    return SCORER_VERSION


def get_bfcl_reference_verdicts(wildcards):
    """The reference point's verdicts (reference rung, f16 KV cache), for flips; none for the
    reference point itself. As with KLD, a quantized KV cache's flips then include what it costs.
    """
    ref = qconfig.reference_rung(config, wildcards.family)
    if wildcards.rung == ref and wildcards.kv == "f16":
        return []
    return f"results/{wildcards.card}/points/{wildcards.family}/{ref}/f16/bfcl/verdicts.jsonl"


rule bfcl_data:
    output:
        record=BFCL_DATA + "/data.json",
        root=directory(BFCL_DATA + "/data"),
    log:
        "logs/bfcl_data.log",
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
        data=BFCL_DATA + "/data.json",
    output:
        done=BFCL_DIR + "/generations.done.json",
    log:
        "logs/bfcl_generate/{card}/{family}/{rung}/{kv}.log",
    threads: workflow.cores
    resources:
        mem_mb=mem_mb_from_input(1.5),
        runtime=runtime_for("bfcl_generate", 240),
    params:
        spec=spec_hash("bfcl"),
    script:
        "../scripts/bfcl_generate.py"


rule bfcl_score:
    input:
        done=BFCL_DIR + "/generations.done.json",
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("bfcl"),
        data=BFCL_DATA + "/data.json",
        reference_verdicts=get_bfcl_reference_verdicts,
    output:
        metrics=BFCL_DIR + "/metrics.json",
        verdicts=BFCL_DIR + "/verdicts.jsonl",
    log:
        "logs/bfcl_score/{card}/{family}/{rung}/{kv}.log",
    threads: 1
    resources:
        mem_mb=2048,
        runtime=runtime_for("bfcl_score", 60),
    params:
        spec=spec_hash("bfcl"),
        scorer=get_bfcl_scorer_version,
    script:
        "../scripts/bfcl_score.py"
