"""A pass: the corpus decoded chunk group by chunk group, every scored row turned into per-token
NLL (and KLD against the reference store, or the quantized rows of a new store); and the rule jobs
around it (a rung's pass, the point's passes joined, the reference rung's store)."""

from __future__ import annotations

import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ... import corpora, metrics, models, provenance
from ...budget import BudgetReached
from ...card import check_same_card
from ...engine import RawContext
from ...io import hash_obj, read_json, sha256_bytes, sha256_file, user_cache, verify_sha256, write_json
from ..memory import peak_rss_bytes
from .passes import Protocol, n_chunks, pass_config, pass_name, pass_settings, protocol
from .stats import metric_rows, overlap_rows, summarize
from .store import LOG_PROB_FLOOR, Checkpoint, Layout, ReferenceReader, ReferenceWriter, checkpoint_path, quantize_rows

log = logging.getLogger(__name__)

# The headline figures against the reference, written as absent with the reason where they are refused
# (a third party's file whose tokens are not the reference's: quantladder.provenance.refusal).
REFUSED_METRICS = ("ppl_ratio", "ln_ppl_ratio", "kld_mean", "delta_p_mean", "same_top_token")


# -- the corpus's tokens -------------------------------------------------------------------------
def tokenize_text(ctx, text: str, *, parse_special: bool = False, vocab_id: str | None = None) -> np.ndarray:
    """``text``'s tokens as llama-perplexity makes them (BOS when the vocab adds one), kept in the
    user's cache when ``vocab_id`` names the vocabulary.

    Tokenizing a whole corpus is most of a short pass (Gemma-3's 262k-piece vocabulary: 22 s for the
    2.3 MB code corpus, beside a 3 s decode), and every rung of a family tokenizes the same text with
    the same vocabulary: llama-quantize copies the tokenizer's metadata unchanged, so a rung made here
    is named by its reference's sha256 (models.vocab_id). The cache key is that, the text's sha256, the
    flags and the llama.cpp release (its tokenizer code); a file that cannot be read, or whose tokens
    are not the ones its seal (their sha256) names, is tokenized again; a new one appears whole
    (written aside, then renamed)."""
    if not vocab_id:
        return ctx.tokenize(text, add_special=True, parse_special=parse_special)
    import llama_cpp

    key = hash_obj({"vocab": vocab_id, "text": sha256_bytes(text.encode("utf-8")), "add_special": True,
                    "parse_special": bool(parse_special), "llama_cpp": llama_cpp.__version__})
    path = user_cache("tokens", key[:2], f"{key}.npy")
    seal = path.with_suffix(".sha256")  # the array's own sha256, written after it: a damaged file is not used
    try:
        cached = np.load(path, allow_pickle=False)
        if (cached.dtype == np.int32 and cached.ndim == 1
                and seal.read_text().strip() == sha256_bytes(cached.astype("<i4").tobytes())):
            return cached
    except (OSError, ValueError, EOFError):
        pass
    tokens = ctx.tokenize(text, add_special=True, parse_special=parse_special)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        arr = np.asarray(tokens, dtype=np.int32)
        for dest, write in ((path, lambda f: np.save(f, arr, allow_pickle=False)),
                            (seal, lambda f: f.write(sha256_bytes(arr.astype("<i4").tobytes()).encode()))):
            tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                write(f)
            os.replace(tmp, dest)
    except OSError as e:  # a read-only or full cache: the pass goes on without it
        log.warning("token cache %s not written: %s", path, e)
    return tokens


# -- the pass ----------------------------------------------------------------------------------
def log_softmax_rows(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima and log-sum-exp (float64 sums, as llama.cpp accumulates in double)."""
    m = logits.max(axis=1)
    s = np.exp(logits - m[:, None]).sum(axis=1, dtype=np.float64)
    return m, m.astype(np.float64) + np.log(s)


def run(ctx, text: str, proto: Protocol, *, reference: ReferenceReader | None = None,
        write_reference: str | os.PathLike | None = None, ref_header: dict | None = None,
        progress_every: int = 10, deadline: float | None = None,
        checkpoint: str | os.PathLike | None = None, resume_key: str = "",
        parse_special: bool = False, vocab_id: str | None = None) -> dict:
    """One pass over the corpus with a RawContext built with n_ctx = proto.context_tokens,
    n_batch = proto.batch_tokens, n_seq_max = proto.n_seq.

    Returns per-token arrays summarised by `summarize` (kept in float64, a few MB for wikitext-2).
    With `checkpoint` (a file path that is not a Snakemake output) the pass is resumable: the
    finished chunk groups (and the reference store's `.partial` file) survive a stop, and the next
    call with the same `resume_key` continues from them, with results bit-identical to one
    uninterrupted pass (chunk groups are decoded with the same companions either way).
    `parse_special` tokenizes special-token text (a chat template's markers) as the special tokens
    it names; llama-perplexity never does (its corpora are plain text). ``vocab_id``: see tokenize_text.
    """
    tokens = tokenize_text(ctx, text, parse_special=parse_special, vocab_id=vocab_id)
    n_chunk = n_chunks(len(tokens), proto)
    used = tokens[: n_chunk * proto.n_ctx].copy()
    if reference is not None:
        reference.check_compatible(used, ctx.n_vocab, proto, n_chunk)
    header = {"n_ctx": proto.n_ctx, "first": proto.first, "rows_per_chunk": proto.rows_per_chunk,
              "n_chunks": n_chunk, **(ref_header or {})}
    out = run_layout(ctx, used, Layout.fixed(n_chunk, proto), n_batch=proto.n_batch, n_seq=proto.n_seq,
                     bos_first=ctx.add_bos, reference=reference, write_reference=write_reference, ref_header=header,
                     progress_every=progress_every, deadline=deadline, checkpoint=checkpoint, resume_key=resume_key)
    out["n_tokens_corpus"] = int(len(tokens))
    return out


def groups(layout: Layout, n_batch: int, n_seq: int) -> list[range]:
    """Sequences decoded together: consecutive ones, at most ``n_seq`` and ``n_batch`` tokens in all
    (the protocol's chunk groups: n_batch // n_ctx chunks); a longer sequence alone, in pieces."""
    out, c = [], 0
    while c < layout.n_seqs:
        end, total = c + 1, layout.lengths[c]
        while end < layout.n_seqs and end - c < n_seq and total + layout.lengths[end] <= n_batch:
            total += layout.lengths[end]
            end += 1
        out.append(range(c, end))
        c = end
    return out


def run_layout(ctx, used: np.ndarray, layout: Layout, *, n_batch: int, n_seq: int, bos_first: bool = False,
               reference: ReferenceReader | None = None, write_reference: str | os.PathLike | None = None,
               ref_header: dict | None = None, progress_every: int = 10, deadline: float | None = None,
               checkpoint: str | os.PathLike | None = None, resume_key: str = "") -> dict:
    """The pass itself, over any layout (store.Layout): the protocol's chunks of a corpus, or
    teacher-forced prompt + reply sequences. ``used``: the layout's tokens end to end; with
    ``bos_first`` the first token of each sequence is decoded as BOS (llama-perplexity's chunks).
    The context needs ``n_seq`` sequences of the longest sequence's cells (``n_batch`` tokens at most
    per decode call)."""
    t_start = time.perf_counter()
    rows_total = layout.n_rows
    tokens_sha256 = sha256_bytes(used.astype("<i4").tobytes())
    writer = None
    if write_reference:
        header = {"n_vocab": ctx.n_vocab, "tokens_sha256": tokens_sha256, "log_prob_floor": LOG_PROB_FLOOR,
                  **({} if "n_ctx" in (ref_header or {}) else layout.header()), **(ref_header or {})}
        writer = ReferenceWriter(write_reference, header, used, resumable=checkpoint is not None)
        log.info("reference-logit store %s: %.1f MiB (%d sequences, %d rows x %d vocab, uint16)", write_reference,
                 writer.predicted_bytes / 2**20, layout.n_seqs, rows_total, ctx.n_vocab)
    nll = np.empty(rows_total, dtype=np.float64)
    out = {"nll": nll}
    if reference is not None:
        out.update(nll_base=np.empty_like(nll), kld=np.empty_like(nll), dp=np.empty_like(nll),
                   same_top=np.empty(len(nll), dtype=bool))
    bos = ctx.bos
    plan = groups(layout, n_batch, n_seq)
    chunk_s = 0.0  # the slowest group so far: the next must fit before the deadline
    ok = False
    ckpt = None
    start = 0
    if checkpoint is not None:
        fields = [("nll", "<f8")]
        if reference is not None:
            fields += [("nll_base", "<f8"), ("kld", "<f8"), ("dp", "<f8"), ("same_top", "|b1")]
        identity = {"key": resume_key, "tokens_sha256": tokens_sha256, "layout": layout.header(),
                    "n_batch": n_batch, "n_vocab": ctx.n_vocab,
                    "reference": reference.header if reference is not None else None,
                    "writes_reference": writer is not None}
        ckpt = Checkpoint(checkpoint, identity, fields, layout)
        start = ckpt.load(out)
        if writer is not None:
            start = min(start, writer.chunks_on_disk())
        start = max((g.start for g in plan if g.start <= start), default=0)  # the same sequences decoded together
        if start:
            log.info("resuming the pass at chunk %d/%d from %s", start, layout.n_seqs, checkpoint)
        ckpt.open(start)
    if writer is not None:
        writer.open(start)
    scorer = _Scorer(used, layout, out, reference, writer, n_threads=getattr(ctx, "n_threads", 0))
    try:
        for gi, g in enumerate(plan):
            if g.start < start:
                continue
            if deadline is not None and time.time() + chunk_s > deadline:
                kept = (f"the {g.start} chunks done are kept in {checkpoint} and the rerun resumes there"
                        if ckpt is not None else "nothing is kept; rerun with a larger runtime")
                raise BudgetReached(f"budget reached: perplexity pass stopped before chunk {g.start}/{layout.n_seqs} "
                                    f"(the job's runtime would be exceeded); {kept}")
            t_chunk = time.perf_counter()
            ctx.clear()
            # a sequence longer than n_batch is decoded in n_batch pieces (llama-perplexity's long
            # chunks); each piece's rows are scored before the next decode overwrites the logits
            longest = max(layout.lengths[c] for c in g)
            piece = longest if len(g) > 1 else min(longest, n_batch)
            for p0 in range(0, longest, piece):
                toks, pos, seqs, mask, spans = [], [], [], [], []
                n_out = 0
                for s, c in enumerate(g):
                    n, first = layout.lengths[c], layout.firsts[c]
                    p1 = min(n, p0 + piece)
                    if p1 <= p0:
                        continue
                    base = layout.tok_start[c]
                    t = used[base + p0: base + p1].copy()
                    if bos_first and p0 == 0:
                        t[0] = bos
                    at = np.arange(p0, p1, dtype=np.int32)
                    toks.append(t)
                    pos.append(at)
                    seqs.append(np.full(p1 - p0, s, dtype=np.int32))
                    mask.append((at >= first).astype(np.int8))  # logits from `first` on, as llama-perplexity asks
                    lo = max(p0, first)
                    r0, r1 = lo - first, min(p1 - first, layout.rows(c))  # the last position predicts nothing
                    if r1 > r0:
                        spans.append((c, r0, r1, n_out))
                    n_out += max(0, p1 - lo)
                got = ctx.decode(np.concatenate(toks), np.concatenate(pos), np.concatenate(seqs), np.concatenate(mask))
                if spans:
                    scorer.score_spans(ctx.logits(got), spans)
            if ckpt is not None:
                if writer is not None:
                    writer.flush()  # the store first: on resume the shorter of the two decides
                ckpt.append(g.start, len(g), out)
            done = g.stop
            chunk_s = max(chunk_s, time.perf_counter() - t_chunk)
            if progress_every and gi % max(1, progress_every // max(1, len(g))) == 0:
                so_far = nll[: layout.row_start[done]]
                log.info("[%d/%d chunks] PPL so far %.4f (%.1f s)", done, layout.n_seqs,
                         math.exp(so_far.mean()), time.perf_counter() - t_start)
        ok = True
    finally:
        scorer.close()
        if writer is not None:
            writer.close(ok=ok)
        if ckpt is not None:
            ckpt.close(discard=ok)
    out["n_chunks"] = layout.n_seqs
    out["chunk_rows"] = [layout.rows(c) for c in range(layout.n_seqs)]  # the independent units of every ±
    out["seconds"] = time.perf_counter() - t_start
    out["tokens_sha256"] = tokens_sha256
    out["tokens"] = used
    return out


class _Scorer:
    """Turns each decoded piece's logits into per-token NLL (and KLD against the reference, or the
    quantized rows of a new reference) in blocks of a few rows spread over n_threads.

    Why blocks: a chunk's scored logits are (n_ctx/2 x n_vocab) float32, 50 MB for a 49k vocab;
    the dozen elementwise passes below over arrays that size run from RAM, while over a few rows
    (a few MB) they stay in cache. numpy releases the GIL in these loops, so the blocks also run
    in parallel while llama_decode is idle, as llama-perplexity's worker threads do. The figures are
    bit-identical to a whole-chunk computation: every row is computed by the same operations.
    """

    def __init__(self, tokens, layout: Layout | Protocol, out: dict, reference, writer, *, n_threads: int = 0,
                 block_bytes: int = 2 << 20):
        if isinstance(layout, Protocol):  # whole chunks of the protocol, as many as the tokens hold
            layout = Layout.fixed(len(tokens) // layout.n_ctx, layout)
        self.tokens, self.layout, self.out = tokens, layout, out
        self.reference, self.writer = reference, writer
        self.n_threads = max(1, n_threads or len(os.sched_getaffinity(0)))
        self.block_bytes = block_bytes
        self.pool = ThreadPoolExecutor(self.n_threads) if self.n_threads > 1 else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def score_group(self, all_logits: np.ndarray, c0: int, ns: int, per_seq: int) -> None:
        """Every scored row of `ns` whole chunks decoded together (per_seq output rows each)."""
        self.score_spans(all_logits, [(c0 + s, 0, self.layout.rows(c0 + s), s * per_seq) for s in range(ns)])

    def score_spans(self, all_logits: np.ndarray, spans: list[tuple[int, int, int, int]]) -> None:
        """Rows r0..r1 of sequence c for each span (c, r0, r1, at): `all_logits` holds them from row `at`."""
        n_vocab = all_logits.shape[1]
        jobs, q = [], {}
        for c, r0, r1, at in spans:
            n = r1 - r0
            block = max(1, min(n, self.block_bytes // (4 * n_vocab)))
            lg = all_logits[at: at + n]
            target = self.layout.targets(self.tokens, c, r0, r1)
            ref = self.reference.rows_of(c, r0, r1) if self.reference is not None else None
            if self.writer is not None:
                q[c] = (np.empty((n, 2), dtype="<f4"), np.empty((n, n_vocab), dtype="<u2"))
            for b0 in range(0, n, block):
                jobs.append((c, r0, lg, target, ref, q.get(c), b0, min(n, b0 + block)))
        if self.pool is None:
            for j in jobs:
                self._block(*j)
        else:
            for f in [self.pool.submit(self._block, *j) for j in jobs]:
                f.result()
        if self.writer is not None:
            for c, r0, _, _ in spans:
                self.writer.add_rows(c, r0, *q[c])

    def _block(self, c, r0, lg, target, ref, q, b0, b1) -> None:
        x = lg[b0:b1]
        t = target[b0:b1]
        idx = np.arange(b1 - b0)
        base = self.layout.row_start[c] + r0
        sl = slice(base + b0, base + b1)
        m, lse = log_softmax_rows(x)
        self.out["nll"][sl] = lse - x[idx, t]
        if q is not None:
            q[0][b0:b1], q[1][b0:b1] = quantize_rows(x, m, lse)
        if ref is not None:
            meta, qr = ref
            _kld_rows(x, lse, t, meta[b0:b1], qr[b0:b1], self.out, sl)


def _kld_rows(lg, lse, target, meta, q, out, sl) -> None:
    scale, lo = meta[:, 0].astype(np.float32), meta[:, 1].astype(np.float32)
    lp_base = q.astype(np.float32)
    lp_base *= scale[:, None]
    lp_base += lo[:, None]
    lp = np.subtract(lg, lse.astype(np.float32)[:, None])
    idx = np.arange(len(target))
    lpb_t = lp_base[idx, target].astype(np.float64)
    out["nll_base"][sl] = -lpb_t
    out["dp"][sl] = np.exp(lp[idx, target].astype(np.float64)) - np.exp(lpb_t)
    out["same_top"][sl] = lp_base.argmax(axis=1) == lg.argmax(axis=1)
    # KL(base || rung) over the base's entries above the floor: sum p_base * (lp_base - lp)
    p_base = np.exp(lp_base)
    p_base[lp_base <= -LOG_PROB_FLOOR] = 0.0
    np.subtract(lp_base, lp, out=lp)
    lp *= p_base
    out["kld"][sl] = lp.sum(axis=1, dtype=np.float64)


# -- the rule jobs -----------------------------------------------------------------------------
def calibration_tokens(ctx, text: str, settings: dict | None, parse_special: bool = False,
                       vocab_id: str | None = None) -> np.ndarray:
    """The tokens an importance matrix was computed from: llama-imatrix reads the first
    chunks x n_ctx tokens of its text (all of it when the settings are unknown)."""
    toks = tokenize_text(ctx, text, parse_special=parse_special or bool((settings or {}).get("parse_special")),
                         vocab_id=vocab_id)
    if settings and settings.get("chunks") and settings.get("n_ctx"):
        toks = toks[: int(settings["chunks"]) * int(settings["n_ctx"])]
    return toks


def _calibrations(ctx, cal: dict, calibration_files: list, vocab_id: str | None = None) -> list[dict]:
    """The rung's calibration texts as the matrix saw them (tokens), or why that is unknown."""
    if not cal:
        return []  # no importance matrix: nothing to overlap with
    if cal.get("corpus") is None:
        return [{"corpus": None, "reason": f"the rung's importance matrix {cal.get('file')} was made elsewhere: "
                                           "its calibration text is unknown"}]
    text = Path(calibration_files[0]).read_text(encoding="utf-8")
    return [{"corpus": cal["corpus"], "tokens": calibration_tokens(ctx, text, cal.get("settings"), vocab_id=vocab_id)}]


def measure_pass(pt, corpus: str, ctx_label: str, *, corpus_file: str, corpus_info: str, reference: str | None,
                 calibration: dict, calibration_files: list, spec: str, deadline: float | None, metrics_out: str) -> None:
    """Rule perplexity: one pass (a corpus at a context) of one point (`pt`, quantladder.points):
    PPL with llama-perplexity's protocol, KLD / Δp / same-top against the reference rung's stored
    log-probabilities (identical tokens), and the share of the evaluation text that the rung's
    calibration text (``calibration``: the matrix's corpus, settings and file) also holds."""
    pt.config = pass_config(pt.config, corpus, ctx_label)  # the manifest's spec is this pass's
    settings = pt.config["measures"]["perplexity"]
    info = pt.model_record.get("info", pt.model_record)
    proto = protocol(settings, info.get("n_ctx_train"), source=pt.model_path)
    kind = "chat" if corpora.is_chat(settings["source"]) else "text"
    text, parse_special = corpora.text_for_model(corpus_file, kind, pt.model_path)
    # a third party's file whose tokens, or chat text, are not the reference's: a divergence from the
    # reference's distributions means nothing, so it is refused with the reason (quantladder.provenance)
    refused = provenance.refusal(pt.model_record, kind) if reference else None
    reader = ReferenceReader(reference) if reference and not refused else None
    with RawContext(pt.model_path, n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    kv=pt.kv, n_threads=pt.threads, n_gpu_layers=pt.config["gpu_layers"],
                    flash_attn=pt.config.get("flash_attn")) as ctx:
        vocab = models.vocab_id(pt.model_record)
        res = run(ctx, text, proto, reference=reader, deadline=deadline, checkpoint=checkpoint_path(metrics_out),
                  resume_key=spec, parse_special=parse_special, vocab_id=vocab)
        engine = ctx.resolved
        calibrations = _calibrations(ctx, calibration, calibration_files, vocab)
    s = summarize(res)
    rows = metric_rows(s, proto.n_ctx, subset=corpus)
    if refused:
        rows += [metrics.row(m, None, n_ctx=proto.n_ctx, subset=corpus, status="absent", status_reason=refused)
                 for m in REFUSED_METRICS]
    ov = settings["overlap"]
    ov_rows, ov_records = overlap_rows(res["tokens"], calibrations, corpus=corpus, n_ctx=proto.n_ctx,
                                       ngram=ov["ngram"], flag_pct=ov["flag_pct"])
    rows += ov_rows
    data = {"name": corpus, **corpora.parse_name(corpus), "sha256": sha256_file(corpus_file),
            "record": read_json(corpus_info), "kind": kind, "chat_template_parsed": parse_special,
            "tokens_sha256": res["tokens_sha256"], "n_tokens_scored": s["n_tokens"], "n_chunks": s["n_chunks"],
            "n_ctx": proto.n_ctx, "context": ctx_label, "n_batch": proto.n_batch, "calibration_overlap": ov_records}
    if reader is not None:
        data["reference_logits"] = read_json(Path(reference).with_suffix(".json"))
    elif refused:
        data["reference_refused"] = refused
    peak = peak_rss_bytes()
    log.info("%s: PPL %.4f, %d tokens scored in %.1f s, peak RSS %.0f MiB", pass_name(corpus, ctx_label),
             s["ppl"], s["n_tokens"], res["seconds"], peak / 2**20)
    pt.write_metrics(metrics_out, rows, data=data, engine=engine,
                     extra={"summary": s, "seconds": res["seconds"], "peak_rss_bytes": peak})


def join_passes(pass_files: list, skipped: list[dict], *, spec: str, metrics_out: str, manifest_out: str) -> None:
    """Rule perplexity_point: the point's passes joined into its perplexity/metrics.json (every row
    keeps its corpus as subset). A pass the family cannot take (a chat corpus for a model without a
    chat template) is listed in ``skipped`` and appears as absent rows with the reason."""
    docs = [read_json(p) for p in pass_files]
    if not docs:
        raise ValueError("rule perplexity_point: no pass to join")
    head = docs[0]
    rows, corpora_data, statuses = [], {}, []
    for d in docs:
        rows += d["rows"]
        data = d["manifest"].get("data") or {}
        corpora_data[pass_name(data.get("name"), data.get("context"))] = data
        statuses.append((d.get("status"), d.get("status_reason")))
    for sk in skipped:
        rows.append(metrics.row("ppl", None, subset=sk["corpus"], status="absent", status_reason=sk["reason"]))
    man = dict(head["manifest"])
    # One record per pass; the file-level data hash covers them all (each pass's manifest keeps its own).
    man["data"] = {"name": "perplexity corpora", "corpora": corpora_data,
                   "sha256": hash_obj(sorted(v.get("sha256") or "" for v in corpora_data.values()))}
    man["spec_hash"] = spec
    names = list(corpora_data)
    man["passes"] = {k: d["manifest"]["spec_hash"] for k, d in zip(names, docs)}
    order = ("ok", "unanchored", "incomplete", "absent", "failed", "blocked")
    st, reason = max(statuses, key=lambda x: order.index(x[0]) if x[0] in order else 0)
    doc = {"benchmark": "perplexity", "status": st, "status_reason": reason,
           "incomplete": st == "incomplete", "rows": rows, "manifest": man,
           "passes": {k: {"seconds": d.get("seconds"), "peak_rss_bytes": d.get("peak_rss_bytes")}
                      for k, d in zip(names, docs)}}
    write_json(manifest_out, man)
    write_json(metrics_out, doc)


def reference_pass(cfg: dict, card: str, corpus: str, ctx_label: str, *, gguf: str, info: str, corpus_file: str,
                   threads: int, spec: str, deadline: float | None, logits_out: str, info_out: str) -> None:
    """Rule reference_logits: the reference rung's log-probabilities over the protocol's scored
    positions, stored once per (card, family, corpus, context) and reused by every rung."""
    check_same_card(card, cfg.get("card"))
    settings = pass_settings(cfg, corpus, ctx_label)
    ref = read_json(info)
    verify_sha256(gguf, ref.get("sha256"), what="reference rung", recorded_in=str(info))
    proto = protocol(settings, (ref.get("info") or ref).get("n_ctx_train"), source=str(gguf))
    kind = "chat" if corpora.is_chat(settings["source"]) else "text"
    text, parse_special = corpora.text_for_model(corpus_file, kind, gguf)
    header = {"model_sha256": ref["sha256"], "corpus_sha256": sha256_file(corpus_file), "kv": "f16",
              "corpus": corpus, "context": ctx_label, "parse_special": parse_special}
    with RawContext(gguf, n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    kv="f16", n_threads=threads, n_gpu_layers=cfg["gpu_layers"],
                    flash_attn=cfg.get("flash_attn")) as ctx:
        res = run(ctx, text, proto, write_reference=logits_out, ref_header=header, deadline=deadline,
                  checkpoint=checkpoint_path(logits_out), resume_key=spec, parse_special=parse_special,
                  vocab_id=models.vocab_id(ref))
    s = summarize(res)
    peak = peak_rss_bytes()
    log.info("reference %s: PPL %.4f, %d chunks of %d in %.1f s, peak RSS %.0f MiB", logits_out, s["ppl"],
             s["n_chunks"], proto.n_ctx, res["seconds"], peak / 2**20)
    write_json(info_out, {**header, "ppl": s["ppl"], "ppl_err": s["ppl_err"], "n_tokens": s["n_tokens"],
                          "n_chunks": s["n_chunks"], "n_ctx": proto.n_ctx, "n_batch": proto.n_batch,
                          "seconds": res["seconds"], "bytes": Path(logits_out).stat().st_size,
                          "peak_rss_bytes": peak, "tokens_sha256": res["tokens_sha256"], "spec": spec})
