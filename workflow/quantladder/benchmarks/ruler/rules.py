"""Input functions for rules/ruler.smk, made from the config (the Snakefile stays rules only).

They read no network and no large file at DAG-build time: the items spec hashes config values,
and the memory request reads the rung's small JSON sidecar only when the job is scheduled.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...engine import parse_kv
from ...gguf_meta import GGUFInfo
from ...io import hash_obj
from . import DEFAULTS, RULER_VERSION


def items_spec(config: dict):
    """What the family's items depend on: the ruler settings, the family's source and chat flag."""

    def get_ruler_items_spec(wildcards):
        fam = config["families"][wildcards.family]
        return hash_obj({"ruler": config["benchmarks"]["ruler"], "source": fam["source"], "sha256": fam.get("sha256"),
                         "chat": fam.get("chat", True), "version": RULER_VERSION})[:16]

    return get_ruler_items_spec


def sidecar_of(get_gguf):
    """The .gguf.json sidecar beside the file an input function names."""

    def get_ruler_sidecar(wildcards):
        return get_gguf(wildcards) + ".json"

    return get_ruler_sidecar


def mem_mb(config: dict):
    """Model file + the KV cache predicted at the largest length for the point's KV types + headroom."""

    def ruler_mem_mb(wildcards, input):
        overhead = config["resources"].get("mem_overhead_mb", 1024)
        longest = max(config["benchmarks"]["ruler"].get("lengths") or DEFAULTS["lengths"])
        try:
            info = GGUFInfo(**json.loads(Path(input.info).read_text())["info"])
            k, v = parse_kv(wildcards.kv)
            kv_mb = info.kv_bytes(longest, k, v) / 2**20
        except (OSError, KeyError, TypeError, ValueError):
            # The sidecar is not readable yet: assume a cache as large as the model.
            kv_mb = input.size_mb
        return int(input.size_mb + 1.2 * kv_mb + overhead)

    return ruler_mem_mb
