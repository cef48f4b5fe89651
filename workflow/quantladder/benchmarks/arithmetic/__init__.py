"""Arithmetic (docs/arithmetic.md): grade-school word problems and multi-digit arithmetic, scored by
final-answer exact match.

The shape of every benchmark here: items (``generate``: the offline set the project makes from a seed,
answers computed exactly; and/or GSM8K's test split, Cobbe et al. 2021, from the hub at a pinned
revision) -> one zero-shot chat prompt per item (a direct answer, or steps then the answer) through the GGUF's chat template -> greedy replies ->
the reply's last number against the exact answer (``answers``: GSM8K's ``####`` reading for its
references). Nothing the model writes is executed: no sandbox.
"""

from __future__ import annotations

from pathlib import Path

from ... import metrics
from ...errors import ConfigError, DataError
from ...flips import share
from ...io import hash_obj, read_jsonl, sha256_file
from ...metrics import Metric
from ...models import hub_file
from ..base import Benchmark, Item
from . import answers, generate

ARITHMETIC_VERSION = "arithmetic-1"  # the prompt and how an item is made: bump when they change (regenerates)
SCORER_VERSION = "arithmetic-score-2"  # how a reply is read: bump when a verdict changes (re-scores; 2: tasks.reading)
GSM8K_SUBSET = "gsm8k"

# Zero-shot, through the model's own chat template, in one of two styles (an item setting: the prompt is
# part of the item). `direct` asks for the number alone: a reply of a few tokens, the style the default
# run can pay for and the only one the default's 135M reference answers at all (with `cot` it reasons
# to the token limit and gets nothing right). `cot` asks for the steps, then a closing line, as GSM8K is
# usually run (its worked solutions end on the answer). Few-shot prompts (lm-evaluation-harness's
# 5- and 8-shot GSM8K) are not offered: the rungs are compared with their reference on the same prompt,
# so what the figures need is a fixed prompt, not one that reproduces a published few-shot score, and
# the shots would multiply every item's prompt tokens by ~10 (docs/arithmetic.md).
INSTRUCTIONS = {
    "direct": "Answer with the final number only.",
    "cot": "Solve the problem. Reason step by step, then write the final answer on the last line as "
           "\"The answer is N.\" with N a number.",
}

metrics.declare(
    Metric("exact_match", "%", "share of arithmetic items whose reply's final number equals the exact answer "
           "(subset: gsm8k, or the generated set's <kind>-<level>; the row without a subset is every item)",
           ("arithmetic",), higher_is_better=True, stderr="se", headline_for=("arithmetic",),
           score_for=("arithmetic",), paired="items"),
)


def prompt(question: str, style: str) -> str:
    return f"{question}\n\n{INSTRUCTIONS[style]}"


class Arithmetic(Benchmark):
    name = "arithmetic"
    domain = "arithmetic"
    description = "arithmetic: GSM8K (hub, pinned) and a seeded offline set of word problems and multi-digit sums"
    version = ARITHMETIC_VERSION
    scorer_version = SCORER_VERSION
    item_settings = ("generated", "gsm8k", "prompt")
    generation_settings = ("max_new_tokens", "n_ctx")
    scoring_settings = ()

    @classmethod
    def resolve(cls, section):
        s = super().resolve(section)  # a partial `generated:` gets its other keys from the schema
        if not s.get("generated") and not s.get("gsm8k"):
            raise ConfigError("benchmarks.arithmetic: switch on `generated:` (the offline set), `gsm8k:`, or both")
        return s

    def group(self, which):
        g = super().group(which)
        if which == "items":  # the generator's version decides the generated items: in the items key
            g["generator_version"] = generate.GENERATOR_VERSION
        return g

    # -- data ----------------------------------------------------------------------------------
    def fetch_source(self, dest):
        gsm = self.settings.get("gsm8k")
        rec = None
        if gsm:
            src = gsm.get("source") or {}
            if "path" in src:
                path = Path(src["path"]).expanduser()
                if not path.is_file():
                    raise DataError(f"{path}: no such file (benchmarks.arithmetic.gsm8k.source.path)")
            elif "hf" in src:
                path = hub_file(src["hf"], "benchmarks.arithmetic.gsm8k.source", repo_type="dataset", error=DataError)
            else:
                raise ConfigError("benchmarks.arithmetic.gsm8k.source: give `path:` or `hf:`")
            rec = {"source": src, "path": str(path), "sha256": sha256_file(path)}
        return {"name": "arithmetic", "version": ARITHMETIC_VERSION, "generator": generate.GENERATOR_VERSION,
                "gsm8k": rec, "sha256": hash_obj({"generated": self.settings.get("generated"),
                                                  "gsm8k": rec and rec["sha256"]})}

    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        items = []
        gen = self.settings.get("generated")
        if gen:
            for p in generate.problems(int(gen["seed"]), gen["kinds"], gen["levels"], int(gen["per_level"])):
                items.append(Item(id=p.id, subset=p.subset, data={"prompt": prompt(p.question, self.settings["prompt"])},
                                  answer={"value": str(p.answer), "steps": p.steps}))
        if source.get("gsm8k"):
            items += gsm8k_items(source["gsm8k"]["path"], self.settings["prompt"],
                                 (self.settings["gsm8k"] or {}).get("limit"))
        return items, {"n_items": len(items), "generator": generate.GENERATOR_VERSION if gen else None}

    # -- generation ----------------------------------------------------------------------------
    def drive(self, item, engine, env):
        return (yield from self.ask_user(engine, item.data["prompt"]))

    # -- scoring -------------------------------------------------------------------------------
    def verdicts(self, items, generations, ctx):
        out = []
        for it in items:
            if it.id not in generations:
                continue
            want = answers.parse_number(it.answer["value"])
            got = answers.reply_answer(generations[it.id]["text"])
            ok = got is not None and got == want
            out.append({"item_id": it.id, "correct": ok, "subset": it.subset,
                        "error_type": None if ok else ("no_number" if got is None else "wrong_answer"),
                        "answer": it.answer["value"], "extracted": None if got is None else answers.exact(got)})
        return out

    def no_reply_verdict(self, item, ctx):
        return {"answer": item.answer["value"], "extracted": None}

    def metric_rows(self, verdicts, items):
        rows = []
        for subset in [None] + sorted({v["subset"] for v in verdicts if v.get("subset")}):
            mine = [v for v in verdicts if subset is None or v.get("subset") == subset]
            if mine:
                value, se = share(sum(bool(v["correct"]) for v in mine), len(mine))
                rows.append(metrics.row("exact_match", value, stderr=se, n=len(mine), subset=subset))
        return rows


def gsm8k_items(path: str, style: str, limit: int | None = None) -> list[Item]:
    """GSM8K's test split (``question`` and ``answer`` columns, Parquet or JSONL as released), file order;
    the first ``limit`` when set."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(p).to_pylist()
    else:
        records = read_jsonl(p)
    if records and not {"question", "answer"} <= set(records[0]):
        raise DataError(f"{p}: GSM8K records need `question` and `answer` (got {sorted(records[0])})")
    records = records[:limit] if limit else records
    return [Item(id=f"gsm8k-{i:04d}", subset=GSM8K_SUBSET, data={"prompt": prompt(r["question"], style)},
                 answer={"value": answers.exact(answers.reference_answer(r["answer"], f"{p}: record {i + 1}"))})
            for i, r in enumerate(records)]
