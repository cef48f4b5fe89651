"""The dataset says how each rung was made: `file_type`, `tensor_mix`, `imatrix`, `recipe`, from the
manifest's `model` section as the quantize rule's sidecar fills it (quantladder.points.Point.model_info)."""

from __future__ import annotations

import pandas as pd
import pytest

from quantladder import dataset, manifest, points, schemas
from quantladder import dataset_view as dv
from quantladder import ladder as qladder
from quantladder.io import write_json
from quantladder.measures import speed
from pipeline_util import make_fixture_module


@pytest.fixture(scope="module")
def ladder_df(tmp_path_factory):
    mf = make_fixture_module()
    return mf, dv.load(mf.build(tmp_path_factory.mktemp("ladder-dataset"), ladder=True))


def _shares(text: str) -> dict[str, float]:
    return {t: float(p) for t, p, _ in (part.split(" ") for part in text.split(", "))}


def test_every_row_of_a_point_carries_its_rungs_identity(ladder_df):
    mf, df = ladder_df
    for rung in dict.fromkeys(r for r, *_ in mf.LADDER_POINTS):
        rows = df[(df.family == "tiny") & (df.rung == rung)]
        assert len(rows) > 0
        for col in ("file_type", "tensor_mix", "imatrix", "recipe"):  # the same on every row, deltas' included
            assert rows[col].nunique(dropna=False) == 1, (rung, col)
        r = rows.iloc[0]
        rec = mf.tiny_record(rung)
        assert r.file_type == rec["info"]["file_type"]
        mix = mf.TINY_MIX[rung]
        total = sum(mix.values())
        shares = _shares(r.tensor_mix)
        assert list(shares) == sorted(mix, key=lambda t: (-mix[t], t))
        assert all(abs(shares[t] - 100 * mix[t] / total) <= 0.5 for t in mix)
        if rung == "F16":
            assert pd.isna(r.imatrix) and pd.isna(r.recipe)
            continue
        plan = qladder.plan(mf.LADDER_CONFIG, "tiny", rung)
        if plan["imatrix"]:
            s = mf.IMATRIX_SETTINGS
            assert r.imatrix == f"{mf.CALIBRATION} (n_ctx {s['n_ctx']}, {s['chunks']} chunks)"
        else:
            assert pd.isna(r.imatrix)
        assert r.recipe == plan["recipe"] or pd.isna(r.recipe) and plan["recipe"] is None
    # the chat families' rungs: made from their type alone
    big = df[df.family == "big"]
    assert big.imatrix.isna().all() and big.recipe.isna().all()
    assert (big.file_type == big.rung).all()


def _rows_for(tmp_path, cfg, rung, record, *, drop_model_keys=()) -> dict:
    """The dataset row of a speed point of `rung` whose sidecar is `record`, through the real manifest."""
    pt = points.Point(config=cfg, card="c", family="f", rung=rung, kv="f16", benchmark="speed",
                      model_path=f"/m/{rung}.gguf", model_record=record)
    man = manifest.build(cfg, "c", "f", rung, "f16", "speed", model_info=pt.model_info(), card_identity={},
                         library={})
    for k in drop_model_keys:  # a manifest written before the key was recorded
        man["model"].pop(k)
    spd = {"tg": {"n_prompt": 0, "n_gen": 16, "n_depth": 0, "n_parallel": 1, "repetitions": 3, "mean_tokens_per_s": 10.0, "sd_tokens_per_s": 1.0}}
    d = tmp_path / rung
    d.mkdir()
    write_json(d / "metrics.json", {"benchmark": "speed", "status": "ok", "rows": speed.metric_rows(spd), "manifest": man})
    return dataset.rows_from_point(d / "metrics.json")[0]


def test_a_matrix_made_elsewhere_a_nameless_recipe_and_unknown_mixes(tmp_path):
    cfg = schemas.filled(schemas.SCHEMA_PATH, {  # as a run's validation fills it
           "card": "auto", "gpu_layers": 0, "flash_attn": None, "kv_types": ["f16"], "quantize": {}, "corpora": {},
           "measures": {"speed": {"n_prompt": 16, "n_gen": 16, "n_depth": 0, "n_parallel": 1, "repetitions": 3}},
           "families": {"f": {"source": {"path": "/m.gguf"}, "reference": "F16", "rungs": ["NVFP4", "Q4_K_M-ext"],
                              "rung_options": {"Q4_K_M-ext": {"type": "Q4_K_M", "imatrix_file": "/elsewhere/m.imatrix"}},
                              "prebuilt": {"Q4_K_M-hub": {"source": {"path": "/hub/m-Q4_K_M.gguf"}}}}}})
    # a matrix given as a file: its name, and that it was made elsewhere (no corpus to name)
    sha = "ef" * 32
    ext = {"sha256": "ab" * 32, "recipe": None, "recipe_name": None,
           "imatrix": {"file": "/elsewhere/m.imatrix", "sha256": sha, "given": True},
           "info": {"file_type": "Q4_K_M", "tensor_type_params": None}}
    r = _rows_for(tmp_path, cfg, "Q4_K_M-ext", ext)
    assert r["file_type"] == "Q4_K_M" and r["tensor_mix"] is None and r["recipe"] is None
    assert r["imatrix"] == f"m.imatrix (made elsewhere, sha256 {sha[:12]})"
    # the built-in NVFP4 rung: a recipe without a name, shown by its rules
    plan = qladder.plan(cfg, "f", "NVFP4")
    nv = {"sha256": "cd" * 32, "recipe": {k: plan[k] for k in ("type", "tensor_types", "output_tensor_type",
                                                                "token_embedding_type", "file_type", "pure")},
          "recipe_name": plan["recipe"], "imatrix": None,
          "info": {"file_type": plan["file_type"], "tensor_type_params": {"NVFP4": 300, "Q8_0": 100}}}
    r = _rows_for(tmp_path, cfg, "NVFP4", nv)
    (pattern, ttype), = plan["tensor_types"]
    assert plan["recipe"] is None and r["recipe"] == f"{plan['type']}; {pattern} → {ttype}"
    assert r["file_type"] == plan["file_type"] and r["imatrix"] is None
    assert r["tensor_mix"] == "NVFP4 75 %, Q8_0 25 %"  # 300 and 100 of 400 parameters
    # a manifest from before the sidecar's matrix was recorded: the matrix the rung's options asked for
    (tmp_path / "old").mkdir()
    r = _rows_for(tmp_path / "old", cfg, "Q4_K_M-ext", {"sha256": "ab" * 32, "info": {}}, drop_model_keys=("imatrix",))
    assert r["imatrix"] == "m.imatrix (made elsewhere)"
    assert r["file_type"] is None and r["tensor_mix"] is None
    # a prebuilt file (acquire_prebuilt records no matrix): whether its maker used one is unknown, not "none"
    (tmp_path / "hub").mkdir()
    r = _rows_for(tmp_path / "hub", cfg, "Q4_K_M-hub", {"sha256": "01" * 32, "info": {"file_type": "Q4_K_M"}})
    assert r["imatrix"] == dataset.IMATRIX_UNKNOWN and r["recipe"] is None and r["file_type"] == "Q4_K_M"


def test_tensor_mix_shares():
    # never 100 % for a type that is not the whole file, never 0 % for one that holds parameters
    assert dataset.tensor_mix({"F16": 99_970, "F32": 30}) == "F16 99.97 %, F32 0.03 %"
    assert dataset.tensor_mix({"Q8_0": 1}) == "Q8_0 100 %"
    assert dataset.tensor_mix({}) is None and dataset.tensor_mix(None) is None
