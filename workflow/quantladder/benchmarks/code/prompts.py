"""BigCodeBench's chat prompting, rendered through the GGUF's own chat template.

BigCodeBench (bigcodebench/provider/utility.py, ``make_raw_chat_prompt``) wraps the task in an
instruction prefix (the `complete` prompt inside a plain code fence, the `instruct` prompt as
text), then renders a two-turn chat whose assistant turn is the response prefix followed by an
opened ```python fence and a splitter string; the prompt is everything before the splitter. The
model therefore starts writing inside a python block. EvalPlus uses the same prefixes for
HumanEval, so both suites share this path (HumanEval's prompt is a `complete`-style prompt).
"""

from __future__ import annotations

INSTRUCTION_PREFIX = ("Please provide a self-contained Python script that solves the following problem "
                      "in a markdown code block:")
RESPONSE_PREFIX = ("Below is a Python script with a self-contained function that solves the problem "
                   "and passes corresponding tests:")
SPLITTER = "-[[]]-quantladder-splitter-[[]]-"
# The reply ends at the python block's closing fence (EvalPlus's extra chat stop, "\n```\n").
STOP = ("\n```",)


def messages(task_prompt: str, split: str) -> list[dict]:
    """The two chat turns; ``split`` is 'complete' (code prompt, fenced) or 'instruct' (text)."""
    if split == "complete":
        user = f"{INSTRUCTION_PREFIX}\n```\n{task_prompt.strip()}\n```\n"
    elif split == "instruct":
        user = f"{INSTRUCTION_PREFIX}\n{task_prompt.strip()}\n"
    else:
        raise ValueError(f"prompt split {split!r}: use 'complete' or 'instruct'")
    assistant = f"{RESPONSE_PREFIX}\n```python\n{SPLITTER}\n```\n"
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def chat_prompt(render, task_prompt: str, split: str) -> str:
    """``render(messages) -> str`` is the chat template (``Engine.chat_prompt`` without a generation
    prompt); the returned prompt ends right after the opened ```python fence."""
    text = render(messages(task_prompt, split))
    if SPLITTER not in text:
        raise ValueError("the chat template dropped the assistant turn; cannot place the response prefix")
    return text.split(SPLITTER)[0]
