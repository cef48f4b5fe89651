"""Perplexity + KLD on the real embedded model: protocol pieces, self-KLD, order down the ladder,
and refusal of a corrupt or mismatched reference-logit file."""

import math

import numpy as np
import pytest

from quantladder.corpora import pydoc_topics_text
from quantladder.engine import RawContext
from quantladder.errors import DataError
from quantladder.measures import perplexity as P
from quantladder.measures.perplexity.runner import _Scorer

PROTO = P.Protocol(n_ctx=256, n_batch=1024, max_chunks=4)
TEXT = pydoc_topics_text()[:60000]


def _ctx(path, kv="f16"):
    return RawContext(str(path), n_ctx=PROTO.n_seq * PROTO.n_ctx, n_batch=PROTO.n_seq * PROTO.n_ctx,
                      n_seq_max=PROTO.n_seq, kv=kv, n_threads=2)


@pytest.fixture(scope="module")
def reference(smollm_f16, tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.qlogits"
    with _ctx(smollm_f16) as ctx:
        res = P.run(ctx, TEXT, PROTO, write_reference=path)
    return path, P.summarize(res)


def test_protocol_shape():
    p = P.Protocol(n_ctx=512, n_batch=2048)
    assert (p.first, p.rows_per_chunk, p.n_seq) == (256, 255, 4)
    assert P.n_chunks(5000, p) == 9
    assert P.n_chunks(5000, P.Protocol(n_ctx=512, max_chunks=3)) == 3
    with pytest.raises(DataError, match="at least 2\\*n_ctx"):
        P.n_chunks(1000, p)


def test_log_softmax_matches_direct_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 50)).astype(np.float32) * 5
    m, lse = P.log_softmax_rows(x)
    direct = np.log(np.exp(x.astype(np.float64)).sum(axis=1))
    assert np.allclose(lse, direct, atol=1e-5)


def test_ppl_error_is_the_spread_of_nll():
    nll = np.array([1.0, 2.0, 3.0, 2.0])
    s = P.summarize({"nll": nll, "n_chunks": 1})
    assert math.isclose(s["ppl"], math.exp(2.0))
    assert math.isclose(s["ppl_err"], math.exp(2.0) * math.sqrt(0.5 / 3))


def test_reference_against_itself_is_zero(reference, smollm_f16):
    path, ref_summary = reference
    with _ctx(smollm_f16) as ctx:
        res = P.run(ctx, TEXT, PROTO, reference=P.ReferenceReader(path))
    s = P.summarize(res)
    assert s["n_tokens"] == 4 * PROTO.rows_per_chunk
    assert abs(s["kld_mean"]) < 1e-4 and s["kld_max"] < 1e-3
    assert s["same_top"] == 1.0
    assert math.isclose(s["ppl"], ref_summary["ppl"], rel_tol=1e-9)
    assert math.isclose(s["ppl_base"], s["ppl"], rel_tol=1e-3)  # stored log-probs are exact to ~1e-4 nats


def test_a_cached_tokenization_gives_the_same_pass_and_a_broken_cache_is_tokenized_again(
        reference, smollm_q8, tmp_path, monkeypatch):
    """Rungs of a family share their reference's tokenizer: the second pass over a corpus reads the
    tokens from the user's cache (no tokenize call) and scores bit for bit what the first did; a cache
    file cut short is not trusted but tokenized again; without a vocab name nothing is cached."""
    from quantladder.measures.perplexity import runner

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, _ = reference
    calls = []

    with _ctx(smollm_q8) as ctx:
        real = ctx.tokenize
        ctx.tokenize = lambda *a, **k: calls.append(1) or real(*a, **k)
        first = P.run(ctx, TEXT, PROTO, reference=P.ReferenceReader(path), vocab_id="ref-sha")
        (cached,) = (tmp_path / "quantladder" / "tokens").rglob("*.npy")
        again = P.run(ctx, TEXT, PROTO, reference=P.ReferenceReader(path), vocab_id="ref-sha")
        assert len(calls) == 1
        assert again["tokens_sha256"] == first["tokens_sha256"]
        assert np.array_equal(again["kld"], first["kld"]) and np.array_equal(again["nll"], first["nll"])
        cached.write_bytes(cached.read_bytes()[:100])  # cut short
        assert np.array_equal(runner.tokenize_text(ctx, TEXT, vocab_id="ref-sha"), real(TEXT, add_special=True))
        assert len(calls) == 2 and np.load(cached).size == len(real(TEXT, add_special=True))
        flipped = np.load(cached)
        flipped[5] += 1  # whole, but not the tokens its seal names
        np.save(cached, flipped)
        assert np.array_equal(runner.tokenize_text(ctx, TEXT, vocab_id="ref-sha"), real(TEXT, add_special=True))
        assert len(calls) == 3 and np.array_equal(np.load(cached), real(TEXT, add_special=True))
        runner.tokenize_text(ctx, TEXT)
        runner.tokenize_text(ctx, TEXT, vocab_id="another-vocab")
        assert len(calls) == 5 and len(list((tmp_path / "quantladder" / "tokens").rglob("*.npy"))) == 2


def test_kld_grows_down_the_ladder(reference, smollm_q8, smollm_q2k):
    path, _ = reference
    out = {}
    for name, model in (("Q8_0", smollm_q8), ("Q2_K", smollm_q2k)):
        with _ctx(model) as ctx:
            out[name] = P.summarize(P.run(ctx, TEXT, PROTO, reference=P.ReferenceReader(path)))
    assert 0 < out["Q8_0"]["kld_mean"] < out["Q2_K"]["kld_mean"]
    assert out["Q8_0"]["same_top"] > out["Q2_K"]["same_top"]
    assert out["Q2_K"]["kld_p99_9"] >= out["Q2_K"]["kld_median"]
    rows = P.metric_rows(out["Q2_K"], PROTO.n_ctx)
    names = {r["metric"] for r in rows}
    assert {"ppl", "kld_mean", "kld_p99_9", "same_top_token", "delta_p_rms", "ppl_ratio", "cor_ln_ppl"} <= names
    assert all(r["unit"] for r in rows)


def test_store_size_is_predicted_exactly_and_checked_against_free_space(reference, tmp_path):
    path, _ = reference
    r = P.ReferenceReader(path)
    hlen = r.tok_off - 16
    assert P.store_bytes(r.n_chunks, r.n_vocab, PROTO, hlen) == path.stat().st_size
    import shutil

    free = shutil.disk_usage(tmp_path).free
    P.check_room(tmp_path / "x.qlogits", free // 2)
    with pytest.raises(DataError, match=r"x\.qlogits: the reference-logit store needs .* GiB free"):
        P.check_room(tmp_path / "x.qlogits", free + 2**40)


def test_corrupt_reference_is_refused(reference, tmp_path):
    path, _ = reference
    cut = tmp_path / "cut.qlogits"
    cut.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(DataError, match="truncated"):
        P.ReferenceReader(cut)
    junk = tmp_path / "junk.qlogits"
    junk.write_bytes(b"not a logit file at all")
    with pytest.raises(DataError, match="not a quantladder reference-logit file"):
        P.ReferenceReader(junk)


def test_mismatched_reference_is_refused(reference, smollm_q8):
    path, _ = reference
    with _ctx(smollm_q8) as ctx:
        with pytest.raises(DataError, match="token stream differs"):
            P.run(ctx, TEXT[5000:], PROTO, reference=P.ReferenceReader(path))
        other = P.Protocol(n_ctx=128, n_batch=1024, max_chunks=4)
        with pytest.raises(DataError, match="n_ctx 256 != 128"):
            P.run(ctx, TEXT, other, reference=P.ReferenceReader(path))


def test_a_pass_past_its_deadline_stops_and_leaves_no_reference(smollm_q8, tmp_path):
    import time

    from quantladder.budget import BudgetReached

    out = tmp_path / "ref.qlogits"
    with _ctx(smollm_q8) as ctx:
        with pytest.raises(BudgetReached, match="budget reached"):
            P.run(ctx, TEXT, PROTO, write_reference=out, deadline=time.time() - 1)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


class _KeepChunks:
    """A stand-in for ReferenceWriter/ReferenceReader holding rows in memory (the file format is
    tested above with the real model; this checks the blocked arithmetic)."""

    def __init__(self):
        self.chunks = {}

    def add_rows(self, c, r0, meta, q):
        m, qq = self.chunks.get(c, (np.empty((0, 2), np.float32), np.empty((0, q.shape[1]), np.uint16)))
        assert len(m) == r0  # rows arrive in order
        self.chunks[c] = (np.concatenate([m, meta]), np.concatenate([qq, q]))

    def rows_of(self, c, r0, r1):
        m, q = self.chunks[c]
        return m[r0:r1], q[r0:r1]


def _score(logits, tokens, proto, *, reference=None, writer=None, n_threads, block_bytes):
    n = 2 * proto.rows_per_chunk
    out = {k: np.zeros(n) for k in ("nll", "nll_base", "kld", "dp")}
    out["same_top"] = np.zeros(n, dtype=bool)
    sc = _Scorer(tokens, proto, out, reference, writer, n_threads=n_threads, block_bytes=block_bytes)
    sc.score_group(logits, 0, 2, proto.n_ctx - proto.first)
    sc.close()
    return out


def test_blocked_threaded_scoring_is_bit_identical_and_matches_the_direct_formulas():
    proto = P.Protocol(n_ctx=64, n_batch=128)
    rng = np.random.default_rng(1)
    n_vocab = 3000
    per_seq = proto.n_ctx - proto.first
    base_logits = (rng.standard_normal((2 * per_seq, n_vocab)) * 4).astype(np.float32)
    rung_logits = base_logits + (rng.standard_normal(base_logits.shape) * 0.3).astype(np.float32)
    tokens = rng.integers(0, n_vocab, 2 * proto.n_ctx).astype(np.int32)

    stores = []
    for threads, block in ((1, 1 << 30), (2, 4 * n_vocab * 3), (3, 4 * n_vocab)):
        w = _KeepChunks()
        _score(base_logits, tokens, proto, writer=w, n_threads=threads, block_bytes=block)
        stores.append(w)
    for w in stores[1:]:  # the stored reference does not depend on blocks or threads
        for (m0, q0), (m1, q1) in zip(stores[0].chunks.values(), w.chunks.values()):
            assert np.array_equal(m0, m1) and np.array_equal(q0, q1)

    outs = [_score(rung_logits, tokens, proto, reference=stores[0], n_threads=t, block_bytes=b)
            for t, b in ((1, 1 << 30), (2, 4 * n_vocab * 5), (4, 4 * n_vocab))]
    for o in outs[1:]:
        for k in ("nll", "nll_base", "kld", "dp", "same_top"):
            assert np.array_equal(outs[0][k], o[k]), k

    # against float64 formulas on the unquantized logits
    rows = proto.rows_per_chunk
    o = outs[0]
    for s in range(2):
        lb = base_logits[s * per_seq: s * per_seq + rows].astype(np.float64)
        lr = rung_logits[s * per_seq: s * per_seq + rows].astype(np.float64)
        lpb = lb - np.log(np.exp(lb).sum(1, keepdims=True))
        lpr = lr - np.log(np.exp(lr).sum(1, keepdims=True))
        tgt = tokens[s * proto.n_ctx + proto.first + 1: (s + 1) * proto.n_ctx]
        idx = np.arange(rows)
        sl = slice(s * rows, (s + 1) * rows)
        assert np.allclose(o["nll"][sl], -lpr[idx, tgt], atol=1e-4)
        kept = lpb[idx, tgt] > lpb.max(1) - P.LOG_PROB_FLOOR  # the store keeps the top 16 nats only
        assert kept.sum() > rows // 2
        assert np.allclose(o["nll_base"][sl][kept], -lpb[idx, tgt][kept], atol=1e-3)  # step 16/65535 nats
        assert np.all(o["nll_base"][sl][~kept] >= -lpb.max(1)[~kept] + P.LOG_PROB_FLOOR - 1e-3)
        kld = (np.exp(lpb) * (lpb - lpr)).sum(1)
        assert np.allclose(o["kld"][sl], kld, rtol=0.02, atol=1e-4)
        assert np.array_equal(o["same_top"][sl], lb.argmax(1) == lr.argmax(1))
    assert o["kld"].mean() > 0.01


RESUME_PROTO = P.Protocol(n_ctx=256, n_batch=512, max_chunks=8)  # 4 groups of 2 chunks

_KILLED_PASS = """
import sys, time
sys.path.insert(0, {workflow!r})
from quantladder.engine import RawContext
from quantladder.measures import perplexity as P
from quantladder.corpora import pydoc_topics_text
proto = P.Protocol(n_ctx=256, n_batch=512, max_chunks=8)
with RawContext({model!r}, n_ctx=512, n_batch=512, n_seq_max=2, n_threads=2) as ctx:
    decode = ctx.decode
    def slow(*a):  # a group every ~second, so the test can kill the process between two
        r = decode(*a)
        time.sleep(1.0)
        return r
    ctx.decode = slow
    P.run(ctx, pydoc_topics_text()[:60000], proto, write_reference={out!r}, checkpoint={ckpt!r}, resume_key="k")
"""


def _resume_ctx(path):
    return RawContext(str(path), n_ctx=512, n_batch=512, n_seq_max=2, n_threads=2)


def _count_decodes(ctx, stop_at=None):
    """Count the decode calls; with `stop_at`, raise KeyboardInterrupt (Ctrl-C, or Snakemake stopping
    the job) at that call instead of decoding."""
    calls = []
    decode = ctx.decode

    def counted(*a):
        calls.append(1)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return decode(*a)

    ctx.decode = counted
    return calls


def test_a_killed_reference_pass_resumes_to_the_same_bytes(smollm_f16, tmp_path):
    """SIGKILL in the middle of the reference pass (the real process, no cleanup runs), then a rerun:
    it decodes only the missing groups and the store is byte-identical to an uninterrupted one."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import quantladder

    full = tmp_path / "full.qlogits"
    with _resume_ctx(smollm_f16) as ctx:
        res_full = P.run(ctx, TEXT, RESUME_PROTO, write_reference=full)

    out, ckpt = tmp_path / "ref.qlogits", tmp_path / ".ref.qlogits.ckpt"
    code = _KILLED_PASS.format(workflow=str(Path(quantladder.__file__).parents[1]), model=str(smollm_f16),
                               out=str(out), ckpt=str(ckpt))
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    head = None
    t_end = time.time() + 120
    while time.time() < t_end and proc.poll() is None:
        if ckpt.exists() and head is None:
            head = ckpt.stat().st_size  # the header alone, written at the start
        if head is not None and ckpt.stat().st_size > head:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the pass ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()  # nothing half-written under the output's name
    assert (tmp_path / ".ref.qlogits.partial").exists()

    with _resume_ctx(smollm_f16) as ctx:
        calls = _count_decodes(ctx)
        res = P.run(ctx, TEXT, RESUME_PROTO, write_reference=out, checkpoint=ckpt, resume_key="k")
    assert 1 <= len(calls) <= 3  # 4 groups in all, at least one kept from the killed run
    assert out.read_bytes() == full.read_bytes()
    assert np.array_equal(res["nll"], res_full["nll"])
    assert not ckpt.exists() and not (tmp_path / ".ref.qlogits.partial").exists()


def test_an_interrupted_kld_pass_resumes_and_a_changed_key_starts_over(smollm_q8, tmp_path):
    proto = RESUME_PROTO
    ref = tmp_path / "ref.qlogits"
    # a reference store for RESUME_PROTO from the q8 rung itself is enough to compare passes
    with _resume_ctx(smollm_q8) as ctx:
        P.run(ctx, TEXT, proto, write_reference=ref)
    with _resume_ctx(smollm_q8) as ctx:
        full = P.run(ctx, TEXT, proto, reference=P.ReferenceReader(ref))

    ckpt = tmp_path / ".kld.ckpt"
    with _resume_ctx(smollm_q8) as ctx:
        _count_decodes(ctx, stop_at=3)  # stopped during the third group
        with pytest.raises(KeyboardInterrupt):
            P.run(ctx, TEXT, proto, reference=P.ReferenceReader(ref), checkpoint=ckpt, resume_key="spec-1")
    assert ckpt.exists()

    with _resume_ctx(smollm_q8) as ctx:
        calls = _count_decodes(ctx)
        res = P.run(ctx, TEXT, proto, reference=P.ReferenceReader(ref), checkpoint=ckpt, resume_key="spec-1")
    assert len(calls) == 2  # groups 3 and 4 only
    for k in ("nll", "nll_base", "kld", "dp", "same_top"):
        assert np.array_equal(res[k], full[k]), k
    assert not ckpt.exists()

    # a checkpoint from another spec (say the rung was re-quantized) is not resumed from
    with _resume_ctx(smollm_q8) as ctx:
        _count_decodes(ctx, stop_at=3)
        with pytest.raises(KeyboardInterrupt):
            P.run(ctx, TEXT, proto, reference=P.ReferenceReader(ref), checkpoint=ckpt, resume_key="spec-1")
    with _resume_ctx(smollm_q8) as ctx:
        calls = _count_decodes(ctx)
        again = P.run(ctx, TEXT, proto, reference=P.ReferenceReader(ref), checkpoint=ckpt, resume_key="spec-2")
    assert len(calls) == 4
    assert np.array_equal(again["kld"], full["kld"])



# -- long documents: a chunk decoded in n_batch pieces, each scored as it comes ---------------------
LONG = P.Protocol(n_ctx=2048, n_batch=512, max_chunks=1)  # 4 pieces of 512 per chunk
WHOLE = P.Protocol(n_ctx=2048, n_batch=2048, max_chunks=1)  # the chunk in one decode (4 ubatches of 512)


def _run(model, proto, text=TEXT, **kw):
    with RawContext(str(model), n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    n_threads=2) as ctx:
        return P.run(ctx, text, proto, **kw)


def test_protocol_of_a_long_document():
    assert (LONG.piece, LONG.context_tokens, LONG.batch_tokens, LONG.n_seq) == (512, 2048, 512, 1)
    assert (WHOLE.piece, WHOLE.batch_tokens) == (2048, 2048)
    short = P.Protocol(n_ctx=512, n_batch=2048)
    assert (short.piece, short.context_tokens, short.batch_tokens) == (512, 2048, 2048)


@pytest.fixture(scope="module")
def long_reference(smollm_f16, tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    pieces, whole = d / "pieces.qlogits", d / "whole.qlogits"
    res_p = _run(smollm_f16, LONG, write_reference=pieces)
    res_w = _run(smollm_f16, WHOLE, write_reference=whole)
    return pieces, whole, res_p, res_w


def test_a_long_chunk_scored_piece_by_piece_equals_the_whole_chunk(long_reference, smollm_q4km):
    """The same figures and the same store bytes whether a chunk's rows are scored after each
    512-token piece or all at once (llama-perplexity's way): the rows are the same rows."""
    pieces, whole, res_p, res_w = long_reference
    assert pieces.read_bytes() == whole.read_bytes()
    assert np.array_equal(res_p["nll"], res_w["nll"])
    kp = _run(smollm_q4km, LONG, reference=P.ReferenceReader(pieces))
    kw = _run(smollm_q4km, WHOLE, reference=P.ReferenceReader(whole))
    for k in ("nll", "nll_base", "kld", "dp", "same_top"):
        assert np.array_equal(kp[k], kw[k]), k
    s = P.summarize(kp)
    assert s["n_tokens"] == LONG.rows_per_chunk == 1023 and s["kld_mean"] > 0


def test_a_long_pass_holds_one_piece_of_logits_not_the_chunk(long_reference, smollm_q4km):
    """Python-side memory of a KLD pass (numpy buffers, traced by tracemalloc) stays near a few
    pieces of rows x vocabulary; llama-perplexity keeps every scored row of the chunk
    (n_ctx/2 x n_vocab float32, 4x one piece here) before scoring."""
    import tracemalloc

    pieces = long_reference[0]
    ref = P.ReferenceReader(pieces)
    piece_bytes = LONG.piece * ref.n_vocab * 4
    chunk_rows_bytes = LONG.rows_per_chunk * ref.n_vocab * 4
    with RawContext(str(smollm_q4km), n_ctx=LONG.context_tokens, n_batch=LONG.batch_tokens, n_threads=2) as ctx:
        tracemalloc.start()
        P.run(ctx, TEXT, LONG, reference=ref)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 1.5 * piece_bytes, (peak, piece_bytes)
    assert peak < chunk_rows_bytes / 2


def test_the_reference_store_is_read_by_rows_without_a_memory_map(long_reference):
    pieces = long_reference[0]
    r = P.ReferenceReader(pieces)
    meta, q = r.chunk(0)
    m2, q2 = r.rows_of(0, 100, 612)
    assert np.array_equal(meta[100:612], m2) and np.array_equal(q[100:612], q2)
    assert not hasattr(r, "mm")
    r.close()


# -- passes: one per (corpus, context), each keyed by its own settings ------------------------------
def _cfg():
    """The whole embedded ladder's config (config/full.yaml over the default: every corpus)."""
    from quantladder import config as qconfig

    return qconfig.load_config([str(qconfig.REPO_ROOT / "config" / "full.yaml")])


def test_passes_and_their_keys_are_independent():
    from quantladder import manifest

    cfg = _cfg()
    fam = next(iter(cfg["families"]))
    ppl = cfg["measures"]["perplexity"]
    assert (ppl["corpus"], f"n{ppl['n_ctx']}") == P.passes(cfg)[0]
    key = lambda c, corpus, ctx: manifest.spec_hash(P.pass_config(c, corpus, ctx), "card", fam, "Q8_0", "f16",  # noqa: E731
                                                   "perplexity")
    before = key(cfg, "prose-en", "n512")
    more = json_copy(cfg)
    more["measures"]["perplexity"]["corpora"].append("manual-fr")  # a corpus added ...
    more["measures"]["perplexity"]["long"].update(enabled=True)
    assert ("manual-fr", "n512") in P.passes(more) and ("manual-en.full", "trained") in P.passes(more)
    assert key(more, "prose-en", "n512") == before  # ... re-keys none of the other passes
    other = json_copy(cfg)
    other["corpora"]["prose-en"] = {"builtin": "pydoc-topics", "select": {"every": 2, "offset": 0}}
    assert key(other, "prose-en", "n512") != before  # its own corpus source is in its key
    assert key(other, "manual-es", "n512") == key(cfg, "manual-es", "n512")
    s = P.pass_settings(more, "manual-en.full", "trained")
    assert (s["n_ctx"], s["n_batch"], s["max_chunks"]) == ("trained", 512, 1)
    assert P.protocol(s, n_ctx_train=8192).n_ctx == 8192
    with pytest.raises(DataError, match="no trained context"):
        P.protocol(s, n_ctx_train=0)
    from quantladder.errors import ConfigError

    with pytest.raises(ConfigError, match="no pass of corpus 'manual-fr'"):
        P.pass_settings(cfg, "manual-fr", "n512")
    with pytest.raises(ConfigError, match="not defined under `corpora:`"):
        P.pass_settings(cfg, "nope-en", "n512")


def test_planning_the_passes_imports_neither_numpy_nor_llama_cpp():
    """rules/common.smk imports the package to plan the passes while Snakemake builds its DAG (every
    `snakemake -n`): in a fresh interpreter, that import loads neither numpy nor llama.cpp."""
    import subprocess
    import sys
    from pathlib import Path

    import quantladder

    code = ("import sys; from quantladder.measures import perplexity as P; P.pass_name('prose-en', 'n512'); "
            "print(sorted(m for m in ('numpy', 'llama_cpp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(quantladder.__file__).parents[1], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_a_chat_corpus_is_skipped_for_a_base_model_with_the_reason():
    cfg = _cfg()
    cfg["families"]["base"] = {**next(iter(cfg["families"].values())), "chat": False}
    run, skipped = P.family_passes(cfg, "base")
    assert ("chat-en", "n512") not in run and [s["corpus"] for s in skipped] == ["chat-en"]
    assert "not a chat model" in skipped[0]["reason"]


def json_copy(x):
    import json

    return json.loads(json.dumps(x))


# -- calibration overlap ----------------------------------------------------------------------------
def test_overlap_rows_flag_a_pass_that_scores_its_own_calibration_text():
    rng = np.random.default_rng(3)
    ev = rng.integers(0, 50000, 4000).astype(np.int32)
    other = rng.integers(0, 50000, 20000).astype(np.int32)
    rows, rec = P.overlap_rows(ev, [{"corpus": "c", "tokens": np.concatenate([other, ev[1000:2000]])}], corpus="x",
                               n_ctx=512, ngram=13, flag_pct=1.0)
    by = {r["metric"]: r for r in rows}
    # 1000 shared tokens hold 1000 - 12 of the 3988 evaluation 13-grams
    assert by["calibration_overlap"]["value"] == pytest.approx(100 * 988 / 3988)
    assert by["calibration_overlap"]["unit"] == "%" and by["calibration_overlap"]["n"] == 3988
    assert by["calibration_overlap_flag"]["value"] == 1.0 and by["calibration_overlap"]["subset"] == "x"
    rows, _ = P.overlap_rows(ev, [{"corpus": "c", "tokens": other}], corpus="x", n_ctx=512, ngram=13, flag_pct=1.0)
    assert {r["metric"]: r["value"] for r in rows} == {"calibration_overlap": 0.0, "calibration_overlap_flag": 0.0}
    assert P.overlap_rows(ev, [], corpus="x", n_ctx=512, ngram=13, flag_pct=1.0) == ([], [])
    rows, _ = P.overlap_rows(ev, [{"corpus": None, "reason": "made elsewhere"}], corpus="x", n_ctx=512, ngram=13,
                             flag_pct=1.0)
    assert rows[0]["value"] is None and rows[0]["status"] == "absent" and rows[0]["status_reason"] == "made elsewhere"
