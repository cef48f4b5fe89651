"""Resources sized from the point: a bigger rung, a longer context or a retry asks for more."""

from __future__ import annotations

import json
from types import SimpleNamespace

from quantladder import resources as qres

SMOL = {"file_bytes": 270_885_952, "n_layer": 30, "n_head_kv": 3, "head_dim_k": 64, "head_dim_v": 64,
        "n_vocab": 49152}
# Llama-3-70B's shape at Q4_K_M (~42.5 GB).
LLAMA70 = {"file_bytes": 42_520_000_000, "n_layer": 80, "n_head_kv": 8, "head_dim_k": 128,
           "head_dim_v": 128, "n_vocab": 128256}


def _input(tmp_path, info, name="m"):
    p = tmp_path / f"{name}.gguf.json"
    p.write_text(json.dumps({"info": info}))
    return SimpleNamespace(info=str(p), gguf=str(tmp_path / f"{name}.gguf"))


def test_a_70b_rung_asks_for_more_than_a_small_one(tmp_path):
    w = SimpleNamespace(kv="f16")
    small, big = _input(tmp_path, SMOL, "s"), _input(tmp_path, LLAMA70, "b")
    mem = qres.mem_mb("inference", n_ctx=4096)
    run = qres.runtime_min("perplexity")
    assert mem(w, small, 1) < 3000
    assert mem(w, big, 1) > 42_520_000_000 / 2**20  # at least the weights
    assert run(w, small, 1) < 30 < 120 < run(w, big, 1)


def test_context_kv_type_and_retries_scale_memory(tmp_path):
    inp = _input(tmp_path, LLAMA70)
    f16 = SimpleNamespace(kv="f16")
    q4 = SimpleNamespace(kv="q4_0")
    assert qres.mem_mb(n_ctx=131072)(f16, inp, 1) - qres.mem_mb(n_ctx=4096)(f16, inp, 1) > 30_000
    assert qres.mem_mb(n_ctx=131072)(q4, inp, 1) < qres.mem_mb(n_ctx=131072)(f16, inp, 1)
    assert qres.mem_mb()(f16, inp, 2) >= 2 * qres.mem_mb()(f16, inp, 1) - 256
    assert qres.runtime_min("generate")(f16, inp, 2) > qres.runtime_min("generate")(f16, inp, 1)


def test_missing_inputs_fall_back_to_base_figures(tmp_path):
    inp = SimpleNamespace(info=str(tmp_path / "absent.json"), gguf=str(tmp_path / "absent.gguf"))
    assert qres.mem_mb("inference")(SimpleNamespace(), inp, 1) == 1536
    assert qres.runtime_min("speed")(SimpleNamespace(), inp, 1) == 15


def test_config_floor_raises_runtime():
    cfg = {"resources": {"runtime_min": {"perplexity": 240}}}
    inp = SimpleNamespace()
    assert qres.runtime_min("perplexity", cfg)(SimpleNamespace(), inp, 1) == 240
