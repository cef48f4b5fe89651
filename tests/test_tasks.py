"""Your tasks (quantladder.benchmarks.tasks): each check kind's semantics, the three file formats and
the hub, bad input named by file:line and field before anything runs, the keys a check edit and a
prompt edit move, and a user's Python check contained like model-written code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from quantladder import schemas
from quantladder import benchmarks, config, manifest
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.base import Env
from quantladder.benchmarks.tasks import checks as C
from quantladder.benchmarks.tasks import prompt_text, taskfile
from quantladder.errors import DataError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config" / "tasks" / "example.jsonl"


def check(spec, item=None):
    return C.parse("t.jsonl:1: field 'checks[0]'", spec, item or {}, REPO)


def passes(spec, reply, options=None):
    c = check(spec, {"options": options})
    return C.run(c, reply, tuple(options) if options else None)[0]


# -- the check kinds -----------------------------------------------------------------------------

def test_exact_with_each_normalisation():
    assert passes({"kind": "exact", "value": "Paris"}, "  Paris\n")  # surrounding whitespace: always stripped
    assert not passes({"kind": "exact", "value": "Paris"}, "paris")
    assert passes({"kind": "exact", "value": "Paris", "normalize": ["case"]}, "PARIS")
    assert not passes({"kind": "exact", "value": "New York"}, "New   York")
    assert passes({"kind": "exact", "value": "New York", "normalize": ["whitespace"]}, "New \n York")
    assert passes({"kind": "exact", "value": "Paris", "normalize": ["punctuation"]}, "Paris.")
    assert not passes({"kind": "exact", "value": "Paris"}, "Paris.")
    assert passes({"kind": "exact", "value": "x2", "normalize": ["nfkc"]}, "ｘ²")  # fullwidth x, superscript 2
    assert not passes({"kind": "exact", "value": "x2"}, "ｘ²")


def test_contains_and_not_contains():
    assert passes({"kind": "contains", "value": "python"}, "I like python a lot")
    assert not passes({"kind": "contains", "value": "python"}, "I like Python")
    assert passes({"kind": "contains", "value": "python", "normalize": ["case"]}, "I like Python")
    assert passes({"kind": "not_contains", "value": "blue"}, "The sea is green.")
    assert not passes({"kind": "not_contains", "value": "blue", "normalize": ["case"]}, "BLUE waves")


def test_regex_search_fullmatch_and_flags():
    assert passes({"kind": "regex", "pattern": r"\d{4}-\d{2}-\d{2}"}, "It is 2024-01-02 today")
    assert not passes({"kind": "regex", "pattern": r"\d{4}-\d{2}-\d{2}", "mode": "fullmatch"}, "It is 2024-01-02")
    assert passes({"kind": "regex", "pattern": r"\d{4}-\d{2}-\d{2}", "mode": "fullmatch"}, " 2024-01-02\n")
    assert not passes({"kind": "regex", "pattern": "yes"}, "YES")
    assert passes({"kind": "regex", "pattern": "yes", "flags": "i"}, "YES")


def test_numeric_last_number_group_and_tolerances():
    assert passes({"kind": "numeric", "value": 48}, "4 boxes of 12 make 48.")  # the last number
    assert not passes({"kind": "numeric", "value": 48}, "48 pencils in 4 boxes")
    assert passes({"kind": "numeric", "value": 1234.5}, "It costs $1,234.50")
    assert passes({"kind": "numeric", "value": -3}, "x = -3")
    assert not passes({"kind": "numeric", "value": 1}, "no numbers here")
    spec = {"kind": "numeric", "value": 56, "pattern": r"Answer:\s*([-\d.,]+)"}
    assert passes(spec, "7 x 8 = 56, check 60.\nAnswer: 56")
    assert not passes(spec, "56")  # the pattern is not there
    assert passes({"kind": "numeric", "value": 56, "pattern": r"(?P<v>\d+) apples", "group": "v"}, "56 apples, 3 pears")
    assert not passes({"kind": "numeric", "value": 3.14}, "3.1416")
    assert passes({"kind": "numeric", "value": 3.14, "abs_tol": 0.01}, "3.1416")
    assert passes({"kind": "numeric", "value": 1000, "rel_tol": 0.01}, "1009")
    assert not passes({"kind": "numeric", "value": 1000, "rel_tol": 0.01}, "1011")


def test_choice_by_letter_text_or_answer_phrase():
    opts = ["csv", "json", "pickle"]
    assert passes({"kind": "choice", "answer": "B"}, "B", opts)
    assert passes({"kind": "choice", "answer": "B"}, "(B) json", opts)
    assert passes({"kind": "choice", "answer": "b"}, "B. json", opts)
    assert passes({"kind": "choice", "answer": "json"}, "The answer is B.", opts)  # answer given as the text
    assert passes({"kind": "choice", "answer": "B"}, "You want the json module.", opts)
    assert not passes({"kind": "choice", "answer": "B"}, "A", opts)
    assert not passes({"kind": "choice", "answer": "B"}, "json or pickle", opts)  # two options: no choice
    assert not passes({"kind": "choice", "answer": "A"}, "A lot of people use pickle", opts)  # an article
    assert not passes({"kind": "choice", "answer": "B"}, "D", opts)  # no such option


def test_json_whole_fenced_or_braced_fields_and_schema():
    schema = {"type": "object", "required": ["name", "age"], "properties": {"age": {"type": "integer"}}}
    spec = {"kind": "json", "fields": {"name": "Ada", "address.city": "London"}, "schema": schema}
    good = {"name": "Ada", "age": 36, "address": {"city": "London"}}
    assert passes(spec, json.dumps(good))
    assert passes(spec, "Here:\n```json\n" + json.dumps(good) + "\n```\nDone.")
    assert passes(spec, "Sure! " + json.dumps(good) + " Hope this helps {")
    assert not passes(spec, json.dumps({**good, "name": "Bob"}))
    assert not passes(spec, json.dumps({**good, "age": "36"}))  # the schema
    assert not passes(spec, "no json at all")
    assert passes({"kind": "json"}, "[1, 2]") and not passes({"kind": "json"}, "{not: json}")
    assert passes({"kind": "json", "fields": {"items.1": 2}}, '{"items": [1, 2]}')


# -- bad input: file:line and field, before anything runs ----------------------------------------

def _write(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return p


OK = {"id": "a", "prompt": "Say hi", "checks": [{"kind": "contains", "value": "hi"}]}


@pytest.mark.parametrize("bad, where, what", [
    ({"prompt": "x", "checks": [{"kind": "exact", "value": "x"}]}, 2, "field 'id' is missing"),
    ({"id": "b", "checks": [{"kind": "exact", "value": "x"}]}, 2, "field 'prompt' is missing"),
    ({"id": "b", "prompt": "x"}, 2, "field 'checks' is missing"),
    ({**OK, "id": "a"}, 2, r"field 'id': 'a' is a duplicate \(first at .*t\.jsonl:1\)"),
    ({**OK, "id": "b", "checks": [{"kind": "numerik", "value": 1}]}, 2,
     r"field 'checks\[0\]': unknown check kind 'numerik' .*did you mean 'numeric'"),
    ({**OK, "id": "b", "checks": [{"kind": "regex", "pattern": "(unclosed"}]}, 2,
     r"field 'checks\[0\]': regex.pattern: not a valid regular expression"),
    ({**OK, "id": "b", "checks": [{"kind": "json", "schema": {"type": "no-such-type"}}]}, 2,
     r"field 'checks\[0\]': json.schema: not a valid JSON Schema"),
    ({**OK, "id": "b", "checks": [{"kind": "choice", "answer": "A"}]}, 2,
     r"field 'checks\[0\]': a choice check needs the item's `options`, and the item has none"),
    ({**OK, "id": "b", "options": ["x", "y"], "checks": [{"kind": "choice", "answer": "C"}]}, 2,
     r"choice.answer: a letter A-B or one of the options' texts"),
    ({**OK, "id": "b", "checks": [{"kind": "numeric"}]}, 2, r"field 'checks\[1\]'|a numeric check needs \['value'\]"),
    ({**OK, "id": "b", "checks": [{"kind": "python", "file": "nowhere.py"}]}, 2, r"python.file: .*nowhere.py does not exist"),
    ({**OK, "id": "b", "checks": [{"kind": "python", "code": "def check(reply, item) return 1"}]}, 2,
     "python: the check does not compile"),
    ({**OK, "id": "b", "prompt": [{"role": "user", "text": "hi"}]}, 2, r"field 'prompt\[0\]': a chat message"),
    ({**OK, "id": "b", "answer": "x"}, 2, r"unknown field\(s\) \['answer'\]"),
    ("{not json", 2, "not a JSON object"),
])
def test_a_bad_item_is_named_by_file_line_and_field(tmp_path, bad, where, what):
    p = _write(tmp_path, [OK, bad])
    with pytest.raises(DataError, match=rf"t\.jsonl:{where}: .*{what}" if not what.startswith("field 'checks[1]") else what):
        taskfile.read(p)


def test_an_empty_file_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"t\.jsonl: the task file has no items"):
        taskfile.read(_write(tmp_path, ["", "  "]))
    with pytest.raises(DataError, match="no such task file"):
        taskfile.read(tmp_path / "absent.jsonl")


def test_csv_and_parquet_name_their_line_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "t.csv"
    p.write_text('id,prompt,checks\na,"two\nlines","[{""kind"": ""contains"", ""value"": ""x""}]"\n'
                 'b,hello,"[{""kind"": ""bogus""}]"\n')
    with pytest.raises(DataError, match=r"t\.csv:4: field 'checks\[0\]': unknown check kind 'bogus'"):
        taskfile.read(p)
    pq.write_table(pa.Table.from_pylist([{**OK, "checks": json.dumps(OK["checks"])},
                                         {"id": "b", "prompt": None, "checks": json.dumps(OK["checks"])}]),
                   tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"t\.parquet:row 2: field 'prompt' is missing"):
        taskfile.read(tmp_path / "t.parquet")


def test_a_spreadsheet_bom_and_pandas_empty_cells_are_no_fields(tmp_path):
    import pandas as pd

    p = tmp_path / "t.csv"
    p.write_bytes("\ufeffid,prompt,checks\na,hi,\"{\"\"kind\"\": \"\"contains\"\", \"\"value\"\": \"\"h\"\"}\"\n".encode())
    assert [it.id for it in taskfile.read(p).items] == ["a"]
    pd.DataFrame([{**OK, "checks": json.dumps(OK["checks"]), "max_tokens": 8},
                  {**OK, "id": "b", "checks": json.dumps(OK["checks"]), "max_tokens": None}]).to_parquet(tmp_path / "t.parquet")
    assert [it.max_tokens for it in taskfile.read(tmp_path / "t.parquet").items] == [8, None]


# -- a user's real files: encodings and counts (issue 41, case 7) -----------------------------------

LATIN1_LINES = [json.dumps(OK, ensure_ascii=False),
                json.dumps({"id": "b", "prompt": "¿Cuántas millas recorrió José?",
                            "checks": [{"kind": "numeric", "value": 6.2}]}, ensure_ascii=False)]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "jsonl.gz"])
def test_a_latin1_file_is_named_with_its_line_and_encoding(tmp_path, fmt):
    """A task file saved as Windows-1252 / Latin-1 (as Excel saves CSV) used to stop the run with a bare
    UnicodeDecodeError naming neither the file nor the line."""
    import gzip

    if fmt == "csv":
        text = 'id,prompt,checks\na,Say hi,"[{""kind"": ""contains"", ""value"": ""hi""}]"\n' \
               'b,¿Cuántas millas?,"[{""kind"": ""numeric"", ""value"": 6.2}]"\n'
        line = 3
    else:
        text = "\n".join(LATIN1_LINES) + "\n"
        line = 2
    p = tmp_path / f"t.{fmt}"
    raw = text.encode("latin-1")
    p.write_bytes(gzip.compress(raw) if fmt.endswith(".gz") else raw)
    with pytest.raises(DataError, match=rf"t\.{re.escape(fmt)}:{line}: not UTF-8: byte 0xbf at byte \d+ of the line "
                                        r".*looks like Windows-1252 / Latin-1.*iconv -f cp1252 -t utf-8"):
        taskfile.read(p)
    # the same file as UTF-8 reads
    p.write_bytes(gzip.compress(text.encode()) if fmt.endswith(".gz") else text.encode())
    assert [it.id for it in taskfile.read(p).items] == ["a", "b"]


def test_a_utf16_file_and_a_latin1_traffic_file_are_named(tmp_path):
    from quantladder.benchmarks.traffic import trafficfile

    p = tmp_path / "t.jsonl"
    p.write_bytes(("\n".join(LATIN1_LINES) + "\n").encode("utf-16"))
    with pytest.raises(DataError, match=r"t\.jsonl:1: not UTF-8: .*looks like UTF-16-LE.*iconv -f utf-16-le"):
        taskfile.read(p)
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_bytes(b'{"prompt": "hello"}\n{"prompt": "ol\xe1, qu\xe9 tal"}\n')
    with pytest.raises(DataError, match=r"traffic\.jsonl:2: not UTF-8: byte 0xe1 .*Windows-1252"):
        trafficfile.read(traffic)


def test_half_a_surrogate_pair_is_refused_by_line_and_field(tmp_path):
    """JSON may escape half a UTF-16 pair ("\\udc80"): Python reads a string no UTF-8 holds, which stopped
    the run where the prompt is tokenized; it is refused when the file is read."""
    from quantladder.benchmarks.traffic import trafficfile

    p = _write(tmp_path, [OK, '{"id": "b", "prompt": "caf\\udc80", "checks": {"kind": "contains", "value": "x"}}'])
    with pytest.raises(DataError, match=r"t\.jsonl:2: field 'prompt': the escape \\udc80 is half of a UTF-16 surrogate"):
        taskfile.read(p)
    ok = _write(tmp_path, [{**OK, "prompt": "caf\u00e9 \U0001F600"}], name="ok.jsonl")  # escaped, and a whole pair
    assert "\\ud83d\\ude00" in ok.read_text() and taskfile.read(ok).items[0].prompt == "caf\u00e9 \U0001F600"
    csv_file = tmp_path / "t.csv"  # a JSON cell (options, checks) of a CSV or Parquet file, likewise
    csv_file.write_text('id,prompt,options,checks\na,Say hi,"[""x\\udc80"", ""y""]","{""kind"": ""choice"", ""answer"": ""y""}"\n')
    with pytest.raises(DataError, match=r"t\.csv:2: field 'options\[0\]': the escape \\udc80"):
        taskfile.read(csv_file)
    t = tmp_path / "traffic.jsonl"
    t.write_text('{"messages": [{"role": "user", "content": "hi \\ud800"}]}\n')
    with pytest.raises(DataError, match=r"traffic\.jsonl:1: field 'messages\[0\]\.content': the escape \\ud800"):
        trafficfile.read(t)
    t = tmp_path / "traffic.csv"
    t.write_text('id,messages\nc1,"[{""role"": ""user"", ""content"": ""hi \\ud800""}]"\n')
    with pytest.raises(DataError, match=r"traffic\.csv:2: field 'messages\[0\]\.content': the escape \\ud800"):
        trafficfile.read(t)


def test_a_python_check_file_not_in_utf8_is_named(tmp_path):
    (tmp_path / "c.py").write_bytes("# comprobación\ndef check(reply, item):\n    return True\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"t\.jsonl:1: field 'checks\[0\]': python\.file: .*c\.py:1: not UTF-8 \(byte 0xf3\)"):
        taskfile.read(_write(tmp_path, [{**OK, "checks": [{"kind": "python", "file": "c.py"}]}]))


@pytest.mark.parametrize("value, fmt, want", [
    (16, "jsonl", 16), ("16", "csv", 16), (16.0, "parquet", 16),  # a Parquet number column holds 16.0
    (3.7, "jsonl", None), (True, "jsonl", None), (False, "jsonl", None), (0, "jsonl", None), (-2, "jsonl", None),
    ("3.7", "csv", None), ("true", "csv", None), ("many", "csv", None), (3.7, "parquet", None),
])
def test_max_tokens_is_a_positive_integer_not_a_truncated_number(tmp_path, value, fmt, want):
    """max_tokens 3.7 was read as 3 and true as 1 (Python's int() of each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rec = {**OK, "max_tokens": value}
    if fmt == "jsonl":
        p = _write(tmp_path, [rec])
    elif fmt == "csv":
        p = tmp_path / "t.csv"
        p.write_text('id,prompt,max_tokens,checks\na,Say hi,%s,"[{""kind"": ""contains"", ""value"": ""hi""}]"\n' % value)
    else:
        p = tmp_path / "t.parquet"
        pq.write_table(pa.Table.from_pylist([{**rec, "checks": json.dumps(OK["checks"])}]), p)
    if want is None:
        with pytest.raises(DataError, match=r"t\.(jsonl|csv|parquet):(1|2|row 1): field 'max_tokens': a positive "
                                            r"integer, got"):
            taskfile.read(p)
    else:
        assert taskfile.read(p).items[0].max_tokens == want


def test_the_three_formats_read_the_same_items(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    plain = [r for r in recs if isinstance(r["prompt"], str) and "checks" in r
             and all(c["kind"] != "python" for c in r["checks"])]
    columns = ["id", "subset", "prompt", "system", "options", "max_tokens", "checks"]
    cells = [{k: (json.dumps(r[k]) if k in ("checks", "options") and k in r else r.get(k)) for k in columns}
             for r in plain]
    import csv

    with open(tmp_path / "t.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(cells)
    pq.write_table(pa.Table.from_pylist(cells), tmp_path / "t.parquet")
    _write(tmp_path, plain)
    got = {fmt: taskfile.read(tmp_path / f"t.{fmt}") for fmt in ("jsonl", "csv", "parquet")}
    for tf in got.values():
        assert [it.id for it in tf.items] == [r["id"] for r in plain]
        assert [[c.spec for c in it.checks] for it in tf.items] == \
            [[c.spec for c in it.checks] for it in got["jsonl"].items]
        assert [(it.prompt, it.options, it.max_tokens, it.system) for it in tf.items] == \
            [(it.prompt, it.options, it.max_tokens, it.system) for it in got["jsonl"].items]
        assert tf.checks_sha256 == got["jsonl"].checks_sha256


def test_a_hub_task_file_at_a_pinned_revision(tmp_path, monkeypatch):
    """The hub path, offline, against a cache laid out as huggingface_hub lays it out."""
    import huggingface_hub.constants as hc

    hf = {"repo_id": "someone/my-tasks", "filename": "data/tasks.jsonl", "revision": "0" * 40}
    snap = tmp_path / "datasets--someone--my-tasks" / "snapshots" / hf["revision"] / "data"
    snap.mkdir(parents=True)
    (snap / "tasks.jsonl").write_text(EXAMPLE.read_text().splitlines()[0] + "\n")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    path = taskfile.download(hf, cache_dir=str(tmp_path))
    tf = taskfile.read(path)
    assert [it.id for it in tf.items] == ["arith-pencils"]
    rec = taskfile.source_record(path, "auto", hf)
    assert rec["version"] == hf["revision"] and len(rec["sha256"]) == 64 and rec["format"] == "jsonl"
    with pytest.raises(Exception, match="revision"):
        taskfile.download({"repo_id": "someone/my-tasks", "filename": "x.jsonl"})


# -- the example set, the registry and the keys ---------------------------------------------------

def test_the_example_uses_every_check_kind_and_validates():
    tf = taskfile.read(EXAMPLE)
    assert 12 <= len(tf.items) <= 20
    assert {c.kind for it in tf.items for c in it.checks} == set(C.KINDS)
    assert any(isinstance(it.prompt, list) for it in tf.items) and any(it.system for it in tf.items)
    schema = schemas.load(schemas.benchmark_schema_path("tasks"))
    import jsonschema

    jsonschema.validate({"enabled": True, "source": {"path": "config/tasks/example.jsonl"}}, schema)
    assert schema["properties"]["enabled"]["default"] is False


def _cfg(tmp_path, path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.setdefault("benchmarks", {})["tasks"] = {"enabled": True, "source": {"path": str(path)}}
    return config.validate_config(cfg)  # as a run reads it: the schemas' defaults filled in


def test_a_check_edit_moves_the_scoring_key_only_and_a_prompt_edit_the_items(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(EXAMPLE.read_text())
    pyfile = tmp_path / "example_checks.py"
    pyfile.write_text((EXAMPLE.parent / "example_checks.py").read_text())
    fam = next(iter(_cfg(tmp_path, p)["families"]))
    args = ("c", fam, "Q4_K_M", "f16", "tasks")

    def keys():
        cfg = _cfg(tmp_path, p)
        return (manifest.items_key(cfg, fam, "tasks"), manifest.spec_hash(cfg, *args),
                manifest.scoring_key(cfg, *args), manifest.source_key(cfg, "tasks"))

    k0 = keys()
    p.write_text(EXAMPLE.read_text().replace('"value": 48', '"value": 49'))
    k1 = keys()
    assert k1[:2] == k0[:2] and k1[3] == k0[3] and k1[2] != k0[2]  # a check: re-score only
    p.write_text(EXAMPLE.read_text())
    pyfile.write_text(pyfile.read_text() + "\n# edited\n")
    k2 = keys()
    assert k2[:2] == k0[:2] and k2[2] not in (k0[2], k1[2])  # a Python check's own file is part of the check
    p.write_text(EXAMPLE.read_text().replace("How many pencils", "How many pens"))
    k3 = keys()
    assert k3[0] != k0[0] and k3[1] == k0[1] and k3[2] != k0[2]  # a prompt: new items, same generation key


def test_items_and_prompts_chat_and_raw(tmp_path):
    b = benchmarks.create("tasks", {"enabled": True, "source": {"path": str(EXAMPLE)}})
    src = b.fetch_source(str(tmp_path))
    items, facts = b.build_items(src, family={"chat": True})
    assert facts["chat"] and all(not it.answer for it in items)  # checks never reach the generate rule
    mc = next(it for it in items if it.id == "choice-json-module")
    seen = []
    text = prompt_text(mc.data, lambda m: seen.append(m) or "<chat>")
    assert text == "<chat>" and seen[0][-1]["content"].endswith("A. csv\nB. json\nC. pickle\nD. sqlite3")
    sys_item = next(it for it in items if it.id == "exact-capital")
    prompt_text(sys_item.data, lambda m: seen.append(m) or "")
    assert seen[-1][0] == {"role": "system", "content": "Answer in one word."}
    assert prompt_text({**sys_item.data, "chat": False}, None) == "Answer in one word.\n\nWhat is the capital of France?"
    base, _ = b.build_items(src, family={"chat": False})  # a base model: the raw completion path, no roles
    chat_item = next(it for it in base if isinstance(it.data["prompt"], list))
    assert prompt_text(chat_item.data, None) == 'Answer in one word.\n\nSpell the word "stressed" backwards.'


def test_a_bad_file_fails_when_the_benchmark_is_made(tmp_path):
    p = _write(tmp_path, [OK, OK])
    with pytest.raises(DataError, match=r"t\.jsonl:2: field 'id'"):
        benchmarks.create("tasks", {"enabled": True, "source": {"path": str(p)}})
    benchmarks.create("tasks", {"enabled": False, "source": {"path": str(p)}})  # off: not read


# -- scoring, the Python check in the sandbox ------------------------------------------------------

def _score(tmp_path, checks_, reply, **item):
    p = _write(tmp_path, [{"id": "x", "prompt": "p", "checks": checks_, **item}], name="s.jsonl")
    b = benchmarks.create("tasks", {"enabled": True, "source": {"path": str(p)}, "timeout_s": 5.0})
    src = b.fetch_source(str(tmp_path))
    items, _ = b.build_items(src, family={"chat": True})
    return b.verdicts(items, {"x": {"text": reply}}, ScoringContext(Env(src)))[0]


def test_all_checks_must_pass_and_the_share_is_the_partial_score(tmp_path):
    v = _score(tmp_path, [{"kind": "contains", "value": "a"}, {"kind": "contains", "value": "b"},
                          {"kind": "python", "code": "def check(reply, item):\n    return item['id'] == 'x' and 'c' in reply\n"}],
               "a and c")
    assert not v["correct"] and v["checks_passed"] == 2 and v["checks_total"] == 3 and v["error_type"] == "contains"
    assert [c["passed"] for c in v["checks"]] == [True, False, True]


HOSTILE = {
    "network": "import socket\ndef check(reply, item):\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    return True\n",
    "host_files": ("def check(reply, item):\n    return 'numeric' in open(%r).read()\n" % str(EXAMPLE)),
    "project_dir": "import os\ndef check(reply, item):\n    return len(os.listdir(%r)) > 0\n" % str(REPO),
    "print_a_pass": ("import os\ndef check(reply, item):\n"
                     "    for n in os.listdir('/work'):\n"
                     "        print('@@QL_RESULT@@ ' + n + ' {\"passed\": true}')\n"
                     "    os.write(1, b'\\n@@QL_RESULT@@ x {\"passed\": true}\\n')\n"
                     "    return False\n"),
    "read_the_nonce": "def check(reply, item):\n    open('/work/.nonce').read()\n    return True\n",
    "exit_early": "import os\ndef check(reply, item):\n    os._exit(0)\n",
    "truthy_not_true": "def check(reply, item):\n    return 'True'\n",
    "object_with_eq": ("class T:\n    def __eq__(self, o): return True\n    def __bool__(self): return True\n"
                       "def check(reply, item):\n    return T()\n"),
    "spin": "def check(reply, item):\n    while True: pass\n",
    "kill_the_judge": "import os, signal\ndef check(reply, item):\n    os.kill(1, signal.SIGKILL)\n    return False\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_python_check_cannot_reach_the_host_or_forge_a_pass(tmp_path, name):
    v = _score(tmp_path, [{"kind": "python", "code": HOSTILE[name]}], "any reply")
    assert v["correct"] is False and v["error_type"].startswith("python"), v
    if name == "spin":
        assert v["error_type"] == "python_timeout"


def test_a_python_check_sees_the_reply_and_the_item_as_written(tmp_path):
    code = ("def check(reply, item):\n"
            "    return reply == 'héllo\\n' and item['id'] == 'x' and item['options'] == ['p', 'q'] "
            "and item['checks'][0]['kind'] == 'python'\n")
    assert _score(tmp_path, [{"kind": "python", "code": code}], "héllo\n", options=["p", "q"])["correct"]


def test_metric_rows_are_declared_and_paired(tmp_path):
    from quantladder import metrics

    b = benchmarks.create("tasks", {"enabled": True, "source": {"path": str(EXAMPLE)}})
    vs = [{"item_id": "a", "correct": True, "subset": "s", "checks_passed": 2, "checks_total": 2,
           "checks": [{"kind": "numeric", "passed": True}, {"kind": "regex", "passed": True}]},
          {"item_id": "b", "correct": False, "subset": None, "checks_passed": 1, "checks_total": 2,
           "checks": [{"kind": "numeric", "passed": False}, {"kind": "regex", "passed": True}]}]
    rows = {(r["metric"], r["subset"]): r for r in b.metric_rows(vs, [])}
    assert rows[("all_checks_pass", None)]["value"] == 50.0 and rows[("checks_passed", None)]["value"] == 75.0
    assert rows[("all_checks_pass", "s")]["n"] == 1 and rows[("check_pass", "numeric")]["value"] == 50.0
    assert metrics.get("all_checks_pass").paired == "items" and "tasks" in metrics.get("all_checks_pass").headline_for
    assert not re.search("score", " ".join(vs[0]))  # no `score` field: the paired delta is on `correct`


# -- the workflow: the default run's switch, and a bad file refused at `snakemake -n` ------------

def test_snakemake_dry_run_plans_the_example_and_refuses_a_bad_file(tmp_path):
    """The config lines docs/your-tasks.md gives for the default run plan the tasks jobs (the example
    path resolves from any working directory); a bad file stops the dry run, naming file:line and field."""
    from pipeline_util import planned_jobs, small_config, snakemake, write_config

    cfg = small_config()
    cfg["benchmarks"]["tasks"] = {"enabled": True, "source": {"path": "config/tasks/example.jsonl"}}
    r = snakemake(tmp_path, "-n", config=write_config(tmp_path, cfg))
    jobs = planned_jobs(r.stdout + r.stderr)
    assert ("benchmark_source", {"task": "tasks"}) in jobs
    assert any(rule == "score" and w.get("task") == "tasks" for rule, w in jobs)
    bad = _write(tmp_path, [OK, {**OK, "id": "b", "checks": [{"kind": "regex", "pattern": "(bad"}]}])
    cfg["benchmarks"]["tasks"]["source"] = {"path": str(bad)}
    r = snakemake(tmp_path, "-n", config=write_config(tmp_path, cfg), check=False)
    assert r.returncode != 0
    assert re.search(r"t\.jsonl:2: field 'checks\[0\]': regex\.pattern: not a valid regular expression",
                     r.stdout + r.stderr)
