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

Long documents (n_ctx > n_batch, e.g. a model's trained 32K context): a chunk is decoded in n_batch
pieces, as llama-perplexity does, but each piece's output rows are scored (and stored, or compared
with the stored reference rows) as soon as it is decoded. llama-perplexity instead gathers every
scored row of the chunk before scoring (n_ctx/2 x n_vocab float32, plus n_ctx x n_vocab uint16 when
it writes its KL base): 16 + 16 GiB for a 262k vocabulary at 32K. Here memory is bounded by one
piece (n_batch rows x n_vocab) whatever the context; the reference store is read and written a
piece at a time (pread/pwrite, not a memory map, so the store's pages never count as the pass's
resident memory). Figures are identical either way: every row is computed by the same operations.
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

from ..errors import ConfigError, DataError
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

    @property
    def piece(self) -> int:
        """Tokens of one chunk per decode call: the whole chunk, or n_batch of it (long documents)."""
        return min(self.n_ctx, self.n_batch)

    @property
    def context_tokens(self) -> int:
        """The llama.cpp context a pass needs: n_seq chunks side by side (llama-perplexity's -c)."""
        return self.n_seq * self.n_ctx

    @property
    def batch_tokens(self) -> int:
        """Tokens per decode call: n_seq whole chunks, or one piece of a long chunk."""
        return self.n_seq * self.piece


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


# -- the passes a config asks for ---------------------------------------------------------------
TRAINED = "trained"  # a context label: the model's trained context, read from its GGUF in the job


def _ctx_label(n_ctx) -> str:
    return TRAINED if n_ctx in (None, 0, TRAINED) else f"n{int(n_ctx)}"


def _long(p: dict) -> dict:
    return p.get("long") or {}


def passes(cfg: dict) -> list[tuple[str, str]]:
    """(corpus, context label) of every pass: each evaluation corpus at ``n_ctx`` (label ``n512``),
    and each long-document corpus at the long context (``trained``, or ``n32768``)."""
    p = cfg["measures"]["perplexity"]
    short = f"n{int(p['n_ctx'])}"
    out = [(c, short) for c in dict.fromkeys([p["corpus"], *(p.get("corpora") or [])])]
    lg = _long(p)
    if lg.get("enabled", False):
        label = _ctx_label(lg.get("n_ctx"))
        for c in dict.fromkeys(lg.get("corpora") or []):
            if (c, label) in out:
                raise ConfigError(f"measures.perplexity.long: corpus {c} at {label} is already an evaluation pass "
                                  "(measures.perplexity.corpora at n_ctx); give the long pass another context")
            out.append((c, label))
    from ..corpora import parse_name

    for c, _ in out:  # the name is every row's subset: domain and language must be readable from it
        parse_name(c)
    return out


def family_passes(cfg: dict, family: str) -> tuple[list[tuple[str, str]], list[dict]]:
    """The passes a family takes, and those it cannot (with the reason): a chat corpus needs a chat
    model (``families.<f>.chat``), whose template renders it."""
    from ..corpora import is_chat

    corpora = cfg.get("corpora") or {}
    chat = cfg["families"][family].get("chat", True)
    run, skipped = [], []
    for corpus, ctx in passes(cfg):
        if corpus not in corpora:
            raise ConfigError(f"measures.perplexity: corpus {corpus!r} is not defined under `corpora:` "
                              f"(known: {sorted(corpora)})")
        if is_chat(corpora[corpus]) and not chat:
            skipped.append({"corpus": corpus, "ctx": ctx, "reason": f"{family} is not a chat model (families.{family}."
                            "chat: false): a chat-templated corpus does not apply"})
        else:
            run.append((corpus, ctx))
    return run, skipped


def pass_settings(cfg: dict, corpus: str, ctx: str) -> dict:
    """What one pass (corpus, context label) runs with: its part of the point's spec."""
    p = cfg["measures"]["perplexity"]
    corpora = cfg.get("corpora") or {}
    if corpus not in corpora:
        raise ConfigError(f"measures.perplexity: corpus {corpus!r} is not defined under `corpora:` "
                          f"(known: {sorted(corpora)})")
    lg = _long(p)
    if lg.get("enabled", False) and corpus in (lg.get("corpora") or []) and ctx == _ctx_label(lg.get("n_ctx")):
        n_ctx = TRAINED if ctx == TRAINED else int(lg["n_ctx"])
        n_batch, max_chunks = int(lg.get("n_batch", 512)), int(lg.get("max_chunks", 1))
    elif ctx == f"n{int(p['n_ctx'])}" and corpus in [p["corpus"], *(p.get("corpora") or [])]:
        n_ctx, n_batch, max_chunks = int(p["n_ctx"]), int(p["n_batch"]), int(p["max_chunks"])
    else:
        raise ConfigError(f"measures.perplexity: no pass of corpus {corpus!r} at context {ctx!r} "
                          f"(the passes: {passes(cfg)})")
    ov = p.get("overlap") or {}
    return {"corpus": corpus, "source": corpora[corpus], "ctx": ctx, "n_ctx": n_ctx, "n_batch": n_batch,
            "max_chunks": max_chunks, "kld": bool(p.get("kld", True)),
            "overlap": {"ngram": int(ov.get("ngram", OVERLAP_NGRAM)), "flag_pct": float(ov.get("flag_pct", OVERLAP_FLAG_PCT))}}


def pass_config(cfg: dict, corpus: str, ctx: str) -> dict:
    """The config with ``measures.perplexity`` narrowed to one pass, for that pass's spec key and
    manifest: adding a corpus to the list, or changing another pass, re-runs nothing else."""
    out = dict(cfg)
    out["measures"] = {**cfg["measures"], "perplexity": {"enabled": True, **pass_settings(cfg, corpus, ctx)}}
    return out


def pass_name(corpus: str, ctx: str) -> str:
    return f"{corpus}-{ctx}"


def protocol(settings: dict, n_ctx_train: int | None = None, source: str = "model") -> Protocol:
    """The pass's protocol; a ``trained`` context is the model's (GGUF ``<arch>.context_length``)."""
    n_ctx = settings["n_ctx"]
    if n_ctx == TRAINED:
        if not n_ctx_train:
            raise DataError(f"{source}: the GGUF records no trained context (<arch>.context_length); "
                            f"give measures.perplexity.long.n_ctx for corpus {settings['corpus']}")
        n_ctx = int(n_ctx_train)
    return Protocol(n_ctx=int(n_ctx), n_batch=int(settings["n_batch"]), max_chunks=int(settings["max_chunks"]))


# -- calibration overlap -----------------------------------------------------------------------
# Token n-grams, n = 13: the length GPT-3's contamination study used for words (Brown et al. 2020,
# appendix C), here over the model's own tokens so that scripts without word spaces count alike.
# Measured here (SmolLM2 tokens): two disjoint halves of the Debian Reference share 0.05-0.5 % of
# their 13-grams, a text with itself 100 %, alternate pydoc topics (which repeat whole sections) 55 %.
OVERLAP_NGRAM = 13
OVERLAP_FLAG_PCT = 1.0


def calibration_tokens(ctx, text: str, settings: dict | None, parse_special: bool = False) -> np.ndarray:
    """The tokens an importance matrix was computed from: llama-imatrix reads the first
    chunks x n_ctx tokens of its text (all of it when the settings are unknown)."""
    toks = ctx.tokenize(text, add_special=True, parse_special=parse_special or bool((settings or {}).get("parse_special")))
    if settings and settings.get("chunks") and settings.get("n_ctx"):
        toks = toks[: int(settings["chunks"]) * int(settings["n_ctx"])]
    return toks


def overlap_rows(eval_tokens: np.ndarray, calibrations: list[dict], *, corpus: str, n_ctx: int, ngram: int,
                 flag_pct: float) -> tuple[list[dict], list[dict]]:
    """Rows for the share of this pass's evaluation n-grams found in the rung's calibration text,
    and the flag (1 when the share reaches flag_pct); plus a record per calibration corpus.

    ``calibrations``: [{"corpus": name, "tokens": array} or {"corpus": None, "reason": why unknown}].
    """
    from ..corpora import ngram_overlap
    from ..dataset import metric_row

    if not calibrations:
        return [], []
    records, shares, n_eval = [], [], 0
    for cal in calibrations:
        if cal.get("tokens") is None:
            rec = {"corpus": cal.get("corpus"), "reason": cal["reason"]}
            records.append(rec)
            return [metric_row("calibration_overlap", None, "%", subset=corpus, n_ctx=n_ctx, status="absent",
                               status_reason=cal["reason"])], records
        share, n_eval, shared = ngram_overlap(eval_tokens, cal["tokens"], ngram)
        if n_eval == 0:
            raise DataError(f"corpus {corpus}: fewer than {ngram} evaluation tokens, no n-gram to compare")
        records.append({"corpus": cal["corpus"], "ngram": ngram, "shared_ngrams": shared, "eval_ngrams": n_eval,
                        "calibration_tokens": int(len(cal["tokens"])), "share_pct": 100 * share})
        shares.append(share)
    pct = 100 * max(shares)
    flagged = pct >= flag_pct
    rows = [metric_row("calibration_overlap", pct, "%", n=n_eval, subset=corpus, n_ctx=n_ctx, higher_is_better=False),
            metric_row("calibration_overlap_flag", 1.0 if flagged else 0.0, "1", n=n_eval, subset=corpus,
                       n_ctx=n_ctx, higher_is_better=False)]
    return rows, records


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
    the next run with the same head (header + tokens), continues after its last whole chunk.

    Rows arrive a piece at a time: a chunk's uint16 rows are appended as they come, its small
    (scale, lo) block (rows x 8 bytes, reserved at the chunk's start) is written when the chunk
    ends, so a long chunk never sits in memory whole."""

    def __init__(self, path: str | os.PathLike, header: dict, tokens: np.ndarray, *, resumable: bool = False):
        self.path = Path(path)
        h = json.dumps(header, sort_keys=True).encode()
        self.head = MAGIC + struct.pack("<Q", len(h)) + h + tokens.astype("<i4").tobytes()
        self.rows, self.n_vocab = int(header["rows_per_chunk"]), int(header["n_vocab"])
        self.chunk_bytes = _chunk_bytes(self.rows, self.n_vocab)
        self.predicted_bytes = store_bytes(int(header["n_chunks"]), self.n_vocab, Protocol(n_ctx=int(header["n_ctx"])), len(h))
        self.resumable = resumable
        self.tmp = self.path.with_name(f".{self.path.name}.partial")
        check_room(self.path, self.predicted_bytes - (self.tmp.stat().st_size if self.tmp.exists() else 0))
        self.f = None
        self._chunk = None  # (chunk index, file offset of its (scale, lo) block, rows written, that block)

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
        self._next = keep_chunks

    def add_rows(self, c: int, r0: int, meta: np.ndarray, q: np.ndarray) -> None:
        """Rows r0.. of chunk c: (n, 2) float32 [scale, lo] and (n, n_vocab) uint16 (`_quantize_rows`).
        Chunks and rows come in order; a chunk is complete when its last row is written."""
        if self._chunk is None:
            if c != self._next or r0 != 0:
                raise RuntimeError(f"reference store: chunk {c} row {r0} written out of order (next: chunk {self._next})")
            off = self.f.tell()
            self.f.write(bytes(self.rows * 8))  # the (scale, lo) block, filled in at the chunk's end
            self._chunk = [c, off, 0, np.empty((self.rows, 2), dtype="<f4")]
        cc, off, done, block = self._chunk
        n = len(q)
        if cc != c or r0 != done or done + n > self.rows:
            raise RuntimeError(f"reference store: chunk {c} rows {r0}..{r0 + n} written out of order")
        block[r0:r0 + n] = meta
        self.f.write(np.ascontiguousarray(q, dtype="<u2").data)  # a buffer, not a copy
        self._chunk[2] = done + n
        if done + n == self.rows:
            self.f.flush()
            os.pwrite(self.f.fileno(), block.tobytes(), off)
            self._chunk = None
            self._next = c + 1

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
    """Reads the store a range of rows at a time with pread: RAM holds the rows being scored, never
    the file (a memory map's touched pages would count as the pass's resident memory, 8 GiB for
    one 32K chunk of a 262k-vocab model)."""

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
        self._fd = os.open(self.path, os.O_RDONLY)
        self._tokens = None

    def _pread(self, dtype: str, count: int, offset: int) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        view = memoryview(out).cast("B")
        got = 0
        while got < len(view):
            n = os.preadv(self._fd, [view[got:]], offset + got)
            if n <= 0:
                raise DataError(f"{self.path}: short read at byte {offset + got} (file changed while read?)")
            got += n
        return out

    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = self._pread("<i4", self.n_chunks * self.n_ctx, self.tok_off)
        return self._tokens

    def rows_of(self, c: int, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows r0..r1 of chunk c: (n, 2) float32 [scale, lo] and (n, n_vocab) uint16."""
        off = self.data_off + c * self.chunk_bytes
        meta = self._pread("<f4", (r1 - r0) * 2, off + r0 * 8).reshape(r1 - r0, 2)
        q = self._pread("<u2", (r1 - r0) * self.n_vocab, off + self.rows * 8 + r0 * self.n_vocab * 2)
        return meta, q.reshape(r1 - r0, self.n_vocab)

    def chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        return self.rows_of(c, 0, self.rows)

    def close(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.close()

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
        checkpoint: str | os.PathLike | None = None, resume_key: str = "",
        parse_special: bool = False) -> dict:
    """One pass over the corpus with a RawContext built with n_ctx = proto.context_tokens,
    n_batch = proto.batch_tokens, n_seq_max = proto.n_seq.

    Returns per-token arrays summarised by `summarize` (kept in float64, a few MB for wikitext-2).
    With `checkpoint` (a file path that is not a Snakemake output) the pass is resumable: the
    finished chunk groups (and the reference store's `.partial` file) survive a stop, and the next
    call with the same `resume_key` continues from them, with results bit-identical to one
    uninterrupted pass (chunk groups are decoded with the same companions either way).
    `parse_special` tokenizes special-token text (a chat template's markers) as the special tokens
    it names; llama-perplexity never does (its corpora are plain text).
    """
    t_start = time.perf_counter()
    tokens = ctx.tokenize(text, add_special=True, parse_special=parse_special)
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
    piece = proto.piece
    chunk_pos = np.arange(n_ctx, dtype=np.int32)
    scored_mask = (chunk_pos >= first).astype(np.int8)  # llama-perplexity asks logits from `first` on
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
            # llama-perplexity decodes a chunk in n_batch pieces when n_ctx > n_batch; each piece's
            # rows are scored here before the next decode overwrites the logits
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
                    mask.append(scored_mask[p0:p1])
                n_out = ctx.decode(np.concatenate(toks), np.concatenate(pos), np.concatenate(seqs),
                                   np.concatenate(mask))
                lo = max(p0, first)
                r0, r1 = lo - first, min(p1 - first, rows)  # position n_ctx-1 predicts nothing
                if r1 > r0:
                    scorer.score_piece(ctx.logits(n_out), c0, ns, r0, r1, per_seq=p1 - lo)
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
        """Every scored row of `ns` whole chunks decoded together (per_seq output rows each)."""
        self.score_piece(all_logits, c0, ns, 0, self.proto.rows_per_chunk, per_seq)

    def score_piece(self, all_logits: np.ndarray, c0: int, ns: int, r0: int, r1: int, per_seq: int) -> None:
        """Rows r0..r1 of chunks c0..c0+ns-1: `all_logits` holds `per_seq` output rows per sequence
        (sequence after sequence), the first r1 - r0 of which are scored."""
        n_ctx, first = self.proto.n_ctx, self.proto.first
        n = r1 - r0
        n_vocab = all_logits.shape[1]
        block = max(1, min(n, self.block_bytes // (4 * n_vocab)))
        if self.writer is not None and (self._q is None or self._q.shape != (ns, n, n_vocab)):
            self._q = np.empty((ns, n, n_vocab), dtype="<u2")
            self._meta = np.empty((ns, n, 2), dtype="<f4")
        jobs = []
        for s in range(ns):
            c = c0 + s
            lg = all_logits[s * per_seq: s * per_seq + n]
            target = self.tokens[c * n_ctx + first + 1 + r0: c * n_ctx + first + 1 + r1]
            ref = self.reference.rows_of(c, r0, r1) if self.reference is not None else None
            for b0 in range(0, n, block):
                jobs.append((s, c, r0, lg, target, ref, b0, min(n, b0 + block)))
        if self.pool is None:
            for j in jobs:
                self._block(*j)
        else:
            for f in [self.pool.submit(self._block, *j) for j in jobs]:
                f.result()
        if self.writer is not None:
            for s in range(ns):
                self.writer.add_rows(c0 + s, r0, self._meta[s], self._q[s])

    def _block(self, s, c, r0, lg, target, ref, b0, b1) -> None:
        x = lg[b0:b1]
        t = target[b0:b1]
        idx = np.arange(b1 - b0)
        base = c * self.proto.rows_per_chunk + r0
        sl = slice(base + b0, base + b1)
        m, lse = log_softmax_rows(x)
        self.out["nll"][sl] = lse - x[idx, t]
        if self.writer is not None:
            self._meta[s, b0:b1], self._q[s, b0:b1] = _quantize_rows(x, m, lse)
        if ref is not None:
            meta, q = ref
            _kld_rows(x, lse, t, meta[b0:b1], q[b0:b1], self.out, sl)


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


def metric_rows(summary: dict, n_ctx: int, subset: str | None = None) -> list[dict]:
    """Dataset rows for a summary (units: PPL and ratios are pure numbers, KLD in nats, Δp in %);
    ``subset`` is the corpus (``<domain>-<language>[.<part>]``, quantladder.corpora)."""
    from ..dataset import metric_row

    n = summary["n_tokens"]
    rows = [metric_row("ppl", summary["ppl"], "1", stderr=summary["ppl_err"], n=n, n_ctx=n_ctx, subset=subset,
                       higher_is_better=False)]
    if "kld_mean" not in summary:
        return rows
    R = lambda *a, **k: rows.append(metric_row(*a, n=n, n_ctx=n_ctx, subset=subset, **k))  # noqa: E731
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
