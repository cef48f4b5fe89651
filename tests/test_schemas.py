"""One default per knob: the schemas hold every default, Python reads them (issue 28).

The schema (config/config.schema.yaml, and config/schemas/<benchmark>.schema.yaml for a benchmark's
section) is the one home of defaults (issue 45): config/config.yaml says only what the default run sets
otherwise, plus comments, so a key there is a choice and never a copy that could drift from the schema.
A key it sets to its schema default is named here; leaving it out changes nothing, validation fills it in.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest
import yaml

from quantladder import benchmarks, config, imatrix, schemas
from quantladder.benchmarks.code.score import ScoreSettings
from quantladder.errors import ConfigError
from quantladder.generation_policy import GenerationPolicy

PACKAGE = Path(config.__file__).parent
CONFIG_DIR = config.REPO_ROOT / "config"
OVERLAYS = sorted(str(p.relative_to(config.REPO_ROOT)) for p in [CONFIG_DIR / "full.yaml", *CONFIG_DIR.glob("examples/*.yaml")])


def _raw_default_config() -> dict:
    return yaml.safe_load(config.DEFAULT_CONFIG.read_text())


def _as_json(cfg: dict) -> str:
    """Values and types (10 is not 10.0: a spec hash tells them apart), key order aside."""
    return json.dumps(cfg, sort_keys=True)


def test_the_default_config_says_only_what_differs_from_the_schema():
    _, restated = schemas.strip_defaults(_raw_default_config())
    assert not restated, (f"config/config.yaml restates the schema's default of {', '.join(restated)}: the schema is "
                          "the one home of defaults, leave these keys out (validation fills them in)")


def test_a_restated_default_is_named_down_to_its_key_and_leaving_it_out_changes_nothing():
    raw = _raw_default_config()
    fam = next(iter(raw["families"]))
    raw["families"][fam]["chat"] = True                          # a family's key (additionalProperties)
    raw["generation"] = {"noise_floor": {"enabled": True}, "wave_factor": 8}   # nested; 8 is no default
    raw["benchmarks"]["ruler"]["essay"] = {"builtin": "pydoc-topics"}          # a default beside a $ref
    raw["benchmarks"]["bfcl_haystack"]["haystack"] = {"seed": 0}  # emptied: the section's default fills it again
    raw["benchmarks"]["humaneval"]["timeout_s"] = 10             # the default is 10.0: another value in a key
    raw["benchmarks"]["arithmetic"]["enabled"] = False           # its default, but every section must say it
    stripped, restated = schemas.strip_defaults(copy.deepcopy(raw))
    assert sorted(restated) == sorted([f"families.{fam}.chat", "generation.noise_floor.enabled",
                                       "benchmarks.ruler.essay", "benchmarks.bfcl_haystack.haystack.seed"])
    assert stripped["generation"] == {"wave_factor": 8} and "haystack" not in stripped["benchmarks"]["bfcl_haystack"]
    assert stripped["benchmarks"]["humaneval"]["timeout_s"] == 10
    assert stripped["benchmarks"]["arithmetic"] == {"enabled": False}
    assert _as_json(config.validate_config(stripped)) == _as_json(config.validate_config(raw))


@pytest.mark.parametrize("overlay", [None, *OVERLAYS])
def test_every_default_filled_in_is_filled_in_again_when_left_out(overlay):
    """Validation fills a nested default only where its parent is: leaving out every key of a run's
    config (the default's, and each shipped config laid over it) that equals its default, sections
    emptied included, gives back the same config once filled, so config/config.yaml can say only what
    differs whatever section it leaves out."""
    filled = config.load_config([overlay] if overlay else [])
    stripped, restated = schemas.strip_defaults(copy.deepcopy(filled))
    assert "measures.speed.n_batch" in restated and "resources" not in stripped  # a section left at its defaults
    assert _as_json(config.validate_config(stripped)) == _as_json(filled)


@pytest.mark.parametrize("name", benchmarks.names())
def test_a_benchmark_resolved_from_nothing_is_what_validation_fills(name):
    """What a caller that never validated gets is what the schema check fills, and it validates."""
    section = {"enabled": True}
    if name == "bigcodebench_hard":
        section["source"] = {"path": "/nonexistent"}  # required: no default exists for it
    resolved = benchmarks.create(name, dict(section)).settings
    filled = dict(section)
    config.validate_benchmarks({"benchmarks": {name: filled}})
    assert resolved == filled


def test_no_benchmark_or_policy_keeps_its_own_copy_of_the_defaults():
    """A class attribute or module constant of defaults would drift from the schema again."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id.lower() in ("defaults", "default_settings") and isinstance(
                        getattr(node, "value", None), ast.Dict):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {t.id}")
    assert offenders == []


def test_generation_and_imatrix_defaults_are_the_schemas():
    schema = schemas.load(schemas.SCHEMA_PATH)["properties"]
    gen = schema["generation"]["properties"]
    assert GenerationPolicy({}).record == {k: gen[k]["default"] for k in ("n_parallel", "kv_budget_mb",
                                                                          "wave_factor", "prefix_cache",
                                                                          "batch_invariant")}
    im = schema["quantize"]["properties"]["imatrix_settings"]["properties"]
    assert imatrix.resolve_settings({}) == {k: v["default"] for k, v in im.items()}
    with pytest.raises(ConfigError, match="imatrix.chunk: unknown setting; known: n_ctx, chunks"):
        imatrix.resolve_settings({"chunk": 3})


def test_a_suite_without_a_sandbox_section_gets_its_own_schemas_limits():
    """BigCodeBench's schema promises 16 GiB for the sandbox's processes; before the defaults had
    one home a config without a sandbox section got HumanEval's 4 GiB."""
    bcb = ScoreSettings.from_config(benchmarks.create("bigcodebench_hard", {"source": {"path": "x"}}).settings)
    he = ScoreSettings.from_config(benchmarks.create("humaneval", {}).settings)
    assert (bcb.limits.memory_bytes, he.limits.memory_bytes) == (16384 << 20, 4096 << 20)
    assert (bcb.limits.address_space_bytes, bcb.limits.nproc) == (32768 << 20, 256)
    # a partial section keeps the rest of the defaults
    part = ScoreSettings.from_config(benchmarks.create("humaneval", {"sandbox": {"nproc": 9}}).settings)
    assert (part.limits.nproc, part.backend, part.limits.memory_bytes) == (9, "bubblewrap", 4096 << 20)


def test_an_old_knob_name_is_refused_with_its_new_name():
    cfg = config.load(config.DEFAULT_CONFIG)
    cfg["benchmarks"]["bfcl"]["max_tokens"] = cfg["benchmarks"]["bfcl"].pop("max_new_tokens")
    with pytest.raises(ConfigError, match=r"benchmarks\.bfcl\.max_tokens: renamed max_new_tokens .* "
                                          r"write max_new_tokens: 192"):
        config.validate_config(cfg, source="my.yaml")


@pytest.mark.parametrize("value", [3.7, True, 3.0, "3"])
@pytest.mark.parametrize("bench", ["tasks", "traffic", "humaneval"])
def test_a_count_that_is_not_an_integer_is_refused_naming_the_key(bench, value):
    """Issue 41, case 7: max_tokens 3.7 and true were read as 3 and 1. A benchmark's integer key refuses
    3.7 and true (jsonschema: bool is no integer) and also 3.0, which JSON Schema's integer lets pass."""
    section = {"enabled": False, "max_new_tokens": value}
    with pytest.raises(ConfigError, match=rf"key benchmarks\.{bench}\.max_new_tokens: .* is not of type 'integer'"):
        config.validate_benchmarks({"benchmarks": {bench: section}}, source="c.yaml")
    config.validate_benchmarks({"benchmarks": {bench: {"enabled": False, "max_new_tokens": 3}}}, source="c.yaml")


@pytest.mark.parametrize("value, message", [(512.0, r"512\.0 is not an integer \(write 512"),
                                            (512.5, r"512\.5 is not an integer")])
def test_a_top_level_integer_written_as_a_float_is_named_before_snakemakes_check(value, message):
    """Snakemake's own validate lets n_ctx: 512.0 pass (JSON Schema's integer does); check_types, which
    runs before it, names the key."""
    cfg = config.load()
    config.check_types(cfg, source="c.yaml")
    cfg["quantize"]["imatrix_settings"]["n_ctx"] = value
    with pytest.raises(ConfigError, match=rf"c\.yaml: key quantize\.imatrix_settings\.n_ctx: {message}"):
        config.check_types(cfg, source="c.yaml")


def test_the_exams_common_keys_are_written_once_and_read_as_their_own(tmp_path):
    """n_parallel, early_stop and time_budget_s: one definition (config/schemas/exam.fragment.yaml), which
    each exam's schema takes by name (x-shared) and validation reads as the exam's own property; a name
    the fragment lacks, or a key written both ways, is refused naming the file."""
    import yaml

    fragment = yaml.safe_load(schemas.EXAM_FRAGMENT_PATH.read_text())["properties"]
    takers = 0
    for path in sorted(schemas.SCHEMA_DIR.glob("*.schema.yaml")):
        raw = yaml.safe_load(path.read_text())
        for key in raw.get("x-shared") or []:
            assert key not in raw["properties"]
            assert schemas.load(path)["properties"][key] == fragment[key], (path.name, key)
            takers += 1
        for key in fragment:  # never a second copy beside the fragment
            assert key not in raw.get("properties", {}) or raw["properties"][key] != fragment[key], (path.name, key)
    assert takers >= 20
    for body, match in (({"x-shared": ["n_parallell"], "properties": {}}, "does not define"),
                        ({"x-shared": ["n_parallel"], "properties": {"n_parallel": {"type": "integer"}}},
                         "write it once")):
        bad = tmp_path / f"bad{len(body['properties'])}.schema.yaml"
        bad.write_text(yaml.safe_dump(body))
        with pytest.raises(ValueError, match=match):
            schemas.load(bad)
