"""A file not made here is checked against the family's reference before it is measured.

The source documents name the mistake: a third party's conversion with a wrong chat template or an
outdated tokenizer makes a model "seem dumb" for a reason that has nothing to do with the bits. So a
prebuilt rung's GGUF header is compared with the reference rung's, key by key, in four groups that
decide what its figures may mean, and a fifth that is only recorded (docs/ladder.md, "Third-party
files"):

- ``architecture``: ``general.architecture``, every other ``<arch>.*`` hyperparameter (layers, heads,
  widths, norm epsilon, experts used, ...) and every tensor's name and shape (the tensor types differ
  on purpose: that is the quantization);
- ``tokenizer``: every ``tokenizer.*`` key but the templates: the tokenizer model and pre-tokenizer,
  its tokens, merges, scores and token types (added and control tokens are token types), the special
  token ids (bos, eos, eot, pad, ...) and their add-flags;
- ``chat_template``: the template's text (and any named template, ``tokenizer.chat_template.<name>``)
  and, where the text differs, its rendering of fixed conversations (a system prompt and several
  turns, a tool call with its result and the tools offered, a reply with its reasoning) through the
  formatter the exams use, with each file's own BOS/EOS texts: a template that renders them the same
  is a spelling difference and blocks nothing;
- ``context``: the trained context and the RoPE / YaRN metadata (``<arch>.context_length``,
  ``<arch>.rope.*``);
- ``producer`` (recorded, never blocking): what the maker wrote about how the file was made (the
  quantize version, file type, importance-matrix file, dataset and chunk count).

Every difference in the first four groups is named (the GGUF key, both values); one the config does
not list in ``families.<f>.prebuilt.<rung>.accept`` (a key or a whole group) blocks the rung with a
message that names the key and both values, before any job measures it. The result is written into
the rung's sidecar, so it is part of every manifest made from the rung, and it decides what the
figures may say: a tokenizer that turns a text into other tokens refuses KLD and the PPL ratio (the
tokens are not the reference's tokens); a chat corpus, rendered through the file's own template and
special tokens, refuses them on any tokenizer or rendering difference (``refusal``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from .errors import ConfigError, DataError
from .gguf_meta import scan_header
from .io import hash_obj

log = logging.getLogger("quantladder.provenance")

GROUPS = ("architecture", "tokenizer", "chat_template", "context")
# What an accepted difference of each group does to the rung's figures (recorded with the result).
EFFECTS = {
    "architecture": "another model: none of its figures compares with the family's ladder",
    "tokenizer": "its replies stop, or its text splits, elsewhere than the reference's: KLD and the PPL ratio "
                 "are refused where the tokens differ",
    "chat_template": "its chat exams ran with this file's own template, which renders otherwise: they measure "
                     "the template too",
    "context": "its trained context or RoPE scaling is not the reference's: every figure measures that too, "
               "long contexts most",
}
PRODUCER_KEYS = ("general.quantization_version", "general.file_type", "quantize.imatrix.file",
                 "quantize.imatrix.dataset", "quantize.imatrix.chunks_count", "quantize.imatrix.entries_count")
# Token ids that only say where a reply stops: a different one does not change how a plain text becomes
# tokens (unless the tokenizer appends EOS to every text: add_eos_token).
STOP_IDS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
            "tokenizer.ggml.padding_token_id")

# The fixed conversations a differing template is rendered on (what the exams send through it): plain
# turns with a system prompt, a tool call with its result and the tools offered, a reply with its
# reasoning (templates of thinking models show or drop it); each with the generation prompt, as asked.
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATIONS: tuple[dict, ...] = (
    {"messages": [{"role": "user", "content": "What is 2 + 2?"}]},
    {"messages": [{"role": "system", "content": "You are a careful assistant."},
                  {"role": "user", "content": "Name a prime number."},
                  {"role": "assistant", "content": "7"},
                  {"role": "user", "content": "And one larger than 100?"}]},
    {"messages": [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "call_1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18}'}],
     "tools": TOOLS},
    {"messages": [{"role": "user", "content": "Is 91 prime?"},
                  {"role": "assistant", "content": "No: 91 = 7 x 13.",
                   "reasoning_content": "Try small primes: 91 / 7 = 13."},
                  {"role": "user", "content": "And 97?"}]},
)


def group_of(key: str, arch: str) -> str | None:
    """The group a GGUF key belongs to; None: not compared (``general.*`` names and links, the
    ``quantize.*`` record, split files' keys)."""
    if key == "general.architecture":
        return "architecture"
    if key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template."):
        return "chat_template"
    if key.startswith("tokenizer."):
        return "tokenizer"
    if key == f"{arch}.context_length" or key.startswith(f"{arch}.rope."):
        return "context"
    if key.startswith(f"{arch}."):
        return "architecture"
    return None


def _plain(v: Any) -> Any:
    return v.tolist() if hasattr(v, "tolist") else v


def _digest(v: Any) -> str:
    if hasattr(v, "tobytes"):  # a numeric array: its bytes (scores may hold values JSON cannot)
        return hashlib.sha256(v.tobytes()).hexdigest()[:16]
    return hash_obj(list(v))[:16]


def shown(v: Any) -> Any:
    """A value as a message and the sidecar show it: short scalars as they are; arrays and long texts
    by their length and digest (the first entry that differs is named separately)."""
    if v is None:
        return "absent"
    if hasattr(v, "tolist") and getattr(v, "ndim", 0) or isinstance(v, (list, tuple)):
        return f"{len(v)} entries (sha256 {_digest(v)})"
    v = _plain(v)
    if isinstance(v, str) and len(v) > 80:
        return f"{len(v)} characters (sha256 {hash_obj(v)[:16]})"
    return v


def _first_difference(a, b) -> str | None:
    """Where two arrays or long texts first differ, with both entries."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, str) and isinstance(b, str):
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"the text differs first at character {i}: {a[i:i + 40]!r} against {b[i:i + 40]!r}"
    if not isinstance(a, list) or not isinstance(b, list):
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first at index {i}: {x!r} against {y!r}"
    return f"{len(a)} entries against {len(b)}" if len(a) != len(b) else None


def _token_text(fields: dict, key: str) -> str:
    """The text of a special token (as the engine passes BOS/EOS to the template), '' without one."""
    tokens, i = fields.get("tokenizer.ggml.tokens"), fields.get(key)
    if tokens is None or i is None or not 0 <= int(i) < len(tokens):
        return ""
    return tokens[int(i)]


def render(template: str, conversation: dict, bos: str = "", eos: str = "") -> str:
    """A conversation through a chat template, as the engine renders an exam's prompt (llama-cpp-python's
    Jinja2ChatFormatter, the generation prompt added); a template that cannot render it says so (that
    is itself a finding, and differs from one that can)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter  # heavy: only where a template differs

    try:
        fmt = Jinja2ChatFormatter(template=template, bos_token=bos, eos_token=eos, add_generation_prompt=True)
        return fmt(messages=conversation["messages"], tools=conversation.get("tools")).prompt
    except Exception as e:  # noqa: BLE001 (a template's own error, whatever its kind)
        return f"<does not render: {type(e).__name__}: {e}>"


def _renderings(a: str, b: str, ref: dict, cand: dict) -> tuple[list[int], str | None]:
    """Which fixed conversations the two templates render differently, and the first such place."""
    changed, first = [], None
    for i, conv in enumerate(CONVERSATIONS):
        ra = render(a, conv, _token_text(ref, "tokenizer.ggml.bos_token_id"), _token_text(ref, "tokenizer.ggml.eos_token_id"))
        rb = render(b, conv, _token_text(cand, "tokenizer.ggml.bos_token_id"),
                    _token_text(cand, "tokenizer.ggml.eos_token_id"))
        if ra != rb:
            changed.append(i)
            if first is None:
                j = next((j for j, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
                first = f"conversation {i} first at character {j}: {ra[j:j + 40]!r} against {rb[j:j + 40]!r}"
    return changed, first


def compare(reference: str, candidate: str) -> dict:
    """Every difference between a candidate GGUF's header and the reference's, with its group, plus
    what each producer recorded: ``{"differences": [{"key", "group", "reference", "file", "detail",
    ["renders_differently"]}], "producer": {"file": {...}, "reference": {...}}}``. Headers only
    (a fraction of a second for a 49k vocabulary)."""
    ref, ref_t = scan_header(reference)
    cand, cand_t = scan_header(candidate)
    arch = str(ref.get("general.architecture"))
    diffs: list[dict] = []
    for key in sorted(set(ref) | set(cand)):
        group = group_of(key, arch)
        if group is None:
            continue
        a, b = ref.get(key), cand.get(key)
        if a is not None and b is not None and _plain(a) == _plain(b):
            continue
        d = {"key": key, "group": group, "reference": shown(a), "file": shown(b),
             "detail": _first_difference(a, b) if a is not None and b is not None else None}
        if key.endswith("_token_id") and a is not None and b is not None:
            d["detail"] = (f"token {int(a)} is {_token_text(ref, key)!r} in the reference, token {int(b)} is "
                           f"{_token_text(cand, key)!r} in this file")
        if group == "chat_template":
            if isinstance(a, str) and isinstance(b, str):
                changed, first = _renderings(a, b, ref, cand)
                d["renders_differently"] = bool(changed)
                d["detail"] = "; ".join(x for x in (d["detail"], (
                    f"renders {len(changed)} of the {len(CONVERSATIONS)} fixed conversations differently, {first}"
                    if changed else f"renders all {len(CONVERSATIONS)} fixed conversations the same")) if x)
            else:
                d["renders_differently"] = True  # one file has no such template: nothing renders alike
        diffs.append(d)
    shapes_ref = {t.name: list(t.shape) for t in ref_t}
    shapes_cand = {t.name: list(t.shape) for t in cand_t}
    for name in sorted(set(shapes_ref) | set(shapes_cand)):
        if shapes_ref.get(name) != shapes_cand.get(name):
            diffs.append({"key": f"tensor {name}", "group": "architecture",
                          "reference": shapes_ref.get(name, "absent"), "file": shapes_cand.get(name, "absent"),
                          "detail": "shape (ne0, ne1, ...)"})
    producer = {side: {k: shown(f[k]) for k in PRODUCER_KEYS if k in f} for side, f in (("file", cand),
                                                                                       ("reference", ref))}
    flags = {k: bool(_plain(f.get("tokenizer.ggml.add_eos_token"))) for k, f in (("reference", ref), ("file", cand))}
    return {"differences": diffs, "producer": producer, "adds_eos": flags,
            "keys": sorted(set(ref) | set(cand) | {f"tensor {n}" for n in shapes_ref.keys() | shapes_cand.keys()})}


def _matters(d: dict) -> bool:
    """A difference that changes what the file does (a template that renders the fixed conversations
    the same is recorded, not counted)."""
    return not (d["group"] == "chat_template" and d.get("renders_differently") is False)


def check(result: dict, accept: list[str], *, where: str, path: str) -> dict:
    """The gate. An ``accept`` entry must be a group or a key of either header (a ConfigError names
    any other, a misspelling); every difference whose key or group it does not list is a DataError that
    names the key and both values. Returns the record the sidecar keeps: the differences, what was
    accepted, the groups the file differs in, whether its tokens differ, and what that does."""
    diffs = result["differences"]
    keys = set(result.get("keys") or ()) | {d["key"] for d in diffs}
    for item in accept:
        if item not in GROUPS and item not in keys:
            differing = ", ".join(d["key"] for d in diffs if _matters(d)) or "none"
            raise ConfigError(f"{where}.accept: {item!r} is neither a group ({', '.join(GROUPS)}) nor a key of this "
                              f"file's or the reference's GGUF header (the keys this file differs in: {differing}); "
                              "producer keys (quantize.*, general.file_type) are recorded and need no accept")
    unused = [a for a in accept if a not in GROUPS and not any(d["key"] == a for d in diffs)]
    if unused:
        log.warning("%s.accept lists %s, in which this file does not differ from the reference", where, unused)
    blocking = [d for d in diffs if _matters(d) and d["key"] not in accept and d["group"] not in accept]
    if blocking:
        lines = [f"  {d['key']} ({d['group']}): the reference has {d['reference']!r}, this file {d['file']!r}"
                 + (f"; {d['detail']}" if d.get("detail") else "") for d in blocking]
        raise DataError(f"{path}: differs from the family's reference in {len(blocking)} place(s) the config does "
                        "not accept, so it is not measured:\n" + "\n".join(lines)
                        + f"\nlist the keys (or groups) you accept on purpose under {where}.accept; what each "
                          "group's difference does to the figures: docs/ladder.md, \"Third-party files\"")
    counted = [d for d in diffs if _matters(d)]
    groups = [g for g in GROUPS if any(d["group"] == g for d in counted)]
    adds_eos = any((result.get("adds_eos") or {}).values())
    tokens_differ = [d["key"] for d in counted if d["group"] == "tokenizer" and (adds_eos or d["key"] not in STOP_IDS)]
    return {"differences": diffs, "producer": result["producer"], "accepted": list(accept),
            "accepted_not_differing": unused, "differs_in": groups, "tokens_differ": tokens_differ,
            "effects": {g: EFFECTS[g] for g in groups}}


def reference_template(reference: str, candidate: str, *, where: str) -> tuple[str, dict]:
    """``prebuilt.<rung>.chat_template: reference``: the reference's template text, to be written into the
    rung's copy, and the record of what was done (``{"from": "reference", "own_differs", "own_sha256",
    "reference_sha256"}``; the file's own template's hash, so the setting and what it replaced are on
    record). Refused where the reference has no template."""
    ref, _ = scan_header(reference)
    cand, _ = scan_header(candidate)
    text = ref.get("tokenizer.chat_template")
    if not isinstance(text, str):
        raise ConfigError(f"{where}.chat_template: reference — the family's reference ({reference}) has no chat "
                          "template to use")
    own = cand.get("tokenizer.chat_template")
    sha = lambda t: hashlib.sha256(t.encode()).hexdigest() if isinstance(t, str) else None  # noqa: E731
    return text, {"from": "reference", "own_differs": own != text, "own_sha256": sha(own),
                  "reference_sha256": sha(text)}


def refusal(record: dict | None, corpus_kind: str = "text") -> str | None:
    """Why KLD and the PPL ratio of a rung (its sidecar ``record``) against the reference mean nothing on
    a corpus of this kind, or None. A plain text is refused when the file turns it into other tokens; a
    chat corpus, rendered through the file's own template and special tokens, also when any token id or
    the template's rendering differs (its text is then not the text the reference scored)."""
    p = (record or {}).get("provenance") or {}
    if p.get("tokens_differ"):
        return ("refused: this file's tokenizer differs from the reference's (" + ", ".join(p["tokens_differ"])
                + "), so the same text is other tokens and a divergence from the reference's distributions "
                  "over them means nothing (docs/ladder.md, \"Third-party files\")")
    if corpus_kind == "chat":
        why = [g for g in ("tokenizer", "chat_template") if g in (p.get("differs_in") or ())]
        if why:
            return (f"refused: a chat corpus is rendered through this file's own template and special tokens, which "
                    f"differ from the reference's ({', '.join(why)}), so the text scored is not the text the "
                    "reference scored (docs/ladder.md, \"Third-party files\")")
    return None

