"""From per-point metrics files to the dataset: Parquet rows, flips, curves per family."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

from . import dataset, flips
from .io import read_json, read_jsonl

log = logging.getLogger(__name__)


def collect(metrics_paths: list[str]) -> list[dict]:
    rows: list[dict] = []
    for p in metrics_paths:
        rows.extend(dataset.rows_from_point(p))
    rows.extend(flip_rows(metrics_paths))
    rows.extend(generation_hash_rows(metrics_paths))
    return rows


def generation_hash_rows(metrics_paths: list[str]) -> list[dict]:
    """One row per generated item (metric `generation_hash`, subset = item id), so the same
    points on two cards can be compared output by output (the seeds: 21/148 identical)."""
    from .dataset_view import generation_hash_value

    out = []
    for p in map(Path, metrics_paths):
        gens = p.with_name("generations.jsonl")
        if not gens.exists():
            continue
        base = dataset.rows_from_point(p)[0]
        for g in read_jsonl(gens):
            if "item_id" not in g or g.get("text") is None:
                continue
            row = dict(base)
            row.update({"metric": "generation_hash", "subset": str(g["item_id"]), "value": generation_hash_value(g["text"]),
                        "unit": "sha256[:52]", "stderr": None, "n": 1, "n_ctx": g.get("n_ctx"), "higher_is_better": None})
            out.append(row)
    return out


def flip_rows(metrics_paths: list[str]) -> list[dict]:
    """Flips vs the reference rung (same card, family, KV type, benchmark), from verdicts.jsonl."""
    groups: dict[tuple, dict[str, Path]] = defaultdict(dict)
    docs: dict[Path, dict] = {}
    for p in map(Path, metrics_paths):
        verdicts = p.with_name("verdicts.jsonl")
        if not verdicts.exists():
            continue
        doc = read_json(p)
        point = doc.get("manifest", {}).get("point", {})
        key = (point.get("card"), point.get("family"), point.get("kv"), doc["benchmark"])
        groups[key][point.get("rung")] = p
        docs[p] = doc
    out = []
    for key, by_rung in groups.items():
        ref = [p for p in by_rung.values() if docs[p]["manifest"]["point"].get("is_reference")]
        if not ref:
            continue
        ref_verdicts = read_jsonl(ref[0].with_name("verdicts.jsonl"))
        for rung, p in by_rung.items():
            f = flips.flips(ref_verdicts, read_jsonl(p.with_name("verdicts.jsonl")))
            base = dataset.rows_from_point(p)[0]
            for r in flips.metric_rows(f):
                row = dict(base)
                row.update({k: r.get(k) for k in ("metric", "value", "unit", "stderr", "n", "subset", "n_ctx", "higher_is_better")})
                out.append(row)
    return out


def curve_table(rows: list[dict], family: str):
    """One family's curve: its rows sorted by bits per weight, with the change vs the reference rung.

    delta_vs_reference = value − reference value (same card, KV type, benchmark, metric, subset, n_ctx);
    ratio_vs_reference = value / reference value.
    """
    import pandas as pd

    df = dataset.to_table([r for r in rows if r["family"] == family]).to_pandas()
    if df.empty:
        return df
    key = ["card", "kv", "benchmark", "metric", "subset", "n_ctx"]
    ref = df[df["is_reference"]][key + ["value"]].rename(columns={"value": "reference_value"})
    df = df.merge(ref, on=key, how="left")
    df["delta_vs_reference"] = df["value"] - df["reference_value"]
    df["ratio_vs_reference"] = df["value"] / df["reference_value"]
    return df.sort_values(["benchmark", "metric", "kv", "bits_per_weight"], ascending=[True, True, True, False],
                          ignore_index=True).pipe(pd.DataFrame)
