"""The one generation loop, on the real engine and the real model: waves, resume, budgets, progress.

Reproducible means byte-identical: the same plan twice gives the same replies; a run killed with
SIGKILL and resumed gives the uninterrupted run's replies; at n_parallel = 1 a larger `limit` keeps
the replies of the items both runs share. Items are HumanEval's first problems with short budgets,
so each test takes seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from quantladder import benchmarks, generation
from quantladder.budget import Budget, BudgetReached
from quantladder.engine import Engine, EngineSettings
from quantladder.generation_policy import GenerationPolicy
from quantladder.io import JsonlFile

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("item_id", "text", "n_prompt_tokens", "n_gen_tokens", "finish_reason")


def _bench(limit: int, max_new_tokens: int = 24):
    b = benchmarks.create("humaneval", {"enabled": True, "limit": limit, "max_new_tokens": max_new_tokens})
    src = b.fetch_source("unused")
    items, _ = b.build_items(src, reference_gguf=None, family={})
    return b, src, items


def _loop(model, store, n_parallel, limit=4, max_new_tokens=24, threads=2, **kw):
    b, src, items = _bench(limit, max_new_tokens)
    return generation.Loop(
        b, items, key="test-key", store_dir=store, n_parallel=n_parallel,
        engine_for=lambda n: Engine(str(model), EngineSettings(n_ctx=n, n_parallel=n_parallel, n_threads=threads)),
        env=b.open_env(src, "generate"), **kw)


def replies(result):
    return [{k: r.get(k) for k in FIELDS} for r in result.records]


def test_plan_waves_are_a_function_of_the_items_only():
    b, _, items = _bench(10)
    waves = generation.plan(items, b, n_parallel=4, wave_factor=2)
    assert [len(w.items) for w in waves] == [8, 2]
    assert [it.id for w in waves for it in w.items] == [it.id for it in items]
    assert generation.plan(items, b, 4, 2)[0].key == waves[0].key  # same items, same wave key
    assert generation.plan(items[:9], b, 4, 2)[0].key == waves[0].key  # a shorter list keeps full waves
    assert all(w.key is None for w in generation.plan(items, b, 1))  # no batch mates at n_parallel 1


def test_the_noise_series_leaves_out_only_items_without_batch_mates_at_both_settings():
    import dataclasses

    b, _, items = _bench(6)
    # RULER's shape: five items at one context, one alone at a longer one (the trained context)
    items = items[:5] + [dataclasses.replace(items[5], n_ctx=8192)]
    assert [it.id for it in generation.alone_at_both(items, b, 16, 1)] == [items[5].id]
    assert [it.id for it in generation.alone_at_both(items, b, 1, 16)] == [items[5].id]
    # two items at the long context are batch mates in the points series: both are generated again
    two = items[:4] + [dataclasses.replace(it, n_ctx=8192) for it in items[4:]]
    assert generation.alone_at_both(two, b, 16, 1) == []
    # at n_parallel 1 against 2 (the noise setting when the points decode alone) in waves of 2: the
    # pairs have mates; the fifth short item (the remainder wave) and the long one have none
    assert [it.id for it in generation.alone_at_both(items, b, 1, 2, wave_factor=1)] == [items[4].id, items[5].id]
    assert generation.alone_at_both(items[:4], b, 16, 1) == []


def test_same_plan_twice_is_byte_identical_batched(tmp_path, smollm_q8):
    a = _loop(smollm_q8, tmp_path / "a", n_parallel=4).run()
    b = _loop(smollm_q8, tmp_path / "b", n_parallel=4).run()
    assert a.meta["complete"] and len(a.records) == 4
    assert replies(a) == replies(b)
    assert a.meta["n_parallel"] == 4 and a.meta["n_waves"] == 1


def test_single_stream_reply_does_not_depend_on_the_other_items(tmp_path, smollm_q8):
    """At n_parallel 1 every item is its own wave: a larger limit (other items before and after it)
    reproduces the replies both runs share, and they are reused from the store, not regenerated."""
    small = _loop(smollm_q8, tmp_path / "s", n_parallel=1, limit=2).run()
    big = _loop(smollm_q8, tmp_path / "b", n_parallel=1, limit=4).run()
    assert replies(big)[:2] == replies(small)
    # the same store with a larger limit: the two replies it has are kept, two are generated
    grown = _loop(smollm_q8, tmp_path / "s", n_parallel=1, limit=4)
    res = grown.run()
    assert replies(res) == replies(big)
    store = JsonlFile(tmp_path / "s" / generation.STORE_NAME).read()
    assert len(store) == 4  # 2 + 2: nothing generated twice


def _loop_on_a_budget(model, store):
    """A one-sequence loop whose 130 s budget runs out after two waves: each wave "takes" 40 s of the
    budget's clock."""
    clock = [0.0]
    bud = Budget(deadline=130.0, source="test", clock=lambda: clock[0])
    loop = _loop(model, store, n_parallel=1, budget=bud)
    real_run = loop._run_wave

    def timed(*a, **kw):
        clock[0] += 40.0
        return real_run(*a, **kw)

    loop._run_wave = timed
    return loop


def test_a_budget_stops_between_waves_and_the_rerun_resumes(tmp_path, smollm_q8):
    loop = _loop_on_a_budget(smollm_q8, tmp_path / "s")
    with pytest.raises(BudgetReached, match=r"2/4 items done, resumable"):
        loop.run()
    assert len(JsonlFile(tmp_path / "s" / generation.STORE_NAME).read()) == 2
    rerun = _loop(smollm_q8, tmp_path / "s", n_parallel=1).run()
    full = _loop(smollm_q8, tmp_path / "u", n_parallel=1).run()
    assert replies(rerun) == replies(full)


def test_a_resumed_or_store_served_point_records_the_cost_of_every_item(tmp_path, smollm_q8):
    """A point that stopped at its budget and was resumed recorded only the last job's share
    (16 of 16 scored, `generation_items 3`), and one served wholly from the store lost its cost rows
    and recorded `"engine": {}`. The cost is now summed from the replies' own records: every item, the
    engine settings that made them, and where two jobs ran under different settings, both, said so."""
    from quantladder import scoring
    from quantladder.gguf_meta import read_info

    loop = _loop_on_a_budget(smollm_q8, tmp_path / "s")
    with pytest.raises(BudgetReached):
        loop.run()
    resumed = _loop(smollm_q8, tmp_path / "s", n_parallel=1, threads=1).run()  # another job, other threads
    served = _loop(smollm_q8, tmp_path / "s", n_parallel=1, threads=1).run()  # nothing left to generate
    whole = _loop(smollm_q8, tmp_path / "u", n_parallel=1).run()  # one job, uninterrupted
    [(ctx, g)] = resumed.meta["groups"].items()
    assert g["items"] == 4 and g["waves"] == 4 and g["jobs"] == 2 and resumed.meta["jobs"] == 2
    assert g["prompt_tokens"] == sum(r["n_prompt_tokens"] for r in resumed.records)
    assert g["gen_tokens"] == sum(r["n_gen_tokens"] for r in resumed.records)
    assert g["seconds"] == pytest.approx(sum(r["cost"]["wall_s"] for r in resumed.records), abs=1e-3)
    assert 0 < sum(r["cost"]["wall_s"] for r in resumed.records[:2]) < g["seconds"]  # the first job's share counts
    assert served.meta["groups"] == resumed.meta["groups"]
    assert served.meta["engine"] == resumed.meta["engine"]
    # two settings, each with its items, and a sentence that names what differs: not one picked
    variants = served.meta["engine"][ctx]["variants"]
    assert sorted((v["items"], v["settings"]["n_threads"]) for v in variants) == [(2, 1), (2, 2)]
    assert "n_threads" in served.meta["engine_differs"][0] and "2 engine settings" in served.meta["engine_differs"][0]
    # an uninterrupted job: one setting, the engine's own
    assert whole.meta["engine"][ctx]["n_threads"] == 2 and whole.meta["engine"][ctx]["n_ctx"] == int(ctx)
    assert "engine_differs" not in whole.meta and whole.meta["groups"][ctx]["items"] == 4
    # the score stage's cost rows, from the store-served job's meta: all of them, of all 4 items
    rows = {r["metric"]: r for r in scoring.common_rows([], served.meta, kv_info=read_info(smollm_q8))}
    assert {"generation_items", "generation_prompt_tokens", "generation_reused_prompt_tokens",
            "generation_output_tokens", "generation_seconds", "peak_mem_bytes", "kv_bytes_predicted"} <= set(rows)
    assert rows["generation_items"]["value"] == 4 and rows["generation_seconds"]["value"] == g["seconds"] > 0
    assert rows["peak_mem_bytes"]["value"] > 0


def test_a_reply_stored_before_replies_carried_their_cost_leaves_the_cost_absent(tmp_path, smollm_q8):
    """A store written before records carried their cost (an upgrade mid-run): the token counts are
    summed, the seconds, reused tokens and peak memory are absent with the count and what to do."""
    from quantladder import scoring

    first = _loop(smollm_q8, tmp_path / "s", n_parallel=1, limit=2).run()
    store = tmp_path / "s" / generation.STORE_NAME
    old = [{k: v for k, v in r.items() if k != "cost"} for r in JsonlFile(store).read()]
    store.unlink()
    JsonlFile(store).write(old[:1])
    res = _loop(smollm_q8, tmp_path / "s", n_parallel=1, limit=2).run()
    [(ctx, g)] = res.meta["groups"].items()
    assert g["items"] == 2 and g["unrecorded"] == 1 and g["seconds"] is None
    assert g["gen_tokens"] == sum(r["n_gen_tokens"] for r in first.records)
    rows = {r["metric"]: r for r in scoring.common_rows([], res.meta)}
    assert rows["generation_items"]["value"] == 2
    sec = rows["generation_seconds"]
    assert sec["value"] is None and sec["status"] == "absent" and "1 of 2 replies" in sec["status_reason"]
    assert "made before settings were recorded" in res.meta["engine_differs"][0]


def test_time_budget_cap_makes_an_incomplete_result(tmp_path, smollm_q8):
    res = _loop(smollm_q8, tmp_path / "s", n_parallel=1, time_budget_s=0.0).run()
    # the cap is checked before each wave: the first wave runs, then the cap has passed
    assert not res.meta["complete"] and res.meta["generated"] < 4
    assert "time_budget_s" in res.meta["stopped"]


def test_progress_is_logged_with_items_tokens_and_an_eta(caplog):
    t = [0.0]
    p = generation.Progress("humaneval x/Q4_K_M/f16", total=10, done=2, every_s=30, clock=lambda: t[0])
    with caplog.at_level("INFO", logger="quantladder.generation"):
        t[0] = 10.0
        p.step(100, 50)  # under 30 s since the start: nothing yet
        assert not caplog.records
        t[0] = 31.0
        p.finished(2)
        p.step(0, 70)
    msg = caplog.records[-1].getMessage()
    assert "4/10 items" in msg and "tokens/s generated" in msg and "ETA" in msg
    assert "3.9 tokens/s" in msg  # 120 tokens in 31 s


KILLED_RUN = textwrap.dedent("""
    import sys, os
    sys.path.insert(0, {workflow!r})
    from quantladder import benchmarks, generation
    from quantladder.engine import Engine, EngineSettings
    b = benchmarks.create("humaneval", {{"enabled": True, "limit": 8, "max_new_tokens": 48}})
    src = b.fetch_source("unused")
    items, _ = b.build_items(src, reference_gguf=None, family={{}})
    loop = generation.Loop(b, items, key="test-key", store_dir={store!r}, n_parallel=2, wave_factor=1,
        engine_for=lambda n: Engine({model!r}, EngineSettings(n_ctx=n, n_parallel=2, n_threads=2)),
        env=b.open_env(src, "generate"))
    res = loop.run()
    generation.write_outputs(res, {out!r}, {out!r} + ".json")
""")


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_the_uninterrupted_run(tmp_path, smollm_q8):
    """A real SIGKILL while a batched wave is in flight: the rerun regenerates that wave whole (its
    batch mates must be the planned ones), keeps every reply already stored, and the result equals an
    uninterrupted run byte for byte."""
    def script(store, out):
        return KILLED_RUN.format(workflow=str(REPO / "workflow"), store=str(store), model=str(smollm_q8),
                                 out=str(out))

    store = tmp_path / "killed"
    store_file = store / generation.STORE_NAME
    proc = subprocess.Popen([sys.executable, "-c", script(store, tmp_path / "k.jsonl")])
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if store_file.exists() and len(JsonlFile(store_file).read()) >= 3:  # mid-way through wave 2
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = JsonlFile(store_file).read()
    assert 3 <= len(kept) < 8, "the kill came too late to test a resume"
    subprocess.run([sys.executable, "-c", script(store, tmp_path / "k.jsonl")], check=True)
    subprocess.run([sys.executable, "-c", script(tmp_path / "clean", tmp_path / "u.jsonl")], check=True)
    resumed = [{k: r[k] for k in FIELDS} for r in JsonlFile(tmp_path / "k.jsonl").read()]
    clean = [{k: r[k] for k in FIELDS} for r in JsonlFile(tmp_path / "u.jsonl").read()]
    assert resumed == clean and len(clean) == 8
    meta = json.loads((tmp_path / "k.jsonl.json").read_text())
    assert meta["replay_mismatches"] == 0  # the replayed wave reproduced what was stored
    assert len(JsonlFile(store_file).read()) == 8  # nothing stored twice


def test_n_parallel_auto_depends_on_the_architecture_context_and_budget_only(smollm_q8, smollm_q4km):
    from quantladder.gguf_meta import read_info

    a, b = read_info(smollm_q8), read_info(smollm_q4km)
    policy = GenerationPolicy({"n_parallel": "auto", "kv_budget_mb": 2048})
    na = policy.n_parallel_for(a, 4096)
    assert na == policy.n_parallel_for(b, 4096)  # every rung of the family alike
    assert policy.n_parallel_for(a, 32768) < na  # long contexts get fewer sequences
    per_seq = a.kv_bytes(4096, "f16", "f16")
    assert na * per_seq <= 2048 << 20
    assert GenerationPolicy({"n_parallel": 3}).n_parallel_for(a, 4096) == 3


def test_the_generation_policy_is_the_config_section_with_the_benchmarks_own_n_parallel_and_defaults():
    """One policy object: what the manifest keys on (the section as given), what the job records and
    runs with (the defaults filled in), and the noise series' batch setting."""
    cfg = {"generation": {"n_parallel": 1, "wave_factor": None, "noise_floor": {"enabled": True}},
           "benchmarks": {"humaneval": {"n_parallel": 4}, "bfcl": {}}}
    own = GenerationPolicy.of(cfg, "humaneval")
    assert own.section == {"n_parallel": 4, "wave_factor": None, "noise_floor": {"enabled": True}}
    assert own.record == {"n_parallel": 4, "kv_budget_mb": 2048, "wave_factor": 4, "prefix_cache": True,
                          "batch_invariant": False}
    assert (own.wave_factor, own.prefix_cache, own.n_parallel_for(None, 4096)) == (4, True, 4)
    assert GenerationPolicy.of(cfg, "bfcl").n_parallel_for(None, 4096) == 1
    assert GenerationPolicy.of({}, "bfcl").n_parallel_for(None, 4096) == 1  # auto, nothing to size it with
    assert GenerationPolicy.of(cfg).noise_n_parallel == 2  # the points decode one at a time: the noise two
    assert GenerationPolicy.of({"generation": {"n_parallel": "auto"}}).noise_n_parallel == 1
    assert GenerationPolicy.of({"generation": {"noise_floor": {"n_parallel": 8}}}).noise_n_parallel == 8


def test_the_loop_stops_at_a_wave_boundary_when_the_stopper_decides(tmp_path, smollm_q8):
    """The loop's side of early stopping: asked before every wave with the records so far, it stops
    generating once a decision comes, and says so (the decision itself: test_early_stop_*)."""
    asked = []

    def stopper(records):
        asked.append(len(records))
        return {"state": "loss", "n": len(records), "rule": "test rule"} if len(records) >= 2 else None

    res = _loop(smollm_q8, tmp_path, n_parallel=1, stopper=stopper).run()
    assert asked == [0, 1, 2] and len(res.records) == 2
    assert res.meta["early_stop"]["state"] == "loss" and "stopped early: loss decided at n = 2" in res.meta["stopped"]
    from quantladder import scoring

    status, reason = scoring.completeness(4, [{}] * 2, res.meta)
    assert status is None and "2 of 4 items: stopped early" in reason  # finished, not incomplete


def test_early_stop_decides_a_loss_on_real_verdicts(bfcl_items_and_record):
    """The real BFCL scorer on replies that decode as no call (wrong on every AST item), against a
    reference that got every item right: the sequential test stops with 'loss' once the evidence
    reaches 2/alpha, long before the items run out."""
    from quantladder.benchmarks import ScoringContext
    from quantladder.early_stop import Stopper

    bench, items, record = bfcl_items_and_record
    ref = [{"item_id": it.id, "correct": True} for it in items]
    stop = Stopper(bench, items, ref, ScoringContext(bench.open_env(record, "generate")))
    records, decision = [], None
    for it in items:
        records.append({"item_id": it.id, "text": "I cannot help with that.", "n_gen_tokens": 7,
                        "finish_reason": "stop"})
        decision = stop(records)
        if decision:
            break
    assert decision and decision["state"] == "loss" and decision["n"] < len(items)
    assert decision["e_loss"] >= 2 / 0.05 and "false claim" in decision["rule"]


@pytest.fixture(scope="module")
def bfcl_items_and_record(tmp_path_factory):
    from quantladder.benchmarks.bfcl import data

    wheel = REPO / "resources" / "benchmarks" / "bfcl" / "wheel"
    whl = data.download_wheel("2026.3.23", wheel)
    root = tmp_path_factory.mktemp("bfcl-es")
    record = data.materialize({"path": str(whl)}, root / "data", root / "data.json")
    bench = benchmarks.create("bfcl", {"enabled": True, "categories": ["simple_python"], "limit": 30,
                                       "early_stop": {"enabled": True, "alpha": 0.05}})
    items, _ = bench.build_items(record, reference_gguf=None, family={})
    return bench, bench.order(items), record


def test_early_stop_order_is_seeded_and_code_suites_refuse_it():
    from quantladder.errors import ConfigError

    b, _, items = _bench(10)
    assert b.order(items) == items  # off: the file's order
    on = benchmarks.create("ruler", {"enabled": True, "early_stop": {"enabled": True, "seed": 3}})
    from quantladder.benchmarks import Item

    its = [Item(id=str(i)) for i in range(20)]
    assert on.order(its) == on.order(its) and on.order(its) != its
    with pytest.raises(ConfigError, match="cannot stop early"):
        benchmarks.create("humaneval", {"enabled": True, "early_stop": {"enabled": True}}).early_stop
