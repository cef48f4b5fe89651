"""RULER for a thinking family (issue 43): its prompts rendered with the family's reasoning settings, as
every other exam's, and its answer scored apart from its thinking.

The family is the default config's offline thinking family, ``smollm2-thinking``: the package's
SmolLM2-135M-Instruct with llama.cpp's vendored QwQ-32B template written into a copy (the copy
``acquire_source`` makes), ``reasoning: on`` with a budget of 4 thinking tokens. QwQ's generation
prompt opens ``<think>`` itself, so RULER's answer prefix cannot follow the assistant tag there (it
would sit inside the thinking): it is left out, and each item's length keeps room for the thinking.
Real items (RULER's generators, the model's tokenizer), real generation (the engine's budget forcing),
the real score stage.
"""

from __future__ import annotations

import pytest

from quantladder import benchmarks, config as qconfig, models, reasoning as R, scoring
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.ruler import build, score
from quantladder.engine import Engine, EngineSettings

FAMILY = "smollm2-thinking"
LENGTH = 512


@pytest.fixture(scope="module")
def cfg(repo_root) -> dict:
    return qconfig.load(repo_root / "config" / "config.yaml")


@pytest.fixture(scope="module")
def thinking_gguf(cfg, smollm_source, tmp_path_factory):
    """The family's source copy as acquire_source writes it: its configured vendored template."""
    fam = cfg["families"][FAMILY]
    assert fam["reasoning"] == {"reasoning": "on", "reasoning_budget": 4}
    text, _ = models.chat_template_text(fam["chat_template"], f"families.{FAMILY}.chat_template")
    dst = tmp_path_factory.mktemp("thinking") / "source.gguf"
    models.write_chat_template(smollm_source, dst, text)
    return dst


@pytest.fixture(scope="module")
def bench():
    return benchmarks.create("ruler", {"enabled": True, "tasks": ["niah_single_1", "niah_single_2"],
                                       "lengths": [LENGTH], "samples": 2})


@pytest.fixture(scope="module")
def made(bench, cfg, thinking_gguf, tmp_path_factory):
    src = bench.fetch_source(str(tmp_path_factory.mktemp("ruler")))
    items, _ = bench.build_items(src, reference_gguf=str(thinking_gguf), family=cfg["families"][FAMILY])
    return src, items


def run(bench, src, items, gguf, setup) -> list[dict]:
    """Each item through the benchmark's real driver on the real engine (the family's setup on it, as
    the generate job sets it), with the request each driver sent."""
    env = bench.open_env(src, "generate")
    recs: dict[int, dict] = {}
    with Engine(str(gguf), EngineSettings(n_ctx=LENGTH, n_parallel=1, n_threads=2)) as eng:
        eng.reasoning = setup
        sent = []

        def driver(it):
            d = bench.drive(it, eng, env)
            req = next(d)
            sent.append(eng.detokenize_bytes(list(req.prompt), special=True).decode())
            try:
                while True:
                    req = d.send((yield req))
            except StopIteration as stop:
                return stop.value

        eng.run([driver(it) for it in items], lambda i, rec: recs.__setitem__(i, rec))
    return [{**recs[i], "item_id": it.id, "subset": it.subset, "n_ctx": bench.n_ctx(it), "prompt": sent[i]}
            for i, it in enumerate(items)]


def test_items_are_rendered_with_the_familys_settings_and_keep_room_to_think(made, smollm_q8, bench):
    src, items = made
    assert len(items) == 4
    for it in items:
        d = it.data
        # QwQ's generation prompt opens the thinking: the answer prefix is not written into it
        assert d["prompt"].endswith("<|im_start|>assistant\n<think>\n") and d["answer_prefix"]
        assert not d["prompt"].endswith(d["answer_prefix"]) and d["chat"]
        # room for the budget's 4 tokens and the forced end ("</think>": 3 ordinary tokens in this copy)
        assert d["thinking_room"] == 4 + 3
        assert d["n_prompt_tokens"] + d["thinking_room"] + d["tokens_to_generate"] <= LENGTH
    # a family that cannot think (SmolLM2's own template): RULER's prompt as before, prefix after the tag
    plain, _ = bench.build_items(src, reference_gguf=str(smollm_q8), family={"chat": True})
    for it in plain:
        assert it.data["prompt"].endswith("<|im_start|>assistant\n" + it.data["answer_prefix"])
        assert it.data["thinking_room"] == 0


def test_a_thinking_familys_reply_is_split_bounded_and_its_answer_scored(made, bench, cfg, thinking_gguf, tmp_path):
    src, items = made
    setup = R.setup_for(cfg, FAMILY, models.chat_template_text(cfg["families"][FAMILY]["chat_template"], "t")[0])
    recs = run(bench, src, items, thinking_gguf, setup)
    for it, rec in zip(items, recs):
        assert rec["prompt"] == it.data["prompt"]  # rendered at generation with the family's kwargs, as made
        assert rec["reasoning_format"] == "think" and rec["thinking_budget"] == 4
        # SmolLM2 does not close its thinking: the engine forces the end after the budget
        assert rec["thinking_end"] == "budget" and rec["thinking_closed"] and rec["thinking_forced"]
        assert rec["answer_tokens"] <= it.data["tokens_to_generate"]
        assert rec["n_prompt_tokens"] + rec["n_gen_tokens"] <= LENGTH
    ctx = ScoringContext(bench.open_env(src, "score"), threads=1)
    out = scoring.score(bench, items, recs, {"generated": len(recs)}, key="k", store_dir=tmp_path, ctx=ctx)
    for it, rec, v in zip(items, recs, out.verdicts):
        # the verdict is RULER's match over the answer alone (the thinking is not read)
        assert v["score"] == pytest.approx(score.string_match_all(rec["answer"], it.answer["answers"]))


def test_the_job_renders_with_its_own_settings(made, bench, cfg, thinking_gguf):
    """The generate job's setup decides the prompt: the same items with reasoning off (QwQ's template
    closes the block in the generation prompt) get RULER's answer prefix after it, and no thinking."""
    src, items = made
    fams = cfg["families"]
    off = {**cfg, "families": {**fams, FAMILY: {**fams[FAMILY], "reasoning": {"reasoning": "off"}}}}
    template = models.chat_template_text(cfg["families"][FAMILY]["chat_template"], "t")[0]
    recs = run(bench, src, items[:1], thinking_gguf, R.setup_for(off, FAMILY, template))
    prefix = items[0].data["answer_prefix"]
    assert recs[0]["prompt"] == items[0].data["prompt"] + "</think>" + prefix
    assert recs[0]["thinking_end"] is None and recs[0]["thinking_tokens"] == 0
    assert recs[0]["answer"] == recs[0]["text"]
    assert build.thinking_room(None) == 0


def test_the_items_key_follows_the_reasoning_the_items_are_fitted_to(cfg):
    """A thinking family's RULER items keep room for its thinking, so the budget its replies are made with
    (the run's generation keys, the family's own over them) is in its items key: a change builds them again
    rather than leaving items fitted to the old budget; a family that cannot think keeps its key."""
    import copy

    from quantladder import manifest

    def key(c, fam):
        return manifest.items_key(c, fam, "ruler")

    base = key(cfg, FAMILY)
    other = copy.deepcopy(cfg)
    other["families"][FAMILY]["reasoning"]["reasoning_budget"] = 64
    assert key(other, FAMILY) != base
    assert R.items_reasoning(other, FAMILY) == {"reasoning": "on", "reasoning_budget": 64}
    # the run's budget reaches a family that sets none of its own; the family's own wins where it sets one
    run = copy.deepcopy(cfg)
    del run["families"][FAMILY]["reasoning"]["reasoning_budget"]
    run["generation"]["reasoning_budget"] = 16
    assert R.items_reasoning(run, FAMILY) == {"reasoning": "on", "reasoning_budget": 16}
    assert key(run, FAMILY) not in (base, key(other, FAMILY))
    plain = "smollm2-135m-instruct"
    assert R.items_reasoning(cfg, plain) == {} and key(other, plain) == key(cfg, plain)
