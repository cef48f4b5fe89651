"""Tool calling at long context: BFCL items asked behind a RULER-style haystack.

Each single-turn BFCL item (``benchmarks.bfcl``'s data, prompt and AST checker) is asked again at
each length with essay text (RULER's essay haystack, the source of its niah_single_2) in the user's
turn before the question, as much as fits the length in the model's own tokens: chat template,
BFCL's system prompt with the functions, haystack, question, and ``max_new_tokens`` to generate. The
reply is scored by BFCL's own checker, so the only change from ``bfcl`` is the context in front.

Why: quantized weights lose most on long inputs (Mekala et al. 2025, arXiv 2505.20276: up to 59 %
at 64K tokens for 4-bit, about 0.8 % for 8-bit), and tool calling degrades with context for every
quant tried (the tool-eval-bench community study); ``bfcl`` alone asks every question at its own
few hundred tokens.
"""

from __future__ import annotations

import random

from ... import metrics
from ...engine import Engine, EngineSettings
from ...errors import ConfigError
from ...gguf_meta import read_info
from ...io import hash_obj
from ..base import Item
from ..bfcl import BFCL, PROMPT_VERSION, data
from ..ruler import build as ruler_build
from ..ruler import haystack

HAYSTACK_VERSION = "bfcl-haystack-1"
WHERE = "benchmarks.bfcl_haystack"


class BFCLHaystack(BFCL):
    name = "bfcl_haystack"
    description = ("BFCL single-turn items behind a RULER-style essay haystack at each length (the trained "
                   "context included), scored by BFCL's AST checker")
    version = f"{PROMPT_VERSION}+{HAYSTACK_VERSION}"
    per_family_items = True  # the haystack is fitted with the family's tokenizer and chat template
    # the haystack's lengths, seed and essay choose the items: they are in the items key
    item_settings = ("source", "categories", "limit", "limits", "seed", "haystack")
    generation_settings = ("max_new_tokens",)  # each item's context is its length
    scoring_settings = ()  # single-turn only: nothing runs in the sandbox

    @classmethod
    def resolve(cls, section):
        s = super().resolve(section)  # the schema fills a partial `haystack:` too
        multi = [c for c in s["categories"] if c in data.MULTI_TURN]
        if multi:
            raise ConfigError(f"{WHERE}.categories: {multi} are multi-turn; the haystack is put before a "
                              "single question (their own long-context category is bfcl's multi_turn_long_context)")
        return s

    def fetch_source(self, dest):
        rec = super().fetch_source(dest)
        # the essay's origin is part of the data the items are made of
        return {**rec, "essay_source": self.settings["haystack"]["essay"],
                "sha256": hash_obj({"bfcl": rec["sha256"], "essay": self.settings["haystack"]["essay"]})}

    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        s, hs = self.settings, self.settings["haystack"]
        info = read_info(reference_gguf)
        lengths = [ruler_build.resolve_length(x, info.n_ctx_train, f"{WHERE}.haystack.lengths") for x in hs["lengths"]]
        lengths, dropped, note = ruler_build.cap_lengths(lengths, info.n_ctx_train)
        if note and log:
            log.warning("bfcl_haystack: %s", note)
        words = haystack.essay_words(haystack.load_text_source(hs["essay"]))
        raw = data.load_items(source, s["categories"], s["limit"], s["limits"], s["seed"])
        items, too_long = [], []
        # Only the tokenizer and chat template are used: a small context, no GPU.
        with Engine(reference_gguf, EngineSettings(n_ctx=512, n_gpu_layers=0, n_threads=threads)) as eng:
            for length in lengths:
                for it in raw:
                    made = self._fit(eng, source["root"], it, length, words, hs["seed"])
                    if made is None:
                        too_long.append(f"{it['id']}@{length}")
                        continue
                    items.append(made)
                if log:
                    got = [i.data["n_prompt_tokens"] for i in items if i.n_ctx == length]
                    log.info("bfcl_haystack: %d items at %d tokens, prompts of %s tokens", len(got), length,
                             f"{min(got)}-{max(got)}" if got else "-")
        return items, {"data_version": source["version"], "data_sha256": source["sha256"], "lengths": lengths,
                       "lengths_dropped": dropped, "lengths_note": note, "n_ctx_train": info.n_ctx_train,
                       "items_too_long": too_long}

    def _fit(self, eng, root, it: dict, length: int, words: list[str], seed: int) -> Item | None:
        """The item at ``length``: the most essay words (from a seeded start, cycled) that fit with
        the reply's budget; None when the item alone does not fit (it is listed in items.json)."""
        item_id = f"{it['id']}@{length}"
        start = random.Random(f"bfcl_haystack:{seed}:{it['id']}:{length}").randrange(len(words))
        body = {k: v for k, v in it.items() if k != "ground_truth"}
        budget = int(self.settings["max_new_tokens"])

        def text(n: int) -> str:
            return " ".join(words[(start + i) % len(words)] for i in range(n))

        def n_tokens(n: int) -> int:
            prompt = eng.chat_prompt(with_haystack(self.messages(root, body), text(n)))
            return len(eng.prompt_tokens(prompt))

        size = ruler_build.fit_size(lambda n: n_tokens(n) + budget <= length, 1, None)
        if size is None:
            return None
        answer = {"ground_truth": it["ground_truth"]} if "ground_truth" in it else {}
        return Item(id=item_id, subset=it["category"], n_ctx=length,
                    data={**body, "id": item_id, "bfcl_id": it["id"], "haystack": text(size),
                          "haystack_words": size, "haystack_start": start, "n_prompt_tokens": n_tokens(size)},
                    answer=answer)

    def max_n_ctx(self, n_ctx_train=None):
        asked = self.settings["haystack"]["lengths"]
        known = [int(x) for x in asked if x != ruler_build.TRAINED]
        if ruler_build.TRAINED in asked and n_ctx_train:
            known.append(int(n_ctx_train))
        return max(known, default=int(n_ctx_train or 0) or 4096)

    def messages(self, root, data_: dict) -> list[dict]:
        msgs = super().messages(root, data_)
        return with_haystack(msgs, data_["haystack"]) if "haystack" in data_ else msgs

    # -- scoring: BFCL's checker per item (BFCL.verdicts); figures per length ------------------
    def item_weights(self, verdicts):
        return None  # each length's accuracy is the plain mean of its items

    def metric_rows(self, verdicts, items):
        rows = []
        for length in sorted({int(v["n_ctx"]) for v in verdicts}):
            at = [v for v in verdicts if int(v["n_ctx"]) == length]
            for cat in dict.fromkeys(v["subset"] for v in at):
                rows.append(_share_row("accuracy", [v["correct"] for v in at if v["subset"] == cat], cat, length))
            rows.append(_share_row("accuracy", [v["correct"] for v in at], None, length))
            rows.append(_share_row("parse_failure_rate", [v.get("parse_failed") for v in at], None, length))
        return rows


def with_haystack(messages: list[dict], text: str) -> list[dict]:
    """The messages with the haystack before the question: prepended to the last user message."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] = f"{text}\n\n{m['content']}"
            return out
    raise ConfigError("bfcl_haystack: an item without a user message has no question to put the haystack before")


def _share_row(metric: str, flags: list, subset: str | None, n_ctx: int) -> dict:
    n = len(flags)
    p = sum(bool(f) for f in flags) / n
    return metrics.row(metric, 100 * p, stderr=100 * (p * (1 - p) / n) ** 0.5, n=n, subset=subset, n_ctx=n_ctx)
