"""Reasoning as point settings (issue 43, deliverable 1): the keys enter a point's generation key and
manifest only when set, a family's format is detected from its real template at planning (or named),
and a family that cannot think refuses ``reasoning: on`` when the config is validated, naming the
family and the key."""

from __future__ import annotations

import copy

import pytest

from quantladder import config as qconfig
from quantladder import manifest, reasoning
from quantladder.errors import ConfigError

FAMILY = "smollm2-135m-instruct"  # the default config's chat family: SmolLM2's own template, format none


@pytest.fixture(scope="module")
def cfg() -> dict:
    return qconfig.load()


def point(cfg, benchmark="arithmetic"):
    return (cfg, "cpu", FAMILY, "Q4_K_M", "f16", benchmark)


def with_generation(cfg, **keys) -> dict:
    out = copy.deepcopy(cfg)
    out.setdefault("generation", {}).update(keys)
    return qconfig.validate_config(out)


def test_unset_keys_leave_the_generation_key_as_it_was(cfg):
    """Validation writes no reasoning key into the section the key hashes, and the spec names none."""
    s = manifest.spec(*point(cfg))
    assert not any(k in s["generation"] for k in reasoning.KEYS) and "reasoning_format" not in s
    assert not any("reasoning" in k for k in cfg["generation"])
    assert not reasoning.is_set(cfg, FAMILY)


@pytest.mark.parametrize("keys", [{"reasoning": "auto"}, {"reasoning": "off"}, {"reasoning_budget": 64},
                                  {"reasoning_effort": "high"}, {"reasoning_budget_message": "Done."}])
def test_a_set_key_changes_the_generation_and_scoring_keys(cfg, keys):
    other = with_generation(cfg, **keys)
    assert manifest.spec_hash(*point(other)) != manifest.spec_hash(*point(cfg))
    assert manifest.scoring_key(*point(other)) != manifest.scoring_key(*point(cfg))
    assert manifest.spec(*point(other))["generation"].items() >= keys.items()
    # a measure's key does not depend on them (perplexity reads no reply)
    assert manifest.spec_hash(*point(other, "perplexity")) == manifest.spec_hash(*point(cfg, "perplexity"))


def test_reasoning_on_is_refused_at_planning_for_a_family_that_cannot_think(cfg):
    """SmolLM2's template (read from the installed package's GGUF header at validation) cannot think:
    ``reasoning: on`` is a ConfigError naming the family and the key; the base family (chat: false)
    renders no template and is not asked."""
    found, template = reasoning.planning_template(cfg["families"][FAMILY])
    assert found and reasoning.detect(template).name == "none"
    with pytest.raises(ConfigError, match=rf"generation\.reasoning: 'on', but family {FAMILY}'s chat template "
                                          "cannot think"):
        with_generation(cfg, reasoning="on")
    with_generation(cfg, reasoning="off")  # off and auto are what it does anyway


def test_a_named_format_is_checked_and_enters_the_key(cfg):
    named = copy.deepcopy(cfg)
    named["families"][FAMILY]["reasoning_format"] = "think"
    named["generation"]["reasoning"] = "on"
    qconfig.validate_config(named)  # named: the model thinks although its template shows nothing of it
    assert manifest.spec(*point(named))["reasoning_format"] == "think"
    s = reasoning.setup_for(named, FAMILY, reasoning.planning_template(cfg["families"][FAMILY])[1])
    assert s.splits and s.kwargs["enable_thinking"] is True
    named["families"][FAMILY]["reasoning_format"] = "thinking"
    with pytest.raises(ConfigError, match=rf"families\.{FAMILY}\.reasoning_format"):
        qconfig.validate_config(named)


def test_a_hub_family_not_fetched_is_left_to_its_job(cfg):
    hub = copy.deepcopy(cfg)
    hub["families"][FAMILY]["source"] = {"hf": {"repo_id": "nobody/none", "filename": "x.gguf", "revision": "0" * 40}}
    assert reasoning.planning_template(hub["families"][FAMILY]) == (False, None)
    hub["generation"]["reasoning"] = "on"
    reasoning.plan_check(hub)  # no file here: its generate job checks the rung's own template
    with pytest.raises(ConfigError, match="cannot think"):
        reasoning.setup_for(hub, FAMILY, "{{ messages[0].content }}")
