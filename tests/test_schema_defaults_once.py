"""Defaults written once (issue 45): the schemas are the one home of every default, code reads them.

config/config.schema.yaml and config/schemas/*.schema.yaml give each knob its default; validation fills
it in, so code that reads a validated section reads ``cfg[...][key]``. A second copy in Python (a
``.get("n_ctx", 4096)``, a ``.get("gpu_layers") or 0``, a module constant ``DEFAULT_INTERVAL_S = 0.05``)
is a value nobody checks against the schema: it drifts (tool_gates fell back to 3 repetitions where the
schema said 5) or, worse, is right today and silently wrong after the schema changes.

This test reads every module of the package, every script and every rule file (through Snakemake's own
parser) and names, by file:line and key, each place that keeps such a copy:

- ``X.get("<key>", <literal>)``, ``X.setdefault(...)``, ``X.pop(...)`` and ``X.get("<key>") or <literal>``
  where the schemas give ``<key>`` a default. An empty fallback (``{}``, ``[]``, ``()``) restates
  nothing where a schema's default of the key is empty (or null) too: a missing section is an empty
  one (``cfg.get("benchmarks") or {}``); where none is, it is a second value (``.get("kv_types") or []``
  beside the schema's ``[f16]``). ``None`` is what ``.get`` returns anyway.
- the same with an UPPER_CASE name as the fallback: a constant standing in for the default.
- a module constant named after a key (``<KEY>``, ``DEFAULT_<KEY>``, ``..._<KEY>``) whose value equals a
  default of that key.

Keys are matched by name across every schema (a key is not traced to the dict it is read from), so a
few reads of records that merely share a name with a config key (a manifest's ``card``, a walk's
``levels``) are listed below with the reason; each entry is the file, the key and the fallback, so a new
site in the same file is still flagged.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from quantladder import REPO_ROOT, schemas

PACKAGE = REPO_ROOT / "workflow" / "quantladder"
SCRIPTS = REPO_ROOT / "scripts"
RULES = [*sorted((REPO_ROOT / "rules").glob("*.smk")), REPO_ROOT / "Snakefile"]
SCHEMA_FILES = [schemas.SCHEMA_PATH, *sorted(schemas.SCHEMA_DIR.glob("*.schema.yaml")), schemas.EXAM_FRAGMENT_PATH]
_EMPTY = ({}, [], ())

# Reads of dicts that are no config section, though a key's name is a schema key's: (file, key, fallback).
NOT_CONFIG = {
    ("workflow/quantladder/aggregate.py", "card", "{}"): "a manifest's card record (fingerprint, identity)",
    ("workflow/quantladder/dataset.py", "card", "{}"): "a manifest's card record",
    ("workflow/quantladder/dataset.py", "chat_template", "{}"): "a manifest's provenance.chat_template record",
    ("workflow/quantladder/find.py", "levels", "{}"): "a walk's state: its levels record",
    ("workflow/quantladder/report/find.py", "levels", "{}"): "a walk's answer: its levels record",
    ("workflow/quantladder/report/first.py", "levels", "{}"): "a walk's answer: its levels record",
    ("workflow/quantladder/find.py", "source", "'made here'"): "a candidate record's source (made here / uploader)",
    ("workflow/quantladder/recommend.py", "source", "'made here'"): "a candidate record's source (made here / uploader)",
    ("workflow/quantladder/find.py", "quantize", "0.0"): "a rung's seconds per rule (timings), the rule quantize",
    ("workflow/quantladder/generation.py", "n_ctx", "0"): "a generations record's n_ctx (0: not recorded)",
    ("workflow/quantladder/benchmarks/tasks/checks.py", "file", "'check.py'"): "a task file's check: its file name",
    ("workflow/quantladder/progress.py", "imatrix", "{}"): "a rung plan's imatrix record (ladder.plan)",
    ("workflow/quantladder/config.py", "kv_types", "[]"): "a benchmark's own kv_types (benchmarks.ruler.kv_types): "
        "types added beside the family's, with no default (unset: none added), not the top-level kv_types",
    ("workflow/quantladder/corpora.py", "part", "'all'"): "a debian_reference corpus's part, to which the schema gives "
        "no default (one there would change every such corpus's key); traffic's part is required",
    ("workflow/quantladder/textsources.py", "format", "'text'"): "a corpus source's format: corpus_source gives none "
        "(one there would change every corpus's key); a text source's own default is the same text",
    ("workflow/quantladder/textsources.py", "file", "'*.txt'"): "a corpus source's file glob in its package: "
        "corpus_source gives none; the '*.gguf' is a model source's",
    ("workflow/quantladder/dataset_view.py", "n_parallel", "1"): "a speed row's n_parallel: a row without one is "
        "llama-bench's single sequence",
    ("workflow/quantladder/plan.py", "n_parallel", "1"): "a generation cost record's n_parallel (none recorded: one)",
    ("workflow/quantladder/recommend.py", "n_parallel", "1"): "a candidate's speed record (dataset_view.speed_at)",
    ("workflow/quantladder/report/first.py", "kv", "'f16'"): "a find answer's kv (the walk's KV type)",
    ("workflow/quantladder/benchmarks/tasks/__init__.py", "chat", "True"): "an item's data record: chat as its items "
        "were built (Tasks.build_items fills it from the family)",
    ("rules/recommend.smk", "tolerance", "{}"): "recommend.tolerance, which has no default (unset: the documented "
        "per-metric ones); the 5.0 is an anchors entry's tolerance",
}
# Module constants named like a key with its value, that are another quantity: (file, constant).
OTHER_QUANTITY = {
    ("workflow/quantladder/stats/noninferiority.py", "ALPHA"): "the two-sided level of the dataset's intervals",
    ("workflow/quantladder/deltas.py", "ALPHA"): "the level of the deltas' paired intervals",
    ("workflow/quantladder/thinking.py", "ALPHA"): "the level of the thinking figures' intervals",
    ("workflow/quantladder/thinking.py", "BOOTSTRAP_SEED"): "the thinking figures' bootstrap seed, no exam's item order",
}


# ----------------------------------------------------------------------------------------------- the checker

def _defaults_in(node, where: str, out: dict) -> None:
    if isinstance(node, dict):
        props = node.get("properties")
        for key, sub in (props.items() if isinstance(props, dict) else ()):
            if isinstance(sub, dict) and "default" in sub:
                out.setdefault(key, []).append((sub["default"], f"{where}{key}"))
        for k, v in node.items():
            if k in ("properties", "definitions", "$defs") and isinstance(v, dict):
                for key, sub in v.items():
                    _defaults_in(sub, f"{where}{'' if k == 'properties' else k + '.'}{key}.", out)
            else:
                _defaults_in(v, where, out)
    elif isinstance(node, list):
        for v in node:
            _defaults_in(v, where, out)


@lru_cache(maxsize=None)
def schema_defaults() -> dict[str, tuple]:
    """Every property name the schemas give a default, with its defaults and where each is written."""
    out: dict = {}
    for path in SCHEMA_FILES:
        _defaults_in(yaml.safe_load(path.read_text()), f"{path.name}: ", out)
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    key: str
    fallback: str  # the fallback as written (repr of a literal, or the constant's name)
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: key {self.key!r}: {self.what}"


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def _fallback(key: str, node: ast.expr, defaults: dict) -> str | None:
    """How ``node`` restates ``key``'s default, as written; None where it restates nothing."""
    if isinstance(node, ast.Name) and node.id.isupper():
        return node.id
    if isinstance(node, ast.Attribute) and node.attr.isupper():
        return ast.unparse(node)
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None  # computed: another value, not a copy of one
    if value is None:
        return None
    if any(_same(value, e) for e in _EMPTY) and any(d is None or any(_same(d, e) for e in _EMPTY)
                                                     for d, _ in defaults[key]):
        return None
    return repr(value)


def _keyed_call(node, defaults: dict, methods=("get", "setdefault", "pop")) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in defaults):
        return node.args[0].value
    return None


def _where(defaults: dict, key: str) -> str:
    return "; ".join(f"{w} = {d!r}" for d, w in defaults[key][:3]) + (" ..." if len(defaults[key]) > 3 else "")


def restated_defaults(source: str, file: str, defaults: dict | None = None,
                      linemap: dict[int, int] | None = None) -> list[Finding]:
    """The places in ``source`` (Python) that keep their own copy of a schema default."""
    defaults = schema_defaults() if defaults is None else defaults
    tree = ast.parse(source)
    line = (lambda n: linemap.get(n.lineno, n.lineno)) if linemap else (lambda n: n.lineno)
    found = []
    for node in ast.walk(tree):
        key = _keyed_call(node, defaults)
        if key is not None and len(node.args) > 1:
            fb = _fallback(key, node.args[1], defaults)
            if fb is not None:
                found.append(Finding(file, line(node), key, fb,
                                     f".{node.func.attr}({key!r}, {fb}) keeps a second default (schema: "
                                     f"{_where(defaults, key)}); read the validated value instead"))
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            first = node.values[0]
            key = _keyed_call(first, defaults, ("get",))
            if key is not None and len(first.args) == 1:
                fb = _fallback(key, node.values[-1], defaults)
                if fb is not None:
                    found.append(Finding(file, line(node), key, fb,
                                         f".get({key!r}) or {fb} keeps a second default (schema: "
                                         f"{_where(defaults, key)}); read the validated value instead"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        for t in targets:
            if not (isinstance(t, ast.Name) and t.id.isupper()):
                continue
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            name = t.id.lower()
            for key, ds in defaults.items():
                named = name == key or name.endswith("_" + key) or name.startswith(key + "_")
                if named and any(_same(value, d) for d, _ in ds):
                    found.append(Finding(file, line(node), key, t.id,
                                         f"module constant {t.id} = {value!r} restates the schema's default "
                                         f"({_where(defaults, key)}); read it from the schema"))
    return found


class _Source:  # what Snakemake's parser reads: a path and a way to open it
    def __init__(self, path: Path):
        self.path = path

    def get_path_or_uri(self, secret_free=True):
        return str(self.path)


class _Workflow:
    class sourcecache:  # noqa: N801
        @staticmethod
        def open(source):
            return open(source.path)

    modifier = None

    def __getattr__(self, name):
        return None


def snakemake_python(path: Path) -> tuple[str, dict[int, int]]:
    """A rule file as the Python Snakemake compiles it into, and its line map back to the file's lines."""
    from snakemake import parser

    linemap: dict[int, int] = {}
    code, _ = parser.parse(_Source(path), _Workflow(), linemap)
    return code, linemap


def findings() -> list[Finding]:
    out = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *sorted(SCRIPTS.glob("*.py"))]:
        out += restated_defaults(path.read_text(), str(path.relative_to(REPO_ROOT)))
    for path in RULES:
        code, linemap = snakemake_python(path)
        out += restated_defaults(code, str(path.relative_to(REPO_ROOT)), linemap=linemap)
    return [f for f in out if (f.file, f.key, f.fallback) not in NOT_CONFIG
            and (f.file, f.fallback) not in OTHER_QUANTITY]


# ----------------------------------------------------------------------------------------------- the tests

PLANTED = '''\
REPETITIONS = 3
DEFAULT_INTERVAL_S = 0.05
MAX_ITEMS = 0.05


def gate(section, cfg):
    reps = section.get("repetitions", 3)
    layers = int(cfg.get("gpu_layers") or 0)
    ref = cfg["families"]["f"].get("reference", "F16")
    n = section.get("n_ctx", REPETITIONS)
    return reps, layers, ref, n, section.get("rungs", []), cfg.get("kv_types") or [], section.get("x", 9), \\
        section.get("enabled"), section.get("n_ctx", None), cfg.get("quantize") or {}, section["repetitions"]
'''


def test_the_checker_names_file_line_and_key_of_each_restated_default():
    """Run on a planted module: each second copy is named, the reads that restate nothing are not."""
    got = {(f.line, f.key, f.fallback) for f in restated_defaults(PLANTED, "planted.py")}
    assert got == {
        (2, "interval_s", "DEFAULT_INTERVAL_S"),  # a constant equal to measures.energy.interval_s's 0.05
        (7, "repetitions", "3"),                  # another value than the schema's 5: drift
        (8, "gpu_layers", "0"),                   # the `or` form
        (9, "reference", "'F16'"),
        (10, "n_ctx", "REPETITIONS"),             # a named constant as the fallback
        (11, "kv_types", "[]"),                   # empty, where the schema's default [f16] is not
    }
    text = [str(f) for f in restated_defaults(PLANTED, "planted.py")]
    assert any(t.startswith("planted.py:7: key 'repetitions'") and "speed.repetitions = 5" in t for t in text), text


def test_a_rule_file_is_read_through_snakemakes_parser_with_its_own_line_numbers(tmp_path):
    smk = tmp_path / "planted.smk"
    smk.write_text('rule x:\n    output:\n        "x"\n    params:\n'
                   '        layers=config.get("gpu_layers", 0),\n    shell:\n        "touch {output}"\n')
    code, linemap = snakemake_python(smk)
    assert [(f.line, f.key) for f in restated_defaults(code, "planted.smk", linemap=linemap)] == [(5, "gpu_layers")]


def test_the_schemas_defaults_are_collected_with_where_they_are_written():
    d = schema_defaults()
    assert (5, "config.schema.yaml: measures.speed.repetitions") in d["repetitions"]
    assert (0, "config.schema.yaml: gpu_layers") in d["gpu_layers"]
    assert ("F16", "config.schema.yaml: families.reference") in d["reference"]  # under additionalProperties
    assert ("Q4_K_M", "config.schema.yaml: definitions.find.start") in d["start"]


def test_every_allowance_is_still_needed():
    """An entry of NOT_CONFIG / OTHER_QUANTITY whose site is gone would excuse the next one unseen."""
    raw = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *sorted(SCRIPTS.glob("*.py"))]:
        raw += restated_defaults(path.read_text(), str(path.relative_to(REPO_ROOT)))
    for path in RULES:
        code, linemap = snakemake_python(path)
        raw += restated_defaults(code, str(path.relative_to(REPO_ROOT)), linemap=linemap)
    seen = {(f.file, f.key, f.fallback) for f in raw} | {(f.file, f.fallback) for f in raw}
    assert [k for k in [*NOT_CONFIG, *OTHER_QUANTITY] if k not in seen] == []


def test_no_code_keeps_its_own_copy_of_a_schema_default():
    left = findings()
    assert not left, (f"{len(left)} second copies of schema defaults (the schema is the one home: read the "
                      "validated section, or fill a partial one with quantladder.schemas.filled):\n"
                      + "\n".join(map(str, left)))


# ----------------------------------------------------------------------------------------------- find:

def _with_find(find) -> dict:
    import copy

    from quantladder import config

    cfg = copy.deepcopy(config.load(config.DEFAULT_CONFIG, validate=False))
    cfg["find"] = find
    return cfg


def test_find_is_a_schema_object_whose_defaults_validation_fills():
    from quantladder import config
    from quantladder import find as qfind
    from quantladder.stats import noninferiority as ni

    base = {"family": "smollm2-135m-instruct", "mem": "8GiB", "ctx": "16k", "accept": "kld:manual-es<=0.1"}
    filled = config.validate_config(_with_find(dict(base)))["find"]
    assert filled == {**base, "reference": "Q8_0", "start": "Q4_K_M", "alpha": 0.025, "strategy": "auto",
                      "kv": None, "rungs": None, "min_tps": None, "parallel": 1}
    assert filled == qfind.request(dict(base))  # a section nobody validated gets the same
    assert filled["alpha"] == ni.ALPHA / 2  # the one-sided half of the project's 95 % intervals
    assert config.validate_config(_with_find(None))["find"] is None  # null: no walk, and nothing filled into it


@pytest.mark.parametrize("find, message", [
    ({"strat": "step"}, "key find: Additional properties are not allowed ('strat' was unexpected)"),
    ({"alpha": 0.7}, "key find.alpha: 0.7 is greater than or equal to the maximum of 0.5"),
    ({"strategy": "binary"}, "key find.strategy: 'binary' is not one of ['auto', 'step', 'bisect']"),
    ({"parallel": 1.0}, "key find.parallel: 1.0 is not of type 'integer'"),
    ({"start": None}, "key find.start: None is not of type 'string'"),
])
def test_a_bad_find_key_or_value_is_refused_naming_the_key(find, message):
    from quantladder import config
    from quantladder import find as qfind
    from quantladder.errors import ConfigError

    base = {"family": "smollm2-135m-instruct", "mem": "8GiB", "ctx": "16k", "accept": "kld:manual-es<=0.1"}
    with pytest.raises(ConfigError) as e:
        config.validate_config(_with_find({**base, **find}), source="my.yaml")
    assert f"my.yaml: {message}" in str(e.value)
    with pytest.raises(ConfigError) as e:  # the same request checked where a walk reads it
        qfind.request({**base, **find})
    assert message.removeprefix("key ").split(":")[0] in str(e.value)
