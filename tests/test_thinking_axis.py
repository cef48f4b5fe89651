"""The thinking as a loss axis (issue 43, deliverable 4), on reply records in the generate job's own
shape (reasoning.ReplyPlan.fields): the per-point figures, the paired ones against the reference with
the project's statistics (Tango's interval and McNemar's test from quantladder.stats, the seeded
bootstrap of the length ratio, Clopper–Pearson for the flips by cause), absent (never zero) for replies
that carry no thinking; find's and recommend's accepted thinking losses; the traffic file's
``reasoning_content`` and the logged turn replayed as the server would, through a real template in the
real engine."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from quantladder import catalog  # noqa: F401  -- every figure declared
from quantladder import find as qfind
from quantladder import stats, thinking
from quantladder.errors import ConfigError, DataError
from quantladder.stats.share import share_interval
from quantladder.benchmarks.traffic import replayed_turn, trafficfile


def reply(item: str, end: str | None, tokens: int, answer: str = "4", reasoning: str = "thinking") -> dict:
    """A reply record as the generate job writes it for a thinking family (docs/thinking.md, "The reply record")."""
    closed = end in ("model", "budget")
    return {"item_id": item, "text": f"{reasoning}</think>{answer}" if closed else reasoning,
            "reasoning_format": "think", "reasoning": reasoning if end else "", "answer": answer if closed or end is None
            else "", "thinking_tokens": tokens if end else 0, "answer_tokens": 3, "thinking_closed": closed or end is None,
            "thinking_self_closed": end == "model", "thinking_forced": end == "budget", "thinking_end": end,
            "thinking_budget": 64}


def by_id(records):
    return thinking.split_records(records)


REF = [reply(f"i{k}", "model", 20 + k) for k in range(10)]
# the rung: items 0-3 close on their own (longer), 4-7 hit the budget, 8 ends inside its thinking, 9 as the reference
RUNG = ([reply(f"i{k}", "model", 30 + k) for k in range(4)] + [reply(f"i{k}", "budget", 64) for k in range(4, 8)]
        + [reply("i8", "stop", 12), reply("i9", "model", 29)])


def test_the_per_point_figures_count_the_replies_that_thought():
    rows = {r["metric"]: r for r in thinking.point_rows(RUNG)}
    assert rows["think_close_rate"]["value"] == 50.0 and rows["think_close_rate"]["n"] == 10
    assert rows["think_cap_rate"]["value"] == 40.0  # the budget's four; the one ended by a stop token is no cap
    assert rows["think_tokens_mean"]["value"] == pytest.approx(np.mean([r["thinking_tokens"] for r in RUNG]))
    assert {r["unit"] for r in rows.values()} == {"%", "tokens"}
    # a reply that never thought is out of the rates' items
    rows = {r["metric"]: r for r in thinking.point_rows(RUNG + [reply("i10", None, 0)])}
    assert rows["think_close_rate"]["n"] == 10


def test_a_family_that_does_not_think_has_no_figure_never_zero():
    plain = [{"item_id": "i0", "text": "4", "n_gen_tokens": 1}]
    assert thinking.point_rows(plain) == []
    assert "carry no thinking" in thinking.absent_reason(plain)
    d = thinking.paired_figure("think_close_rate", plain, RUNG)
    assert isinstance(d, str) and d.startswith("the reference: its replies carry no thinking")
    # replies split but none thought (reasoning off): one row without a value, its reason in words
    off = [reply("i0", None, 0)]
    (row,) = thinking.point_rows(off)
    assert row["value"] is None and "none of its 1 replies thought" in row["verdict_text"]


def test_closure_and_cap_deltas_are_tangos_interval_on_a_paired_binary():
    d, negate = thinking.rate_delta(by_id(REF), by_id(RUNG), "think_close_rate")
    assert not negate and d.n == 10 and (d.n_loss, d.n_gain) == (5, 0)  # items 4-8 stopped closing on their own
    lo, hi = stats.tango_interval(5, 0, 10)
    assert (d.ci_low, d.ci_high) == pytest.approx((100 * lo, 100 * hi)) and d.estimate == -50.0
    assert d.p_value == stats.mcnemar_exact(5, 0)
    f = thinking.paired_figure("think_cap_rate", REF, RUNG)
    lo, hi = stats.tango_interval(4, 0, 10)  # four more cap hits: a loss on the "no cap" binary
    assert f["delta"] == 40.0 and (f["ci_low"], f["ci_high"]) == pytest.approx((-100 * hi, -100 * lo))
    assert f["value"] == 40.0


def test_the_length_ratio_is_on_items_both_closed_with_a_seeded_bootstrap():
    r = thinking.ratio(by_id(REF), by_id(RUNG))
    both = [0, 1, 2, 3, 9]
    x = np.array([REF[k]["thinking_tokens"] for k in both], float)
    y = np.array([RUNG[k]["thinking_tokens"] for k in both], float)
    assert r["n"] == 5 and r["value"] == pytest.approx(y.sum() / x.sum())
    assert r["lo"] <= r["value"] <= r["hi"] and r["lo"] > 1  # every closed item thinks longer: the interval says so
    assert thinking.ratio(by_id(REF), by_id(RUNG)) == r  # seeded: the same interval every time
    assert thinking.ratio(by_id(REF), by_id(RUNG), seed=1)["lo"] != r["lo"]
    # fewer than two items closed in both: absent, with the reason
    assert "one item closed" in thinking.ratio(by_id(REF[:1]), by_id(RUNG[:1]))
    # find's figure: ratio − 1 against a tolerance written as 1.25x
    f = thinking.paired_figure("think_tokens_ratio", REF, RUNG)
    assert f["delta"] == pytest.approx(r["value"] - 1) and f["ci_low"] == pytest.approx(r["lo"] - 1)


def test_flips_split_by_cause_sum_to_the_flips():
    ref_v = [{"item_id": f"i{k}", "correct": True} for k in range(10)]
    # the rung: 4-7 (at the budget) and 8 (no answer) fail, 2 (closed, another answer) fails too
    rung_v = [{"item_id": f"i{k}", "correct": k not in (2, 4, 5, 6, 7, 8)} for k in range(10)]
    fc = thinking.flip_causes(ref_v, rung_v, by_id(RUNG))
    assert fc == {"n": 10, "cap": 5, "answer": 1}
    cols = thinking._flip_columns("think_flip_cap_rate", 5, 10, {"n": 10, "cap": 1, "answer": 0})
    assert (cols["delta_ci_low"], cols["delta_ci_high"]) == pytest.approx(tuple(100 * x for x in share_interval(5, 10)))
    assert "noise floor: the reference generated again flips 1 of 10" in cols["verdict_text"]


def test_each_part_is_compared_apart():
    rung = [dict(r) for r in REF]
    rung[0]["reasoning"] = "other thinking"  # the same answer after other thinking
    rung[1]["answer"] = "5"
    assert thinking.identical_parts(by_id(REF), by_id(rung)) == (9, 9, 10)


# ------------------------------------------------------------------------------------------ accepted losses

def test_accepted_thinking_losses_are_read_and_refused_the_wrong_way_round():
    got = thinking.parse_accept("think_close>=-2pt, think_cap:arithmetic<=3pt, think_tokens<=1.25x")
    assert [(a["metric"], a["benchmark"], a["tolerance"], a["higher_is_better"]) for a in got] == [
        ("think_close_rate", None, 2.0, True), ("think_cap_rate", "arithmetic", 3.0, False),
        ("think_tokens_ratio", None, pytest.approx(0.25), False)]
    for bad, why in (("think_close<=2pt", "write think_close>=-2pt"), ("think_tokens<=0.9x", "upper bound above 1"),
                     ("think_cap<=2nats", "in points"), ("think_closing>=-2pt", "cannot read")):
        with pytest.raises(ConfigError, match=why):
            thinking.parse_accept(bad, where="recommend.accept")


def test_find_reads_thinking_figures_per_task_benchmark():
    from quantladder.config import load_config

    cfg = load_config()
    fam = next(iter(cfg["families"]))
    figs = qfind.parse_accept("think_close>=-2pt, think_tokens:arithmetic<=1.25x", cfg, fam)
    on = [b for b in qfind.qtargets.tasks(cfg) if qfind.qconfig.task_runs_for(cfg, b, fam)]
    assert [f.benchmark for f in figs if f.metric == "think_close_rate"] == on and len(on) > 1
    (ratio,) = [f for f in figs if f.metric == "think_tokens_ratio"]
    assert ratio.benchmark == "arithmetic" and ratio.tolerance == pytest.approx(0.25) and not ratio.higher_is_better
    with pytest.raises(ConfigError, match="no task benchmark that runs"):
        qfind.parse_accept("think_close:nope>=-2pt", cfg, fam)


def _frame(rows: list[dict]) -> pd.DataFrame:
    base = {"card": "c", "kv": "f16", "benchmark": "arithmetic", "subset": None, "is_reference": False, "n": 50}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_recommend_keeps_out_a_point_not_shown_within_an_accepted_thinking_loss():
    df = _frame([
        {"family": "t", "rung": "Q8_0", "metric": "think_close_rate", "unit": "%", "value": 80.0, "delta": -0.5,
         "delta_ci_low": -1.5, "delta_ci_high": 0.5, "delta_stderr": 0.5},
        {"family": "t", "rung": "Q2_K", "metric": "think_close_rate", "unit": "%", "value": 40.0, "delta": -40.0,
         "delta_ci_low": -55.0, "delta_ci_high": -25.0, "delta_stderr": 7.0},
        {"family": "t", "rung": "Q4_K_M", "metric": "think_close_rate", "unit": "%", "value": 78.0, "delta": -2.0,
         "delta_ci_low": -8.0, "delta_ci_high": 4.0, "delta_stderr": 3.0},
        {"family": "plain", "rung": "Q2_K", "metric": "exact_match", "unit": "%", "value": 50.0},
    ])
    out, notes = thinking.accept_check(df, thinking.parse_accept("think_close>=-2pt"))
    assert ("t", "Q8_0", "f16") not in out  # shown within 2 points
    assert "shown to lose more than 2 points" in out[("t", "Q2_K", "f16")]
    assert "undetermined" in out[("t", "Q4_K_M", "f16")]  # not shown within: kept out too
    assert notes == ["accepted thinking losses not applied to plain: its replies carry no thinking"]


# ------------------------------------------------------------------------------------------ traffic

def test_a_traffic_file_keeps_an_assistant_turns_reasoning(tmp_path):
    p = tmp_path / "t.jsonl"
    lines = [{"id": "a", "messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "hello", "reasoning_content": "greet back"},
                                      {"role": "user", "content": "2+2?"},
                                      {"role": "assistant", "content": "4", "reasoning_content": "two and two"}]},
             {"id": "b", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tf = trafficfile.read(p)
    a, b = tf.items
    assert a.prompt[1]["reasoning_content"] == "greet back" and a.logged == "4" and a.logged_reasoning == "two and two"
    assert "reasoning_content" not in b.prompt[0] and b.logged_reasoning is None
    # a file without any reasoning hashes as before the field was read
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps(lines[1]) + "\n")
    from quantladder.io import hash_obj

    assert trafficfile.read(plain).logged_sha256 == hash_obj([["b", "y"]])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "q", "reasoning_content": "no"}]}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'messages\[0\].reasoning_content'"):
        trafficfile.read(bad)


@pytest.fixture(scope="module")
def qwen3_engine(smollm_source, tmp_path_factory):
    """SmolLM2 with llama.cpp's vendored Qwen3 template (which replays reasoning_content) in a copy."""
    from quantladder import models
    from quantladder import reasoning as R
    from quantladder.engine import Engine, EngineSettings

    text, _ = models.chat_template_text({"vendored": "Qwen-Qwen3-0.6B"}, "chat_template")
    dst = tmp_path_factory.mktemp("qwen3") / "smollm2-qwen3.gguf"
    models.write_chat_template(smollm_source, dst, text)
    eng = Engine(str(dst), EngineSettings(n_ctx=512, n_parallel=1, n_threads=1))
    eng.reasoning = R.setup_for({"generation": {"reasoning": "on"}, "families": {"f": {}}}, "f", eng.chat_template)
    yield eng


def test_the_logged_turn_is_replayed_as_the_server_renders_it(qwen3_engine):
    msgs = [{"role": "user", "content": "2+2?"}]
    prompt = qwen3_engine.chat_prompt(msgs)
    turn = replayed_turn(qwen3_engine.chat_prompt, msgs, prompt, "4", "two and two")
    assert turn == "<think>\ntwo and two\n</think>\n\n4"  # the template's own rendering of the thinking
    # split as a reply of this family, the replayed turn gives the log's two parts back
    from quantladder import reasoning as R

    st = R.prompt_state(R.generation_prompt(prompt, qwen3_engine.chat_prompt(msgs, add_generation_prompt=False)),
                        qwen3_engine.reasoning.format)
    sp = R.split(turn, qwen3_engine.reasoning.format, st.started_in_thinking, st.thinking_in_prompt)
    assert (sp.reasoning, sp.answer, sp.closed) == ("two and two", "4", True)
