"""Calibrate on what you serve, through the real pipeline: a traffic file split by conversation id, an
importance matrix computed by llama-imatrix in the DAG from its calibration part, a Q4_K_M rung
quantized with it, and that rung's KLD measured on the held-out evaluation part, with the overlap of
the two parts measured as for every corpus (docs/your-tasks.md, "Calibrate on what you serve")."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline_util import REPO, default_config, snakemake, stand_ins_off, write_config

from quantladder import card
from quantladder.benchmarks.traffic import trafficfile

pytestmark = pytest.mark.slow
FAM = "smollm2-135m-instruct"
RUNG = "Q4_K_M-imat-traffic"


def traffic_file(path) -> None:
    """A logged conversation per CPython help topic (79 in 3.11; shipped with every Python): a user asks
    about a topic, the logged reply is the start of its text."""
    from pydoc_data.topics import topics

    with open(path, "w") as f:
        for i, (name, text) in enumerate(sorted(topics.items())):
            msgs = [{"role": "user", "content": f"What does the Python reference say about {name}?"},
                    {"role": "assistant", "content": text[:1500]}]
            f.write(json.dumps({"id": f"t{i:03d}", "messages": msgs}) + "\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("traffic-calib")
    logs = work / "logs.jsonl"
    traffic_file(logs)
    cfg = default_config()
    cfg["families"] = {name: ({**f, "rungs": [RUNG], "task_rungs": [],
                               "rung_options": {RUNG: {"type": "Q4_K_M", "imatrix": "support-en.calib"}}}
                              if name == FAM else {**f, "enabled": False})
                       for name, f in cfg["families"].items()}
    cfg["corpora"] = {"support-en.calib": {"traffic": {"path": str(logs), "part": "calib"}},
                      "support-en": {"traffic": {"path": str(logs), "part": "eval"}}}
    cfg["quantize"]["imatrix_settings"] = {"n_ctx": 256, "chunks": 4}
    cfg["threads"] = 2
    cfg["measures"]["perplexity"].update({"corpus": "support-en", "corpora": ["support-en"], "n_ctx": 256,
                                          "n_batch": 512, "max_chunks": 2})
    for m in ("speed", "memory", "energy"):
        cfg["measures"][m]["enabled"] = False
    cfg["anchor_gates"] = {"perplexity": {"enabled": False}, "speed": {"enabled": False}}
    for section in cfg["benchmarks"].values():
        section["enabled"] = False
    cfg["anchors"] = str(REPO / "config" / "anchors.yaml")
    stand_ins_off(cfg)  # the default's copy of its Q4_K_M: not this ladder's
    label = card.label()
    snakemake(work, f"results/{label}/points.parquet", config=write_config(work, cfg), timeout=3600)
    return work, logs, label, pd.read_parquet(work / f"results/{label}/points.parquet")


def test_the_matrix_is_computed_from_the_calibration_part_and_the_rung_measured_on_the_other(run):
    work, logs, label, df = run
    calib, evaluation = trafficfile.read(logs, part="calib"), trafficfile.read(logs, part="eval")
    n = len(logs.read_text().splitlines())
    assert n >= 60 and len(calib.items) + len(evaluation.items) == n and calib.items and evaluation.items
    assert not {c.id for c in calib.items} & {c.id for c in evaluation.items}
    # the matrix: llama-imatrix over the calibration part's text, recorded with its corpus
    (side,) = (work / f"resources/models/{FAM}/imatrix").glob("support-en.calib-*.gguf.json")
    rec = json.loads(side.read_text())
    assert rec["corpus"]["name"] == "support-en.calib" and rec["corpus"]["source"]["traffic"]["part"] == "calib"
    corpus = json.loads((work / "resources/corpora/support-en.calib.json").read_text())
    assert (corpus["source"], corpus["part"]) == ("traffic", "calib")
    assert corpus["conversations"] == [c.id for c in calib.items]  # the split's own part, by id
    text = (work / "resources/corpora/support-en.calib.txt").read_text()
    assert text == trafficfile.text_of(calib)
    # the rung was quantized with it
    made = json.loads((work / f"resources/models/{FAM}/quantized/{RUNG}.gguf.json").read_text())
    assert made["imatrix"]["corpus"]["name"] == "support-en.calib" and made["imatrix"]["sha256"] == rec["sha256"]
    # its KLD on the held-out part, beside the reference's zero
    kld = df[(df["metric"] == "kld_mean") & (df["subset"] == "support-en")].set_index("rung")["value"]
    assert abs(kld["F16"]) < 1e-4 and kld[RUNG] > 0
    # the two parts' overlap, measured as for every corpus: disjoint conversations share no 13-gram
    # beyond the help topics' own boilerplate
    man = json.loads((work / f"results/{label}/points/{FAM}/{RUNG}/f16/perplexity/manifest.json").read_text())
    (ov,) = man["data"]["corpora"]["support-en-n256"]["calibration_overlap"]
    assert ov["corpus"] == "support-en.calib" and ov["share_pct"] < 1.0
    share = df[(df["metric"] == "calibration_overlap") & (df["rung"] == RUNG)]["value"]
    assert len(share) == 1 and share.iloc[0] < 1.0
