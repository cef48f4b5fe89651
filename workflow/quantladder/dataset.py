"""The Parquet dataset: the single source of truth for curves, report and recommendation.

Long form: one row per (point × benchmark × metric × subset × n_ctx). Every figure carries
its unit, and its standard error where it is a statistic.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import metrics, status
from .errors import DataError
from .io import REWRITE, atomic_path, read_json

# (column, arrow type, unit or meaning). This table is the documented schema (README links it).
COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("card", pa.string(), "results key of the card the point ran on"),
    ("family", pa.string(), "model family name from the config"),
    ("rung", pa.string(), "quantization rung (F16, Q8_0, Q4_K_M, ... or a prebuilt name)"),
    ("kv", pa.string(), "KV-cache type label ('f16', 'q8_0', or 'K-V')"),
    ("type_k", pa.string(), "K-cache ggml type"),
    ("type_v", pa.string(), "V-cache ggml type"),
    ("is_reference", pa.bool_(), "the family's reference rung (F16/BF16)"),
    ("benchmark", pa.string(), "perplexity, kld, speed, memory, energy, bfcl, humaneval, ruler, ..."),
    ("metric", pa.string(), "metric name; its unit is in `unit`"),
    ("subset", pa.string(), "category / task / length label within the benchmark, null for the whole"),
    ("n_ctx", pa.int64(), "context length the figure was measured at (tokens), null if none"),
    ("value", pa.float64(), "the figure, in `unit`"),
    ("unit", pa.string(), "unit of value and stderr (e.g. tokens/s, bytes, %, nats, 1)"),
    ("stderr", pa.float64(), "standard error (or sd over repetitions where metric says so), same unit"),
    ("n", pa.int64(), "sample count behind the figure (tokens, items, repetitions)"),
    ("ci_low", pa.float64(), "lower end of the figure's own 95 % interval, where it is not value ± 1.96·stderr: "
     "a per-token figure's, clustered by chunk (a divergence's widened for its skew, docs/statistics.md); "
     "null: none of its own"),
    ("ci_high", pa.float64(), "upper end of that interval"),
    ("n_clusters", pa.int64(), "independent units behind `ci_low`…`ci_high` (the chunks of a per-token figure: "
     "its tokens are not independent)"),
    ("higher_is_better", pa.bool_(), "direction of the metric"),
    ("status", pa.string(), "ok | unanchored | blocked | incomplete | failed | absent (not measurable here: see reason)"),
    ("status_reason", pa.string(), "why a status is not ok"),
    ("bits_per_weight", pa.float64(), "tensor bits / parameters of the rung's GGUF (bits)"),
    ("file_bytes", pa.int64(), "size of the rung's GGUF file (bytes)"),
    ("n_params", pa.int64(), "parameters in the GGUF (count)"),
    # How the rung was made (the manifest's `model` section, from the rung's sidecar: docs/ladder.md)
    ("file_type", pa.string(), "the GGUF's own file type (`general.file_type`: Q4_K_M, IQ2_XXS, F16, ...)"),
    ("tensor_mix", pa.string(), "share of the parameters per ggml tensor type, largest first (\"Q5_0 58 %, Q8_0 "
     "22 %, F32 0.03 %\"): the real mix, fallbacks included; null when unknown"),
    ("imatrix", pa.string(), "the importance matrix the rung was made with: calibration corpus and settings "
     "(\"stdlib-docstrings (n_ctx 512, 32 chunks)\"), or the file name of one made elsewhere; \"unknown (prebuilt "
     "file)\" for a third-party file, whose maker's matrix is not recorded; null: made without a matrix"),
    ("recipe", pa.string(), "the tensor-type recipe's name (quantize.recipes); a recipe without a name (a built-in "
     "FP4 rung, per-rung tensor types) as its rules; null: the file type's own mixture"),
    ("provenance", pa.string(), "where the rung's file comes from: \"made here\" (the reference and every rung "
     "quantized from it), \"third party, as the reference\", \"third party; differs from the reference in: "
     "<groups> (accepted)\" (architecture, tokenizer, chat_template, context: docs/ladder.md, \"Third-party "
     "files\"; a chat_template difference means its chat exams ran with the file's own template), followed by "
     "\"; chat exams with the reference's template (its own differs)\" where `prebuilt.<rung>.chat_template: "
     "reference` replaced it, or \"third party, not checked against the reference\" (a manifest from before the "
     "check)"),
    ("n_parallel", pa.int64(), "sequences the point's replies were decoded together with (a generation setting, "
     "docs/generation.md), or a speed row's own (tg_tokens_per_s_parallel: B sequences together); null where "
     "nothing was generated"),
    ("gguf_sha256", pa.string(), "sha256 of the rung's GGUF"),
    ("manifest_hash", pa.string(), "hash of the point's manifest spec (decides validity)"),
    ("harness_version", pa.string(), "quantladder harness version"),
    ("llama_cpp_python", pa.string(), "llama-cpp-python version"),
    ("libllama_sha256", pa.string(), "sha256 of the loaded libllama"),
    ("card_name", pa.string(), "GPU or CPU model name"),
    ("data_hash", pa.string(), "hash of the benchmark data or corpus"),
    ("measured_at", pa.string(), "UTC time the point was measured (ISO 8601)"),
    ("card_fingerprint", pa.string(), "hash of what makes the card output what it outputs (model + instruction "
     "sets on a CPU; name + compute capability + backend on a GPU); one card key never mixes two"),
    # The paired comparison with the family's reference rung on the same items / tokens (same card, KV
    # type and settings), filled by the aggregate where the metric is paired (quantladder.metrics).
    ("delta", pa.float64(), "rung − reference on the same items/tokens, in `unit` (points for a %)"),
    ("delta_stderr", pa.float64(), "standard error of `delta`"),
    ("delta_ci_low", pa.float64(), "lower end of the 95 % interval of `delta`"),
    ("delta_ci_high", pa.float64(), "upper end of the 95 % interval of `delta`"),
    ("delta_p", pa.float64(), "p-value of the exact paired test (McNemar / sign-flip) of `delta` = 0"),
    ("delta_p_adjusted", pa.float64(), "`delta_p` corrected for the whole ladder (method in docs/statistics.md)"),
    ("delta_mde", pa.float64(), "smallest loss detectable at 80 % power with these items, in `unit`"),
    ("verdict", pa.string(), "loss | no loss detectable | gain | loss within noise: the paired verdict"),
    ("verdict_text", pa.string(), "the verdict in words, with n, the interval and the detectable loss"),
]
SCHEMA = pa.schema([pa.field(n, t) for n, t, _ in COLUMNS])
#: what a metrics.json row carries into the dataset's rows (quantladder.metrics.row); ``interval`` is no
#: column: it lets the paired columns be computed at another level (deltas.token_delta)
ROW_FIELDS = ("metric", "value", "unit", "stderr", "n", "ci_low", "ci_high", "n_clusters", "interval", "subset",
              "n_ctx", "higher_is_better")

# The `imatrix` of a prebuilt rung: made by a third party, with or without a matrix (not recorded).
IMATRIX_UNKNOWN = "unknown (prebuilt file)"


def _share(pct: float) -> str:
    """A share in % as the tensor mix shows it: whole percent from 10 %, one decimal from 1 %, one
    significant digit below; never rounded up to 100 % or down to 0 %."""
    if pct >= 10:
        d = 0
    elif pct >= 1:
        d = 1
    elif pct > 0:
        d = min(6, max(1, -math.floor(math.log10(pct))))
    else:
        return "0"
    text = f"{pct:.{d}f}"
    while 0 < pct < 100 and float(text) >= 100 and d < 6:  # 99.7 is not 100
        d += 1
        text = f"{pct:.{d}f}"
    return text


def tensor_mix(params: dict | None) -> str | None:
    """"Q5_0 58 %, Q8_0 22 %, F32 0.03 %": the share of the parameters each ggml type holds
    (``model.tensor_type_params``), largest first; None when the manifest does not record it."""
    if not params:
        return None
    total = sum(int(v) for v in params.values())
    if total <= 0:
        return None
    order = sorted(params.items(), key=lambda kv: (-int(kv[1]), kv[0]))
    return ", ".join(f"{t} {_share(100 * int(n) / total)} %" for t, n in order)


def imatrix_label(im: dict | None) -> str | None:
    """"stdlib-docstrings (n_ctx 512, 32 chunks)": the calibration corpus and the settings of the
    rung's importance matrix (the imatrix rule's sidecar, ``model.imatrix``); a matrix made elsewhere
    by its file name; None without a matrix."""
    if not im:
        return None
    corpus = im.get("corpus")
    name = corpus.get("name") if isinstance(corpus, dict) else corpus
    if not name:
        f = im.get("file")
        sha = im.get("sha256")
        return f"{Path(f).name if f else 'a matrix'} (made elsewhere" + (f", sha256 {sha[:12]})" if sha else ")")
    s = im.get("settings") or {}
    parts = []
    if s.get("n_ctx") is not None:
        parts.append(f"n_ctx {int(s['n_ctx'])}")
    if s.get("chunks") is not None:
        ran = im.get("chunk_count")
        parts.append(f"{int(s['chunks'])} chunks" if not ran or int(ran) == int(s["chunks"])
                     else f"{int(ran)} of {int(s['chunks'])} chunks")
    if s.get("process_output"):
        parts.append("output.weight included")
    if s.get("parse_special"):
        parts.append("special tokens parsed")
    return f"{name} ({', '.join(parts)})" if parts else str(name)


def recipe_label(name: str | None, recipe: dict | None) -> str | None:
    """The recipe's name; a recipe without one by its rules ("Q8_0; ^blk\\.\\d+\\..*\\.weight$ → NVFP4");
    None when the rung is its file type's own mixture."""
    if name:
        return str(name)
    if not recipe:
        return None
    rules = [f"{p} → {t}" for p, t in recipe.get("tensor_types") or []]
    for key, what in (("token_embedding_type", "token_embd"), ("output_tensor_type", "output")):
        if recipe.get(key):
            rules.append(f"{what} → {recipe[key]}")
    if recipe.get("pure"):
        rules.append("pure")
    if not rules:
        return None
    return "; ".join([str(recipe["type"])] * bool(recipe.get("type")) + rules)


# What every metrics.json holds (quantladder.points.Point.write_metrics): its readers require them.
METRICS_KEYS = ("benchmark", "rows", "manifest")


def provenance_label(model: dict) -> str:
    """The dataset's `provenance` of a rung, from its manifest's model section (its sidecar's
    ``provenance`` record: quantladder.provenance)."""
    if model.get("rung_kind") != "prebuilt":
        return "made here"
    p = model.get("provenance")
    if not p:
        return "third party, not checked against the reference"
    groups = p.get("differs_in") or []
    derived = ((model.get("prebuilt") or {}).get("derive") or {}).get("rung")
    who = f"third party (a stand-in derived here from {derived})" if derived else "third party"
    label = (f"{who}; differs from the reference in: " + ", ".join(groups) + " (accepted)" if groups
             else f"{who}, as the reference")
    tpl = p.get("chat_template") or {}
    if tpl.get("from") == "reference" and tpl.get("own_differs"):
        label += "; chat exams with the reference's template (its own differs)"
    return label


def rows_from_point(metrics_path: str | Path, manifest_path: str | Path | None = None) -> list[dict]:
    """Flatten one point's metrics.json (+ its manifest) into dataset rows."""
    m = read_json(metrics_path, required=METRICS_KEYS)
    man = read_json(manifest_path) if manifest_path else m.get("manifest", {})
    point = man.get("point", {})
    model = man.get("model", {})
    asked = model.get("quantize_options") or {}
    lib = man.get("library", {})
    card = man.get("card", {})
    base = {
        "card": point.get("card"), "family": point.get("family"), "rung": point.get("rung"),
        "kv": point.get("kv"), "type_k": point.get("type_k"), "type_v": point.get("type_v"),
        "is_reference": bool(point.get("is_reference")),
        "benchmark": m["benchmark"], "status": m.get("status", "ok"),
        "status_reason": m.get("status_reason"),
        "bits_per_weight": model.get("bits_per_weight"), "file_bytes": model.get("file_bytes"),
        "n_params": model.get("n_params"), "gguf_sha256": model.get("sha256"),
        "file_type": model.get("file_type"), "tensor_mix": tensor_mix(model.get("tensor_type_params")),
        # what was made (the rung's sidecar); a manifest from before it was recorded: what was asked for
        "imatrix": (IMATRIX_UNKNOWN if model.get("rung_kind") == "prebuilt" and not model.get("imatrix") else
                    imatrix_label(model["imatrix"] if "imatrix" in model else asked.get("imatrix"))),
        "recipe": recipe_label(model.get("recipe_name") or asked.get("recipe"), model.get("recipe")),
        "provenance": provenance_label(model),
        "n_parallel": (m.get("generation") or {}).get("n_parallel"),
        "manifest_hash": man.get("spec_hash"), "harness_version": man.get("harness_version"),
        "llama_cpp_python": lib.get("llama_cpp_python"), "libllama_sha256": lib.get("libllama_sha256"),
        "card_name": card.get("name"), "card_fingerprint": card.get("fingerprint"),
        "data_hash": (man.get("data") or {}).get("sha256"),
        "measured_at": man.get("created_at"),
    }
    rows = []
    for no, r in enumerate(m["rows"]):
        if not isinstance(r, dict) or "metric" not in r or "value" not in r:
            raise DataError(f"{metrics_path}: rows[{no}] is not a metric row ({str(r)[:80]}): the file is damaged; "
                            f"{REWRITE}")
        row = {c: None for c, _, _ in COLUMNS}
        row.update(base)
        row.update({k: r.get(k) for k in ROW_FIELDS})
        if r.get("n_parallel") is not None:  # the row's own (a speed test at B sequences) over the point's
            row["n_parallel"] = int(r["n_parallel"])
        if r.get("status") and status.rank(r["status"]) > status.rank(row["status"]):
            # a row can say more than its file (energy on a CPU: absent)
            row["status"], row["status_reason"] = r["status"], r.get("status_reason")
        rows.append(row)
    if not rows:  # a blocked benchmark still shows up, with its reason
        row = {c: None for c, _, _ in COLUMNS}
        row.update(base)
        row.update({"metric": "status", "unit": "1"})
        rows.append(row)
    return rows


def to_table(rows: list[dict]) -> pa.Table:
    cols = {name: [r.get(name) for r in rows] for name, _, _ in COLUMNS}
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def write(rows: list[dict], path: str | Path) -> None:
    table = to_table(rows)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read(path: str | Path):
    import pandas as pd

    return pd.read_parquet(path)


def schema_markdown() -> str:
    lines = ["| column | type | unit / meaning |", "|---|---|---|"]
    lines += [f"| `{n}` | {t} | {d} |" for n, t, d in COLUMNS]
    return "\n".join(lines)
