"""The device check's GGUF synthesis, at a tiny size, loaded and run in llama.cpp on the CPU.

The device check (tests/gpu/device_check.sh) writes a 7B-class model with this same code on a GPU
machine; here the tiny shape proves the file is a valid llama GGUF that llama.cpp quantizes
(Q4_K_M), loads, tokenizes with the SmolLM2 tokenizer and generates from.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

import device_check  # noqa: E402
import synth_gguf  # noqa: E402

from quantladder import models  # noqa: E402
from quantladder.engine import Engine, EngineSettings, RawContext  # noqa: E402
from quantladder.gguf_meta import read_info  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, smollm_source):
    out = tmp_path_factory.mktemp("tok") / "tokenizer.gguf"
    info = synth_gguf.export_tokenizer(smollm_source, out)
    assert info["bytes"] < 4 * 2**20  # small enough to carry
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer):
    d = tmp_path_factory.mktemp("synth")
    f16 = d / "tiny-F16.gguf"
    info = synth_gguf.synthesize(f16, "tiny", tokenizer=tokenizer, seed=1)
    q4 = d / "tiny-Q4_K_M.gguf"
    models.quantize(f16, q4, "Q4_K_M")
    return info, f16, q4


def test_param_count_and_shapes_match_the_preset(tiny):
    info, f16, _ = tiny
    gi = read_info(f16)
    shape = synth_gguf.PRESETS["tiny"]
    assert gi.architecture == "llama" and gi.file_type == "F16"
    assert gi.n_params == info["n_params"] == shape.n_params(49152)
    assert (gi.n_layer, gi.n_embd, gi.n_head, gi.n_head_kv, gi.n_vocab) == (2, 256, 4, 2, 49152)
    assert gi.has_chat_template


def test_the_7b_preset_is_7b_class():
    n = synth_gguf.PRESETS["7b"].n_params(49152)
    assert 6.5e9 < n < 7.2e9


def test_quantized_synthetic_model_loads_and_generates_on_cpu(tiny, smollm_source):
    _, _, q4 = tiny
    gi = read_info(q4)
    assert gi.file_type == "Q4_K_M" and "Q4_K" in gi.tensor_types
    with Engine(str(q4), EngineSettings(n_ctx=256, n_threads=1)) as eng, \
            Engine(str(smollm_source), EngineSettings(n_ctx=64, n_threads=1)) as ref:
        # the embedded tokenizer came along: same ids as the real SmolLM2
        text = "Quantization ladders measure loss."
        assert eng.tokenize(text) == ref.tokenize(text)
        prompt = eng.chat_prompt([{"role": "user", "content": "Hello"}])
        g = eng.generate(prompt, max_tokens=8)
        assert g.n_prompt_tokens > 3 and 1 <= g.n_gen_tokens <= 8


def test_device_check_timing_loop_runs_on_cpu(tiny):
    _, _, q4 = tiny
    with RawContext(str(q4), n_ctx=128, n_batch=64, n_threads=1) as ctx:
        r = device_check.pp_tg(ctx, n_prompt=32, n_gen=8, reps=2)
    assert r["pp_tokens_per_s"] > 0 and r["tg_tokens_per_s"] > 0
    assert len(r["pp_seconds"]) == 2 and len(r["tg_seconds"]) == 2


def test_device_check_arguments_and_roofline():
    a = device_check.parse_args(["--work", "/tmp/x", "--llama-bin", "/tmp/bin", "--rungs", "Q4_K_M,Q8_0"])
    assert a.rungs == ["Q4_K_M", "Q8_0"] and a.size == "7b" and a.n_prompt == 512 and a.n_gen == 128
    # 4 GB of weights read per token at 4 TB/s: 1000 tokens/s
    assert device_check.roofline_tokens_per_s(4e12, 4e9) == pytest.approx(1000.0)
    with pytest.raises(SystemExit):
        device_check.parse_args(["--rungs", "Q4_K_M"])  # --work is required


def test_bytes_per_token_counts_the_output_matrix_once(tiny):
    _, _, q4 = tiny
    info = read_info(q4)
    tb = device_check.tensor_bytes(q4)
    assert "output.weight" not in tb  # tiny ties embeddings: the table is read whole as the output
    assert device_check.bytes_per_token(info, 0, tb) == pytest.approx(info.tensor_bytes)
    untied = dict(tb, **{"output.weight": tb["token_embd.weight"]})
    row = tb["token_embd.weight"] / info.n_vocab
    assert device_check.bytes_per_token(info, 0, untied) == pytest.approx(info.tensor_bytes - tb["token_embd.weight"] + row)
