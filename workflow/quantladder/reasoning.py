"""Models that think: a family's reasoning format, the template kwargs of ``reasoning``, the split of
a reply into its thinking and its answer, and the reasoning-budget forcing, each as llama.cpp's
server does it (docs/thinking.md).

Everything here follows the llama.cpp that llama-cpp-python 0.3.36 vendors (``vendor/llama.cpp`` of
its sdist), read where it is cited:

- the *format* (:func:`detect`): which markers a family's thinking is written in, read from its chat
  template text (llama.cpp finds them by rendering the template and diffing, common/chat-diff-analyzer.cpp,
  or by a specialised parser, common/parsers/*.cpp; here a fixed rule over the template's text,
  checked against a table written by reading each of the 71 vendored templates);
- the *kwargs* (:func:`template_kwargs`): what ``llama-server --reasoning on|off|auto`` and
  ``--reasoning-effort`` put into the template's context (common/arg.cpp, tools/server/server-context.cpp,
  common/chat.cpp ``common_chat_template_direct_apply_impl``);
- the *split* (:func:`split`): ``reasoning_content`` vs ``content`` as the server's PEG parser takes
  them apart (common/chat-auto-parser-generator.cpp, common/parsers/gpt-oss.cpp, common/peg-parser.cpp);
- the *budget* (:class:`ReasoningBudget`): common/reasoning-budget.cpp's sampler, the state machine
  behind ``--reasoning-budget N``, as a pure class over token ids.

A declaration on the ground floor: no llama.cpp, no model; the engine renders (``Engine.chat_prompt``
with ``template_kwargs``) and generates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Sequence

from .errors import ConfigError
from .schemas import family_settings

# -- formats ---------------------------------------------------------------------------------------

NONE, TAGS, HARMONY, OTHER = "none", "tags", "harmony", "other"


@dataclass(frozen=True)
class Format:
    """How a family writes its thinking. ``kind``: ``tags`` (a block between ``start`` and ``end``
    before the answer), ``harmony`` (gpt-oss's channels), ``none`` (the template cannot think) or
    ``other`` (it thinks in markers this module does not take apart: refused, see :func:`check_family`).
    ``wrappers``: (open, close) pairs the answer may sit in (Command-R7B's ``<|START_RESPONSE|>``),
    taken off as the server's parser takes them off."""

    name: str
    kind: str
    start: str = ""
    end: str = ""
    wrappers: tuple[tuple[str, str], ...] = ()
    note: str = ""

    @property
    def thinks(self) -> bool:
        return self.kind != NONE


# The tag formats, in the order detection tries them (a more specific marker before ``<think>``,
# which several of them contain as text). The tags are llama.cpp's own: its parsers' and
# server's thinking_start_tag / thinking_end_tags (common/parsers/*.cpp, common/chat.cpp).
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("none", NONE, note="the template has no thinking block: the whole reply is the answer"),
    Format("harmony", HARMONY, "<|channel|>analysis<|message|>", "<|end|>",
           note="gpt-oss: the analysis channel, then <|start|>assistant<|channel|>final<|message|>"),
    Format("seed", TAGS, "<seed:think>", "</seed:think>", note="ByteDance Seed-OSS"),
    Format("minimax_m3", TAGS, "<mm:think>", "</mm:think>", note="MiniMax-M3 (common/parsers/minimax-m3.cpp)"),
    Format("command", TAGS, "<|START_THINKING|>", "<|END_THINKING|>",
           wrappers=(("<|START_RESPONSE|>", "<|END_RESPONSE|>"), ("<|START_TEXT|>", "<|END_TEXT|>")),
           note="Cohere Command-R7B / Command A (Cohere2MoE)"),
    Format("mistral", TAGS, "[THINK]", "[/THINK]", note="Magistral / Ministral reasoning (common/parsers/ministral3.cpp)"),
    Format("gemma4", TAGS, "<|channel>thought", "<channel|>", note="Gemma 4 (common/parsers/gemma4.cpp)"),
    Format("think", TAGS, "<think>", "</think>",
           note="Qwen3, QwQ, DeepSeek-R1 and its distills, DeepSeek V3.1+, GLM-4.x, Kimi-K2-Thinking, "
                "MiniMax-M2, Nemotron, SmolLM3, granite-3.3, ..."),
    Format("other", OTHER,
           note="thinks (the template handles reasoning) in markers this module does not split"),
)}

# Text that shows a template handles thinking when none of the markers above is in it: the family
# thinks, but not in a format this module splits (Kimi-K3's open_tag('think'), tencent-Hy3's
# '<think{}>'.format(...), Apriel's "[BEGIN FINAL RESPONSE]", Apertus's <|inner_prefix|>, Solar
# Open's <|think|> message, muse-glimmer's "to=self" channel).
_THINKING_WORDS = ("reasoning_content", "enable_thinking", "reasoning_effort", "thinking_effort",
                   "reasoning_strength", "thinking_mode", "<|think|>", "<|inner_prefix|>",
                   "[BEGIN FINAL RESPONSE]")


def detect(template: str | None) -> Format:
    """A family's reasoning format from its chat template's text.

    The rule, first match wins: (1) ``<|channel|>`` with ``analysis`` is harmony (gpt-oss; llama.cpp's
    own test for its gpt-oss handler is ``<|channel|>`` in the source, common/chat.cpp); (2) a tag
    format whose closing marker is in the text, tried in the order of :data:`FORMATS` (a template
    that handles the closing tag of earlier turns expects the model to write it, even where the
    opening one is only in the model's reply, as LFM2.5-Instruct's); (3) ``other`` where the text
    still handles reasoning (:data:`_THINKING_WORDS`); (4) ``none``."""
    t = template or ""
    if "<|channel|>" in t and "analysis" in t:
        return FORMATS["harmony"]
    for f in FORMATS.values():
        if f.kind == TAGS and f.end in t:
            return f
    if any(w in t for w in _THINKING_WORDS):
        return FORMATS["other"]
    return FORMATS["none"]


def format_named(name: str, where: str) -> Format:
    """A format named in config (``where``: the key), with the known names on an unknown one."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(f"{where}: unknown reasoning format {name!r} (known: {', '.join(FORMATS)})") from None


def family_format(template: str | None, named: str | None = None, where: str = "reasoning_format") -> Format:
    """The format a family generates with: the one named in config, else the detected one."""
    return format_named(named, where) if named else detect(template)


# -- settings and kwargs ---------------------------------------------------------------------------

REASONING_MODES = ("off", "on", "auto")


class Settings(NamedTuple):
    reasoning: str = "auto"             # off | on | auto (the template's default, as the server decides it)
    reasoning_effort: str | None = None  # passed to the template; None: not passed
    reasoning_budget: int = -1           # thinking tokens before the end is forced; -1 unlimited, 0 at once
    reasoning_budget_message: str = ""   # forced before the end tag (llama-server's --reasoning-budget-message)


# The generation keys of the reasoning settings (config/config.schema.yaml): a config that sets none
# of them keeps the generation keys it had (they enter the key only when set).
KEYS = ("reasoning", "reasoning_effort", "reasoning_budget", "reasoning_budget_message")


def validate_generation(section: dict | None, source: str = "config") -> Settings:
    """The reasoning keys of a ``generation:`` section, checked and with their defaults; a bad value
    is a ConfigError naming the key. The schema declares the keys without defaults, so that a config
    that does not set them keeps the generation keys it had (docs/thinking.md, "Config")."""
    g = section or {}
    mode = g.get("reasoning")
    if mode is None:
        mode = "auto"
    if isinstance(mode, bool):  # YAML reads a bare on/off as a boolean
        mode = "on" if mode else "off"
    if mode not in REASONING_MODES:
        raise ConfigError(f"{source}: key generation.reasoning: {mode!r} is not one of {', '.join(REASONING_MODES)}")
    effort = g.get("reasoning_effort")
    if effort is not None and (not isinstance(effort, str) or not effort.strip()):
        raise ConfigError(f"{source}: key generation.reasoning_effort: {effort!r} is not a level name "
                          "(a string such as low, medium, high; null leaves the template's default)")
    if effort == "default":  # llama-server's --reasoning-effort default: the template's own
        effort = None
    budget = g.get("reasoning_budget")
    if budget is None:
        budget = -1
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < -1:
        raise ConfigError(f"{source}: key generation.reasoning_budget: {budget!r} is not a number of thinking "
                          "tokens (an integer >= 0, or -1 for unlimited)")
    message = g.get("reasoning_budget_message")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise ConfigError(f"{source}: key generation.reasoning_budget_message: {message!r} is not text")
    return Settings(mode, effort, budget, message)


def check_family(fmt: Format, settings: Settings, family: str, source: str = "config") -> None:
    """Refuse a setting the family's template cannot honour, naming the family and the key."""
    if fmt.kind == OTHER:
        raise ConfigError(
            f"{source}: family {family}: its chat template handles thinking in markers quantladder does not "
            "split (docs/thinking.md, the 'other' formats): its thinking would be scored as its answer; "
            f"name its format (families.{family}.reasoning_format) if it is one of "
            f"{', '.join(n for n, f in FORMATS.items() if f.kind in (TAGS, HARMONY))}")
    if fmt.kind == NONE and settings.reasoning == "on":
        raise ConfigError(f"{source}: key generation.reasoning: 'on', but family {family}'s chat template cannot "
                          "think (reasoning format none): set reasoning to auto or off, or name the family's "
                          f"format (families.{family}.reasoning_format) if its model thinks anyway")


def check_rendering(fmt: Format, template: str | None, family: str, source: str = "config") -> None:
    """Refuse a family, whatever its format, whose template cannot be rendered as llama-server renders
    it (:func:`server_refusal`): its prompts would differ from the server's in silence."""
    why = server_refusal(template)
    if why:
        raise ConfigError(f"{source}: family {family}: {why}; it is refused for generation")


def template_kwargs(fmt: Format, settings: Settings) -> dict:
    """The variables llama-server adds to the template's context for these settings, beyond the
    messages, tools, BOS/EOS and add_generation_prompt (common/chat.cpp, direct_apply):

    - ``enable_thinking``, always: ``--reasoning on`` true, ``off`` false, ``auto`` whether the
      template supports thinking (server-context.cpp: ``enable_reasoning != 0 &&
      template_supports_thinking``), which is whether its format thinks. So ``auto`` is not "pass
      nothing": a template whose own default is off (Gemma 4's ``enable_thinking | default(false)``)
      thinks under the server's auto, and here too.
    - ``preserve_reasoning`` true and its four aliases (``preserve_thinking`` true, ``clear_thinking``,
      ``truncate_history_thinking``, ``drop_thinking`` false; common/jinja/caps.cpp): the server's
      default since ``--reasoning-preserve`` was added (common/arg.cpp: set when not given).
    - ``reasoning_effort`` and its alias ``reasoning_strength`` when an effort is set
      (``--reasoning-effort LEVEL``; ``default`` passes none).

    The dates the server also adds (``datetime``, ``date_string``: today) are left out: a point's
    prompt must not change with the day it runs (docs/thinking.md, "Rendering")."""
    if settings.reasoning == "on":
        enable = True
    elif settings.reasoning == "off":
        enable = False
    else:
        enable = fmt.thinks and fmt.kind != OTHER
    kw: dict = {"enable_thinking": enable, "preserve_reasoning": True, "preserve_thinking": True,
                "clear_thinking": False, "truncate_history_thinking": False, "drop_thinking": False}
    if settings.reasoning_effort:
        kw["reasoning_effort"] = settings.reasoning_effort
        kw["reasoning_strength"] = settings.reasoning_effort
    return kw


# -- rendering as llama-server renders -------------------------------------------------------------
# Every chat prompt is rendered as llama-server renders it, by one renderer (:func:`render`), whether
# the family can think or not: what the server does to the template's source and to the messages
# before its template sees them is done here too (tools/server/server-common.cpp
# ``oaicompat_chat_params_parse``, common/chat.cpp ``common_chat_templates_init`` and
# ``common_chat_templates_apply_jinja``, the specialised handlers of common/parsers/*.cpp), and the
# template's context is the server's (its kwargs for the family's settings: :func:`template_kwargs`).
# Checked byte for byte against the server's ``/apply-template`` on every vendored template
# (tests/test_template_server_parity.py, benchmarks/template_parity.py, docs/thinking.md "Rendering
# parity with llama-server"); a template that cannot be rendered as the server renders it is refused
# (:func:`server_refusal`), never rendered otherwise.

# The renderer's version: it enters every task point's generation key (quantladder.manifest.spec), so
# that replies made from prompts rendered by an earlier renderer are made again rather than read as
# valid. 1: the plain formatter call for families that cannot think, llama-server's rendering for the
# others; 2: llama-server's rendering for every family (its message rewrites, its context, the special
# tokens' BOS/EOS texts), templates that read the server's date refused.
RENDERER_VERSION = 2

def server_handler(template: str) -> str | None:
    """Which of llama.cpp's specialised handlers llama-server gives a template, by the same tests
    of its text in the same order (common/chat.cpp ``common_chat_try_specialized_template``); None
    for the differential autoparser. Only the first match counts: a template that a test before
    LFM2's catches never gets LFM2's message rewrite."""
    t = template

    def has(*needles: str) -> bool:
        return all(n in t for n in needles)

    if has("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]") and "[CALL_ID]" not in t:
        return "ministral_3"
    if "<|channel|>" in t:
        return "gpt_oss"
    rules = (("muse_glimmer", has("<atem:function_calls>", "<|eom|>")),
             ("functionary_v3_2", has(">>>all", ">>>${recipient}")),
             ("kimi_k2", has("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),
             ("kimi_k3", has("<|open|>", "<|close|>", "<|end_of_msg|>")),
             ("ling3", has("<role>ASSISTANT</role>", "<arg_key>")),
             ("cohere2moe", has("<|START_TEXT|>", "<|START_ACTION|>")),
             ("lfm2", has("<|tool_list_start|>", "<|tool_list_end|>")),
             ("lfm2_5", has("List of tools: [") and "<|tool_list_start|>" not in t),
             ("gigachat_v3", has("<|role_sep|>", "<|message_sep|>") and "<|function_call|>" not in t),
             ("minimax_m3", has("]<]minimax[>[", "<tool_call>", "<invoke name=")),
             ("deepseek_v3_2", has("dsml_token", "DSML") and ("function_calls" in t or "tool_calls" in t)),
             ("gemma4", "'<|tool_call>call:'" in t),
             ("minicpm5", has("Tool usage guidelines:", '<function name="', '<param name="')),
             ("qwen3_coder", has("<tool_call>", "<function=", "<parameter=")
              and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in t))
    return next((name for name, hit in rules if hit), None)


# The two patches llama-server makes to a template's source before it renders anything
# (common/chat.cpp ``common_chat_templates_init``, "temporary" fixes there): a raise that gpt-oss's
# template makes on an assistant content holding channel markers, and one that Mistral's makes on an
# assistant turn with neither content nor tool calls, are turned off.
_SOURCE_PATCHES = (
    ("<|channel|>", "in message.content or",
     '{%- if "<|channel|>analysis<|message|>" in message.content or '
     '"<|channel|>final<|message|>" in message.content %}',
     "{%- if false %}"),
    ("[TOOL_CALLS]", "if (message['content'] is none or",
     "{%- if (message['content'] is none or message['content'] == '' or message['content']|length == 0) and "
     "(message['tool_calls'] is not defined or message['tool_calls'] is none or "
     "message['tool_calls']|length == 0) %}",
     "{%- if false %}"),
)

# Context variables llama-server fills that this renderer leaves out on purpose (the day the server
# runs: common/chat.cpp ``common_chat_extra_context``): a template that reads them cannot render as
# the server does, and is refused for generation (:func:`setup_for`, ``Engine.chat_prompt``).
_SERVER_DATE_VARIABLES = ("date_string", "datetime")


def server_source(template: str) -> str:
    """The template's source as llama-server renders it (its two source patches applied)."""
    for marker, found, old, new in _SOURCE_PATCHES:
        if marker in template and found in template:
            template = template.replace(old, new)
    return template


_DATE_REFUSAL: dict[str, bool] = {}
_DATE_PROBES = ([{"role": "user", "content": "QL_DATE_PROBE"}],
                [{"role": "system", "content": "QL_DATE_PROBE_SYSTEM"}, {"role": "user", "content": "QL_DATE_PROBE"}])


def _reads_server_date(template: str) -> bool:
    """Whether the template renders otherwise with the date variables llama-server fills
    (common/chat.cpp ``common_chat_extra_context``: ``date_string`` "%d %b %Y", ``datetime`` "%b %d %Y",
    today) than without them: rendered both ways on a user turn, and on a system and a user turn. A
    template that falls back to today's date itself (Llama 3.2's ``strftime_now``) renders the same;
    one whose fallback is a fixed date (Llama 3.1's "26 Jul 2024") or that fails without them
    (firefunction v2) does not."""
    if template not in _DATE_REFUSAL:
        import datetime as _dt

        now = _dt.datetime.now()
        dates = {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y")}
        try:
            f = formatter(template, "", "", True)
            differs = any(render_context(f, [dict(m) for m in msgs], {}) != render_context(f, [dict(m) for m in msgs],
                                                                                          dates)
                          for msgs in _DATE_PROBES)
        except Exception:  # noqa: BLE001 (the template's own error without them: it cannot render as the server)
            differs = True
        _DATE_REFUSAL[template] = differs
        while len(_DATE_REFUSAL) > 64:
            _DATE_REFUSAL.pop(next(iter(_DATE_REFUSAL)))
    return _DATE_REFUSAL[template]


def server_refusal(template: str | None) -> str | None:
    """Why a template cannot be rendered as llama-server renders it, or None. The one known case:
    it reads the date the server writes into every rendering (``date_string``/``datetime``, today's
    date there) and renders otherwise without it (:func:`_reads_server_date`); this renderer leaves
    them out, as a point's prompt must not change with the day it runs."""
    t = template or ""
    used = [v for v in _SERVER_DATE_VARIABLES if v in t]
    if used and _reads_server_date(t):
        return (f"its chat template reads {' and '.join(used)}, which llama-server fills with the date it runs "
                "on and quantladder leaves to the template's default (a point's prompt must not change with the "
                "day): it cannot render this template as the server does (docs/thinking.md, 'Rendering parity "
                "with llama-server')")
    return None


_SYSTEM_ROLE: dict[str, bool] = {}
_SYSTEM_MARKER = "QL_SYSTEM_ROLE_PROBE"


def supports_system_role(formatter, template: str) -> bool:
    """Whether the template renders a system message (llama.cpp's capability probe, common/jinja/caps.cpp:
    a system message then a user one, an empty ``tools`` list, the system content used or not).
    Here: rendered, and its content in the output; a template that raises on it (Gemma 2's) or
    drops it does not."""
    if template not in _SYSTEM_ROLE:
        try:
            out = render_context(formatter, [{"role": "system", "content": _SYSTEM_MARKER},
                                             {"role": "user", "content": "User message"}], {"tools": []})
            _SYSTEM_ROLE[template] = _SYSTEM_MARKER in out
        except Exception:  # noqa: BLE001 (a template's own error, whatever its kind)
            _SYSTEM_ROLE[template] = False
        while len(_SYSTEM_ROLE) > 64:
            _SYSTEM_ROLE.pop(next(iter(_SYSTEM_ROLE)))
    return _SYSTEM_ROLE[template]


def server_messages(template: str, messages: Sequence[dict], system_role: bool = True) -> list[dict]:
    """The messages as llama-server hands them to the template, in its order:

    - each message as the server rebuilds it from the request (common/chat.cpp
      ``common_chat_msg::to_json_oaicompat``): ``role``, ``content`` (``""`` for none), and
      ``reasoning_content``, a tool result's ``name`` and ``tool_call_id`` only when not empty;
      StepFun's contents and reasoning trimmed (``trim_all_content``, on its template's text);
    - ``developer`` as ``system``, except for gpt-oss (``map_developer_role_to_system``);
    - a leading system message merged into the next one (``system + "\\n" + content``), or dropped
      when alone, where the template has no system role (``system_message_not_supported``);
    - the specialised handler's rewrite: gpt-oss's and LFM2's templates read the reasoning as
      ``thinking`` (common/parsers/gpt-oss.cpp, lfm2.cpp), Ministral 3's system and assistant
      contents become blocks, a ``thinking`` one first (common/parsers/ministral3.cpp).

    Tool calls are not rendered here (:func:`render` refuses them), nor the tool results of the
    handlers that rewrite them (:data:`_TOOL_RESULT_REWRITES`)."""
    trim = "You have access to the following functions in JSONSchema format" in template
    out: list[dict] = []
    for m in messages:
        content = m.get("content")
        msg = {"role": m.get("role"), "content": content if content is not None else ""}
        if isinstance(msg["content"], str) and trim:
            msg["content"] = msg["content"].strip(_WS)
        reasoning = m.get("reasoning_content")
        if isinstance(reasoning, str) and trim:
            reasoning = reasoning.strip(_WS)
        if reasoning:
            msg["reasoning_content"] = reasoning
        for key in ("name", "tool_call_id"):  # a tool result's, as the server keeps them
            if isinstance(m.get(key), str) and m[key]:
                msg[key] = m[key]
        out.append(msg)
    handler = server_handler(template)
    if "<|channel|>" not in template:
        for msg in out:
            if msg["role"] == "developer":
                msg["role"] = "system"
    if not system_role and out and out[0]["role"] == "system":
        first = out.pop(0)
        if out:
            out[0]["content"] = f"{first['content']}\n{out[0]['content']}"
    if handler in ("gpt_oss", "lfm2", "lfm2_5"):
        for msg in out:
            if isinstance(msg.get("reasoning_content"), str):
                msg["thinking"] = msg["reasoning_content"]
    elif handler == "ministral_3":
        for i, msg in enumerate(out):
            if msg["role"] not in ("system", "assistant"):
                continue
            blocks = []
            if isinstance(msg.get("reasoning_content"), str):
                blocks.append({"type": "thinking", "thinking": msg["reasoning_content"]})
            if isinstance(msg["content"], str):
                blocks.append({"type": "text", "text": msg["content"]})
            out[i] = {k: v for k, v in msg.items() if k != "reasoning_content"}
            out[i]["content"] = blocks
    return out


def formatter(template: str, bos_token: str, eos_token: str, add_generation_prompt: bool, server: bool = True):
    """The compiled renderer of a template: llama-cpp-python's Jinja2ChatFormatter with the BOS/EOS
    texts, over the source as llama-server patches it (:func:`server_source`; ``server=False``: the
    source as it is, only to show what the patches change)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template=server_source(template) if server else template, bos_token=bos_token,
                               eos_token=eos_token, add_generation_prompt=add_generation_prompt)


# The specialised handlers that rewrite tool results before the template sees them (an older Gemma 4
# template's results folded into the assistant turn: common/parsers/gemma4.cpp; DeepSeek's DSML ones:
# common/parsers/deepseek-v3-2.cpp): a tool result for these is refused. Every other template gets the
# tool results as sent, rebuilt as the server rebuilds a message (:func:`server_messages`).
_TOOL_RESULT_REWRITES = ("gemma4", "deepseek_v3_2")


def render(fmt, template: str, messages: Sequence[dict], kwargs: dict | None = None, *, add_bos: bool = False,
           add_eos: bool = False) -> str:
    """One rendering on the generation path (``Engine.chat_prompt``), as llama-server renders it, for
    every family: the messages as it rewrites them (:func:`server_messages`) and its context (the
    kwargs: :func:`template_kwargs` of the family's settings; llama-server passes them to every
    template, one that cannot think included). ``fmt``: :func:`formatter` of ``template``. A template
    the server renders otherwise (:func:`server_refusal`) is refused. Tool calls and ``tools`` are
    refused: the server rewrites them per template capability (string arguments parsed to objects
    where the template takes objects) and its Jinja engine has what jinja2 lacks (``from_json``, a
    list's ``append``); no exam passes them. Tool results (``role: tool``, BFCL's multi-turn
    executions) go through as the server passes them, but for the handlers that rewrite them
    (:data:`_TOOL_RESULT_REWRITES`), which are refused. ``add_bos`` / ``add_eos``: the vocabulary adds BOS / EOS itself, and the server then cuts a
    leading BOS text / a trailing EOS text off the rendering (the tokens are the same: the engine
    adds no second BOS)."""
    kwargs = dict(kwargs or {})
    why = server_refusal(template)
    if why:
        raise ConfigError(why)
    if "tools" in kwargs or any(m.get("tool_calls") for m in messages):
        raise ConfigError("a chat prompt with tools or tool calls: quantladder does not render them as llama-server "
                          "does (docs/thinking.md, 'Rendering parity with llama-server')")
    if any(m.get("role") == "tool" for m in messages) and server_handler(template) in _TOOL_RESULT_REWRITES:
        raise ConfigError(f"a chat prompt with tool results, for a template llama-server gives its "
                          f"{server_handler(template)} handler, which rewrites them: quantladder does not render "
                          "them as the server does (docs/thinking.md, 'Rendering parity with llama-server')")
    msgs = server_messages(template, messages, supports_system_role(fmt, template))
    text = render_context(fmt, msgs, kwargs)
    if add_bos and fmt.bos_token and text.startswith(fmt.bos_token):
        text = text[len(fmt.bos_token):]
    if add_eos and fmt.eos_token and text.endswith(fmt.eos_token):
        text = text[:-len(fmt.eos_token)]
    return text


def render_context(fmt, messages: list[dict], kwargs: dict) -> str:
    """The template rendered with llama-server's context (common/chat.cpp
    ``common_chat_template_direct_apply_impl``): the messages, BOS/EOS, ``add_generation_prompt``
    only when true, the kwargs, and nothing else. The formatter's own call would add ``tools``,
    ``functions``, ``function_call`` and ``tool_choice`` as None, which a template that loops over
    ``tools`` unguarded (Hermes 2/3 Pro's tool_use templates, Command R+'s) cannot render; its
    compiled template is called directly instead (llama-cpp-python's environment and filters, its
    ``raise_exception`` and ``strftime_now``)."""
    def raise_exception(message: str):
        raise ValueError(message)

    ctx = {"messages": messages, "bos_token": fmt.bos_token, "eos_token": fmt.eos_token,
           "raise_exception": raise_exception, "strftime_now": fmt.strftime_now, **kwargs}
    if fmt.add_generation_prompt:
        ctx["add_generation_prompt"] = True
    return fmt._environment.render(**ctx)


def default_kwargs(template: str | None) -> dict:
    """The kwargs llama-server renders a template with when nothing is set (``--reasoning auto``): for
    an engine that renders without a family's setup (items made with the reference's tokenizer, a
    benchmark script)."""
    return template_kwargs(detect(template), Settings())


# -- where the reply starts ------------------------------------------------------------------------

def generation_prompt(with_prompt: str, without_prompt: str) -> str:
    """What the template writes for the assistant's turn: the rendering with the generation prompt
    past its common prefix with the rendering without (common/chat.cpp,
    ``common_chat_template_generation_prompt_impl``)."""
    n = 0
    m = min(len(with_prompt), len(without_prompt))
    while n < m and with_prompt[n] == without_prompt[n]:
        n += 1
    return with_prompt[n:]


class PromptState(NamedTuple):
    started_in_thinking: bool  # the generation prompt opens a thinking block: the reply starts inside it
    thinking_in_prompt: bool   # it holds a whole (closed) block: the reply is all answer


def prompt_state(gen_prompt: str, fmt: Format) -> PromptState:
    """Where a reply starts, from the generation prompt (:func:`generation_prompt`): the server's
    parser reads the generation prompt and the reply as one text (common/chat.cpp,
    ``common_chat_peg_parse``), so a template that opens ``<think>`` itself (DeepSeek-R1's, QwQ's,
    Qwen3.5's) has the reply start inside the thinking, and one that writes an empty closed block
    (Qwen3's with thinking off) has the reply be all answer."""
    if fmt.kind == TAGS:
        i = gen_prompt.find(fmt.start)
        if i < 0:
            return PromptState(False, False)
        closed = gen_prompt.find(fmt.end, i + len(fmt.start)) >= 0
        return PromptState(not closed, closed)
    if fmt.kind == HARMONY:
        i = gen_prompt.rfind(fmt.start)
        if i < 0:
            return PromptState(False, False)
        closed = gen_prompt.find(fmt.end, i) >= 0
        return PromptState(not closed, closed)
    return PromptState(False, False)


# -- the split -------------------------------------------------------------------------------------

class Split(NamedTuple):
    reasoning: str  # the thinking, whitespace at its ends taken off ("" when there was none)
    answer: str     # what the exam scores; "" when the thinking never closed
    closed: bool    # False: the thinking block never ended (the caller records thinking_cap)


_WS = " \t\n\r\f\v"


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker`` (llama.cpp's ``until`` stops
    before a delimiter that the input's end cuts off: common/peg-parser.cpp, PARTIAL_MATCH)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _unwrap(answer: str, fmt: Format) -> str:
    """The answer out of the family's response wrapper, when it is in one (an answer that does
    not open with a wrapper is kept as it is)."""
    rest = answer.lstrip(_WS)
    for opening, closing in fmt.wrappers:
        if rest.startswith(opening):
            body = rest[len(opening):]
            j = body.find(closing)
            return body if j < 0 else body[:j]
    return answer


def split(text: str, fmt: Format, started_in_thinking: bool = False, thinking_in_prompt: bool = False) -> Split:
    """Take a reply apart into its thinking and its answer, as llama-server's parser does with
    ``--reasoning-format auto`` (``deepseek``): the reasoning in ``reasoning_content``, the rest in
    ``content``.

    Tag formats (common/chat-auto-parser-generator.cpp ``analyze_reasoning::build_parser``):
    optionally the start tag, the thinking up to the first end tag, the end tag, then the answer.
    A reply that does not open with the start tag (after the generation prompt, ``started_in_thinking``
    False) has no thinking: all of it is the answer, a ``<think>`` later in it included. Where the
    prompt held a whole block already (``thinking_in_prompt``) the reply is all answer. A block that
    never ends is all thinking (the server's lenient parse: the reasoning runs to the end, no
    content): ``closed`` False, no answer. The whitespace at the seams (after the start tag, before
    and after the end tag) belongs to neither part: which of it the server keeps depends on the tags
    its template analysis finds, and llama.cpp's own tests compare both parts stripped.

    Harmony (common/parsers/gpt-oss.cpp): messages ``<|channel|>analysis<|message|>...<|end|>`` are
    reasoning (several are joined), ``<|channel|>commentary<|message|>...<|end|>`` preambles and the
    ``<|channel|>final<|message|>...`` message are the answer; a message to a recipient (``to=``: a
    tool call, or an unsolicited built-in) is no content (:func:`harmony_messages` keeps it)."""
    if fmt.kind == HARMONY:
        return _split_harmony(text, started_in_thinking)
    if fmt.kind != TAGS:
        return Split("", text, True)
    if thinking_in_prompt:
        return Split("", _unwrap(text, fmt), True)
    if started_in_thinking:
        body = text
    else:
        rest = text.lstrip(_WS)
        if not rest.startswith(fmt.start):
            return Split("", _unwrap(text, fmt), True)
        body = rest[len(fmt.start):]
    j = body.find(fmt.end)
    if j < 0:
        cut = _partial_suffix(body, fmt.end)
        return Split(body[:len(body) - cut].strip(_WS), "", False)
    answer = _unwrap(body[j + len(fmt.end):].lstrip(_WS), fmt)
    return Split(body[:j].strip(_WS), answer, True)


class HarmonyMessage(NamedTuple):
    header: str   # between <|start|>assistant and <|message|>: " to=functions.f<|channel|>commentary json"
    channel: str  # analysis | commentary | final | "" (none given)
    recipient: str  # the "to=" target ("" for none; a stray "to=assistant" is none)
    body: str
    ended: bool   # its <|end|> (or <|call|>) came


_H_START, _H_MSG, _H_END, _H_CHAN = "<|start|>assistant", "<|message|>", "<|end|>", "<|channel|>"


def harmony_messages(text: str, started_in_thinking: bool = False) -> list[HarmonyMessage]:
    """The assistant messages of a gpt-oss reply (its generation prompt ``<|start|>assistant`` is
    the first message's opening; ``started_in_thinking``: the prompt also opened the analysis
    channel)."""
    s = ("<|channel|>analysis<|message|>" if started_in_thinking else "") + text
    out: list[HarmonyMessage] = []
    pos = 0
    while pos <= len(s):
        m = s.find(_H_MSG, pos)
        if m < 0:
            break
        header = s[pos:m]
        body_start = m + len(_H_MSG)
        ends = [(j, mk) for mk in (_H_END, "<|call|>", "<|return|>") if (j := s.find(mk, body_start)) >= 0]
        j, mk = min(ends) if ends else (len(s), "")
        body = s[body_start:j]
        if not ends:
            body = body[:len(body) - max(_partial_suffix(body, _H_END), _partial_suffix(body, "<|call|>"))]
        # the channel is the last <|channel|> of the header (a stray "<|channel|>commentary to=assistant"
        # before the real one is skipped, as the server's parser skips it)
        chan, recipient = "", ""
        c = header.rfind(_H_CHAN)
        if c >= 0:
            chan = header[c + len(_H_CHAN):].split(" ", 1)[0].split("<|", 1)[0]
        for part in header.replace(_H_CHAN, " ").split():
            if part.startswith("to=") and part != "to=assistant":
                recipient = part[3:]
        out.append(HarmonyMessage(header, chan, recipient, body, bool(ends)))
        if not ends:
            break
        pos = j + len(mk)
        if s.startswith(_H_START, pos):
            pos += len(_H_START)
        else:
            break
    return out


def _split_harmony(text: str, started_in_thinking: bool) -> Split:
    msgs = harmony_messages(text, started_in_thinking)
    if not msgs:  # no channel at all: the server's parser fails on it; the text is all the model said
        return Split("", text, True)
    reasoning, answer = [], []
    closed = True
    for m in msgs:
        if m.recipient:
            continue  # a tool call or an unsolicited built-in: no content (the server's "unsolicited")
        if m.channel == "analysis":
            reasoning.append(m.body)
            closed = m.ended
        elif m.channel in ("commentary", "final"):
            answer.append(m.body)
    return Split("".join(reasoning).strip(_WS), "" if not closed else "".join(answer).strip(_WS), closed)


# -- the reasoning budget --------------------------------------------------------------------------

IDLE, COUNTING, WAITING_UTF8, FORCING, DONE = "idle", "counting", "waiting_utf8", "forcing", "done"
UNLIMITED = 2**31 - 1  # common/sampling.cpp: a budget < 0 is INT_MAX


class _Matcher:
    """The longest of ``seqs`` that ends at the token just fed, the history cleared after a match
    (reasoning-budget.cpp ``token_matcher``: an Aho-Corasick automaton reset to its root on a match).
    Empty and repeated sequences are dropped, as ``token_matcher::collect`` drops them."""

    def __init__(self, seqs: Iterable[Sequence[int]]):
        self.seqs: list[tuple[int, ...]] = []
        for s in seqs:
            t = tuple(int(x) for x in s)
            if t and t not in self.seqs:
                self.seqs.append(t)
        self._longest = max((len(s) for s in self.seqs), default=0)
        self._hist: list[int] = []

    def advance(self, token: int) -> int:
        if not self.seqs:
            return -1
        self._hist.append(int(token))
        del self._hist[:-self._longest]
        best, best_len = -1, 0
        for i, s in enumerate(self.seqs):
            if len(s) > best_len and len(s) <= len(self._hist) and tuple(self._hist[-len(s):]) == s:
                best, best_len = i, len(s)
        if best >= 0:
            self._hist.clear()
        return best

    def reset(self) -> None:
        self._hist.clear()


@dataclass
class ReasoningBudget:
    """common/reasoning-budget.cpp's sampler as a state machine over token ids: feed each token that
    enters the sequence with :meth:`accept` (the generation prompt's tokens first, as
    common/sampling.cpp feeds them); :meth:`forced` says the token the next step must produce
    (every other logit is -inf in llama.cpp), None when sampling is free.

    IDLE (waiting for a start sequence) -> COUNTING (each token after it spends one of ``budget``;
    an end sequence ends it: DONE) -> at zero, FORCING, or WAITING_UTF8 first while the last token
    left a UTF-8 character unfinished (``utf8_complete(token)`` False: llama.cpp judges each token's
    piece alone, so a piece of continuation bytes only counts as unfinished too) -> FORCING (``forced_tokens``,
    the message and the end sequence, one per step) -> DONE; a new start sequence in DONE re-arms
    it with a fresh budget. ``budget`` 0 forces at once; -1 is unlimited (``UNLIMITED``)."""

    start_seqs: Sequence[Sequence[int]]
    end_seqs: Sequence[Sequence[int]]
    forced_tokens: Sequence[int]
    budget: int
    initial_state: str = IDLE
    utf8_complete: Callable[[int], bool] | None = None  # None: every token completes (llama.cpp without a vocab)
    state: str = field(init=False)
    remaining: int = field(init=False)
    force_pos: int = field(init=False, default=0)
    end_match: int = field(init=False, default=-1)

    def __post_init__(self):
        self.budget = UNLIMITED if self.budget < 0 else int(self.budget)
        self.forced_tokens = tuple(int(t) for t in self.forced_tokens)
        self._start = _Matcher(self.start_seqs)
        self._end = _Matcher(self.end_seqs)
        self.remaining = self.budget
        state = self.initial_state
        if state == COUNTING and self.budget <= 0:  # promoted, as common_reasoning_budget_init_state does
            state = FORCING
        self.state = state

    @classmethod
    def for_server(cls, start: Sequence[int], ends: Sequence[Sequence[int]], budget: int,
                   message: Sequence[int] = (), utf8_complete: Callable[[int], bool] | None = None) -> ReasoningBudget:
        """As llama-server builds it (tools/server/server-schema.cpp): one start sequence (the
        template's thinking start tag, tokenized), the end tags, and the forced sequence
        ``message + first end tag``."""
        forced = tuple(message) + tuple(ends[0]) if ends else tuple(message)
        return cls([start], ends, forced, budget, IDLE, utf8_complete)

    @property
    def end_sequences(self) -> list[tuple[int, ...]]:
        return self._end.seqs

    def forced(self) -> int | None:
        if self.state != FORCING or self.force_pos >= len(self.forced_tokens):
            return None
        return self.forced_tokens[self.force_pos]

    def _arm(self) -> None:
        self.state, self.remaining = COUNTING, self.budget
        if self.remaining <= 0:
            self.state, self.force_pos = FORCING, 0

    def accept(self, token: int) -> None:
        token = int(token)
        if self.state == IDLE:
            if self._start.advance(token) >= 0:
                self._arm()
        elif self.state in (COUNTING, WAITING_UTF8):
            match = self._end.advance(token)
            if match >= 0:
                self.state, self.end_match = DONE, match
                return
            complete = True if self.utf8_complete is None else bool(self.utf8_complete(token))
            if self.state == WAITING_UTF8:
                if complete:
                    self.state, self.force_pos = FORCING, 0
                    self._end.reset()
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.state = FORCING if complete else WAITING_UTF8
                    self.force_pos = 0
                    self._end.reset()
        elif self.state == FORCING:
            match = self._end.advance(token)  # the end sequence inside the forced tokens is reported too
            self.force_pos += 1
            if self.force_pos >= len(self.forced_tokens):
                self.state, self.end_match = DONE, match
        elif self.state == DONE:
            if self._start.advance(token) >= 0:  # another thinking block: a fresh budget
                self._end.reset()
                self.end_match = -1
                self._arm()

    def prefill(self, tokens: Iterable[int]) -> None:
        """The generation prompt's tokens (common/sampling.cpp feeds them before the first step: a
        template that opens ``<think>\\n`` itself starts the reply COUNTING, its ``\\n`` spent).

        One departure from llama.cpp, at budget 0 only: the prompt's start tag promotes the sampler to
        FORCING inside the prompt, and llama.cpp's FORCING takes whatever token comes next as the next
        forced one, so the prompt's own ``\\n`` is counted as forced and the end tag is never whole
        (ggml-org/llama.cpp#28356: at budget 0 llama-server ends no thinking). A prompt token is not a
        token the sampler forced: here it is passed over, and the reply opens on the whole forced end —
        "0 = end at once", as the setting means (docs/thinking.md)."""
        for t in tokens:
            if (self.state == FORCING and self.force_pos < len(self.forced_tokens)
                    and int(t) != self.forced_tokens[self.force_pos]):
                continue
            self.accept(t)

    def force(self) -> bool:
        """Into FORCING now (``common_reasoning_budget_force``): only from COUNTING."""
        if self.state != COUNTING:
            return False
        self.state, self.force_pos = FORCING, 0
        self._end.reset()
        return True


def utf8_is_complete(piece: bytes) -> bool:
    """Whether a token's bytes end on a whole UTF-8 character (common/unicode.cpp
    ``common_utf8_is_complete``, as the budget sampler uses it)."""
    if not piece:
        return True
    for i in range(1, min(4, len(piece)) + 1):
        c = piece[-i]
        if (c & 0xC0) != 0x80:  # the last lead byte: are its continuation bytes all there?
            expected = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1
            return i >= expected
    return False


# -- a family's reasoning at generation ------------------------------------------------------------
# What the generate job does with the settings (docs/thinking.md, "Generating and scoring"): render
# with the kwargs, honour the budget while decoding (quantladder.engine), record the split with
# every reply, and hand the exams the answer alone (quantladder.scoring).

THINKING_CAP = "thinking_cap"  # the verdict's error_type of a reply that ended inside its thinking


def family_generation(cfg: dict, family: str | None) -> dict:
    """The generation section a family's replies are made with: the run's, with the family's own
    reasoning keys over it (``families.<f>.reasoning``: a thinking family beside families that cannot
    think, in one run)."""
    g = dict(cfg.get("generation") or {})
    own = (((cfg.get("families") or {}).get(family) or {}).get("reasoning") or {}) if family else {}
    g.update({k: v for k, v in own.items() if v is not None})
    return g


def items_reasoning(cfg: dict, family: str) -> dict:
    """The reasoning keys a family's items are built with (RULER keeps room in each item for the
    thinking): the run's with the family's own over them, as its replies are made (:func:`family_generation`),
    only the keys set. The items job reads them and the items key holds them, so changing the run's
    budget builds the items again rather than leaving them fitted to the old one."""
    g = family_generation(cfg, family)
    return {k: g[k] for k in KEYS if g.get(k) is not None}


def is_set(cfg: dict, family: str | None = None) -> bool:
    """Whether the config sets any reasoning key (or, with ``family``, names the family's format or
    sets its own keys): only then do the settings enter a point's generation key and refuse what a
    family cannot do."""
    g = family_generation(cfg, family)
    if any(g.get(k) is not None for k in KEYS):
        return True
    return bool(family and (((cfg.get("families") or {}).get(family) or {}).get("reasoning_format")))


@dataclass(frozen=True)
class Setup:
    """How one family generates: its format, the settings, and whether the config set them
    (``explicit``). Every family renders with the kwargs of its settings (``auto`` when nothing is
    set), as llama-server renders; a family whose format thinks in markers split here (``splits``)
    also decodes with the budget and records the split; a family that cannot think (or thinks in
    markers not split here) with nothing set decodes and records as before the keys existed."""

    family: str
    format: Format
    settings: Settings
    explicit: bool

    @property
    def splits(self) -> bool:
        return self.format.kind in (TAGS, HARMONY)

    @property
    def kwargs(self) -> dict:
        """The template's context for these settings, as llama-server gives it to every template
        (those that cannot think included: ``enable_thinking`` false there)."""
        return template_kwargs(self.format, self.settings)

    def record(self) -> dict:
        """What a generate job's meta keeps of it."""
        return {"family": self.family, "format": self.format.name, "explicit": self.explicit,
                "split": self.splits, **self.settings._asdict(), "template_kwargs": self.kwargs}


def setup_for(cfg: dict, family: str, template: str | None, source: str = "config") -> Setup:
    """The family's setup from the config and its chat template's text; a setting the family cannot
    honour is a ConfigError naming the family and the key (:func:`check_family`). A base model
    (``chat: false``) renders no template: the settings do not apply to it (format ``none``, nothing set)."""
    fam = family_settings((cfg.get("families") or {}).get(family))  # the ruler's items pass a partial one
    settings = validate_generation(family_generation(cfg, family), source)
    if not fam["chat"]:
        return Setup(family, FORMATS["none"], settings, False)
    fmt = family_format(template, fam.get("reasoning_format"),
                        where=f"{source}: key families.{family}.reasoning_format")
    explicit = is_set(cfg, family)
    if explicit:
        check_family(fmt, settings, family, source)
    check_rendering(fmt, template, family, source)
    return Setup(family, fmt, settings, explicit)


_TEMPLATES: dict[tuple, str | None] = {}


def planning_template(fam: dict) -> tuple[bool, str | None]:
    """The family's chat template as planning can read it without downloading anything: ``(True,
    text)`` from a local file (a ``path``, an installed ``package``, a hub file already in the cache,
    the first of ``parts``), ``(False, None)`` where the file is not on this machine yet (the
    generate job checks it then). Only the header is read."""
    from .gguf_meta import scan_header
    from .models import chat_template_text, locate_package_file, source_kind, source_settings

    if fam.get("chat_template"):  # written into the source's copy (models.write_chat_template): that one
        try:
            return True, chat_template_text(fam["chat_template"], "chat_template")[0]
        except Exception:  # not readable here: the job checks
            return False, None
    src = fam.get("source") or {}
    try:
        kind = source_kind(src)
        if kind == "parts":
            src = src["parts"][0]
            kind = source_kind(src)
        if kind == "path":
            from pathlib import Path

            path = Path(src["path"]).expanduser()
        elif kind == "package":
            path = locate_package_file(src["package"], source_settings(src)["file"])
        else:
            from huggingface_hub import try_to_load_from_cache

            hf = source_settings(src)["hf"]
            got = try_to_load_from_cache(hf.get("repo_id", ""), hf.get("filename", ""), revision=hf.get("revision"),
                                         repo_type=hf["repo_type"])
            if not isinstance(got, str):
                return False, None
            from pathlib import Path

            path = Path(got)
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _TEMPLATES:
            fields, _ = scan_header(path)
            t = fields.get("tokenizer.chat_template")
            _TEMPLATES[key] = t.decode() if isinstance(t, bytes) else t
        return True, _TEMPLATES[key]
    except Exception:  # not readable here (not downloaded, a part without the whole header): the job checks
        return False, None


def plan_check(cfg: dict, source: str = "config") -> None:
    """At planning (config validation, the DAG's build): every enabled chat family is checked against
    its template where the file is on this machine: a template that cannot be rendered as llama-server
    renders it is refused (:func:`check_rendering`), and a family whose config sets reasoning is
    checked against what its template can do (a hub file not fetched yet is checked by its generate
    job, with the same errors)."""
    if any(is_set(cfg, f) for f in cfg.get("families") or {}):
        validate_generation(cfg.get("generation"), source)
    for name, fam in (cfg.get("families") or {}).items():
        fam = family_settings(fam)
        if not fam["enabled"] or not fam["chat"]:
            continue
        found, template = planning_template(fam)
        if fam.get("reasoning_format") and is_set(cfg, name):
            setup_for(cfg, name, template if found else None, source)
        elif found:
            setup_for(cfg, name, template, source)


# -- one reply: what the engine honours and records ------------------------------------------------

@dataclass(frozen=True)
class ReplyPlan:
    """What the engine needs for one request of a thinking family: the format, where the reply
    starts (the generation prompt's state), the budget machine's token sequences (the start tag,
    the end tag, the forced message + end tag, all tokenized by the model's vocabulary) and the
    generation prompt's tokens it is prefilled with (common/sampling.cpp feeds them first)."""

    format: Format
    started_in_thinking: bool
    thinking_in_prompt: bool
    start: tuple[int, ...]
    ends: tuple[tuple[int, ...], ...]
    forced: tuple[int, ...]
    budget: int
    prefill: tuple[int, ...] = ()

    def machine(self, utf8_complete: Callable[[int], bool] | None = None) -> ReasoningBudget:
        m = ReasoningBudget([self.start], self.ends, self.forced, self.budget, IDLE, utf8_complete)
        m.prefill(self.prefill)
        return m

    def fields(self, text: str, *, thinking_tokens: int, answer_tokens: int, forced: bool,
               finish_reason: str) -> dict:
        """The reply's record fields (docs/thinking.md, "The reply record"): its split, the tokens of
        each part, and how the thinking ended."""
        sp = split(text, self.format, self.started_in_thinking, self.thinking_in_prompt)
        thought = self.started_in_thinking or bool(sp.reasoning) or thinking_tokens > 0 or not sp.closed
        if not thought:
            end = None
        elif not sp.closed:
            end = "context" if finish_reason == "length" else "stop"
        elif forced:
            end = "budget"
        else:
            end = "model"
        return {"reasoning_format": self.format.name, "reasoning": sp.reasoning, "answer": sp.answer,
                "thinking_tokens": int(thinking_tokens), "answer_tokens": int(answer_tokens),
                "thinking_closed": bool(sp.closed), "thinking_self_closed": end == "model",
                "thinking_forced": bool(forced), "thinking_end": end, "thinking_budget": int(self.budget)}


def reply_plan(setup: Setup | None, gen_prompt: str, tokenize: Callable[[str], Sequence[int]]) -> ReplyPlan | None:
    """The plan of one reply whose rendered prompt ends with ``gen_prompt`` (the reply's own turn as
    the template wrote it: :func:`generation_prompt`; "" for a prompt no template wrote). None for a
    family whose replies are not split (the engine then decodes exactly as without reasoning).
    ``tokenize(text)``: the model's tokens of a text, no BOS, special tokens parsed."""
    if setup is None or not setup.splits:
        return None
    fmt = setup.format
    st = prompt_state(gen_prompt, fmt)
    end = tuple(int(t) for t in tokenize(fmt.end))
    msg = tuple(int(t) for t in tokenize(setup.settings.reasoning_budget_message)) \
        if setup.settings.reasoning_budget_message else ()
    return ReplyPlan(fmt, st.started_in_thinking, st.thinking_in_prompt, tuple(int(t) for t in tokenize(fmt.start)),
                     (end,), msg + end, setup.settings.reasoning_budget,
                     tuple(int(t) for t in tokenize(gen_prompt)) if gen_prompt else ())


# -- what an exam scores ---------------------------------------------------------------------------

SPLIT_FIELDS = ("reasoning_format", "reasoning", "answer", "thinking_tokens", "answer_tokens", "thinking_closed",
                "thinking_self_closed", "thinking_forced", "thinking_end", "thinking_budget")


def has_split(rec: dict) -> bool:
    """Whether a reply record carries the split (a family whose replies are split)."""
    return "answer" in rec and "thinking_closed" in rec


def unanswered(rec: dict) -> bool:
    """The reply ended inside its thinking: it has no answer (verdict ``thinking_cap``)."""
    return has_split(rec) and not rec.get("thinking_closed")


def answer_view(rec: dict) -> dict:
    """The record an exam scores: its ``text`` is the answer alone (the whole reply kept as
    ``reply``); a record without the split is returned as it is."""
    if not has_split(rec):
        return rec
    return {**rec, "text": rec.get("answer") or "", "reply": rec.get("text", "")}


def cap_detail(rec: dict) -> str:
    """Why a ``thinking_cap`` item has no answer, for its verdict."""
    why = {"context": "the sequence's context ran out", "stop": "an end-of-generation token or a stop string came"}
    return (f"the reply ended inside its thinking ({why.get(rec.get('thinking_end'), rec.get('thinking_end'))}, "
            f"after {rec.get('thinking_tokens')} thinking tokens): no answer to score")
