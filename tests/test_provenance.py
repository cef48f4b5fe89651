"""The provenance gate of third-party files (issue 44): files made here from the embedded SmolLM2 with
one change each, written with the `gguf` package (tests/provenance_util.py), against the family's F16
reference. Each change is caught and named (key, both values) by the check the acquire job runs
before anything measures the file; accepting its key or group lets it through with the record the
sidecar keeps; a template that only differs in whitespace Jinja ignores, and a producer's record, do
not block. Headers only: the whole module takes seconds (the six files are written once)."""

from __future__ import annotations

import pytest

import provenance_util as pu
from pipeline_util import small_config

from quantladder import config as qconfig
from quantladder import dataset, provenance
from quantladder.errors import ConfigError, DataError

WHERE = "families.smollm2.prebuilt.Q4_1-hub"


@pytest.fixture(scope="module")
def files(smollm_source, tmp_path_factory):
    return pu.write_all(smollm_source, tmp_path_factory.mktemp("third-party"))


@pytest.fixture(scope="module")
def compared(files, smollm_f16):
    return {name: provenance.compare(str(smollm_f16), str(path)) for name, path in files.items()}


def _check(result, accept=(), path="hub.gguf"):
    return provenance.check(result, list(accept), where=WHERE, path=path)


def test_the_upstream_file_is_the_reference_less_its_bits(smollm_f16, smollm_source):
    """The file the reference was dequantized from differs from it in nothing the gate compares: it
    passes with no accept, and its producer's record is kept (file types 3 = Q4_1 against 1 = F16)."""
    rec = _check(provenance.compare(str(smollm_f16), str(smollm_source)))
    assert rec["differences"] == [] and rec["differs_in"] == [] and rec["tokens_differ"] == []
    assert rec["producer"]["file"]["general.file_type"] == 3
    assert rec["producer"]["reference"]["general.file_type"] == 1
    assert provenance.refusal({"provenance": rec}, "text") is None
    assert provenance.refusal({"provenance": rec}, "chat") is None


BLOCKED = {  # mutation -> (group, what the message must show of the two values)
    "template": ("chat_template", ["named SmolLM", "pirate named Bluebeard", "renders 3 of the 4 fixed conversations"]),
    "merge": ("tokenizer", ["48900 entries", "first at index 0: 'Ġ t' against 'Ġ a'"]),
    "eos": ("tokenizer", ["the reference has 2, this file 3", "'<|im_end|>'", "'<repo_name>'"]),
    "rope": ("context", ["the reference has 'absent', this file 'linear'", "the reference has 'absent', this file 2.0",
                         "the reference has 8192, this file 16384"]),
}


@pytest.mark.parametrize("name", sorted(BLOCKED))
def test_each_change_is_named_with_both_values_and_blocks(compared, files, name):
    group, shows = BLOCKED[name]
    _, keys = pu.mutations()[name]
    with pytest.raises(DataError) as e:
        _check(compared[name], path=str(files[name]))
    msg = str(e.value)
    assert str(files[name]) in msg and "not measured" in msg and f"{WHERE}.accept" in msg
    for key in keys:
        assert f"{key} ({group})" in msg
    for s in shows:
        assert s in msg, (s, msg)
    assert [d["key"] for d in compared[name]["differences"]] == sorted(keys)  # that change and nothing else


@pytest.mark.parametrize("name", sorted(BLOCKED))
def test_accepting_the_keys_or_the_group_lets_it_through_recorded(compared, name):
    group, _ = BLOCKED[name]
    _, keys = pu.mutations()[name]
    for accept in (keys, [group]):
        rec = _check(compared[name], accept)
        assert rec["differs_in"] == [group] and rec["accepted"] == accept
        assert rec["effects"] == {group: provenance.EFFECTS[group]}
        assert {d["key"] for d in rec["differences"]} == set(keys)
    if len(keys) > 1:  # accepting one key of several is not accepting the others
        with pytest.raises(DataError) as e:
            _check(compared[name], keys[:1])
        assert keys[0] + " (" not in str(e.value) and all(k + " (" in str(e.value) for k in keys[1:])


def test_a_template_that_renders_the_same_is_recorded_not_blocking(compared):
    rec = _check(compared["template-whitespace"])
    (d,) = rec["differences"]
    assert d["key"] == "tokenizer.chat_template" and d["renders_differently"] is False
    assert "renders all 4 fixed conversations the same" in d["detail"]
    assert rec["differs_in"] == []
    assert provenance.refusal({"provenance": rec}, "chat") is None


def test_the_rendering_compares_what_the_exams_send(smollm_source):
    """The fixed conversations go through the formatter the engine uses, with the tools offered: a
    template that reads the tools renders them, and a change to it is found on that conversation only."""
    tmpl = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with_tools = "{% if tools %}tools: {{ tools | map(attribute='function.name') | join(',') }}\n{% endif %}" + tmpl
    out = provenance.render(with_tools, provenance.CONVERSATIONS[2])
    assert out.startswith("tools: get_weather\n") and "tool: {\"temperature_c\": 18}" in out
    fields = {"tokenizer.ggml.tokens": ["<s>", "</s>"], "tokenizer.ggml.bos_token_id": 0}
    changed, first = provenance._renderings(tmpl, with_tools, fields, fields)
    assert changed == [2] and "conversation 2 first at character 0" in first
    assert provenance.render("{{ raise_exception('no tools here') }}", provenance.CONVERSATIONS[0]).startswith(
        "<does not render: ")


def test_a_producers_record_is_kept_and_blocks_nothing(compared):
    rec = _check(compared["imatrix"])
    assert rec["differences"] == [] and rec["differs_in"] == []
    made = rec["producer"]["file"]
    assert made["quantize.imatrix.file"] == "/elsewhere/other.imatrix"
    assert made["quantize.imatrix.dataset"] == "/elsewhere/calibration_datav3.txt"
    assert made["quantize.imatrix.chunks_count"] == 125
    assert "quantize.imatrix.file" not in rec["producer"]["reference"]


@pytest.mark.parametrize("entry", ["tokenizer.ggml.merge", "chat_templates", "producer", "quantize.imatrix.fil"])
def test_a_misspelled_accept_entry_is_a_config_error_naming_it(compared, entry):
    with pytest.raises(ConfigError) as e:
        _check(compared["merge"], [entry, "tokenizer.ggml.merges"])
    assert f"{WHERE}.accept: {entry!r}" in str(e.value) and "tokenizer.ggml.merges" in str(e.value)


def test_an_accept_entry_the_file_does_not_differ_in_is_kept_aside(compared):
    """A real key the file does not differ in (a re-upload fixed it) is no error: it is recorded."""
    rec = _check(compared["merge"], ["tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id"])
    assert rec["accepted_not_differing"] == ["tokenizer.ggml.eos_token_id"]


def test_an_accept_entry_that_is_no_key_is_refused_with_the_config(tmp_path):
    cfg = small_config(rungs=())
    fam = next(iter(cfg["families"]))
    cfg["families"][fam]["prebuilt"] = {"Q4_1-hub": {"source": {"path": "/hub/m.gguf"}, "accept": ["tokeniser"]}}
    with pytest.raises(ConfigError) as e:
        qconfig.validate_config(cfg)
    assert f"families.{fam}.prebuilt.Q4_1-hub.accept" in str(e.value) and "'tokeniser'" in str(e.value)


def test_what_each_accepted_difference_refuses(compared):
    """KLD and the PPL ratio: refused where the same text is other tokens (a merge), not for an id that
    only says where a reply stops (eos) unless the text is a chat rendered with it; a template that
    renders otherwise refuses them on chat corpora only; a context difference refuses nothing."""
    def refusals(name, accept):
        rec = {"provenance": _check(compared[name], accept)}
        return provenance.refusal(rec, "text"), provenance.refusal(rec, "chat")

    text, chat = refusals("merge", ["tokenizer"])
    assert "tokenizer.ggml.merges" in text and "other tokens" in text and chat == text
    text, chat = refusals("eos", ["tokenizer"])
    assert text is None and "chat corpus" in chat and "tokenizer" in chat
    text, chat = refusals("template", ["chat_template"])
    assert text is None and "chat_template" in chat
    assert refusals("rope", ["context"]) == (None, None)


def test_the_dataset_names_where_each_rung_comes_from(compared):
    rec = _check(compared["template"], ["chat_template"])
    assert dataset.provenance_label({"rung_kind": "quantized"}) == "made here"
    assert dataset.provenance_label({"rung_kind": "prebuilt", "provenance": rec}) == (
        "third party; differs from the reference in: chat_template (accepted)")
    same = _check(compared["imatrix"])
    assert dataset.provenance_label({"rung_kind": "prebuilt", "provenance": same}) == "third party, as the reference"
    assert dataset.provenance_label({"rung_kind": "prebuilt"}) == "third party, not checked against the reference"
