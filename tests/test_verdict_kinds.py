"""Every kind of record the one generation loop writes, through every registered benchmark's score path.

The score stage gives an item whose prompt did not fit its context its own verdict
(``prompt_too_long``) and hands every other record to the benchmark; the benchmark's rows are then
made from both. A user's traffic with one conversation longer than its context crashed every traffic
score job (``KeyError: 'n_gen_tokens'``): the rows read a field only the benchmark's own verdicts had.
Here each benchmark's real driver makes the record of each kind (its prompts through the real model's
chat template and tokenizer; the reply is the kind's), and the real score stage scores it: nothing
crashes, every record is scored and counted, a failed item names why, and an item longer than its
context is failed, counted and named in the point's reason.
"""

from __future__ import annotations

import json

import pytest

from quantladder import benchmarks, loops, metrics, reasoning, scoring
from quantladder.benchmarks import ScoringContext
from quantladder.engine import Engine, EngineSettings, Generation
from test_bfcl import bfcl_record, bfcl_wheel  # noqa: F401  (the real wheel's data, as BFCL's tests use it)
from test_instructions import IFEVAL_LINES

# The reply each kind answers a request with: (text, finish_reason); None text: nothing decoded.
LOOP = "and then the same words again, " * 24
KINDS = {
    "stop": ("The answer is 7.", "stop"),  # an end-of-generation token
    "length": ("The answer is 7 because the first", "length"),  # the token budget ran out
    "loop": (LOOP, "length"),  # a repetition loop cut by the budget: degenerate
    "empty": ("", "stop"),  # an end-of-generation token first
    "prompt_too_long": (None, "prompt_too_long"),  # the prompt does not fit: never decoded
    "not_generated": ("The answer is 7.", "stop"),  # the first item has no record (the job stopped)
    # a thinking family's reply that ended inside its thinking (the context ran out): no answer
    "thinking_cap": ("<think>\nThe answer is 7 because the first", "length"),
}
# A thinking family's reply as the engine records it (quantladder.reasoning.ReplyPlan.fields: the
# split of the text in Qwen3's <think> format; the token sequences are the engine's business)
THINK_PLAN = reasoning.ReplyPlan(reasoning.FORMATS["think"], False, False, (), ((),), (), -1)

TASK_LINES = [
    {"id": "t-python", "prompt": "Name a prime number.", "checks": [
        {"kind": "python", "code": "def check(reply, item):\n    return '7' in reply\n"}]},
    {"id": "t-text", "subset": "text", "prompt": "Say seven.", "checks": [
        {"kind": "contains", "value": "7"}, {"kind": "not_contains", "value": "eight"}]},
]


def settings(name: str, tmp) -> dict:
    """Each benchmark with two items (BFCL: a single-turn and a multi-turn one), from data on this machine."""
    ifeval = tmp / "ifeval.jsonl"
    ifeval.write_text("".join(json.dumps(x) + "\n" for x in IFEVAL_LINES))
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(x) + "\n" for x in TASK_LINES))
    return {
        "arithmetic": {"generated": {"kinds": ["plain"], "levels": [1], "per_level": 2}},
        "tasks": {"source": {"path": str(tasks)}, "timeout_s": 10.0},
        "traffic": {"source": {"path": "config/traffic/example.jsonl"}, "limit": 2},
        "humaneval": {"limit": 2, "timeout_s": 10.0},
        "bigcodebench_hard": {"source": {"path": "tests/fixtures/code/bigcodebench_hard_tiny.jsonl"}, "limit": 2,
                              "splits": ["complete"], "timeout_s": 20.0},
        "ifbench": {"limit": 2},
        "ifeval": {"source": {"path": str(ifeval)}, "limit": 2},
        "ruler": {"tasks": ["niah_single_1"], "lengths": [512], "samples": 2},
        "bfcl": {"categories": ["simple_python", "multi_turn_base"], "limit": 1},
        "bfcl_haystack": {"categories": ["simple_python"], "limit": 2, "haystack": {"lengths": [1024]}},
    }[name]


@pytest.fixture(scope="module")
def engine(smollm_q8):
    """The real model's chat template and tokenizer, for the drivers (the replies are the kinds')."""
    with Engine(str(smollm_q8), EngineSettings(n_ctx=512, n_threads=1)) as eng:
        yield eng


@pytest.fixture(scope="module")
def made(request, tmp_path_factory, smollm_q8):
    """name -> (benchmark, its source record, its items), made once per benchmark."""
    cache = {}

    def make(name):
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            bench = benchmarks.create(name, {"enabled": True, **settings(name, tmp)})
            if name.startswith("bfcl"):
                src = request.getfixturevalue("bfcl_record")
            else:
                src = bench.fetch_source(str(tmp))
            items, _ = bench.build_items(src, reference_gguf=str(smollm_q8), family={"chat": True})
            assert len(items) == 2, (name, [it.id for it in items])
            cache[name] = bench, src, items
        return cache[name]

    return make


def generation(eng, req, text: str | None, finish: str, thinking: bool = False) -> Generation:
    """The Generation the engine gives for ``text``; ``thinking``: a thinking family's, with its split."""
    if text is None:
        return Generation(text="", n_prompt_tokens=len(req.prompt), n_gen_tokens=0, finish_reason=finish, seconds=0.0)
    toks = tuple(eng.tokenize(text, add_bos=False, special=False)) if text else ()
    g = Generation(text=text, n_prompt_tokens=len(req.prompt), n_gen_tokens=len(toks), finish_reason=finish,
                   seconds=0.0, tokens=toks)
    if thinking:
        sp = reasoning.split(text, THINK_PLAN.format)
        n_answer = len(eng.tokenize(sp.answer, add_bos=False, special=False)) if sp.answer else 0
        g.reasoning = THINK_PLAN.fields(text, thinking_tokens=len(toks) - n_answer, answer_tokens=n_answer,
                                        forced=False, finish_reason=finish)
    return g


def reply(eng, req, kind: str) -> Generation:
    text, finish = KINDS[kind]
    return generation(eng, req, text, finish, thinking=kind.startswith("thinking"))


def record(bench, item, eng, env, kind: str, answer=None) -> dict:
    """The item's record as the generation loop stores it: the benchmark's driver answered with the kind's
    reply at every request (or ``answer(req)``'s), then the loop's own fields (quantladder.generation.Loop)."""
    d = bench.drive(item, eng, env)
    answer = answer or (lambda req: reply(eng, req, kind))
    try:
        req = next(d)
        while True:
            req = d.send(answer(req))
    except StopIteration as stop:
        rec = dict(stop.value)
    rec.setdefault("degenerate", loops.is_degenerate(rec.get("text", ""), rec.get("n_gen_tokens"),
                                                     rec.get("finish_reason")))
    rec.update({"item_id": item.id, "subset": item.subset, "n_ctx": bench.n_ctx(item)})
    return rec


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", benchmarks.names())
def test_every_record_kind_is_scored_and_counted_by_every_benchmark(name, kind, made, engine, tmp_path):
    bench, src, items = made(name)
    env = bench.open_env(src, "generate")
    recs = [record(bench, it, engine, env, kind) for it in items]
    if kind == "not_generated":
        recs = recs[1:]
    if kind == "loop":
        assert all(r["degenerate"] for r in recs)
    ctx = ScoringContext(bench.open_env(src, "score"), threads=1)
    out = scoring.score(bench, items, recs, {"generated": len(recs)}, key="k", store_dir=tmp_path, ctx=ctx)

    # every record scored, in item order; a failed item names why
    assert [v["item_id"] for v in out.verdicts] == [r["item_id"] for r in recs]
    for v in out.verdicts:
        assert v["correct"] or isinstance(v["error_type"], str) and v["error_type"], v
    # the common rows count every verdict: failures by type, loops
    rows = out.rows
    errors = {r["subset"]: r["value"] for r in rows if r["metric"] == "error_items"}
    assert sum(errors.values()) == sum(1 for v in out.verdicts if v["error_type"])
    deg = [r for r in rows if r["metric"] == "degenerate_items" and r["n_ctx"] is None]
    assert [(r["value"], r["n"]) for r in deg] == [(sum(v["degenerate"] for v in out.verdicts), len(out.verdicts))]
    # the benchmark's headline counts every scored item, a failed one too
    heads = [r for r in rows if r["metric"] in metrics.headlines(name) and r["value"] is not None]
    whole = [r for r in heads if r["subset"] is None] or heads
    assert whole and sum(r["n"] for r in whole) == len(out.verdicts), heads

    if kind == "not_generated":
        assert out.status == "incomplete" and out.reason.startswith("1 of 2 items scored"), out.reason
    else:
        assert out.status is None
    if kind == "thinking_cap":  # no answer: failed by the score stage with the reason, the exam never asked
        assert all(r["thinking_end"] == "context" and not r["thinking_closed"] and r["answer"] == "" for r in recs)
        assert all(v["error_type"] == "thinking_cap" and not v["correct"] for v in out.verdicts)
        assert errors == {"thinking_cap": 2.0}
        assert all("ended inside its thinking" in v["detail"] for v in out.verdicts)
    if kind == "prompt_too_long":
        ids = [it.id for it in items]
        assert all(v["error_type"] == "prompt_too_long" and not v["correct"] for v in out.verdicts)
        assert errors == {"prompt_too_long": 2.0}
        assert out.facts["prompt_too_long"] == ids
        assert out.reason == f"2 items longer than their context (ids {ids[0]}, {ids[1]})"
        # the verdict has the benchmark's own shape: a benchmark scored by partial credit keeps its
        # paired comparison on scores (quantladder.deltas), whatever its items' lengths
        own = bench.verdicts(items[:1], {items[0].id: record(bench, items[0], engine, env, "stop")}, ctx)[0]
        assert ("score" in own) == all("score" in v for v in out.verdicts)
        assert set(own) - set(out.verdicts[0]) <= {"detail", "wall_s", "sandbox_kind", "instructions_detail"}, \
            set(own) - set(out.verdicts[0])


# -- every exam scores the answer, never the thinking (issue 43) --------------------------------------

def _bfcl_call(item) -> str | None:
    """A right reply to a single-call BFCL item, written from its ground truth (the first allowed value
    of each argument, optional ones left out); None for an item without one (multi-turn)."""
    gt = item.answer.get("ground_truth")
    if not isinstance(gt, list) or not gt or not isinstance(gt[0], dict):
        return None
    calls = []
    for call in gt:
        (func, args), = call.items()
        parts = [f"{k}={v[0]!r}" for k, v in args.items() if v and v[0] != ""]
        calls.append(f"{func}({', '.join(parts)})")
    return "[" + ", ".join(calls) + "]"


def _humaneval_code(item) -> str:
    from quantladder.benchmarks.code import data

    sol = {p.task_id: p.extra["canonical_solution"] for p in data.load_humaneval(limit=2)}[item.data["task_id"]]
    return item.data["prompt"] + sol + "\n```"


# (right, wrong) reply of an item, per exam where a right one can be written from the item; the
# others use two replies their scorer tells apart
RIGHT_WRONG = {
    "arithmetic": lambda it: (f"So the result is {it.answer['value']}.", "So the result is 987654321."),
    "tasks": lambda it: ("7", "eight"),
    "ruler": lambda it: (" ".join(it.answer["answers"]), "I do not know."),
    # (the answer's leading whitespace is the seam's, not the answer's: both start with the prompt's code)
    "humaneval": lambda it: (_humaneval_code(it), it.data["prompt"] + "    return None\n```"),
    "bfcl": lambda it: (_bfcl_call(it) or "The answer is 7.", "I cannot call anything."),
    "bfcl_haystack": lambda it: (_bfcl_call(it), "I cannot call anything."),
}
KNOWN_RIGHT = {"arithmetic", "tasks", "ruler", "humaneval", "bfcl_haystack"}


# traffic's verdict reads no reply text (whether the reply ended cleanly): it judges no answer
@pytest.mark.parametrize("name", [n for n in benchmarks.names() if n != "traffic"])
def test_every_benchmark_scores_the_answer_not_the_thinking(name, made, engine, tmp_path):
    """A thinking family's reply whose thinking holds the right reply and whose answer the wrong one is
    judged as the wrong one alone, and the reverse as the right one: through each benchmark's real
    driver (BFCL's code extraction at generation, the multi-turn steps) and the real score stage."""
    bench, src, items = made(name)
    env = bench.open_env(src, "generate")
    ctx = ScoringContext(bench.open_env(src, "score"), threads=1)
    pair = RIGHT_WRONG.get(name, lambda it: ("The answer is 7.", ""))

    def judged(variant: str) -> list[tuple]:
        recs = []
        for it in items:
            right, wrong = pair(it)
            text = {"right": right, "wrong": wrong,
                    "think_right": f"<think>\n{right}\n</think>\n\n{wrong}",
                    "think_wrong": f"<think>\n{wrong}\n</think>\n\n{right}"}[variant]
            recs.append(record(bench, it, engine, env, "", answer=lambda req, t=text: generation(
                engine, req, t, "stop", thinking=variant.startswith("think"))))
        out = scoring.score(bench, items, recs, {"generated": len(recs)}, key="k", store_dir=tmp_path / variant,
                            ctx=ctx)
        return [(v["correct"], v["error_type"], v.get("score")) for v in out.verdicts]

    right, wrong = judged("right"), judged("wrong")
    assert right != wrong, (right, wrong)  # the exam tells the two replies apart
    if name in KNOWN_RIGHT:
        assert all(v[0] for v in right) and not any(v[0] for v in wrong), (right, wrong)
    assert judged("think_right") == wrong  # the right reply in the thinking: judged on the wrong answer
    assert judged("think_wrong") == right  # the wrong reply in the thinking: judged on the right answer
