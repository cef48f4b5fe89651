"""BFCL's prompting (non-FC) mode: the system prompt that lists the functions as JSON and asks for
``[func(a=1), g(b=2)]``, merged with an item's own system message, then rendered by the GGUF's own
chat template (the raw completion path: no tool-calling API in between).

The prompt text is BFCL's default (``ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&
prompt_fmt=plaintext&style=classic``). It is read from the pinned data's
``constants/default_prompts.py`` (parsed with ``ast``, never imported), so the wording is exactly the
version recorded in the manifest and is not copied into this project.
"""

from __future__ import annotations

import ast
import copy
import json
from functools import lru_cache
from pathlib import Path

from ...errors import DataError
from .data import PROMPTS_FILE

# BFCL adds a language note to every function description and, for Java/JavaScript, turns each
# parameter into a string-typed one with its original type named in the description
# (bfcl_eval/utils.py, the language-specific hint step).
_LANG_NOTE = {"java": " Note that the provided function is in Java 8 SDK syntax.",
              "javascript": " Note that the provided function is in JavaScript syntax.",
              "python": " Note that the provided function is in Python 3 syntax."}
_LANG_NAME = {"java": "Java", "javascript": "JavaScript"}


def language_of(category: str) -> str:
    if category.endswith("java"):
        return "java"
    if category.endswith("javascript"):
        return "javascript"
    return "python"


def with_language_hints(functions: list[dict], category: str) -> list[dict]:
    """The function docs as the model sees them (the checker uses the originals)."""
    lang = language_of(category)
    funcs = copy.deepcopy(functions)
    for f in funcs:
        f["description"] = f["description"] + _LANG_NOTE[lang]
        if lang == "python":
            continue
        name = _LANG_NAME[lang]
        for p in f["parameters"]["properties"].values():
            if p["type"] == "any":
                p["description"] += f" This parameter can be of any type of {name} object in string representation."
            else:
                p["description"] += f" This is {name} {p['type']} type parameter in string representation."
            array_types = ("ArrayList", "Array") if lang == "java" else ("array",)
            if p["type"] in array_types:
                p["description"] += (f" The list elements are of type {p['items']['type']}; "
                                     "they are not in string representation.")
                del p["items"]
            if lang == "javascript" and p["type"] == "dict" and "properties" in p:
                p["description"] += (" The dictionary entries have the following schema; they are not in string "
                                     f"representation. {json.dumps(p['properties'])}")
                del p["properties"]
            p["type"] = "string"
    return funcs


@lru_cache(maxsize=4)
def _templates(root: str) -> dict:
    path = Path(root) / PROMPTS_FILE
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as e:
        raise DataError(f"{path}: cannot read BFCL's prompt templates: {e}") from e
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass  # expressions (string concatenations) are not needed
    for key in ("OUTPUT_FORMAT_MAPPING", "PARAM_TYPE_MAPPING", "PROMPT_STYLE_TEMPLATES",
                "_PLAINTEXT_SYSTEM_PROMPT_TEMPLATE", "DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC"):
        if key not in found:
            raise DataError(f"{path}: no {key} (a BFCL version with another prompt layout?)")
    return found


def system_prompt(root: str | Path, functions: list[dict]) -> str:
    t = _templates(str(root))
    style = t["PROMPT_STYLE_TEMPLATES"]["classic"]
    call_format = style["tool_call_no_tag"].format(output_format=t["OUTPUT_FORMAT_MAPPING"]["python"],
                                                   param_types=t["PARAM_TYPE_MAPPING"]["python"])
    tools = style["available_tools"].format(format="json", functions=json.dumps(functions, indent=4))
    return t["_PLAINTEXT_SYSTEM_PROMPT_TEMPLATE"].format(
        persona=style["persona"], task=style["task"], tool_call_format=call_format,
        multiturn_behavior=style["multiturn_behavior"], available_tools=tools)


def first_messages(root: str | Path, item: dict) -> list[dict]:
    """System prompt (merged with the item's own system message) + the first turn's messages."""
    funcs = with_language_hints(item["function"], item["category"])
    sp = system_prompt(root, funcs)
    msgs = copy.deepcopy(item["question"][0])
    if msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = sp + "\n\n" + msgs[0]["content"]
    else:
        msgs.insert(0, {"role": "system", "content": sp})
    return msgs


def added_functions_message(root: str | Path, functions: list[dict]) -> dict:
    """The user message that offers held-out functions at a miss_func turn (BFCL's wording)."""
    t = _templates(str(root))
    return {"role": "user", "content": f"{functions}\n" + t["DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC"]}


def tool_messages(results: list[str], calls: list[str]) -> list[dict]:
    """Execution results fed back to the model, one tool message per call, as text UTF-8 can carry."""
    return [{"role": "tool", "name": as_text(c), "content": as_text(r)} for r, c in zip(results, calls)]


def as_text(s: str) -> str:
    """``s``, with every code point that UTF-8 cannot encode (half of a surrogate pair, which a call such as
    ``str(object="\\udc80")`` returns from the sandbox) written as Python writes it in a repr (``\\udc80``).
    The prompt is tokenized as UTF-8, so such a result would otherwise stop the generate job on every
    rerun; escaped, the model reads what the call returned, and the item goes on to its verdict."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
