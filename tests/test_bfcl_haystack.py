"""bfcl_haystack: BFCL items behind a RULER-style essay haystack, fitted to each length with the embedded
model's real tokenizer and chat template, scored by BFCL's own checker."""

from __future__ import annotations

import json

import pytest

from quantladder import benchmarks, manifest
from quantladder import config as qconfig
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.bfcl_haystack import BFCLHaystack, with_haystack
from quantladder.engine import Engine, EngineSettings
from quantladder.errors import ConfigError
from test_bfcl import bfcl_record, bfcl_wheel  # noqa: F401  (the real wheel's data, as BFCL's tests use it)

CATS = ["simple_python", "parallel"]


@pytest.fixture(scope="module")
def built(bfcl_record, smollm_q8):  # noqa: F811
    bench = BFCLHaystack({"enabled": True, "categories": CATS, "limit": 1,
                          "haystack": {"lengths": [1024, "trained"], "seed": 3}})
    items, facts = bench.build_items(bfcl_record, reference_gguf=str(smollm_q8), family={"chat": True})
    return bench, items, facts


def test_items_fill_each_length_with_the_haystack_before_the_question(built, bfcl_record, smollm_q8):  # noqa: F811
    """One item per (BFCL item, length), the trained context read from the GGUF (SmolLM2: 8192); the
    prompt plus the reply's budget fits the length and nearly fills it; the question comes after the
    haystack, in the user's turn."""
    bench, items, facts = built
    assert facts["lengths"] == [1024, 8192] and facts["n_ctx_train"] == 8192 and not facts["items_too_long"]
    assert [(it.subset, it.n_ctx) for it in items] == [(c, n) for n in (1024, 8192) for c in CATS]
    assert len({it.data["bfcl_id"] for it in items}) == len(CATS)
    with Engine(smollm_q8, EngineSettings(n_ctx=512, n_threads=1)) as eng:
        for it in items:
            msgs = bench.messages(bfcl_record["root"], it.data)
            prompt = eng.chat_prompt(msgs)
            n = len(eng.tokenize(prompt, add_bos=not eng.starts_with_bos(prompt)))
            assert n == it.data["n_prompt_tokens"] and n + 256 <= it.n_ctx
            assert n + 256 > it.n_ctx - 64  # filled: one more essay word would not fit
            user = [m for m in msgs if m["role"] == "user"][-1]["content"]
            question = it.data["question"][0][-1]["content"]
            assert user.startswith(it.data["haystack"][:200]) and user.endswith(question)
            assert "ground_truth" not in it.data and it.answer["ground_truth"]


def test_the_same_checker_scores_a_correct_and_a_wrong_call(built, bfcl_record):  # noqa: F811
    """Verdicts come from BFCL's checker on the item's ground truth; rows per length (n_ctx)."""
    bench, items, _ = built
    simple = [it for it in items if it.subset == "simple_python"]
    gt = simple[0].answer["ground_truth"][0]
    name, args = next(iter(gt.items()))
    call = f"[{name}(" + ", ".join(f"{k}={v[0]!r}" for k, v in args.items() if v and v[0] != "") + ")]"
    gens = {simple[0].id: {"item_id": simple[0].id, "text": call}, simple[1].id: {"item_id": simple[1].id, "text": "no"}}
    vs = bench.verdicts(simple, gens, ScoringContext(bench.open_env(bfcl_record, "score")))
    assert [v["correct"] for v in vs] == [True, False]
    for v, it in zip(vs, simple):
        v["n_ctx"] = it.n_ctx  # as the score stage stamps it
    rows = {(r["metric"], r["subset"], r["n_ctx"]): r for r in bench.metric_rows(vs, simple)}
    assert rows[("accuracy", None, 1024)]["value"] == 100 and rows[("accuracy", None, 8192)]["value"] == 0
    assert rows[("accuracy", "simple_python", 8192)]["unit"] == "%" and rows[("accuracy", None, 8192)]["n"] == 1
    assert rows[("parse_failure_rate", None, 8192)]["value"] == 100


@pytest.mark.slow
def test_the_real_model_answers_behind_the_haystack_and_the_checker_scores_it(built, bfcl_record, smollm_q8,
                                                                               tmp_path):  # noqa: F811
    """The 1K items through the one generation loop on the embedded model (two sequences at once) and
    the score stage: every prompt is decoded whole (its token count as the items planned), the reply
    ends or runs out of budget, BFCL's checker gives a verdict per item, and the rows sit at n_ctx 1024."""
    from quantladder import generation, scoring
    from quantladder.gguf_meta import read_info

    bench, items, _ = built
    short = [it for it in items if it.n_ctx == 1024]
    run = generation.Loop(bench, short, key="k", store_dir=tmp_path, n_parallel=2,
                          engine_for=lambda n_ctx: Engine(smollm_q8, EngineSettings(n_ctx=n_ctx, n_parallel=2, n_threads=2)),
                          env=bench.open_env(bfcl_record, "generate")).run()
    recs = {r["item_id"]: r for r in run.records}
    assert set(recs) == {it.id for it in short}
    for it in short:
        r = recs[it.id]
        assert r["n_prompt_tokens"] == it.data["n_prompt_tokens"] and r["finish_reason"] in ("stop", "length")
        assert 0 < r["n_gen_tokens"] <= 256
    out = scoring.score(bench, short, run.records, run.meta, key="s", store_dir=tmp_path,
                        ctx=ScoringContext(bench.open_env(bfcl_record, "score")), kv_info=read_info(smollm_q8))
    assert sorted(v["item_id"] for v in out.verdicts) == sorted(recs) and all("correct" in v for v in out.verdicts)
    rows = {(r["metric"], r["subset"], r["n_ctx"]): r for r in out.rows}
    head = rows[("accuracy", None, 1024)]
    assert head["n"] == len(short) and head["value"] == 100 * sum(v["correct"] for v in out.verdicts) / len(short)


def test_settings_keys_and_refusals(repo_root):
    """The items key names the haystack's lengths and seed; multi-turn categories are refused, naming the key."""
    cfg = qconfig.load(repo_root / "config" / "config.yaml")
    cfg["benchmarks"]["bfcl_haystack"]["enabled"] = True
    fam = qconfig.families(cfg)[0]
    keys = {}
    for label, hs in (("base", {"lengths": [2048, "trained"], "seed": 0}), ("seed", {"lengths": [2048, "trained"], "seed": 1}),
                      ("len", {"lengths": [4096], "seed": 0})):
        cfg["benchmarks"]["bfcl_haystack"]["haystack"] = {**hs, "essay": {"builtin": "pydoc-topics"}}
        keys[label] = manifest.items_key(cfg, fam, "bfcl_haystack")
    assert len(set(keys.values())) == 3
    with pytest.raises(ConfigError, match=r"benchmarks\.bfcl_haystack\.categories"):
        benchmarks.create("bfcl_haystack", {"enabled": True, "categories": ["multi_turn_base"]})
    assert BFCLHaystack({"enabled": True, "haystack": {"lengths": [2048, "trained"]}}).max_n_ctx(8192) == 8192
    assert with_haystack([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "hay")[1] == \
        {"role": "user", "content": "hay\n\nq"}
    assert json.dumps(BFCLHaystack({"enabled": True}).settings["haystack"])  # plain data: it enters the items key
