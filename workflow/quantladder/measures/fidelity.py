"""Teacher-forced fidelity: what a rung predicts on the reference rung's own replies (and on the
replies a traffic file logged), and how its replies differ from the reference's.

Generated flips depend on sampling paths: once two replies part, everything after is a different
text, and at ``n_parallel > 1`` a reply can depend on its batch mates. Forcing the rung through the
reference rung's reply token by token has neither problem: the KLD of the rung's next-token
distribution from the reference's, and the share of positions where both put the same token on top,
are measured on identical tokens (the perplexity pass's KLD, on other text).

One implementation: a reply is a sequence prompt + reply scored over the reply
(``measures.perplexity.store.Layout``: ``first`` = the last prompt position, whose logits predict the
first reply token), run by the perplexity pass itself (``runner.run_layout``): the reference rung
writes its quantized log-probs into the same store the corpora use (llama.cpp's KL base scheme) and
every rung reads them back; summaries are ``perplexity.stats.summarize``. A pass over the protocol's
chunks through this path gives the perplexity pass's figures digit for digit (tests/test_traffic.py).

Intervals: the reply is the independent unit (its tokens share one context), so means over tokens
carry the cluster standard error of ``stats.tokens.token_mean``, and per-reply differences (length,
loops) their paired standard error (``stats.tokens`` with one cluster per reply).

The records are the generation loop's: ``prompt_ids`` and ``reply_ids`` of an item's last request
(quantladder.generation), ``logged_ids`` where a traffic file logged the assistant's turn.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .. import metrics
from ..card import check_same_card
from ..gguf_meta import padded_ctx
from ..io import read_json, read_jsonl, sha256_file, write_json
from ..metrics import TASK, Metric
from ..reasoning import has_split
from ..provenance import refusal
from ..stats.tokens import token_mean, token_share
from . import GPU, Measure, RuleCost, declare
from .perplexity.store import Layout, ReferenceReader

log = logging.getLogger(__name__)

KINDS = ("reference_replies", "logged_replies")  # the subsets of the teacher-forced rows

# Rows of a task point (targets: fidelity-<task>), not a section of `measures:`; its jobs cost what its
# task's replies are long, so they are timed by task, as generate's are.
MEASURE = declare(Measure(
    "fidelity", "teacher-forced KLD and same-top rate of a rung on the reference rung's own replies",
    rules={"reply_logits": RuleCost(GPU, guess_s=10, kind="task", kind_part=-1),
           "fidelity": RuleCost(GPU, guess_s=10, kind="task", kind_part=-1)},
    per_point=False,
    anchor="fidelity compares each rung with the reference rung's own replies: no published anchor"))

metrics.declare(
    Metric("teacher_kld", "nats", "teacher-forced: mean KL divergence of the rung's next-token distribution from "
           "the reference rung's, over the reply tokens (subset reference_replies: the reference rung's own "
           "replies; logged_replies: the assistant turns a traffic file logged); ± clustered by reply",
           (TASK,), higher_is_better=False, stderr="se", whole="none", group="fidelity"),
    Metric("teacher_same_top", "%", "teacher-forced: reply positions where the rung's top token is the reference "
           "rung's (subsets as teacher_kld); ± clustered by reply", (TASK,), higher_is_better=True, stderr="se",
           whole="none", group="fidelity"),
    Metric("first_divergence_token", "tokens", "over the items whose reply differs from the reference rung's: "
           "the reply token where they first differ (0: the first)", (TASK,), higher_is_better=True, stderr="se",
           group="fidelity"),
    Metric("reply_length_change", "tokens", "mean change in reply length against the reference rung on the same "
           "items (rung − reference), paired", (TASK,), higher_is_better=None, stderr="se", group="fidelity"),
    Metric("degenerate_change", "%", "change in the share of replies that are repetition loops against the "
           "reference rung on the same items (rung − reference, percentage points), paired", (TASK,),
           higher_is_better=False, stderr="se", group="fidelity"),
    # a thinking family's replies compared part by part (issue 43: traffic compares both parts)
    Metric("answer_length_change", "tokens", "a thinking family: mean change in the answer's length (the reply past "
           "its thinking) against the reference rung on the same items (rung − reference), paired", (TASK,),
           higher_is_better=None, stderr="se", group="fidelity"),
    Metric("thinking_length_change", "tokens", "a thinking family: mean change in the thinking's length against the "
           "reference rung on the same items (rung − reference), paired", (TASK,), higher_is_better=None,
           stderr="se", group="fidelity"),
)


# -- the sequences -------------------------------------------------------------------------------
# The generation loop's record of a prompt longer than its context: nothing decoded (engine.Generation).
NOT_DECODED = "prompt_too_long"
NOT_DECODED_REASON = ("longer than its context: never decoded, so neither its reply nor its logged turn is "
                      "teacher-forced (a context the replies were not made at)")


def not_decoded(rec: dict) -> bool:
    return rec.get("finish_reason") == NOT_DECODED and not rec.get("n_gen_tokens")


def left_out(records: list[dict]) -> dict | None:
    """The items the teacher-forced pass and the reply comparison leave out, and why (None: none)."""
    ids = [str(r["item_id"]) for r in records if not_decoded(r)]
    return {"items": ids, "reason": NOT_DECODED_REASON} if ids else None


def sequences(records: list[dict]) -> tuple[list[dict], list[list[int]], list[int]]:
    """The teacher-forced sequences of a reference point's generation records: per item, prompt +
    its reply, and prompt + the logged reply where there is one. Returns (who: {item_id, kind}),
    the token lists, and each one's first scored position. Items without token ids (records written
    before they were kept) or with an empty reply have nothing to score and are left out, as are
    items longer than their context (``left_out``)."""
    who, toks, firsts = [], [], []
    for r in records:
        prompt = r.get("prompt_ids")
        if not prompt or not_decoded(r):
            continue
        for kind, ids in (("reference_replies", r.get("reply_ids")), ("logged_replies", r.get("logged_ids"))):
            if ids:
                who.append({"item_id": str(r["item_id"]), "kind": kind})
                toks.append(list(prompt) + list(ids))
                firsts.append(len(prompt) - 1)
    return who, toks, firsts


def layout_of(toks: list[list[int]], firsts: list[int]):
    return Layout(tuple(len(t) for t in toks), tuple(firsts)), np.asarray([x for t in toks for x in t], dtype=np.int32)


def context_shape(layout, n_batch: int) -> tuple[int, int, int]:
    """(cells per sequence, sequences per decode, n_batch) for the pass: every sequence fits its
    cells; as many sequences decode together as n_batch tokens hold (the pass's own grouping)."""
    longest = max(layout.lengths)
    cells = padded_ctx(longest)
    n_seq = max(1, min(layout.n_seqs, n_batch // cells))
    return cells, n_seq, n_batch


def teacher_pass(model_path: str, records: list[dict], *, kv: str = "f16", threads: int = 0, n_batch: int = 2048,
                 n_gpu_layers: int = 0, flash_attn=None, reference=None, write_reference=None,
                 ref_header: dict | None = None, deadline: float | None = None) -> tuple[list[dict], dict, dict]:
    """The model teacher-forced through the records' sequences: writes the reference store
    (``write_reference``) or scores against it (``reference``: a ReferenceReader of the same
    sequences). Returns (who, the pass's per-token arrays, the engine's resolved settings)."""
    from ..engine import RawContext
    from .perplexity.runner import run_layout

    who, toks, firsts = sequences(records)
    if not who:
        return who, {}, {}
    layout, used = layout_of(toks, firsts)
    cells, n_seq, n_batch = context_shape(layout, n_batch)
    with RawContext(model_path, n_ctx=cells * n_seq, n_batch=n_batch, n_seq_max=n_seq,
                    kv=kv, n_threads=threads, n_gpu_layers=n_gpu_layers, flash_attn=flash_attn) as ctx:
        if reference is not None:
            reference.check_layout(used, ctx.n_vocab, layout)
        out = run_layout(ctx, used, layout, n_batch=n_batch, n_seq=n_seq, reference=reference,
                         write_reference=write_reference, ref_header={**layout.header(), **(ref_header or {})},
                         deadline=deadline, progress_every=0)
        engine = dict(ctx.resolved)
    out["layout"] = layout
    return who, out, engine


# -- the figures ---------------------------------------------------------------------------------
def teacher_rows(who: list[dict], out: dict) -> list[dict]:
    """teacher_kld and teacher_same_top per kind of reply, clustered by reply."""
    rows = []
    if not who or "kld" not in out:
        return rows
    layout = out["layout"]
    reply = np.repeat(np.arange(layout.n_seqs), [layout.rows(c) for c in range(layout.n_seqs)])
    for kind in KINDS:
        seqs = [c for c, w in enumerate(who) if w["kind"] == kind]
        if not seqs:
            continue
        mask = np.isin(reply, seqs)
        n_tok = int(mask.sum())
        # clustered by reply, the divergence and the share as the corpus passes' (stats.tokens)
        k = token_mean(out["kld"][mask], reply[mask], positive=True)
        s = token_share(out["same_top"][mask], reply[mask])
        se = lambda t: None if not np.isfinite(t.stderr) else t.stderr  # noqa: E731 -- one reply: no ±
        rows.append(metrics.row("teacher_kld", k.estimate, stderr=se(k), n=n_tok, subset=kind, interval=k.to_dict()))
        rows.append(metrics.row("teacher_same_top", s.estimate, stderr=se(s), n=n_tok, subset=kind,
                                interval=s.to_dict()))
    return rows


def _paired(metric: str, diffs: list[float]) -> dict | None:
    if not diffs:
        return None
    t = token_mean(np.asarray(diffs, dtype=np.float64), np.arange(len(diffs)))
    return metrics.row(metric, t.estimate, stderr=t.stderr if np.isfinite(t.stderr) else None, n=len(diffs))


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The index of the first reply token where two replies differ (None: identical tokens)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def reply_rows(reference: list[dict], rung: list[dict]) -> list[dict]:
    """First divergence, length change and loop change against the reference on their common items.
    (Identical replies and verdict flips are the aggregate's, as for every exam.)"""
    ref = {str(r["item_id"]): r for r in reference}
    # an item longer than its context has no reply on either side: nothing to compare (left_out)
    common = [(ref[str(r["item_id"])], r) for r in rung
              if str(r["item_id"]) in ref and not not_decoded(r) and not not_decoded(ref[str(r["item_id"])])]
    rows = []
    div = []
    for a, b in common:
        if a.get("reply_ids") is not None and b.get("reply_ids") is not None:
            d = first_divergence(a["reply_ids"], b["reply_ids"])
            if d is not None:
                div.append(float(d))
    for r in (_paired("first_divergence_token", div) if div else None,
              _paired("reply_length_change", [float(b.get("n_gen_tokens") or 0) - float(a.get("n_gen_tokens") or 0)
                                              for a, b in common]),
              _paired("degenerate_change", [100.0 * (bool(b.get("degenerate")) - bool(a.get("degenerate")))
                                            for a, b in common])):
        if r is not None:
            rows.append(r)
    split = [(a, b) for a, b in common if has_split(a) and has_split(b)]
    for metric, field in (("answer_length_change", "answer_tokens"), ("thinking_length_change", "thinking_tokens")):
        r = _paired(metric, [float(b.get(field) or 0) - float(a.get(field) or 0) for a, b in split])
        if r is not None:
            rows.append(r)
    return rows


#: the figures counted in the rung's own tokens or read through the reference's token ids: meaningless
#: when the file turns the same text into other tokens (provenance.refusal)
TOKEN_FIGURES = ("teacher_kld", "teacher_same_top", "first_divergence_token", "reply_length_change",
                 "answer_length_change", "thinking_length_change")


# -- the rule jobs -------------------------------------------------------------------------------
def reference_job(cfg: dict, card: str, *, gguf: str, info: str, generations: str, threads: int, spec: str,
                  deadline: float | None, logits_out: str, info_out: str) -> None:
    """Rule reply_logits: the reference rung teacher-forced through its own replies (f16 KV, as the
    corpora's store), its quantized log-probs stored once per (card, family, benchmark)."""
    check_same_card(card, cfg.get("card"))
    ref = read_json(info)
    records = read_jsonl(generations)
    who, out, engine = teacher_pass(gguf, records, kv="f16", threads=threads, n_batch=int(cfg["fidelity"]["n_batch"]),
                                    n_gpu_layers=cfg["gpu_layers"], flash_attn=cfg.get("flash_attn"),
                                    write_reference=logits_out if records else None,
                                    ref_header={"model_sha256": ref["sha256"], "kv": "f16"}, deadline=deadline)
    skipped = left_out(records)
    reason = None
    if not who:  # nothing to score (no replies, or records without token ids): said in the info file
        Path(logits_out).write_bytes(b"")
        every = bool(records) and skipped is not None and len(skipped["items"]) == len(records)
        reason = ("every item is " + NOT_DECODED_REASON if every
                  else "no reply of the reference rung carries its token ids")
    write_json(info_out, {"model_sha256": ref["sha256"], "generations_sha256": sha256_file(generations),
                          "who": who, "n_sequences": len(who),
                          "n_rows": int(out["layout"].n_rows) if who else 0, "seconds": out.get("seconds"),
                          "engine": engine, "spec": spec, "left_out": skipped, "reason": reason})


def point_job(pt, *, reference_logits: str, reference_info: str, reference_generations: str, generations: str,
              deadline: float | None, metrics_out: str) -> None:
    """Rule fidelity: one task point's replies against the reference rung's (first divergence,
    length, loops) and its teacher-forced KLD / same-top on the reference's replies."""
    info = read_json(reference_info)
    ref_records = read_jsonl(reference_generations)
    rows = reply_rows(ref_records, read_jsonl(generations))
    engine = {}
    refused = refusal(pt.model_record)
    if refused:  # a third-party file with another tokenizer: its token ids are not the reference's
        rows = [r for r in rows if r["metric"] not in TOKEN_FIGURES]
        rows += [metrics.row(m, None, subset=kind, status="absent", status_reason=refused)
                 for m in ("teacher_kld", "teacher_same_top") for kind in KINDS[:1]]
        rows += [metrics.row(m, None, status="absent", status_reason=refused)
                 for m in ("first_divergence_token", "reply_length_change")]
    elif info["who"]:
        reader = ReferenceReader(reference_logits)
        try:
            who, out, engine = teacher_pass(pt.model_path, ref_records, kv=pt.kv, threads=pt.threads,
                                            n_batch=int(pt.config["fidelity"]["n_batch"]), reference=reader,
                                            n_gpu_layers=pt.config["gpu_layers"],
                                            flash_attn=pt.config.get("flash_attn"), deadline=deadline)
        finally:
            reader.close()
        rows += teacher_rows(who, out)
    else:
        for kind in KINDS[:1]:
            rows.append(metrics.row("teacher_kld", None, subset=kind, status="absent", status_reason=info["reason"]))
    data = {"name": f"{pt.benchmark} replies", "sha256": info["generations_sha256"],
            "reference_logits": {k: info[k] for k in ("model_sha256", "n_sequences", "n_rows", "spec")},
            "generations_sha256": sha256_file(generations)}
    pt.write_metrics(metrics_out, rows, data=data, engine=engine, extra={"left_out": left_out(ref_records)})
