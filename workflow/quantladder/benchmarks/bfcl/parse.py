"""Decode a prompt-mode answer (``[func(a=1), g(b="x")]``) into calls, as BFCL's decoder does.

BFCL (bfcl-eval 2026.3.23, model_handler/utils.py ``default_decode_ast_prompting`` and ``ast_parse``)
strips backticks, newlines and spaces from both ends, wraps the text in brackets when the model left
them out, and then:

- Python: strips single quotes from both ends and reads the text as one Python expression, a call
  or a list/tuple/set of calls; keyword arguments only (positional ones are dropped), dotted names
  kept. A value is resolved by its node (``resolve_ast_by_type``): a literal as itself, ``-x`` as the
  negated literal whatever the unary operator, lists/dicts/tuples element by element, a bare name as
  its spelling, a call without keywords as its source text, a call with keywords as a nested call,
  a subscript as its source text, and a binary operation as the value Python evaluates for it. The
  last is the one place BFCL runs the model's text (``eval``); here :mod:`.pyeval` computes it
  without running anything, so nothing the model wrote is executed on this host.
- Java / JavaScript: the text inside the brackets goes to tree-sitter (:mod:`.tsparse`); values stay
  source text (the checker converts them by declared type).

Any failure along the way is a parse failure (BFCL: any exception), raised as :class:`DecodeError`.
"""

from __future__ import annotations

import ast

from . import pyeval, tsparse


class DecodeError(ValueError):
    """The output is not a call list in the expected syntax."""


class Refused(DecodeError):
    """A value BFCL would evaluate but this decoder does not (see pyeval; a documented deviation)."""


def _wrap(text: str) -> str:
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    return text


def decode(text: str, language: str = "python"):
    """The decoded calls ``[{name: {param: value}}]``; raises DecodeError on a parse failure.

    Java returns ``{}`` and JavaScript ``None`` when the program holds no call (then the verdict is
    "wrong output format", not a parse failure), as BFCL's readers do.
    """
    if language not in ("python", "java", "javascript"):
        raise ValueError(f"unknown language {language!r}")
    wrapped = _wrap(text)
    try:
        if language == "python":
            return _decode_python(wrapped)
        if language == "java":
            return tsparse.java_calls(wrapped[1:-1])
        return tsparse.js_calls(wrapped[1:-1])
    except DecodeError:
        raise
    except pyeval.Refused as e:
        raise Refused(str(e)) from e
    except Exception as e:  # BFCL counts any exception of its decoder as a decode failure
        raise DecodeError(f"{type(e).__name__}: {e}") from e


# -- Python -----------------------------------------------------------------------------------
def _decode_python(text: str) -> list[dict]:
    body = ast.parse(text.strip().strip("'"), mode="eval").body
    if isinstance(body, ast.Call):
        return [_call(body)]
    if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        raise DecodeError(f"not a call list: {type(body).__name__}")
    out = []
    for el in body.elts:
        if not isinstance(el, ast.Call):
            raise DecodeError(f"list element is a {type(el).__name__}, not a call")
        out.append(_call(el))
    return out


def _call(node: ast.Call) -> dict:
    parts = []
    f = node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords}}


def _value(node):
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # BFCL negates the operand's literal whatever the operator (``+5`` and ``~5`` give -5,
        # ``not 0`` gives 0); an operand that is not a literal fails there.
        if not isinstance(node.operand, ast.Constant):
            raise DecodeError(f"unsupported unary operand {type(node.operand).__name__}")
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("a ** entry in a dict value")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp):
        return pyeval.evaluate(node)
    if isinstance(node, ast.Name):
        return node.id  # a variable name, compared as a string
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Lambda):
        raise DecodeError("a lambda value")  # BFCL's lambda branch always raises
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"unsupported value {type(node).__name__}")


def to_execution_strings(calls: list[dict]) -> list[str]:
    """Calls as Python call strings, ``f(a='x', b=1)`` (BFCL's ``decoded_output_to_execution_list``).

    A dict value whose values are all dicts is rendered as a nested call (its first key the name);
    other dicts as ``{'k': v}`` with the key's str; everything else by repr. An empty dict value
    fails there (no first key) and fails here; so does a repr Python refuses (an int over its
    digit limit).
    """
    def fmt(v):
        if isinstance(v, dict):
            if all(isinstance(x, dict) for x in v.values()):
                if not v:
                    raise DecodeError("an empty dict value cannot be rendered as a call")
                fname = next(iter(v))
                return f"{fname}(" + ", ".join(f"{k}={fmt(x)}" for k, x in v[fname].items()) + ")"
            return "{" + ", ".join(f"'{k}': {fmt(x)}" for k, x in v.items()) + "}"
        return repr(v)

    out = []
    try:
        for call in calls:
            for name, args in call.items():
                out.append(f"{name}(" + ", ".join(f"{k}={fmt(v)}" for k, v in args.items()) + ")")
    except DecodeError:
        raise
    except Exception as e:
        raise DecodeError(f"{type(e).__name__}: {e}") from e
    return out
