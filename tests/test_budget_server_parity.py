"""The reasoning budget against llama-server's (issue 43, the budget target): at ``reasoning_budget N``
the engine's reply is byte-identical to ``llama-server --reasoning-budget N``'s on the same GGUF, the
same rendered prompt, greedy sampling and the same prefill chunking at one sequence, and the end of
the thinking is forced at exactly N thinking tokens on both sides.

The model is the offline thinking family (docs/thinking.md, "An offline thinking family"): SmolLM2
with llama.cpp's vendored QwQ-32B template written into a copy of its GGUF, in two vocabularies:

- ``text``: the copy ``config/examples/thinking.yaml`` makes (``models.write_chat_template``), where
  ``<think>`` / ``</think>`` are ordinary text of several tokens each, so the start sequence is
  matched across tokens and the forced end is a sequence of three;
- ``special``: tests/test_reasoning_engine.py's copy, where they are single user-defined tokens as in
  a Qwen vocabulary.

The server is the real llama-server built from the same vendored source (``llama_tools.extra_tool``:
minutes the first time on a machine, cached after), on loopback, one slot, the engine's context,
batch, micro-batch and threads, driven through ``/v1/chat/completions`` as a user drives it (the
server renders the messages itself, with the kwargs our setup renders with). QwQ's generation
prompt opens ``<think>\\n``: both samplers are fed it before the first step, so its ``\\n`` is the
first of the N thinking tokens and the reply thinks N - 1 free tokens before the forced end tag.

At N = 0 llama.cpp does not end the thinking at once: its sampler is promoted to FORCING by the
prompt's start tag, and the prompt's ``\\n`` that follows is taken as the first forced token
(common/reasoning-budget.cpp's FORCING accepts any token; ggml-org/llama.cpp#28356, open), so the end
tag is never whole. The engine departs there on purpose (``ReasoningBudget.prefill`` passes over a
prompt token that is not the forced one): its reply opens on the whole forced end, "0 = end at once"
as the setting means. The test holds both: the engine's forced end at once, the server's reply as
#28356 makes it, and the first differing token at reply index 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quantladder import llama_tools, models
from quantladder import reasoning as R
from quantladder.benchmarks.base import Benchmark
from quantladder.engine import Engine, EngineSettings
from quantladder.llama_server import LlamaServer
from test_reasoning_engine import thinking_copy

QUESTION = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
N_CTX, N_BATCH, THREADS = 256, 16, 2  # the prompt (20-22 tokens) is decoded in two chunks on both sides
ANSWER = 24  # the answer's budget (the engine's max_tokens)
MESSAGE = " Time to answer."

CASES = [("text", 0, ""), ("text", 1, ""), ("text", 5, ""), ("text", 17, ""), ("text", 5, MESSAGE),
         ("special", 0, ""), ("special", 1, ""), ("special", 5, ""), ("special", 17, "")]


@pytest.fixture(scope="module")
def server_exe() -> Path:
    return llama_tools.extra_tool("llama-server")


@pytest.fixture(scope="module")
def copies(smollm_source, tmp_path_factory) -> dict[str, Path]:
    text, _ = models.chat_template_text({"vendored": "Qwen-QwQ-32B"}, "chat_template")  # the example's
    d = tmp_path_factory.mktemp("budget-parity")
    models.write_chat_template(smollm_source, d / "text.gguf", text)
    return {"text": d / "text.gguf", "special": thinking_copy(smollm_source, d / "special.gguf", text)}


@pytest.fixture(scope="module")
def engines(copies):
    """One engine per copy, opened when a case first needs it: one sequence, the server's context,
    batch (the micro-batch follows it) and threads."""
    out: dict[str, Engine] = {}

    def get(variant: str) -> Engine:
        if variant not in out:
            out[variant] = Engine(str(copies[variant]), EngineSettings(n_ctx=N_CTX, n_batch=N_BATCH,
                                                                       n_threads=THREADS))
        return out[variant]

    yield get
    for e in out.values():
        e.close()


class Server(LlamaServer):
    """llama-server on loopback for one GGUF and one ``--reasoning-budget``: one slot, the engine's
    context, batch, micro-batch and threads, flash attention off as the engine's f16 cache has it,
    its RAM prompt cache off; the default reasoning format (``auto``), as a user runs it."""

    def __init__(self, exe: Path, model: Path, budget: int, message: str):
        super().__init__(exe, ["-m", str(model), "--jinja", "-np", "1", "-c", str(N_CTX), "-b", str(N_BATCH),
                               "-ub", str(N_BATCH), "-t", str(THREADS), "-tb", str(THREADS), "-fa", "off", "-ngl", "0",
                               "-cram", "0", "--no-webui", "-fit", "off", "--reasoning-budget", str(budget)]
                         + (["--reasoning-budget-message", message] if message else []))


def _first_difference(a, b) -> int:
    a, b = list(a), list(b)
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _find(seq: list[int], sub: tuple[int, ...]) -> int:
    """Where ``sub`` first occurs in ``seq``, -1 if nowhere."""
    for i in range(len(seq) - len(sub) + 1):
        if tuple(seq[i:i + len(sub)]) == sub:
            return i
    return -1


@pytest.mark.parametrize("variant,budget,message", CASES, ids=[f"{v}-{b}{'-msg' if m else ''}" for v, b, m in CASES])
def test_reply_is_llama_servers_and_the_end_is_forced_at_the_budget(server_exe, engines, copies, variant, budget,
                                                                   message):
    eng = engines(variant)
    eng.reasoning = R.setup_for({"generation": {"reasoning": "on", "reasoning_budget": budget,
                                                "reasoning_budget_message": message or None},
                                 "families": {"fam": {"source": {"path": str(copies[variant])}}}},
                                "fam", eng.chat_template)
    assert eng.reasoning.format.name == "think"
    prompt = eng.chat_prompt(QUESTION)
    plan = eng.reply_plan(prompt)
    out = []

    def driver():  # the exams' own request path
        g = yield from Benchmark.ask(eng, prompt, ANSWER, ())
        return g

    eng.run([driver()], lambda i, g: out.append(g))
    ours = out[0]
    rec = ours.reasoning

    srv = Server(server_exe, copies[variant], budget, message).start()
    try:
        kwargs = eng.reasoning.kwargs  # what our renderer gave the template (enable_thinking)
        # the same prompt: the server's rendering, its tokens, and the generation prompt both
        # budget samplers are fed before the first step
        assert srv.post("/apply-template", {"messages": QUESTION, "chat_template_kwargs": kwargs})["prompt"] == prompt
        assert srv.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"] \
            == list(eng.prompt_tokens(prompt))
        # llama-server's max_tokens counts every generated token, the engine's the answer alone (the
        # thinking has its own budget, docs/thinking.md): the server gets our thinking tokens plus the
        # answer's budget, so that where the replies agree both stop at the same token
        r = srv.post("/v1/chat/completions", {
            "messages": QUESTION, "chat_template_kwargs": kwargs, "temperature": 0, "top_k": 1, "seed": 0,
            "max_tokens": rec["thinking_tokens"] + ANSWER, "cache_prompt": False, "verbose": True,
            "return_tokens": True})
        v = r["__verbose"]
        theirs = [int(t) for t in v["tokens"]]
        finish = r["choices"][0]["finish_reason"]
        msg = r["choices"][0]["message"]
        assert eng.tokenize(v["generation_settings"]["generation_prompt"], add_bos=False, special=True) \
            == list(plan.prefill)
        assert v["tokens_evaluated"] == ours.n_prompt_tokens
    finally:
        srv.close()

    # the server counts the end-of-generation token it stopped at; the engine does not keep it
    if finish == "stop":
        assert eng._is_eog(theirs[-1])
        theirs = theirs[:-1]
    opened = _find(list(plan.prefill), plan.start)
    assert opened >= 0  # the generation prompt opens the block: the sampler counts from the prompt
    k = len(plan.prefill) - (opened + len(plan.start))
    assert k == 1 and plan.budget == budget
    forced = plan.forced
    assert forced == tuple(eng.tokenize(message, add_bos=False, special=True) if message else ()) + plan.ends[0]
    if budget < k:
        # N = 0: the engine ends the thinking at once (the whole forced end opens its reply); the server,
        # promoted to FORCING at the prompt's start tag, took the prompt's k tokens after it as the first
        # k forced ones and forces only the rest (llama.cpp#28356): the end tag is never whole there
        assert tuple(ours.tokens[:len(forced)]) == forced
        assert rec["thinking_forced"] and rec["thinking_closed"] and rec["thinking_end"] == "budget"
        assert rec["thinking_tokens"] == len(forced) and rec["reasoning"].strip() == ""
        assert tuple(theirs[:len(forced) - k]) == forced[k:]
        assert _first_difference(theirs, ours.tokens) == 0
        assert not (msg.get("content") or "").strip()  # the server's thinking never closed: no answer
        return
    assert finish == ours.finish_reason
    assert theirs == list(ours.tokens), f"first differing token at reply index {_first_difference(theirs, ours.tokens)}"
    assert v["content"] == ours.text  # byte-identical text

    # the server's split of the same reply is ours (both parts compared stripped, as llama.cpp's own tests do)
    assert (msg.get("reasoning_content") or "").strip() == rec["reasoning"].strip()
    assert (msg.get("content") or "").strip() == rec["answer"].strip()

    # where the end is forced: the budget counts the tokens after the start tag, the generation
    # prompt's first (here its "\n": k = 1), so the reply thinks N - k free tokens and then the forced
    # sequence (the message, the end tag) follows, in both replies
    for reply in (theirs, list(ours.tokens)):
        at = budget - k
        assert tuple(reply[at:at + len(forced)]) == forced
        assert _find(reply, plan.ends[0]) == at + len(forced) - len(plan.ends[0])  # no earlier close
    assert rec["thinking_forced"] and rec["thinking_closed"] and rec["thinking_end"] == "budget"
    assert rec["thinking_tokens"] == budget - k + len(forced)  # the generated ones: N - k free + the forced
