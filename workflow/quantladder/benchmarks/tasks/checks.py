"""The check kinds of a task file (docs/your-tasks.md says each one's semantics).

``parse`` turns a check as written into a :class:`Check` and refuses, naming ``file:line`` and the
field, what cannot run: an unknown kind, an invalid regex or JSON Schema, a choice check on an item
without options, a Python check with no code. ``run`` decides one check on one reply, here, for
every kind but ``python``: a user's Python check runs only in the sandbox (``pycheck``), like
model-written code.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DataError
from ...io import hash_obj
from . import reading

KINDS = ("exact", "contains", "not_contains", "regex", "numeric", "choice", "json", "python")
NORMALIZE = ("case", "whitespace", "punctuation", "nfkc")
_OPTIONS = {  # kind -> (required, optional) keys besides `kind`
    "exact": ({"value"}, {"normalize"}),
    "contains": ({"value"}, {"normalize"}),
    "not_contains": ({"value"}, {"normalize"}),
    "regex": ({"pattern"}, {"mode", "flags"}),
    "numeric": ({"value"}, {"abs_tol", "rel_tol", "pattern", "group", "decimal"}),
    "choice": ({"answer"}, set()),
    "json": (set(), {"fields", "schema"}),
    "python": (set(), {"code", "file", "function"}),
}
_FLAGS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X}


@dataclass(frozen=True)
class Check:
    kind: str
    spec: dict  # as written, defaults filled
    digest: str  # what decides this check's verdicts (a Python check file's text included)
    compiled: object = field(default=None, compare=False)  # a regex, or a JSON Schema validator
    source: str | None = None  # a Python check's code


def _bad(where: str, msg: str):
    raise DataError(f"{where}: {msg}")


def parse(where: str, spec, item: dict, base_dir: Path) -> Check:
    """A check as written -> a Check; ``item`` holds the item fields checks may need (options)."""
    if not isinstance(spec, dict):
        _bad(where, f"a check is an object with a `kind`, got {spec!r}")
    kind = spec.get("kind")
    if kind not in _OPTIONS:
        near = difflib.get_close_matches(str(kind), KINDS, n=1)
        _bad(where, f"unknown check kind {kind!r} (known: {', '.join(KINDS)})"
             + (f"; did you mean {near[0]!r}?" if near else ""))
    need, may = _OPTIONS[kind]
    missing = sorted(need - set(spec))
    if missing:
        _bad(where, f"a {kind} check needs {missing}")
    extra = sorted(set(spec) - need - may - {"kind"})
    if extra:
        _bad(where, f"a {kind} check has no option {extra} (options: {sorted(need | may)})")
    s = dict(spec)
    compiled = None
    source = None
    if kind in ("exact", "contains", "not_contains"):
        if not isinstance(s["value"], str):
            _bad(where, f"{kind}.value: text, got {s['value']!r}")
        s["normalize"] = list(s.get("normalize") or [])
        bad = [n for n in s["normalize"] if n not in NORMALIZE]
        if bad:
            _bad(where, f"{kind}.normalize: {bad} (known: {', '.join(NORMALIZE)})")
    elif kind == "regex":
        s.setdefault("mode", "search")
        s.setdefault("flags", "")
        if s["mode"] not in ("search", "fullmatch"):
            _bad(where, f"regex.mode: 'search' or 'fullmatch', got {s['mode']!r}")
        compiled = _regex(where, "regex.pattern", s["pattern"], s["flags"])
    elif kind == "numeric":
        for k in ("value", "abs_tol", "rel_tol"):
            if k in s and (not isinstance(s[k], (int, float)) or isinstance(s[k], bool) or not math.isfinite(s[k])):
                _bad(where, f"numeric.{k}: a number, got {s[k]!r}")
        if s.get("abs_tol", 0) < 0 or s.get("rel_tol", 0) < 0:
            _bad(where, "numeric: tolerances are not negative")
        s.setdefault("abs_tol", 0)
        s.setdefault("rel_tol", 0)
        if "pattern" in s:
            compiled = _regex(where, "numeric.pattern", s["pattern"], "")
            s.setdefault("group", 1 if compiled.groups else 0)
            if not isinstance(s["group"], (int, str)) or (isinstance(s["group"], int) and s["group"] > compiled.groups) \
                    or (isinstance(s["group"], str) and s["group"] not in compiled.groupindex):
                _bad(where, f"numeric.group: the pattern has no group {s['group']!r}")
        elif "group" in s:
            _bad(where, "numeric.group needs a `pattern`")
        if s.get("decimal", "auto") not in reading.DECIMALS:
            _bad(where, f"numeric.decimal: one of {', '.join(reading.DECIMALS)} (the decimal mark of the replies' "
                        f"language: comma for 6,2), got {s['decimal']!r}")
    elif kind == "choice":
        options = item.get("options")
        if not options:
            _bad(where, "a choice check needs the item's `options`, and the item has none")
        answer = s["answer"]
        letters = [chr(65 + i) for i in range(len(options))]
        if isinstance(answer, str) and answer.strip().upper() in letters and len(answer.strip()) == 1:
            s["answer"] = letters.index(answer.strip().upper())
        elif isinstance(answer, str) and answer in options:
            s["answer"] = options.index(answer)
        else:
            _bad(where, f"choice.answer: a letter {letters[0]}-{letters[-1]} or one of the options' texts, "
                        f"got {answer!r}")
    elif kind == "json":
        if "fields" in s and not isinstance(s["fields"], dict):
            _bad(where, f"json.fields: an object of field -> value, got {s['fields']!r}")
        if "schema" in s:
            import jsonschema

            try:
                cls = jsonschema.validators.validator_for(s["schema"], default=jsonschema.Draft202012Validator)
                cls.check_schema(s["schema"])
            except jsonschema.SchemaError as e:
                _bad(where, f"json.schema: not a valid JSON Schema ({e.message})")
            compiled = cls(s["schema"])
    elif kind == "python":
        if ("code" in s) == ("file" in s):
            _bad(where, "a python check gives its function as `code` (text) or `file` (a path), one of them")
        s.setdefault("function", "check")
        if not (isinstance(s["function"], str) and s["function"].isidentifier()):
            _bad(where, f"python.function: a Python name, got {s['function']!r}")
        if "file" in s:
            p = Path(s["file"])
            p = p if p.is_absolute() else base_dir / p
            if not p.is_file():
                _bad(where, f"python.file: {p} does not exist")
            try:
                source = p.read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                line = e.object.count(b"\n", 0, e.start) + 1
                _bad(where, f"python.file: {p}:{line}: not UTF-8 (byte 0x{e.object[e.start]:02x}); save it as "
                            "UTF-8, the encoding Python reads a source file in")
        else:
            source = s["code"]
        try:
            compile(source, s.get("file", "check.py"), "exec")  # only compiled here: it runs in the sandbox
        except (SyntaxError, ValueError) as e:
            _bad(where, f"python: the check does not compile ({type(e).__name__}: {e})")
    return Check(kind, s, hash_obj([s, source]), compiled, source)


def _regex(where: str, what: str, pattern, flags) -> re.Pattern:
    if not isinstance(pattern, str):
        _bad(where, f"{what}: text, got {pattern!r}")
    if not isinstance(flags, str) or any(f not in _FLAGS for f in flags):
        _bad(where, f"{what[:-8]}.flags: letters of {''.join(_FLAGS)}, got {flags!r}")
    try:
        return re.compile(pattern, sum(_FLAGS[f] for f in flags))
    except re.error as e:
        _bad(where, f"{what}: not a valid regular expression ({e})")


# ---------------------------------------------------------------------------------------------
# deciding a check on a reply (python checks excepted: quantladder.benchmarks.tasks.pycheck)


def normalize(text: str, how) -> str:
    text = text.strip()
    if "nfkc" in how:
        text = unicodedata.normalize("NFKC", text)
    if "case" in how:
        text = text.casefold()
    if "punctuation" in how:
        text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    if "whitespace" in how:
        text = " ".join(text.split())
    return text.strip()


def run(check: Check, reply: str, options: tuple[str, ...] | None) -> tuple[bool, str]:
    """(passed, detail) of one built-in check on one reply."""
    s = check.spec
    k = check.kind
    if k in ("exact", "contains", "not_contains"):
        got, want = normalize(reply, s["normalize"]), normalize(s["value"], s["normalize"])
        if k == "exact":
            return got == want, "" if got == want else f"reply {got[:80]!r} is not {want[:80]!r}"
        found = want in got
        return found == (k == "contains"), f"{want[:80]!r} {'found' if found else 'not found'}"
    if k == "regex":
        m = (check.compiled.fullmatch(reply.strip()) if s["mode"] == "fullmatch" else check.compiled.search(reply))
        return m is not None, "" if m else f"no {s['mode']} of {s['pattern'][:80]!r}"
    if k == "numeric":
        num = extract_number(reply, check.compiled, s.get("group", 0), s.get("decimal", "auto"))
        if num is None:
            return False, "no number in the reply" if check.compiled is None else "no number where the pattern matches"
        if num.value is None:
            return False, f"read {num.why}, want {s['value']:g}"
        x = float(num.value)
        ok = math.isclose(x, float(s["value"]), rel_tol=float(s["rel_tol"]), abs_tol=float(s["abs_tol"]))
        return ok, f"read {x:g} ({num.text!r}), want {s['value']:g}"
    if k == "choice":
        got = read_choice(reply, options or ())
        want = s["answer"]
        if got is None:
            return False, "no option chosen"
        return got == want, f"chose {chr(65 + got)}, want {chr(65 + want)}"
    if k == "json":
        value, found = extract_json(reply)
        if not found:
            return False, "no JSON in the reply"
        for path, want in (s.get("fields") or {}).items():
            got, ok = _field(value, path)
            if not ok or got != want:
                return False, f"field {path!r} is {got!r}" if ok else f"no field {path!r}"
        if check.compiled is not None:
            err = next(iter(check.compiled.iter_errors(value)), None)
            if err is not None:
                return False, f"schema: {err.message[:200]}"
        return True, ""
    raise ValueError(f"check kind {k!r} is not decided here")


def extract_number(reply: str, pattern: re.Pattern | None, group=0, decimal: str = "auto") -> reading.Number | None:
    """The reply's last number, or the last number in the first match's ``group`` of ``pattern``, read as
    a person reads it (quantladder.benchmarks.tasks.reading: ranges, dates, decimal commas, the Unicode
    minus); None when there is none."""
    if pattern is not None:
        m = pattern.search(reply)
        if m is None or m.group(group) is None:
            return None
        reply = m.group(group)
    return reading.last_number(reply, decimal)


# A choice label is a letter standing alone as a label, never a word's first letter or the article
# "a" in running text ("The answer is a Kullback-Leibler divergence" chooses nothing by its letter).
# An upper-case letter is a label where it stands alone (not followed by a letter, digit, hyphen or
# apostrophe); a lower-case one only in brackets ("(b)") or closed by ")", ".", ":", "," or "]" or
# the end of the text ("b)", "answer: b").
_UPPER = r"([A-Z])(?![\w'\u2019-])"
_LOWER = r"([a-z])(?=\s*$|[).:,\]])"
_LABEL = rf"(?:\(([A-Za-z])\)|{_UPPER}|{_LOWER})"
# A reply that opens with its label: "B", "(B)", "B. json", "B) json", "B: json", "**B**".
_LEAD = re.compile(rf"^\W{{0,3}}(?:\(([A-Za-z])\)|([A-Z])(?:[).:\]]|\W{{0,3}}$)|([a-z])(?:[).\]]|\W{{0,3}}$))")
# A label named as the answer: "answer: B", "the answer is (b)", "Answer - C", "The correct answer is B."
_SAID = re.compile(rf"(?i:\banswer(?:\s+is)?)\s*[:\-]?\s*(?:\*\*)?{_LABEL}")
# A label named as an option: "option B", "choice (c)"; it decides only when every mention names the
# same one ("option A is wrong, option C is right" chooses nothing by its letters).
_NAMED = re.compile(rf"(?i:\b(?:option|choice))\s+(?:\*\*)?{_LABEL}")


def _label(m: re.Match | None) -> str | None:
    """The label a match holds (whichever alternative matched), or None."""
    if m is None:
        return None
    return next((g for g in m.groups() if g), None)


def read_choice(reply: str, options) -> int | None:
    """The option a reply chooses: a label leading the reply ("B", "(B)", "B. ...", "B: ..."), else the
    label after the first "answer"/"answer is" ("the answer is B", "answer: (b)"), else the one label
    every "option X"/"choice X" names, else the one option whose text the reply contains
    (case-insensitive); None when none of these, or several options' texts, appear. A letter is a
    label only where it stands alone (``_UPPER``/``_LOWER`` above): never the article "a"."""
    n = len(options)
    text = reply.strip()
    named = {_label(m) for m in _NAMED.finditer(text)}
    for letter in (_label(_LEAD.match(text)), _label(_SAID.search(text)),
                   next(iter(named)) if len(named) == 1 else None):
        if letter and ord(letter.upper()) - 65 < n:
            return ord(letter.upper()) - 65
    low = text.casefold()
    hits = [i for i, o in enumerate(options) if o.strip().casefold() in low]
    return hits[0] if len(hits) == 1 else None


_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.S | re.I)


def extract_json(reply: str):
    """(value, found): the reply as JSON, else its first fenced block that parses, else the first
    object or array in it that parses (json.JSONDecoder.raw_decode from each '{' or '[')."""
    text = reply.strip()
    try:
        return json.loads(text), True
    except ValueError:
        pass
    for m in _FENCE.finditer(text):
        try:
            return json.loads(m.group(1)), True
        except ValueError:
            continue
    dec = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                return dec.raw_decode(text, i)[0], True
            except ValueError:
                continue
    return None, False


def _field(value, path: str):
    """A field by dotted path ("a.b.0"): (value, present)."""
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None, False
    return value, True
