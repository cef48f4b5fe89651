"""RULER long-context retrieval (Hsieh et al. 2024, github.com/NVIDIA/RULER) at 4K-128K tokens.

One shape, as every benchmark here: items (``build``: RULER's generators in ``tasks``, haystacks in
``haystack``, QA data in ``qa``) -> prompts in the model's own chat template -> answers (the
package's generation loop, resumable) -> verdicts and scores (``score``: string_match_all /
string_match_part, per task and length, the average per length, the effective length). KV-cache
types come from the point, never from here.
"""

from __future__ import annotations

from ... import metrics, reasoning, schemas
from ...engine import Engine, EngineSettings
from ...errors import ConfigError
from ...gguf_meta import read_info
from ...io import hash_obj, sha256_file
from ...loops import repeated_ngram_share
from ...metrics import Metric
from ..base import Benchmark, Item
from . import build, haystack, score
from . import qa as ruler_qa
from .tasks import SYNTHETIC, TASKS, TaskSpec, task  # noqa: F401

# Bumped when item generation or scoring changes what a RULER figure means; it goes into the rules'
# params, because Snakemake does not track the modules a script imports.
# 2: a thinking family's prompts rendered with its reasoning settings at generation, its answer prefix
# left out where the reply may think, and its items' lengths keeping room for the thinking.
RULER_VERSION = "2"

def resolve_settings(section: dict | None) -> dict:
    """benchmarks.ruler with its schema's defaults filled (a null other than time_budget_s takes the
    default too); unknown task names fail here, naming the key."""
    given = {k: v for k, v in (section or {}).items() if v is not None or k == "time_budget_s"}
    s = schemas.filled(schemas.benchmark_schema_path("ruler"), given)
    for name in all_tasks(s):
        task(name)
    qa_needed = {TASKS[n].args["dataset"] for n in all_tasks(s) if TASKS[n].kind == "qa"}
    missing = sorted(d for d in qa_needed if d not in (s.get("qa") or {}))
    if missing:
        raise ConfigError(f"benchmarks.ruler.tasks asks for QA on {missing}: name their sources under "
                          f"benchmarks.ruler.qa.<dataset> (huggingface_hub or a local path)")
    return s


def all_tasks(settings: dict) -> list[str]:
    """Every task the settings run: the sweep's and the cells', in order."""
    names = list(settings["tasks"]) + [t for c in settings.get("cells") or [] for t in c["tasks"]]
    return list(dict.fromkeys(names))


metrics.declare(
    Metric("score", "%", "RULER score of a task (subset) at a length (n_ctx): string_match_all / _part, mean "
           "over its items", ("ruler",), higher_is_better=True, stderr="se", whole="none", paired="items"),
    Metric("score_avg", "%", "RULER's average over the tasks at a length (n_ctx)", ("ruler",),
           higher_is_better=True, stderr="se", headline_for=("ruler",), score_for=("ruler",), paired="items"),
    Metric("effective_length", "tokens", "longest length up to which every average clears the threshold "
           "(RULER: Llama-2-7B's 85.6 at 4K); 0 when the shortest fails", ("ruler",), higher_is_better=True),
)


class Ruler(Benchmark):
    name = "ruler"
    domain = "long context"
    description = "RULER long-context retrieval (niah, vt, cwe, fwe; qa with hub data) at lengths in the model's tokens"
    version = RULER_VERSION
    scorer_version = "ruler-score-1"
    per_family_items = True
    item_settings = ("tasks", "lengths", "samples", "cells", "seed", "cap_to_trained_context", "essay", "qa")
    generation_settings = ()
    scoring_settings = ("threshold",)
    # kv_types chooses which points run RULER (quantladder.config.kv_types), not what a point's figure is
    run_settings = Benchmark.run_settings + ("kv_types",)

    @classmethod
    def resolve(cls, section):
        return resolve_settings(section)

    def fetch_source(self, dest):
        """The texts items are made of: RULER's word lists, the essay haystack, QA data (hub)."""
        s = self.settings
        words = haystack.word_lists()
        needs_essay = any(TASKS[t].args.get("type_haystack") == "essay" for t in all_tasks(s))
        qa_files = {}
        for name in sorted({TASKS[t].args["dataset"] for t in all_tasks(s) if TASKS[t].kind == "qa"}):
            _, path = ruler_qa.load(name, s["qa"][name])
            qa_files[name] = {"source": s["qa"][name], "path": str(path), "sha256": sha256_file(path)}
        return {"name": "ruler", "version": RULER_VERSION, "word_source": words.source,
                "essay_source": s["essay"] if needs_essay else None, "qa": qa_files,
                "sha256": hash_obj({"words": words.source, "essay": s["essay"] if needs_essay else None,
                                 "qa": {k: v["sha256"] for k, v in qa_files.items()}})}

    def pinned_files(self, source):
        """The QA data (the word lists and the essay come with the installed packages)."""
        return {q["path"]: q["sha256"] for q in (source.get("qa") or {}).values()}

    def build_items(self, source, *, reference_gguf, family, threads=1, log=None):
        s = self.settings
        info = read_info(reference_gguf)
        blocks, facts = build.plan_blocks(s, info.n_ctx_train)
        if facts["lengths_note"] and log:
            log.warning("ruler: %s", facts["lengths_note"])
        words = haystack.word_lists()
        essay = haystack.essay_words(haystack.load_text_source(s["essay"])) if source.get("essay_source") else None
        qa_data = {name: ruler_qa.load(name, rec["source"])[0] for name, rec in source.get("qa", {}).items()}
        chat = bool(schemas.family_settings(family)["chat"])
        # Only the tokenizer and chat template are used: a small context, no GPU.
        with Engine(reference_gguf, EngineSettings(n_ctx=512, n_gpu_layers=0, n_threads=threads)) as eng:
            if chat:  # the family's own reasoning keys (families.<f>.reasoning) for the thinking's room
                eng.reasoning = reasoning.setup_for({"generation": {}, "families": {"(ruler items)": family}},
                                                    "(ruler items)", eng.chat_template, "benchmarks.ruler items")
            raw = build.build_items(fmt=build.PromptFormat(eng, chat=chat), blocks=blocks, seed=s["seed"],
                                    words=words, essay=essay, qa=qa_data, log=log)
        items = [Item(id=r["item_id"], subset=r["task"], n_ctx=r["length"],
                      data={k: r[k] for k in ("prompt", "tokens_to_generate", "task", "kind", "length", "index",
                                              "seed", "size", "n_prompt_tokens", "needles", "meta", "text",
                                              "answer_prefix", "chat", "thinking_room")},
                      answer={"answers": r["answers"], "metric": r["metric"]}) for r in raw]
        return items, {**facts, "n_ctx_train": info.n_ctx_train, "chat": chat}

    def max_n_ctx(self, n_ctx_train=None):
        s = self.settings
        asked = list(s["lengths"]) + [c["length"] for c in s.get("cells") or []]
        known = [int(x) for x in asked if x != build.TRAINED]
        if build.TRAINED in asked and n_ctx_train:
            known.append(int(n_ctx_train))
        return max(known, default=int(n_ctx_train or 0) or 4096)

    def drive(self, item, engine, env):
        """The item's prompt rendered by the job's engine, with the family's reasoning settings (its
        setup: the kwargs, the reply's plan from the rendered turn), as every other exam renders; the
        item's own ``prompt`` (made with the family's own keys, to fit its length) for a base model."""
        d = item.data
        prompt = build.chat_prompt(engine, d["text"], d["answer_prefix"]) if d.get("chat") else d["prompt"]
        gen = yield from self.ask(engine, prompt, d["tokens_to_generate"])
        return {**gen.record(), "loop_share": round(repeated_ngram_share(gen.text), 4)}

    def verdicts(self, items, generations, ctx):
        todo = [{"item_id": it.id, "task": it.subset, "length": it.n_ctx, **it.answer} for it in items
                if it.id in generations]
        return score.verdicts(todo, list(generations.values()))

    def no_reply_verdict(self, item, ctx):
        return {"score": 0.0}  # a score on every verdict: the paired comparison stays on scores

    def metric_rows(self, verdicts, items):
        rows, _ = score.aggregate(verdicts, threshold=self.settings["threshold"])
        return rows
