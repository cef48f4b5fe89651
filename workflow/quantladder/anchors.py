"""The anchor gate: reproduce a reference model's published score on this card before measuring.

Outcome per (card, benchmark), written to results/{card}/anchors/{benchmark}.json:
  passed      |reproduced − published| ≤ tolerance: the benchmark's points run, status ok
  failed      outside tolerance: the harness is wrong; the benchmark's points do not measure
  unanchored  no anchor configured or reachable (offline, gated, needs a GPU): points run and are
              marked `unanchored` everywhere they are shown, with the reason

A task benchmark's gate reproduces the published score with this very harness: the anchor model
through the benchmark's own items, generation loop and score stage, as every point. A benchmark is
data (``Benchmark.anchor_bench`` says what an entry runs with); running it is done here, in two steps,
so that a benchmark that runs model-written code scores its anchor on the scoring host.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import statistics
from pathlib import Path

import yaml

from . import HARNESS_VERSION, REPO_ROOT, benchmarks, generation, measures, schemas, scoring
from .benchmarks import Benchmark, Item, ScoringContext
from .engine import Engine, EngineSettings
from .errors import ConfigError, DataError, QuantladderError
from .io import GENERATIONS, JsonlFile, hash_obj, read_json, read_jsonl, write_json
from .llama_tools import library_backend, library_version
from .manifest import anchor_run_key, gate_settings
from .models import resolve_source

# A benchmark with no published anchor that can be reproduced offline, said plainly in the report (a
# measure says its own: quantladder.measures.Measure.anchor).
NO_PUBLISHED_ANCHOR = {
    "traffic": "your traffic has no labels and no published score: each rung is compared with the reference rung",
}


def no_anchor_reason(benchmark: str) -> str:
    """Why ``benchmark`` has no anchor entry: a measure's own word, a known benchmark's, else the plain fact."""
    m = measures.get(benchmark)
    if m is not None:
        return m.anchor
    return NO_PUBLISHED_ANCHOR.get(benchmark, f"no anchor configured for {benchmark} in the anchors file")


def load_entries(path: str | Path) -> list[dict]:
    """The anchors file's entries, checked against its schema (config/schemas/anchors.schema.yaml): an
    error names the file, the entry and the key. Returned as written, defaults not filled in: the
    entries key the gates (manifest.anchor_key); :func:`entry_settings` reads one with its defaults."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: anchors file not found (config key `anchors`)")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    doc = {} if doc is None else doc
    schema_file = schemas.ANCHORS_SCHEMA_PATH
    errors = sorted(schemas.filling_validator(schemas.load(schema_file)).iter_errors(copy.deepcopy(doc)),
                    key=lambda e: [str(x) for x in e.path])
    if errors:
        e = errors[0]
        where, head = list(e.path), str(p)
        if where[:1] == ["anchors"] and len(where) >= 2:  # inside an entry: which one, by benchmark and model
            entry = doc["anchors"][where[1]]
            model = entry.get("model") if isinstance(entry, dict) else None
            named = [x for x in (entry.get("benchmark") if isinstance(entry, dict) else None,
                                 model.get("label") if isinstance(model, dict) else None) if isinstance(x, str)]
            head += f": anchors[{where[1]}]" + (f" ({', '.join(named)})" if named else "")
            where = where[2:]
        key = f": key {'.'.join(str(x) for x in where)}" if where else ""
        said = f" ({e.schema['description']})" if e.validator == "oneOf" and "description" in e.schema else ""
        raise ConfigError(f"{head}{key}: {e.message}{said} (schema {schema_file.relative_to(REPO_ROOT)})")
    return doc.get("anchors", [])


def entry_settings(entry: dict) -> dict:
    """An anchors file's entry with its schema's defaults filled in (tolerance, requires_gpu, chat,
    n_parallel, gpu_layers): a copy, the entry itself stays as written."""
    return schemas.filled_def(schemas.ANCHORS_SCHEMA_PATH, "entry", entry)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def cannot_run(entry: dict, card_identity: dict) -> str | None:
    """Why an anchor entry is not reproduced on this card (None: it is)."""
    if entry_settings(entry)["requires_gpu"] and card_identity.get("kind") != "gpu":
        return f"anchor {entry['model'].get('label', '')} needs a GPU card; this is {card_identity.get('label')}"
    return None


def generate(benchmark: str, entries: list[dict], card_identity: dict, section: dict | None, cache_dir) -> dict:
    """The generation half of a task benchmark's gate (the GPU host): each entry's replies, or why
    there are none (unreachable model or data). The gate scores them on the scoring host."""
    out = {}
    bench = benchmarks.create(benchmark, section or {})
    for i, e in enumerate(x for x in entries if x["benchmark"] == benchmark):
        why = cannot_run(e, card_identity)
        if why:
            out[str(i)] = {"skipped": why}
            continue
        try:
            out[str(i)] = generate_replies(bench, e, cache_dir)
        except QuantladderError as err:  # unreachable model, offline hub, gated repo
            out[str(i)] = {"error": f"anchor not reachable: {err}"}
    return out


def evaluate(benchmark: str, entries: list[dict], card_identity: dict, run_anchor=None,
             generated: dict | None = None, section: dict | None = None) -> dict:
    """Decide the gate. ``run_anchor(entry) -> float`` reproduces the score; by default the
    benchmark's runner from the registry, scoring the replies ``generate`` left in ``generated``
    when given (else generating them here too)."""
    mine = [e for e in entries if e["benchmark"] == benchmark]
    base = {"benchmark": benchmark, "card": card_identity.get("label"), "checked_at": _now()}
    if not mine:
        reason = no_anchor_reason(benchmark)
        return {**base, "status": "unanchored", "reason": reason}
    results = []
    for i, e in enumerate(mine):
        tol = float(entry_settings(e)["tolerance"])
        why = cannot_run(e, card_identity)
        if why:
            results.append({"entry": e, "status": "unanchored", "reason": why})
            continue
        if generated is not None and run_anchor is None:
            g = generated.get(str(i)) or {"error": "no replies were generated for this anchor"}
            if "error" in g or "skipped" in g:
                results.append({"entry": e, "status": "unanchored", "reason": g.get("error") or g.get("skipped")})
                continue
            b = benchmarks.create(benchmark, section or {})
            e_runner = lambda e, g=g, b=b: verdict(b, e, g)  # noqa: E731
        else:
            e_runner = None
        runner = run_anchor or e_runner or _module_runner(benchmark, section)
        if runner is None:
            results.append({"entry": e, "status": "unanchored",
                            "reason": f"benchmark {benchmark} has no anchor runner"})
            continue
        try:
            score = float(runner(e))
        except QuantladderError as err:  # unreachable model, offline hub, gated repo
            results.append({"entry": e, "status": "unanchored", "reason": f"anchor not reachable: {err}"})
            continue
        dev = score - float(e["published"])
        ok = abs(dev) <= tol
        results.append({"entry": e, "status": "passed" if ok else "failed", "reproduced": score,
                        "published": float(e["published"]), "deviation": dev, "tolerance": tol,
                        "reason": None if ok else
                        f"reproduced {score:.2f} vs published {e['published']} ({e['citation']}): "
                        f"off by {dev:+.2f} > {tol} points, so the harness is wrong on this card"})
    statuses = [r["status"] for r in results]
    if "failed" in statuses:
        status = "failed"
    elif "passed" in statuses:
        status = "passed"
    else:
        status = "unanchored"
    reason = "; ".join(r["reason"] for r in results if r.get("reason")) or None
    return {**base, "status": status, "reason": reason, "anchors": results}


def _module_runner(benchmark: str, section: dict | None = None):
    """The task benchmark's anchor runner, found through the Benchmark registry: both steps in one
    process (the benchmarks that run no model-written code)."""
    if benchmark not in benchmarks.names():
        return None
    return functools.partial(reproduce, benchmarks.create(benchmark, section or {}))


def generate_replies(bench: Benchmark, entry: dict, cache_dir) -> dict:
    """Generate the anchor's replies (resumable under ``cache_dir``); returns what scoring needs.
    An unreachable model or dataset raises a QuantladderError: the gate says "unanchored" and why."""
    run = bench.anchor_bench(entry)
    model = str(resolve_source(entry["model"]))
    key = anchor_run_key(entry, run)
    filled = entry_settings(entry)
    cache = Path(cache_dir) / key
    cache.mkdir(parents=True, exist_ok=True)
    source = run.fetch_source(str(cache / "source"))
    items, _ = run.build_items(source, reference_gguf=model, family={"chat": filled["chat"]})
    JsonlFile(cache / "items.jsonl").write([it.to_json() for it in items])
    n_par = int(filled["n_parallel"])
    gpu_layers = int(filled["gpu_layers"])
    loop = generation.Loop(
        run, items, key=key, store_dir=cache,
        n_parallel=n_par, label=f"anchor {run.name} {entry['model'].get('label', model)}",
        engine_for=lambda n: Engine(model, EngineSettings(n_ctx=n, kv="f16", n_gpu_layers=gpu_layers,
                                                          n_parallel=n_par)),
        env=run.open_env(source, "generate"))
    res = loop.run()
    generation.write_outputs(res, cache / "generations.jsonl", cache / "generations.json")
    write_json(cache / "source.json", source)
    return {"cache": str(cache)}


def verdict(bench: Benchmark, entry: dict, generated: dict, threads: int = 1) -> float:
    """Score the anchor's saved replies and return the figure the entry names (metric, subset, n_ctx)."""
    run = bench.anchor_bench(entry)
    cache = Path(generated["cache"])
    source = read_json(cache / "source.json")
    run.scoring_setup()  # the sandbox, before anything runs
    items = [Item.from_json(r) for r in read_jsonl(cache / "items.jsonl")]
    records, meta = JsonlFile(cache / "generations.jsonl", GENERATIONS).read_declared()
    out = scoring.score(run, items, records, meta, key=meta["key"], store_dir=cache,
                        ctx=ScoringContext(run.open_env(source, "score"), threads=threads))
    want = (entry["metric"], entry.get("subset"), entry.get("n_ctx"))
    for r in out.rows:
        if (r["metric"], r["subset"]) == want[:2] and (want[2] is None or r.get("n_ctx") == want[2]):
            return float(r["value"])
    raise DataError(f"anchor: {run.name} wrote no {want[0]!r} with subset {want[1]!r}"
                    + (f" at n_ctx {want[2]}" if want[2] else ""))


def reproduce(bench: Benchmark, entry: dict, cache_dir="resources/anchors") -> float:
    """Both steps in one process: the replies under ``cache_dir/<benchmark>``, then their figure."""
    return verdict(bench, entry, generate_replies(bench, entry, Path(cache_dir) / bench.name))


# -- the offline gates: llama.cpp's own tools as the anchor of perplexity and speed -------------
#
# With no published score to reproduce offline, the harness's perplexity and speed are anchored to
# llama.cpp's reference tools built from the same source (quantladder.llama_tools), on the family's
# reference rung on this card, with the same corpus, context, batch, threads and flash-attention
# setting. Perplexity is deterministic: |PPL_ours / PPL_llama-perplexity − 1| must be within
# `tolerance_pct` (0.1 %). Speed drifts on a shared vCPU (±10 % run to run), so llama-bench and the
# harness run in `rounds` interleaved rounds; each round gives the ratio of the two means, and the
# gate blocks only when the mean ratio is off by more than `tolerance_pct` (5 %) *beyond its own
# uncertainty*: |Δ| − t·se > tolerance, t the two-sided 95 % Student quantile for rounds − 1 degrees
# of freedom (docs/ladder.md). A real gap blocks; noise of the size this machine makes does not.

def tool_gates() -> dict[str, str]:
    """measure -> the llama.cpp tool its gate reproduces (each measure declares its own: ``tool_gate``)."""
    return {n: m.tool_gate for n, m in measures.declared().items() if m.tool_gate}


def tool_gate_settings(cfg: dict, measure: str) -> dict:
    """The gate of ``measure`` (one of tool_gates()): ``anchor_gates.<measure>`` with the schema's defaults
    (what validation fills in, filled here too for a config nobody validated)."""
    return schemas.filled(schemas.SCHEMA_PATH, cfg.get("anchor_gates"), "anchor_gates")[measure]


def tool_gate_enabled(cfg: dict, measure: str) -> bool:
    return measure in tool_gates() and bool(tool_gate_settings(cfg, measure)["enabled"])


def tool_gate_key(cfg: dict, family: str, measure: str) -> str:
    """What decides a tool gate's outcome: its settings, the measure's, the reference, the engine
    (``cfg`` validated: its defaults filled in)."""
    fam = cfg["families"][family]
    settings = gate_settings(cfg, measure)
    extra = {}
    if measure == "perplexity":
        extra["corpus"] = cfg["corpora"].get(settings.get("corpus"))
        extra["swa_full"] = True  # llama-perplexity runs with --swa-full (tool_gates.perplexity_command)
    return hash_obj({"gate": tool_gate_settings(cfg, measure), "settings": settings, **extra,
                     "family_source": fam["source"], "family_sha256": fam.get("sha256"),
                     "reference": fam["reference"], "threads": cfg["threads"],
                     "gpu_layers": cfg["gpu_layers"], "flash_attn": cfg["flash_attn"],
                     "llama_cpp_python": library_version(), "backend": library_backend(),
                     "harness": HARNESS_VERSION})[:16]


def judge_ppl(ours: float, theirs: float, tolerance_pct: float) -> dict:
    dev = 100.0 * (ours / theirs - 1.0)
    ok = abs(dev) <= tolerance_pct
    return {"status": "passed" if ok else "failed", "ours": ours, "theirs": theirs, "deviation_pct": dev,
            "tolerance_pct": tolerance_pct,
            "reason": None if ok else
            f"the harness's PPL {ours:.4f} differs from llama-perplexity's {theirs:.4f} by {dev:+.3f} % "
            f"(> {tolerance_pct} %) on the same reference rung, corpus and settings: the perplexity "
            "measure is wrong on this card"}


def judge_speed(ours_rounds: list[float], theirs_rounds: list[float], tolerance_pct: float, test: str,
                t: float | None = None) -> dict:
    """Per-round means of tokens/s on both sides (interleaved rounds) -> the gate's verdict. ``t``:
    how many standard errors the deviation may be off by chance (by default Student's two-sided 95 %
    quantile with n − 1 degrees of freedom)."""
    if len(ours_rounds) != len(theirs_rounds) or len(ours_rounds) < 2:
        raise QuantladderError(f"speed gate {test}: needs at least 2 paired rounds, got {len(ours_rounds)}")
    ratios = [o / r for o, r in zip(ours_rounds, theirs_rounds)]
    n = len(ratios)
    dev = 100.0 * (statistics.fmean(ratios) - 1.0)
    se = 100.0 * statistics.stdev(ratios) / n ** 0.5
    if t is None:
        from scipy.stats import t as student_t  # heavy: imported where used

        t = float(student_t.ppf(0.975, n - 1))
    beyond = abs(dev) - t * se
    ok = beyond <= tolerance_pct
    return {"test": test, "status": "passed" if ok else "failed", "deviation_pct": dev, "stderr_pct": se,
            "t": t, "rounds": n, "tolerance_pct": tolerance_pct, "ratios": ratios,
            "ours_tokens_per_s": ours_rounds, "theirs_tokens_per_s": theirs_rounds,
            "reason": None if ok else
            f"{test}: the harness is {dev:+.1f} ± {se:.1f} % (se, {n} interleaved rounds) off llama-bench, "
            f"beyond the ±{tolerance_pct} % tolerance even allowing {t:.2f} standard errors: the speed "
            "measure is wrong on this card"}


def summary(anchor: dict | None) -> dict | None:
    """What a point's manifest records of its gate: outcome, what it was anchored against, why."""
    if not anchor:
        return None
    keys = ("benchmark", "family", "status", "reason", "checked_at", "spec", "against", "tolerance_pct")
    out = {k: anchor[k] for k in keys if k in anchor}
    if "anchors" in anchor:  # published anchors: which models, which scores
        out["against"] = [{"model": (a.get("entry") or {}).get("model", {}).get("label"),
                           "published": a.get("published"), "reproduced": a.get("reproduced"),
                           "status": a.get("status")} for a in anchor["anchors"]]
    return out
