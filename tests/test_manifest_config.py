"""Manifest specs and config validation: what decides a point's validity, and clear errors."""

import copy
import re

import pytest
import yaml

from quantladder import config as qconfig
from quantladder import manifest
from quantladder.errors import ConfigError
from quantladder.io import sha256_bytes

CFG = qconfig.load()
FAM = next(iter(CFG["families"]))


def h(cfg, rung, bench="perplexity", kv="f16"):
    return manifest.spec_hash(cfg, "card-x", FAM, rung, kv, bench)


def test_default_config_validates_and_plans_the_ladder():
    assert qconfig.rungs(CFG, FAM)[0] == "F16"
    assert {"Q8_0", "Q4_K_M", "Q2_K"} <= set(qconfig.rungs(CFG, FAM))
    assert ("smollm2-135m-instruct", "F16", "f16") in qconfig.points(CFG)


def test_spec_hash_is_stable_and_local_to_the_changed_rung():
    before = {r: h(CFG, r) for r in qconfig.rungs(CFG, FAM)}
    assert before == {r: h(CFG, r) for r in qconfig.rungs(CFG, FAM)}
    changed = copy.deepcopy(CFG)
    changed["families"][FAM].setdefault("rung_options", {})["Q4_K_M"] = {"allow_requantize": True}
    after = {r: h(changed, r) for r in qconfig.rungs(changed, FAM)}
    assert [r for r in before if before[r] != after[r]] == ["Q4_K_M"]


def test_spec_hash_follows_measure_settings_and_kv():
    changed = copy.deepcopy(CFG)
    changed["measures"]["speed"]["n_gen"] = 64
    assert h(changed, "Q8_0", "speed") != h(CFG, "Q8_0", "speed")
    assert h(changed, "Q8_0", "perplexity") == h(CFG, "Q8_0", "perplexity")
    assert h(CFG, "Q8_0", kv="q8_0") != h(CFG, "Q8_0", kv="f16")
    # threads change speed only
    t = copy.deepcopy(CFG)
    t["threads"] = 7
    assert h(t, "Q8_0", "speed") != h(CFG, "Q8_0", "speed") and h(t, "Q8_0") == h(CFG, "Q8_0")


def test_spec_records_kv_types_and_sampling():
    s = manifest.spec(CFG, "card-x", FAM, "Q4_K_M", "q8_0-f16", "perplexity")
    assert (s["point"]["type_k"], s["point"]["type_v"]) == ("q8_0", "f16")
    assert s["sampling"]["temperature"] == 0.0 and s["model"]["rung_kind"] == "quantized"


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(kv_types=["q3_x"]), "KV-cache type 'q3_x'"),
    (lambda c: c["families"][FAM].update(rungs=["Q9_K"]), "unknown rung 'Q9_K'"),
    (lambda c: c["families"][FAM].update(source={"path": "a", "package": "b"}), "exactly one of hf/path/package"),
    (lambda c: c["measures"]["perplexity"].update(n_ctx="big"), "measures.perplexity.n_ctx"),
    (lambda c: c.update(typo_key=1), "Additional properties"),
])
def test_bad_config_is_named(tmp_path, mutate, message):
    cfg = yaml.safe_load((qconfig.DEFAULT_CONFIG).read_text())
    mutate(cfg)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=message):
        qconfig.load(p)


def test_a_generation_rule_on_a_blocked_card_writes_its_marker_and_generates_nothing(tmp_path):
    import json

    from quantladder import generation
    from quantladder.points import Point

    def point(anchor):
        return Point(config={}, card="c", family="f", rung="Q8_0", kv="f16", benchmark="bfcl", model_path="m.gguf",
                     model_record={}, anchor=anchor)

    assert not point({"status": "ok"}).blocked and not point({"status": "unanchored"}).blocked
    failed = point({"status": "failed", "reason": "anchor 61.2 outside 84.0 ± 5"})
    assert failed.blocked and failed.status[0] == "blocked"
    gen, meta = tmp_path / "bfcl" / "generations.jsonl", tmp_path / "bfcl" / "generations.json"
    gen.parent.mkdir()
    generation.write_blocked(gen, meta, benchmark="bfcl", reason=failed.anchor["reason"], planned=12,
                             items_sha256="abc")
    assert gen.read_text() == ""
    assert json.loads(meta.read_text()) == {"benchmark": "bfcl", "blocked": True, "reason": "anchor 61.2 outside 84.0 ± 5",
                                            "planned": 12, "generated": 0, "complete": False, "items_sha256": "abc",
                                            "sha256": sha256_bytes(b"")}


def test_a_task_rung_that_is_no_rung_of_the_family_is_refused(tmp_path):
    """Issue 41, case 7: `task_rungs: [Q4_K_S, Q2_K]` (Q4_K_S for Q4_K_M) ran no exam on Q4_K_M and
    none on Q4_K_S, and the run said every planned point finished. The key, the unknown rung, the
    family's rungs and the likely one are named, by the config check and by Snakemake's own run."""
    from pipeline_util import small_config, snakemake, write_config

    cfg = yaml.safe_load(qconfig.DEFAULT_CONFIG.read_text())
    cfg["families"][FAM]["task_rungs"] = ["Q4_K_S", "Q2_K"]
    p = tmp_path / "typo.yaml"
    p.write_text(yaml.safe_dump(cfg))
    want = (rf"key families\.{FAM}\.task_rungs: \['Q4_K_S'\] is not among the family's rungs \(F16, Q8_0, Q4_K_M, "
            r".*did you mean 'Q4_K_M' for 'Q4_K_S'\?")
    with pytest.raises(ConfigError, match=want):
        qconfig.load(p)
    cfg["families"][FAM]["task_rungs"] = ["Q4_K_M", "Q2_K"]  # the rungs meant, and null (every rung), are fine
    qconfig.validate_config(copy.deepcopy(cfg))
    cfg["families"][FAM]["task_rungs"] = None
    qconfig.validate_config(copy.deepcopy(cfg))
    small = small_config(rungs=("Q8_0", "Q4_K_M", "Q2_K"))
    small["families"][FAM]["task_rungs"] = ["Q4_K_S", "Q2_K"]
    r = snakemake(tmp_path, "-n", config=write_config(tmp_path, small), check=False)
    assert r.returncode != 0 and re.search(want.replace("F16, Q8_0, Q4_K_M, ", "F16, Q8_0, Q4_K_M"), r.stdout + r.stderr)
