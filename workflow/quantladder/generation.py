"""The one generation loop every task benchmark runs through.

For one point and one benchmark it plans the items into *waves*, drives each wave through the
engine (continuous batching over ``n_parallel`` sequences, :meth:`quantladder.engine.Engine.run`),
and keeps every finished item:

- **Waves** make the batch mates a function of the plan, never of timing: items are grouped by the
  context they need (RULER's lengths), kept in their fixed order, and cut into waves of
  ``n_parallel × wave_factor`` items; at ``n_parallel = 1`` every item is a wave of its own, so its
  reply does not depend on any other item (a larger ``limit`` or a subset reproduces it). A stored
  reply is reused only under the same generation key, for the same item content and the same wave
  (batched llama.cpp output depends on batch mates: PR #6950, #7052), so a resumed run reproduces an
  uninterrupted one byte for byte. A wave cut short by a kill is generated again whole; the replies
  it had already saved are compared with the new ones (a mismatch is logged and counted: it would
  mean the engine is not deterministic on this card).
- **Resume by item id**: replies are appended (and fsynced) to a store beside the outputs, one
  record per item, as each finishes; the declared output ``generations.jsonl`` is written at the end
  with the plan's records in plan order. The store is not a Snakemake output, so a failed or killed
  job (whose outputs Snakemake deletes) keeps what it paid for.
- **Budgets**: before each wave the job's deadline (``quantladder.budget``: the rule's runtime,
  Slurm's time left) is asked whether the wave still fits; if not, the job stops with exit 75
  ("try again": the rerun resumes). A benchmark's own ``time_budget_s`` cap instead ends the job
  early on purpose, and the point is ``incomplete`` with the count.
- **One prompt-overflow rule**: a prompt that does not fit the per-sequence context is not decoded;
  its record says ``finish_reason: prompt_too_long`` and the scorer counts the item as failed.
- **One loop detector**: every record carries ``degenerate`` (:mod:`quantladder.loops`).
- **Progress** a person can watch: items done / total, tokens/s and an ETA in the rule's log at
  least every ``PROGRESS_EVERY_S`` seconds.
- **The cost of the whole point**: every record carries what making it cost (``cost``: its share of
  its wave's wall time, the prompt tokens its requests reused, the job's peak memory when it ended,
  the engine settings that made it, which job made it). The meta file's per-context cost
  (``groups``) and engine settings (``engine``) are summed from the point's records, whichever job
  made them, so a point resumed after a budget stop, or served wholly from the store, records the
  cost of all its items (a job's own share said that 16 items took 13 s, because the third job made
  3 of them) and the settings that made its replies; where jobs made them under different settings,
  the meta file says so and lists each with its items, rather than picking one.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import loops
from .benchmarks.base import Benchmark, Item
from .budget import Budget, BudgetReached
from .generation_policy import GenerationPolicy
from .io import GENERATION_STORE, GENERATIONS, JsonlFile, hash_obj, sha256_file, write_json
from .measures.memory import peak_rss_bytes

log = logging.getLogger("quantladder.generation")

PROGRESS_EVERY_S = 30.0
STORE_NAME = ".generations.store.jsonl"
# What a record keeps of a Generation (timings are kept too, but never compared).
RECORD_FIELDS = ("text", "n_prompt_tokens", "n_gen_tokens", "finish_reason")
# Why the noise series leaves an item out (alone_at_both)
ALONE_REASON = ("a wave of its own at both batch settings: one computation, no batch noise to measure "
                "(docs/generation.md, the noise floor)")


def item_sha(item: Item) -> str:
    return hash_obj(item.to_json())[:16]


@dataclass
class Wave:
    index: int
    n_ctx: int
    items: list[Item]
    batched: bool  # False at n_parallel = 1: no batch mates, the wave key is None

    @property
    def key(self) -> str | None:
        if not self.batched:
            return None
        return hash_obj([[it.id, item_sha(it)] for it in self.items])[:16]


def plan(items: list[Item], bench: Benchmark, n_parallel: int, wave_factor: int | None = None) -> list[Wave]:
    """Waves in generation order: ascending context, the items' own order within a context."""
    by_ctx: dict[int, list[Item]] = {}
    for it in items:
        by_ctx.setdefault(bench.n_ctx(it), []).append(it)
    if wave_factor is None:  # the config's default (config/config.schema.yaml)
        wave_factor = GenerationPolicy({}).wave_factor
    size = 1 if n_parallel <= 1 else n_parallel * max(1, wave_factor)
    waves: list[Wave] = []
    for n_ctx in sorted(by_ctx):
        group = by_ctx[n_ctx]
        for i in range(0, len(group), size):
            waves.append(Wave(len(waves), n_ctx, group[i:i + size], batched=n_parallel > 1))
    return waves


def alone_at_both(items: list[Item], bench: Benchmark, n_parallel_a: int, n_parallel_b: int,
                  wave_factor: int | None = None) -> list[Item]:
    """The items that are a wave of their own under both batch settings, in plan order.

    Such an item has no batch mate either way: every generation step decodes its one row, its
    stream holds the same cells (``n_ctx`` is the item's, per sequence) and its prompt goes in the
    same chunks (:func:`quantladder.kv_policy.batch_sizes` does not depend on ``n_parallel`` below
    the padded context). The two runs are one computation (tests/test_engine.py checks the logits
    bit for bit), so generating it again at the other setting measures no batch noise: the noise
    series leaves it out and says so (RULER's lone item at the model's trained context, a minute of
    prefill on 2 CPU cores)."""
    def lone(n: int) -> set[str]:
        return {w.items[0].id for w in plan(items, bench, n, wave_factor) if len(w.items) == 1}

    both = lone(n_parallel_a) & lone(n_parallel_b)
    return [it for it in items if it.id in both]


class Progress:
    """Items done / total, tokens/s and an ETA in the log, at most every ``every_s`` seconds."""

    def __init__(self, label: str, total: int, done: int, *, every_s: float = PROGRESS_EVERY_S, clock=time.time):
        self.label, self.total, self.done = label, total, done
        self.start_done = done
        self.every_s = every_s
        self.clock = clock
        self.t0 = self.last = clock()
        self.gen_tokens = self.prompt_tokens = 0

    def step(self, n_prompt: int, n_gen: int) -> None:
        self.prompt_tokens += n_prompt
        self.gen_tokens += n_gen
        if self.clock() - self.last >= self.every_s:
            self.report()

    def finished(self, n: int = 1) -> None:
        self.done += n

    def report(self, final: bool = False) -> str:
        now = self.clock()
        self.last = now
        dt = max(now - self.t0, 1e-9)
        made = self.done - self.start_done
        eta = "—"
        if made > 0 and self.done < self.total:
            eta = _duration((self.total - self.done) * dt / made)
        msg = (f"{self.label}: {self.done}/{self.total} items, {self.gen_tokens / dt:.1f} tokens/s generated, "
               f"{self.prompt_tokens / dt:.1f} prompt tokens/s, {_duration(dt)} elapsed"
               + ("" if final else f", ETA {eta}"))
        log.info(msg)
        return msg


def _duration(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


@dataclass
class Result:
    records: list[dict]
    meta: dict = field(default_factory=dict)


class Loop:
    """One point's generation for one benchmark. ``engine_for(n_ctx) -> Engine`` opens the engine
    for a context (the caller's point settings: model, KV types, GPU layers, n_parallel)."""

    def __init__(self, bench: Benchmark, items: list[Item], *, key: str, store_dir: str | os.PathLike,
                 engine_for: Callable[[int], object], n_parallel: int, wave_factor: int | None = None,
                 budget: Budget | None = None, time_budget_s: float | None = None, label: str = "",
                 env=None, progress_every_s: float = PROGRESS_EVERY_S, stopper=None):
        self.bench, self.items, self.key = bench, items, key
        self.store = JsonlFile(Path(store_dir) / STORE_NAME, GENERATION_STORE)
        self.engine_for = engine_for
        self.n_parallel = max(1, int(n_parallel))
        if wave_factor is None:
            wave_factor = GenerationPolicy({}).wave_factor
        self.waves = plan(items, bench, self.n_parallel, wave_factor)
        self.wave_size = 1 if self.n_parallel == 1 else self.n_parallel * max(1, wave_factor)
        self.budget = budget or Budget(None, source="none")
        self.time_budget_s = time_budget_s
        self.label = label or bench.name
        self.env = env
        self.progress_every_s = progress_every_s
        # stopper(records so far, in plan order) -> a decision dict when the run may stop early
        # (quantladder.early_stop), else None; asked at wave boundaries only.
        self.stopper = stopper

    # -- the store ----------------------------------------------------------------------------
    def _load(self) -> dict[tuple, dict]:
        have: dict[tuple, dict] = {}
        for r in self.store.repair():
            if r.get("key") == self.key:
                have[(r.get("item_id"), r.get("item_sha"), r.get("wave"))] = r
        return have

    def _lookup(self, have, wave: Wave, item: Item) -> dict | None:
        return have.get((item.id, item_sha(item), wave.key))

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> Result:
        have = self._load()
        total = len(self.items)
        done0 = sum(1 for w in self.waves for it in w.items if self._lookup(have, w, it) is not None)
        log.info("%s: %d items in %d waves (n_parallel %d), %d already generated, %d to go",
                 self.label, total, len(self.waves), self.n_parallel, done0, total - done0)
        progress = Progress(self.label, total, done0, every_s=self.progress_every_s)
        t_start = time.time()
        job = uuid.uuid4().hex[:12]  # which job made a record (the point's cost sums over jobs)
        stopped = None
        early = None
        mismatches = 0
        engine, engine_ctx = None, None
        try:
            for wave in self.waves:
                if self.stopper is not None:
                    done = [r for w in self.waves[:wave.index] for it in w.items
                            if (r := self._lookup(have, w, it)) is not None]
                    early = self.stopper(done)
                    if early is not None:
                        stopped = f"stopped early: {early['state']} decided at n = {early['n']} ({early['rule']})"
                        break
                missing = [it for it in wave.items if self._lookup(have, wave, it) is None]
                if not missing:
                    continue
                if self.time_budget_s is not None and time.time() - t_start > self.time_budget_s:
                    stopped = f"the benchmark's time_budget_s ({self.time_budget_s:g} s) ran out"
                    break
                self.budget.check(done=progress.done, total=total)  # raises BudgetReached (exit 75)
                if engine_ctx != wave.n_ctx:
                    if engine is not None:
                        engine.close()
                    engine = self.engine_for(wave.n_ctx)
                    engine_ctx = wave.n_ctx
                with self.budget.item():
                    mismatches += self._run_wave(engine, wave, have, progress, job)
        finally:
            if engine is not None:
                engine.close()
        records = [r for w in self.waves for it in w.items if (r := self._lookup(have, w, it)) is not None]
        progress.report(final=True)
        groups, engines, differs = point_cost(records)
        for note in differs:
            log.warning("%s: %s", self.label, note)
        meta = {"benchmark": self.bench.name, "key": self.key, "planned": total, "generated": len(records),
                "complete": len(records) == total, "stopped": stopped, "early_stop": early,
                "n_parallel": self.n_parallel,
                "wave_size": self.wave_size, "n_waves": len(self.waves), "groups": groups,
                "engine": engines, "replay_mismatches": mismatches,
                "jobs": len({r["cost"].get("job") for r in records if isinstance(r.get("cost"), dict)}),
                "seconds": round(time.time() - t_start, 3)}  # this job's own wall time
        if differs:
            meta["engine_differs"] = differs
        return Result(records, meta)

    def _run_wave(self, engine, wave: Wave, have: dict, progress: Progress, job: str) -> int:
        """Generate a whole wave (batch mates must be the planned ones); keep new records, compare
        replayed ones. Returns the number of replayed items whose reply differs from the stored one.

        A new record's ``cost`` is what its finish added to the wave: the wall time and the reused
        prompt tokens since the wave's previous finish (the first: since the wave began), so that a
        wave's records sum to its cost whichever items finish first, and a point's records to the
        point's, however many jobs made them."""
        last: dict[int, tuple] = {}
        drivers = [_keep_last(self.bench.drive(it, engine, self.env), last, i) for i, it in enumerate(wave.items)]
        mismatches = 0
        settings = dict(getattr(engine, "resolved", {}) or {})
        mark = {"t": time.time(), "kept_tokens": 0, "cached_tokens": 0}

        def on_finish(i: int, rec: dict) -> None:
            nonlocal mismatches
            it = wave.items[i]
            now, run = time.time(), getattr(engine, "last_run", None) or {}
            cost = {"wall_s": round(now - mark["t"], 4)}
            for k in ("kept_tokens", "cached_tokens"):
                cost[k] = int(run.get(k, 0)) - mark[k]
                mark[k] = int(run.get(k, 0))
            mark["t"] = now
            cost.update({"peak_rss_bytes": peak_rss_bytes(),  # host memory: not a GPU's
                         "wave": wave.index, "job": job, "engine": settings})
            rec = dict(rec)
            rec.setdefault("degenerate", loops.is_degenerate(rec.get("text", ""), rec.get("n_gen_tokens"),
                                                             rec.get("finish_reason")))
            rec.update({"item_id": it.id, "item_sha": item_sha(it), "key": self.key, "wave": wave.key,
                        "subset": it.subset, "n_ctx": wave.n_ctx})
            if i in last:  # the last request's tokens: the teacher-forced fidelity pass replays them
                rec["prompt_ids"], rec["reply_ids"] = last[i]
            old = self._lookup(have, wave, it)
            if old is not None:
                if any(old.get(f) != rec.get(f) for f in RECORD_FIELDS):
                    mismatches += 1
                    log.warning("%s: item %s replayed in wave %d differs from its stored reply (the engine is not "
                                "deterministic here); the stored reply is kept", self.label, it.id, wave.index)
            else:
                rec["cost"] = cost
                self.store.append(rec)
                have[(it.id, rec["item_sha"], wave.key)] = rec
                progress.finished()

        engine.run(drivers, on_finish, progress.step)
        return mismatches


# What a record's cost adds up to, per context (the meta file's ``groups``; the score stage's
# generation_* rows): summed where every record says it, else absent with the count that does not.
COST_SUMS = ("seconds", "kept_tokens", "cached_tokens")


def point_cost(records: list[dict]) -> tuple[dict, dict, list[str]]:
    """The point's generation cost per context, summed from its records (whichever job made them), the
    engine settings that made them per context, and a sentence per context whose records were made
    under more than one setting (then ``engine`` lists each with its item count, not one of them).

    A record stored before records carried their cost has none: the context's token counts (every
    record has them) are summed, its seconds, reused tokens and peak memory are None and
    ``unrecorded`` counts the records without a cost."""
    groups: dict[int, dict] = {}
    settings: dict[int, dict[str, list]] = {}
    for r in records:
        c = int(r.get("n_ctx") or 0)
        g = groups.setdefault(c, {"items": 0, "prompt_tokens": 0, "gen_tokens": 0, "seconds": 0.0,
                                  "kept_tokens": 0, "cached_tokens": 0, "peak_rss_bytes": 0,
                                  "waves": set(), "jobs": set(), "unrecorded": 0})
        g["items"] += 1
        g["prompt_tokens"] += int(r.get("n_prompt_tokens") or 0)
        g["gen_tokens"] += int(r.get("n_gen_tokens") or 0)
        cost = r.get("cost")
        if not isinstance(cost, dict):
            g["unrecorded"] += 1
            settings.setdefault(c, {}).setdefault(hash_obj(None), [None, 0])[1] += 1
            continue
        g["seconds"] += float(cost.get("wall_s") or 0.0)
        g["kept_tokens"] += int(cost.get("kept_tokens") or 0)
        g["cached_tokens"] += int(cost.get("cached_tokens") or 0)
        g["peak_rss_bytes"] = max(g["peak_rss_bytes"], int(cost.get("peak_rss_bytes") or 0))
        g["waves"].add(cost.get("wave"))
        g["jobs"].add(cost.get("job"))
        eng = cost.get("engine") or {}
        settings.setdefault(c, {}).setdefault(hash_obj(eng), [eng, 0])[1] += 1
    for g in groups.values():
        g["waves"], g["jobs"] = len(g["waves"]), len(g["jobs"])
        g["seconds"] = round(g["seconds"], 3)
        if g["unrecorded"]:
            for k in (*COST_SUMS, "peak_rss_bytes"):
                g[k] = None
    engines: dict[str, dict] = {}
    differs: list[str] = []
    for c, by in sorted(settings.items()):
        if len(by) == 1:
            engines[str(c)] = next(iter(by.values()))[0] or {}
            continue
        variants = [{"items": n, "settings": s} for s, n in by.values()]
        keys = sorted({k for v in variants if v["settings"] for k in v["settings"]})
        diff = [k for k in keys if len({hash_obj((v["settings"] or {}).get(k)) for v in variants}) > 1]
        note = (f"the {sum(v['items'] for v in variants)} replies at context {c} were made under "
                f"{len(variants)} engine settings (differing in {', '.join(diff) or 'what was recorded'}: "
                + "; ".join(f"{v['items']} item(s) " + (", ".join(f"{k} {(v['settings'] or {}).get(k)}" for k in diff)
                                                         if v["settings"] else "made before settings were recorded")
                            for v in variants) + ")")
        engines[str(c)] = {"differs": note, "variants": variants}
        differs.append(note)
    return {str(c): g for c, g in sorted(groups.items())}, engines, differs


def _keep_last(driver, last: dict, i: int):
    """The driver, passing its requests and generations through; keeps its last request's prompt
    and reply token ids in ``last[i]`` (an item's reply is its last request's)."""
    try:
        req = next(driver)
    except StopIteration as stop:  # an item that needs no request
        return stop.value
    while True:
        gen = yield req
        last[i] = (list(req.prompt), list(gen.tokens))
        try:
            req = driver.send(gen)
        except StopIteration as stop:
            return stop.value


def write_outputs(result: Result, generations_path: str | os.PathLike, meta_path: str | os.PathLike,
                  extra: dict | None = None) -> None:
    """The declared outputs: the plan's records in plan order, then the meta file (written last), which
    records the file's sha256 beside its count: every reader checks both (``JsonlFile.read_declared``)."""
    JsonlFile(generations_path, GENERATIONS).write(result.records)
    write_json(meta_path, {**result.meta, **(extra or {}), "sha256": sha256_file(generations_path)})


def write_blocked(generations_path: str | os.PathLike, meta_path: str | os.PathLike, *, benchmark: str,
                  reason: str | None, planned: int, items_sha256: str | None = None) -> None:
    """The outputs of a point whose card failed the benchmark's anchor gate: no replies, and a meta
    file that says so and why (the score rule turns it into `blocked` rows). Nothing is generated."""
    JsonlFile(generations_path, GENERATIONS).write([])
    write_json(meta_path, {"benchmark": benchmark, "blocked": True, "reason": reason, "planned": planned,
                           "generated": 0, "complete": False, "items_sha256": items_sha256,
                           "sha256": sha256_file(generations_path)})


__all__ = ["Loop", "Wave", "plan", "alone_at_both", "write_outputs", "write_blocked", "Result", "BudgetReached", "Progress"]
