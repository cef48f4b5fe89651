import json
import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

# The package lives in workflow/; importing it from this checkout first keeps the rules and the
# scripts on one copy (Snakemake hands its own sys.path to every script it runs).
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

import quantladder.config as qconfig
import quantladder.manifest as qmanifest
import quantladder.anchors as qanchors
import quantladder.resources as qres
import quantladder.benchmarks as qbenchmarks
from quantladder import card as qcard
from quantladder.measures import perplexity as qppl
from quantladder import ladder as qladder
from quantladder import llama_tools as qtools
from quantladder import targets as qtargets
from quantladder import progress as qprogress
from quantladder import io as qio

qconfig.check_types(config, source="config")
validate(config, schema="../config/config.schema.yaml")
# Every benchmark section: a registered benchmark (else: the known names and a did-you-mean),
# validated against its own schema, errors naming `benchmarks.<name>.<key>` and the schema file.
qconfig.validate_benchmarks(config, source="config")
qconfig.check_semantics(config, source="config")

# The card keys every result. Detected here from local facts only (NVML, /proc/cpuinfo),
# never from the network; a cluster sets `card:` per partition in its profile.
CARD = qcard.label(config.get("card"))


wildcard_constraints:
    card=r"[A-Za-z0-9._-]+",
    family=r"[A-Za-z0-9._-]+",
    rung=r"[A-Za-z0-9_.-]+",
    kv=r"[a-z0-9_]+(-[a-z0-9_]+)?",
    corpus=r"[A-Za-z0-9._-]+",
    n_ctx=r"\d+",
    ctx=r"n\d+|trained",
    measure=r"[a-z_0-9]+",
    benchmark=r"[a-z_0-9]+",


POINT_DIR = "results/{card}/points/{family}/{rung}/{kv}"
# A perplexity context holds n_batch // n_ctx chunks at once (llama-perplexity's batching).
PPL_CONTEXT = max(
    config["measures"]["perplexity"]["n_batch"],
    config["measures"]["perplexity"]["n_ctx"],
)


TASKS = qtargets.tasks(config)


def _paths(targets):
    return [t.path for t in targets]


def get_point_metrics(wildcards):
    return _paths(qtargets.planned(config, wildcards.card))


def get_family_metrics(wildcards):
    return _paths(qtargets.planned(config, wildcards.card, wildcards.family))


def get_point_items(wildcards):
    return qtargets.per_item_files(config, qtargets.planned(config, wildcards.card))


def get_family_items(wildcards):
    return qtargets.per_item_files(
        config, qtargets.planned(config, wildcards.card, wildcards.family)
    )


def get_final_outputs(wildcards):
    """The default target: the dataset, one curve per family, the report and the recommendation at
    the config's budget. In a dry run (`snakemake -n`), it also prints what is left per rule and
    its estimated minutes after Snakemake's own plan (quantladder.progress: the jobs Snakemake plans,
    priced from the rules' benchmark files).

    Every planned point's files and items are targets too: Snakemake does not remake a deleted input
    of an up-to-date output (the dataset), so a lost metrics.json would otherwise go unnoticed.
    """
    planned = qtargets.planned(config, CARD)
    outs = [f"results/{CARD}/points.parquet", f"results/{CARD}/report.html"]
    outs += _paths(planned) + qtargets.per_item_files(config, planned)
    outs += qtargets.item_files(config, planned)
    outs += [f"results/{CARD}/curves/{fam}.parquet" for fam in qconfig.families(config)]
    target = (config.get("recommend") or {}).get("target")
    if target:
        outs.append(
            f"results/{CARD}/recommendation/mem{target['mem']}-ctx{target['ctx']}.json"
        )
    outs += find_answers(CARD)  # the walk of `find:` (rules/find.smk)
    # the table of what is left, once Snakemake has planned (the jobs it plans)
    if workflow.dryrun:
        qprogress.print_after_plan(workflow, config, CARD)
    return outs


def find_answers(card):
    """The walk's answer (rules/find.smk), which the report's first screen shows, when the config has
    a `find:` section."""
    f = config.get("find")
    # a config that switches the walk's family off (a hub config over the default) walks nothing
    return (
        [f"results/{card}/find/{f['family']}.json"]
        if f and f.get("family") in qconfig.families(config)
        else []
    )


def get_find_answers(wildcards):
    return find_answers(wildcards.card)


# -- find my rung: the walk's checkpoints (rules/find.smk, docs/find.md) ---------------------

_FIND = []


def _find_spec(wildcards):
    """The `find:` section, checked (errors name find.<key>) the first time a find job is planned. The
    package is imported here, not at the top: it pulls in scipy, pandas and pulp, and a DAG build
    without a find target (every Slurm job's re-parse) should not pay for them."""
    import quantladder.find as qfind

    if not _FIND:
        _FIND.append(qfind.spec(config) if config.get("find") else None)
    spec = _FIND[0]
    if spec is None or spec.family != wildcards.family:
        raise ValueError(
            f"results/{wildcards.card}/find/{wildcards.family}.json: the config's `find:` section "
            f"searches {spec.family if spec else 'nothing'} (set find.family: {wildcards.family})"
        )
    return qfind, spec


def get_find_key(wildcards):
    return _find_spec(wildcards)[1].key


def get_find_step_inputs(wildcards):
    """Step 0: every candidate's sidecar (its measured bits per weight and size), and its speed point
    when the walk has a speed floor. Step k: the state of step k−1 and the figures' files of every
    rung visited so far and of the one it asks for.
    """
    (qfind, sp), w = _find_spec(wildcards), wildcards
    k = int(w.k)
    if k == 0:
        return qfind.step0_files(sp, config, w.card)
    job = checkpoints.find_step.get(card=w.card, family=w.family, k=str(k - 1))
    prev = job.output[0]
    state = qio.read_json(prev)
    rungs = [v["rung"] for v in state["visited"]] + [state["next"]]
    files = [prev, *qfind.reference_files(sp, config, w.card)]
    for r in rungs:
        files += qfind.figure_files(sp, config, w.card, r)
    return files


def get_find_steps(wildcards):
    """Every step of the walk, up to the one that says it is done."""
    _find_spec(wildcards)
    out, k = [], 0
    while True:
        step = checkpoints.find_step.get(
            card=wildcards.card, family=wildcards.family, k=str(k)
        ).output[0]
        out.append(step)
        if qio.read_json(step)["done"]:
            return out
        k += 1


def get_finished_key(wildcards):
    """The planned metrics files finished now, with their times: a new or redone one changes it."""
    done = [
        f"{t.path}@{os.stat(t.path).st_mtime_ns}"
        for t in qtargets.planned(config, wildcards.card)
        if os.path.exists(t.path)
    ]
    return qio.hash_obj(done)


def get_source_spec(wildcards):
    fam = config["families"][wildcards.family]
    spec = {"source": fam["source"], "sha256": fam.get("sha256")}
    # only where set: every other family's params stay as they were
    if fam.get("chat_template"):
        spec["chat_template"] = fam["chat_template"]
    return json.dumps(spec, sort_keys=True)


def get_prebuilt_spec(wildcards):
    pre = dict(config["families"][wildcards.family]["prebuilt"][wildcards.rung])
    pre.pop("enabled", None)  # a switch, not what the file is
    # the default: a rung acquired before the key existed stays done
    if pre.get("chat_template") == "own":
        del pre["chat_template"]
    return json.dumps(pre, sort_keys=True)


def get_prebuilt_derived(wildcards):
    """The made rung a derived prebuilt file copies, or nothing for a file fetched."""
    spec = config["families"][wildcards.family]["prebuilt"][wildcards.rung]
    derived = spec.get("derive")
    if not derived:
        return []
    kind = qconfig.rung_kind(config, wildcards.family, derived["rung"])
    return f"resources/models/{wildcards.family}/{kind}/{derived['rung']}.gguf"


def get_quantize_options(wildcards):
    return json.dumps(
        qconfig.rung_options(config, wildcards.family, wildcards.rung), sort_keys=True
    )


def get_rung_gguf(wildcards):
    kind = qconfig.rung_kind(config, wildcards.family, wildcards.rung)
    base = f"resources/models/{wildcards.family}"
    if kind == "reference":
        return f"{base}/reference/{wildcards.rung}.gguf"
    return f"{base}/{kind}/{wildcards.rung}.gguf"


def get_rung_info(wildcards):
    return get_rung_gguf(wildcards) + ".json"


def get_reference_gguf(wildcards):
    rung = qconfig.reference_rung(config, wildcards.family)
    return f"resources/models/{wildcards.family}/reference/{rung}.gguf"


def get_imatrix(wildcards):
    """The rung's importance matrix: computed by rule imatrix, or a file the config names."""
    im = qconfig.rung_options(config, wildcards.family, wildcards.rung).get("imatrix")
    return [im["file"]] if im else []


# -- llama.cpp's tools and importance matrices (rules/tools.smk, rules/models.smk) -------------

# One build per llama-cpp-python version and backend (read from the installed files: cheap).
LLAMA_TOOLS = (
    f"resources/llama-tools/{qtools.library_version()}-{qtools.library_backend()}.json"
)


def get_llama_tools(wildcards):
    return LLAMA_TOOLS


def get_imatrix_settings(wildcards):
    return json.dumps(qladder.imatrix_settings(config), sort_keys=True)


def get_imatrix_spec(wildcards):
    """What decides a matrix: the corpus source, the settings, the reference, the tools' build."""
    return qladder.imatrix_key(config, wildcards.family, wildcards.corpus)


def get_gate_corpus(wildcards):
    return get_corpus_file(wildcards) if wildcards.benchmark == "perplexity" else []


def get_tool_gate_spec(wildcards):
    return qanchors.tool_gate_key(config, wildcards.family, wildcards.benchmark)


def get_corpus_spec(wildcards):
    name = wildcards.corpus
    if name not in config["corpora"]:
        raise ValueError(
            f"config: corpus {name!r} is not defined under `corpora:` (known: {sorted(config['corpora'])})"
        )
    return json.dumps(config["corpora"][name], sort_keys=True)


def get_corpus_file(wildcards):
    """The headline corpus of perplexity (measures.perplexity.corpus): the anchor gate's text."""
    return f"resources/corpora/{config['measures']['perplexity']['corpus']}.txt"


# -- perplexity passes: one job per (point, corpus, context), joined per point -----------------


def get_perplexity_passes(wildcards):
    run, _ = qppl.family_passes(config, wildcards.family)
    w = wildcards
    point = f"results/{w.card}/points/{w.family}/{w.rung}/{w.kv}"
    return [
        f"{point}/perplexity/{qppl.pass_name(c, ctx)}/metrics.json" for c, ctx in run
    ]


def get_perplexity_skipped(wildcards):
    return json.dumps(qppl.family_passes(config, wildcards.family)[1], sort_keys=True)


def get_perplexity_spec(wildcards):
    """The pass's key: the point with measures.perplexity narrowed to this (corpus, context)."""
    w = wildcards
    cfg = qppl.pass_config(config, w.corpus, w.ctx)
    return qmanifest.spec_hash(cfg, w.card, w.family, w.rung, w.kv, "perplexity")


def _rung_matrix(wildcards):
    if qconfig.rung_kind(config, wildcards.family, wildcards.rung) != "quantized":
        return None
    return qconfig.rung_options(config, wildcards.family, wildcards.rung).get("imatrix")


def get_calibration_corpus(wildcards):
    """The text the rung's importance matrix was computed from (for the overlap figure)."""
    im = _rung_matrix(wildcards)
    return [f"resources/corpora/{im['corpus']}.txt"] if im and im.get("corpus") else []


def get_calibration_spec(wildcards):
    im = _rung_matrix(wildcards) or {}
    return json.dumps(
        {k: im.get(k) for k in ("corpus", "settings", "file")} if im else {},
        sort_keys=True,
    )


def get_perplexity_mem_mb(kind):
    """mem_mb of a pass: the model, its KV cache at the pass's context (the model's trained context
    for a `trained` pass, read from the GGUF's sidecar), one decode's logits."""

    def _mem_mb(wildcards, input, attempt):
        info = qres._info(input)
        settings = qppl.pass_settings(config, wildcards.corpus, wildcards.ctx)
        n_ctx = settings["n_ctx"]
        if n_ctx == qppl.TRAINED:
            n_ctx = int(info.get("n_ctx_train") or 0) or 4096
        proto = qppl.Protocol(
            n_ctx=int(n_ctx),
            n_batch=settings["n_batch"],
            max_chunks=settings["max_chunks"],
        )
        return qres.estimate_mem_mb(
            kind,
            qres.model_bytes(input),
            info=info,
            n_ctx=proto.context_tokens,
            kv=getattr(wildcards, "kv", None) or "f16",
            attempt=attempt,
        )

    _mem_mb.__name__ = f"mem_mb_perplexity_{kind}"
    return _mem_mb


def spec_hash(measure):
    """An input function giving the point's manifest-spec hash for one measure."""

    def _hash(wildcards):
        return qmanifest.spec_hash(
            config,
            wildcards.card,
            wildcards.family,
            wildcards.rung,
            wildcards.kv,
            measure,
        )

    _hash.__name__ = f"spec_hash_{measure}"
    return _hash


def get_anchor_status(measure):
    def _anchor(wildcards):
        if qanchors.tool_gate_enabled(config, measure):  # perplexity, speed: per family
            return f"results/{wildcards.card}/anchors/{measure}/{wildcards.family}.json"
        return f"results/{wildcards.card}/anchors/{measure}.json"

    _anchor.__name__ = f"anchor_status_{measure}"
    return _anchor


def get_reference_info(wildcards):
    return get_reference_gguf(wildcards) + ".json"


def get_reference_logits(wildcards):
    """Every point (the reference too, as a check) is compared with the reference rung's stored
    log-probs, taken with an f16 KV cache: KLD then includes what KV quantization costs.
    """
    ppl = config["measures"]["perplexity"]
    if not ppl["kld"]:
        return []
    return (
        f"results/{wildcards.card}/reference_logits/{wildcards.family}/"
        f"{qppl.pass_name(wildcards.corpus, wildcards.ctx)}.qlogits"
    )


def get_reference_logits_spec(wildcards):
    """One store per (family, corpus, context): keyed by that pass's settings alone."""
    cfg = qppl.pass_config(config, wildcards.corpus, wildcards.ctx)
    return qmanifest.reference_logits_key(cfg, wildcards.family, wildcards.corpus)


def anchors_file():
    """The anchors file; a relative path is taken from the workflow's directory."""
    p = Path(config["anchors"])
    return p if p.is_absolute() else Path(workflow.basedir) / p


def get_anchor_generations(wildcards):
    """A task benchmark's gate scores the replies its anchor_generate job made; a measure's has none."""
    if wildcards.benchmark in qbenchmarks.names():
        return f"results/{wildcards.card}/anchor_generations/{wildcards.benchmark}.json"
    return []


def get_anchor_generate_spec(wildcards):
    return qmanifest.anchor_generation_key(config, wildcards.task, anchor_entries())


def get_anchor_spec(wildcards):
    return qmanifest.anchor_key(config, wildcards.benchmark, anchor_entries())


def runtime_for(rule_name, default):
    """Runtime in minutes, for work that does not scale with a model file. It comes from the
    benchmark files of the jobs that ran, else `resources.runtime_min.<name>`, else ``default``.
    Model-sized work uses quantladder.resources.runtime_min."""
    return qres.runtime_fixed(rule_name, default, config)


# -- task benchmarks' input functions (rules/tasks.smk) --------------------------------------


def _task_cfg(wildcards):
    """The config a job of this series runs with (the noise series: another batch setting)."""
    if getattr(wildcards, "series", "points") == "noise":
        return qconfig.noise_config(config)
    return config


def get_source_key(wildcards):
    return qmanifest.source_key(config, wildcards.task)


def get_items_key(wildcards):
    return qmanifest.items_key(config, wildcards.family, wildcards.task)


def get_generation_key(wildcards):
    w = wildcards
    return qmanifest.spec_hash(_task_cfg(w), w.card, w.family, w.rung, w.kv, w.task)


def get_scoring_key(wildcards):
    w = wildcards
    return qmanifest.scoring_key(_task_cfg(w), w.card, w.family, w.rung, w.kv, w.task)


# What a job read is what its key names: the digests of a local task or traffic file that enter a key,
# read once, as the workflow is parsed (Snakemake evaluates a job's params when the job starts, so a
# digest taken there would be the edited file's), and checked by the job against the file as it reads
# it (Benchmark.check_read).
PLANNED_DIGESTS = {
    t: {
        w: qbenchmarks.configured(config, t).content_digests(w)
        for w in ("items", "scoring")
    }
    for t in TASKS
}


def get_items_digests(wildcards):
    return json.dumps(PLANNED_DIGESTS[wildcards.task]["items"], sort_keys=True)


def get_scoring_digests(wildcards):
    return json.dumps(PLANNED_DIGESTS[wildcards.task]["scoring"], sort_keys=True)


def get_task_anchor(wildcards):
    return ancient(f"results/{wildcards.card}/anchors/{wildcards.task}.json")


_TASK_ANCHOR_KEYS = {}


def get_task_anchor_key(wildcards):
    """What a gate's outcome can change for generation: its entries and what the anchors generate
    with (the same for every point of the task: computed once per DAG build)."""
    task = wildcards.task
    if task not in _TASK_ANCHOR_KEYS:
        _TASK_ANCHOR_KEYS[task] = qmanifest.anchor_generation_key(
            config, task, anchor_entries()
        )
    return _TASK_ANCHOR_KEYS[task]


_ANCHOR_ENTRIES = []


def anchor_entries():
    """The anchors file's entries, read once per DAG build (every job's params ask)."""
    if not _ANCHOR_ENTRIES:
        _ANCHOR_ENTRIES.append(qanchors.load_entries(anchors_file()))
    return _ANCHOR_ENTRIES[0]


def get_early_stop_reference(wildcards):
    """With early stopping on, a rung's generation needs its reference point's verdicts (the same
    card, KV type and series; the reference point itself runs every item)."""
    w = wildcards
    if (
        not qbenchmarks.configured(_task_cfg(w), w.task).early_stop
        or w.series != "points"
    ):
        return []
    ref = qconfig.reference_rung(config, w.family)
    if w.rung == ref:
        return []
    return f"results/{w.card}/points/{w.family}/{ref}/{w.kv}/{w.task}/verdicts.jsonl"


def get_scoring_env(wildcards):
    """A scoring environment's pinned requirements (their hash enters the manifest), if any."""
    return qconfig.scoring_env_file(config, wildcards.task) or []


# -- a rule's inputs in one function (`unpack`): Snakemake pays a fixed cost per input function and
# job, which at seed scale (thousands of jobs) is most of the planning time (docs/parity.md).


def point_inputs(measure):
    """A per-point measure's inputs: the rung's GGUF, its sidecar and the measure's anchor gate."""
    anchor = get_anchor_status(measure)

    def _inputs(wildcards):
        gguf = get_rung_gguf(wildcards)
        return {"gguf": gguf, "info": f"{gguf}.json", "anchor": anchor(wildcards)}

    _inputs.__name__ = f"inputs_{measure}"
    return _inputs


_PERPLEXITY_POINT_INPUTS = point_inputs("perplexity")


def perplexity_inputs(wildcards):
    """One perplexity pass: the point's inputs, the corpus, the reference's stored log-probs and
    the calibration text of the rung's matrix (for the overlap figure)."""
    inputs = _PERPLEXITY_POINT_INPUTS(wildcards)
    corpus = f"resources/corpora/{wildcards.corpus}"
    inputs.update(
        corpus=f"{corpus}.txt",
        corpus_info=f"{corpus}.json",
        reference=get_reference_logits(wildcards),
        calibration=get_calibration_corpus(wildcards),
    )
    return inputs


def _task_data(w):
    """A task's pinned source and the family's fixed items (generate and score read the same)."""
    task = f"resources/benchmarks/{w.task}"
    item_file, items_meta = (
        f.format(task=w.task, family=w.family) for f in qtargets.ITEM_FILES
    )
    return {
        "source": f"{task}/source.json",
        "item_file": item_file,
        "items_meta": items_meta,
    }


def generate_inputs(wildcards):
    """A generate job's inputs. The anchor gate is ancient: a re-run gate with an unchanged
    outcome does not regenerate (a changed anchor entry or generation setting changes
    params.anchor_key and does). With early stopping, the reference point's verdicts."""
    w = wildcards
    gguf = get_rung_gguf(w)
    return {
        "gguf": gguf,
        "info": f"{gguf}.json",
        "anchor": get_task_anchor(w),
        **_task_data(w),
        "reference_verdicts": get_early_stop_reference(w),
    }


def score_inputs(wildcards):
    """A score job's inputs: the saved generations only, never the model (the scoring host)."""
    w = wildcards
    out = f"results/{w.card}/{w.series}/{w.family}/{w.rung}/{w.kv}/{w.task}"
    return {
        "generations": f"{out}/generations.jsonl",
        "meta": f"{out}/generations.json",
        "info": get_rung_info(w),
        "anchor": f"results/{w.card}/anchors/{w.task}.json",
        **_task_data(w),
        "env": get_scoring_env(w),
    }


# -- teacher-forced fidelity of task points (rules/fidelity.smk) -------------------------------


def get_reference_generations(wildcards):
    """The replies every point of a family is forced through: the reference rung's, at the family's
    first KV type (the point the aggregate compares the others with)."""
    w = wildcards
    ref = qconfig.reference_rung(config, w.family)
    kv = qconfig.kv_types(config, w.family)[0]
    return f"results/{w.card}/points/{w.family}/{ref}/{kv}/{w.task}/generations.jsonl"


def get_fidelity_spec(wildcards):
    """What changes the fidelity figures besides their input files: the pass's batch size."""
    return json.dumps(
        {"n_batch": int(config["fidelity"]["n_batch"])},
        sort_keys=True,
    )
