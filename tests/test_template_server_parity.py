"""Rendering parity with llama-server (issue 43, deliverable 2): quantladder's generation-path renderer
(``reasoning.render``, what ``Engine.chat_prompt`` calls) against llama.cpp's own, a real
``llama-server --jinja --chat-template-file T`` built from the vendored source
(``llama_tools.extra_tool``) answering ``POST /apply-template`` on loopback, byte for byte.

Every vendored template whose replies are split (a thinking format) and a sample of the others, × the
fixed conversations of benchmarks/template_parity.py (which runs the full sweep for docs/thinking.md)
× the settings each takes: one renderer for every family, and every cell is identical or refused by
quantladder with its reason. About a second per template (one server each).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from quantladder import llama_tools, reasoning as R
from quantladder.engine import Engine, EngineSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import template_parity as TP  # noqa: E402

# Templates that cannot think: plain chat templates, one whose template raises on a system message
# (the server merges it into the user turn), a tool-use template that loops over ``tools`` unguarded,
# an ``other`` family (refused with a key set), Llama 3.1's dated one (refused) and Llama 3.2's (today's
# date, as the server), Devstral's (the server's Ministral-3 rewrite).
PLAIN_SAMPLE = ("Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                "google-gemma-2-2b-it", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Kimi-K3",
                "meta-llama-Llama-3.1-8B-Instruct", "unsloth-mistral-Devstral-Small-2507")
TOOL_REFUSAL = "tools or tool calls"


@pytest.fixture(scope="module")
def server_exe() -> Path:
    return llama_tools.extra_tool("llama-server")  # built once per tools cache


@pytest.fixture(scope="module")
def templates(tmp_path_factory, repo_root) -> dict[str, Path]:
    version = llama_tools.pinned_version(repo_root / "pyproject.toml")
    sdist = llama_tools.fetch_sdist(version, llama_tools.cache_root() / "sdist")
    return TP.vendored_templates(sdist, tmp_path_factory.mktemp("templates"))


@pytest.fixture(scope="module")
def sweep(templates, server_exe, smollm_q8, tmp_path_factory) -> dict[str, list[dict]]:
    """The cells of every thinking template and the plain sample, by template."""
    work = tmp_path_factory.mktemp("parity")
    out = {}
    for name, path in templates.items():
        if R.detect(path.read_text()).kind in (R.TAGS, R.HARMONY) or name in PLAIN_SAMPLE:
            out[name] = TP.compare_template(name, path, server_exe, smollm_q8, work)
    return out


def _cells(rows, **where):
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def test_every_thinking_template_renders_as_the_server_or_is_refused(sweep):
    thinking = {n: rows for n, rows in sweep.items() if rows[0]["format"] not in ("none", "other")}
    assert len(thinking) == 38 and {"Qwen-Qwen3-0.6B", "openai-gpt-oss-120b", "google-gemma-4-31B-it"} <= set(thinking)
    bad = []
    for name, rows in thinking.items():
        for r in rows:
            if r["conversation"] == "tool":  # no exam passes tools: refused on the kwargs path, with the reason
                ok = r["verdict"] == "refused" and TOOL_REFUSAL in r["detail"]
            else:
                ok = r["verdict"] == "identical"
            if not ok:
                bad.append(f"{name} {r['setting']}/{r['conversation']}: {r['verdict']} {r['detail'][:300]}")
    assert not bad, "\n".join(bad)
    # every setting was rendered, and the switch reached the server: on and off differ where the template reads it
    qwen3 = sweep["Qwen-Qwen3-0.6B"]
    on, off = (_cells(qwen3, setting=s, conversation="user")[0]["server_prompt"] for s in ("on", "off"))
    assert off.endswith("<think>\n\n</think>\n\n") and on != off
    oss = sweep["openai-gpt-oss-120b"]
    assert "Reasoning: high" in _cells(oss, setting="effort=high", conversation="user")[0]["quantladder_prompt"]
    assert "Reasoning: low" in _cells(oss, setting="effort=low", conversation="user")[0]["quantladder_prompt"]


def test_the_server_message_rewrites_are_what_makes_the_reasoning_turn_equal(sweep, templates, smollm_q8):
    """LFM2.5's template reads an earlier turn's reasoning as ``thinking`` and Ministral 3's as a content
    block (the server's specialised handlers rewrite the messages): rendered with the messages as
    given, the reasoning turn differs from the server's; with the rewrite it is identical (above)."""
    for name in ("LFM2.5-8B-A1B", "mistralai-Ministral-3-14B-Reasoning-2512"):
        template = templates[name].read_text()
        cell = _cells(sweep[name], setting="on", conversation="reasoning")[0]
        assert cell["verdict"] == "identical" and "91 / 7 = 13" in cell["server_prompt"]
        kwargs = R.template_kwargs(R.detect(template), R.Settings("on"))
        plain = R.formatter(template, *TP.special_texts(smollm_q8), True, True)(
            messages=copy.deepcopy(TP.CONVERSATIONS["reasoning"]["messages"]), **kwargs).prompt
        assert plain != cell["server_prompt"] and "91 / 7 = 13" not in plain


def test_templates_that_cannot_think(sweep):
    """Templates that cannot think render by the same renderer, as the server: every cell identical, or
    refused with its reason (a tool conversation; an ``other`` family with a key set; a template that
    reads the date the server writes and renders otherwise without it)."""
    rows = {n: sweep[n] for n in PLAIN_SAMPLE}
    for name, cells in rows.items():
        for r in cells:
            if name == "meta-llama-Llama-3.1-8B-Instruct":  # its fallback is a fixed date, the server's today
                assert r["verdict"] == "refused" and "reads date_string" in r["detail"], r
                assert "refused for generation" in r["detail"]
            elif name == "Kimi-K3" and r["setting"] == "off":  # thinks in markers not split here: any key refused
                assert r["verdict"] == "refused" and "does not split" in r["detail"], r
            elif r["conversation"] == "tool":
                assert r["verdict"] == "refused" and TOOL_REFUSAL in r["detail"], r
            else:
                assert r["verdict"] == "identical", (name, r["setting"], r["conversation"], r["detail"])
    # what the plain formatter call got wrong, and the one renderer gets right (no key set):
    gemma2 = {r["conversation"]: r for r in _cells(rows["google-gemma-2-2b-it"], setting="default")}
    # the template raises on a system message; the server merges it into the user turn, and so do we
    assert "You are a careful assistant.\nWhat is 2 + 2?" in gemma2["system"]["quantladder_prompt"]
    hermes = _cells(rows["NousResearch-Hermes-3-Llama-3.1-8B-tool_use"], setting="default", conversation="user")[0]
    assert hermes["verdict"] == "identical"  # the formatter's tools=None is not in the server's context
    devstral = {r["conversation"]: r for r in _cells(rows["unsloth-mistral-Devstral-Small-2507"], setting="default")}
    # the server's Ministral-3 rewrite makes an assistant turn with reasoning a [thinking, text] list, of
    # which Devstral's template prints the first block's text: that turn's answer is dropped, on both sides
    turn = devstral["reasoning"]
    assert turn["verdict"] == "identical" and "No: 91" not in turn["quantladder_prompt"]
    # Llama 3.2 reads date_string too, but falls back to today's date (strftime_now) as the server fills it
    llama32 = _cells(rows["meta-llama-Llama-3.2-3B-Instruct"], setting="default", conversation="system")[0]
    assert llama32["verdict"] == "identical" and "Today Date: " in llama32["server_prompt"]


def test_a_template_that_reads_the_servers_date_is_refused(templates):
    """A family, thinking or not, whose template renders otherwise without the date llama-server writes
    (``date_string``/``datetime``) is refused at its setup, naming the family; one whose own fallback is
    today's date, as the server's, is not."""
    dated = ("{{ bos_token }}Today Date: {{ date_string | default('26 Jul 2024') }}"
             "<think>{{ messages[0].content }}</think>")
    cfg = {"generation": {}, "families": {"f": {"source": {"path": "x"}}}}
    with pytest.raises(R.ConfigError, match="family f: its chat template reads date_string.*refused for generation"):
        R.setup_for(cfg, "f", dated)
    with pytest.raises(R.ConfigError, match="family f: its chat template reads date_string"):  # cannot think
        R.setup_for(cfg, "f", dated.replace("<think>", "").replace("</think>", ""))
    for name in ("meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
                 "fireworks-ai-llama-3-firefunction-v2"):
        assert R.server_refusal(templates[name].read_text()), name
    today = "{{ bos_token }}{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}" \
            "{% endif %}Today Date: {{ date_string }} {{ messages[0].content }}"
    assert R.server_refusal(today) is None
    assert R.server_refusal(templates["meta-llama-Llama-3.2-3B-Instruct"].read_text()) is None
    assert R.setup_for(cfg, "f", today).kwargs["enable_thinking"] is False
    # the planning check refuses it before anything runs, for a family with no reasoning key set
    planned = {"generation": {}, "families": {
        "plain": {"chat_template": {"file": str(templates["meta-llama-Llama-3.2-3B-Instruct"])}},
        "f": {"chat_template": {"file": str(templates["meta-llama-Llama-3.1-8B-Instruct"])}}}}
    with pytest.raises(R.ConfigError, match="family f: its chat template reads date_string"):
        R.plan_check(planned)
    planned["families"]["f"]["chat"] = False  # a base model renders no template: nothing to refuse
    R.plan_check(planned)


def test_engine_chat_prompt_renders_as_the_server_with_the_ggufs_own_template(smollm_source, templates, server_exe,
                                                                             tmp_path):
    """End to end: the engine (its BOS/EOS texts, its formatter cache, the family's setup) against a
    server that reads the same GGUF's own template, on the template whose parity needs a message rewrite."""
    import provenance_util

    template = templates["LFM2.5-8B-A1B"].read_text()
    path = provenance_util.mutate(smollm_source, tmp_path / "smollm2-lfm25.gguf", {"tokenizer.chat_template": template})
    cfg = {"generation": {"reasoning": "on"}, "families": {"f": {"source": {"path": str(path)}}}}
    with Engine(str(path), EngineSettings(n_ctx=256, n_threads=1)) as eng:
        eng.reasoning = R.setup_for(cfg, "f", eng.chat_template)
        assert eng.reasoning.splits
        ours = {c: eng.chat_prompt(copy.deepcopy(conv["messages"])) for c, conv in TP.CONVERSATIONS.items()
                if c != "tool"}
        with pytest.raises(R.ConfigError, match=TOOL_REFUSAL):
            eng.chat_prompt(TP.CONVERSATIONS["tool"]["messages"])
    server = TP.Server(server_exe, path, templates["LFM2.5-8B-A1B"], tmp_path / "server.log")
    server.cmd = [a for a in server.cmd if a not in ("--chat-template-file", str(templates["LFM2.5-8B-A1B"]))]
    with server:
        for c, prompt in ours.items():
            ok, want = server.apply({"messages": TP.CONVERSATIONS[c]["messages"],
                                     "chat_template_kwargs": {"enable_thinking": True}})
            assert ok and prompt == want, (c, TP.first_difference(want, prompt))


def test_engine_chat_prompt_renders_a_family_that_cannot_think_as_the_server(smollm_source, templates, server_exe,
                                                                            tmp_path):
    """End to end, no reasoning key set, a template that cannot think: Devstral's writes ``eos_token``
    after every assistant turn (the special token's own text, as the server gives it; the plain
    formatter call wrote "" for SmolLM2's control-token EOS) and gets the server's Ministral-3 rewrite.
    An engine whose template reads the server's date is refused, naming its model."""
    import provenance_util

    name = "unsloth-mistral-Devstral-Small-2507"
    template = templates[name].read_text()
    path = provenance_util.mutate(smollm_source, tmp_path / "smollm2-devstral.gguf",
                                  {"tokenizer.chat_template": template})
    cfg = {"generation": {}, "families": {"f": {"source": {"path": str(path)}}}}
    with Engine(str(path), EngineSettings(n_ctx=256, n_threads=1)) as eng:
        eng.reasoning = R.setup_for(cfg, "f", eng.chat_template)
        assert eng.reasoning.format.name == "none" and not eng.reasoning.splits
        ours = {c: eng.chat_prompt(copy.deepcopy(conv["messages"])) for c, conv in TP.CONVERSATIONS.items()
                if c != "tool"}
        eos = eng.detokenize_bytes([eng.token_eos()], special=True).decode()
    assert eos and eos in ours["turns"]  # written after the assistant turn
    server = TP.Server(server_exe, path, templates[name], tmp_path / "server.log")
    server.cmd = [a for a in server.cmd if a not in ("--chat-template-file", str(templates[name]))]
    with server:
        for c, prompt in ours.items():
            ok, want = server.apply({"messages": TP.CONVERSATIONS[c]["messages"]})
            assert ok and prompt == want, (c, TP.first_difference(want, prompt))
    llama31 = templates["meta-llama-Llama-3.1-8B-Instruct"].read_text()
    dated = provenance_util.mutate(smollm_source, tmp_path / "smollm2-llama31.gguf",
                                   {"tokenizer.chat_template": llama31})
    with Engine(str(dated), EngineSettings(n_ctx=256, n_threads=1)) as eng:
        with pytest.raises(R.ConfigError, match=r"smollm2-llama31\.gguf: its chat template reads date_string"):
            eng.chat_prompt([{"role": "user", "content": "Hi"}])


def test_tool_results_render_as_the_server_passes_them(smollm_source, templates, server_exe, tmp_path):
    """BFCL's multi-turn items feed each step's executions back as ``role: tool`` messages (a name and the
    result as text, no tool call: the calls are in the assistant's text). The server hands them to the
    template as it rebuilds any message (role, content, name, tool_call_id), so the engine's prompt
    equals the server's for SmolLM2's own template and for two others that render tool results; a
    template whose handler rewrites tool results (DeepSeek's DSML one) is refused for them."""
    import provenance_util

    conv = [{"role": "system", "content": "You are an expert in composing functions."},
            {"role": "user", "content": "Move file a.txt to dir b."},
            {"role": "assistant", "content": "[mv(source='a.txt', destination='b')]"},
            {"role": "tool", "name": "mv(source='a.txt', destination='b')", "content": "{'result': 'moved'}"},
            {"role": "user", "content": "Now list dir b."}]
    cases = {"own": None, "qwen2.5": "Qwen-Qwen2.5-7B-Instruct", "hermes3": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"}
    for label, name in cases.items():
        path = smollm_source if name is None else provenance_util.mutate(
            smollm_source, tmp_path / f"{label}.gguf", {"tokenizer.chat_template": templates[name].read_text()})
        cfg = {"generation": {}, "families": {"f": {"source": {"path": str(path)}}}}
        with Engine(str(path), EngineSettings(n_ctx=256, n_threads=1)) as eng:
            eng.reasoning = R.setup_for(cfg, "f", eng.chat_template)
            ours = eng.chat_prompt(copy.deepcopy(conv))
            tpl = tmp_path / f"{label}.jinja"
            tpl.write_text(eng.chat_template)
        assert "{'result': 'moved'}" in ours, label
        with TP.Server(server_exe, path, tpl, tmp_path / f"{label}.log") as server:
            ok, want = server.apply({"messages": conv})
        assert ok and ours == want, (label, TP.first_difference(want, ours))
    deepseek = templates["deepseek-ai-DeepSeek-V4"].read_text()
    assert R.server_handler(deepseek) == "deepseek_v3_2"  # the server's DSML handler, which rewrites tool results
    with pytest.raises(R.ConfigError, match="rewrites them"):
        R.render(R.formatter(deepseek, "<bos>", "<eos>", True), deepseek, conv)
