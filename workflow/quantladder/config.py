"""The config: loading, validation outside Snakemake, and the plan it describes (points, rungs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "config" / "config.schema.yaml"
DEFAULT_CONFIG = REPO_ROOT / "config" / "config.yaml"


def load(path: str | Path = DEFAULT_CONFIG, validate: bool = True) -> dict:
    p = Path(path)
    try:
        cfg = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError as e:
        raise ConfigError(f"{p}: no such config file") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if validate:
        validate_config(cfg, source=str(p))
    return cfg


def validate_config(cfg: dict, source: str = "config") -> dict:
    """jsonschema validation with defaults filled in (the same schema Snakemake's validate uses)."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    validator_cls = jsonschema.validators.validator_for(schema)

    def set_defaults(validator, properties, instance, schema_):
        for prop, sub in properties.items():
            if isinstance(instance, dict) and "default" in sub:
                instance.setdefault(prop, sub["default"])
        yield from validator_cls.VALIDATORS["properties"](validator, properties, instance, schema_)

    filler = jsonschema.validators.extend(validator_cls, {"properties": set_defaults})
    errors = sorted(filler(schema).iter_errors(cfg), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = ".".join(str(x) for x in e.path) or "(top level)"
        raise ConfigError(f"{source}: key {where}: {e.message}")
    check_semantics(cfg, source)
    return cfg


def check_semantics(cfg: dict, source: str = "config") -> None:
    """What a schema cannot say: cross-references between keys."""
    from .engine import parse_kv
    from .ladder import plan, rung_name
    from .models import source_kind

    for name, fam in cfg.get("families", {}).items():
        source_kind(fam["source"])
        ref = fam.get("reference", "F16")
        if ref not in ("F16", "BF16", "F32"):
            raise ConfigError(f"{source}: families.{name}.reference must be F16, BF16 or F32, got {ref!r}")
        for rung in fam.get("rungs", []):
            plan(cfg, name, rung_name(rung), where=source)  # type, recipe, matrix: a ConfigError names the key
        for pre in fam.get("prebuilt", {}):
            if pre in fam.get("rungs", []):
                raise ConfigError(f"{source}: families.{name}: {pre!r} is both a made and a prebuilt rung")
    for kv in cfg.get("kv_types", ["f16"]):
        parse_kv(kv)


def families(cfg: dict) -> list[str]:
    return list(cfg.get("families", {}))


def reference_rung(cfg: dict, family: str) -> str:
    return cfg["families"][family].get("reference", "F16")


def rungs(cfg: dict, family: str) -> list[str]:
    """The family's rungs, reference first, then made rungs, then prebuilt ones."""
    fam = cfg["families"][family]
    out = [reference_rung(cfg, family)]
    from .ladder import rung_name

    out += [rung_name(r) for r in fam.get("rungs", []) if rung_name(r) != out[0]]
    out += list(fam.get("prebuilt", {}))
    return out


def rung_kind(cfg: dict, family: str, rung: str) -> str:
    fam = cfg["families"][family]
    if rung == reference_rung(cfg, family):
        return "reference"
    if rung in fam.get("prebuilt", {}):
        return "prebuilt"
    from .ladder import rung_name

    if rung in [rung_name(r) for r in fam.get("rungs", [])]:
        return "quantized"
    raise ConfigError(f"family {family!r} has no rung {rung!r}")


def kv_types(cfg: dict, family: str | None = None) -> list[str]:
    if family and "kv_types" in cfg["families"][family]:
        return list(cfg["families"][family]["kv_types"])
    return list(cfg.get("kv_types", ["f16"]))


def points(cfg: dict) -> list[tuple[str, str, str]]:
    return [(f, r, kv) for f in families(cfg) for r in rungs(cfg, f) for kv in kv_types(cfg, f)]


def rung_options(cfg: dict, family: str, rung: str) -> dict:
    """What makes one rung's file: type, tensor-type recipe, matrix (corpus + settings) and options
    (quantladder.ladder.plan: global defaults overridden by the family's per-rung entry)."""
    from .ladder import plan

    return plan(cfg, family, rung)
