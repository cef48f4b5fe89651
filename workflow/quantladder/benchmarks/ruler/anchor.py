"""Reproduce a RULER anchor (config/anchors.yaml): a published average at one length.

RULER's README table reports, per model and length, the mean over its 13 tasks (the 11 synthetic
ones plus qa_1 / qa_2). The gate reruns exactly that on this card with the anchor's GGUF: items in
the anchor model's own tokens, f16 KV cache, greedy; resumable under resources/ruler/anchor/.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ...engine import Engine, EngineSettings
from ...errors import ConfigError
from ...gguf_meta import read_info
from ...io import hash_obj, read_jsonl
from ...models import resolve_source
from . import DEFAULTS, TASKS, resolve_settings
from . import build, haystack
from . import qa as ruler_qa
from . import run as ruler_run
from . import score as ruler_score

log = logging.getLogger("quantladder.ruler.anchor")


def anchor_score(entry: dict) -> float:
    """The reproduced figure for ``entry['metric']`` ('score_avg', or 'score' with a task subset)
    at ``entry['n_ctx']``. An unreachable model or dataset raises a QuantladderError (unanchored)."""
    n_ctx = int(entry.get("n_ctx", 4096))
    s = resolve_settings({**DEFAULTS, "tasks": list(TASKS), **entry.get("settings", {}), "lengths": [n_ctx]})
    model = Path(resolve_source(entry["model"]))
    info = read_info(model)
    if info.n_ctx_train and n_ctx > info.n_ctx_train:
        raise ConfigError(f"anchor {entry['model'].get('label', model.name)}: n_ctx {n_ctx} exceeds its trained "
                          f"context {info.n_ctx_train}")
    cache = Path("resources/ruler/anchor") / hash_obj({"model": entry["model"], "settings": s})[:16]
    cache.mkdir(parents=True, exist_ok=True)
    qa = {}
    for name in sorted({TASKS[t].args["dataset"] for t in s["tasks"] if TASKS[t].kind == "qa"}):
        qa[name], _ = ruler_qa.load(name, s["qa"][name])
    needs_essay = any(TASKS[t].args.get("type_haystack") == "essay" for t in s["tasks"])
    essay = haystack.essay_words(haystack.load_text_source(s["essay"])) if needs_essay else None
    with Engine(str(model), EngineSettings(n_ctx=512, n_gpu_layers=0)) as eng:
        items = build.build_items(fmt=build.PromptFormat(eng), tasks=s["tasks"], lengths=[n_ctx],
                                  n_samples=s["samples"], seed=s["seed"], words=haystack.word_lists(),
                                  essay=essay, qa=qa, log=log)
    gpu_layers = int(entry.get("gpu_layers", 999))
    gens_path = cache / "generations.jsonl"
    ruler_run.generate(items, str(model), lambda n: EngineSettings(n_ctx=n, kv="f16", n_gpu_layers=gpu_layers),
                       gens_path, log=log)
    rows, _ = ruler_score.aggregate(ruler_run.verdicts(items, read_jsonl(gens_path)), threshold=s["threshold"])
    for r in rows:
        if r["metric"] == entry["metric"] and r["n_ctx"] == n_ctx and r["subset"] == entry.get("subset"):
            return float(r["value"])
    raise ConfigError(f"anchor: RULER writes no {entry['metric']!r} (subset {entry.get('subset')!r}) at {n_ctx}")
