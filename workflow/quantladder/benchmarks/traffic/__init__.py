"""Your traffic: conversations without labels, as a benchmark (docs/your-tasks.md, "Your traffic").

Items are the conversations of a traffic file (``trafficfile``), prompted through the GGUF's chat
template (a base model, which has none, does not take them). There is no answer to
check, so what a rung changes is measured against the reference rung on the same conversations:
byte-identical replies and verdict flips (the aggregate, as for every exam), and per point the
fidelity rule (quantladder.fidelity): where the first differing token falls, the change in reply
length and in repetition loops, and the teacher-forced KLD / same-top-token rate of the rung on the
reference rung's own replies and on the logged assistant turns.

A thinking family's replies are compared part by part (the aggregate's ``answer_identical_to_reference``
and ``thinking_identical_to_reference``, the thinking's closure, cap hits and length: quantladder.thinking;
the fidelity rule's answer and thinking length changes), and a logged assistant turn is teacher-forced
as the server replays it (:func:`replayed_turn`).

The one verdict a reply without a label has is whether it is *clean*: it ended on its own (an
end-of-generation token, not the token budget) and is not a degenerate loop. Its share is the
headline; a flip is a conversation whose reply became (or stopped being) clean.
"""

from __future__ import annotations

import math
from functools import cached_property

from ... import metrics
from ...errors import DataError
from ...metrics import Metric
from ...models import hub_file
from ..base import Benchmark, Item, data_path, record_path
from ..tasks import prompt_text
from ..tasks.taskfile import format_of, resolve_path
from . import trafficfile

TRAFFIC_VERSION = "traffic-1"  # how a conversation becomes a prompt: bump when that changes (regenerates)
SCORER_VERSION = "traffic-score-1"

metrics.declare(
    Metric("clean_reply", "%", "your traffic: conversations whose reply ended on its own (an end-of-generation "
           "token, not the token budget) and is not a repetition loop", ("traffic",), higher_is_better=True,
           stderr="se", headline_for=("traffic",), score_for=("traffic",), paired="items"),
    Metric("reply_tokens", "tokens", "your traffic: mean reply length in the model's tokens", ("traffic",),
           higher_is_better=None, stderr="se"),
)


class Traffic(Benchmark):
    name = "traffic"
    description = "your conversations (chat-messages JSONL, no labels): what a rung changes against the reference"
    version = TRAFFIC_VERSION
    scorer_version = SCORER_VERSION
    needs_chat = True  # conversations go through the chat template: a base model does not take them
    item_settings = ("source", "format", "limit", "part", "split")
    generation_settings = ("max_new_tokens", "n_ctx")

    def __init__(self, section=None):
        super().__init__(section)
        if self.settings.get("enabled"):
            self.local_file  # noqa: B018 -- a bad local file fails here, at `snakemake -n`

    def _read(self, path) -> trafficfile.TrafficFile:
        split = self.settings["split"]  # a partial split: the schema filled the rest
        return trafficfile.read(path, self.settings["format"], part=self.settings["part"],
                                calibration_share=float(split["calibration_share"]), seed=str(split["seed"]),
                                limit=self.settings["limit"])

    @cached_property
    def local_file(self) -> trafficfile.TrafficFile | None:
        src = self.settings.get("source") or {}
        return self._read(resolve_path(src["path"])) if "path" in src else None

    def content_path(self):
        return None if self.local_file is None else str(self.local_file.path)

    def group(self, which):
        g = super().group(which)
        tf = self.local_file
        if tf is not None and which == "items":
            g["prompts_sha256"] = tf.prompts_sha256
            g["logged_sha256"] = tf.logged_sha256
        return g

    def fetch_source(self, dest):
        src = self.settings.get("source") or {}
        if "path" in src:
            tf = self.local_file
            path, hf, sha = tf.path, None, tf.prompts_sha256 + tf.logged_sha256
        elif "hf" in src:
            path = hub_file(src["hf"], "benchmarks.traffic.source", repo_type="dataset", error=DataError)
            hf, sha = src["hf"], None
        else:
            raise DataError("benchmarks.traffic.source: give `path:` (a local file) or `hf:` (a hub dataset)")
        tf = self._read(path)  # a hub file is checked line by line before anything runs, as a local one
        return {"name": "traffic", "path": record_path(path), "format": format_of(path, self.settings["format"]),
                "hf": hf, "version": (hf or {}).get("revision") or path.name,
                "sha256": sha or tf.prompts_sha256 + tf.logged_sha256, "n_conversations": len(tf.items)}

    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        tf = self._read(data_path(source["path"]))
        self.check_read(tf.path, {"prompts_sha256": tf.prompts_sha256, "logged_sha256": tf.logged_sha256})
        items = [Item(id=c.id, subset=c.subset, data={"prompt": [dict(m) for m in c.prompt]},
                      answer={"logged": c.logged, **({"logged_reasoning": c.logged_reasoning}
                                                    if c.logged_reasoning else {})}) for c in tf.items]
        return items, {"prompts_sha256": tf.prompts_sha256,
                       "logged_replies": sum(c.logged is not None for c in tf.items)}

    def drive(self, item, engine, env):
        prompt = prompt_text(item.data, engine.chat_prompt)
        gen = yield from self.ask(engine, prompt, self.settings["max_new_tokens"])
        rec = gen.record()
        logged = (item.answer or {}).get("logged")
        setup = getattr(engine, "reasoning", None)
        if logged and setup is not None and setup.splits:
            # a thinking family: the logged turn as the server replays it (its thinking with it)
            turn = replayed_turn(engine.chat_prompt, item.data["prompt"], prompt, logged,
                                 (item.answer or {}).get("logged_reasoning"))
            if isinstance(turn, str):
                rec["logged_ids"] = engine.tokenize(turn, add_bos=False, special=True)
            else:
                rec["logged_left_out"] = turn["reason"]
        elif logged:  # the logged reply in this model's tokens: the fidelity rule teacher-forces it
            rec["logged_ids"] = engine.tokenize(logged, add_bos=False, special=False)
        return rec

    def verdicts(self, items, generations, ctx):
        out = []
        for item in items:
            g = generations.get(item.id)
            if g is None:
                continue
            clean = g.get("finish_reason") == "stop" and not g.get("degenerate")
            out.append({"item_id": item.id, "correct": bool(clean), "subset": item.subset,
                        "error_type": None if clean else ("loop" if g.get("degenerate") else "no_end"),
                        "n_gen_tokens": int(g.get("n_gen_tokens") or 0)})
        return out

    def no_reply_verdict(self, item, ctx):
        return {"n_gen_tokens": None}  # no reply: not clean, and no length to average

    def metric_rows(self, verdicts, items):
        rows = []
        for subset in [None, *sorted({v["subset"] for v in verdicts if v.get("subset")})]:
            vs = [v for v in verdicts if subset is None or v.get("subset") == subset]
            if not vs:
                continue
            # a conversation longer than its context got no reply: not clean, and out of the mean length
            rows.append(_mean("clean_reply", [100.0 * v["correct"] for v in vs], subset))
            lengths = [float(v["n_gen_tokens"]) for v in vs if v.get("n_gen_tokens") is not None]
            rows.append(_mean("reply_tokens", lengths, subset) if lengths else metrics.row(
                "reply_tokens", None, subset=subset, status="absent",
                status_reason=f"none of the {len(vs)} conversations got a reply (each longer than its context)"))
        return rows


def replayed_turn(chat_prompt, messages: list[dict], prompt: str, logged: str, reasoning: str | None) -> str | dict:
    """The logged assistant turn of a thinking family as the reply it stands for: the conversation with
    the turn (its ``reasoning_content`` with it) rendered by the family's template, as llama-server
    replays an assistant turn, past the reply's prompt and up to the end of the turn's answer (the
    end-of-turn marker is not the reply's text). Where that rendering does not extend the prompt (a
    template that drops the thinking where the generation prompt opens it: QwQ, DeepSeek-R1), the
    turn is not the reply's continuation and is not teacher-forced: {"reason": why}."""
    turn = {"role": "assistant", "content": logged, **({"reasoning_content": reasoning} if reasoning else {})}
    full = chat_prompt([dict(m) for m in messages] + [turn], add_generation_prompt=False)
    end = full.rfind(logged)
    if not full.startswith(prompt) or end < len(prompt):
        return {"reason": "the template does not replay the logged turn after the reply's generation prompt "
                          "(it renders the turn otherwise than the reply starts: its thinking dropped or moved), so "
                          "the turn is not teacher-forced"}
    return full[len(prompt):end + len(logged)]


def _mean(metric: str, xs: list[float], subset) -> dict:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else float("nan")
    return metrics.row(metric, m, stderr=sd / math.sqrt(n) if n > 1 else None, n=n, subset=subset)
