"""Models that think (issue 43, the core): the reasoning format of every vendored llama.cpp chat
template, the template kwargs of ``reasoning``, the reply split against llama.cpp's own parse cases
and recorded-style replies, the reasoning-budget state machine against common/reasoning-budget.cpp's
behaviour (its tests/test-reasoning-budget.cpp cases), and ``Engine.chat_prompt`` with kwargs."""

from __future__ import annotations

import copy
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from quantladder import llama_tools, reasoning as R
from quantladder.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures" / "reasoning"


@pytest.fixture(scope="session")
def vendored_templates(tmp_path_factory, repo_root) -> dict[str, str]:
    """llama.cpp's models/templates/*.jinja from the llama-cpp-python sdist the project pins (the
    same file the llama_tools rule builds from), by family name."""
    version = llama_tools.pinned_version(repo_root / "pyproject.toml")
    sdist = llama_tools.fetch_sdist(version, llama_tools.cache_root() / "sdist")
    out = tmp_path_factory.mktemp("templates")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if "/vendor/llama.cpp/models/templates/" in m.name and m.name.endswith(".jinja")]
        tar.extractall(out, members=members, filter="data")
    return {p.name[:-len(".jinja")]: p.read_text() for p in out.rglob("*.jinja")}


# -- detection -------------------------------------------------------------------------------------

# Written by reading each template (not by running detect): where its thinking is written, or
# "none" where the template has no thinking block (a model that thinks anyway, as MiniMax-M1 or
# MiMo-VL, shows nothing of it in its template: its config names the format).
EXPECTED_FORMAT = {
    "Apertus-8B-Instruct": "other",           # enable_thinking; thoughts as <|inner_prefix|> blocks
    "Apriel-1.6-15b-Thinker-fixed": "other",  # reasoning before "[BEGIN FINAL RESPONSE]"
    "Bielik-11B-v3.0-Instruct": "think",
    "ByteDance-Seed-OSS": "seed",             # <seed:think> ... </seed:think>
    "Cohere2MoE": "command",                  # <|START_THINKING|> ... <|END_THINKING|><|START_TEXT|>
    "CohereForAI-c4ai-command-r-plus-tool_use": "none",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command",
    "GLM-4.6": "think",
    "GLM-4.7-Flash": "think",
    "GigaChat3-10B-A1.8B": "none",
    "GigaChat3.1-10B-A1.8B": "none",
    "HuggingFaceTB-SmolLM3-3B": "think",
    "Kimi-K2-Instruct": "none",
    "Kimi-K2-Thinking": "think",
    "Kimi-K3": "other",                       # open_tag('think'): <|open|>-style markers
    "LFM2-8B-A1B": "none",
    "LFM2.5-8B-A1B": "think",
    "LFM2.5-Instruct": "think",               # cuts earlier turns at "</think>": the model writes it
    "MiMo-VL": "none",
    "MiniMax-M1": "none",
    "MiniMax-M2": "think",
    "MiniMax-M3": "minimax_m3",               # <mm:think> ... </mm:think>
    "Mistral-Small-3.2-24B-Instruct-2506": "none",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "think",
    "NVIDIA-Nemotron-Nano-v2": "think",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "none",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "none",
    "Qwen-QwQ-32B": "think",
    "Qwen-Qwen2.5-7B-Instruct": "none",
    "Qwen-Qwen3-0.6B": "think",
    "Qwen3-Coder": "none",
    "Qwen3.5-4B": "think",
    "Reka-Edge": "think",
    "Spark2.5": "think",
    "StepFun3.5-Flash": "think",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "think",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "think",
    "deepseek-ai-DeepSeek-V3.1": "think",
    "deepseek-ai-DeepSeek-V3.2": "think",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "think",
    "deepseek-ai-DeepSeek-V4": "think",
    "fireworks-ai-llama-3-firefunction-v2": "none",
    "google-gemma-2-2b-it": "none",
    "google-gemma-4-31B-it-interleaved": "gemma4",  # <|channel>thought ... <channel|>
    "google-gemma-4-31B-it": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct": "think",  # its `thinking` kwarg asks for <think></think>
    "ibm-granite-granite-4.0": "none",
    "ibm-granite-granite-4.1": "none",
    "inclusionai-ling-3.0-flash": "think",
    "llama-cpp-deepseek-r1": "think",
    "llama-cpp-rwkv-world": "think",
    "meetkai-functionary-medium-v3.1": "none",
    "meetkai-functionary-medium-v3.2": "none",
    "meta-llama-Llama-3.1-8B-Instruct": "none",
    "meta-llama-Llama-3.2-3B-Instruct": "none",
    "meta-llama-Llama-3.3-70B-Instruct": "none",
    "microsoft-Phi-3.5-mini-instruct": "none",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",  # [THINK] ... [/THINK]
    "mistralai-Mistral-Nemo-Instruct-2407": "none",
    "moonshotai-Kimi-K2": "none",
    "muse-glimmer": "other",                  # a "to=self" reasoning channel
    "openai-gpt-oss-120b": "harmony",
    "openbmb-MiniCPM5-1B": "think",
    "poolside-Laguna-S-2.1": "think",
    "poolside-Laguna-XS-2.1": "think",
    "poolside-Laguna-XS.2": "think",
    "tencent-Hy3": "other",                   # '<think{}>'.format(token): a marker built at render time
    "unsloth-Apriel-1.5": "other",
    "unsloth-mistral-Devstral-Small-2507": "none",
    "upstage-Solar-Open-100B": "other",       # <|begin|>assistant<|think|> ... <|end|> messages
}


def test_detection_over_every_vendored_template(vendored_templates):
    assert len(vendored_templates) == 70  # the issue's 71 counts the directory's README.md too
    assert sorted(vendored_templates) == sorted(EXPECTED_FORMAT)
    wrong = {name: (R.detect(text).name, EXPECTED_FORMAT[name]) for name, text in vendored_templates.items()
             if R.detect(text).name != EXPECTED_FORMAT[name]}
    assert not wrong, f"detected vs expected: {wrong}"
    assert R.detect(None).name == "none" and R.detect("").name == "none"


def test_format_named_in_config():
    assert R.family_format("{{ messages }}", "think").name == "think"  # the config's name wins
    assert R.family_format("<think></think>").name == "think"
    with pytest.raises(ConfigError, match=r"families.x.reasoning_format: unknown reasoning format 'thinks'.*think"):
        R.family_format("", "thinks", where="families.x.reasoning_format")


# -- settings, refusal, kwargs ---------------------------------------------------------------------

def test_validate_generation():
    assert R.validate_generation({}) == R.Settings("auto", None, -1)
    assert R.validate_generation({"reasoning": True}).reasoning == "on"   # YAML's bare on
    assert R.validate_generation({"reasoning": False}).reasoning == "off"
    assert R.validate_generation({"reasoning_effort": "default"}).reasoning_effort is None
    assert R.validate_generation({"reasoning": "on", "reasoning_effort": "high", "reasoning_budget": 0}) == \
        R.Settings("on", "high", 0)
    for bad, key in (({"reasoning": "yes"}, "generation.reasoning"), ({"reasoning_budget": -2}, "generation.reasoning_budget"),
                     ({"reasoning_budget": 1.5}, "generation.reasoning_budget"),
                     ({"reasoning_effort": 3}, "generation.reasoning_effort"),
                     ({"reasoning_effort": " "}, "generation.reasoning_effort")):
        with pytest.raises(ConfigError, match=f"cfg.yaml: key {key}"):
            R.validate_generation(bad, "cfg.yaml")


def test_a_family_that_cannot_think_refuses_reasoning_on():
    none, think = R.FORMATS["none"], R.FORMATS["think"]
    with pytest.raises(ConfigError, match=r"generation.reasoning.*family smollm2.*cannot think"):
        R.check_family(none, R.Settings("on"), "smollm2")
    R.check_family(none, R.Settings("auto"), "smollm2")
    R.check_family(none, R.Settings("off"), "smollm2")
    R.check_family(think, R.Settings("on"), "qwen3")
    with pytest.raises(ConfigError, match=r"family kimi3.*does not\s+split.*reasoning_format"):
        R.check_family(R.FORMATS["other"], R.Settings("off"), "kimi3")


def test_template_kwargs_as_the_server_passes_them():
    think, none, gemma = R.FORMATS["think"], R.FORMATS["none"], R.FORMATS["gemma4"]
    preserve = {"preserve_reasoning": True, "preserve_thinking": True, "clear_thinking": False,
                "truncate_history_thinking": False, "drop_thinking": False}
    assert R.template_kwargs(think, R.Settings("on")) == {"enable_thinking": True, **preserve}
    assert R.template_kwargs(think, R.Settings("off")) == {"enable_thinking": False, **preserve}
    # auto: whether the template supports thinking, not the template's own default
    assert R.template_kwargs(think, R.Settings("auto"))["enable_thinking"] is True
    assert R.template_kwargs(gemma, R.Settings("auto"))["enable_thinking"] is True
    assert R.template_kwargs(none, R.Settings("auto"))["enable_thinking"] is False
    kw = R.template_kwargs(R.FORMATS["harmony"], R.Settings("auto", "high"))
    assert kw["reasoning_effort"] == kw["reasoning_strength"] == "high"
    assert "reasoning_effort" not in R.template_kwargs(think, R.Settings("auto"))


def _render(template: str, messages: list[dict], agp: bool, kwargs: dict) -> str:
    """As Engine.chat_prompt renders (llama-cpp-python's Jinja2ChatFormatter), BOS/EOS as text."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    fmt = Jinja2ChatFormatter(template=template, bos_token="<s>", eos_token="</s>", add_generation_prompt=agp)
    return fmt(messages=messages, **kwargs).prompt


def _state(template: str, fmt: R.Format, settings: R.Settings, messages: list[dict]) -> R.PromptState:
    kw = R.template_kwargs(fmt, settings)
    gp = R.generation_prompt(_render(template, messages, True, kw), _render(template, messages, False, kw))
    return R.prompt_state(gp, fmt)


USER = [{"role": "user", "content": "Hey there!"}]  # test-chat.cpp's message_user


def test_kwargs_reach_the_real_templates(vendored_templates):
    t = vendored_templates
    qwen3, r1, oss, gemma = (t["Qwen-Qwen3-0.6B"], t["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"],
                             t["openai-gpt-oss-120b"], t["google-gemma-4-31B-it"])
    think = R.FORMATS["think"]
    # Qwen3: thinking off writes an empty closed block (the reply is all answer); on leaves it to the model
    off = R.template_kwargs(think, R.Settings("off"))
    assert _render(qwen3, USER, True, off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert _state(qwen3, think, R.Settings("off"), USER) == (False, True)
    assert _state(qwen3, think, R.Settings("on"), USER) == (False, False)
    # DeepSeek-R1's template opens <think> itself: the reply starts inside the thinking
    assert _state(r1, think, R.Settings("auto"), USER) == (True, False)
    # gpt-oss: the effort reaches its system message
    harmony = R.FORMATS["harmony"]
    for level in ("low", "high"):
        assert f"Reasoning: {level}" in _render(oss, USER, True, R.template_kwargs(harmony, R.Settings("auto", level)))
    # Gemma 4 defaults to no thinking; the server's auto (and so ours) turns it on
    gem = R.FORMATS["gemma4"]
    assert _render(gemma, USER, True, {}).endswith("<|channel>thought\n<channel|>")
    assert not _render(gemma, USER, True, R.template_kwargs(gem, R.Settings("auto"))).endswith("<channel|>")


# -- the split -------------------------------------------------------------------------------------

def _cases(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())["cases"]


@pytest.mark.parametrize("case", _cases("llama_cpp_parse_cases.json"),
                         ids=lambda c: f"{c['template']}:{c['source_line']}")
def test_split_equals_llama_cpp_parser_cases(case, vendored_templates):
    """llama.cpp's expected parse of each case, through the real template's generation prompt
    (rendered here with the case's enable_thinking) and the split; compared as llama.cpp compares
    (both parts stripped)."""
    template = vendored_templates[case["template"]]
    fmt = R.detect(template)
    assert fmt.kind in (R.TAGS, R.HARMONY)
    state = _state(template, fmt, R.Settings("on" if case["enable_thinking"] else "off"), USER)
    s = R.split(case["input"], fmt, *state)
    assert (s.reasoning.strip(), s.answer.strip()) == (case["reasoning"].strip(), case["content"].strip())
    assert s.closed is (not case["is_partial"])


@pytest.mark.parametrize("case", _cases("recorded_replies.json"), ids=lambda c: c["id"])
def test_split_recorded_replies(case):
    s = R.split(case["text"], R.FORMATS[case["format"]], case["started_in_thinking"],
                case.get("thinking_in_prompt", False))
    assert s == (case["reasoning"], case["answer"], case["closed"])


def test_harmony_messages_keep_the_tool_call():
    text = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>")
    msgs = R.harmony_messages(text)
    assert [(m.channel, m.recipient, m.body, m.ended) for m in msgs] == [
        ("analysis", "", "Need the weather.", True),
        ("commentary", "functions.get_weather", "{\"city\":\"Paris\"}", True)]


# -- the reasoning budget (common/reasoning-budget.cpp) --------------------------------------------

def _force_span(sampler: R.ReasoningBudget, sequence: list[int]) -> tuple[int | None, int | None]:
    """tests/test-reasoning-budget.cpp's harness: at each step, is a token forced (apply) before the
    step's token is accepted; the first and last forced step, stopping when forcing stops."""
    start = end = None
    for i, tok in enumerate(sequence):
        forced = sampler.forced()
        sampler.accept(tok)
        if forced is not None:
            start = i if start is None else start
            end = i
        elif start is not None:
            break
    return start, end


# (name, sequence, start_seqs, end_seqs, forced, budget, initial state, force start, force end)
# from main() of tests/test-reasoning-budget.cpp (Tests 1-8)
BUDGET_CASES = [
    ("natural end before budget exhausted", [100, 50, 51, 101, 52], [[100]], [[101]], [102], 5, R.IDLE, None, None),
    ("budget exhausted forcing", [100, 50, 51, 52, 53], [[100]], [[101]], [102, 101], 2, R.IDLE, 3, 4),
    ("activate immediately budget=0", [100, 50, 51, 52], [[100]], [[101]], [102, 101], 0, R.COUNTING, 0, 1),
    ("no start/end configured", [50, 51, 52, 53], [[]], [[]], [102], 2, R.IDLE, None, None),
    ("activate immediately with budget", [50, 51, 52, 53], [[100]], [[101]], [102, 101], 2, R.COUNTING, 2, 3),
    ("multi-block re-arms budget after DONE", [100, 50, 101, 100, 60, 61, 62, 63], [[100]], [[101]], [102, 101], 2,
     R.IDLE, 6, 7),
    ("multiple start sequences", [110, 111, 50, 51, 52, 53], [[100], [110, 111]], [[101]], [102, 101], 2, R.IDLE, 4, 5),
    ("multiple end sequences", [100, 50, 103, 104, 52], [[100]], [[101], [103, 104]], [102, 101], 5, R.IDLE, None, None),
]


@pytest.mark.parametrize("case", BUDGET_CASES, ids=lambda c: c[0])
def test_budget_as_llama_cpp_tests_it(case):
    _, seq, starts, ends, forced, budget, state, want_start, want_end = case
    got_start, got_end = _force_span(R.ReasoningBudget(starts, ends, forced, budget, state), seq)
    assert got_start == want_start
    if want_end is not None:
        assert got_end >= want_end  # the C++ test checks that forcing did not end early


@pytest.mark.parametrize("budget", [0, 1, 2, 5, 17])
def test_budget_forces_after_exactly_n_thinking_tokens(budget):
    think, end, msg = 100, 101, [7, 8]
    b = R.ReasoningBudget.for_server([think], [[end]], budget, message=msg)
    b.accept(think)
    n_free = 0
    while b.forced() is None:
        assert b.state == R.COUNTING
        b.accept(500 + n_free)  # a thinking token the model chose
        n_free += 1
        assert n_free <= budget
    assert n_free == budget
    out = []
    while (t := b.forced()) is not None:
        out.append(t)
        b.accept(t)
    assert out == msg + [end] and b.state == R.DONE
    assert b.end_sequences[b.end_match] == (end,)


def test_budget_unlimited_never_forces():
    b = R.ReasoningBudget.for_server([100], [[101]], -1)
    b.prefill([1, 2, 100])
    for t in range(10_000):
        assert b.forced() is None
        b.accept(1000 + t)
    assert b.state == R.COUNTING


def test_budget_prefill_counts_the_prompts_tokens_after_the_start():
    """A template that opens "<think>\\n" in the generation prompt: the server feeds those tokens
    to the sampler first, so the "\\n" token is one of the budget's."""
    b = R.ReasoningBudget.for_server([100], [[101]], 3)
    b.prefill([9, 10, 100, 198])  # "<|im_start|>", "assistant", "<think>", "\n"
    assert b.state == R.COUNTING and b.remaining == 2
    b.accept(50)
    assert b.forced() is None
    b.accept(51)
    assert b.forced() == 101


def test_budget_waits_for_a_whole_utf8_character():
    pieces = {50: b"a", 51: "é".encode()[:1], 52: "é".encode()[1:], 53: b"b"}
    b = R.ReasoningBudget([[100]], [[101]], [101], 2, utf8_complete=lambda t: R.utf8_is_complete(pieces[t]))
    b.accept(100)
    b.accept(50)
    b.accept(51)  # the budget is spent on half a character
    assert b.state == R.WAITING_UTF8 and b.forced() is None
    # llama.cpp judges each token's piece alone: the piece that finishes the "é" is continuation
    # bytes only, which common_utf8_is_complete calls incomplete, so it waits one more token
    b.accept(52)
    assert b.state == R.WAITING_UTF8 and b.forced() is None
    b.accept(53)
    assert b.state == R.FORCING and b.forced() == 101


def test_budget_clone_force_and_end_match():
    """test_reasoning_budget_clone_mid_counting / _mid_forcing, _force_manual, _end_match."""
    b = R.ReasoningBudget([[100]], [[101]], [102, 101], 2)
    b.accept(100)
    b.accept(50)
    c = copy.deepcopy(b)
    c.accept(51)
    assert c.forced() == 102 and b.forced() is None
    f = R.ReasoningBudget([[100]], [[101]], [102, 101], 0, R.FORCING)
    f.accept(102)
    assert copy.deepcopy(f).forced() == 101
    assert not f.force() and f.forced() == 101  # FORCING: no rewind
    m = R.ReasoningBudget([[100]], [[101]], [102, 101], 5)
    assert not m.force()  # IDLE
    m.accept(100)
    m.accept(50)
    assert m.force() and [m.forced()] == [102]
    m.accept(102)
    m.accept(101)
    assert m.state == R.DONE and not m.force()
    e = R.ReasoningBudget([[100]], [[101], [103, 104]], [102, 101], 5)
    for t in (100, 50, 103, 104):
        e.accept(t)
    assert e.end_sequences[e.end_match] == (103, 104)
    e.accept(100)
    assert e.end_match == -1 and e.state == R.COUNTING
    o = R.ReasoningBudget([[100]], [[104], [103, 104]], [102, 104], 5)
    for t in (100, 103, 104):
        o.accept(t)
    assert o.end_sequences[o.end_match] == (103, 104)  # the longest ending here wins
    g = R.ReasoningBudget([[100]], [[101], [103, 104]], [102, 103, 104], 0, R.FORCING)
    for t in (102, 103):
        g.accept(t)
        assert g.end_match == -1
    g.accept(104)
    assert g.end_sequences[g.end_match] == (103, 104)
    h = R.ReasoningBudget([[100]], [[101], [103, 104]], [102], 0, R.FORCING)
    h.accept(102)
    assert h.state == R.DONE and h.end_match == -1


def test_utf8_is_complete_as_llama_cpp():
    """test_utf8_boundary_detection of tests/test-reasoning-budget.cpp."""
    for ok in (b"hello", b"", b"\xC2\xA0", b"\xE2\x80\x9C", b"\xF0\x9F\x98\x80", b"abc\xC3\xA9", b"hello\xC3\xA9"):
        assert R.utf8_is_complete(ok), ok
    for bad in (b"\xC2", b"\xE2\x80", b"\xE2", b"\xF0\x9F\x98", b"\xF0\x9F", b"\xF0", b"\x80", b"hello\xC3"):
        assert not R.utf8_is_complete(bad), bad


# -- Engine.chat_prompt with kwargs ----------------------------------------------------------------

def _with_template(src: Path, dst: Path, template: str) -> Path:
    """A copy of a GGUF with another chat template (the tensors' bytes as they are)."""
    import provenance_util

    return provenance_util.mutate(src, dst, {"tokenizer.chat_template": template})


def test_engine_chat_prompt_with_template_kwargs(smollm_source, vendored_templates, tmp_path):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from quantladder.engine import Engine, EngineSettings

    qwen3 = vendored_templates["Qwen-Qwen3-0.6B"]
    path = _with_template(smollm_source, tmp_path / "smollm2-qwen3-template.gguf", qwen3)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Two and two."},
            {"role": "user", "content": "And 3+3?"}]
    think = R.FORMATS["think"]
    with Engine(str(path), EngineSettings(n_ctx=256, n_threads=1)) as eng:
        assert eng.chat_template == qwen3
        plain = eng.chat_prompt(msgs)
        bos = eng.detokenize_bytes([eng.token_bos()]).decode() if eng.token_bos() >= 0 else ""
        eos = eng.detokenize_bytes([eng.token_eos()]).decode() if eng.token_eos() >= 0 else ""
        for agp in (True, False):
            for mode in ("on", "off"):
                kw = R.template_kwargs(think, R.Settings(mode))
                want = Jinja2ChatFormatter(template=qwen3, bos_token=bos, eos_token=eos,
                                           add_generation_prompt=agp)(messages=msgs, **kw).prompt
                assert eng.chat_prompt(msgs, add_generation_prompt=agp, template_kwargs=kw) == want
        off = eng.chat_prompt(msgs, template_kwargs=R.template_kwargs(think, R.Settings("off")))
        on = eng.chat_prompt(msgs, template_kwargs=R.template_kwargs(think, R.Settings("on")))
        assert off.endswith("<think>\n\n</think>\n\n") and not on.endswith("</think>\n\n") and on != off
        assert eng.chat_prompt(msgs) == plain  # a call with kwargs leaves the plain rendering as it was
        assert eng.chat_prompt(msgs, template_kwargs={}) == plain
        with pytest.raises(ConfigError, match="add_generation_prompt"):
            eng.chat_prompt(msgs, template_kwargs={"add_generation_prompt": False})
