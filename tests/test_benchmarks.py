"""The Benchmark registry and its config contract; config errors that name the thing; one card key
per machine kind; the conda env and pyproject.toml list the same packages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from quantladder import schemas
from quantladder import aggregate, benchmarks, card, config, manifest
from quantladder.errors import CardMismatchError, ConfigError

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "config" / "schemas"


@pytest.mark.parametrize("name", benchmarks.names())
def test_every_schema_key_is_in_exactly_one_settings_group(name):
    """What changes a reply, what changes only a verdict, what chooses the items, what changes nothing:
    every key of the benchmark's section is one of these, so the generation and scoring keys are built
    from declarations, never guessed."""
    cls = benchmarks.get(name)
    schema = schemas.load(schemas.benchmark_schema_path(name))  # with its x-shared keys, as validation reads it
    keys = set(schema["properties"])
    groups = [set(cls.item_settings), set(cls.generation_settings) | set(cls.COMMON_GENERATION),
              set(cls.scoring_settings), set(cls.run_settings)]
    for i, g in enumerate(groups):
        for h in groups[i + 1:]:
            assert not g & h, (name, g & h)
    declared = set().union(*groups)
    assert keys <= declared, f"{name}: schema keys in no group: {sorted(keys - declared)}"
    optional = {"time_budget_s", "n_parallel", "early_stop"}  # not every benchmark offers them
    assert declared - optional <= keys, \
        f"{name}: declared settings missing from its schema: {sorted(declared - keys)}"


def test_generation_and_scoring_keys_move_apart():
    cfg = config.load()
    args = ("c", next(iter(cfg["families"])), "Q4_K_M", "f16", "humaneval")
    g, s = manifest.spec_hash(cfg, *args), manifest.scoring_key(cfg, *args)
    cfg2 = json.loads(json.dumps(cfg))
    cfg2["benchmarks"]["humaneval"]["timeout_s"] = 9.5
    assert manifest.spec_hash(cfg2, *args) == g and manifest.scoring_key(cfg2, *args) != s
    cfg3 = json.loads(json.dumps(cfg))
    cfg3["benchmarks"]["humaneval"]["max_new_tokens"] = 64
    assert manifest.spec_hash(cfg3, *args) != g and manifest.scoring_key(cfg3, *args) != s
    cfg4 = json.loads(json.dumps(cfg))
    cfg4["benchmarks"]["humaneval"]["limit"] = 20  # item selection: not a reply's key
    assert manifest.spec_hash(cfg4, *args) == g
    assert manifest.items_key(cfg4, args[1], "humaneval") != manifest.items_key(cfg, args[1], "humaneval")
    cfg5 = json.loads(json.dumps(cfg))
    cfg5.setdefault("generation", {})["n_parallel"] = 3  # batching changes replies
    assert manifest.spec_hash(cfg5, *args) != g


def _bad(cfg_patch):
    cfg = config.load(validate=False)
    cfg_patch(cfg)
    return cfg


def test_an_unknown_benchmark_is_refused_with_the_known_names_and_a_did_you_mean():
    cfg = _bad(lambda c: c["benchmarks"].update({"humaneavl": {"enabled": True}}))
    with pytest.raises(ConfigError, match=r"benchmarks\.humaneavl: no such benchmark \(known: .*humaneval.*\); "
                                          r"did you mean 'humaneval'\?"):
        config.validate_config(cfg)
    cfg = _bad(lambda c: c["benchmarks"].update({"mmlu": {"enabled": False}}))
    with pytest.raises(ConfigError, match=r"benchmarks\.mmlu: no such benchmark"):
        config.validate_config(cfg)


def test_a_schema_error_names_the_benchmark_key_and_the_schema_file():
    cfg = _bad(lambda c: c["benchmarks"]["humaneval"].update({"timeout_s": "four"}))
    with pytest.raises(ConfigError, match=r"key benchmarks\.humaneval\.timeout_s: 'four' is not of type 'number' "
                                          r"\(schema config/schemas/humaneval\.schema\.yaml\)"):
        config.validate_config(cfg)
    cfg = _bad(lambda c: c["benchmarks"]["ruler"].update({"lengths": [512, "long"]}))
    with pytest.raises(ConfigError, match=r"key benchmarks\.ruler\.lengths\.1"):
        config.validate_config(cfg)


def test_an_all_digit_sha256_gets_a_quote_it_hint():
    fam = next(iter(config.load(validate=False)["families"]))
    cfg = _bad(lambda c: c["families"][fam].update({"sha256": int("1" * 64)}))
    with pytest.raises(ConfigError, match=rf"families\.{fam}\.sha256: .*quote it"):
        config.check_types(cfg)
    with pytest.raises(ConfigError, match="quote it"):
        config.validate_config(cfg)


def test_snakemake_dry_run_refuses_an_unknown_benchmark(tmp_path):
    """At `snakemake -n`, before anything runs, naming the benchmark and the known ones."""
    from pipeline_util import small_config, snakemake, write_config

    cfg = small_config()
    cfg["benchmarks"]["humaneavl"] = {"enabled": True}
    r = snakemake(tmp_path, "-n", config=write_config(tmp_path, cfg), check=False)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "benchmarks.humaneavl: no such benchmark" in out and "did you mean 'humaneval'" in out


# -- one card key, one machine kind ------------------------------------------------------------

AVX2 = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | REPACK = 1 | "
AVX512 = AVX2.replace("BMI2 = 1 |", "BMI2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 |")


def test_card_keys_tell_instruction_sets_apart():
    """The two machines the issue found under one key `cpu-amd-epyc` (an AVX2-only and an AVX512 EPYC,
    same model string) get two keys; the same machine always gets the same."""
    a = card.cpu_identity("AMD EPYC Processor", AVX2)
    b = card.cpu_identity("AMD EPYC Processor", AVX512)
    assert a["label"].startswith("cpu-amd-epyc-avx2-") and b["label"].startswith("cpu-amd-epyc-avx512-")
    assert a["fingerprint"] != b["fingerprint"] and a["label"] != b["label"]
    assert card.cpu_identity("AMD EPYC Processor", AVX2) == a
    assert card.parse_system_info(AVX512)["CPU"]["AVX512_VNNI"] == "1"
    g = card.gpu_identity({"name": "NVIDIA H200", "compute_capability": "9.0"},
                          "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | CPU : AVX2 = 1 |")
    assert g["label"] == "nvidia-h200-sm90-cuda" and g["backend"] == "CUDA"
    assert card.identity()["fingerprint"]  # this machine's


def _manifest(tmp_path, name, fp, cpu):
    d = tmp_path / name
    d.mkdir()
    doc = {"benchmark": "speed", "status": "ok", "rows": [], "manifest": {
        "point": {"card": "cpu-amd-epyc", "family": "f", "rung": "Q4_K_M", "kv": "f16"},
        "card": {"name": cpu, "fingerprint": fp, "label": "cpu-amd-epyc"}, "keys": {"series": "points"}}}
    (d / "metrics.json").write_text(json.dumps(doc))
    return str(d / "metrics.json")


def test_two_fingerprints_under_one_card_key_are_refused_naming_both(tmp_path):
    a = _manifest(tmp_path, "a", card.cpu_identity("AMD EPYC Processor", AVX2)["fingerprint"], "AMD EPYC (AVX2)")
    b = _manifest(tmp_path, "b", card.cpu_identity("AMD EPYC Processor", AVX512)["fingerprint"], "AMD EPYC (AVX512)")
    with pytest.raises(CardMismatchError) as e:
        aggregate.collect([a, b])
    msg = str(e.value)
    assert "cpu-amd-epyc" in msg and a in msg and b in msg and "AVX2" in msg and "AVX512" in msg
    aggregate.collect([a, _manifest(tmp_path, "c", json.loads(Path(a).read_text())["manifest"]["card"]["fingerprint"],
                                    "AMD EPYC (AVX2)")])  # the same kind twice merges


# -- the conda env and pyproject.toml cannot drift ----------------------------------------------

def _names(reqs):
    return {re.split(r"[<>=!~\[ ;]", r.strip(), maxsplit=1)[0].lower().replace("_", "-") for r in reqs if r.strip()}


def test_conda_env_and_pyproject_list_the_same_packages():
    import tomllib

    py = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((REPO / "envs" / "quantladder.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    # conda's own: the interpreter, pip, and the toolchain that compiles llama-cpp-python
    conda = [d for d in env["dependencies"] if isinstance(d, str)
             and not d.startswith(("python", "pip", "cmake", "cxx-compiler"))]
    assert _names(py) == _names(pip) | _names(conda), (sorted(_names(py) ^ (_names(pip) | _names(conda))))
    # the same pins: RULER's items depend on wonderwords' word lists, scoring on the pinned packages
    pins = {_names([r]).pop(): r.replace(" ", "") for r in py if "==" in r}
    for r in pip:
        n = _names([r]).pop()
        if n in pins:
            assert r.replace(" ", "") == pins[n], (r, pins[n])
