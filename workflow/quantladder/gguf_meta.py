"""Read what a GGUF file says about itself: architecture, sizes, parameters, bits per weight."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ModelFileError

GGUF_MAGIC = b"GGUF"

# llama.cpp's llama_ftype names for general.file_type (include/llama.h).
FILE_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}

# The KV-cache types llama.cpp accepts: (ggml_type id of ggml/include/ggml.h, bytes per element from
# the ggml block sizes). The one table: the engine's context parameters, the memory predictions and
# the resource estimates all read it.
KV_TYPES = {
    "f32": (0, 4.0), "f16": (1, 2.0), "bf16": (30, 2.0),
    "q8_0": (8, 34 / 32), "q4_0": (2, 18 / 32), "q4_1": (3, 20 / 32),
    "q5_0": (6, 22 / 32), "q5_1": (7, 24 / 32), "iq4_nl": (20, 18 / 32),
}
KV_TYPE_BYTES = {name: nbytes for name, (_, nbytes) in KV_TYPES.items()}
KV_GGML_TYPES = {name: ggml_id for name, (ggml_id, _) in KV_TYPES.items()}

# llama.cpp pads the context, and with split streams each sequence's share of it, to a multiple of
# 256 cells (llama-context.cpp: ``cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)``, and ``n_ctx_seq``).
CTX_PAD = 256


def padded_ctx(n_ctx: int) -> int:
    """The cells llama.cpp gives a sequence whose context is ``n_ctx`` (a multiple of 256)."""
    return -(-int(n_ctx) // CTX_PAD) * CTX_PAD


def kv_bytes_per_token(n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int,
                       type_k: str = "f16", type_v: str = "f16") -> float:
    """KV-cache bytes of one cell: layers × kv_heads × (k_dim·bytes_k + v_dim·bytes_v)."""
    for t in (type_k, type_v):
        if t not in KV_TYPE_BYTES:
            raise ModelFileError(f"unknown KV-cache type {t!r}; known: {sorted(KV_TYPE_BYTES)}")
    return n_layer * n_head_kv * (head_dim_k * KV_TYPE_BYTES[type_k] + head_dim_v * KV_TYPE_BYTES[type_v])


@dataclass
class GGUFInfo:
    path: str
    file_bytes: int
    tensor_bytes: int
    n_params: int
    bits_per_weight: float
    architecture: str
    file_type: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    n_vocab: int
    has_chat_template: bool
    tensor_types: dict
    # parameters held in each tensor type: the real mix of a rung, fallbacks included (a K or IQ
    # type cannot hold a row whose width is not a multiple of 256, e.g. SmolLM2's 576)
    tensor_type_params: dict = None

    def as_dict(self) -> dict:
        return asdict(self)

    def kv_bytes(self, n_ctx: int, type_k: str = "f16", type_v: str = "f16") -> int:
        """Predicted KV-cache bytes: layers × context × kv_heads × (k_dim·bytes_k + v_dim·bytes_v).

        For F16 this is the familiar 2 × layers × kv_heads × head_dim × 2 bytes × context.
        Sliding-window layers (Gemma 3) really hold less; the prediction is an upper bound.
        """
        per_token = kv_bytes_per_token(self.n_layer, self.n_head_kv, self.head_dim_k, self.head_dim_v,
                                       type_k, type_v)
        return int(round(n_ctx * per_token))


def check_magic(path: str | os.PathLike) -> None:
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"{p}: no such file")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{p}: not a GGUF file (starts with {magic!r}, expected b'GGUF')")


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple  # ne[0], ne[1], ... as the file lists them
    type: int  # ggml_type
    n_elements: int
    n_bytes: int
    data_offset: int  # from the start of the file


# GGUF value types (gguf.GGUFValueType): struct formats of the scalars and numpy dtypes of arrays
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def scan_header(path: str | os.PathLike, *, types: dict | None = None,
                raw_strings: bool = False) -> tuple[dict, list[TensorEntry]]:
    """The metadata and the tensor table of a GGUF file, read in one pass over its header.

    gguf.GGUFReader builds a numpy view of every element of every array, which takes 11 s for
    Gemma-3's 262,144-token vocabulary on a 2-core CPU (2.5 s for SmolLM2's 49,152), and every rung
    job reads its file's header. Here numeric arrays are numpy arrays read in one go and strings
    are decoded as they come (under 0.3 s); the format is the GGUF specification's (gguf's enums
    name the types). Fields are ``{key: value}`` (arrays as numpy arrays or lists of str; strings as
    their bytes with ``raw_strings``, to write them back unchanged); ``types``, when given, receives
    ``{key: (value type, element type or None)}``. Raises ModelFileError on a short or malformed
    header."""
    import mmap
    import struct

    import gguf
    import numpy as np

    p = Path(path)
    check_magic(p)
    with open(p, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        (version,) = struct.unpack_from("<I", mm, 4)
        e = "<" if version & 0xFFFF else ">"  # a big-endian file reads as a version in the high bytes
        pos = 8

        def unpack(fmt):
            nonlocal pos
            vals = struct.unpack_from(e + fmt, mm, pos)
            pos += struct.calcsize(e + fmt)
            return vals[0] if len(vals) == 1 else vals

        def text() -> bytes:
            nonlocal pos
            n = unpack("Q")
            if pos + n > len(mm):
                raise struct.error("a string runs past the end of the file")
            pos += n
            return mm[pos - n:pos]

        def string():
            out = text()
            return out if raw_strings else out.decode("utf-8", errors="replace")

        def value(vtype, key=None):
            nonlocal pos
            if vtype == _STRING:
                if types is not None and key is not None:
                    types[key] = (vtype, None)
                return string()
            if vtype == _ARRAY:
                sub, n = unpack("I"), unpack("Q")
                if types is not None and key is not None:
                    types[key] = (vtype, sub)
                if sub == _STRING:
                    return [string() for _ in range(n)]
                if sub in _SCALAR:
                    dt = np.dtype(e + _SCALAR[sub].replace("?", "b1"))
                    arr = np.frombuffer(mm, dtype=dt, count=n, offset=pos).copy()
                    pos += n * dt.itemsize
                    return arr
                return [value(sub) for _ in range(n)]  # arrays of arrays
            if vtype not in _SCALAR:
                raise ValueError(f"unknown GGUF value type {vtype}")
            if types is not None and key is not None:
                types[key] = (vtype, None)
            return unpack(_SCALAR[vtype])

        n_tensors, n_kv = unpack("Q"), unpack("Q")
        fields: dict = {}
        for _ in range(n_kv):
            key = text().decode("utf-8", errors="replace")
            fields[key] = value(unpack("I"), key)
        raw = []
        for _ in range(n_tensors):
            name = text().decode("utf-8", errors="replace")
            shape = tuple(int(unpack("Q")) for _ in range(unpack("I")))
            raw.append((name, shape, unpack("I"), unpack("Q")))
        align = int(fields.get("general.alignment", 32))
        start = -(-pos // align) * align
        tensors = []
        for name, shape, ttype, offset in raw:
            qtype = gguf.GGMLQuantizationType(ttype)  # ValueError names a type this gguf does not know
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            n_el = int(np.prod(shape, dtype=np.int64)) if shape else 1
            tensors.append(TensorEntry(name, shape, ttype, n_el, n_el * size // block, start + offset))
        return fields, tensors
    except ModelFileError:
        raise
    except ValueError as ex:
        if "GGMLQuantizationType" in str(ex):  # a type newer than the installed gguf package (Q2_0)
            raise ModelFileError(f"{p}: holds a tensor type the installed gguf package cannot read ({ex}); "
                                 "a newer gguf release is needed for this rung") from ex
        raise ModelFileError(f"{p}: unreadable or truncated GGUF ({len(mm)} bytes; ValueError: {ex})") from ex
    except (struct.error, IndexError, OverflowError, MemoryError) as ex:
        raise ModelFileError(f"{p}: unreadable or truncated GGUF ({len(mm)} bytes; {type(ex).__name__}: {ex})") from ex
    finally:
        mm.close()


def read_info(path: str | os.PathLike) -> GGUFInfo:
    """Parse the header and tensor table; a truncated or malformed file raises ModelFileError."""
    import gguf

    p = Path(path)
    fields, tensors = scan_header(p)  # checks the magic first
    size = p.stat().st_size
    if not tensors:
        raise ModelFileError(f"{p}: GGUF holds no tensors")
    end = max(t.data_offset + t.n_bytes for t in tensors)
    if end > size:
        raise ModelFileError(f"{p}: truncated GGUF: tensor data ends at byte {end}, file has {size}")
    n_params = sum(t.n_elements for t in tensors)
    tensor_bytes = sum(t.n_bytes for t in tensors)
    arch = str(fields.get("general.architecture", "unknown"))
    ft = fields.get("general.file_type")
    n_head = _int(fields.get(f"{arch}.attention.head_count"), 0)
    n_head_kv = _int(fields.get(f"{arch}.attention.head_count_kv"), n_head)
    n_embd = _int(fields.get(f"{arch}.embedding_length"), 0)
    default_hd = n_embd // n_head if n_head else 0
    tokens = fields.get("tokenizer.ggml.tokens")
    return GGUFInfo(
        path=str(p),
        file_bytes=size,
        tensor_bytes=tensor_bytes,
        n_params=n_params,
        bits_per_weight=tensor_bytes * 8.0 / n_params,
        architecture=arch,
        file_type=FILE_TYPE_NAMES.get(int(ft), str(ft)) if ft is not None else "unknown",
        n_layer=_int(fields.get(f"{arch}.block_count"), 0),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_embd=n_embd,
        head_dim_k=_int(fields.get(f"{arch}.attention.key_length"), default_hd),
        head_dim_v=_int(fields.get(f"{arch}.attention.value_length"), default_hd),
        n_ctx_train=_int(fields.get(f"{arch}.context_length"), 0),
        n_vocab=len(tokens) if tokens is not None else 0,
        has_chat_template="tokenizer.chat_template" in fields,
        tensor_types=dict(sorted(Counter(gguf.GGMLQuantizationType(t.type).name for t in tensors).items())),
        tensor_type_params=_params_by_type(gguf, tensors),
    )


def _int(v, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, (list, tuple)) or getattr(v, "ndim", 0):
        raise ModelFileError(f"per-layer values ({list(v)[:4]}...) where one number was expected: this "
                             "architecture's header is not supported")
    return int(v) or default


def _params_by_type(gguf, tensors) -> dict:
    out: Counter = Counter()
    for t in tensors:
        out[gguf.GGMLQuantizationType(t.type).name] += int(t.n_elements)
    return dict(sorted(out.items()))
