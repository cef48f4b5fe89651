"""A stand-in for a third party's file, derived here (`families.<f>.prebuilt.<r>.derive`): a copy of a made
rung with another chat template, checked against the reference like any third-party file.

The default run measures one (config/config.yaml: SmolLM2's Q4_K_M with Phi-3.5's template, accepted), so
the flag of an accepted difference shows on its report. Here the real Snakemake makes one from the
embedded SmolLM2 and measures its perplexity; the config's refusals are checked without a run.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from pipeline_util import small_config, snakemake, write_config

from quantladder import aggregate, card, models
from quantladder import config as qconfig
from quantladder.errors import ConfigError
from quantladder.gguf_meta import scan_header

FAMILY = "smollm2-135m-instruct"
STAND_IN = "Q4_K_M-phi-template"
TEMPLATE = {"vendored": "microsoft-Phi-3.5-mini-instruct"}


def _cfg(rungs=("Q4_K_M",)) -> dict:
    cfg = small_config(rungs=rungs)
    cfg["families"][FAMILY]["prebuilt"] = {
        STAND_IN: {"derive": {"rung": "Q4_K_M", "chat_template": TEMPLATE}, "accept": ["chat_template"],
                   "enabled": True}}
    return cfg


def test_the_default_config_measures_its_stand_in_with_the_difference_accepted():
    cfg = qconfig.load(qconfig.DEFAULT_CONFIG)
    assert STAND_IN in qconfig.rungs(cfg, FAMILY) and qconfig.rung_kind(cfg, FAMILY, STAND_IN) == "prebuilt"
    assert cfg["families"][FAMILY]["prebuilt"][STAND_IN]["accept"] == ["chat_template"]


def test_a_stand_in_of_a_rung_the_family_does_not_make_is_refused_or_switched_off():
    cfg = _cfg(rungs=("Q8_0",))
    with pytest.raises(ConfigError) as e:
        qconfig.validate_config(copy.deepcopy(cfg))
    msg = str(e.value)
    assert f"families.{FAMILY}.prebuilt.{STAND_IN}.derive.rung: 'Q4_K_M'" in msg and "enabled: false" in msg
    cfg["families"][FAMILY]["prebuilt"][STAND_IN]["enabled"] = False  # switched off: valid, not a rung
    assert STAND_IN not in qconfig.rungs(qconfig.validate_config(cfg), FAMILY)
    bad = _cfg()
    bad["families"][FAMILY]["prebuilt"][STAND_IN]["source"] = {"path": "/x.gguf"}  # a file or a derivation
    with pytest.raises(ConfigError, match=f"prebuilt.{STAND_IN}"):
        qconfig.validate_config(bad)


@pytest.mark.slow
def test_a_stand_in_is_the_rung_with_its_template_checked_and_flagged(tmp_path):
    work = tmp_path / "derived"
    work.mkdir()
    cfg = _cfg()
    for m in ("speed", "memory", "energy"):
        cfg["measures"][m]["enabled"] = False
    cfg["measures"]["perplexity"].update({"corpus": "pydoc-topics", "corpora": ["pydoc-topics"], "n_ctx": 128,
                                          "n_batch": 128, "max_chunks": 2})
    label = card.label()
    point = f"results/{label}/points/{FAMILY}/{STAND_IN}/f16/perplexity/metrics.json"
    snakemake(work, point, config=write_config(work, cfg))

    models_dir = work / f"resources/models/{FAMILY}"
    side = json.loads((models_dir / f"prebuilt/{STAND_IN}.gguf.json").read_text())
    made = json.loads((models_dir / "quantized/Q4_K_M.gguf.json").read_text())
    text, rec = models.chat_template_text(TEMPLATE, "test")
    assert side["derived"] == {"rung": "Q4_K_M", "sha256_from": made["sha256"], "chat_template": rec}
    # the one change: the template; every tensor's bytes are the rung's
    copy_h, copy_t = scan_header(models_dir / f"prebuilt/{STAND_IN}.gguf")
    rung_h, rung_t = scan_header(models_dir / "quantized/Q4_K_M.gguf")
    assert copy_h["tokenizer.chat_template"] == text != rung_h["tokenizer.chat_template"]
    assert {k for k in set(copy_h) | set(rung_h) if not np.array_equal(np.asarray(copy_h.get(k)), np.asarray(
        rung_h.get(k)))} == {"tokenizer.chat_template"}
    a = np.memmap(models_dir / f"prebuilt/{STAND_IN}.gguf", dtype=np.uint8, mode="r")
    b = np.memmap(models_dir / "quantized/Q4_K_M.gguf", dtype=np.uint8, mode="r")
    for x, y in zip(copy_t, rung_t):
        assert x.name == y.name and np.array_equal(a[x.data_offset:x.data_offset + x.n_bytes],
                                                   b[y.data_offset:y.data_offset + y.n_bytes])
    # checked against the reference like any third-party file: the template named, accepted
    assert side["provenance"]["differs_in"] == ["chat_template"]
    assert side["provenance"]["accepted"] == ["chat_template"]
    # measured, with its figures against the reference (its tokens are the reference's), and flagged
    m = json.loads((work / point).read_text())
    rows = {r["metric"]: r for r in m["rows"]}
    assert rows["kld_mean"]["value"] is not None and rows["kld_mean"]["value"] >= 0
    flat = aggregate.collect([str(work / point)])
    assert {r["provenance"] for r in flat} == {
        "third party (a stand-in derived here from Q4_K_M); differs from the reference in: chat_template (accepted)"}
