"""Portable resources sized from the point: a 70B rung asks for more memory and time than a 1B one.

Rules call these from ``resources:`` (they return Snakemake resource callables)::

    resources:
        mem_mb=qres.mem_mb("inference", n_ctx=config["measures"]["perplexity"]["n_ctx"]),
        runtime=qres.runtime_min("perplexity", config),

Each callable reads the job's model from its input: the rung's sidecar JSON (``input.info``,
``GGUFInfo`` as written by the model rules) when present, else the GGUF's file size. Snakemake
evaluates resource callables when a job is about to run, i.e. after its inputs exist; in a dry
run, or when an input is missing, the model counts as 0 bytes and the base figures apply.
A retry (``--retries``) multiplies by the attempt number, so a job killed for memory or time
asks for more the next time.

Where each rule's jobs run is said here once (``HOSTS``): the rules ask for the portable ``gpu``
resource from it, the Slurm profile gives each host its partition, and quantladder.progress shows it.
Site details (partition, account, gres) are not here: they live in the Slurm profile.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from . import config as qconfig
from . import benchmarks, measures, timings
from .generation_policy import GenerationPolicy
from .gguf_meta import GGUFInfo, kv_bytes_per_token

MB = 1 << 20
GB = 1 << 30

# Host memory for loading a model: llama.cpp maps the file (page cache counts toward a job's
# cgroup), plus compute buffers that grow with context and vocabulary.
# Memory per kind: (multiple of the model file, fixed headroom MB).
MEM_KINDS: dict[str, tuple[float, int]] = {
    "light": (0.0, 1024),          # aggregate, curves, report, corpus
    "acquire": (0.0, 2048),        # streaming download + hash
    "dequantize": (6.0, 1024),     # a quantized source blown up to F16/F32 in memory
    "quantize": (2.0, 1024),       # input mapped + output tensors
    "inference": (1.15, 1536),     # one model loaded + KV cache + compute buffers
    "reference_logits": (1.15, 2048),
    "score": (0.0, 2048),          # sandboxed tests: no model
}

# Runtime per kind, minutes: base + per GB of model file. Calibrated so that the seed's CPU
# figures (SmolLM2-135M: perplexity at 350 tok/s) fit with room, and a 40 GB 70B Q4_K_M gets hours.
# A measure's rules say their own (quantladder.measures: RuleCost.runtime).
RUNTIME_KINDS: dict[str, tuple[float, float]] = {
    "light": (10, 0),
    "acquire": (60, 2),
    "dequantize": (20, 2),
    "quantize": (20, 3),
    "generate": (30, 8),      # benchmark generation (HumanEval, BFCL, RULER prompts)
    "long_context": (30, 15),  # RULER at 32K-128K: prompt processing dominates
    "score": (30, 0),
    **{rule: rc.runtime for rule, rc in measures.rules().items() if rc.runtime},
}

MAX_RUNTIME_MIN = 7 * 24 * 60

# Where each rule's jobs run, the one place that says it. The rules read it (``gpu=gpus(rule)``: the
# portable resource of the snakemake-workflows convention, which an executor turns into a card),
# profiles/slurm/config.yaml gives each host a partition and its threads without naming a rule, and
# quantladder.progress prints it beside the jobs left. A rule named nowhere here runs on the
# submitting host (a localrule: downloads, aggregates, reports; rules/cluster.smk). A measure's rules
# are placed by the measure's own declaration (quantladder.measures: RuleCost.host).
GPU, SANDBOX, CPU, LOCAL = measures.GPU, measures.SANDBOX, measures.CPU, measures.LOCAL
HOSTS: dict[str, str] = {
    # Load a model onto the card: a llama.cpp context (generation, the passes, the timed measures)
    # or one of llama.cpp's tools that runs it (llama-imatrix, llama-perplexity, llama-bench).
    "generate": GPU, "anchor_generate": GPU, "imatrix": GPU, "tool_anchor_gate": GPU,
    **{rule: rc.host for rule, rc in measures.rules().items() if rc.host != LOCAL},
    # Score the replies: model-written code (HumanEval tests, BFCL multi-turn calls) runs here, in
    # the sandbox; no model is loaded (the anchor gates score the replies anchor_generate made).
    "score": SANDBOX, "anchor_gate": SANDBOX,
    # CPU work too heavy for the submitting host: GGUF files rewritten, a family's items built
    # (RULER reads the tokenizer with every layer on the CPU: no card needed).
    "reference_rung": CPU, "quantize": CPU, "benchmark_items": CPU,
}
# Clock and power readings (speed, energy): the node to themselves, nothing else running beside them
# (energy subtracts the node's idle power). Each such measure says so (Measure.alone).
ALONE = frozenset(rule for m in measures.declared().values() if m.alone for rule in m.rules)


def host(rule: str) -> str:
    """Where ``rule``'s jobs run: gpu, sandbox, cpu, or local (the submitting host)."""
    return HOSTS.get(rule, LOCAL)


def gpus(rule: str) -> int:
    """The ``gpu`` resource of ``rule``: 1 on the GPU host, else 0. A rule must be in ``HOSTS``."""
    if rule not in HOSTS:
        raise KeyError(f"rule {rule!r} asks for its gpu resource but quantladder.resources.HOSTS does not "
                       f"place it (known: {sorted(HOSTS)})")
    return int(HOSTS[rule] == GPU)


def _info(input: Any) -> dict:
    path = _get(input, "info")
    if path:
        try:
            with open(str(path)) as f:
                doc = json.load(f)
            return doc.get("info", doc)
        except (OSError, ValueError):
            pass
    return {}


def _get(input: Any, name: str):
    try:
        return getattr(input, name)
    except AttributeError:
        try:
            return input[name]
        except (KeyError, TypeError, IndexError, AttributeError):  # Snakemake's lists raise AttributeError
            return None


def model_bytes(input: Any) -> int:
    """Bytes of the job's model: the sidecar's ``file_bytes``, else input.gguf's size, else 0."""
    info = _info(input)
    if info.get("file_bytes"):
        return int(info["file_bytes"])
    gguf = _get(input, "gguf")
    paths = [gguf] if isinstance(gguf, (str, os.PathLike)) else list(gguf or [])
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(str(p))
        except OSError:
            pass
    return total


def kv_cache_bytes(info: dict, n_ctx: int, kv: str = "f16") -> int:
    """Predicted KV-cache bytes at ``n_ctx`` (0 when the model's shape is unknown)."""
    k, _, v = kv.partition("-")
    per_token = kv_bytes_per_token(info.get("n_layer", 0), info.get("n_head_kv", 0), info.get("head_dim_k", 0),
                                   info.get("head_dim_v", 0), k, v or k)
    return int(n_ctx * per_token)


def estimate_mem_mb(kind: str, file_bytes: int, *, info: dict | None = None, n_ctx: int | None = None,
                    kv: str = "f16", attempt: int = 1, overhead_mb: int | None = None) -> int:
    factor, headroom = MEM_KINDS[kind]
    if overhead_mb is not None:
        headroom = overhead_mb
    need = file_bytes * factor
    if n_ctx and info:
        need += kv_cache_bytes(info, n_ctx, kv)
        # logits/compute buffers: vocabulary × batch rows of f32, bounded by context
        need += 4 * info.get("n_vocab", 0) * min(n_ctx, 512)
    mb = need / MB + headroom
    return int(math.ceil(mb * max(1, attempt) / 256.0) * 256)  # round up to 256 MB


def estimate_runtime_min(kind: str, file_bytes: int, *, attempt: int = 1, scale: float = 1.0,
                         minimum: float | None = None) -> int:
    base, per_gb = RUNTIME_KINDS[kind]
    minutes = (base + per_gb * file_bytes / GB * scale) * max(1, attempt)
    if minimum:
        minutes = max(minutes, minimum)
    return int(min(math.ceil(minutes), MAX_RUNTIME_MIN))


def mem_mb(kind: str = "inference", *, n_ctx: int | None = None, overhead_mb: int | None = None):
    """A ``mem_mb`` resource callable: model file × factor + KV cache at ``n_ctx`` + headroom."""
    if kind not in MEM_KINDS:
        raise ValueError(f"unknown memory kind {kind!r}; known: {sorted(MEM_KINDS)}")

    def _mem_mb(wildcards, input, attempt):
        kv = getattr(wildcards, "kv", None) or "f16"
        return estimate_mem_mb(kind, model_bytes(input), info=_info(input), n_ctx=n_ctx, kv=kv,
                               attempt=attempt, overhead_mb=overhead_mb)

    _mem_mb.__name__ = f"mem_mb_{kind}"
    return _mem_mb


def _made_at(input, names) -> float | None:
    """The newest mtime of the job's inputs named ``names`` (those that say what work it does)."""
    stamps = []
    for name in names:
        path = getattr(input, name, None) if input is not None else None
        if isinstance(path, str) and os.path.exists(path):
            stamps.append(os.path.getmtime(path))
    return max(stamps, default=None)


def runtime_min(kind: str, config: dict | None = None, *, rule: str | None = None, scale: float = 1.0,
                work: tuple[str, ...] = ()):
    """A ``runtime`` resource callable (minutes): three times what the rule's jobs of the same kind
    took here (their benchmark files, quantladder.timings), else base + per GB of model, per kind.
    ``work``: the named inputs that say how much work a job is (a generate job's items): only jobs
    timed after they were last made count, so a task file that now holds longer items does not get
    the budget its short predecessor earned (and stop at it, exit 75).

    ``config["resources"]["runtime_min"][rule or kind]`` is a floor a site can raise without
    editing rules (a slow partition, a big corpus).
    """
    if kind not in RUNTIME_KINDS:
        raise ValueError(f"unknown runtime kind {kind!r}; known: {sorted(RUNTIME_KINDS)}")
    floors = ((config or {}).get("resources") or {}).get("runtime_min") or {}
    floor = floors.get(rule or kind, floors.get(kind))

    name = rule or kind

    def _runtime(wildcards, input, attempt):
        took = timings.median_s(timings.seconds(fresh=False), name, timings.kind_of(name, wildcards),
                                since=_made_at(input, work) if work else None)
        if took is not None:  # measured: headroom for a slower node, more on a retry
            minutes = max(1.0, 3 * took / 60, floor or 0) * max(1, attempt)
            return int(min(math.ceil(minutes), MAX_RUNTIME_MIN))
        return estimate_runtime_min(kind, model_bytes(input), attempt=attempt, scale=scale, minimum=floor)

    _runtime.__name__ = f"runtime_{kind}"
    return _runtime


def runtime_fixed(rule: str, default: float, config: dict | None = None, *, work: tuple[str, ...] = ()):
    """A ``runtime`` resource callable (minutes) for a rule whose work does not scale with a model
    file: three times what its jobs took here, else the config's `resources.runtime_min.<rule>`, else
    ``default``. ``work``: the named inputs that say how much work a job is (the replies a
    teacher-forced pass reads): only jobs timed after they were last made count, as for generate's
    items (``runtime_min``): the example's 8 conversations took ``reply_logits`` 3.7 s, and a user's
    20 laid over them are other work.

    The runtime is what a scheduler holds the job to; on one machine nothing enforces it
    (quantladder.budget)."""
    floor = (((config or {}).get("resources") or {}).get("runtime_min") or {}).get(rule)

    def minutes_for(wildcards, input, attempt) -> int:
        took = timings.median_s(timings.seconds(fresh=False), rule, timings.kind_of(rule, wildcards),
                                since=_made_at(input, work) if work else None)
        minutes = max(1.0, 3 * took / 60, floor or 0) if took is not None else (floor or default)
        return int(min(math.ceil(minutes * max(1, attempt)), MAX_RUNTIME_MIN))

    if work:  # Snakemake hands a resource callable the arguments its signature names
        def _runtime(wildcards, input, attempt):
            return minutes_for(wildcards, input, attempt)
    else:
        def _runtime(wildcards, attempt):
            return minutes_for(wildcards, None, attempt)

    _runtime.__name__ = f"runtime_{rule}"
    return _runtime


def generate_mem_mb(config: dict):
    """``mem_mb`` of a generate job: the model, the KV cache of all its sequences at the longest
    context its items need (``n_parallel`` from the job's own GenerationPolicy), the logits rows of
    a batch, and headroom. A retry asks for more."""

    def _generate_mem_mb(wildcards, input, attempt):
        cfg = qconfig.noise_config(config) if getattr(wildcards, "series", "points") == "noise" else config
        bench = benchmarks.configured(cfg, wildcards.task)
        info = _info(input)
        n_ctx = bench.max_n_ctx(info.get("n_ctx_train"))
        if info.get("n_ctx_train"):
            n_ctx = min(n_ctx, int(info["n_ctx_train"]))
        kv = getattr(wildcards, "kv", None) or "f16"
        try:
            n_par = GenerationPolicy.of(cfg, bench.name).n_parallel_for(GGUFInfo(**info), n_ctx, kv)
        except TypeError:  # no sidecar yet (a dry run): one sequence
            n_par = 1
        need = model_bytes(input) * MEM_KINDS["inference"][0] + n_par * kv_cache_bytes(info, n_ctx, kv)
        need += 4 * info.get("n_vocab", 0) * 512 * max(1, n_par)
        headroom = (config.get("resources") or {}).get("mem_overhead_mb", MEM_KINDS["inference"][1])
        mb = need / MB + headroom
        return int(math.ceil(mb * max(1, attempt) / 256.0) * 256)

    return _generate_mem_mb
