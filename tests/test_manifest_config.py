"""Manifest specs and config validation: what decides a point's validity, and clear errors."""

import copy

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
