"""Third-party files through the real workflow (issue 44): one Snakemake run of the default config made
small, whose family has three prebuilt rungs given as local paths, each the embedded SmolLM2 file with
one change written with the `gguf` package (tests/provenance_util.py):

- ``Q4_1-merge``: two merges swapped, accepted by key: measured, its PPL present, its KLD and PPL
  ratio absent with the reason (its tokens are not the reference's tokens);
- ``Q4_1-chat``: another default system prompt in its chat template, accepted by group: its chat
  exam (arithmetic, two items) runs and every row of the rung carries the flag, in the dataset and
  beside the rung in the report;
- ``Q4_1-eos``: another EOS id, not accepted: its acquire job fails with a message that names the key
  and both values, and nothing of it is measured.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import provenance_util as pu
from pipeline_util import small_config, snakemake, stand_ins_off, write_config

from quantladder import aggregate, card, dataset, report

pytestmark = pytest.mark.slow
FAMILY = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def run(tmp_path_factory, smollm_source):
    work = tmp_path_factory.mktemp("provenance-pipeline")
    hub = pu.write_all(smollm_source, work / "hub", only=("merge", "template", "eos"))
    cfg = small_config(rungs=())
    for m in ("speed", "memory", "energy"):
        cfg["measures"][m]["enabled"] = False
    fam = cfg["families"][FAMILY]
    fam["prebuilt"] = {
        "Q4_1-merge": {"source": {"path": str(hub["merge"])}, "accept": ["tokenizer.ggml.merges"]},
        "Q4_1-chat": {"source": {"path": str(hub["template"])}, "accept": ["chat_template"]},
        "Q4_1-eos": {"source": {"path": str(hub["eos"])}},
        # the same file as Q4_1-chat, its chat exams run with the reference's template (no accept needed)
        "Q4_1-chatref": {"source": {"path": str(hub["template"])}, "chat_template": "reference"},
    }
    stand_ins_off(cfg)  # the default's stand-in (a copy of a Q4_K_M this ladder does not make): off
    fam["task_rungs"] = ["Q4_1-chat", "Q4_1-merge", "Q4_1-chatref"]
    cfg["benchmarks"]["arithmetic"].update(enabled=True, generated={"seed": 1, "kinds": ["plain"], "levels": [1],
                                                                    "per_level": 2})
    cfg["fidelity"] = {"benchmarks": ["arithmetic"], "n_batch": 2048}
    label = card.label()
    pts = f"results/{label}/points/{FAMILY}"
    targets = {"merge": f"{pts}/Q4_1-merge/f16/perplexity/metrics.json",
               "chat_ppl": f"{pts}/Q4_1-chat/f16/perplexity/metrics.json",
               "chat_exam": f"{pts}/Q4_1-chat/f16/arithmetic/metrics.json",
               "merge_fidelity": f"{pts}/Q4_1-merge/f16/fidelity-arithmetic/metrics.json",
               "chatref_exam": f"{pts}/Q4_1-chatref/f16/arithmetic/metrics.json",
               "chat_fidelity": f"{pts}/Q4_1-chat/f16/fidelity-arithmetic/metrics.json",
               "eos": f"resources/models/{FAMILY}/prebuilt/Q4_1-eos.gguf.json"}
    r = snakemake(work, "--keep-going", *targets.values(), config=write_config(work, cfg), check=False)
    return work, label, targets, r


def _metrics(work, path) -> dict:
    return json.loads((work / path).read_text())


def test_an_unaccepted_difference_fails_the_acquire_job_naming_it(run):
    work, label, targets, r = run
    assert r.returncode != 0  # the one job that had to fail did
    log = (work / f"logs/acquire_prebuilt/{FAMILY}/Q4_1-eos.log").read_text()
    for text in (log, r.stdout + r.stderr):
        assert "tokenizer.ggml.eos_token_id (tokenizer): the reference has 2, this file 3" in text
    assert f"families.{FAMILY}.prebuilt.Q4_1-eos.accept" in log
    # nothing of it is left to measure, and nothing was measured
    assert not (work / f"resources/models/{FAMILY}/prebuilt/Q4_1-eos.gguf").exists()
    assert not (work / targets["eos"]).exists()
    assert not (work / f"results/{label}/points/{FAMILY}/Q4_1-eos").exists()
    # the other rungs went on (--keep-going) and are measured
    for t in ("merge", "chat_ppl", "chat_exam", "merge_fidelity", "chat_fidelity", "chatref_exam"):
        assert (work / targets[t]).exists(), r.stderr[-4000:]


def test_a_tokenizer_accepted_keeps_ppl_and_refuses_kld_with_the_reason(run):
    work, _, targets, _ = run
    m = _metrics(work, targets["merge"])
    rows = {r["metric"]: r for r in m["rows"]}
    assert rows["ppl"]["value"] > 1 and "status" not in rows["ppl"]  # PPL itself is the file's own figure
    for metric in ("kld_mean", "ppl_ratio", "same_top_token"):
        assert rows[metric]["value"] is None and rows[metric]["status"] == "absent"
        assert "tokenizer.ggml.merges" in rows[metric]["status_reason"]
        assert "other tokens" in rows[metric]["status_reason"]
    assert "ppl_base" not in rows  # nothing against the reference was computed
    prov = m["manifest"]["model"]["provenance"]
    assert prov["differs_in"] == ["tokenizer"] and prov["accepted"] == ["tokenizer.ggml.merges"]
    assert prov["tokens_differ"] == ["tokenizer.ggml.merges"]
    assert prov["reference"]["sha256"] and len(prov["reference"]["sha256"]) == 64
    # the sidecar the acquire job wrote (the gate ran before the pass) is what the manifest carries
    sidecar = json.loads((work / f"resources/models/{FAMILY}/prebuilt/Q4_1-merge.gguf.json").read_text())
    assert sidecar["provenance"] == prov


def test_a_tokenizer_accepted_refuses_the_teacher_forced_fidelity_rows(run):
    """The merge file's replies are its own tokens and the reference's replies are fed to it as the
    reference's token ids: every figure counted in tokens is absent with the reason; the template file
    (the reference's tokens) keeps its teacher-forced KLD, with its interval clustered by reply."""
    work, _, targets, _ = run
    merge = {r["metric"]: r for r in _metrics(work, targets["merge_fidelity"])["rows"]}
    for metric in ("teacher_kld", "teacher_same_top", "first_divergence_token", "reply_length_change"):
        assert merge[metric]["value"] is None and merge[metric]["status"] == "absent"
        assert "tokenizer.ggml.merges" in merge[metric]["status_reason"]
    assert merge["degenerate_change"]["value"] is not None  # read from text: stands
    chat = {(r["metric"], r["subset"]): r for r in _metrics(work, targets["chat_fidelity"])["rows"]}
    kld = chat[("teacher_kld", "reference_replies")]
    assert kld["value"] is not None and kld["value"] >= 0 and "status" not in kld
    assert kld["n_clusters"] == 2 and kld["ci_low"] <= kld["value"] <= kld["ci_high"]  # the two replies


def test_the_reference_template_asked_for_is_the_one_the_exam_ran_with_and_is_said(run):
    """`chat_template: reference`: the rung's copy carries the reference's template (its own is on record by
    hash), nothing needs accepting, its prompts are the reference's prompts, and every row says so."""
    from quantladder.gguf_meta import scan_header

    work, label, targets, _ = run
    side = json.loads((work / f"resources/models/{FAMILY}/prebuilt/Q4_1-chatref.gguf.json").read_text())
    prov = side["provenance"]
    assert prov["differs_in"] == [] and prov["chat_template"]["from"] == "reference"
    assert prov["chat_template"]["own_differs"] is True and side["sha256_source"] != side["sha256"]
    ref_gguf = next((work / f"resources/models/{FAMILY}/reference").glob("*.gguf"))
    copy, _ = scan_header(work / f"resources/models/{FAMILY}/prebuilt/Q4_1-chatref.gguf")
    own, _ = scan_header(work / f"resources/models/{FAMILY}/prebuilt/Q4_1-chat.gguf")
    ref, _ = scan_header(ref_gguf)
    assert copy["tokenizer.chat_template"] == ref["tokenizer.chat_template"] != own["tokenizer.chat_template"]
    gens = lambda rung: [json.loads(x)["prompt_ids"] for x in  # noqa: E731
                         (work / f"results/{label}/points/{FAMILY}/{rung}/f16/arithmetic/generations.jsonl")
                         .read_text().splitlines()]
    assert gens("Q4_1-chatref") != gens("Q4_1-chat")  # the two templates render other prompts
    rows = aggregate.collect([str(work / targets["chatref_exam"])])
    assert {r["provenance"] for r in rows} == {
        "third party, as the reference; chat exams with the reference's template (its own differs)"}


def test_a_template_accepted_flags_every_row_of_the_rung(run):
    work, label, targets, _ = run
    # the template rung's tokens are the reference's: its KLD on a plain corpus stands
    ppl = {r["metric"]: r for r in _metrics(work, targets["chat_ppl"])["rows"]}
    assert ppl["kld_mean"]["value"] is not None and ppl["kld_mean"]["value"] >= 0
    exam = _metrics(work, targets["chat_exam"])
    assert exam["manifest"]["model"]["provenance"]["differs_in"] == ["chat_template"]
    rows = aggregate.collect([str(work / targets[t]) for t in ("merge", "chat_ppl", "chat_exam")])
    out = work / "points.parquet"
    dataset.write(rows, out)
    df = pd.read_parquet(out)
    chat = df[df["rung"] == "Q4_1-chat"]
    assert set(chat["benchmark"]) == {"perplexity", "arithmetic"} and len(chat[chat["benchmark"] == "arithmetic"]) > 0
    assert set(chat["provenance"]) == {"third party; differs from the reference in: chat_template (accepted)"}
    assert set(df[df["rung"] == "Q4_1-merge"]["provenance"]) == {
        "third party; differs from the reference in: tokenizer (accepted)"}
    refused = df[(df["rung"] == "Q4_1-merge") & (df["metric"] == "kld_mean")]
    assert refused["value"].isna().all() and refused["status_reason"].str.contains("tokenizer.ggml.merges").all()
    # the report: beside the rung in its table, and under the family's first sentence
    html = report.render(df, label)
    rungs = html[html.index(f'id="table-rungs-{FAMILY}"'):]
    rungs = rungs[:rungs.index("</table>")]
    assert "Q4_1-chat <small class=\"provenance warn\"" in rungs and "chat_template (accepted)" in rungs
    first = html[html.index('class="warn provenance"'):]
    assert "Q4_1-chat: chat_template (accepted)" in first[:first.index("</p>")]
