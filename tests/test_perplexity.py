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
