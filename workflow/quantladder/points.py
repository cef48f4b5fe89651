"""What every per-point rule script shares: its model, its manifest, its anchor status, its outputs.

A measuring script does:
    pt = points.from_snakemake(snakemake, "speed")
    if pt.blocked: pt.write_metrics(snakemake.output.metrics, []); return   # anchor failed
    ... measure with pt.model_path / pt.engine_settings(n_ctx=...) ...
    pt.write_metrics(snakemake.output.metrics, rows, data={"name":..., "version":..., "sha256":...})
Task benchmarks go through scripts/generate.py and scripts/score.py (quantladder.generation,
quantladder.scoring), which use the same Point.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import benchmarks
from . import card as qcard
from . import config as qconfig
from . import manifest as qmanifest
from . import status as qstatus
from .anchors import summary as anchor_summary
from .backend import engine_backend
from .engine import EngineSettings, library_info, parse_kv
from .errors import QuantladderError
from .io import read_json, verify_sha256, write_json


@dataclass
class Point:
    config: dict
    card: str
    family: str
    rung: str
    kv: str
    benchmark: str
    model_path: str
    model_record: dict
    anchor: dict = field(default_factory=dict)
    threads: int = 0
    series: str = "points"  # "noise": the reference rung at another batch setting (quantladder.config)

    @property
    def type_k(self) -> str:
        return parse_kv(self.kv)[0]

    @property
    def type_v(self) -> str:
        return parse_kv(self.kv)[1]

    @property
    def blocked(self) -> bool:
        return self.anchor.get("status") == "failed"

    @property
    def status(self) -> tuple[str, str | None]:
        return qstatus.from_anchor(self.anchor)

    @property
    def bench(self):
        """The configured task benchmark of this point (quantladder.benchmarks)."""
        return benchmarks.configured(self.config, self.benchmark)

    def engine_settings(self, n_ctx: int, **kw) -> EngineSettings:
        return EngineSettings(n_ctx=n_ctx, kv=self.kv, n_gpu_layers=self.config["gpu_layers"],
                              n_threads=self.threads, flash_attn=self.config.get("flash_attn"), **kw)

    def model_info(self) -> dict:
        info = self.model_record.get("info", {})
        return {
            "path": self.model_path,
            "sha256": self.model_record.get("sha256"),
            "file_bytes": info.get("file_bytes"),
            "tensor_bytes": info.get("tensor_bytes"),
            "n_params": info.get("n_params"),
            "bits_per_weight": info.get("bits_per_weight"),
            "file_type": info.get("file_type"),
            "architecture": info.get("architecture"),
            "tensor_types": info.get("tensor_types"),
            "quantize_method": self.model_record.get("method"),
            "reference_derived_from": self.model_record.get("reference_derived_from"),
            # how the rung was made: its recipe (per-tensor types), its importance matrix (file sha,
            # calibration corpus + sha, settings, llama-imatrix's build) or none
            "tensor_type_params": info.get("tensor_type_params"),
            "recipe": self.model_record.get("recipe"),
            "recipe_name": self.model_record.get("recipe_name"),
            "imatrix": self.model_record.get("imatrix"),
            # a file not made here: how it differs from the reference (quantladder.provenance)
            "provenance": self.model_record.get("provenance"),
        }

    def manifest(self, *, data: dict | None = None, engine: dict | None = None, card_identity: dict | None = None,
                 keys: dict | None = None) -> dict:
        ident = card_identity or qcard.check_same_card(self.card, self.config.get("card"))
        lib = library_info()
        engine = dict(engine or {})
        engine.setdefault("n_gpu_layers", self.config["gpu_layers"])
        n_layer = (self.model_record.get("info") or {}).get("n_layer")
        engine.update(engine_backend(lib, engine, n_layer=n_layer))  # which backend, how many layers on the GPU
        return qmanifest.build(
            self.config, self.card, self.family, self.rung, self.kv, self.benchmark,
            model_info=self.model_info(), card_identity=ident, library=lib,
            data=data, engine=engine, keys={"series": self.series, **(keys or {})},
        )

    def write_metrics(self, path: str | os.PathLike, rows: list[dict], *, data: dict | None = None,
                      engine: dict | None = None, extra: dict | None = None,
                      status: str | None = None, status_reason: str | None = None, keys: dict | None = None) -> dict:
        """Write metrics.json (with the manifest inside) and manifest.json beside it, atomically.

        The file's status is the worse of the anchor's and the one given (incomplete, absent, ...), and
        its ``incomplete`` flag is true exactly when that status is "incomplete"."""
        st, reason = self.status
        if status and qstatus.rank(status) > qstatus.rank(st):
            st, reason = status, status_reason
        elif status and status_reason and st == status:
            reason = status_reason
        man = self.manifest(data=data, engine=engine, keys=keys)
        doc = {"benchmark": self.benchmark, "status": st, "status_reason": reason,
               "incomplete": st == "incomplete", "rows": rows, "manifest": man, **(extra or {})}
        man["anchor"] = anchor_summary(self.anchor)  # what the figures were anchored against
        write_json(Path(path).with_name("manifest.json"), man)
        write_json(path, doc)
        return doc


def from_snakemake(smk, benchmark: str | None = None) -> Point:
    """Build the Point from a rule's snakemake object.

    Expects input.info (the rung's sidecar JSON; input.gguf where the job loads the model, verified
    against the sidecar's sha256) and, optionally, input.anchor. A task job's benchmark and series
    come from its wildcards.
    """
    w = smk.wildcards
    benchmark = benchmark or w.task
    series = getattr(w, "series", "points")
    cfg = qconfig.noise_config(smk.config) if series == "noise" else smk.config
    inp = smk.input
    try:
        record = read_json(inp.info)
    except (AttributeError, FileNotFoundError) as e:
        raise QuantladderError(f"rule {smk.rule}: needs input.info (the rung's .gguf.json)") from e
    anchor = {}
    if hasattr(inp, "anchor") and inp.anchor:
        anchor = read_json(inp.anchor)
    threads = smk.config.get("threads") or smk.threads
    gguf = getattr(inp, "gguf", None)
    if gguf:  # the job loads the rung: its bytes are the recorded ones before any figure is made
        verify_sha256(gguf, record.get("sha256"), what="rung file", recorded_in=str(inp.info))
    gguf = gguf or str(inp.info)[: -len(".json")]
    return Point(config=cfg, card=w.card, family=w.family, rung=w.rung, kv=w.kv, benchmark=benchmark,
                 model_path=str(gguf), model_record=record, anchor=anchor, threads=int(threads), series=series)
