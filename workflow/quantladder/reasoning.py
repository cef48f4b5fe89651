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
            "name its format (families.{family}.reasoning_format) if it is one of "
            f"{', '.join(n for n, f in FORMATS.items() if f.kind in (TAGS, HARMONY))}")
    if fmt.kind == NONE and settings.reasoning == "on":
        raise ConfigError(f"{source}: key generation.reasoning: 'on', but family {family}'s chat template cannot "
                          "think (reasoning format none): set reasoning to auto or off, or name the family's "
                          f"format (families.{family}.reasoning_format) if its model thinks anyway")


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
        template that opens ``<think>\\n`` itself starts the reply COUNTING, its ``\\n`` spent)."""
        for t in tokens:
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


def is_set(cfg: dict, family: str | None = None) -> bool:
    """Whether the config sets any reasoning key (or, with ``family``, names the family's format):
    only then do the settings enter a point's generation key and refuse what a family cannot do."""
    g = cfg.get("generation") or {}
    if any(g.get(k) is not None for k in KEYS):
        return True
    return bool(family and (((cfg.get("families") or {}).get(family) or {}).get("reasoning_format")))


@dataclass(frozen=True)
class Setup:
    """How one family generates: its format, the settings, and whether the config set them
    (``explicit``). A family whose format thinks in markers split here (``splits``) always gets the
    kwargs (``auto`` when nothing is set, as llama-server) and the split; a family that cannot think
    gets the kwargs only where the config set a key, so a config that sets none renders, decodes and
    records its replies exactly as before the keys existed."""

    family: str
    format: Format
    settings: Settings
    explicit: bool

    @property
    def splits(self) -> bool:
        return self.format.kind in (TAGS, HARMONY)

    @property
    def kwargs(self) -> dict | None:
        if not (self.explicit or self.splits):
            return None
        return template_kwargs(self.format, self.settings)

    def record(self) -> dict:
        """What a generate job's meta keeps of it."""
        return {"family": self.family, "format": self.format.name, "explicit": self.explicit,
                "split": self.splits, **self.settings._asdict(), "template_kwargs": self.kwargs}


def setup_for(cfg: dict, family: str, template: str | None, source: str = "config") -> Setup:
    """The family's setup from the config and its chat template's text; a setting the family cannot
    honour is a ConfigError naming the family and the key (:func:`check_family`). A base model
    (``chat: false``) renders no template: the settings do not apply to it (format ``none``, nothing set)."""
    fam = (cfg.get("families") or {}).get(family) or {}
    settings = validate_generation(cfg.get("generation"), source)
    if not fam.get("chat", True):
        return Setup(family, FORMATS["none"], settings, False)
    fmt = family_format(template, fam.get("reasoning_format"),
                        where=f"{source}: key families.{family}.reasoning_format")
    explicit = is_set(cfg, family)
    if explicit:
        check_family(fmt, settings, family, source)
    return Setup(family, fmt, settings, explicit)


_TEMPLATES: dict[tuple, str | None] = {}


def planning_template(fam: dict) -> tuple[bool, str | None]:
    """The family's chat template as planning can read it without downloading anything: ``(True,
    text)`` from a local file (a ``path``, an installed ``package``, a hub file already in the cache,
    the first of ``parts``), ``(False, None)`` where the file is not on this machine yet (the
    generate job checks it then). Only the header is read."""
    from .gguf_meta import scan_header
    from .models import chat_template_text, locate_package_file, source_kind

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
            path = locate_package_file(src["package"], src.get("file", "*.gguf"))
        else:
            from huggingface_hub import try_to_load_from_cache

            hf = src.get("hf") or {}
            got = try_to_load_from_cache(hf.get("repo_id", ""), hf.get("filename", ""), revision=hf.get("revision"),
                                         repo_type=hf.get("repo_type", "model"))
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
    """At planning (config validation, the DAG's build): every enabled chat family whose config sets
    reasoning is checked against its template where the file is on this machine (a hub file not
    fetched yet is checked by its generate job, with the same error)."""
    if not any(is_set(cfg, f) for f in cfg.get("families") or {}):
        return
    validate_generation(cfg.get("generation"), source)
    for name, fam in (cfg.get("families") or {}).items():
        fam = fam or {}
        if not fam.get("enabled", True) or not fam.get("chat", True) or not is_set(cfg, name):
            continue
        if fam.get("reasoning_format"):
            setup_for(cfg, name, None, source)
            continue
        found, template = planning_template(fam)
        if found:
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
