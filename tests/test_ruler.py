"""RULER items, fitting and scoring, on the embedded model's real tokenizer and chat template.

Every generator is checked for what RULER relies on: the needles sit exactly where the item says,
the prompt (chat template + task + answer prefix) plus the tokens to generate fits the length in
the model's own tokens and nearly fills it, and a perfect reply scores 100 with RULER's metric.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter

import pytest
import yaml

from quantladder import schemas
from quantladder.benchmarks import ruler
from quantladder.benchmarks.ruler import build, haystack, score, tasks
from quantladder.benchmarks.ruler import qa as ruler_qa
from quantladder.corpora import pydoc_topics_text
from quantladder.engine import Engine, EngineSettings
from quantladder.errors import ConfigError, DataError

LENGTH = 1024


@pytest.fixture(scope="module")
def fmt(smollm_q8):
    eng = Engine(smollm_q8, EngineSettings(n_ctx=256, n_threads=1))
    yield build.PromptFormat(eng, chat=True)
    eng.close()


@pytest.fixture(scope="module")
def words():
    return haystack.word_lists()


@pytest.fixture(scope="module")
def essay():
    return haystack.essay_words(pydoc_topics_text())


def make(fmt, words, essay, task, length=LENGTH, n=2, seed=42, qa=None):
    return build.build_items(fmt=fmt, blocks=[(length, task, n)], seed=seed, words=words, essay=essay, qa=qa)


@pytest.mark.parametrize("task", ruler.SYNTHETIC)
def test_items_fit_the_length_in_model_tokens(fmt, words, essay, task):
    items = make(fmt, words, essay, task)
    assert len(items) == 2
    for it in items:
        n = len(fmt.tokens(it["prompt"]))  # recount independently of the builder
        assert n == it["n_prompt_tokens"]
        assert n + it["tokens_to_generate"] <= LENGTH
        # The search fills the length: no more than a few haystack units are left unused.
        assert n + it["tokens_to_generate"] > 0.85 * LENGTH, (task, n)
        assert it["tokens_to_generate"] == {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50}[it["kind"]]
        # Chat template around the task, RULER's answer prefix after the assistant tag.
        assert it["prompt"].startswith("<|im_start|>")
        assert it["prompt"].endswith("<|im_start|>assistant\n" + it["answer_prefix"])


@pytest.mark.parametrize("task", [t for t in ruler.SYNTHETIC if t.startswith("niah")] + ["vt"])
def test_needles_are_exactly_where_stated(fmt, words, essay, task):
    spec = ruler.TASKS[task]
    for it in make(fmt, words, essay, task):
        assert it["needles"], task
        for nd in it["needles"]:
            assert it["prompt"][nd["offset"]:nd["offset"] + len(nd["text"])] == nd["text"]
            assert 0 <= nd["depth_percent"] <= 100
        if spec.kind == "niah":
            a = spec.args
            assert len(it["needles"]) == max(a["num_needle_k"], a["num_needle_q"]) * a["num_needle_v"]
            # Every expected value is carried by a needle whose key is one of the queried keys.
            for value in it["answers"]:
                carriers = [nd["text"] for nd in it["needles"] if nd["text"].endswith(f"is: {value}.")]
                assert len(carriers) == 1
                assert any(f" for {k} is:" in carriers[0] for k in it["meta"]["queries"])
        else:  # vt: the chain in order, from the value to the last name
            stmts = [nd["text"].strip() for nd in it["needles"]]
            names = it["answers"]
            assert stmts[0] == f"VAR {names[0]} = {it['meta']['value']}"
            assert stmts[1:] == [f"VAR {names[j + 1]} = VAR {names[j]}" for j in range(len(names) - 1)]
            assert [nd["offset"] for nd in it["needles"]] == sorted(nd["offset"] for nd in it["needles"])


@pytest.mark.parametrize("task", ruler.SYNTHETIC)
def test_perfect_reply_scores_100_and_a_wrong_one_does_not(fmt, words, essay, task):
    for it in make(fmt, words, essay, task, n=1):
        perfect = " " + ", ".join(it["answers"]) + "."
        assert score.score_item(it, perfect) == 1.0
        assert score.score_item(it, perfect.upper()) == 1.0  # RULER compares case-insensitively
        assert score.score_item(it, "I do not know.") == 0.0
        if len(it["answers"]) > 1:
            half = ", ".join(it["answers"][: len(it["answers"]) // 2])
            assert 0 < score.score_item(it, half) < 1


def test_singular_wording_for_one_value(fmt, words, essay):
    it = make(fmt, words, essay, "niah_single_1", n=1)[0]
    key = it["meta"]["queries"][0]
    assert "A special magic number is hidden within the following text." in it["prompt"]
    assert f"What is the special magic number for {key} mentioned in the provided text?" in it["prompt"]
    assert it["answer_prefix"] == f" The special magic number for {key} mentioned in the provided text is"
    # niah_single_1's haystack is RULER's repeated noise block.
    assert it["prompt"].count(haystack.NOISE) >= it["size"]
    multi = make(fmt, words, essay, "niah_multivalue", n=1)[0]
    assert "Some special magic numbers are hidden" in multi["prompt"]


def test_needle_haystack_is_made_of_distractor_needles(fmt, words, essay):
    it = make(fmt, words, essay, "niah_multikey_3", n=1)[0]
    lines = [ln for ln in it["prompt"].split("\n") if ln.startswith("One of the special magic uuids for ")]
    assert len(lines) == it["size"] + 1  # the distractors and the one real needle
    uuid_re = re.compile(r"^One of the special magic uuids for [0-9a-f-]{36} is: [0-9a-f-]{36}\.$")
    assert all(uuid_re.match(ln) for ln in lines)


def test_cwe_answers_are_the_most_common_words(fmt, words, essay):
    it = make(fmt, words, essay, "cwe", n=1)[0]
    main_list = it["prompt"].split("Question: What are the 10 most common words")[1]  # after the one-shot example
    task_text = it["prompt"].split("Answer: The top 10 words that appear most often in the list are:")[1]
    counts = Counter(re.findall(r"\d+\. (\S+)", task_text.split("Question:")[0]))
    assert len(it["answers"]) == 10
    least_common_answer = min(counts[w] for w in it["answers"])
    most_common_other = max(c for w, c in counts.items() if w not in it["answers"])
    assert least_common_answer > most_common_other
    assert main_list


def test_fwe_answers_are_the_three_most_frequent_coded_words(fmt, words, essay):
    it = make(fmt, words, essay, "fwe", n=1)[0]
    body = it["prompt"].split("coded words. ")[1].split("\nQuestion:")[0]
    counts = Counter(w for w in body.split() if w != "...")
    assert [w for w, _ in counts.most_common(3)] == it["answers"]
    assert tasks.zeta(2.0) == pytest.approx(3.14159265358979 ** 2 / 6, abs=1e-10)


def test_items_are_deterministic_in_the_seed(fmt, words, essay):
    a = make(fmt, words, essay, "niah_single_2", n=2, seed=7)
    b = make(fmt, words, essay, "niah_single_2", n=2, seed=7)
    c = make(fmt, words, essay, "niah_single_2", n=2, seed=8)
    assert [x["prompt"] for x in a] == [x["prompt"] for x in b]
    assert a[0]["answers"] != c[0]["answers"]
    assert a[0]["answers"] != a[1]["answers"]  # items differ within a run


def test_items_file_is_appended_and_hashed(tmp_path, fmt, words, essay):
    out = tmp_path / "items.jsonl"
    blocks = [(768, "niah_single_1", 1), (768, "vt", 1), (LENGTH, "niah_single_1", 1), (LENGTH, "vt", 1)]
    items = build.build_items(fmt=fmt, blocks=blocks, seed=1, words=words, essay=essay, out_path=out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["item_id"] for x in lines] == [x["item_id"] for x in items] == [
        "niah_single_1-768-0000", "vt-768-0000", "niah_single_1-1024-0000", "vt-1024-0000"]
    meta = build.write_items_meta(tmp_path / "items.json", out, {"seed": 1})
    assert len(meta["sha256"]) == 64


def test_fit_size_finds_the_largest_fitting_size():
    for limit in (1, 2, 3, 17, 1000, 4097):
        assert build.fit_size(lambda s, lim=limit: s <= lim, 1, None) == limit
    assert build.fit_size(lambda s: s <= 50, 1, 20) == 20  # capped by the data
    assert build.fit_size(lambda s: False, 1, None) is None


def test_a_length_too_short_for_the_task_is_an_error_naming_the_key(fmt, words, essay):
    with pytest.raises(DataError, match="benchmarks.ruler.lengths"):
        make(fmt, words, essay, "niah_single_1", length=140)


def test_lengths_are_capped_by_the_trained_context():
    kept, dropped, note = build.cap_lengths([131072, 4096, 8192, 16384], 8192)
    assert kept == [4096, 8192] and dropped == [16384, 131072]
    assert "8192" in note and "16384" in note
    assert build.cap_lengths([4096, 16384], 8192, cap=False)[0] == [4096, 16384]


# -- scoring -----------------------------------------------------------------------------------
def test_string_match_metrics_follow_ruler():
    assert score.string_match_all("The numbers are 123 and 456", ["123", "456", "789", "000"]) == 0.5
    assert score.string_match_all("ABC-def", ["abc-DEF"]) == 1.0
    assert score.string_match_part("It was Paris.", ["paris", "Lyon"]) == 1.0
    assert score.string_match_part("It was Rome.", ["paris", "Lyon"]) == 0.0
    assert score.postprocess("  a\x00b\tc ") == "a\nb\nc"


def _threshold() -> float:
    """benchmarks.ruler.threshold as the schema gives it (Llama-2-7B's 85.6 at 4K): the one home of it."""
    return ruler.resolve_settings({})["threshold"]


def test_effective_length_uses_the_llama2_threshold():
    # RULER README rows: GLM4 (9B) is effective to 64K, LWM (7B) below 4K.
    assert _threshold() == 85.6
    glm4 = dict(zip([4096, 8192, 16384, 32768, 65536, 131072], [94.7, 92.8, 92.1, 89.9, 86.7, 83.1]))
    lwm = dict(zip([4096, 8192, 16384, 32768, 65536, 131072], [82.3, 78.4, 73.7, 69.1, 68.1, 65.0]))
    assert score.effective_length(glm4, _threshold()) == 65536
    assert score.effective_length(lwm, _threshold()) == 0
    # A dip then a recovery does not extend the effective length.
    assert score.effective_length({4096: 90, 8192: 80, 16384: 95}, _threshold()) == 4096


def test_aggregate_rows_have_units_errors_and_lengths():
    v = [{"subset": "vt", "n_ctx": 1024, "score": s, "degenerate": d}
         for s, d in [(1.0, False), (0.6, False), (0.0, True)]]
    v += [{"subset": "cwe", "n_ctx": 1024, "score": 1.0, "degenerate": False}] * 3
    rows, summary = score.aggregate(v, _threshold())
    by = {(r["metric"], r["subset"], r["n_ctx"]): r for r in rows}
    vt = by[("score", "vt", 1024)]
    assert vt["unit"] == "%" and vt["n"] == 3 and vt["value"] == pytest.approx(160 / 3)
    assert vt["stderr"] == pytest.approx(statistics.stdev([100, 60, 0]) / 3 ** 0.5)
    avg = by[("score_avg", None, 1024)]
    assert avg["value"] == pytest.approx((160 / 3 + 100) / 2)
    assert by[("effective_length", None, None)]["value"] == 0 and summary["effective_length"] == 0
    # loops are counted once, for every task benchmark, by the score stage (quantladder.scoring)
    assert not any(m.startswith("degenerate") for m, _, _ in by)


# -- QA (SQuAD / HotpotQA through a local fixture file; the hub path uses the same loader) ------------
SQUAD = {"data": [
    {"title": "Rivers", "paragraphs": [
        {"context": "The Danube flows through ten countries and ends in the Black Sea.",
         "qas": [{"question": "Where does the Danube end?", "is_impossible": False,
                  "answers": [{"text": "the Black Sea"}, {"text": "Black Sea"}]},
                 {"question": "Who built the Danube?", "is_impossible": True, "answers": []}]},
        {"context": "The Rhine rises in the Swiss Alps.",
         "qas": [{"question": "Where does the Rhine rise?", "is_impossible": False,
                  "answers": [{"text": "the Swiss Alps"}]}]}]},
    {"title": "Metals", "paragraphs": [
        {"context": f"Alloy number {i} mixes copper and tin in its own proportion.",
         "qas": [{"question": f"What does alloy {i} mix?", "is_impossible": False,
                  "answers": [{"text": "copper and tin"}]}]} for i in range(40)]},
]}
HOTPOT = [
    {"question": "Which city hosts the tower designed by Gustave Eiffel's company?", "answer": "Paris",
     "context": [["Eiffel Tower", ["The Eiffel Tower is in Paris. ", "It was finished in 1889."]],
                 ["Gustave Eiffel", ["Gustave Eiffel's company designed the tower."]]]},
] + [{"question": f"Q{i}?", "answer": f"A{i}", "context": [[f"Title {i}", [f"Filler document {i} about nothing."]]]}
     for i in range(40)]


@pytest.fixture(scope="module")
def qa_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    (d / "squad.json").write_text(json.dumps(SQUAD))
    (d / "hotpotqa.json").write_text(json.dumps(HOTPOT))
    return d


def test_qa_items_hold_the_gold_document_and_score_with_string_match_part(fmt, words, essay, qa_files):
    squad, _ = ruler_qa.load("squad", {"path": str(qa_files / "squad.json")})
    hotpot, _ = ruler_qa.load("hotpotqa", {"path": str(qa_files / "hotpotqa.json")})
    assert len(squad.questions) == 42  # the unanswerable one is dropped, as RULER does
    qa = {"squad": squad, "hotpotqa": hotpot}
    for task, gold in (("qa_1", "The Danube flows through ten countries"), ("qa_2", "The Eiffel Tower is in Paris.")):
        it = make(fmt, words, essay, task, length=512, n=1, qa=qa)[0]
        assert it["tokens_to_generate"] == 32 and it["metric"] == "string_match_part"
        assert gold in it["prompt"]
        assert it["n_prompt_tokens"] + 32 <= 512
        assert it["meta"]["size"] > 2  # distractor documents fill the length
        assert score.score_item(it, f" {it['answers'][-1]}") == 1.0
        assert score.score_item(it, " Madrid") == 0.0


def test_qa_reads_the_hub_parquet_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": "1", "title": "Rivers", "context": "The Rhine rises in the Swiss Alps.",
             "question": "Where does the Rhine rise?", "answers": {"text": ["the Swiss Alps"], "answer_start": [19]}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "validation.parquet")
    data, _ = ruler_qa.load("squad", {"path": str(tmp_path / "validation.parquet")})
    assert data.questions[0]["outputs"] == ["the Swiss Alps"] and data.docs == [rows[0]["context"]]


def test_qa_source_errors_name_the_file(tmp_path):
    bad = tmp_path / "squad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(DataError, match="squad.json"):
        ruler_qa.load("squad", {"path": str(bad)})


def test_trained_length_and_cells_plan_the_blocks():
    """`trained` is the GGUF's trained context; a cell adds its own (task, length, samples) beside the
    sweep; blocks come in length order, the config's order within a length; a length above the
    trained context is dropped with the note."""
    s = ruler.resolve_settings({"enabled": True, "tasks": ["vt", "cwe"], "lengths": [1024, 16384], "samples": 2,
                                "cells": [{"length": "trained", "tasks": ["niah_single_1"]},
                                          {"length": 2048, "tasks": ["fwe"], "samples": 3}]})
    blocks, facts = build.plan_blocks(s, 8192)
    assert blocks == [(1024, "vt", 2), (1024, "cwe", 2), (2048, "fwe", 3), (8192, "niah_single_1", 1)]
    assert facts["lengths"] == [1024, 2048, 8192] and facts["lengths_dropped"] == [16384]
    assert ruler.all_tasks(s) == ["vt", "cwe", "niah_single_1", "fwe"]
    assert ruler.Ruler(s).max_n_ctx(8192) == 16384 and ruler.Ruler({**s, "lengths": [1024]}).max_n_ctx(8192) == 8192
    assert ruler.Ruler({**s, "lengths": ["trained"], "cells": []}).max_n_ctx(None) == 4096  # not known yet
    with pytest.raises(DataError, match=r"benchmarks\.ruler\.cells\[0\].*context_length"):
        build.plan_blocks(s, 0)
    twice = {**s, "cells": [{"length": 1024, "tasks": ["vt"]}]}
    with pytest.raises(DataError, match=r"benchmarks\.ruler\.cells\[0\]: vt at 1024 tokens is asked for twice"):
        build.plan_blocks(twice, 8192)
    with pytest.raises(ConfigError, match="benchmarks.ruler.tasks"):
        ruler.resolve_settings({"enabled": True, "cells": [{"length": 1024, "tasks": ["niah_single_9"]}]})


def test_the_items_key_names_the_cells(repo_root):
    """A cell is an item setting: adding one changes the items key (and so every RULER point's keys)."""
    from quantladder import config as qconfig
    from quantladder import manifest

    cfg = qconfig.load(repo_root / "config" / "config.yaml")
    fam = qconfig.families(cfg)[0]
    before = manifest.items_key(cfg, fam, "ruler")
    cfg["benchmarks"]["ruler"]["cells"] = [{"length": "trained", "tasks": ["vt"], "samples": 2}]
    assert manifest.items_key(cfg, fam, "ruler") != before


def test_ruler_kv_types_add_points_for_ruler_alone(repo_root):
    """benchmarks.ruler.kv_types: RULER runs at those KV types too; every other figure stays at the
    family's types; a KV type that is not one is refused naming the key."""
    from quantladder import config as qconfig
    from quantladder import targets

    cfg = qconfig.load(repo_root / "config" / "config.yaml")
    cfg["benchmarks"]["ruler"]["kv_types"] = ["f16", "q8_0", "q4_0"]
    qconfig.check_semantics(cfg)
    fam = qconfig.families(cfg)[0]
    planned = [t for t in targets.planned(cfg, "c", fam) if t.series == "points"]
    by_kv = {kv: {t.measure for t in planned if t.kv == kv} for kv in ("f16", "q8_0", "q4_0")}
    assert by_kv["q8_0"] == by_kv["q4_0"] == {"ruler"} and {"perplexity", "bfcl", "ruler"} <= by_kv["f16"]
    task_points = {t.rung for t in planned if t.kv == "q4_0"}
    assert task_points == {qconfig.reference_rung(cfg, fam), *cfg["families"][fam]["task_rungs"]}
    cfg["benchmarks"]["ruler"]["kv_types"] = ["q3_x"]
    with pytest.raises(ConfigError, match=r"benchmarks\.ruler\.kv_types"):
        qconfig.check_semantics(cfg)


def test_essay_json_source_reads_rulers_file(tmp_path):
    p = tmp_path / "PaulGrahamEssays.json"
    p.write_text(json.dumps({"text": "Startups grow fast. Most fail."}))
    assert haystack.load_text_source({"path": str(p), "format": "json-text"}) == "Startups grow fast. Most fail."


# -- settings ------------------------------------------------------------------------------------
def test_settings_defaults_and_errors():
    s = ruler.resolve_settings({"enabled": True})
    assert s["tasks"] == ruler.SYNTHETIC and s["lengths"][0] == 4096 and s["threshold"] == 85.6
    with pytest.raises(ConfigError, match="benchmarks.ruler.tasks"):
        ruler.resolve_settings({"enabled": True, "tasks": ["niah_single_9"]})
    with pytest.raises(ConfigError, match="benchmarks.ruler.qa"):
        ruler.resolve_settings({"enabled": True, "tasks": ["qa_1"]})


def test_schema_accepts_the_default_config_and_matches_the_defaults(repo_root):
    import jsonschema

    schema = schemas.load(schemas.benchmark_schema_path("ruler"))
    cfg = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    section = cfg["benchmarks"]["ruler"]
    jsonschema.validate(section, schema)
    resolved = ruler.resolve_settings({"enabled": True})
    for key, prop in schema["properties"].items():
        if "default" in prop:
            assert resolved[key] == prop["default"] or key == "essay", key  # essay: nested defaults filled
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**section, "tasks": ["niah_single_9"]}, schema)


def test_memory_request_grows_with_the_kv_cache(tmp_path, smollm_q8, repo_root):
    """The generate rule's mem_mb: model + every sequence's KV cache at the longest length + headroom;
    the longest length is capped by the model's trained context (SmolLM2: 8192)."""
    from types import SimpleNamespace

    from quantladder import resources
    from quantladder.generation_policy import GenerationPolicy
    from quantladder.gguf_meta import read_info

    info = read_info(smollm_q8)
    sidecar = tmp_path / "rung.gguf.json"
    sidecar.write_text(json.dumps({"info": info.as_dict()}))
    cfg = {"resources": {"mem_overhead_mb": 0}, "generation": {"n_parallel": 16},
           "benchmarks": {"ruler": {"enabled": True, "lengths": [4096, 131072]}}}
    mem = resources.generate_mem_mb(cfg)
    inp = SimpleNamespace(info=str(sidecar), gguf=str(smollm_q8))
    w = SimpleNamespace(task="ruler", series="points", kv="f16")
    f16 = mem(w, inp, 1)
    q8 = mem(SimpleNamespace(task="ruler", series="points", kv="q8_0"), inp, 1)
    kv_mb = 16 * info.kv_bytes(8192, "f16", "f16") / 2**20
    assert f16 >= info.file_bytes * 1.15 / 2**20 + kv_mb and q8 < f16
    assert mem(w, inp, 2) >= 2 * f16 - 256  # a retry asks for more
    assert GenerationPolicy({"n_parallel": 16}).n_parallel_for(info, 8192) == 16
