"""Models that think, in the real engine (issue 43, deliverables 1 and 3): a SmolLM2 copy made into a
thinking family (QwQ-32B's vendored chat template, which opens ``<think>`` in the generation prompt,
written into it, and two of its unused control tokens made the user-defined tokens ``<think>`` /
``</think>``, as a Qwen vocabulary has them), decoded by the real engine: the end of the thinking
forced after exactly the budget's tokens (with the optional message), the answer's own budget, the
stop strings on the answer only, the hard cap of an unlimited thinking (the context), ``reasoning:
off``, and a family that cannot think decoded byte for byte as without the settings. Whether SmolLM2
closes a thinking block is its own doing; the forcing is the engine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantladder import reasoning as R
from quantladder.benchmarks.base import Benchmark
from quantladder.engine import Engine, EngineSettings
from test_reasoning import vendored_templates  # noqa: F401  (llama.cpp's templates from the pinned sdist)

# SmolLM2's <jupyter_text> and <jupyter_code> (control tokens), renamed: after <jupyter_text> the
# model writes text (after <repo_name> it ends the reply at once), so its thinking has tokens to count
THINK, END = 12, 13
QUESTION = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def thinking_copy(src: Path, dst: Path, template: str) -> Path:
    """A copy of a GGUF with another chat template and tokens 12, 13 the user-defined ``<think>``, ``</think>``
    (the tensors' bytes as they are: tests/provenance_util.py)."""
    import gguf
    import provenance_util

    def tokens(v):
        v = list(v)
        v[THINK], v[END] = "<think>", "</think>"
        return v

    def token_types(v):  # user-defined, as Qwen's: written in the reply's text
        v = list(v)
        v[THINK] = v[END] = int(gguf.TokenType.USER_DEFINED)
        return v

    return provenance_util.mutate(src, dst, {"tokenizer.chat_template": template, "tokenizer.ggml.tokens": tokens,
                                             "tokenizer.ggml.token_type": token_types})


@pytest.fixture(scope="module")
def thinking_gguf(smollm_source, vendored_templates, tmp_path_factory) -> Path:
    return thinking_copy(smollm_source, tmp_path_factory.mktemp("think") / "smollm2-qwq.gguf",
                         vendored_templates["Qwen-QwQ-32B"])


def cfg(**generation) -> dict:
    return {"generation": generation, "families": {"fam": {"source": {"path": "x"}}}}


def ask(eng: Engine, setup: R.Setup | None, max_tokens: int, stop=(), messages=QUESTION):
    """One item through the benchmarks' own request path (Benchmark.ask): the Generation it got."""
    eng.reasoning = setup
    out = []

    def driver():
        gen = yield from Benchmark.ask(eng, eng.chat_prompt(messages), max_tokens, stop)
        return gen

    eng.run([driver()], lambda i, g: out.append(g))
    return out[0]


@pytest.fixture(scope="module")
def eng(thinking_gguf):
    with Engine(str(thinking_gguf), EngineSettings(n_ctx=160, n_threads=1)) as e:
        yield e


def setup(eng, **generation) -> R.Setup:
    s = R.setup_for(cfg(**generation), "fam", eng.chat_template)
    assert s.format.name == "think" and s.splits
    return s


def test_the_copy_thinks_in_special_tokens(eng):
    assert eng.tokenize("<think>\n</think>", add_bos=False, special=True)[::2] == [THINK, END]
    prompt = eng.chat_prompt(QUESTION, template_kwargs=R.template_kwargs(R.FORMATS["think"], R.Settings("on")))
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize("budget", [1, 2, 6])
def test_the_end_is_forced_after_exactly_the_budget(eng, budget):
    """The generation prompt opens ``<think>\\n``: its ``\\n`` is the budget's first token (llama.cpp
    feeds the generation prompt to the sampler), so the reply thinks ``budget - 1`` free tokens, the
    greedy ones of an unlimited run, then the end tag is forced; the answer follows under its own budget."""
    free = ask(eng, setup(eng, reasoning="on"), 8)
    g = ask(eng, setup(eng, reasoning="on", reasoning_budget=budget), 8)
    n = budget - 1
    assert list(g.tokens[:n]) == list(free.tokens[:n])
    assert g.tokens[n] == END and END not in free.tokens[:n + 1]
    r = g.reasoning
    assert r["thinking_forced"] and r["thinking_closed"] and not r["thinking_self_closed"]
    assert r["thinking_end"] == "budget" and r["thinking_tokens"] == budget and r["thinking_budget"] == budget
    assert r["answer_tokens"] == g.n_gen_tokens - budget and r["answer_tokens"] <= 8
    assert r["reasoning"] == eng.detokenize(list(g.tokens[:n])).strip()
    assert r["answer"] == g.text.split("</think>", 1)[1].lstrip()  # the seam's whitespace is neither part
    rec = g.record()
    assert {k: rec[k] for k in R.SPLIT_FIELDS} == r and list(rec)[:5] == ["text", "n_prompt_tokens", "n_gen_tokens",
                                                                          "finish_reason", "seconds"]


def test_the_budget_message_is_forced_before_the_end(eng):
    msg = " Enough thinking."
    g = ask(eng, setup(eng, reasoning="on", reasoning_budget=3, reasoning_budget_message=msg), 4)
    forced = eng.tokenize(msg, add_bos=False, special=True) + [END]
    assert list(g.tokens[2:2 + len(forced)]) == forced
    assert g.reasoning["thinking_tokens"] == 2 + len(forced) and g.reasoning["reasoning"].endswith("Enough thinking.")


def test_the_answer_budget_counts_the_answer_alone(eng):
    g = ask(eng, setup(eng, reasoning="on", reasoning_budget=10), 3)
    assert g.reasoning["thinking_tokens"] == 10 and g.n_gen_tokens == 13
    if g.finish_reason == "length":
        assert g.reasoning["answer_tokens"] == 3
    plain = ask(eng, None, 3)  # the same request without reasoning: 3 tokens in all, no split
    assert plain.reasoning is None and plain.n_gen_tokens <= 3 and "thinking_tokens" not in plain.record()


def test_stop_strings_apply_to_the_answer_only(eng):
    free = ask(eng, setup(eng, reasoning="on", reasoning_budget=9), 6)
    thought = free.reasoning["reasoning"]
    word = thought.split()[0]
    g = ask(eng, setup(eng, reasoning="on", reasoning_budget=9), 6, stop=(word,))
    assert g.reasoning["reasoning"] == thought  # not cut inside the thinking
    assert word not in g.reasoning["answer"]


def test_unlimited_thinking_ends_at_the_context(eng):
    """``reasoning_budget: -1``: the thinking runs until the model closes it or the sequence's context
    is full; SmolLM2 does not close it, so the reply ends inside it: no answer, ``thinking_cap``."""
    g = ask(eng, setup(eng, reasoning="on"), 4)
    r = g.reasoning
    if r["thinking_closed"]:
        pytest.fail(f"SmolLM2 closed its thinking on its own: {g.text!r}")
    assert r["answer"] == "" and not r["thinking_forced"] and r["answer_tokens"] == 0
    if g.finish_reason == "length":
        assert r["thinking_end"] == "context" and g.n_prompt_tokens + g.n_gen_tokens == eng.n_ctx
    else:
        assert r["thinking_end"] == "stop"
    assert R.unanswered(g.record())


def test_reasoning_off_writes_a_closed_block_and_the_reply_is_answer(eng):
    """QwQ's template with thinking off closes the block in the generation prompt (``<think>\n</think>``):
    the budget machine is done before the reply, nothing is forced, the whole reply is the answer."""
    s = setup(eng, reasoning="off", reasoning_budget=2)
    eng.reasoning = s
    assert eng.chat_prompt(QUESTION).endswith("<think>\n</think>")
    g = ask(eng, s, 6)
    assert g.reasoning["thinking_end"] is None and g.reasoning["thinking_tokens"] == 0
    assert g.reasoning["answer"] == g.text and END not in g.tokens and g.reasoning["answer_tokens"] == g.n_gen_tokens


def test_a_family_that_cannot_think_decodes_as_without_the_settings(smollm_q8):
    """SmolLM2's own template (format none): with nothing set its kwargs say no thinking, there is no plan, and
    the reply and its record are the ones of an engine without any setup."""
    with Engine(str(smollm_q8), EngineSettings(n_ctx=160, n_threads=1)) as e:
        s = R.setup_for({"generation": {}, "families": {"fam": {"source": {"path": "x"}}}}, "fam", e.chat_template)
        assert s.format.name == "none" and s.kwargs["enable_thinking"] is False and not s.splits
        a = ask(e, None, 12)
        b = ask(e, s, 12)
        assert e.reply_plan(e.chat_prompt(QUESTION)) is None
        assert (a.text, a.tokens) == (b.text, b.tokens)
        ra, rb = a.record(), b.record()
        ra.pop("seconds"), rb.pop("seconds")
        assert ra == rb
        with pytest.raises(Exception, match="family fam.*cannot think"):
            R.setup_for({"generation": {"reasoning": "on"}, "families": {"fam": {"source": {"path": "x"}}}},
                        "fam", e.chat_template)
