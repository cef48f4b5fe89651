"""Perplexity and KL divergence with llama-perplexity's protocol.

Protocol (llama.cpp tools/perplexity/perplexity.cpp, `perplexity()` and `kl_divergence()`):
  * the whole text is tokenized once, with BOS when the vocab adds one, special tokens not parsed;
  * it is cut into chunks of n_ctx tokens (needs >= 2 chunks); n_batch // n_ctx chunks are decoded
    together, each as its own sequence at positions 0..n_ctx-1;
  * the first token of each chunk is replaced by BOS when the vocab adds one;
  * only the second half is scored: logits at positions first = n_ctx/2 .. n_ctx-2 predict the
    tokens first+1 .. n_ctx-1 (n_ctx - 1 - first tokens per chunk);
  * PPL = exp(mean NLL), ± PPL · sqrt(var(NLL) / (N-1)).
KLD mode: the reference run stores, per scored position, its log-probabilities as uint16 over
[max(min, max-16), max] with a per-row scale and offset; a rung is compared on identical tokens,
with KL summed over the reference's entries above -16 nats, as llama.cpp does.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..io import sha256_bytes

log = logging.getLogger(__name__)

MAGIC = b"QLLOGIT1"
LOG_PROB_FLOOR = 16.0  # nats below the top log-prob that are kept (llama.cpp's range)


@dataclass
class Protocol:
    n_ctx: int = 512
    n_batch: int = 2048
    max_chunks: int = 0  # 0: all

    @property
    def first(self) -> int:
        return self.n_ctx // 2

    @property
    def rows_per_chunk(self) -> int:
        return self.n_ctx - 1 - self.first

    @property
    def n_seq(self) -> int:
        return max(1, self.n_batch // self.n_ctx)


def n_chunks(n_tokens: int, proto: Protocol, source: str = "corpus") -> int:
    if n_tokens < 2 * proto.n_ctx:
        raise DataError(f"{source}: {n_tokens} tokens; the protocol needs at least 2*n_ctx = {2 * proto.n_ctx}")
    n = n_tokens // proto.n_ctx
    return min(n, proto.max_chunks) if proto.max_chunks else n


def log_softmax_rows(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima and log-sum-exp (float64 sums, as llama.cpp accumulates in double)."""
    m = logits.max(axis=1)
    s = np.exp(logits - m[:, None]).sum(axis=1, dtype=np.float64)
    return m, m.astype(np.float64) + np.log(s)


# -- reference log-prob store ------------------------------------------------------------------
def store_bytes(n_chunks: int, n_vocab: int, proto: Protocol, header_bytes: int = 0) -> int:
    """Exact size of a reference-logit file: magic + header + tokens + per row (scale, lo, n_vocab uint16).

    Grows with the corpus and the vocab like llama.cpp's base file (the same bytes per row): a
    wikitext-2 pass at n_ctx 512 of a 150k-vocab model (~580 chunks) is ~42 GiB; RAM stays at one
    chunk group whatever the size.
    """
    return 16 + header_bytes + 4 * n_chunks * proto.n_ctx + n_chunks * _chunk_bytes(proto.rows_per_chunk, n_vocab)


def _chunk_bytes(rows: int, n_vocab: int) -> int:
    """One chunk in the store: per row a float32 (scale, lo) pair and n_vocab uint16 log-probs."""
    return rows * 8 + rows * n_vocab * 2


def check_room(path: str | os.PathLike, need: int) -> None:
    """Refuse before the pass, not hours into it, when the file cannot fit where it is written."""
    import shutil

    parent = Path(path).parent
    parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(parent).free
    if need > free:
        raise DataError(f"{path}: the reference-logit store needs {need / 2**30:.2f} GiB and {parent} has "
                        f"{free / 2**30:.2f} GiB free; free space, write results/ elsewhere, or lower "
                        "measures.perplexity.max_chunks")


def _open_after(path: Path, head: bytes, keep_bytes: int):
    """Open `path` for appending after `head` + the first `keep_bytes` of records (a new file when 0)."""
    if keep_bytes:
        f = open(path, "r+b")
        f.truncate(len(head) + keep_bytes)
        f.seek(0, os.SEEK_END)
        return f
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "wb")
    f.write(head)
    return f


class ReferenceWriter:
    """Writes the store under a `.partial` name beside its path and renames it into place when the
    pass is complete. A resumable writer keeps the partial file when the pass stops early and, on
    the next run with the same head (header + tokens), continues after its last whole chunk."""

    def __init__(self, path: str | os.PathLike, header: dict, tokens: np.ndarray, *, resumable: bool = False):
        self.path = Path(path)
        h = json.dumps(header, sort_keys=True).encode()
        self.head = MAGIC + struct.pack("<Q", len(h)) + h + tokens.astype("<i4").tobytes()
        rows, n_vocab = int(header["rows_per_chunk"]), int(header["n_vocab"])
        self.chunk_bytes = _chunk_bytes(rows, n_vocab)
        self.predicted_bytes = store_bytes(int(header["n_chunks"]), n_vocab, Protocol(n_ctx=int(header["n_ctx"])), len(h))
        self.resumable = resumable
        self.tmp = self.path.with_name(f".{self.path.name}.partial")
        check_room(self.path, self.predicted_bytes - (self.tmp.stat().st_size if self.tmp.exists() else 0))
        self.f = None

    def chunks_on_disk(self) -> int:
        """Whole chunks in a partial file left by an earlier run of the same pass (0 if none or another pass)."""
        if not (self.resumable and self.tmp.exists()):
            return 0
        with open(self.tmp, "rb") as f:
            if f.read(len(self.head)) != self.head:
                return 0
        return (self.tmp.stat().st_size - len(self.head)) // self.chunk_bytes

    def open(self, keep_chunks: int = 0) -> None:
        self.f = _open_after(self.tmp, self.head, keep_chunks * self.chunk_bytes)

    def add_quantized(self, meta: np.ndarray, q: np.ndarray) -> None:
        """One chunk's rows: (rows, 2) float32 [scale, lo] and (rows, n_vocab) uint16 (`_quantize_rows`)."""
        self.f.write(np.ascontiguousarray(meta, dtype="<f4").data)  # buffers, not copies
        self.f.write(np.ascontiguousarray(q, dtype="<u2").data)

    def flush(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self, ok: bool = True) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        if ok:
            os.replace(self.tmp, self.path)  # made by open(): mode already follows the umask
        elif not self.resumable:
            self.tmp.unlink(missing_ok=True)


def checkpoint_path(output: str | os.PathLike) -> Path:
    """Where a rule's pass keeps its finished chunks: beside its output, under a name that is not
    an output (Snakemake deletes a failed job's outputs; this must survive to be resumed from)."""
    output = Path(output)
    return output.with_name(f".{output.name}.chunks.partial")


class _Checkpoint:
    """The per-token results of a pass, appended after each chunk group, so that a pass stopped by
    its time budget (or killed) resumes where it stopped instead of starting over: nothing measured
    is lost. Its identity (the caller's key, e.g. the point's spec hash, the token stream, the
    protocol and the reference) must match, else it is ignored and overwritten."""

    MAGIC = b"QLCKPT01"

    def __init__(self, path: str | os.PathLike, identity: dict, fields: list[tuple[str, str]], rows: int):
        self.path = Path(path)
        h = json.dumps(identity, sort_keys=True).encode()
        self.head = self.MAGIC + struct.pack("<Q", len(h)) + h
        self.fields, self.rows = fields, rows
        self.rec = rows * sum(np.dtype(d).itemsize for _, d in fields)
        self.f = None

    def load(self, out: dict) -> int:
        """Fill `out` from the file; returns the number of whole chunks it holds."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        if not data.startswith(self.head):
            return 0
        n = (len(data) - len(self.head)) // self.rec
        off = len(self.head)
        for c in range(n):
            sl = slice(c * self.rows, (c + 1) * self.rows)
            for name, dt in self.fields:
                k = self.rows * np.dtype(dt).itemsize
                out[name][sl] = np.frombuffer(data, dtype=dt, count=self.rows, offset=off)
                off += k
        return n

    def open(self, keep_chunks: int) -> None:
        self.f = _open_after(self.path, self.head, keep_chunks * self.rec)

    def append(self, c0: int, ns: int, out: dict) -> None:
        for c in range(c0, c0 + ns):
            sl = slice(c * self.rows, (c + 1) * self.rows)
            for name, dt in self.fields:
                self.f.write(np.ascontiguousarray(out[name][sl], dtype=dt).data)
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self, discard: bool) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        if discard:
            self.path.unlink(missing_ok=True)


class ReferenceReader:
    """Reads the store chunk by chunk (memory-mapped: RAM does not grow with the corpus)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                magic = f.read(8)
                if magic != MAGIC:
                    raise DataError(f"{self.path}: not a quantladder reference-logit file")
                (hlen,) = struct.unpack("<Q", f.read(8))
                self.header = json.loads(f.read(hlen))
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{self.path}: corrupt reference-logit file ({e})") from e
        h = self.header
        self.n_vocab, self.rows = int(h["n_vocab"]), int(h["rows_per_chunk"])
        self.n_chunks, self.n_ctx = int(h["n_chunks"]), int(h["n_ctx"])
        self.tok_off = 16 + hlen
        self.data_off = self.tok_off + 4 * self.n_chunks * self.n_ctx
        self.chunk_bytes = _chunk_bytes(self.rows, self.n_vocab)
        expect = self.data_off + self.n_chunks * self.chunk_bytes
        size = self.path.stat().st_size
        if size != expect:
            raise DataError(f"{self.path}: corrupt or truncated reference-logit file ({size} bytes, expected {expect})")
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")

    def tokens(self) -> np.ndarray:
        return np.frombuffer(self.mm, dtype="<i4", count=self.n_chunks * self.n_ctx, offset=self.tok_off)

    def chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        off = self.data_off + c * self.chunk_bytes
        meta = np.frombuffer(self.mm, dtype="<f4", count=self.rows * 2, offset=off).reshape(self.rows, 2)
        q = np.frombuffer(self.mm, dtype="<u2", count=self.rows * self.n_vocab,
                          offset=off + self.rows * 8).reshape(self.rows, self.n_vocab)
        return meta, q

    def check_compatible(self, tokens: np.ndarray, n_vocab: int, proto: Protocol, n_chunk: int) -> None:
        h = self.header
        problems = []
        if int(h["n_ctx"]) != proto.n_ctx:
            problems.append(f"n_ctx {h['n_ctx']} != {proto.n_ctx}")
        if self.n_vocab != n_vocab:
            problems.append(f"vocab {self.n_vocab} != {n_vocab}")
        if self.n_chunks < n_chunk:
            problems.append(f"{self.n_chunks} chunks stored, {n_chunk} needed")
        elif not np.array_equal(self.tokens()[: n_chunk * proto.n_ctx], tokens[: n_chunk * proto.n_ctx]):
            problems.append("the token stream differs (another corpus or tokenizer)")
        if problems:
            raise DataError(f"{self.path}: reference logits do not match this run: " + "; ".join(problems))


# -- the pass ----------------------------------------------------------------------------------
def run(ctx, text: str, proto: Protocol, *, reference: ReferenceReader | None = None,
        write_reference: str | os.PathLike | None = None, ref_header: dict | None = None,
        progress_every: int = 10, deadline: float | None = None,
        checkpoint: str | os.PathLike | None = None, resume_key: str = "") -> dict:
    """One pass over the corpus with a RawContext built with n_ctx = n_seq·n_ctx, n_seq_max = n_seq.

    Returns per-token arrays summarised by `summarize` (kept in float64, a few MB for wikitext-2).
    With `checkpoint` (a file path that is not a Snakemake output) the pass is resumable: the
    finished chunk groups (and the reference store's `.partial` file) survive a stop, and the next
    call with the same `resume_key` continues from them, with results bit-identical to one
    uninterrupted pass (chunk groups are decoded with the same companions either way).
    """
    t_start = time.perf_counter()
    tokens = ctx.tokenize(text, add_special=True, parse_special=False)
    n_chunk = n_chunks(len(tokens), proto)
    first, rows, n_ctx = proto.first, proto.rows_per_chunk, proto.n_ctx
    used = tokens[: n_chunk * n_ctx].copy()
    tokens_sha256 = sha256_bytes(used.astype("<i4").tobytes())
    if reference is not None:
        reference.check_compatible(used, ctx.n_vocab, proto, n_chunk)
    writer = None
    if write_reference:
        header = {"n_vocab": ctx.n_vocab, "n_ctx": n_ctx, "first": first, "rows_per_chunk": rows,
                  "n_chunks": n_chunk, "tokens_sha256": tokens_sha256,
                  "log_prob_floor": LOG_PROB_FLOOR, **(ref_header or {})}
        writer = ReferenceWriter(write_reference, header, used, resumable=checkpoint is not None)
        log.info("reference-logit store %s: %.1f MiB (%d chunks x %d rows x %d vocab, uint16)", write_reference,
                 writer.predicted_bytes / 2**20, n_chunk, rows, ctx.n_vocab)
    nll = np.empty(n_chunk * rows, dtype=np.float64)
    out = {"nll": nll}
    if reference is not None:
        out.update(nll_base=np.empty_like(nll), kld=np.empty_like(nll), dp=np.empty_like(nll),
                   same_top=np.empty(len(nll), dtype=bool))
    add_bos = ctx.add_bos
    bos = ctx.bos
    n_seq = proto.n_seq
    chunk_pos = np.arange(n_ctx, dtype=np.int32)
    done = 0
    chunk_s = 0.0  # the slowest chunk group so far: the next must fit before the deadline
    ok = False
    ckpt = None
    start = 0
    if checkpoint is not None:
        fields = [("nll", "<f8")]
        if reference is not None:
            fields += [("nll_base", "<f8"), ("kld", "<f8"), ("dp", "<f8"), ("same_top", "|b1")]
        identity = {"key": resume_key, "tokens_sha256": tokens_sha256,
                    "n_chunk": n_chunk, "n_ctx": n_ctx, "n_batch": proto.n_batch, "n_vocab": ctx.n_vocab,
                    "reference": reference.header if reference is not None else None,
                    "writes_reference": writer is not None}
        ckpt = _Checkpoint(checkpoint, identity, fields, rows)
        start = ckpt.load(out)
        if writer is not None:
            start = min(start, writer.chunks_on_disk())
        start -= start % n_seq  # resume on a group boundary: the same chunks decoded together
        if start:
            log.info("resuming the pass at chunk %d/%d from %s", start, n_chunk, checkpoint)
        ckpt.open(start)
    if writer is not None:
        writer.open(start)
    scorer = _Scorer(used, proto, out, reference, writer, n_threads=getattr(ctx, "n_threads", 0))
    try:
        for c0 in range(start, n_chunk, n_seq):
            if deadline is not None and time.time() + chunk_s > deadline:
                from ..budget import BudgetReached

                kept = (f"the {c0} chunks done are kept in {checkpoint} and the rerun resumes there"
                        if ckpt is not None else "nothing is kept; rerun with a larger runtime")
                raise BudgetReached(f"budget reached: perplexity pass stopped before chunk {c0}/{n_chunk} "
                                    f"(the job's runtime would be exceeded); {kept}")
            t_chunk = time.perf_counter()
            ns = min(n_seq, n_chunk - c0)
            ctx.clear()
            # llama-perplexity splits a chunk into n_batch pieces when n_ctx > n_batch
            piece = min(n_ctx, proto.n_batch)
            for p0 in range(0, n_ctx, piece):
                p1 = min(n_ctx, p0 + piece)
                toks, pos, seqs, mask = [], [], [], []
                for s in range(ns):
                    base = (c0 + s) * n_ctx
                    t = used[base + p0: base + p1].copy()
                    if add_bos and p0 == 0:
                        t[0] = bos
                    toks.append(t)
                    pos.append(chunk_pos[p0:p1])
                    seqs.append(np.full(p1 - p0, s, dtype=np.int32))
                    mask.append((chunk_pos[p0:p1] >= first).astype(np.int8))
                n_out = ctx.decode(np.concatenate(toks), np.concatenate(pos), np.concatenate(seqs),
                                   np.concatenate(mask))
                if p1 < n_ctx:
                    continue
                all_logits = ctx.logits(n_out)
                per_seq = n_ctx - first  # output rows per sequence (pieces before `first` emit none)
                if piece < n_ctx:
                    raise NotImplementedError("n_batch < n_ctx: give n_batch >= n_ctx")
                scorer.score_group(all_logits, c0, ns, per_seq)
            if ckpt is not None:
                if writer is not None:
                    writer.flush()  # the store first: on resume the shorter of the two decides
                ckpt.append(c0, ns, out)
            done = c0 + ns
            chunk_s = max(chunk_s, time.perf_counter() - t_chunk)
            if progress_every and (done // n_seq) % max(1, progress_every // n_seq) == 0:
                so_far = nll[: done * rows]
                log.info("[%d/%d chunks] PPL so far %.4f (%.1f s)", done, n_chunk,
                         math.exp(so_far.mean()), time.perf_counter() - t_start)
        ok = True
    finally:
        scorer.close()
        if writer is not None:
            writer.close(ok=ok)
        if ckpt is not None:
            ckpt.close(discard=ok)
    out["n_chunks"] = n_chunk
    out["n_tokens_corpus"] = int(len(tokens))
    out["seconds"] = time.perf_counter() - t_start
    out["tokens_sha256"] = tokens_sha256
    return out


class _Scorer:
    """Turns each decoded chunk group's logits into per-token NLL (and KLD against the reference,
    or the quantized rows of a new reference) in blocks of a few rows spread over n_threads.

    Why blocks: a chunk's scored logits are (n_ctx/2 x n_vocab) float32, 50 MB for a 49k vocab;
    the dozen elementwise passes below over arrays that size run from RAM, while over a few rows
    (a few MB) they stay in cache. numpy releases the GIL in these loops, so the blocks also run
    in parallel while llama_decode is idle, as llama-perplexity's worker threads do. The figures are
    bit-identical to a whole-chunk computation: every row is computed by the same operations.
    """

    def __init__(self, tokens, proto: Protocol, out: dict, reference, writer, *, n_threads: int = 0,
                 block_bytes: int = 2 << 20):
        from concurrent.futures import ThreadPoolExecutor

        self.tokens, self.proto, self.out = tokens, proto, out
        self.reference, self.writer = reference, writer
        self.n_threads = max(1, n_threads or len(os.sched_getaffinity(0)))
        self.block_bytes = block_bytes
        self.pool = ThreadPoolExecutor(self.n_threads) if self.n_threads > 1 else None
        self._q = self._meta = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def score_group(self, all_logits: np.ndarray, c0: int, ns: int, per_seq: int) -> None:
        rows, n_ctx, first = self.proto.rows_per_chunk, self.proto.n_ctx, self.proto.first
        n_vocab = all_logits.shape[1]
        block = max(1, min(rows, self.block_bytes // (4 * n_vocab)))
        if self.writer is not None and (self._q is None or self._q.shape != (ns, rows, n_vocab)):
            self._q = np.empty((ns, rows, n_vocab), dtype="<u2")
            self._meta = np.empty((ns, rows, 2), dtype="<f4")
        jobs = []
        for s in range(ns):
            c = c0 + s
            lg = all_logits[s * per_seq: s * per_seq + rows]
            target = self.tokens[c * n_ctx + first + 1: (c + 1) * n_ctx]
            ref = self.reference.chunk(c) if self.reference is not None else None
            for r0 in range(0, rows, block):
                r1 = min(rows, r0 + block)
                jobs.append((s, c, lg, target, ref, r0, r1))
        if self.pool is None:
            for j in jobs:
                self._block(*j)
        else:
            for f in [self.pool.submit(self._block, *j) for j in jobs]:
                f.result()
        if self.writer is not None:
            for s in range(ns):
                self.writer.add_quantized(self._meta[s], self._q[s])

    def _block(self, s, c, lg, target, ref, r0, r1) -> None:
        x = lg[r0:r1]
        t = target[r0:r1]
        idx = np.arange(r1 - r0)
        sl = slice(c * self.proto.rows_per_chunk + r0, c * self.proto.rows_per_chunk + r1)
        m, lse = log_softmax_rows(x)
        self.out["nll"][sl] = lse - x[idx, t]
        if self.writer is not None:
            self._meta[s, r0:r1], self._q[s, r0:r1] = _quantize_rows(x, m, lse)
        if ref is not None:
            meta, q = ref
            _kld_rows(x, lse, t, meta[r0:r1], q[r0:r1], self.out, sl)


def _quantize_rows(logits: np.ndarray, m: np.ndarray, lse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log-probs as uint16 over [max(min, max - 16), max] with a per-row scale (llama.cpp's scheme)."""
    lp_max = (m - lse).astype(np.float32)
    lp_min = (logits.min(axis=1) - lse).astype(np.float32)
    lo = np.maximum(lp_min, lp_max - LOG_PROB_FLOOR)
    scale = np.maximum((lp_max - lo) / 65535.0, np.float32(1e-30)).astype(np.float32)
    buf = np.subtract(logits, lse.astype(np.float32)[:, None])
    buf -= lo[:, None]
    buf /= scale[:, None]
    np.rint(buf, out=buf)
    np.clip(buf, 0, 65535, out=buf)
    return np.stack([scale, lo], axis=1), buf.astype("<u2")


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


# -- statistics --------------------------------------------------------------------------------
PERCENTILES = [("max", 1.0), ("p99_9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90),
               ("median", 0.5), ("p10", 0.10), ("p5", 0.05), ("p1", 0.01), ("p0_1", 0.001), ("min", 0.0)]


def _mean_err(x: np.ndarray) -> tuple[float, float]:
    n = len(x)
    mean = float(x.mean())
    err = float(math.sqrt(max(float((x * x).mean()) - mean * mean, 0.0) / (n - 1))) if n > 1 else float("nan")
    return mean, err


def summarize(res: dict) -> dict:
    """The figures llama-perplexity prints, with their uncertainties."""
    nll = res["nll"]
    n = len(nll)
    mean_nll, err_nll = _mean_err(nll)
    ppl = math.exp(mean_nll)
    s = {"n_tokens": n, "n_chunks": res["n_chunks"], "ppl": ppl, "ppl_err": ppl * err_nll,
         "mean_nll": mean_nll, "mean_nll_err": err_nll}
    if "kld" not in res:
        return s
    nb = res["nll_base"]
    mean_b, err_b = _mean_err(nb)
    ppl_b = math.exp(mean_b)
    d = nb - nll  # ln(PPL(Q)/PPL(base)) per token is nll - nll_base
    mean_d, err_d = _mean_err(-d)
    cov = float(np.mean((nll - mean_nll) * (nb - mean_b)))
    var_q, var_b = float(nll.var()), float(nb.var())
    cor = cov / math.sqrt(var_q * var_b) if var_q > 0 and var_b > 0 else float("nan")
    diff_err = math.sqrt(max(ppl**2 * err_nll**2 + ppl_b**2 * err_b**2
                             - 2 * ppl * ppl_b * cov / (n - 1), 0.0))
    kld = res["kld"]
    kld_mean, kld_err = _mean_err(kld)
    dp = res["dp"]
    dp_mean, dp_err = _mean_err(dp)
    rms = math.sqrt(float((dp * dp).mean()))
    rms_err = float(np.sqrt(((dp * dp) ** 2).mean() - (dp * dp).mean() ** 2) / math.sqrt(n - 1)) / (2 * rms) if rms > 0 else 0.0
    same = float(res["same_top"].mean())
    s.update({
        "ppl_base": ppl_b, "ppl_base_err": ppl_b * err_b, "cor_ln_ppl": cor,
        "ln_ppl_ratio": mean_d, "ln_ppl_ratio_err": err_d,
        "ppl_ratio": math.exp(mean_d), "ppl_ratio_err": math.exp(mean_d) * err_d,
        "ppl_diff": ppl - ppl_b, "ppl_diff_err": diff_err,
        "kld_mean": kld_mean, "kld_mean_err": kld_err,
        "dp_mean": dp_mean, "dp_mean_err": dp_err, "dp_rms": rms, "dp_rms_err": rms_err,
        "same_top": same, "same_top_err": math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else float("nan"),
    })
    for name, q in PERCENTILES:
        s[f"kld_{name}"] = float(np.quantile(kld, q))
        s[f"dp_{name}"] = float(np.quantile(dp, q))
    return s


def metric_rows(summary: dict, n_ctx: int) -> list[dict]:
    """Dataset rows for a summary (units: PPL and ratios are pure numbers, KLD in nats, Δp in %)."""
    from ..dataset import metric_row

    n = summary["n_tokens"]
    rows = [metric_row("ppl", summary["ppl"], "1", stderr=summary["ppl_err"], n=n, n_ctx=n_ctx, higher_is_better=False)]
    if "kld_mean" not in summary:
        return rows
    R = lambda *a, **k: rows.append(metric_row(*a, n=n, n_ctx=n_ctx, **k))  # noqa: E731
    R("ppl_base", summary["ppl_base"], "1", stderr=summary["ppl_base_err"], higher_is_better=False)
    R("ppl_ratio", summary["ppl_ratio"], "1", stderr=summary["ppl_ratio_err"], higher_is_better=False)
    R("ln_ppl_ratio", summary["ln_ppl_ratio"], "nats", stderr=summary["ln_ppl_ratio_err"], higher_is_better=False)
    R("ppl_diff", summary["ppl_diff"], "1", stderr=summary["ppl_diff_err"], higher_is_better=False)
    R("cor_ln_ppl", summary["cor_ln_ppl"], "1", higher_is_better=True)
    R("kld_mean", summary["kld_mean"], "nats", stderr=summary["kld_mean_err"], higher_is_better=False)
    for name, _ in PERCENTILES:
        R(f"kld_{name}", summary[f"kld_{name}"], "nats", higher_is_better=False)
    R("delta_p_mean", 100 * summary["dp_mean"], "%", stderr=100 * summary["dp_mean_err"], higher_is_better=True)
    R("delta_p_rms", 100 * summary["dp_rms"], "%", stderr=100 * summary["dp_rms_err"], higher_is_better=False)
    for name, _ in PERCENTILES:
        R(f"delta_p_{name}", 100 * summary[f"dp_{name}"], "%")
    R("same_top_token", 100 * summary["same_top"], "%", stderr=100 * summary["same_top_err"], higher_is_better=True)
    return rows
