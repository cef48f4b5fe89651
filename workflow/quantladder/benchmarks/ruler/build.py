"""Items: RULER instances rendered in the model's own prompt format and fitted to each length.

A length counts the model's own tokens: prompt (chat template + task text + answer prefix) plus
the task's tokens to generate must fit it (RULER: ``max_seq_length`` "including all input tokens and
generated tokens"). RULER grows the haystack in fixed steps until it overflows; here the haystack
size is bisected, once per (task, length) on a probe instance, and each item then steps down from
that size until it fits (RULER's per-sample fallback), so every item provably fits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from ... import schemas
from ...errors import DataError
from ...io import append_jsonl, hash_obj, sha256_file, write_json
from . import tasks as T

TRAINED = "trained"  # a length: the model's trained context (GGUF <arch>.context_length), read when items are made


def chat_prompt(engine, text: str, answer_prefix: str) -> str:
    """RULER's prompt in the family's chat template, as ``engine`` renders it (Engine.chat_prompt: with
    the family's reasoning kwargs where the engine carries its setup): the task text as the user turn,
    and RULER's answer prefix after the assistant tag, as RULER appends it after its model template
    (scripts/data/prepare.py). A thinking family's reply may think first (its replies are split and
    its generation prompt holds no closed thinking block): there the answer prefix would be written
    before or inside the thinking, so it is left out, and the answer (after the thinking) is what
    RULER's match reads (docs/thinking.md, "RULER")."""
    rendered = engine.chat_prompt([{"role": "user", "content": text}])
    plan = engine.reply_plan(rendered)
    if plan is not None and not plan.thinking_in_prompt:
        return rendered
    return rendered + answer_prefix


def thinking_room(plan) -> int:
    """Tokens an item's length keeps for the thinking before the answer (a ReplyPlan, or None for a
    family whose replies are not split): at most the start tag the reply writes, the budget and the
    forced end (message + end tag); none where the thinking is closed in the prompt. An unlimited
    budget (-1) keeps none: the item's length is its cap, and a thinking that runs into it leaves no
    answer (``thinking_cap``)."""
    if plan is None or plan.thinking_in_prompt or plan.budget < 0:
        return 0
    return (0 if plan.started_in_thinking else len(plan.start)) + plan.budget + len(plan.forced)


@dataclass
class PromptFormat:
    """Task text -> the prompt the model sees, and its length in the model's tokens.

    ``chat``: the task text is the user turn of the GGUF's own chat template (:func:`chat_prompt`,
    with the family's reasoning kwargs where the engine carries its setup). Without chat the text is
    used raw (RULER's 'base' template).
    """
    engine: object  # quantladder.engine.Engine
    chat: bool = True

    def render(self, text: str, answer_prefix: str) -> str:
        if self.chat:
            return chat_prompt(self.engine, text, answer_prefix)
        return text + answer_prefix

    def thinking_room(self) -> int:
        """:func:`thinking_room` of this family's replies (0 without chat or a split)."""
        if not self.chat:
            return 0
        return thinking_room(self.engine.reply_plan(self.engine.chat_prompt([{"role": "user", "content": "x"}])))

    def tokens(self, prompt: str) -> list[int]:
        """Exactly the tokens generation feeds (BOS added unless the template already starts with it)."""
        return list(self.engine.prompt_tokens(prompt))

    def n_tokens(self, prompt: str) -> int:
        return len(self.tokens(prompt))

    def raw_tokens(self, text: str) -> int:
        return len(self.engine.tokenize(text, add_bos=False))


def item_seed(seed: int, task: str, length: int, index: int) -> str:
    # A string seed: random.Random hashes it with sha512, stable across Python runs and versions.
    return f"ruler:{seed}:{task}:{length}:{index}"


def make_instance(spec: T.TaskSpec, size: int, seed: str, env: T.Env, index: int = 0) -> T.Instance:
    rng = random.Random(seed)
    if spec.kind == "qa":
        return T.make_qa(spec, size, rng, env, index=index)
    return T.GENERATORS[spec.kind](spec, size, rng, env)


def fit_size(fits: Callable[[int], bool], lo: int, hi_cap: int | None) -> int | None:
    """Largest size in [lo, hi_cap] with fits(size) (fits is monotone: bigger never fits better).

    Doubles from lo until a size overflows (or the cap), then bisects. None if lo does not fit.
    """
    if not fits(lo):
        return None
    good, bad = lo, None
    probe = max(lo * 2, lo + 1)
    while bad is None:
        if hi_cap is not None and probe >= hi_cap:
            probe = hi_cap
            if fits(probe):
                return probe
            bad = probe
            break
        if fits(probe):
            good, probe = probe, probe * 2
        else:
            bad = probe
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def build_task_length(spec: T.TaskSpec, length: int, n_samples: int, seed: int, env: T.Env,
                      fmt: PromptFormat) -> list[dict]:
    """n_samples items of one task at one length, each fitting the length: the prompt, the thinking's
    room (:func:`thinking_room`) and the tokens to generate."""
    ttg = spec.tokens_to_generate
    room = fmt.thinking_room()
    env.length = length

    def n_prompt(inst: T.Instance) -> int:
        return fmt.n_tokens(fmt.render(inst.text, inst.answer_prefix))

    probe_seed = item_seed(seed, spec.name, length, -1)
    size = fit_size(lambda s: n_prompt(make_instance(spec, s, probe_seed, env)) + room + ttg <= length,
                    spec.min_size, T.max_size(spec, env))
    if size is None:
        raise DataError(f"ruler task {spec.name}: even the smallest haystack does not fit {length} tokens "
                        f"with {ttg} to generate" + (f" and {room} to think" if room else "")
                        + " (benchmarks.ruler.lengths)")
    step = max(1, size // 100)
    items = []
    for i in range(n_samples):
        s = size
        sd = item_seed(seed, spec.name, length, i)
        while True:
            inst = make_instance(spec, s, sd, env, index=i)
            prompt = fmt.render(inst.text, inst.answer_prefix)
            n = fmt.n_tokens(prompt)
            if n + room + ttg <= length or s <= spec.min_size:
                break
            s = max(spec.min_size, s - step)
        if n + room + ttg > length:
            raise DataError(f"ruler task {spec.name}, item {i}: {n}+{room}+{ttg} tokens exceed {length}")
        base = prompt.find(inst.text)  # where the task text sits inside the rendered prompt
        needles = [{**nd, "offset": base + nd["offset"]} for nd in inst.needles] if base >= 0 else []
        items.append({
            "item_id": f"{spec.name}-{length}-{i:04d}", "task": spec.name, "kind": spec.kind, "length": length,
            "index": i, "seed": sd, "size": s, "prompt": prompt, "answers": inst.answers,
            "text": inst.text, "answer_prefix": inst.answer_prefix, "chat": fmt.chat, "thinking_room": room,
            "tokens_to_generate": ttg, "metric": spec.metric,
            "n_prompt_tokens": n, "needles": needles, "meta": inst.meta,
        })
    return items


def build_items(*, fmt: PromptFormat, blocks: list[tuple[int, str, int]], seed: int, words,
                essay: list[str] | None, qa: dict | None = None, out_path=None, log=None) -> list[dict]:
    """All items of the (length, task, samples) blocks (:func:`plan_blocks`), in their order. With
    out_path, each block is appended as made."""
    env = T.Env(words=words, essay=essay, length=0, qa=qa, count_tokens=fmt.raw_tokens)
    everything = []
    for length, name, n_samples in blocks:
        block = build_task_length(T.task(name), length, n_samples, seed, env, fmt)
        if out_path is not None:
            for it in block:
                append_jsonl(out_path, it)
        if log:
            log.info("ruler items: %s at %d tokens: %d items, haystack size %d, prompts of %d-%d tokens",
                     name, length, len(block), block[0]["size"], min(b["n_prompt_tokens"] for b in block),
                     max(b["n_prompt_tokens"] for b in block))
        everything += block
    return everything


def resolve_length(length, n_ctx_train: int, where: str = "benchmarks.ruler.lengths") -> int:
    """A length in tokens; ``trained`` is the model's trained context, read from its GGUF."""
    if length == TRAINED:
        if not n_ctx_train:
            raise DataError(f"{where}: 'trained' asks for the model's trained context, but its GGUF records "
                            "none (<arch>.context_length); give the length in tokens")
        return int(n_ctx_train)
    return int(length)


def plan_blocks(settings: dict, n_ctx_train: int) -> tuple[list[tuple[int, str, int]], dict]:
    """The (length, task, samples) blocks the settings ask for: every task at every ``lengths`` entry
    with ``samples`` items, then each of ``cells`` (its own length, tasks and samples: an 8K cell of
    one task beside a wider short sweep). Lengths above the trained context are dropped (:func:`cap_lengths`).
    Returns the blocks, ordered by length, and the facts for items.json (lengths kept, dropped, a note).
    ``settings`` may be partial (a test's, a cell without ``samples``): the schema's defaults fill it."""
    settings = schemas.filled(schemas.benchmark_schema_path("ruler"), settings)
    wanted = [(resolve_length(x, n_ctx_train), t, int(settings["samples"]), "benchmarks.ruler.lengths")
              for x in settings["lengths"] for t in settings["tasks"]]
    for i, cell in enumerate(settings.get("cells") or []):
        where = f"benchmarks.ruler.cells[{i}]"
        wanted += [(resolve_length(cell["length"], n_ctx_train, where), t, int(cell["samples"]), where)
                   for t in cell["tasks"]]
    seen: dict[tuple[int, str], str] = {}
    for length, t, _, where in wanted:
        if (length, t) in seen:
            raise DataError(f"{where}: {t} at {length} tokens is asked for twice (also by {seen[(length, t)]}); "
                            "each (task, length) is one block of items")
        seen[(length, t)] = where
    kept, dropped, note = cap_lengths([length for length, *_ in wanted], n_ctx_train,
                                      settings["cap_to_trained_context"])
    order = {length: i for i, length in enumerate(kept)}
    blocks = sorted(((length, t, n) for length, t, n, _ in wanted if length in order),
                    key=lambda b: order[b[0]])  # stable: within a length, the config's order
    return blocks, {"lengths": kept, "lengths_dropped": dropped, "lengths_note": note}


def cap_lengths(lengths: list[int], n_ctx_train: int, cap: bool = True) -> tuple[list[int], list[int], str | None]:
    """Lengths beyond the trained context are dropped (llama.cpp would have to stretch RoPE past
    what the model learned); the note says which and why."""
    lengths = sorted(set(int(x) for x in lengths))
    if not cap or not n_ctx_train:
        return lengths, [], None
    kept = [x for x in lengths if x <= n_ctx_train]
    dropped = [x for x in lengths if x > n_ctx_train]
    note = (f"lengths {dropped} exceed the model's trained context ({n_ctx_train} tokens) and were not run"
            if dropped else None)
    return kept, dropped, note


def write_items_meta(path, items_path, meta: dict) -> dict:
    """items.json beside items.jsonl: the settings that made them and the sha256 that enters manifests."""
    doc = {**meta, "items_file": str(items_path), "sha256": sha256_file(items_path), "settings_hash": hash_obj(meta)}
    write_json(path, doc)
    return doc
