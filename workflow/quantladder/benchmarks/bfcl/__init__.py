"""BFCL v4 function calling through the raw completion path (prompting mode), scored by our AST checker.

Modules: ``data`` (obtain + pin the files, load items), ``prompts`` (BFCL's system prompt through the
GGUF chat template), ``parse`` (decode answers), ``checker`` (BFCL's AST rules), ``score`` (verdicts,
aggregates, metric rows), ``multiturn`` (model-driven calls in the sandbox, state/response checks),
``run`` (a point's generation and scoring).

Reference: Patil et al., the Berkeley Function Calling Leaderboard (gorilla.cs.berkeley.edu), data
and rules of bfcl-eval 2026.3.23.
"""

from __future__ import annotations

from .score import SCORER_VERSION

__all__ = ["SCORER_VERSION", "anchor_score"]

DATA_RECORD = "resources/bfcl/data.json"
# The leaderboard's "non-live AST" is the four AST groups; irrelevance is reported apart.
NON_LIVE_AST = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"]


def anchor_score(entry: dict) -> float:
    """Reproduce an anchor's BFCL score (called by the anchor gate; see config/anchors.yaml).

    Needs the BFCL data record (rule bfcl_data) and the anchor model (a hub download): either
    missing raises a QuantladderError, which the gate reports as "unanchored" with the reason.
    """
    from pathlib import Path

    from ...engine import Engine, EngineSettings
    from ...errors import DataError
    from ...io import hash_obj, read_json, read_jsonl
    from ...models import resolve_source
    from . import data, run
    from .score import metric_rows

    s = run.settings({"categories": NON_LIVE_AST, **entry.get("settings", {})})
    rec_path = Path(entry.get("data_record", DATA_RECORD))
    if not rec_path.is_file():
        # The gate may run before rule bfcl_data: obtain the same files into a place of its own
        # (no race with that rule); offline, this raises and the gate says "unanchored" and why.
        rec_path = Path("resources/bfcl/anchor/data.json")
        if not rec_path.is_file():
            data.materialize(s.get("source", {"wheel": {"version": "2026.3.23"}}), rec_path.with_name("data"),
                             rec_path, download_dir=Path("resources/bfcl/wheel"))
    record = read_json(rec_path)
    data.verify(record)
    model = resolve_source(entry["model"])
    items = data.load_items(record, s["categories"], s["limit"], s["limits"], s["seed"])
    cache = Path("resources/bfcl/anchor") / hash_obj({"model": entry["model"], "settings": s,
                                                      "data": record["sha256"]})[:16]
    cache.mkdir(parents=True, exist_ok=True)
    gens = cache / "generations.jsonl"
    es = EngineSettings(n_ctx=s["n_ctx"], kv="f16", n_gpu_layers=int(entry.get("gpu_layers", 999)))
    with Engine(str(model), es) as engine:
        run.generate(engine, record["root"], items, gens, s)
    verdicts = run.score(items, read_jsonl(gens))
    want_metric, want_subset = entry["metric"], entry.get("subset")
    for row in metric_rows(verdicts, s["categories"]):
        if row["metric"] == want_metric and row["subset"] == want_subset:
            return row["value"]
    raise DataError(f"anchor: BFCL wrote no metric {want_metric!r} with subset {want_subset!r}")
