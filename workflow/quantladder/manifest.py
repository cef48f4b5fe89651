"""The one manifest builder. A point's manifest says everything that decides its figures.

Two layers: the *spec* is computed from the config alone at DAG-build time (cheap, no file
reads, no network) and its hash is passed to rules as a ``params`` value, so changing one rung's
setting re-runs only that point's jobs; the full manifest adds what only the job can know
(file sha256, the loaded libllama and its hash, the card) and is written beside the figures.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
from typing import Any

from . import HARNESS_VERSION
from . import config as qconfig
from .engine import parse_kv
from .io import hash_obj

GREEDY = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": 0}


@functools.lru_cache(maxsize=None)  # asked once per job at DAG-build time: keep it cheap
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def benchmark_settings(cfg: dict, benchmark: str) -> dict:
    if benchmark in cfg.get("measures", {}):
        return dict(cfg["measures"][benchmark])
    return dict(cfg.get("benchmarks", {}).get(benchmark, {}))


def spec(cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, extra: dict | None = None) -> dict:
    fam = cfg["families"][family]
    kind = qconfig.rung_kind(cfg, family, rung)
    type_k, type_v = parse_kv(kv)
    model: dict[str, Any] = {"family_source": fam["source"], "family_sha256": fam.get("sha256"),
                             "reference": qconfig.reference_rung(cfg, family), "rung_kind": kind}
    if kind == "quantized":
        model["quantize_options"] = qconfig.rung_options(cfg, family, rung)
    elif kind == "prebuilt":
        model["prebuilt"] = fam["prebuilt"][rung]
    settings = benchmark_settings(cfg, benchmark)
    settings.pop("enabled", None)
    s = {
        "point": {"card": card, "family": family, "rung": rung, "kv": kv, "type_k": type_k, "type_v": type_v,
                  "is_reference": kind == "reference"},
        "benchmark": benchmark,
        "settings": settings,
        "model": model,
        "engine": {"gpu_layers": cfg.get("gpu_layers", 0), "flash_attn": cfg.get("flash_attn")},
        "sampling": GREEDY,
        "harness_version": HARNESS_VERSION,
        "llama_cpp_python": _version("llama_cpp_python"),
    }
    if benchmark == "speed":  # threads change speed, not quality
        s["engine"]["threads"] = cfg.get("threads", 0)
    if extra:
        s["extra"] = extra
    return s


def spec_hash(cfg: dict, card: str, family: str, rung: str, kv: str, benchmark: str, extra: dict | None = None) -> str:
    return hash_obj(spec(cfg, card, family, rung, kv, benchmark, extra))[:16]


def job_environment() -> dict:
    """Where the job ran: host, and the Slurm job and partition when it ran as a Slurm job."""
    import os
    import socket

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
    engine: dict | None = None, extra: dict | None = None,
) -> dict:
    s = spec(cfg, card, family, rung, kv, benchmark, extra)
    return {
        **s,
        "spec_hash": hash_obj(s)[:16],
        "model": {**s["model"], **model_info},
        "card": card_identity,
        "library": library,
        "engine_resolved": engine or {},
        "data": data or {},
        "job": job_environment(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
