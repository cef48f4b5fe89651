"""A traffic file: the user's conversations, without labels (docs/your-tasks.md, "Your traffic").

The chat-messages JSONL that serving logs and fine-tuning sets use, one conversation a line::

    {"id": "c-17", "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
                                {"role": "assistant", "content": "..."}]}

or a plain prompt (``{"prompt": "..."}``, or a JSON string), with its logged reply where the file has
one as a prompt/completion pair (``"completion"``, or ``"response"``: the fine-tuning and evaluation
sets' format, e.g. IFBench's sample outputs). Other fields (timestamps, model names) are ignored. The prompt is the conversation up to its last user turn; an assistant turn that ends the
conversation is the *logged reply*, on which a rung is teacher-forced too. An assistant turn may carry
the thinking a serving log kept apart (``reasoning_content``, llama-server's and the OpenAI-style
APIs' field): an earlier turn's goes to the chat template with it, as the server replays it (the
template keeps or drops it), and the logged reply's is kept for its replay (docs/thinking.md). A conversation without an
``id`` gets one from its content, so a duplicate conversation is caught as a duplicate id.

Read with the task file's reader (quantladder.benchmarks.tasks.taskfile: JSONL / CSV / Parquet, local
or a hub dataset at a pinned revision); every mistake is a DataError naming ``file:line``.

The split into a calibration part and an evaluation part (:func:`part_of`) is a function of the
conversation's id alone: the two parts are disjoint by construction, and adding a conversation
moves no other one from its part.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import DataError
from ...io import hash_obj
from ..tasks.taskfile import ROLES, no_lone_surrogate, format_of, missing, unique_records

PARTS = ("all", "calib", "eval")
REPLY_FIELDS = ("completion", "response")  # a plain prompt's logged reply (prompt/completion pairs)


@dataclass(frozen=True)
class Conversation:
    id: str
    where: str  # file:line
    prompt: tuple  # chat messages up to the last user turn ({role, content})
    logged: str | None  # the assistant turn that ends the conversation, when the log has one
    subset: str | None = None
    logged_reasoning: str | None = None  # that turn's reasoning_content, when the log kept it

    def prompt_half(self) -> dict:
        return {"id": self.id, "prompt": [dict(m) for m in self.prompt], "subset": self.subset}


@dataclass(frozen=True)
class TrafficFile:
    path: Path
    items: tuple[Conversation, ...]
    prompts_sha256: str  # the prompts (what decides a reply)
    logged_sha256: str  # the logged replies (what the teacher-forced pass on them reads)


def _messages(where: str, raw) -> list[dict]:
    if isinstance(raw, str):  # a CSV cell
        try:
            cell, raw = raw, json.loads(raw)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: field 'messages': not JSON ({e.msg})") from None
        if "\\u" in cell:
            no_lone_surrogate(where, raw, "messages")
    if not isinstance(raw, list) or not raw:
        raise DataError(f"{where}: field 'messages': a non-empty list of chat messages, got {raw!r:.80}")
    for i, m in enumerate(raw):
        if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise DataError(f"{where}: field 'messages[{i}]': a chat message is {{role: {'|'.join(ROLES)}, "
                            f"content: text}}, got {m!r:.120}")
        r = m.get("reasoning_content")
        if not missing(r) and (m["role"] != "assistant" or not isinstance(r, str)):
            raise DataError(f"{where}: field 'messages[{i}].reasoning_content': an assistant turn's thinking, as "
                            f"text, got {r!r:.80} on a {m['role']} turn")
    # an assistant turn's thinking is kept only where the log has it: a file without it hashes as before
    return [{"role": m["role"], "content": m["content"],
             **({"reasoning_content": m["reasoning_content"]} if isinstance(m.get("reasoning_content"), str)
                and m["reasoning_content"] else {})} for m in raw]


def parse_line(where: str, rec) -> Conversation:
    """One line of a traffic file as a conversation; anything else is a DataError naming the line."""
    if isinstance(rec, str):
        rec = {"prompt": rec}
    if not isinstance(rec, dict):
        raise DataError(f"{where}: not a conversation: a line is {{\"messages\": [...]}}, {{\"prompt\": text}} "
                        f"or a JSON string, got {type(rec).__name__}")
    rec = {k: v for k, v in rec.items() if not missing(v)}  # a table's empty cell is no field
    if "messages" in rec:
        msgs = _messages(where, rec["messages"])
    elif isinstance(rec.get("prompt"), str) and rec["prompt"].strip():
        msgs = [{"role": "user", "content": rec["prompt"]}]
        pair = [k for k in REPLY_FIELDS if k in rec]
        if len(pair) > 1:
            raise DataError(f"{where}: fields {pair}: one logged reply per prompt (a prompt/completion pair)")
        if pair:
            if not isinstance(rec[pair[0]], str):
                raise DataError(f"{where}: field {pair[0]!r}: the logged reply is text, got {type(rec[pair[0]]).__name__}")
            msgs.append({"role": "assistant", "content": rec[pair[0]]})
    else:
        raise DataError(f"{where}: not a conversation: no 'messages' list and no 'prompt' text "
                        f"(fields: {sorted(rec)})")
    logged = logged_reasoning = None
    if msgs[-1]["role"] == "assistant":
        last = msgs.pop()
        logged, logged_reasoning = last["content"], last.get("reasoning_content")
    if not msgs or msgs[-1]["role"] != "user":
        raise DataError(f"{where}: not a conversation: it must end with a user turn (optionally followed by "
                        "the assistant's logged reply)")
    if not msgs[-1]["content"].strip():
        raise DataError(f"{where}: field 'messages': the last user turn is empty")
    rid = rec.get("id")
    if rid is None or rid == "":
        rid = "c" + hash_obj(msgs)[:12]
    elif isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise DataError(f"{where}: field 'id': a string or an integer, got {rid!r}")
    subset = rec.get("subset")
    return Conversation(id=str(rid), where=where, prompt=tuple(msgs), logged=logged or None,
                        subset=str(subset) if subset not in (None, "") else None,
                        logged_reasoning=(logged_reasoning or None) if logged else None)


def part_of(conv_id: str, calibration_share: float, seed: str) -> str:
    """``calib`` or ``eval``: a fixed hash of (seed, id) against the calibration share."""
    u = int(hashlib.sha256(f"{seed}\0{conv_id}".encode()).hexdigest()[:15], 16) / 16**15
    return "calib" if u < calibration_share else "eval"


def read(path: str | Path, fmt: str = "auto", *, part: str = "all", calibration_share: float = 0.5,
         seed: str = "traffic", limit: int | None = None) -> TrafficFile:
    """The file's conversations (of one part of the split, or all), every line checked first."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such traffic file")
    if part not in PARTS:
        raise DataError(f"{path}: part {part!r} is not one of {PARTS}")
    items: list[Conversation] = unique_records(path, format_of(path, fmt), parse_line, "the traffic file has no conversations")
    if part != "all":
        items = [c for c in items if part_of(c.id, calibration_share, seed) == part]
        if not items:
            raise DataError(f"{path}: no conversation falls in the {part} part (calibration share "
                            f"{calibration_share:g}); give more conversations or another share")
    if limit:
        items = items[:limit]
    return TrafficFile(path=path, items=tuple(items), prompts_sha256=hash_obj([c.prompt_half() for c in items]),
                       logged_sha256=hash_obj([[c.id, c.logged, *([c.logged_reasoning] if c.logged_reasoning else [])]
                                               for c in items]))


def text_of(tf: TrafficFile) -> str:
    """The conversations as plain text (a calibration corpus): every turn's content, logged replies
    included, a blank line between turns and two between conversations."""
    return "\n\n\n".join("\n\n".join([*(m["content"] for m in c.prompt), *([c.logged] if c.logged else [])])
                         for c in tf.items) + "\n"
