"""An importance matrix made elsewhere (`imatrix_file:`) that is not one is named with what is wrong,
before the quantizer gets it (issue 41, case 7: random bytes gave a bare struct.error)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from quantladder import imatrix, models
from quantladder.errors import ModelFileError


def legacy_bytes(entries: dict[str, tuple[int, np.ndarray]], chunks: int | None = 8, dataset: str | None = "calib.txt"):
    """llama.cpp's legacy .dat layout (common/imatrix-loader.cpp): what `llama-imatrix --output-format dat`
    writes (tests/test_ladder.py reads a real one)."""
    out = struct.pack("<i", len(entries))
    for name, (ncall, values) in entries.items():
        raw = name.encode()
        out += struct.pack("<i", len(raw)) + raw + struct.pack("<ii", ncall, len(values))
        out += np.asarray(values, dtype="<f4").tobytes()
    if chunks is not None:
        out += struct.pack("<i", chunks)
        if dataset is not None:
            out += struct.pack("<i", len(dataset)) + dataset.encode()
    return out


GOOD = {"blk.0.attn_q.weight": (4, np.array([4.0, 8.0, 0.0], dtype=np.float32)),
        "blk.0.ffn_up.weight": (2, np.array([1.0, 3.0], dtype=np.float32))}


def test_a_legacy_matrix_reads(tmp_path):
    p = tmp_path / "m.dat"
    p.write_bytes(legacy_bytes(GOOD))
    data = imatrix.weights_for_quantize(p)
    assert data.legacy and data.datasets == ["calib.txt"] and data.chunk_count == 8
    assert data.weights["blk.0.attn_q.weight"].tolist() == [1.0, 2.0, 0.0]  # sums / ncall
    p.write_bytes(legacy_bytes(GOOD, chunks=None))  # the trailer is optional
    assert set(imatrix.weights_for_quantize(p).weights) == set(GOOD)


@pytest.mark.parametrize("content, what", [
    (np.random.default_rng(1).bytes(4096), "not an importance matrix: it does not start with 'GGUF'"),
    (b"hello, this is a text file and no matrix at all\n" * 20, "entry count .* cannot be"),
    (b"", "ends at byte 0 where the entry count was due"),
    (legacy_bytes(GOOD)[:-30], "remaining bytes cannot hold|cannot be|ends at byte"),  # truncated
    (legacy_bytes({"blk.0.attn_q.weight": (1, np.array([1.0, np.nan], dtype=np.float32))}),
     r"entry 1 \(blk\.0\.attn_q\.weight\)'s values are not sums of squares"),
    (legacy_bytes({"blk.0.attn_q.weight": (1, np.array([-1.0], dtype=np.float32))}), "not sums of squares"),
    (struct.pack("<ii", 1, 4) + b"\xff\xfe\xfd\xfc" + struct.pack("<ii", 1, 1) + b"\0" * 4, "name at byte 8 is not text"),
    (b"GGUF" + np.random.default_rng(2).bytes(200), "unreadable imatrix GGUF"),
], ids=["random", "text", "empty", "truncated", "nan", "negative", "name_not_text", "gguf_garbage"])
def test_a_file_that_is_no_matrix_is_named_with_what_is_wrong(tmp_path, content, what):
    p = tmp_path / "given.imatrix"
    p.write_bytes(content)
    with pytest.raises(ModelFileError, match=rf"given\.imatrix: .*({what})"):
        imatrix.weights_for_quantize(p)


def test_random_bytes_stop_the_quantizer_before_it_runs(tmp_path, smollm_f16):
    """The rung's own path (models.quantize, what the quantize rule calls with `imatrix_file:`)."""
    p = tmp_path / "random.imatrix"
    p.write_bytes(np.random.default_rng(0).bytes(65536))
    out = tmp_path / "q.gguf"
    with pytest.raises(ModelFileError, match=r"random\.imatrix: not an importance matrix"):
        models.quantize(smollm_f16, out, "Q4_K_M", imatrix=str(p), n_threads=1)
    assert not out.exists()
