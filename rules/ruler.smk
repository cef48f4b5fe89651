# RULER long-context retrieval (Hsieh et al. 2024, github.com/NVIDIA/RULER).
# Items once per family (they depend on the tokenizer only), answers per point (resumable, GPU
# host), scores per point from the saved answers (scoring host). KV types come from the point.

RULER_ITEMS = "resources/ruler/{family}"
RULER_DIR = POINT_DIR + "/ruler"


def get_ruler_items_spec(wildcards):
    """What the items depend on: the ruler settings, the family's source and chat flag, the version."""
    import quantladder.benchmarks.ruler as qruler

    fam = config["families"][wildcards.family]
    return qmanifest.hash_obj(
        {
            "ruler": config["benchmarks"]["ruler"],
            "source": fam["source"],
            "sha256": fam.get("sha256"),
            "chat": fam.get("chat", True),
            "version": qruler.RULER_VERSION,
        }
    )[:16]


def get_ruler_reference_info(wildcards):
    return get_reference_gguf(wildcards) + ".json"


def get_ruler_version(wildcards):
    import quantladder.benchmarks.ruler as qruler

    return qruler.RULER_VERSION


def ruler_max_length():
    return max(config["benchmarks"]["ruler"].get("lengths", [131072]))


def ruler_mem_mb(wildcards, input):
    """Model file + the KV cache predicted at the largest length for this point's KV types + headroom."""
    from quantladder.engine import parse_kv
    from quantladder.gguf_meta import GGUFInfo

    overhead = config["resources"].get("mem_overhead_mb", 1024)
    try:
        info = GGUFInfo(**json.loads(Path(input.info).read_text())["info"])
        k, v = parse_kv(wildcards.kv)
        kv_mb = info.kv_bytes(ruler_max_length(), k, v) / 2**20
    except (OSError, KeyError, TypeError, ValueError):
        # The sidecar is not readable yet: assume a cache as large as the model.
        kv_mb = input.size_mb
    return int(input.size_mb + 1.2 * kv_mb + overhead)


rule ruler_items:
    input:
        gguf=get_reference_gguf,
        info=get_ruler_reference_info,
    output:
        item_file=RULER_ITEMS + "/items.jsonl",
        meta=RULER_ITEMS + "/items.json",
    log:
        "logs/ruler_items/{family}.log",
    threads: 1
    resources:
        mem_mb=mem_mb_from_input(1.2),
        runtime=runtime_for("ruler_items", 60),
    params:
        spec=get_ruler_items_spec,
    script:
        "../scripts/ruler_items.py"


rule ruler_generate:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("ruler"),
        item_file=RULER_ITEMS + "/items.jsonl",
        meta=RULER_ITEMS + "/items.json",
    output:
        # generations.jsonl lives beside this marker and is not declared: see scripts/ruler_generate.py.
        done=RULER_DIR + "/generations.done.json",
    log:
        "logs/ruler_generate/{card}/{family}/{rung}/{kv}.log",
    threads: workflow.cores
    resources:
        mem_mb=ruler_mem_mb,
        runtime=runtime_for("ruler_generate", 240),
    params:
        spec=spec_hash("ruler"),
        version=get_ruler_version,
    script:
        "../scripts/ruler_generate.py"


rule ruler_score:
    input:
        gguf=get_rung_gguf,
        info=get_rung_info,
        anchor=get_anchor_status("ruler"),
        item_file=RULER_ITEMS + "/items.jsonl",
        meta=RULER_ITEMS + "/items.json",
        done=RULER_DIR + "/generations.done.json",
    output:
        metrics=RULER_DIR + "/metrics.json",
        manifest=RULER_DIR + "/manifest.json",
        verdicts=RULER_DIR + "/verdicts.jsonl",
    log:
        "logs/ruler_score/{card}/{family}/{rung}/{kv}.log",
    threads: 1
    resources:
        mem_mb=1024,
        runtime=runtime_for("ruler_score", 10),
    params:
        spec=spec_hash("ruler"),
        version=get_ruler_version,
    script:
        "../scripts/ruler_score.py"
