"""The config schemas, and the one place a setting's default is written.

Every knob's default lives in its JSON Schema (``config/config.schema.yaml`` for the config,
``config/schemas/<benchmark>.schema.yaml`` for a benchmark section): validation fills it in, and
Python code that meets a section nobody validated takes the same values from here
(:func:`defaults`) instead of keeping its own copy.

A declaration on the ground floor: it reads YAML files and jsonschema, nothing of the package.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from . import REPO_ROOT

SCHEMA_PATH = REPO_ROOT / "config" / "config.schema.yaml"
SCHEMA_DIR = REPO_ROOT / "config" / "schemas"


def benchmark_schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}.schema.yaml"


@lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


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


def filled(path: Path, section: dict | None, *keys: str) -> dict:
    """A copy of ``section`` with the defaults of the object at ``keys`` inside the schema at ``path``
    filled in, nested ones too, as validation fills them; validation errors (a required key, a bad
    value) are left to whoever validates."""
    schema = load(path)
    node = schema
    for k in keys:
        node = node["properties"][k]
    out = copy.deepcopy(section or {})
    # the sub-schema keeps the root's $defs / definitions so that a $ref resolves
    sub = {**{k: v for k, v in schema.items() if k in ("$defs", "definitions", "$schema")}, **node}
    for _ in filling_validator(sub).iter_errors(out):
        pass
    return out


def defaults(path: Path, *keys: str) -> dict:
    """What validation fills into an empty section: ``defaults(SCHEMA_PATH, "generation")`` is the
    ``generation:`` section's, ``defaults(benchmark_schema_path("bfcl"))`` a benchmark's."""
    return filled(path, {}, *keys)
