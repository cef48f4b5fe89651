"""From per-point files to the dataset: Parquet rows, and every comparison between points, made here
and only here.

The comparisons, with their one documented choice of reference (docs/dataset.md):
- **The reference of a point** is the family's reference rung on the same card, with the same KV-cache
  type, benchmark, settings and series: the paired comparison isolates what the rung's quantization
  costs. The KV axis itself is compared at the reference rung: (reference, KV q8_0) against
  (reference, the family's first KV type). Perplexity/KLD differ on purpose: they are measured against
  the reference rung's stored f16-KV log-probs (their KV cost is inside the figure).
- **Flips** (``flip_rate`` and its two directions) and **identical replies**
  (``identical_to_reference``) over the items both points have, whole and per subset (counted by
  ``quantladder.flips``).
- **The noise floor**: the reference rung generated a second time at another batch setting (the
  ``noise`` series, quantladder.config): the share of byte-identical replies (``noise_identical_share``)
  and the verdict flip rate (``noise_flip_rate``) between two runs that should agree. A rung whose flip
  rate is not above it has no loss the harness can attribute to quantization. ``batch_invariant`` says
  whether every reply of the pair is identical: measured, per card, never assumed.
- **Paired deltas** (the ``delta*`` and ``verdict*`` columns of every paired figure, and ``items_needed``):
  ``quantladder.deltas``, called here on the rows assembled.
- **The thinking** of a thinking family (closure, cap hits, thinking length, flips by cause, each part's
  identity): ``quantladder.thinking``, per point and against the same reference.
- **Cross-card identity**: one ``generation_hash`` row per item, so the same points on two cards can be
  compared reply by reply (the seeds: 21 of 148 identical); cards are never merged into one curve.
- **One card key, one machine kind**: points under one card key whose card fingerprints differ are
  refused, naming both.
The per-item files it reads (verdicts.jsonl, generations.jsonl) are declared inputs of its rules.
"""

from __future__ import annotations

import logging
from pathlib import Path

from . import catalog  # noqa: F401  -- every figure declared (the measures' too) before deltas look one up
from . import dataset, deltas, metrics, thinking
from .errors import CardMismatchError, DataError
from .flips import flip_metric_rows, flips, generation_hash_value, identical, share
from .io import GENERATIONS, VERDICTS, JsonlFile, read_json
from .targets import FIDELITY

log = logging.getLogger(__name__)

POINT_KEY = ("card", "family", "rung", "kv")


class Point:
    """One metrics.json with its manifest and, for a task benchmark, its per-item files."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.doc = read_json(self.path, required=dataset.METRICS_KEYS)
        man = self.doc.get("manifest", {})
        self.point = man.get("point", {})
        self.benchmark = self.doc["benchmark"]
        self.series = (man.get("keys") or {}).get("series", "points")
        self.fingerprint = (man.get("card") or {}).get("fingerprint")
        self.card_identity = man.get("card") or {}
        # a task point's fidelity rows (measures.fidelity): the benchmark's figures, not its verdicts
        self.fidelity = self.path.parent.name.startswith(FIDELITY)

    @property
    def inputs(self) -> dict:
        """What a task point was made from: its items file's sha256 and the digests its key names."""
        data = self.doc.get("manifest", {}).get("data") or {}
        return {"items_sha256": data.get("items_sha256"), **(data.get("digests") or {})}

    @property
    def key(self) -> tuple:
        return tuple(self.point.get(k) for k in POINT_KEY)

    def _file(self, name: str, kind) -> list[dict] | None:
        """A per-item file beside the metrics, checked against the count and sha256 recorded for it."""
        p = self.path.with_name(name)
        return JsonlFile(p, kind).read_declared()[0] if p.exists() else None

    def verdicts(self) -> list[dict] | None:
        return self._file("verdicts.jsonl", VERDICTS)

    def generations(self) -> list[dict] | None:
        return self._file("generations.jsonl", GENERATIONS)

    def base_row(self) -> dict:
        return dataset.rows_from_point(self.path)[0]


def check_fingerprints(points: list[Point]) -> None:
    """One card key never holds two machine kinds (rule 3: same card only)."""
    seen: dict[str, Point] = {}
    for p in points:
        card = p.point.get("card")
        if p.fingerprint is None:
            continue
        first = seen.setdefault(card, p)
        if first.fingerprint != p.fingerprint:
            raise CardMismatchError(
                f"card key {card!r} holds points of two machine kinds: {first.path} was measured on "
                f"{first.card_identity.get('name')!r} (fingerprint {first.fingerprint}) and {p.path} on "
                f"{p.card_identity.get('name')!r} (fingerprint {p.fingerprint}); outputs differ between them, so "
                "they are never merged: let `card: auto` key them apart, or set `card:` per partition")


def collect(metrics_paths: list[str]) -> list[dict]:
    points = [Point(p) for p in metrics_paths]
    check_fingerprints(points)
    rows: list[dict] = []
    for p in points:
        if p.series == "points":
            rows.extend(dataset.rows_from_point(p.path))
    rows.extend(comparison_rows(points))
    # a thinking family's thinking, per point and against its reference (quantladder.thinking)
    rows.extend(thinking.rows([p for p in points if not p.fidelity], reference_of, _with))
    # the paired columns of every paired figure, and the items each comparison needs (quantladder.deltas)
    rows.extend(deltas.fill(rows, [p for p in points if not p.fidelity], reference_of))
    rows.extend(generation_hash_rows(points))
    return rows


def _with(base: dict, r: dict) -> dict:
    row = dict(base)
    row.update({k: r.get(k) for k in dataset.ROW_FIELDS})
    row["status"], row["status_reason"] = base.get("status"), base.get("status_reason")
    return row


def reference_of(p: Point, by_key: dict) -> Point | None:
    """The point ``p`` is compared with (see the module's docstring), or None."""
    card, fam, rung, kv = p.key
    ref_rung = None
    for q in by_key.values():
        if q.point.get("family") == fam and q.point.get("is_reference"):
            ref_rung = q.point.get("rung")
            break
    if ref_rung is None:
        return None
    if rung != ref_rung:
        return by_key.get((card, fam, ref_rung, kv, p.benchmark))
    kvs = sorted({q.point.get("kv") for q in by_key.values() if q.point.get("family") == fam
                  and q.point.get("rung") == ref_rung and q.benchmark == p.benchmark},
                 key=lambda k: (k != "f16", k))
    base_kv = kvs[0] if kvs else kv
    if kv == base_kv:
        return None
    return by_key.get((card, fam, ref_rung, base_kv, p.benchmark))


def comparison_rows(points: list[Point]) -> list[dict]:
    """Flips and identical replies vs each point's reference; the noise floor of each reference."""
    tasks = [p for p in points if p.verdicts() is not None]
    by_key = {(*p.key, p.benchmark): p for p in tasks if p.series == "points"}
    out: list[dict] = []
    for p in tasks:
        if p.series == "noise":
            twin = by_key.get((*p.key, p.benchmark))
            if twin is not None:
                out += _pair_rows(twin, p, twin.base_row(), noise=True)
            continue
        ref = reference_of(p, by_key)
        if ref is not None:
            out += _pair_rows(ref, p, p.base_row(), noise=False)
    return out


def check_same_inputs(ref: Point, p: Point) -> None:
    """A paired comparison is over the same items and the same checks (rule 13): two points made from
    different items files or check digests (a file edited while a run went on) are refused, naming
    both, rather than paired into a delta that compares two exams."""
    a, b = ref.inputs, p.inputs
    for what in sorted(set(a) | set(b)):
        if a.get(what) != b.get(what):
            raise DataError(
                f"{p.path} and {ref.path} were made from different inputs ({what}: {b.get(what)} against "
                f"{a.get(what)}), so they are not paired: run snakemake again (it re-plans the points whose "
                "recorded inputs differ from the files as they are now)")


def _pair_rows(ref: Point, p: Point, base: dict, *, noise: bool) -> list[dict]:
    check_same_inputs(ref, p)
    rv, pv = ref.verdicts() or [], p.verdicts() or []
    out = [_with(base, r) for r in flip_metric_rows(flips(rv, pv), None, noise)]
    subsets = sorted({v.get("subset") for v in pv if v.get("subset")})
    if len(subsets) > 1:
        for s in subsets:
            out += [_with(base, r) for r in flip_metric_rows(
                flips([v for v in rv if v.get("subset") == s], [v for v in pv if v.get("subset") == s]), s, noise)]
    # items at several context lengths (RULER, bfcl_haystack): the flips at each length, all of its
    # items and per subset, so a loss that grows with the context shows where it starts
    ctxs = sorted({int(v["n_ctx"]) for v in pv if v.get("n_ctx") is not None})
    if len(ctxs) > 1:
        for c in ctxs:
            rc, pc = [v for v in rv if v.get("n_ctx") == c], [v for v in pv if v.get("n_ctx") == c]
            out += [_with(base, r) for r in flip_metric_rows(flips(rc, pc), None, noise, n_ctx=c)]
            for s in (subsets if len(subsets) > 1 else []):
                out += [_with(base, r) for r in flip_metric_rows(
                    flips([v for v in rc if v.get("subset") == s], [v for v in pc if v.get("subset") == s]), s,
                    noise, n_ctx=c)]
    same, n = identical(ref.generations() or [], p.generations() or [])
    if n:
        value, se = share(same, n)
        name = "noise_identical_share" if noise else "identical_to_reference"
        out.append(_with(base, metrics.row(name, value, stderr=se, n=n)))
        if noise:  # a yes/no per pair; the report pools the card's pairs
            out.append(_with(base, metrics.row("batch_invariant", float(same == n), n=n)))
    return out


def generation_hash_rows(points: list[Point]) -> list[dict]:
    """One row per generated item (metric `generation_hash`, subset = item id)."""
    out = []
    for p in points:
        if p.series != "points":
            continue
        gens = p.generations()
        if not gens:
            continue
        base = p.base_row()
        for g in gens:
            if "item_id" not in g or g.get("text") is None:
                continue
            out.append(_with(base, metrics.row("generation_hash", generation_hash_value(g["text"]), n=1,
                                               subset=str(g["item_id"]), n_ctx=g.get("n_ctx"))))
    return out


def curve_table(rows: list[dict], family: str):
    """One family's curve: its rows sorted by bits per weight, with the change vs the reference rung.

    delta_vs_reference = value − reference value (same card, KV type, benchmark, metric, subset, n_ctx);
    ratio_vs_reference = value / reference value. The paired delta with its interval is in `delta`.
    """
    import pandas as pd

    df = dataset.to_table([r for r in rows if r["family"] == family]).to_pandas()
    if df.empty:
        return df
    key = ["card", "kv", "benchmark", "metric", "subset", "n_ctx"]
    ref = df[df["is_reference"]][key + ["value"]].rename(columns={"value": "reference_value"})
    ref = ref.drop_duplicates(subset=key)
    df = df.merge(ref, on=key, how="left")
    df["delta_vs_reference"] = df["value"] - df["reference_value"]
    df["ratio_vs_reference"] = df["value"] / df["reference_value"]
    return df.sort_values(["benchmark", "metric", "kv", "bits_per_weight"], ascending=[True, True, True, False],
                          ignore_index=True).pipe(pd.DataFrame)
