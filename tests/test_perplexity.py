"""Perplexity + KLD on the real embedded model: protocol pieces, self-KLD, order down the ladder,
and refusal of a corrupt or mismatched reference-logit file."""

import math

import numpy as np
import pytest

from quantladder.corpora import pydoc_topics_text
from quantladder.engine import RawContext
from quantladder.errors import DataError
from quantladder.measures import perplexity as P

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
    """A stand-in for ReferenceWriter/ReferenceReader holding chunks in memory (the file format is
    tested above with the real model; this checks the blocked arithmetic)."""

    def __init__(self):
        self.chunks = []

    def add_quantized(self, meta, q):
        self.chunks.append((meta.copy(), q.copy()))

    def chunk(self, c):
        return self.chunks[c]


def _score(logits, tokens, proto, *, reference=None, writer=None, n_threads, block_bytes):
    n = 2 * proto.rows_per_chunk
    out = {k: np.zeros(n) for k in ("nll", "nll_base", "kld", "dp")}
    out["same_top"] = np.zeros(n, dtype=bool)
    sc = P._Scorer(tokens, proto, out, reference, writer, n_threads=n_threads, block_bytes=block_bytes)
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
        for (m0, q0), (m1, q1) in zip(stores[0].chunks, w.chunks):
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

