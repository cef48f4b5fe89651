"""A task file: the user's own items, read and checked before anything runs (docs/your-tasks.md).

One reader for the three formats (JSONL, CSV, Parquet; a local path or a hub dataset at a pinned
revision). Every mistake is a :class:`DataError` naming ``file:line`` (CSV: the line the row starts
on; Parquet: the row) and the field, raised while the file is read: a bad file never reaches a model.

An item splits in two halves with a digest each. The *prompt* half (id, prompt, system, options,
max_tokens, stop, subset) decides a reply; the *check* half (checks, and the text of a Python check
file) decides only the verdict. The benchmark puts the first digest in the items key and the second
in the scoring key, so that a check edit re-scores and a prompt edit regenerates the items it touches.
"""

from __future__ import annotations

import csv
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from ... import REPO_ROOT
from ...errors import DataError
from ...io import hash_obj, sha256_file
from ...models import hub_file
from . import checks as C

PROMPT_FIELDS = ("id", "prompt", "system", "options", "max_tokens", "stop", "subset")
FIELDS = PROMPT_FIELDS + ("checks",)
ROLES = ("system", "user", "assistant")
# Fields a CSV cell holds as JSON text (a list or an object); a plain prompt stays plain text.
_JSON_CELLS = ("options", "stop", "checks")


@dataclass(frozen=True)
class TaskItem:
    id: str
    where: str  # file:line, for every later message about this item
    prompt: str | list  # plain text, or chat messages [{role, content}]
    checks: tuple  # parsed checks (quantladder.benchmarks.tasks.checks)
    record: dict  # the item as written (JSON values): what a Python check sees
    system: str | None = None
    options: tuple[str, ...] | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    subset: str | None = None

    def prompt_half(self) -> dict:
        return {k: self.record.get(k) for k in PROMPT_FIELDS}


@dataclass(frozen=True)
class TaskFile:
    path: Path
    items: tuple[TaskItem, ...]
    prompts_sha256: str
    checks_sha256: str

    @property
    def has_python(self) -> bool:
        return any(c.kind == "python" for it in self.items for c in it.checks)


def resolve_path(path: str) -> Path:
    """A local task file: absolute, else relative to the working directory, else to the repository
    (the example set ships in config/tasks/)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return REPO_ROOT / p if (REPO_ROOT / p).exists() else p


def download(hf: dict, cache_dir: str | None = None) -> Path:
    """A task file from the hub at its pinned revision (huggingface_hub's cache)."""
    return hub_file(hf, "benchmarks.tasks.source", repo_type="dataset", cache_dir=cache_dir, error=DataError)


def format_of(path: Path, fmt: str = "auto") -> str:
    if fmt != "auto":
        return fmt
    name = path.name.lower().removesuffix(".gz")
    for f, exts in (("jsonl", (".jsonl", ".json", ".ndjson")), ("csv", (".csv",)), ("parquet", (".parquet",))):
        if name.endswith(exts):
            return f
    raise DataError(f"{path}: the format is not known from the name (.jsonl, .csv, .parquet); "
                    "set benchmarks.tasks.format")


def records(path: Path, fmt: str):
    """(where, record) per item, in file order; blank JSONL lines are skipped. A file that is not UTF-8
    is refused at its first line that is not, naming the encoding it looks like (``not_utf8``)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path}:row {i}", rec
        return
    try:
        yield from _text_records(path, fmt)
    except UnicodeDecodeError:
        raise not_utf8(path) from None


def _text_records(path: Path, fmt: str):
    opener = gzip.open if path.suffix == ".gz" else open
    # utf-8-sig: a byte-order mark (as spreadsheets write one) is not part of the first field's name
    with opener(path, "rt", encoding="utf-8-sig", newline="" if fmt == "csv" else None) as f:
        if fmt == "jsonl":
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not a JSON object ({e.msg} at column {e.colno})") from None
                if "\\u" in line:
                    no_lone_surrogate(f"{path}:{n}", rec)
                yield f"{path}:{n}", rec
            return
        reader = csv.DictReader(f)
        start = 2
        for rec in reader:
            yield f"{path}:{start}", {k: v for k, v in rec.items() if k is not None and v not in (None, "")}
            start = reader.line_num + 1


def no_lone_surrogate(where: str, value, field: str = "") -> None:
    """JSON may write half of a UTF-16 surrogate pair as an escape (``"\\udc80"``); Python reads it as a
    string no UTF-8 can hold, which would stop the run where a prompt is tokenized. Refused here,
    naming the line and the field."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = value[e.start]
            raise DataError(f"{where}: field {field or 'value'!r}: the escape \\u{ord(bad):04x} is half of a UTF-16 "
                            "surrogate pair, not a character (the text was cut or mis-encoded where it was "
                            "written)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            no_lone_surrogate(where, k, field)
            no_lone_surrogate(where, v, f"{field}.{k}" if field else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            no_lone_surrogate(where, v, f"{field}[{i}]")


# Byte-order marks of the encodings a file may be saved in instead of UTF-8 (the UTF-32 ones first:
# UTF-32-LE's mark begins with UTF-16-LE's).
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32-LE"), (b"\x00\x00\xfe\xff", "UTF-32-BE"), (b"\xff\xfe", "UTF-16-LE"),
         (b"\xfe\xff", "UTF-16-BE"))


def not_utf8(path: Path) -> DataError:
    """The error for a task or traffic file that is not UTF-8: its first such line and column, the bytes
    there, the encoding the file looks like, and how to convert it. (There is no `encoding:` key: a
    file converted once reads the same everywhere, and its digest is the file's.)"""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    found = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        data.decode("utf-8")
        return DataError(f"{path}: not UTF-8 text")  # not reached: the reader failed on it
    except UnicodeDecodeError as e:
        pos = e.start
    line = data.count(b"\n", 0, pos) + 1
    column = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    if found is None:
        try:
            data.decode("cp1252")
            found, name = "Windows-1252 / Latin-1 (what Excel and many Windows tools save)", "cp1252"
        except UnicodeDecodeError:  # cp1252 leaves five bytes undefined; Latin-1 defines every byte
            found, name = "Latin-1 (ISO-8859-1) or another 8-bit encoding", "latin1"
    else:
        name = found.lower()
    snippet = data[max(0, pos - 20):pos + 10]
    out = f"{path.stem}.utf8{path.suffix}"
    how = (f"zcat {path.name} | iconv -f {name} -t utf-8 | gzip > {path.name[:-3]}.utf8.gz" if path.suffix == ".gz"
           else f"iconv -f {name} -t utf-8 {path.name} > {out}")
    return DataError(f"{path}:{line}: not UTF-8: byte 0x{data[pos]:02x} at byte {column} of the line ({snippet!r}); the file "
                     f"looks like {found}. Task and traffic files are read as UTF-8: convert it once, e.g. `{how}` "
                     '(or save it as "UTF-8" / "CSV UTF-8" from the program that wrote it)')


def _cell(where: str, key: str, value):
    """A CSV cell or Parquet string that holds JSON (options, stop, checks)."""
    if key in _JSON_CELLS and isinstance(value, str):
        try:
            out = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: field {key!r}: not JSON ({e.msg})") from None
        if "\\u" in value:
            no_lone_surrogate(where, out, key)
        return out
    return value


def missing(v) -> bool:
    """An absent field: null, or the NaN that pandas writes for an empty cell of a number column."""
    return v is None or (isinstance(v, float) and v != v)


def _positive_int(v) -> int | None:
    """A count as a file may write it, or None when it is none: an integer, a float with no fraction
    (a Parquet number column with an empty cell holds 8.0), or the digits of a CSV cell. Not 3.7 (int()
    would cut it to 3) and not true (Python's bool is an int: int(True) is 1)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    elif isinstance(v, str):
        v = int(v.strip()) if v.strip().isascii() and v.strip().isdigit() else None
    elif not isinstance(v, int):
        v = None
    return v if v is not None and v >= 1 else None


def parse_item(where: str, rec, base_dir: Path) -> TaskItem:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: an item is a JSON object, got {type(rec).__name__}")
    rec = {k: _cell(where, k, v) for k, v in rec.items() if not missing(v)}
    unknown = sorted(set(rec) - set(FIELDS))
    if unknown:
        raise DataError(f"{where}: unknown field(s) {unknown} (an item has {', '.join(FIELDS)})")
    for key in ("id", "prompt", "checks"):
        if key not in rec or rec[key] in ("", [], {}):
            raise DataError(f"{where}: field {key!r} is missing" + (" (at least one check)" if key == "checks" else ""))
    if not isinstance(rec["id"], (str, int)) or isinstance(rec["id"], bool):
        raise DataError(f"{where}: field 'id': a string or an integer, got {rec['id']!r}")
    prompt = rec["prompt"]
    if isinstance(prompt, list):
        for i, m in enumerate(prompt):
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise DataError(f"{where}: field 'prompt[{i}]': a chat message is {{role: {'|'.join(ROLES)}, "
                                f"content: text}}, got {m!r}")
        if prompt[-1]["role"] != "user":
            raise DataError(f"{where}: field 'prompt': the last message must be the user's")
    elif not isinstance(prompt, str):
        raise DataError(f"{where}: field 'prompt': plain text or a list of chat messages, got {type(prompt).__name__}")
    system = rec.get("system")
    if system is not None and not isinstance(system, str):
        raise DataError(f"{where}: field 'system': text, got {system!r}")
    options = rec.get("options")
    if options is not None and not (isinstance(options, list) and 2 <= len(options) <= 26
                                    and all(isinstance(o, str) and o.strip() for o in options)):
        raise DataError(f"{where}: field 'options': a list of 2 to 26 texts, got {options!r}")
    max_tokens = rec.get("max_tokens")
    if max_tokens is not None:
        max_tokens = _positive_int(max_tokens)
        if max_tokens is None:
            raise DataError(f"{where}: field 'max_tokens': a positive integer, got {rec['max_tokens']!r}")
    stop = rec.get("stop", [])
    if isinstance(stop, str):
        stop = [stop]
    if not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise DataError(f"{where}: field 'stop': a text or a list of texts, got {stop!r}")
    raw_checks = rec["checks"]
    if isinstance(raw_checks, dict):
        raw_checks = [raw_checks]
    if not isinstance(raw_checks, list):
        raise DataError(f"{where}: field 'checks': a list of checks, got {type(raw_checks).__name__}")
    item_fields = {"options": options}
    parsed = tuple(C.parse(f"{where}: field 'checks[{i}]'", c, item_fields, base_dir)
                   for i, c in enumerate(raw_checks))
    subset = rec.get("subset")
    return TaskItem(id=str(rec["id"]), where=where, prompt=prompt, checks=parsed, record=rec, system=system,
                    options=tuple(options) if options else None, max_tokens=max_tokens, stop=tuple(stop),
                    subset=str(subset) if subset not in (None, "") else None)


def unique_records(path: Path, fmt: str, parse, empty: str) -> list:
    """Every record of the file as ``parse(where, record)`` makes it (a thing with an ``id``), in file
    order: a duplicate id is a DataError naming both lines, an empty file one saying ``empty``."""
    out, seen = [], {}
    for where, rec in records(path, fmt):
        x = parse(where, rec)
        if x.id in seen:
            raise DataError(f"{where}: field 'id': {x.id!r} is a duplicate (first at {seen[x.id]})")
        seen[x.id] = where
        out.append(x)
    if not out:
        raise DataError(f"{path}: {empty}")
    return out


def read(path: str | Path, fmt: str = "auto", limit: int | None = None) -> TaskFile:
    """The task file, every item checked; the first mistake raises a DataError naming file:line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such task file (benchmarks.tasks.source)")
    items: list[TaskItem] = unique_records(path, format_of(path, fmt), lambda where, rec: parse_item(where, rec, path.parent),
                                           "the task file has no items")
    if limit:
        items = items[:limit]
    return TaskFile(path=path, items=tuple(items),
                    prompts_sha256=hash_obj([it.prompt_half() for it in items]),
                    checks_sha256=hash_obj([[it.id, [c.digest for c in it.checks]] for it in items]))


def source_record(path: Path, fmt: str, hf: dict | None, prompts_sha256: str | None = None) -> dict:
    """What the source rule pins: where the file is, and its identity. A hub file is fixed by its
    revision: its bytes' sha256. A local file is re-read by the score rule for its checks (their
    digest is in the scoring key), so what this record pins is the digest of its prompt half. The path
    is kept relative to the working directory where it can be (``base.record_path``): a copied
    checkout reads its own file."""
    from ..base import record_path  # (base imports the engine: not at this module's import)

    return {"name": "tasks", "path": record_path(path), "format": format_of(path, fmt), "hf": hf,
            "version": (hf or {}).get("revision") or path.name,
            "sha256": prompts_sha256 or sha256_file(path)}
