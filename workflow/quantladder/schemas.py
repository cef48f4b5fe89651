"""The config schemas, and the one place a setting's default is written.

Every knob's default lives in its JSON Schema (``config/config.schema.yaml`` for the config,
``config/schemas/<benchmark>.schema.yaml`` for a benchmark section): validation fills it in, and
Python code that meets a section nobody validated takes the same values from here
(:func:`defaults`) instead of keeping its own copy. ``config/config.yaml`` says only what the default
run sets otherwise: :func:`strip_defaults` names any key of it that restates its schema default.

A declaration on the ground floor: it reads YAML files and jsonschema, nothing of the package.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from pathlib import Path

import yaml

from . import REPO_ROOT

SCHEMA_PATH = REPO_ROOT / "config" / "config.schema.yaml"
SCHEMA_DIR = REPO_ROOT / "config" / "schemas"
ANCHORS_SCHEMA_PATH = SCHEMA_DIR / "anchors.schema.yaml"  # the anchors file's (config key `anchors`)


def benchmark_schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}.schema.yaml"


EXAM_FRAGMENT_PATH = SCHEMA_DIR / "exam.fragment.yaml"  # the keys every exam's section may take, once


@lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    """A schema file as validation reads it: an exam's ``x-shared`` keys (n_parallel, early_stop,
    time_budget_s) copied in from config/schemas/exam.fragment.yaml, where they are written once."""
    doc = yaml.safe_load(Path(path).read_text())
    shared = doc.pop("x-shared", None) if isinstance(doc, dict) else None
    if shared:
        fragment = yaml.safe_load(EXAM_FRAGMENT_PATH.read_text())["properties"]
        props = doc.setdefault("properties", {})
        for key in shared:
            if key not in fragment:
                raise ValueError(f"{path}: x-shared names {key!r}, which {EXAM_FRAGMENT_PATH.name} does not define "
                                 f"({', '.join(fragment)})")
            if key in props:
                raise ValueError(f"{path}: {key!r} is both x-shared and its own property: write it once")
            props[key] = copy.deepcopy(fragment[key])
    return doc


def load(path: Path) -> dict:
    """A schema file, parsed once per process (a copy: callers may not change the cached one)."""
    return copy.deepcopy(_load(path))


def filling_validator(schema: dict):
    """A jsonschema validator of ``schema`` that sets every missing property that has a ``default``,
    then validates (the same defaults Snakemake's ``validate(..., set_default=True)`` fills)."""
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema)

    def set_defaults(validator, properties, inst, schema_):
        for prop, sub in properties.items():
            if isinstance(inst, dict) and "default" in sub:
                inst.setdefault(prop, copy.deepcopy(sub["default"]))
        yield from validator_cls.VALIDATORS["properties"](validator, properties, inst, schema_)

    # "integer" is a whole number written as one: JSON Schema lets 3.0 pass (JSON has one number type),
    # but YAML's 3.0 is a float, and a count given as one is a slip (3.7 and true are refused already:
    # jsonschema's integer excludes bool). Refused, so the key is named rather than read as 3.
    types = validator_cls.TYPE_CHECKER.redefine(
        "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool))
    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults}, type_checker=types)(schema)


def _fill(root: dict, node: dict, value):
    """A copy of ``value`` as validation fills it in where ``node`` (a schema inside ``root``) describes
    it; validation errors (a required key, a bad value) are left to whoever validates."""
    out = copy.deepcopy(value)
    # the sub-schema keeps the root's $defs / definitions so that a $ref resolves
    sub = {**{k: v for k, v in root.items() if k in ("$defs", "definitions", "$schema")}, **node}
    for _ in filling_validator(sub).iter_errors(out):
        pass
    return out


def filled(path: Path, section: dict | None, *keys: str) -> dict:
    """A copy of ``section`` with the defaults of the object at ``keys`` inside the schema at ``path``
    filled in, nested ones too, as validation fills them; validation errors (a required key, a bad
    value) are left to whoever validates."""
    schema = load(path)
    node = schema
    for k in keys:
        node = node["properties"][k]
    return _fill(schema, node, section or {})


def family_settings(family: dict | None) -> dict:
    """A copy of a ``families.<f>`` entry with the config schema's defaults filled in (``chat``,
    ``enabled``, ``reference``, ...): for code that also meets a partial family (an anchors entry's
    ``{"chat": ...}``, a benchmark built outside a run, a test's ``{}``) instead of a default of its own;
    validation errors (a missing ``source``) are left to validation. Filled as a whole config's would be
    (the entry's $refs point into the config schema's root)."""
    return filled(SCHEMA_PATH, {"families": {"_": family or {}}})["families"]["_"]


def filled_def(path: Path, name: str, value: dict) -> dict:
    """A copy of ``value`` with the defaults of the schema's ``$defs/<name>`` (or ``definitions/<name>``)
    filled in, nested ones too (``filled_def(ANCHORS_SCHEMA_PATH, "entry", e)``: an anchors file's entry;
    ``filled_def(SCHEMA_PATH, "find", s)``: a ``find:`` request)."""
    root = load(path)
    return _fill(root, (root.get("$defs") or root["definitions"])[name], value)


def defaults(path: Path, *keys: str) -> dict:
    """What validation fills into an empty section: ``defaults(SCHEMA_PATH, "generation")`` is the
    ``generation:`` section's, ``defaults(benchmark_schema_path("bfcl"))`` a benchmark's."""
    return filled(path, {}, *keys)


def _resolve(root: dict, node: dict) -> dict:
    """``node`` with the schema its ``$ref`` points at (inside ``root``) under its own keys."""
    while "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _child(root: dict, node: dict, key: str) -> dict | None:
    """The schema of ``key`` inside the object ``node`` describes (None: one it says nothing of)."""
    if "then" in node and "properties" not in node:  # an object checked only where it is one (find:)
        node = _resolve(root, node["then"])
    if key in node.get("properties", {}):
        return _resolve(root, node["properties"][key])
    for pattern, sub in node.get("patternProperties", {}).items():
        if re.search(pattern, key):
            return _resolve(root, sub)
    extra = node.get("additionalProperties")
    return _resolve(root, extra) if isinstance(extra, dict) else None


def _same(a, b) -> bool:
    """Equal and of the same types throughout: 10 is not 10.0 (a spec hash tells them apart), nor true 1."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _strip(root: dict, node: dict, inst: dict, path: tuple, found: list, keep: frozenset = frozenset()) -> dict:
    out = {}
    for key, value in inst.items():
        where = (*path, key)
        if path == ("benchmarks",) and isinstance(value, dict) and benchmark_schema_path(key).exists():
            # a benchmark's section: its own schema, and the keys the config schema requires of every section
            sub = load(benchmark_schema_path(key))
            every = frozenset((_child(root, node, key) or {}).get("required", ()))
            out[key] = _strip(sub, sub, value, where, found, every)
            continue
        sub = _child(root, node, key)
        required = key in keep or key in node.get("required", ())
        if sub is None:
            out[key] = value
        elif "default" in sub and not required and _same(value, sub["default"]):
            found.append(".".join(where))
        elif isinstance(value, dict):
            inner = _strip(root, sub, value, where, found)
            # a section its stripping leaves at what its default fills in ({} most often): left out too
            if required or "default" not in sub or not _same(_fill(root, sub, inner), _fill(root, sub, sub["default"])):
                out[key] = inner
        else:
            out[key] = value
    return out


def strip_defaults(cfg: dict) -> tuple[dict, list[str]]:
    """``cfg`` without the keys whose value is their schema default (a section each benchmark's own
    schema), and those keys, dotted: validation fills the first into the config the second was. A key
    that a schema requires stays, and a section emptied is left out where its default is ``{}``."""
    root = load(SCHEMA_PATH)
    found: list[str] = []
    return _strip(root, root, cfg, (), found), found
