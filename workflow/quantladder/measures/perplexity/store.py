"""The files a pass writes beside its outputs: the reference rung's log-probabilities (read back
by every rung's KLD pass) and the checkpoint of a pass's finished chunks (to resume from).

The reference store holds, per scored position, the log-probabilities as uint16 over
[max(min, max-16), max] with a per-row scale and offset (llama.cpp's KL base scheme). It is read
and written a piece at a time (pread/pwrite, not a memory map, so the store's pages never count as
the pass's resident memory).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ...errors import DataError
from .passes import Protocol

MAGIC = b"QLLOGIT1"
LOG_PROB_FLOOR = 16.0  # nats below the top log-prob that are kept (llama.cpp's range)


# -- where a pass's tokens and scored rows lie -------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """The sequences a pass decodes, laid end to end: sequence ``c`` has ``lengths[c]`` tokens and
    its logits at positions ``firsts[c]`` .. ``lengths[c] - 2`` are scored (each predicts the next
    token). The protocol's chunks are the case where every sequence is n_ctx tokens scored from
    n_ctx/2 (:meth:`fixed`); teacher-forced replies are prompt + reply, scored over the reply
    (``first`` = the last prompt position). One layout for the store, the checkpoint and the scorer,
    so that both kinds of pass are the same code."""

    lengths: tuple[int, ...]
    firsts: tuple[int, ...]

    @classmethod
    def fixed(cls, n_chunks: int, proto: Protocol) -> "Layout":
        return cls((proto.n_ctx,) * n_chunks, (proto.first,) * n_chunks)

    @property
    def n_seqs(self) -> int:
        return len(self.lengths)

    def rows(self, c: int) -> int:
        return self.lengths[c] - 1 - self.firsts[c]

    @cached_property
    def tok_start(self) -> tuple[int, ...]:
        return _starts(self.lengths)

    @cached_property
    def row_start(self) -> tuple[int, ...]:
        return _starts([self.rows(c) for c in range(self.n_seqs)])

    @property
    def n_tokens(self) -> int:
        return self.tok_start[-1]

    @property
    def n_rows(self) -> int:
        return self.row_start[-1]

    def targets(self, tokens: np.ndarray, c: int, r0: int, r1: int) -> np.ndarray:
        """The tokens rows r0..r1 of sequence c predict."""
        at = self.tok_start[c] + self.firsts[c] + 1
        return tokens[at + r0: at + r1]

    def header(self) -> dict:
        """What a store's header records of a ragged layout (a fixed one is its n_ctx and first)."""
        return {"lengths": list(self.lengths), "firsts": list(self.firsts)}

    @classmethod
    def from_header(cls, h: dict) -> "Layout":
        if "lengths" in h:
            return cls(tuple(int(x) for x in h["lengths"]), tuple(int(x) for x in h["firsts"]))
        n_ctx = int(h["n_ctx"])
        return cls((n_ctx,) * int(h["n_chunks"]), (n_ctx - 1 - int(h["rows_per_chunk"]),) * int(h["n_chunks"]))


def _starts(sizes) -> tuple[int, ...]:
    out = [0]
    for n in sizes:
        out.append(out[-1] + int(n))
    return tuple(out)


def _row_bytes(n_vocab: int) -> int:
    """One scored row in the store: a float32 (scale, lo) pair and n_vocab uint16 log-probs."""
    return 8 + 2 * n_vocab


# -- the reference log-prob store --------------------------------------------------------------
def store_bytes(n_chunks: int, n_vocab: int, proto: Protocol, header_bytes: int = 0) -> int:
    """Exact size of a reference-logit file: magic + header + tokens + per row (scale, lo, n_vocab uint16).

    Grows with the corpus and the vocab like llama.cpp's base file (the same bytes per row): a
    wikitext-2 pass at n_ctx 512 of a 150k-vocab model (~580 chunks) is ~42 GiB; RAM stays at one
    chunk group whatever the size.
    """
    return layout_bytes(Layout.fixed(n_chunks, proto), n_vocab, header_bytes)


def layout_bytes(layout: Layout, n_vocab: int, header_bytes: int = 0) -> int:
    """Exact size of a store of any layout: magic + header + tokens + its rows."""
    return 16 + header_bytes + 4 * layout.n_tokens + layout.n_rows * _row_bytes(n_vocab)


def check_room(path: str | os.PathLike, need: int) -> None:
    """Refuse before the pass, not hours into it, when the file cannot fit where it is written."""
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
        self.layout, self.n_vocab = Layout.from_header(header), int(header["n_vocab"])
        self.row_bytes = _row_bytes(self.n_vocab)
        self.predicted_bytes = layout_bytes(self.layout, self.n_vocab, len(h))
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
        rows = (self.tmp.stat().st_size - len(self.head)) // self.row_bytes
        return sum(1 for c in range(self.layout.n_seqs) if self.layout.row_start[c + 1] <= rows)

    def open(self, keep_chunks: int = 0) -> None:
        self.f = _open_after(self.tmp, self.head, self.layout.row_start[keep_chunks] * self.row_bytes)
        self._next = keep_chunks

    def add_rows(self, c: int, r0: int, meta: np.ndarray, q: np.ndarray) -> None:
        """Rows r0.. of chunk c: (n, 2) float32 [scale, lo] and (n, n_vocab) uint16 (`quantize_rows`).
        Chunks and rows come in order; a chunk is complete when its last row is written."""
        rows = self.layout.rows(c)
        if self._chunk is None:
            if c != self._next or r0 != 0:
                raise RuntimeError(f"reference store: chunk {c} row {r0} written out of order (next: chunk {self._next})")
            off = self.f.tell()
            self.f.write(bytes(rows * 8))  # the (scale, lo) block, filled in at the chunk's end
            self._chunk = [c, off, 0, np.empty((rows, 2), dtype="<f4")]
        cc, off, done, block = self._chunk
        n = len(q)
        if cc != c or r0 != done or done + n > rows:
            raise RuntimeError(f"reference store: chunk {c} rows {r0}..{r0 + n} written out of order")
        block[r0:r0 + n] = meta
        self.f.write(np.ascontiguousarray(q, dtype="<u2").data)  # a buffer, not a copy
        self._chunk[2] = done + n
        if done + n == rows:
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
        self.layout = Layout.from_header(h)
        self.n_vocab, self.n_chunks = int(h["n_vocab"]), self.layout.n_seqs
        self.n_ctx = int(h["n_ctx"]) if "n_ctx" in h else None  # None: a ragged layout (teacher-forced)
        self.tok_off = 16 + hlen
        self.data_off = self.tok_off + 4 * self.layout.n_tokens
        self.row_bytes = _row_bytes(self.n_vocab)
        expect = self.data_off + self.layout.n_rows * self.row_bytes
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
            self._tokens = self._pread("<i4", self.layout.n_tokens, self.tok_off)
        return self._tokens

    def rows_of(self, c: int, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows r0..r1 of chunk c: (n, 2) float32 [scale, lo] and (n, n_vocab) uint16."""
        off = self.data_off + self.layout.row_start[c] * self.row_bytes
        meta = self._pread("<f4", (r1 - r0) * 2, off + r0 * 8).reshape(r1 - r0, 2)
        q = self._pread("<u2", (r1 - r0) * self.n_vocab, off + self.layout.rows(c) * 8 + r0 * self.n_vocab * 2)
        return meta, q.reshape(r1 - r0, self.n_vocab)

    def chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        return self.rows_of(c, 0, self.layout.rows(c))

    def close(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.close()

    def check_layout(self, tokens: np.ndarray, n_vocab: int, layout: Layout) -> None:
        """A teacher-forced pass reads the store of the same sequences, token for token."""
        problems = []
        if self.n_vocab != n_vocab:
            problems.append(f"vocab {self.n_vocab} != {n_vocab}")
        if self.layout != layout:
            problems.append("other sequences or scored spans")
        elif not np.array_equal(self.tokens(), tokens):
            problems.append("the token stream differs (other replies or another tokenizer)")
        if problems:
            raise DataError(f"{self.path}: reference log-probs do not match this run: " + "; ".join(problems))

    def check_compatible(self, tokens: np.ndarray, n_vocab: int, proto: Protocol, n_chunk: int) -> None:
        h = self.header
        problems = []
        if self.n_ctx != proto.n_ctx:
            problems.append(f"n_ctx {self.n_ctx} != {proto.n_ctx}")
        if self.n_vocab != n_vocab:
            problems.append(f"vocab {self.n_vocab} != {n_vocab}")
        if self.n_chunks < n_chunk:
            problems.append(f"{self.n_chunks} chunks stored, {n_chunk} needed")
        elif self.n_ctx is not None and not np.array_equal(self.tokens()[: n_chunk * proto.n_ctx],
                                                           tokens[: n_chunk * proto.n_ctx]):
            problems.append("the token stream differs (another corpus or tokenizer)")
        if problems:
            raise DataError(f"{self.path}: reference logits do not match this run: " + "; ".join(problems))


def quantize_rows(logits: np.ndarray, m: np.ndarray, lse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


# -- the checkpoint of a pass ----------------------------------------------------------------
def checkpoint_path(output: str | os.PathLike) -> Path:
    """Where a rule's pass keeps its finished chunks: beside its output, under a name that is not
    an output (Snakemake deletes a failed job's outputs; this must survive to be resumed from)."""
    output = Path(output)
    return output.with_name(f".{output.name}.chunks.partial")


class Checkpoint:
    """The per-token results of a pass, appended after each chunk group, so that a pass stopped by
    its time budget (or killed) resumes where it stopped instead of starting over: nothing measured
    is lost. Its identity (the caller's key, e.g. the point's spec hash, the token stream, the
    protocol and the reference) must match, else it is ignored and overwritten."""

    MAGIC = b"QLCKPT01"

    def __init__(self, path: str | os.PathLike, identity: dict, fields: list[tuple[str, str]], layout: Layout):
        self.path = Path(path)
        h = json.dumps(identity, sort_keys=True).encode()
        self.head = self.MAGIC + struct.pack("<Q", len(h)) + h
        self.fields, self.layout = fields, layout
        self.row_bytes = sum(np.dtype(d).itemsize for _, d in fields)
        self.f = None

    def _rows(self, c: int) -> slice:
        return slice(self.layout.row_start[c], self.layout.row_start[c + 1])

    def load(self, out: dict) -> int:
        """Fill `out` from the file; returns the number of whole chunks it holds."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        if not data.startswith(self.head):
            return 0
        off, c = len(self.head), 0
        while c < self.layout.n_seqs and off + self.layout.rows(c) * self.row_bytes <= len(data):
            rows = self.layout.rows(c)
            for name, dt in self.fields:
                out[name][self._rows(c)] = np.frombuffer(data, dtype=dt, count=rows, offset=off)
                off += rows * np.dtype(dt).itemsize
            c += 1
        return c

    def open(self, keep_chunks: int) -> None:
        self.f = _open_after(self.path, self.head, self.layout.row_start[keep_chunks] * self.row_bytes)

    def append(self, c0: int, ns: int, out: dict) -> None:
        for c in range(c0, c0 + ns):
            for name, dt in self.fields:
                self.f.write(np.ascontiguousarray(out[name][self._rows(c)], dtype=dt).data)
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self, discard: bool) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        if discard:
            self.path.unlink(missing_ok=True)
