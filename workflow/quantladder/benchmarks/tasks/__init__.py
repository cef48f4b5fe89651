"""Your tasks: a task file of the user's own items as a benchmark (docs/your-tasks.md).

The shape of every benchmark here: items (``taskfile``: JSONL / CSV / Parquet, local or a hub dataset
at a pinned revision, every mistake named by file:line before anything runs) -> prompts through the
GGUF's chat template (a base model: the raw completion path) -> greedy replies -> checks
(``checks``; a user's Python check only in the sandbox, ``pycheck``) -> an item passes when all its
checks pass; the share of its checks that pass is its partial score.

The checks are not part of the items the generate rule reads: scoring reads them from the task file,
and their digest is in the scoring key. A check edit therefore re-scores every point and generates
nothing; a prompt edit rebuilds the items, and the generation loop's store keeps the reply of every
item whose prompt half did not change (at ``n_parallel = 1``; a batched wave is generated again
whole when one of its items changed, as its replies depend on their batch mates).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

from ... import metrics
from ...errors import DataError
from ...metrics import Metric
from ...schemas import family_settings
from ..base import Benchmark, Item, data_path
from . import checks as C
from . import taskfile

TASKS_VERSION = "tasks-1"  # how an item becomes a prompt: bump when that changes (regenerates)
SCORER_VERSION = "tasks-score-2"  # how checks decide: bump when a verdict changes (re-scores; 2: reading.py)

metrics.declare(
    Metric("all_checks_pass", "%", "share of your task items whose every check passes (subset: the items' "
           "`subset` label; the row without a subset is every item)", ("tasks",), higher_is_better=True,
           stderr="se", headline_for=("tasks",), score_for=("tasks",), paired="items"),
    Metric("checks_passed", "%", "partial score: the mean over items of the share of their checks that pass",
           ("tasks",), higher_is_better=True, stderr="se"),
    Metric("check_pass", "%", "share of the checks of one kind (subset) that pass, over every item that has one",
           ("tasks",), higher_is_better=True, stderr="se", whole="none"),
)


class Tasks(Benchmark):
    name = "tasks"
    domain = "your tasks"
    description = "your own task file (JSONL / CSV / Parquet): prompts and checks you wrote, no code needed"
    version = TASKS_VERSION
    scorer_version = SCORER_VERSION
    needs_chat = False  # a base model takes the raw completion path (prompt_text)
    per_family_items = True  # the family's `chat` decides chat template or raw completion
    item_settings = ("source", "format", "limit")
    generation_settings = ("max_new_tokens", "n_ctx")
    scoring_settings = ("timeout_s", "sandbox")

    def __init__(self, section=None):
        super().__init__(section)
        if self.settings.get("enabled"):
            self.local_file  # noqa: B018 -- a bad local file fails here, at `snakemake -n`

    # -- the file ------------------------------------------------------------------------------
    @cached_property
    def local_file(self) -> taskfile.TaskFile | None:
        """The task file when it is local (read at DAG-build time: its two digests are in the keys);
        None for a hub file, whose pinned revision is its identity."""
        src = self.settings.get("source") or {}
        if "path" not in src:
            return None
        return taskfile.read(taskfile.resolve_path(src["path"]), self.settings["format"], self.settings["limit"])

    def content_path(self):
        return None if self.local_file is None else str(self.local_file.path)

    def group(self, which):
        g = super().group(which)
        tf = self.local_file
        if tf is not None and which == "items":
            g["prompts_sha256"] = tf.prompts_sha256
        elif tf is not None and which == "scoring":
            g["checks_sha256"] = tf.checks_sha256
        return g

    def fetch_source(self, dest):
        src = self.settings.get("source") or {}
        if "path" in src:
            tf = self.local_file
            return taskfile.source_record(tf.path, self.settings["format"], None, tf.prompts_sha256)
        if "hf" not in src:
            raise DataError("benchmarks.tasks.source: give `path:` (a local file) or `hf:` (a hub dataset)")
        return taskfile.source_record(taskfile.download(src["hf"]), self.settings["format"], src["hf"])

    def pinned_files(self, source):
        """A hub file, by its bytes; a local file is pinned by its prompt half's digest instead (a check
        edited there rescores: docs/your-tasks.md), which its items file carries."""
        return {source["path"]: source["sha256"]} if source.get("hf") else {}

    def _file(self, source: dict) -> taskfile.TaskFile:
        tf = taskfile.read(data_path(source["path"]), source["format"], self.settings["limit"])  # the record resolves it
        self.check_read(tf.path, {"prompts_sha256": tf.prompts_sha256, "checks_sha256": tf.checks_sha256})
        return tf

    # -- items ---------------------------------------------------------------------------------
    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        tf = self._file(source)
        chat = bool(family_settings(family)["chat"])
        items = [Item(id=it.id, subset=it.subset,
                      data={"prompt": it.prompt, "system": it.system, "options": list(it.options or []),
                            "max_tokens": it.max_tokens, "stop": list(it.stop), "chat": chat})
                 for it in tf.items]
        return items, {"chat": chat, "prompts_sha256": tf.prompts_sha256}

    # -- generation ----------------------------------------------------------------------------
    def drive(self, item, engine, env):
        n = item.data.get("max_tokens") or self.settings["max_new_tokens"]
        gen = yield from self.ask(engine, prompt_text(item.data, engine.chat_prompt), n, item.data.get("stop") or ())
        return gen.record()

    # -- scoring -------------------------------------------------------------------------------
    def scoring_setup(self):
        tf = self.local_file
        if tf is not None and not tf.has_python:
            return {}
        # A Python check runs only in the sandbox: refuse, with install instructions, before anything runs.
        # (Imported here, as the code suites do: generation never loads the sandbox.)
        from ... import sandbox

        return {"sandbox": sandbox.check_backend(self.settings["sandbox"]["backend"])}

    def verdicts(self, items, generations, ctx):
        from . import pycheck  # the code suites' sandbox runner (code.score, which loads pyarrow): scoring only

        tf = self._file(ctx.source)  # checked against the digests the job was planned with
        by_id = {it.id: it for it in tf.items}
        todo = []
        for item in items:
            if item.id not in generations:
                continue
            if item.id not in by_id:
                raise DataError(f"{tf.path}: item {item.id!r} is not in the task file any more: the items were "
                                "built from another version of it; run again")
            todo.append((by_id[item.id], generations[item.id]["text"]))
        settings = pycheck.ScoreSettings.from_config(self.settings)

        def python(job):
            (it, reply), check = job
            passed, kind, detail = pycheck.run_check(check.source, check.spec["function"], reply, it.record, settings)
            return passed, ("python" if kind == "test_failure" else f"python_{kind}"), detail

        jobs = [((it, reply), c) for it, reply in todo for c in it.checks if c.kind == "python"]
        with ThreadPoolExecutor(max_workers=max(1, ctx.threads)) as ex:
            py = iter(list(ex.map(python, jobs)))
        out = []
        for it, reply in todo:
            results = []
            for c in it.checks:
                if c.kind == "python":
                    passed, label, detail = next(py)
                else:
                    passed, detail = C.run(c, reply, it.options)
                    label = c.kind
                results.append({"kind": c.kind, "passed": bool(passed), "error": None if passed else label,
                                "detail": "" if passed else detail[:300]})
            k = sum(r["passed"] for r in results)
            first = next((r["error"] for r in results if not r["passed"]), None)
            out.append({"item_id": it.id, "correct": k == len(results), "error_type": first, "subset": it.subset,
                        "checks_passed": k, "checks_total": len(results), "checks": results})
        return out

    def no_reply_verdict(self, item, ctx):
        # every check of the item failed (it got no reply), so that each kind's pass rate counts them too
        path = ctx.source["path"]
        if getattr(self, "_checks_of", (None,))[0] != path:
            self._checks_of = (path, {it.id: it.checks for it in self._file(ctx.source).items})
        checks = self._checks_of[1].get(item.id)
        if checks is None:
            raise DataError(f"{path}: item {item.id!r} is not in the task file any more: the items were built from "
                            "another version of it; run again")
        return {"checks_passed": 0, "checks_total": len(checks),
                "checks": [{"kind": c.kind, "passed": False, "error": "prompt_too_long", "detail": ""} for c in checks]}

    def metric_rows(self, verdicts, items):
        rows = _rows(verdicts, None)
        for s in sorted({v["subset"] for v in verdicts if v.get("subset")}):
            rows += _rows([v for v in verdicts if v.get("subset") == s], s)
        for kind in C.KINDS:
            got = [r["passed"] for v in verdicts for r in v.get("checks", ()) if r["kind"] == kind]
            if got:
                rows.append(_share("check_pass", [float(x) for x in got], kind))
        return rows


def prompt_text(data: dict, chat_prompt) -> str:
    """The text an item's prompt is decoded from: through the chat template (``chat_prompt``), or on
    a base model the raw completion path, which has no roles: the messages' texts (the system prompt
    first), a blank line between. Options follow the prompt as lettered lines ("A. ...")."""
    prompt, system, options = data["prompt"], data.get("system"), data.get("options") or []
    listing = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt + (f"\n\n{listing}" if listing else "")}]
    else:
        messages = [dict(m) for m in prompt]
        if listing:
            messages[-1]["content"] += f"\n\n{listing}"
    if system:
        messages = [{"role": "system", "content": system}] + messages
    if data.get("chat", True):
        return chat_prompt(messages)
    return "\n\n".join(m["content"] for m in messages)


def _share(metric: str, xs: list[float], subset) -> dict:
    n = len(xs)
    p = sum(xs) / n
    sd = math.sqrt(sum((x - p) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return metrics.row(metric, 100.0 * p, stderr=100.0 * sd / math.sqrt(n), n=n, subset=subset)


def _rows(verdicts: list[dict], subset) -> list[dict]:
    if not verdicts:
        return []
    return [_share("all_checks_pass", [float(v["correct"]) for v in verdicts], subset),
            _share("checks_passed", [v["checks_passed"] / v["checks_total"] for v in verdicts], subset)]
