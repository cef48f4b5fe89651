"""Arithmetic: the seeded set is fixed by its seed and its generator version (in the items key), its
answers are exact; GSM8K's references read after `####`, a reply's final answer is its last number;
GSM8K comes through the hub source path (a pinned revision in huggingface_hub's cache, no network);
the example config that adds it plans arithmetic jobs."""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

import pytest

from quantladder import benchmarks, manifest
from quantladder.benchmarks.arithmetic import answers, generate
from quantladder.benchmarks.base import ScoringContext, Env
from quantladder.errors import ConfigError, DataError

GSM8K_HF = {"repo_id": "openai/gsm8k", "filename": "main/test-00000-of-00001.parquet",
            "revision": "740312add88f781978c0658806c59bc2815b9866", "repo_type": "dataset"}
# Three problems in GSM8K's layout (question; a worked answer with calculator marks, closed by "#### n"),
# written for this test.
GSM8K_RECORDS = [
    {"question": "A baker makes 12 trays of 24 rolls and sells all but 30. How many rolls does she sell?",
     "answer": "She makes 12*24=<<12*24=288>>288 rolls.\nShe sells 288-30=<<288-30=258>>258.\n#### 258"},
    {"question": "A town of 1,150 people grows by 50. How many people live there now?",
     "answer": "1,150+50=<<1150+50=1200>>1,200\n#### 1,200"},
    {"question": "A tank loses 3 litres a day for 4 days from 10 litres. How many are left?",
     "answer": "3*4=<<3*4=12>>12 are lost, so 10-12=<<10-12=-2>>-2.\n#### -2"},
]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _arith(node):
    """Evaluate a generated expression of integers, +, - and * (nothing else is accepted)."""
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise ValueError(ast.dump(node))


def test_the_seeded_set_is_fixed_by_its_seed_and_graded_by_level():
    a = generate.problems(7, per_level=5)
    assert a == generate.problems(7, per_level=5)
    assert a != generate.problems(8, per_level=5)
    assert len(a) == 2 * 4 * 5 and len({p.id for p in a}) == len(a)
    # a level's items do not depend on which other kinds or levels are asked for
    only = generate.problems(7, kinds=["word"], levels=[3], per_level=5)
    assert only == [p for p in a if p.subset == "word-3"]
    for p in a:
        kind, level = p.subset.split("-")
        if kind == "plain":  # the answer is the expression's exact value; a level adds digits or an operation
            expr = p.question.removeprefix("What is ").removesuffix("?")
            assert _arith(ast.parse(expr, mode="eval")) == p.answer
            assert p.steps == expr.count("+") + expr.count("-") + expr.count("*") == max(1, int(level) - 1)
            assert (max(len(t) for t in re.findall(r"\d+", expr)) == 1) == (level == "1")
        else:
            assert p.steps == int(level) and p.answer >= 0
        assert isinstance(p.answer, int)


def test_the_generator_version_is_in_the_items_key(monkeypatch):
    cfg = {"families": {"f": {"source": {"path": "/m.gguf"}}}, "benchmarks": {"arithmetic": {"enabled": True}}}
    before = manifest.items_key(cfg, "f", "arithmetic")
    monkeypatch.setattr(generate, "GENERATOR_VERSION", "arith-gen-test")
    assert manifest.items_key(cfg, "f", "arithmetic") != before
    cfg["benchmarks"]["arithmetic"]["generated"] = {"seed": 2}
    assert benchmarks.create("arithmetic", cfg["benchmarks"]["arithmetic"]).settings["generated"]["per_level"] == 2
    # the prompt's style is part of the items: the other style makes other items
    styled = {**cfg, "benchmarks": {"arithmetic": {"enabled": True, "prompt": "cot"}}}
    assert manifest.items_key(styled, "f", "arithmetic") != manifest.items_key(cfg, "f", "arithmetic")


def test_a_section_with_no_items_is_refused():
    with pytest.raises(ConfigError, match="benchmarks.arithmetic"):
        benchmarks.create("arithmetic", {"enabled": True, "generated": None})


@pytest.mark.parametrize("reply, want", [
    ("5 + 3 = 8, then 8 * 2 = 16.\nThe answer is 16.", Fraction(16)),
    ("It costs $1,234.50 in all.", Fraction("1234.5")),
    ("18.00", Fraction(18)),
    ("The answer is -7", Fraction(-7)),
    ("I do not know.", None),
])
def test_a_replys_answer_is_its_last_number(reply, want):
    assert answers.reply_answer(reply) == want


def test_gsm8k_references_read_after_the_marker():
    assert [answers.reference_answer(r["answer"], "x") for r in GSM8K_RECORDS] == [258, 1200, -2]
    with pytest.raises(DataError, match="gsm.parquet: record 4"):
        answers.reference_answer("no marker here, 42", "gsm.parquet: record 4")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """GSM8K's file where huggingface_hub keeps a pinned revision: hf_hub_download answers from it
    without a request (a commit sha's snapshot is used as it is)."""
    import huggingface_hub.constants as hc
    import pyarrow as pa
    import pyarrow.parquet as pq

    snap = (tmp_path / "hub" / "datasets--openai--gsm8k" / "snapshots" / GSM8K_HF["revision"] / GSM8K_HF["filename"])
    snap.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(GSM8K_RECORDS), snap)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return snap


def test_gsm8k_from_the_hub_source_is_scored_by_exact_match(hub_cache, tmp_path):
    b = benchmarks.create("arithmetic", {"enabled": True, "generated": None,
                                         "gsm8k": {"source": {"hf": GSM8K_HF}, "limit": None}})
    src = b.fetch_source(str(tmp_path))
    assert src["gsm8k"]["path"] == str(hub_cache) and len(src["gsm8k"]["sha256"]) == 64
    items, facts = b.build_items(src)
    assert [it.answer["value"] for it in items] == ["258", "1200", "-2"] and facts["generator"] is None
    assert all(it.subset == "gsm8k" and it.data["prompt"].endswith("Answer with the final number only.") for it in items)
    replies = {"gsm8k-0000": "12 x 24 = 288, minus 30 is 258.\nThe answer is 258.",
               "gsm8k-0001": "The answer is 1,200.", "gsm8k-0002": "It loses 12 litres, so 2 are left."}
    gens = {k: {"item_id": k, "text": v} for k, v in replies.items()}
    v = b.verdicts(items, gens, ScoringContext(Env(src)))
    assert [x["correct"] for x in v] == [True, True, False] and v[2]["error_type"] == "wrong_answer"
    rows = {r["subset"]: r for r in b.metric_rows(v, items)}
    assert rows[None]["value"] == pytest.approx(200 / 3) and rows[None]["n"] == 3 and rows[None]["stderr"] > 0
    assert rows["gsm8k"]["value"] == rows[None]["value"]


def test_a_gsm8k_file_without_its_columns_is_named(tmp_path):
    bad = tmp_path / "gsm.jsonl"
    bad.write_text('{"problem": "1+1", "solution": "#### 2"}\n')
    b = benchmarks.create("arithmetic", {"enabled": True, "generated": None, "gsm8k": {"source": {"path": str(bad)}}})
    with pytest.raises(DataError, match="gsm.jsonl: GSM8K records need"):
        b.build_items(b.fetch_source(str(tmp_path)))


@pytest.mark.slow
def test_the_gsm8k_example_plans_arithmetic_on_the_task_rungs(tmp_path):
    """config/examples/arithmetic-gsm8k.yaml over the default: the config checks pass and the arithmetic
    jobs are planned (a dry run: the hub is reached only by the source job, which does not run here)."""
    from pipeline_util import REPO, planned_jobs, snakemake

    r = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / "examples" / "arithmetic-gsm8k.yaml"))
    jobs = planned_jobs(r.stdout)
    gen = {(w["series"], w["rung"]) for rule, w in jobs if rule == "generate" and w.get("task") == "arithmetic"}
    assert gen == {("points", "F16"), ("points", "Q4_K_M"), ("points", "Q2_K"), ("noise", "F16")}, gen
    assert ("benchmark_source", {"task": "arithmetic"}) in jobs
