"""Greedy selection on the host (numpy over the logits rows) and by llama.cpp's backend sampler
(each row's best candidates only, EngineSettings.selection) pick the same token: replies are
byte-identical either way, on the real SmolLM2 rung and the default config's own HumanEval items
through the one generation loop (issue 46). Budgets are cut to keep the test to seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quantladder import benchmarks, config, generation
from quantladder.engine import SELECT_TOP_K, Engine, EngineSettings, Request
from quantladder.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("item_id", "text", "n_prompt_tokens", "n_gen_tokens", "finish_reason")


def _default_humaneval(max_new_tokens: int):
    cfg = config.load(str(REPO / "config" / "config.yaml"))
    section = {**cfg["benchmarks"]["humaneval"], "max_new_tokens": max_new_tokens}
    b = benchmarks.create("humaneval", section)
    src = b.fetch_source("unused")
    items, _ = b.build_items(src, reference_gguf=None, family={})
    return b, src, items


def test_replies_are_byte_identical_with_selection_on_the_host_or_the_backend(smollm_q4km, tmp_path):
    b, src, items = _default_humaneval(48)
    assert len(items) == 10  # the default config's limit
    got, steps = {}, {}
    for sel in ("host", "backend"):
        store = tmp_path / sel
        store.mkdir()
        engines = []

        def engine_for(n, sel=sel):
            engines.append(Engine(str(smollm_q4km), EngineSettings(n_ctx=n, n_parallel=4, n_threads=2, selection=sel)))
            return engines[-1]

        res = generation.Loop(b, items, key="selection", store_dir=store, n_parallel=4, engine_for=engine_for,
                              env=b.open_env(src, "generate")).run()
        assert {e.resolved["selection"] for e in engines} == {sel}
        got[sel] = [{k: r.get(k) for k in FIELDS} for r in res.records]
        steps[sel] = sum(int(r["n_gen_tokens"]) for r in res.records)
    assert got["host"] == got["backend"]
    assert steps["host"] > 10 * 20  # replies that ran, not ten empty ones


def test_ignore_eog_runs_every_request_to_its_budget_on_both_sides(smollm_q4km):
    """The benchmark's option (llama-batched-bench's sequences never stop): no reply ends at an
    end-of-generation token, and the two sides still agree token for token."""
    toks = {}
    for sel in ("host", "backend"):
        with Engine(str(smollm_q4km), EngineSettings(n_ctx=256, n_parallel=3, n_threads=2, selection=sel,
                                                     ignore_eog=True)) as eng:
            prompts = [eng.prompt_tokens(eng.chat_prompt([{"role": "user", "content": q}]))
                       for q in ("Hi", "What is 2+2?", "Say yes.")]
            out = {}

            def one(p):
                return (yield Request(p, 40))

            eng.run([one(p) for p in prompts], out.__setitem__)
            assert [out[i].n_gen_tokens for i in range(3)] == [40, 40, 40]
            assert {out[i].finish_reason for i in range(3)} == {"length"}
            assert not any(eng.lc.llama_vocab_is_eog(eng.vocab, t) for i in range(3) for t in out[i].tokens)
            toks[sel] = [out[i].tokens for i in range(3)]
    assert toks["host"] == toks["backend"]
    # without the option, the same engine ends "What is 2+2?" on its own (the option is what changed)
    with Engine(str(smollm_q4km), EngineSettings(n_ctx=256, n_threads=2)) as eng:
        g = eng.generate(eng.chat_prompt([{"role": "user", "content": "What is 2+2?"}]), 40)
        assert g.finish_reason == "stop" and g.n_gen_tokens < 40


def test_host_ties_go_to_the_lowest_id(smollm_q4km):
    """numpy's argmax takes the first maximum, as llama.cpp's CPU greedy sampler does
    (llama_sampler_greedy_apply: a later token must be strictly greater); the backend path picks the
    lowest id among the candidates of the highest logit (SELECT_TOP_K of them)."""
    with Engine(str(smollm_q4km), EngineSettings(n_ctx=64, n_threads=2, selection="host")) as eng:
        eng.generate([eng.bos, 1, 2, 3], 1)
        row = eng._logits(1)
        row[0, :] = -1.0
        row[0, [4000, 17, 9000]] = 5.0  # a three-way tie at the top
        assert eng._select((0,)) == [17]
    assert SELECT_TOP_K >= 2


def test_selection_is_checked_and_auto_resolves_by_where_the_layers_run():
    assert EngineSettings(n_ctx=64).resolved()["selection"] == "host"
    assert EngineSettings(n_ctx=64, n_gpu_layers=99).resolved()["selection"] == "backend"
    assert EngineSettings(n_ctx=64, selection="backend").resolved()["selection"] == "backend"
    with pytest.raises(ConfigError, match="selection 'gpu'"):
        EngineSettings(n_ctx=64, selection="gpu").resolved()



def test_a_prompt_of_several_chunks_selects_from_its_last_chunk_on_both_sides(smollm_q4km):
    """The first token comes from the last prompt chunk's last row (batch index = that chunk's size
    - 1, not the prompt's length - 1): both sides agree on a prompt of 64 + 64 + 22 tokens."""
    got = {}
    for sel in ("host", "backend"):
        with Engine(str(smollm_q4km), EngineSettings(n_ctx=192, n_batch=64, n_threads=2, selection=sel)) as eng:
            assert eng.n_batch == 64
            text = eng.chat_prompt([{"role": "user", "content": "Count the words: " + "one two three " * 40}])
            prompt = eng.prompt_tokens(text)[:150]
            g = eng.generate(prompt, 8)
            assert eng.last_run["prefill_decodes"] == 3 and g.n_gen_tokens > 0
            got[sel] = g.tokens
    assert got["host"] == got["backend"]
