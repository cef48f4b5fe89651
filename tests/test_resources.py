"""Resources sized from the point: a bigger rung, a longer context or a retry asks for more."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from quantladder import resources as qres
from quantladder import timings


@pytest.fixture(autouse=True)
def no_timings_here(tmp_path, monkeypatch):
    """Budgets learn from the `logs/benchmarks` of the working directory: each test starts in an
    empty one (a checkout that has run the workflow has its own)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(timings, "_cache", {})

SMOL = {"file_bytes": 270_885_952, "n_layer": 30, "n_head_kv": 3, "head_dim_k": 64, "head_dim_v": 64,
        "n_vocab": 49152}
# Llama-3-70B's shape at Q4_K_M (~42.5 GB).
LLAMA70 = {"file_bytes": 42_520_000_000, "n_layer": 80, "n_head_kv": 8, "head_dim_k": 128,
           "head_dim_v": 128, "n_vocab": 128256}


def _input(tmp_path, info, name="m"):
    p = tmp_path / f"{name}.gguf.json"
    p.write_text(json.dumps({"info": info}))
    return SimpleNamespace(info=str(p), gguf=str(tmp_path / f"{name}.gguf"))


def test_a_70b_rung_asks_for_more_than_a_small_one(tmp_path):
    w = SimpleNamespace(kv="f16")
    small, big = _input(tmp_path, SMOL, "s"), _input(tmp_path, LLAMA70, "b")
    mem = qres.mem_mb("inference", n_ctx=4096)
    run = qres.runtime_min("perplexity")
    assert mem(w, small, 1) < 3000
    assert mem(w, big, 1) > 42_520_000_000 / 2**20  # at least the weights
    assert run(w, small, 1) < 30 < 120 < run(w, big, 1)


def test_context_kv_type_and_retries_scale_memory(tmp_path):
    inp = _input(tmp_path, LLAMA70)
    f16 = SimpleNamespace(kv="f16")
    q4 = SimpleNamespace(kv="q4_0")
    assert qres.mem_mb(n_ctx=131072)(f16, inp, 1) - qres.mem_mb(n_ctx=4096)(f16, inp, 1) > 30_000
    assert qres.mem_mb(n_ctx=131072)(q4, inp, 1) < qres.mem_mb(n_ctx=131072)(f16, inp, 1)
    assert qres.mem_mb()(f16, inp, 2) >= 2 * qres.mem_mb()(f16, inp, 1) - 256
    assert qres.runtime_min("generate")(f16, inp, 2) > qres.runtime_min("generate")(f16, inp, 1)


def test_missing_inputs_fall_back_to_base_figures(tmp_path):
    inp = SimpleNamespace(info=str(tmp_path / "absent.json"), gguf=str(tmp_path / "absent.gguf"))
    assert qres.mem_mb("inference")(SimpleNamespace(), inp, 1) == 1536
    assert qres.runtime_min("speed")(SimpleNamespace(), inp, 1) == 15


def test_config_floor_raises_runtime():
    cfg = {"resources": {"runtime_min": {"perplexity": 240}}}
    inp = SimpleNamespace()
    assert qres.runtime_min("perplexity", cfg)(SimpleNamespace(), inp, 1) == 240


def test_a_generate_budget_learned_on_other_items_is_not_reused(tmp_path):
    """The generate rule's budget is three times what its jobs of the same task took here, but only
    jobs timed after the task's items were last made count: a task file edited to hold longer items
    gets the model-size estimate, not the minute its short predecessor earned (found running a
    20-item task set after the 16-item example: every generate job stopped at 2 minutes)."""
    import os

    tsv = tmp_path / "logs/benchmarks/generate/card/points/fam/F16/f16/tasks.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text("s\th:m:s\n10.0\t0:00:10\n")
    items = tmp_path / "items.jsonl"
    items.write_text("{}\n")
    inp = SimpleNamespace(**vars(_input(tmp_path, SMOL)), item_file=str(items))
    w = SimpleNamespace(task="tasks", kv="f16")
    run = qres.runtime_min("generate", rule="generate", work=("item_file",))
    os.utime(items, (1_000, 1_000))  # the items are older than the timing: it counts
    assert run(w, inp, 1) == 1  # max(1 min, 3 × 10 s)
    os.utime(items, (tsv.stat().st_mtime + 60,) * 2)  # made again since: the estimate instead
    assert run(w, inp, 1) == qres.estimate_runtime_min("generate", SMOL["file_bytes"]) > 30
    assert qres.runtime_min("generate", rule="generate")(w, inp, 1) == 1  # without `work`: as before


def test_a_teacher_forced_pass_learns_its_budget_only_from_jobs_on_the_same_replies(tmp_path):
    """`reply_logits` took 3.7 s on the example's 8 conversations, so its runtime became 1 minute;
    the user's 20 laid over them stopped there twice. Its budget, and fidelity's, now counts only jobs
    of the same task timed after the replies they read were last made (generate's rule for its items),
    else the rule's default (30 min); a config floor still holds."""
    import os

    w = SimpleNamespace(task="traffic", family="fam", card="card")
    for rule, path in (("reply_logits", "card/fam/traffic.tsv"), ("fidelity", "card/fam/Q4_K_M/f16/traffic.tsv")):
        tsv = tmp_path / "logs/benchmarks" / rule / path
        tsv.parent.mkdir(parents=True)
        tsv.write_text("s\th:m:s\n3.7\t0:00:03\n")
        other = tmp_path / "logs/benchmarks" / rule / path.replace("traffic", "tasks")
        other.write_text("s\th:m:s\n900.0\t0:15:00\n")  # another task's jobs say nothing of this one
        timings._cache.clear()
        gens = tmp_path / f"{rule}-generations.jsonl"
        gens.write_text("{}\n")
        inp = SimpleNamespace(generations=str(gens), reference_generations=str(gens))
        work = ("generations",) if rule == "reply_logits" else ("generations", "reference_generations")
        run = qres.runtime_fixed(rule, 30, {}, work=work)
        os.utime(gens, (1_000, 1_000))  # the replies are older than the timing: it counts
        assert run(w, inp, 1) == 1 and run(w, inp, 2) == 2  # max(1 min, 3 × 3.7 s), doubled on a retry
        os.utime(gens, (tsv.stat().st_mtime + 60,) * 2)  # the user's replies, made since
        assert run(w, inp, 1) == 30
        assert qres.runtime_fixed(rule, 30, {"resources": {"runtime_min": {rule: 45}}}, work=work)(w, inp, 1) == 45


def test_one_walk_over_the_benchmark_files_feeds_the_estimates_and_the_walks_cost(tmp_path):
    """timings.finished reads every finished job once, a file being written (no row yet) passed over;
    the estimates (``seconds``, by rule and kind) and find's cost (``benchmark_files``, by path) read it."""
    from quantladder import find as qfind

    base = tmp_path / "logs/benchmarks"
    for path, text in (("quantize/fam/Q4_K_M.tsv", "s\th:m:s\n12.5\t0:00:12\n"),
                       ("speed/card/fam/Q4_K_M/f16.tsv", "s\th:m:s\n30.0\t0:00:30\n"),
                       ("speed/card/fam/Q8_0/f16.tsv", "s\th:m:s\n"),  # being written: no figure
                       ("speed/card/other/Q8_0/f16.tsv", "s\th:m:s\n50.0\t0:00:50\n")):
        (base / path).parent.mkdir(parents=True, exist_ok=True)
        (base / path).write_text(text)
    jobs = list(timings.finished(tmp_path))
    assert [(j.rule, j.parts, j.s) for j in jobs] == [("quantize", ("fam", "Q4_K_M"), 12.5),
                                                      ("speed", ("card", "fam", "Q4_K_M", "f16"), 30.0),
                                                      ("speed", ("card", "other", "Q8_0", "f16"), 50.0)]
    seen = timings.seconds(tmp_path)
    assert seen[("speed", "")] == [30.0, 50.0] and seen[("speed", "fam")] == [30.0]
    assert seen[("quantize", "fam")] == [12.5]
    assert qfind.benchmark_files(tmp_path) == {("quantize", "fam/Q4_K_M"): 12.5, ("speed", "card/fam/Q4_K_M/f16"): 30.0,
                                              ("speed", "card/other/Q8_0/f16"): 50.0}
    assert list(timings.finished(tmp_path / "nowhere")) == []
