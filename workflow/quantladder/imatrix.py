"""Importance matrices: computed with llama-imatrix, read back for llama.cpp's quantizer.

Protocol (llama.cpp tools/imatrix, PRs #4861 and #9400): the reference model runs over the
calibration text in chunks of ``n_ctx`` tokens; for every matrix multiplication of a ``blk.*``
weight with at least 16 input rows (``output.weight`` only with ``process_output``), the sum of
squared activations per input column is accumulated (``<tensor>.in_sum2``) with the number of rows
seen (``<tensor>.counts``). The file is GGUF, with ``imatrix.datasets``, ``imatrix.chunk_count``
and ``imatrix.chunk_size``.

llama-quantize turns sums into per-column weights of the rounding error: ``in_sum2 / counts``
(per expert for MoE tensors; a column block with no count gets weight 1). ``weights_for_quantize``
does exactly that in float32, so that quantizing through the C API with these arrays is
byte-identical to ``llama-quantize --imatrix`` (tests/test_ladder.py checks it).
"""

from __future__ import annotations

import os
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import schemas
from .errors import ConfigError, ModelFileError
from .io import atomic_path, sha256_file

# Defaults of the `imatrix:` config section; llama-imatrix's own default chunk is 512 tokens.


@dataclass
class ImatrixData:
    """What llama-quantize takes from an imatrix file (tools/quantize/quantize.cpp, load_imatrix)."""

    weights: dict[str, np.ndarray]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    legacy: bool = False


def _read_legacy(path: Path) -> ImatrixData:
    """The pre-GGUF binary layout: n_entries, then (name, ncall, nval, values) per entry, then
    optionally the chunk count and the dataset name (common/imatrix-loader.cpp).

    A file that does not start with ``GGUF`` is read as this layout, so every count is checked
    against the bytes there are before it is used: a file that is neither (random bytes, a text
    file, a damaged download) is a ModelFileError naming the file, the byte and what is wrong,
    not a struct or decode error. The values are sums of squared activations: finite and not
    negative, or the file is not a matrix. Bytes after the dataset name are ignored, as llama-quantize's
    loader ignores them."""
    raw = path.read_bytes()
    off = 0
    what = (f"{path}: not an importance matrix: it does not start with 'GGUF' (the format llama-imatrix "
            f"writes), and as llama.cpp's legacy .dat layout")

    def bad(msg: str):
        raise ModelFileError(f"{what} {msg} ({len(raw)} bytes; first bytes {raw[:8].hex(' ')})")

    def take(fmt, field):
        nonlocal off
        size = struct.calcsize(fmt)
        if off + size > len(raw):
            bad(f"it ends at byte {len(raw)} where {field} was due (truncated?)")
        vals = struct.unpack_from(fmt, raw, off)
        off += size
        return vals

    def text(n: int, field: str) -> str:
        nonlocal off
        if n < 1 or off + n > len(raw):
            bad(f"{field} has length {n} at byte {off - 4}, which the file's {len(raw) - off} remaining bytes "
                "cannot hold")
        try:
            out = raw[off:off + n].decode()
        except UnicodeDecodeError:
            bad(f"{field} at byte {off} is not text")
        off += n
        return out

    (n,) = take("<i", "the entry count")
    if n < 1 or n * 13 > len(raw) - off:  # an entry is at least 13 bytes: 3 counts and a 1-byte name
        bad(f"its entry count {n} (bytes 0-3) cannot be: {'none' if n < 1 else 'more than the file holds'}")
    weights = {}
    for i in range(n):
        (ln,) = take("<i", f"entry {i + 1}'s name length")
        name = text(ln, f"entry {i + 1}'s name")
        ncall, nval = take("<ii", f"entry {i + 1} ({name})'s counts")
        if ncall < 0 or nval < 1 or off + 4 * nval > len(raw):
            bad(f"entry {i + 1} ({name}) says {ncall} calls and {nval} values at byte {off - 8}, which cannot be "
                f"({len(raw) - off} bytes remain)")
        sums = np.frombuffer(raw, dtype="<f4", count=nval, offset=off).astype(np.float32)
        if not (np.isfinite(sums).all() and (sums >= 0).all()):
            bad(f"entry {i + 1} ({name})'s values are not sums of squares (negative, NaN or infinite)")
        off += 4 * nval
        weights[name] = (sums / np.float32(ncall)).astype(np.float32) if ncall > 0 else sums.copy()
    datasets, chunks = [], 0
    if off < len(raw):
        (chunks,) = take("<i", "the chunk count")
        if off + 4 <= len(raw):
            (ln,) = take("<i", "the dataset name's length")
            if ln > 0:
                datasets.append(text(ln, "the dataset name"))
    return ImatrixData(weights, datasets, chunks, 0, legacy=True)


def weights_for_quantize(path: str | os.PathLike) -> ImatrixData:
    """Per-tensor column weights as llama-quantize computes them from the file."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"{p}: no such imatrix file")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        return _read_legacy(p)
    import gguf

    try:
        reader = gguf.GGUFReader(str(p), "r")
    except Exception as e:
        raise ModelFileError(f"{p}: unreadable imatrix GGUF ({type(e).__name__}: {e})") from e

    def field_val(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    datasets = field_val("imatrix.datasets")
    chunk_count = field_val("imatrix.chunk_count")
    chunk_size = field_val("imatrix.chunk_size")
    if datasets is None or chunk_count is None or chunk_size is None:
        raise ModelFileError(f"{p}: missing imatrix metadata (imatrix.datasets / chunk_count / chunk_size)")
    sums, counts = {}, {}
    for t in reader.tensors:
        if t.name.endswith(".in_sum2"):
            sums[t.name[: -len(".in_sum2")]] = t
        elif t.name.endswith(".counts"):
            counts[t.name[: -len(".counts")]] = t
    if set(sums) != set(counts):
        raise ModelFileError(f"{p}: mismatched sums and counts for {sorted(set(sums) ^ set(counts))}")
    weights = {}
    for name in sums:
        s = np.asarray(sums[name].data, dtype=np.float32).reshape(-1)
        # counts are stored as float and rounded to integers by the loader (std::lround)
        c = np.floor(np.asarray(counts[name].data, dtype=np.float64).reshape(-1) + 0.5).astype(np.float32)
        ne0 = s.size // c.size
        w = np.ones_like(s)
        for j in range(c.size):
            if c[j] > 0:
                w[j * ne0:(j + 1) * ne0] = s[j * ne0:(j + 1) * ne0] / c[j]
        weights[name] = w
    return ImatrixData(weights, [str(d) for d in datasets], int(chunk_count), int(chunk_size))


def resolve_settings(section: dict | None) -> dict:
    """quantize.imatrix_settings with the schema's defaults filled (config/config.schema.yaml)."""
    s = schemas.defaults(schemas.SCHEMA_PATH, "quantize", "imatrix_settings")
    for k, v in (section or {}).items():
        if k not in s:
            raise ConfigError(f"imatrix.{k}: unknown setting; known: {', '.join(s)}")
        s[k] = v
    if int(s["n_ctx"]) < 16:
        raise ConfigError("imatrix.n_ctx must be at least 16 tokens (llama-imatrix skips smaller batches)")
    return s


def file_name(corpus: str, settings: dict) -> str:
    """``<corpus>-n<n_ctx>-c<chunks>[-out][-sp].gguf``: one file per (corpus, settings)."""
    tail = "-out" if settings.get("process_output") else ""
    tail += "-sp" if settings.get("parse_special") else ""
    return f"{corpus}-n{int(settings['n_ctx'])}-c{int(settings['chunks'])}{tail}.gguf"


def compute(binary: str, reference: str | os.PathLike, corpus: str | os.PathLike, out: str | os.PathLike, *,
            settings: dict, threads: int = 0, gpu_layers: int = 0, log=None) -> dict:
    """Run llama-imatrix over the corpus on the reference rung; returns what it reported."""
    s = resolve_settings(settings)
    n_tokens_needed = 2 * int(s["n_ctx"])
    with atomic_path(out) as partial:
        tmp = Path(str(partial) + ".gguf")  # llama-imatrix picks the format from the extension
        cmd = [binary, "-m", str(reference), "-f", str(corpus), "-o", str(tmp), "-c", str(int(s["n_ctx"])),
               "--chunks", str(int(s["chunks"])), "-ngl", str(int(gpu_layers)), "--no-ppl",
               "--output-frequency", "1000000"]
        if threads:
            cmd += ["-t", str(int(threads))]
        if s["process_output"]:
            cmd.append("--process-output")
        if s["parse_special"]:
            cmd.append("--parse-special")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if log is not None:
            log.write(" ".join(cmd) + "\n" + r.stdout[-20000:] + r.stderr[-20000:])
        if r.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            hint = (f" (the corpus needs at least {n_tokens_needed} tokens for n_ctx {s['n_ctx']})"
                    if "you need at least" in r.stdout + r.stderr else "")
            raise ModelFileError(f"llama-imatrix failed on {reference} with {corpus}{hint}:\n{(r.stdout + r.stderr)[-2000:]}")
        os.replace(tmp, partial)
    data = weights_for_quantize(out)
    return {"entries": len(data.weights), "chunk_count": data.chunk_count, "chunk_size": data.chunk_size,
            "datasets": data.datasets, "sha256": sha256_file(out), "settings": s, "command": cmd[1:]}
