"""A family that takes some exams, no per-point measures and its own reasoning keys, beside families
that take everything and cannot think (issue 43: the offline thinking family in the default run).

The default config's own thinking family (`smollm2-thinking`) is the case: its weights are SmolLM2's,
measured already by the instruct family's perplexity and speed, so it lists `measures: [memory]` (what
the recommender needs) and one exam, and thinks with `reasoning: on` and a budget while the other families render and key
their replies exactly as before."""

from __future__ import annotations

import copy

import pytest

from quantladder import config as qconfig
from quantladder import manifest, reasoning
from quantladder import targets as qtargets
from quantladder.errors import ConfigError

THINKING = "smollm2-thinking"
CARD = "cpu-test"


@pytest.fixture(scope="module")
def cfg() -> dict:
    return qconfig.load(qconfig.DEFAULT_CONFIG)


def _without(cfg: dict, family: str) -> dict:
    out = copy.deepcopy(cfg)
    del out["families"][family]
    return out


def test_the_thinking_family_plans_its_exam_only(cfg):
    fam = cfg["families"][THINKING]
    assert fam["measures"] == ["memory"] and fam["benchmarks"] == ["arithmetic"]
    mine = [t for t in qtargets.planned(cfg, CARD) if t.family == THINKING]
    assert {t.measure for t in mine} == {"arithmetic", "memory"}
    ref = qconfig.reference_rung(cfg, THINKING)
    assert {(t.series, t.rung, t.measure) for t in mine} == {
        (s, r, m) for s, r in (("points", ref), ("points", "Q4_K_M")) for m in ("arithmetic", "memory")} | {
        ("noise", ref, "arithmetic")}
    # every other family plans what it planned without the thinking family beside it
    others = [t for t in qtargets.planned(cfg, CARD) if t.family != THINKING]
    assert others == qtargets.planned(_without(cfg, THINKING), CARD)
    assert any(t.measure == "perplexity" for t in others) and any(t.measure == "humaneval" for t in others)


def test_its_reasoning_is_its_own_and_the_other_families_keys_stay(cfg):
    g = reasoning.family_generation(cfg, THINKING)
    assert g["reasoning"] == "on" and g["reasoning_budget"] == 4
    assert reasoning.is_set(cfg, THINKING)
    other = "smollm2-135m-instruct"
    assert not reasoning.is_set(cfg, other)  # renders, decodes and records as before the keys existed
    assert reasoning.family_generation(cfg, other) == (cfg.get("generation") or {})
    # its replies' key carries its reasoning; the other families' keys do not move with it
    for bench in ("arithmetic", "humaneval"):
        assert manifest.spec_hash(cfg, CARD, other, "Q4_K_M", "f16", bench) == \
            manifest.spec_hash(_without(cfg, THINKING), CARD, other, "Q4_K_M", "f16", bench)
    spec = manifest.spec(cfg, CARD, THINKING, "Q4_K_M", "f16", "arithmetic")
    assert spec["family_reasoning"] == cfg["families"][THINKING]["reasoning"]
    budget2 = copy.deepcopy(cfg)
    budget2["families"][THINKING]["reasoning"]["reasoning_budget"] = 2
    assert manifest.spec_hash(budget2, CARD, THINKING, "Q4_K_M", "f16", "arithmetic") != \
        manifest.spec_hash(cfg, CARD, THINKING, "Q4_K_M", "f16", "arithmetic")
    # planning checks the family's keys against its template (QwQ's thinks): no error
    reasoning.plan_check(cfg)


def test_a_family_cannot_think_refuses_its_own_reasoning_on(cfg):
    bad = copy.deepcopy(cfg)
    bad["families"]["smollm2-135m-instruct"]["reasoning"] = {"reasoning": "on"}
    with pytest.raises(ConfigError, match="smollm2-135m-instruct"):
        reasoning.plan_check(bad)


@pytest.mark.parametrize("key,name", [("benchmarks", "arithmetics"), ("measures", "perplexty")])
def test_an_unknown_name_in_a_familys_list_is_refused_naming_the_key(cfg, key, name):
    bad = copy.deepcopy(cfg)
    bad["families"][THINKING][key] = [name]
    with pytest.raises(ConfigError, match=rf"families\.{THINKING}\.{key}: \['{name}'\]"):
        qconfig.check_semantics(bad)
