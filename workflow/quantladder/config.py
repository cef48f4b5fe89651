"""The config: loading (one file, or a run's files laid over each other as Snakemake does), validation
outside Snakemake, and the plan it describes (points, rungs)."""

from __future__ import annotations

import copy
import difflib
from pathlib import Path

import yaml

from . import REPO_ROOT, benchmarks, reasoning, schemas
from .errors import ConfigError
from .generation_policy import GenerationPolicy
from .kv_policy import check_batch_invariant, flash_attn_for, parse_kv
from .ladder import plan, rung_name
from .models import source_kind

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


def load_config(configfiles: list[str] | None = None) -> dict:
    """The config a run uses: config/config.yaml with each further file laid over it as Snakemake's
    ``--configfile`` lays it (a mapping merged key by key, anything else replaced), then validated
    with the schema's defaults filled in."""
    cfg = load(DEFAULT_CONFIG, validate=False)
    for path in configfiles or []:
        _merge(cfg, load(path, validate=False))
    return validate_config(cfg, source=" + ".join(["config/config.yaml", *(configfiles or [])]))


def _merge(base: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def _validate(instance, schema: dict, *, source: str, prefix: str = "", schema_file: Path | None = None) -> None:
    """jsonschema validation with defaults filled in (the same schemas Snakemake's validate uses)."""
    errors = sorted(schemas.filling_validator(schema).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = ".".join([prefix] * bool(prefix) + [str(x) for x in e.path]) or "(top level)"
        hint = _hint(e)
        in_schema = f" (schema {schema_file.relative_to(REPO_ROOT)})" if schema_file else ""
        raise ConfigError(f"{source}: key {where}: {e.message}{in_schema}{hint}")


def _hint(e) -> str:
    """A fix for the mistakes YAML invites: an all-digit sha256 is read as a number."""
    if e.path and str(e.path[-1]) == "sha256" and isinstance(e.instance, (int, float)):
        return "; an all-digit sha256 is read by YAML as a number: quote it (sha256: \"0123...\")"
    if isinstance(e.instance, (int, float)) and e.validator == "type" and "string" in str(e.validator_value):
        return "; YAML read this as a number: quote it if it is meant as text"
    return ""


def validate_config(cfg: dict, source: str = "config") -> dict:
    """The whole config: its schema, every benchmark section's own schema, then the cross-references."""
    _validate(cfg, schemas.load(schemas.SCHEMA_PATH), source=source)
    validate_benchmarks(cfg, source)
    check_semantics(cfg, source)
    return cfg


def check_types(cfg: dict, source: str = "config") -> None:
    """What Snakemake's own schema check would report less clearly (run before it)."""
    for name, fam in (cfg.get("families") or {}).items():
        for where, val in [(f"families.{name}.sha256", (fam or {}).get("sha256"))] + [
                (f"families.{name}.prebuilt.{r}.sha256", (p or {}).get("sha256"))
                for r, p in ((fam or {}).get("prebuilt") or {}).items()]:
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                raise ConfigError(f"{source}: key {where}: {val!r} is a number, not a sha256; an all-digit sha256 "
                                  "is read by YAML as a number: quote it")
    # An integer key written as a float (n_ctx: 512.0): Snakemake's validate lets it pass as JSON Schema
    # does; this package's validator does not (schemas.filling_validator), and names the key.
    for e in schemas.filling_validator(schemas.load(schemas.SCHEMA_PATH)).iter_errors(copy.deepcopy(cfg)):
        if e.validator == "type" and isinstance(e.instance, float) and "integer" in str(e.validator_value):
            where = ".".join(str(x) for x in e.path)
            raise ConfigError(f"{source}: key {where}: {e.instance!r} is not an integer (write {e.instance:.0f} "
                              "if that is meant)" if e.instance.is_integer() else
                              f"{source}: key {where}: {e.instance!r} is not an integer")


# Keys that once had another name: one name per knob in every benchmark, and a config that still
# says the old one is told the new one (rather than a bare "additional property").
RENAMED_KEYS = {"max_tokens": "max_new_tokens"}


def validate_benchmarks(cfg: dict, source: str = "config") -> None:
    """Every `benchmarks:` section names a registered benchmark and passes that benchmark's schema."""
    for name, section in (cfg.get("benchmarks") or {}).items():
        benchmarks.get(name, where=f"{source}: benchmarks")  # unknown: the known names + a did-you-mean
        if not isinstance(section, dict):
            raise ConfigError(f"{source}: key benchmarks.{name}: a mapping of settings, got {type(section).__name__}")
        for old, new in RENAMED_KEYS.items():
            if old in section:
                raise ConfigError(f"{source}: key benchmarks.{name}.{old}: renamed {new} (the most tokens a reply "
                                  f"may have, one name in every benchmark): write {new}: {section[old]}")
        schema_file = schemas.benchmark_schema_path(name)
        if not schema_file.exists():
            raise ConfigError(f"benchmark {name}: its schema {schema_file} is missing")
        _validate(section, schemas.load(schema_file), source=source, prefix=f"benchmarks.{name}",
                  schema_file=schema_file)


def check_semantics(cfg: dict, source: str = "config") -> None:
    """What a schema cannot say: cross-references between keys."""
    for name, fam in cfg.get("families", {}).items():
        source_kind(fam["source"])
        ref = fam["reference"]
        if ref not in ("F16", "BF16", "F32"):
            raise ConfigError(f"{source}: families.{name}.reference must be F16, BF16 or F32, got {ref!r}")
        for rung in fam.get("rungs", []):
            plan(cfg, name, rung_name(rung), where=source)  # type, recipe, matrix: a ConfigError names the key
        # Every task rung must be one of the family's rungs: a name that is not (a typo, Q4_K_S for
        # Q4_K_M, or a rung an overlay's `rungs:` left out) would run no exam on it, silently, and the
        # rung meant would get none either while the run reports every planned point finished.
        ladder = rungs(cfg, name)
        unknown = [str(rung_name(r)) for r in fam.get("task_rungs") or [] if rung_name(r) not in ladder]
        if unknown:
            near = {u: difflib.get_close_matches(u, ladder, n=1) for u in unknown}
            hint = "; ".join(f"did you mean {m[0]!r} for {u!r}?" for u, m in near.items() if m)
            raise ConfigError(f"{source}: key families.{name}.task_rungs: {unknown} "
                              f"{'is' if len(unknown) == 1 else 'are'} not among the family's rungs ({', '.join(ladder)}): "
                              "a task rung is a rung the family makes (its reference, `rungs` or `prebuilt`); "
                              "list only those, or set task_rungs: null for every rung" + (f" ({hint})" if hint else ""))
        for pre, spec in fam.get("prebuilt", {}).items():
            if pre in fam.get("rungs", []):
                raise ConfigError(f"{source}: families.{name}: {pre!r} is both a made and a prebuilt rung")
            made = [r for r in ladder if r not in fam.get("prebuilt", {})]
            derived = (spec or {}).get("derive") or {}
            if derived and spec["enabled"] and derived.get("rung") not in made:
                raise ConfigError(f"{source}: key families.{name}.prebuilt.{pre}.derive.rung: {derived.get('rung')!r} "
                                  f"is not one of the rungs the family makes ({', '.join(made)}): a derived file is a "
                                  f"copy of one of them (add it to `rungs`, or switch the stand-in off: "
                                  f"families.{name}.prebuilt.{pre}.enabled: false)")
        for key, known in (("benchmarks", (cfg.get("benchmarks") or {})), ("measures", (cfg.get("measures") or {}))):
            unknown = [b for b in fam.get(key) or [] if b not in known]
            if unknown:
                raise ConfigError(f"{source}: key families.{name}.{key}: {unknown} not among the config's {key} "
                                  f"({', '.join(known)})")
    for kv in cfg["kv_types"]:
        parse_kv(kv)
    # reasoning settings a family's template cannot honour, refused at planning where its file is here
    reasoning.plan_check(cfg, source)
    if GenerationPolicy.of(cfg).batch_invariant:
        check_batch_invariant_config(cfg, source)
    # A benchmark's own kv_types (benchmarks.ruler.kv_types) is not the top-level kv_types: it adds
    # types beside the family's, has no default, and unset it adds none; the [] says that.
    for name, section in (cfg.get("benchmarks") or {}).items():
        for kv in (section or {}).get("kv_types") or []:
            try:
                parse_kv(kv)
            except ConfigError as e:
                raise ConfigError(f"{source}: key benchmarks.{name}.kv_types: {e}") from None


def check_batch_invariant_config(cfg: dict, source: str = "config") -> None:
    """generation.batch_invariant against the settings it cannot hold with (kv_policy.check_batch_invariant):
    GPU layers, a KV type of a task benchmark that needs flash attention, too many sequences."""
    for name, section in (cfg.get("benchmarks") or {}).items():
        if not (section or {}).get("enabled"):
            continue
        n = GenerationPolicy.of(cfg, name).record["n_parallel"]
        for fam in families(cfg):
            for kv in kv_types(cfg, fam, name):
                try:
                    check_batch_invariant(1 if n == "auto" else int(n), flash_attn_for(kv, cfg.get("flash_attn")),
                                          int(cfg["gpu_layers"]), kv)
                except ConfigError as e:
                    raise ConfigError(f"{source}: {e} (benchmarks.{name}, family {fam})") from None


def task_runs_for(cfg: dict, task: str, family: str) -> bool:
    """A chat benchmark needs a chat template: a base model (``chat: false``) does not take it; a family
    that lists its ``benchmarks`` takes those only."""
    fam = cfg["families"][family]
    listed = fam.get("benchmarks")
    if listed is not None and task not in listed:
        return False
    return not (benchmarks.get(task).needs_chat and not fam["chat"])


def measure_runs_for(cfg: dict, measure: str, family: str) -> bool:
    """A per-point measure runs on every family but one that lists its ``measures`` without it (a family
    whose weights another family measures already: the offline thinking family, docs/thinking.md)."""
    listed = (cfg["families"][family] or {}).get("measures")
    return listed is None or measure in listed


def noise_floor_enabled(cfg: dict) -> bool:
    return bool(cfg["generation"]["noise_floor"]["enabled"])


_NOISE_CACHE: dict[int, tuple[dict, dict]] = {}


def noise_config(cfg: dict) -> dict:
    """The config of the noise-floor series: every benchmark at the noise batch setting."""
    hit = _NOISE_CACHE.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    out = copy.deepcopy(cfg)
    out.setdefault("generation", {})["n_parallel"] = GenerationPolicy.of(cfg).noise_n_parallel
    for sec in (out.get("benchmarks") or {}).values():
        if isinstance(sec, dict):
            sec.pop("n_parallel", None)
    _NOISE_CACHE[id(cfg)] = (cfg, out)
    return out


def scoring_env_file(cfg: dict, task: str) -> str | None:
    return getattr(benchmarks.get(task), "scoring_env", None)


def families(cfg: dict) -> list[str]:
    """The families of the run: those not switched off with `enabled: false`."""
    return [name for name, fam in (cfg.get("families") or {}).items() if fam["enabled"]]


def reference_rung(cfg: dict, family: str) -> str:
    return cfg["families"][family]["reference"]


def rungs(cfg: dict, family: str) -> list[str]:
    """The family's rungs, reference first, then made rungs, then prebuilt ones."""
    fam = cfg["families"][family]
    out = [reference_rung(cfg, family)]
    out += [rung_name(r) for r in fam.get("rungs", []) if rung_name(r) != out[0]]
    out += [r for r, p in fam.get("prebuilt", {}).items() if p["enabled"]]
    return out


def rung_kind(cfg: dict, family: str, rung: str) -> str:
    fam = cfg["families"][family]
    if rung == reference_rung(cfg, family):
        return "reference"
    if rung in fam.get("prebuilt", {}):
        return "prebuilt"
    made = fam.get("rungs", [])
    if rung in made or any(rung_name(r) == rung for r in made):
        return "quantized"
    raise ConfigError(f"family {family!r} has no rung {rung!r}")


def kv_types(cfg: dict, family: str | None = None, measure: str | None = None) -> list[str]:
    """The KV-cache types of a family's points (the family's list, else the config's). With
    ``measure``: the types that measure or benchmark runs at, the family's and then those its own
    section adds (``benchmarks.ruler.kv_types``: the KV axis of one exam, every other figure left at
    the family's types)."""
    if family and "kv_types" in cfg["families"][family]:
        out = list(cfg["families"][family]["kv_types"])
    else:
        out = list(cfg["kv_types"])
    if measure:
        # the benchmark's extra types (no default: unset, none), not the top-level kv_types' [f16]
        extra = ((cfg.get("benchmarks") or {}).get(measure) or {}).get("kv_types") or []
        out += [k for k in extra if k not in out]
    return out


def all_kv_types(cfg: dict, family: str) -> list[str]:
    """Every KV-cache type a family's points run at, for any of its measures or benchmarks."""
    out = kv_types(cfg, family)
    for name in cfg.get("benchmarks") or {}:
        out += [k for k in kv_types(cfg, family, name) if k not in out]
    return out


def points(cfg: dict) -> list[tuple[str, str, str]]:
    return [(f, r, kv) for f in families(cfg) for r in rungs(cfg, f) for kv in kv_types(cfg, f)]


def rung_options(cfg: dict, family: str, rung: str) -> dict:
    """What makes one rung's file: type, tensor-type recipe, matrix (corpus + settings) and options
    (quantladder.ladder.plan: global defaults overridden by the family's per-rung entry)."""
    return plan(cfg, family, rung)


def runs_tasks(cfg: dict, family: str, rung: str) -> bool:
    """Whether a rung also runs the task benchmarks: every rung unless the family lists
    ``task_rungs`` (the reference always does: flips are counted against it)."""
    listed = cfg["families"][family].get("task_rungs")
    if listed is None:
        return True
    return rung == reference_rung(cfg, family) or rung in [rung_name(r) for r in listed]
