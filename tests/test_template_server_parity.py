"""Rendering parity with llama-server (issue 43, deliverable 2): quantladder's generation-path renderer
(``reasoning.render``, what ``Engine.chat_prompt`` calls) against llama.cpp's own, a real
``llama-server --jinja --chat-template-file T`` built from the vendored source
(``llama_tools.extra_tool``) answering ``POST /apply-template`` on loopback, byte for byte.

Every vendored template whose replies are split (a thinking format: always rendered with the kwargs,
as the server renders) and a sample of the others, × the fixed conversations of
benchmarks/template_parity.py (which runs the full sweep for docs/thinking.md) × the settings each
takes: every cell is identical or refused by quantladder with its reason; the known differences of
the plain path (a family that cannot think, no reasoning key set: rendered as it always was) are
asserted as they are documented. About a second per template (one server each).
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

# Templates that cannot think, rendered on both paths: plain chat templates, one whose template
# raises on a system message (the server merges it into the user turn), tool-use templates that loop
# over ``tools`` unguarded, an ``other`` family (refused with a key set), and Llama 3.1's dated one.
PLAIN_SAMPLE = ("Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                "google-gemma-2-2b-it", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Kimi-K3",
                "meta-llama-Llama-3.1-8B-Instruct", "unsloth-mistral-Devstral-Small-2507")
TOOL_REFUSAL = "tools, tool calls or tool results"


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
    rows = {n: sweep[n] for n in PLAIN_SAMPLE}
    # with a reasoning key set (the kwargs path, as the server renders): identical, or refused with the reason
    for name, cells in rows.items():
        for r in _cells(cells, setting="off"):
            if name == "Kimi-K3":  # thinks in markers not split here: any key refused
                assert r["verdict"] == "refused" and "does not split" in r["detail"], r
            elif r["conversation"] == "tool":
                assert r["verdict"] == "refused" and TOOL_REFUSAL in r["detail"], r
            elif name == "meta-llama-Llama-3.1-8B-Instruct":
                continue  # the date, below
            else:
                assert r["verdict"] == "identical", r
    # with no key set (the plain path, as it always rendered): identical but for the documented differences
    for name in ("Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                 "Kimi-K3"):
        assert all(r["verdict"] == "identical" for r in _cells(rows[name], setting="default")
                   if r["conversation"] != "tool"), name
    gemma2 = {r["conversation"]: r for r in _cells(rows["google-gemma-2-2b-it"], setting="default")}
    assert gemma2["user"]["verdict"] == "identical"
    for c in ("system", "turns"):  # the template raises; the server merges the system message into the user turn
        assert gemma2[c]["verdict"] == "raises" and "System role not supported" in gemma2[c]["detail"]
        assert "You are a careful assistant.\nWhat is 2 + 2?" in gemma2["system"]["server_prompt"]
    for r in _cells(rows["NousResearch-Hermes-3-Llama-3.1-8B-tool_use"], setting="default"):
        if r["conversation"] != "tool":  # the formatter's tools=None, looped over
            assert r["verdict"] == "raises" and "NoneType" in r["detail"], r
    for setting in ("default", "off"):  # the server writes today's date, the template's default is kept here
        for r in _cells(rows["meta-llama-Llama-3.1-8B-Instruct"], setting=setting):
            if r["conversation"] == "tool":
                continue
            assert r["verdict"] == "differs", r
            s, q = r["server_prompt"], r["quantladder_prompt"]
            assert "Today Date: 26 Jul 2024" in q and "Today Date: 26 Jul 2024" not in s
            date = s.split("Today Date: ", 1)[1].split("\n", 1)[0]
            assert s.replace(f"Today Date: {date}", "Today Date: 26 Jul 2024") == q
    devstral = {r["conversation"]: r for r in _cells(rows["unsloth-mistral-Devstral-Small-2507"], setting="default")}
    # the server's Ministral-3 rewrite makes an assistant turn with reasoning a [thinking, text] list, of
    # which Devstral's template prints the first block's text: the answer of that turn is dropped there
    assert devstral["reasoning"]["verdict"] == "differs" and "No: 91" not in devstral["reasoning"]["server_prompt"]
    assert _cells(rows["unsloth-mistral-Devstral-Small-2507"], setting="off", conversation="reasoning")[0][
        "verdict"] == "identical"


def test_a_split_family_whose_template_reads_the_date_is_refused():
    dated = ("{{ bos_token }}Today Date: {{ date_string | default('26 Jul 2024') }}"
             "<think>{{ messages[0].content }}</think>")
    cfg = {"generation": {}, "families": {"f": {"source": {"path": "x"}}}}
    with pytest.raises(R.ConfigError, match="family f: its chat template reads date_string"):
        R.setup_for(cfg, "f", dated)
    R.setup_for(cfg, "f", dated.replace("<think>", "").replace("</think>", ""))  # cannot think: rendered as always


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
