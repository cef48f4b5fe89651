"""The one manifest builder, and the only place identity keys are made.

A point's manifest says everything that decides its figures. Two layers: the *spec* is computed
from the config alone at DAG-build time (cheap: no file reads, no network) and its hash is passed to
rules as a ``params`` value, so changing one rung's setting re-runs only that point's jobs; the full
manifest adds what only the job can know (file sha256, the loaded libllama and its hash, the card's
fingerprint) and is written beside the figures.

One key per reason to recompute:
- ``spec_hash``, the hash of ``spec``: for a per-point measure (perplexity, speed, memory, energy)
  everything its figures depend on (the manifest's ``keys.measure``); for a task benchmark what
  changes a reply to a given item (``keys.generation``): the point (model, rung options, KV types,
  engine), sampling, the benchmark's generation settings and version, the batching (``n_parallel``).
  Item selection is not in it: at ``n_parallel = 1`` a larger ``limit`` keeps every reply it has.
- ``items_key``: a task benchmark's items (per family where they depend on the tokenizer): the
  settings that choose or build them, and the benchmark's version.
- ``scoring_key``: the generation key plus what changes only verdicts (scoring settings, sandbox
  limits, scorer version). A scoring change therefore re-plans only score jobs.
- ``reference_logits_key``, ``anchor_key``: the stored reference log-probs, an anchor gate.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import os
import socket
from typing import Any

from . import HARNESS_VERSION, benchmarks, measures, schemas
from . import config as qconfig
from .generation_policy import GenerationPolicy
from .io import hash_obj
from .kv_policy import parse_kv
from .reasoning import RENDERER_VERSION, items_reasoning

GREEDY = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": 0}
KEY_LEN = 16


@functools.lru_cache(maxsize=None)  # asked once per job at DAG-build time: keep it cheap
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _key(obj: Any) -> str:
    return hash_obj(obj)[:KEY_LEN]


def benchmark_settings(cfg: dict, benchmark: str) -> dict:
    if benchmark in cfg.get("measures", {}):
        return dict(cfg["measures"][benchmark])
    return dict(cfg.get("benchmarks", {}).get(benchmark, {}))


def _measure(benchmark: str) -> measures.Measure | None:
    """A point's measure by its name (perplexity, speed, ...), None for a task benchmark."""
    m = measures.get(benchmark)
    return m if m is not None and m.per_point else None


def gate_settings(cfg: dict, benchmark: str) -> dict:
    """The part of a benchmark's or measure's settings its anchor gate depends on."""
    s = benchmark_settings(cfg, benchmark)
    m = _measure(benchmark)
    for k in ("enabled", *(m.gate_ignores if m else ())):
        s.pop(k, None)
    return s


# To delete once quantladder.resources asks quantladder.benchmarks for its benchmark, as the rest do.


def _point(cfg: dict, card: str, family: str, rung: str, kv: str) -> dict:
    fam = cfg["families"][family]
    kind = qconfig.rung_kind(cfg, family, rung)
    type_k, type_v = parse_kv(kv)
    model: dict[str, Any] = {"family_source": fam["source"], "family_sha256": fam.get("sha256"),
                             "reference": qconfig.reference_rung(cfg, family), "rung_kind": kind}
    if kind == "quantized":
        model["quantize_options"] = qconfig.rung_options(cfg, family, rung)
    elif kind == "prebuilt":
        model["prebuilt"] = {k: v for k, v in fam["prebuilt"][rung].items() if k != "enabled"}  # a switch, no setting
    return {"point": {"card": card, "family": family, "rung": rung, "kv": kv, "type_k": type_k, "type_v": type_v,
                      "is_reference": kind == "reference"},
            "model": model,
            "engine": {"gpu_layers": cfg["gpu_layers"], "flash_attn": cfg.get("flash_attn")},
            "sampling": GREEDY, "harness_version": HARNESS_VERSION,
            "llama_cpp_python": _version("llama_cpp_python")}


def spec(cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, extra: dict | None = None) -> dict:
    """What a measure's figures, or a task benchmark's replies, depend on (the generation spec)."""
    s = _point(cfg, card, family, rung, kv)
    s["benchmark"] = benchmark
    m = _measure(benchmark)
    if m is not None:
        settings = benchmark_settings(cfg, benchmark)
        settings.pop("enabled", None)
        s["settings"] = settings
        for k in m.key_engine:  # engine settings that change this measure alone (speed: threads)
            s["engine"][k] = cfg.get(k, 0)
    else:
        b = benchmarks.configured(cfg, benchmark)
        s["settings"] = b.group("generation")
        s["benchmark_version"] = b.version
        s["generation"] = GenerationPolicy.of(cfg, benchmark).section
        s["renderer"] = RENDERER_VERSION  # how chat prompts are rendered (quantladder.reasoning): a change re-generates
        named = (cfg["families"][family] or {}).get("reasoning_format")
        if named:  # a family's reasoning format named in config (docs/thinking.md): only then in the key
            s["reasoning_format"] = named
        own = (cfg["families"][family] or {}).get("reasoning")
        if own:  # the family's own reasoning keys over the run's (reasoning.family_generation): only where set
            s["family_reasoning"] = own
    if extra:
        s["extra"] = extra
    return s


def spec_hash(cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, extra: dict | None = None) -> str:
    return _key(spec(cfg, card, family, rung, kv, benchmark, extra))


def items_key(cfg: dict, family: str, benchmark: str) -> str:
    b = benchmarks.configured(cfg, benchmark)
    obj: dict[str, Any] = {"benchmark": benchmark, "version": b.version, "settings": b.group("items"),
                           "harness": HARNESS_VERSION}
    if b.per_family_items:
        fam = cfg["families"][family]
        obj["family"] = {"source": fam["source"], "sha256": fam.get("sha256"), "chat": fam["chat"]}
        if fam["chat"]:  # the items are fitted to the template's rendering: how it renders, and what
            obj["family"]["renderer"] = RENDERER_VERSION
            if fam.get("chat_template"):  # families.<f>.chat_template: the template written into its copy
                obj["family"]["chat_template"] = fam["chat_template"]
            thinking = items_reasoning(cfg, family)
            if thinking:  # the room RULER keeps for the thinking (reasoning.items_reasoning)
                obj["family"]["reasoning"] = thinking
    return _key(obj)


def scoring_key(cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, extra: dict | None = None) -> str:
    b = benchmarks.configured(cfg, benchmark)
    return _key({"generation": spec_hash(cfg, card, family, rung, kv, benchmark, extra),
                 "items": items_key(cfg, family, benchmark), "scoring": b.group("scoring"),
                 "scorer_version": b.scorer_version})


def source_key(cfg: dict, benchmark: str) -> str:
    """A benchmark's data source: the item settings that name where data comes from."""
    b = benchmarks.configured(cfg, benchmark)
    return _key({"benchmark": benchmark, "version": b.version, "settings": b.group("items")})


def reference_logits_key(cfg: dict, family: str, corpus: str) -> str:
    ppl = dict(cfg["measures"]["perplexity"])
    ppl.pop("enabled", None)
    ppl.pop("kld", None)
    fam = cfg["families"][family]
    return _key({"perplexity": ppl, "source": fam["source"], "sha256": fam.get("sha256"),
                 "corpus": cfg["corpora"].get(corpus), "gpu_layers": cfg["gpu_layers"],
                 "llama_cpp_python": _version("llama_cpp_python"), "harness": HARNESS_VERSION})


def anchor_key(cfg: dict, benchmark: str, entries: list[dict]) -> str:
    """Only this benchmark's anchor entries and settings decide its gate (not the whole file)."""
    mine = [e for e in entries if e["benchmark"] == benchmark]
    if _measure(benchmark) is not None:
        return _key({"entries": mine, "settings": gate_settings(cfg, benchmark), "harness": HARNESS_VERSION})
    if not mine:  # nothing to reproduce: the gate says so whatever the settings
        return _key({"entries": [], "harness": HARNESS_VERSION})
    b = benchmarks.configured(cfg, benchmark)  # each anchor runs Benchmark.anchor_bench, not the points' settings
    return _key({"entries": mine, "settings": [b.anchor_bench(e).settings for e in mine], "harness": HARNESS_VERSION})


def anchor_generation_key(cfg: dict, benchmark: str, entries: list[dict]) -> str:
    """The part of a task benchmark's gate that its generate jobs depend on: the entries and what
    their runs generate with (a scoring-only change re-runs the gate and the score jobs, not
    generation; the points' own generation settings re-run neither the anchor nor its gate:
    Snakemake 9 does not re-run a job whose params changed when the producer of one of its
    ancient() inputs re-runs in the same invocation, and the gate is such an input of `generate`)."""
    mine = [e for e in entries if e["benchmark"] == benchmark]
    if not mine:
        return _key({"entries": [], "harness": HARNESS_VERSION})
    b = benchmarks.configured(cfg, benchmark)
    runs = [b.anchor_bench(e) for e in mine]
    return _key({"entries": mine, "generation": [r.group("generation") for r in runs],
                 "items": [r.group("items") for r in runs], "harness": HARNESS_VERSION})


def anchor_run_key(entry: dict, bench) -> str:
    """An anchor reproduction's replies: its model, the benchmark's settings and version; the entry's
    ``n_parallel`` and ``gpu_layers`` with the anchors schema's defaults (anchors.entry_settings)."""
    filled = schemas.filled_def(schemas.ANCHORS_SCHEMA_PATH, "entry", entry)
    return _key({"model": entry["model"], "settings": bench.settings, "version": bench.version,
                 "n_parallel": filled["n_parallel"], "gpu_layers": filled["gpu_layers"],
                 "harness": HARNESS_VERSION})


def job_environment() -> dict:
    """Where the job ran: host, and the Slurm job and partition when it ran as a Slurm job."""
    env = os.environ
    return {
        "host": socket.gethostname(),
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "slurm_partition": env.get("SLURM_JOB_PARTITION"),
        "slurm_node": env.get("SLURMD_NODENAME"),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }


def build(
    cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, *,
    model_info: dict, card_identity: dict, library: dict, data: dict | None = None,
    engine: dict | None = None, extra: dict | None = None, keys: dict | None = None,
) -> dict:
    """The full manifest. ``spec_hash`` is the key of the job that wrote it (for a task benchmark's
    metrics: the scoring key); ``keys`` lists every key the figures rest on."""
    s = spec(cfg, card, family, rung, kv, benchmark, extra)
    if _measure(benchmark) is not None:
        keys = {"measure": _key(s), **(keys or {})}
        own = keys["measure"]
    else:
        keys = {"items": items_key(cfg, family, benchmark), "generation": _key(s),
                "scoring": scoring_key(cfg, card, family, rung, kv, benchmark, extra), **(keys or {})}
        own = keys["scoring"]
        b = benchmarks.configured(cfg, benchmark)
        s = {**s, "scoring": {"settings": b.group("scoring"), "scorer_version": b.scorer_version}}
    return {
        **s,
        "spec_hash": own,
        "keys": keys,
        "model": {**s["model"], **model_info},
        "card": card_identity,
        "library": library,
        "engine_resolved": engine or {},
        "data": data or {},
        "job": job_environment(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
