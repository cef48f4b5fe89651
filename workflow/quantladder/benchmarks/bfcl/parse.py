"""Decode a prompt-mode answer (``[func(a=1), g(b="x")]``) into calls, as BFCL's decoder accepts it.

BFCL (bfcl-eval 2026.3.23, model_handler/utils.py ``default_decode_ast_prompting``) strips code
fences, wraps the text in brackets when the model left them out, and reads it as a Python
expression: a call or a list of calls with keyword arguments, dotted names allowed. Java and
JavaScript answers are read as calls in those languages with ``name=value`` arguments whose values
stay source text (the checker converts them by declared type). Anything else is a parse failure,
recorded as such.

Python literals are read with ``ast`` only; arithmetic in an argument (``2*3``) is folded here over
numbers and strings alone, so nothing the model wrote is ever executed on this host.
"""

from __future__ import annotations

import ast
import operator
import re


class DecodeError(ValueError):
    """The output is not a call list in the expected syntax."""


def _wrap(text: str) -> str:
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    return text


def decode(text: str, language: str = "python"):
    """The decoded calls ``[{name: {param: value}}]``; raises DecodeError on a parse failure.

    For Java/JavaScript, BFCL's readers return only the first call; a JavaScript text that is valid
    but holds no call decodes to ``None`` (then "not in call format", not a parse failure).
    """
    wrapped = _wrap(text)
    try:
        if language == "python":
            return _decode_python(wrapped)
        if language == "java":
            return _decode_java(wrapped[1:-1])
        if language == "javascript":
            return _decode_js(wrapped[1:-1])
    except DecodeError:
        raise
    except (SyntaxError, ValueError, TypeError, AttributeError, AssertionError, RecursionError,
            ZeroDivisionError, OverflowError, MemoryError, IndexError, KeyError) as e:
        raise DecodeError(f"{type(e).__name__}: {e}") from e
    raise ValueError(f"unknown language {language!r}")


# -- Python -----------------------------------------------------------------------------------
def _decode_python(text: str) -> list[dict]:
    tree = ast.parse(text.strip().strip("'"), mode="eval")
    body = tree.body
    if isinstance(body, ast.Call):
        return [_call(body)]
    if not hasattr(body, "elts"):
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
    # Positional arguments are not read (BFCL asks for keyword arguments).
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords}}


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _fold(node):
    """Constant-fold an arithmetic expression over number/string literals; anything else fails."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex, str, bytes)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand)
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _fold(node.left), _fold(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(b, (int, float)) and abs(b) > 64:
            raise DecodeError("exponent too large to fold")
        if isinstance(node.op, ast.Mult) and (isinstance(a, (str, bytes)) or isinstance(b, (str, bytes))):
            if max(a if isinstance(a, int) else 0, b if isinstance(b, int) else 0) > 10000:
                raise DecodeError("string repetition too large to fold")
        return _BINOPS[type(node.op)](a, b)
    raise DecodeError(f"cannot evaluate {ast.unparse(node)!r} without running it")


def _value(node):
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # BFCL negates the operand's literal whatever the operator; an operand that is not a
        # literal is a decode failure there too.
        if not isinstance(node.operand, ast.Constant):
            raise DecodeError(f"unsupported unary operand {ast.unparse(node)!r}")
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp):
        return _fold(node)
    if isinstance(node, ast.Name):
        return node.id  # a variable name, compared as a string
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"unsupported value {type(node).__name__}: {ast.unparse(node)!r}")


# -- Java / JavaScript: a small tokenizer, enough for call expressions ------------------------
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<chr>'(?:[^'\\\n]|\\.)*')
  | (?P<tpl>`(?:[^`\\]|\\.)*`)
  | (?P<num>\d[\w.]*(?:[eE][+-]?\d+[fFdDlL]?)?)
  | (?P<id>[A-Za-z_$][\w$]*)
  | (?P<op>=>|==|!=|<=|>=|&&|\|\||[-+*/%=<>!&|^~?:;.,()\[\]{}@])
""", re.VERBOSE)


def _tokens(src: str) -> list[tuple[str, str, int, int]]:
    out, pos = [], 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise DecodeError(f"unexpected character {src[pos]!r} at {pos}")
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group(), m.start(), m.end()))
        pos = m.end()
    depth = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for kind, t, _, _ in out:
        if kind == "op" and t in "([{":
            depth.append(t)
        elif kind == "op" and t in ")]}":
            if not depth or depth.pop() != pairs[t]:
                raise DecodeError("unbalanced brackets")
    if depth:
        raise DecodeError("unbalanced brackets")
    return out


def _split_top(toks: list, sep: str = ",") -> list[list]:
    parts, cur, depth = [], [], 0
    for t in toks:
        if t[0] == "op" and t[1] in "([{":
            depth += 1
        elif t[0] == "op" and t[1] in ")]}":
            depth -= 1
        if depth == 0 and t[0] == "op" and t[1] == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def _match_paren(toks: list, i: int) -> int:
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][0] == "op" and toks[j][1] in "([{":
            depth += 1
        elif toks[j][0] == "op" and toks[j][1] in ")]}":
            depth -= 1
            if depth == 0:
                return j
    raise DecodeError("unbalanced brackets")


def _call_head(toks: list) -> tuple[str, int] | None:
    """``a.b.c(`` at the start of toks: (name, index of '(')."""
    i, names = 0, []
    while i < len(toks) and toks[i][0] == "id":
        names.append(toks[i][1])
        if i + 1 < len(toks) and toks[i + 1][1] == ".":
            i += 2
            continue
        i += 1
        break
    if names and i < len(toks) and toks[i][1] == "(":
        return ".".join(names), i
    return None


def _java_render(toks: list, src: str, top: bool) -> str:
    """The value text BFCL's Java reader produces: a literal unquoted at the top, a method call or
    identifier as written, array/object creation re-spelled, other expressions with spaces dropped."""
    if not toks:
        raise DecodeError("empty argument value")
    if len(toks) == 1 and toks[0][0] in ("str", "chr"):
        return toks[0][1][1:-1] if top else toks[0][1]
    head = _call_head(toks)
    if head and _match_paren(toks, head[1]) == len(toks) - 1:
        return src[toks[0][2]:toks[-1][3]]  # a method invocation stays as written
    if toks[0][1] == "new" and len(toks) > 1:
        rest = toks[1:]
        br = next((k for k, t in enumerate(rest) if t[1] in ("[", "(")), None)
        if br is not None and rest[br][1] == "[":
            type_txt = "".join(t[1] for t in rest[:br])
            init = rest[br:]
            k = next((k for k, t in enumerate(init) if t[1] == "{"), None)
            if k is not None:
                return f"new {type_txt}[]" + _java_render(init[k:], src, False)
        if br is not None and rest[br][1] == "(":
            type_txt = "".join(t[1] for t in rest[:br])
            end = _match_paren(rest, br)
            args = [a for a in _split_top(rest[br + 1:end]) if a]
            # An anonymous class body after the arguments ({{ put(...); }}) is not part of the text.
            return f"new {type_txt}(" + ", ".join(_java_render(a, src, False) for a in args) + ")"
    out = []
    for t in toks:  # tree-sitter's concatenation of the leaves: whitespace between tokens is lost
        out.append(t[1])
    return "".join(out)


def _java_syntax_check(toks: list) -> None:
    """What a Java parser rejects in call arguments: list literals, multi-character quotes."""
    for i, t in enumerate(toks):
        if t[0] == "op" and t[1] == "[" and (i == 0 or toks[i - 1][1] in ("=", ",", "(", "{", "[")):
            raise DecodeError("a [...] literal is not Java syntax")
        if t[0] == "chr" and len(t[1].encode().decode("unicode_escape", errors="ignore")) != 3:
            raise DecodeError(f"{t[1]} is not a Java character literal")
        if t[0] == "tpl":
            raise DecodeError("a template string is not Java syntax")


def _merge_generics(toks: list) -> list:
    """Fold ``Type<A, B>`` into one token so the commas inside do not split arguments."""
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t[1] == "<" and out and out[-1][0] == "id":
            depth, j = 0, i
            while j < len(toks):
                if toks[j][1] == "<":
                    depth += 1
                elif toks[j][1] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                elif toks[j][1] in ("(", ")", ";", "=", "{", "}"):
                    j = len(toks)
                    break
                j += 1
            if j < len(toks):
                prev = out.pop()
                text = prev[1] + "".join(x[1] for x in toks[i:j + 1])
                out.append(("id", text, prev[2], toks[j][3]))
                i = j + 1
                continue
        out.append(t)
        i += 1
    return out


def _decode_java(src: str):
    toks = _merge_generics(_tokens(src))
    _java_syntax_check(toks)
    if toks and toks[-1][1] == ";":
        toks = toks[:-1]
    head = _call_head(toks)
    if not head:
        raise DecodeError("no Java method invocation")
    name, lp = head
    rp = _match_paren(toks, lp)
    if rp != len(toks) - 1:
        raise DecodeError("text after the Java method invocation")
    args: dict = {}
    for arg in _split_top(toks[lp + 1:rp]):
        if not arg:
            continue
        if len(arg) >= 3 and arg[0][0] == "id" and arg[1][1] == "=":
            key, value = arg[0][1], _java_render(arg[2:], src, True)
        elif len(arg) == 1 and arg[0][0] == "id" and arg[0][1] not in ("true", "false", "null"):
            key, value = None, arg[0][1]  # a bare identifier: an unnamed argument
        else:
            continue  # unnamed literals are not read
        if key in args:
            raise DecodeError(f"argument {key!r} given twice")
        args[key] = value
    return [{name: args}]


def _decode_js(src: str):
    toks = _tokens(src)
    if toks and toks[-1][1] == ";":
        toks = toks[:-1]
    head = _call_head(toks)
    if not head or _match_paren(toks, head[1]) != len(toks) - 1:
        return None  # valid or not, no single call expression: BFCL's reader returns nothing
    name, lp = head
    args: dict = {}
    for arg in _split_top(toks[lp + 1:len(toks) - 1]):
        if not arg:
            continue
        if len(arg) >= 3 and arg[0][0] == "id" and arg[1][1] == "=":
            key = arg[0][1]
            value = src[arg[2][2]:arg[-1][3]]
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
        elif len(arg) == 1 and (arg[0][0] == "id" and arg[0][1] not in ("false", "null")):
            key, value = None, arg[0][1]
        else:
            continue
        if key in args:
            raise DecodeError(f"argument {key!r} given twice")
        args[key] = value
    return [{name: args}]


def to_execution_strings(calls: list[dict]) -> list[str]:
    """Calls as Python call strings, ``f(a='x', b=1)`` (BFCL's form for executing multi-turn calls)."""
    def fmt(v):
        if isinstance(v, dict):
            if v and all(isinstance(x, dict) for x in v.values()):
                fname, fargs = next(iter(v.items()))
                return f"{fname}(" + ", ".join(f"{k}={fmt(x)}" for k, x in fargs.items()) + ")"
            return "{" + ", ".join(f"'{k}': {fmt(x)}" for k, x in v.items()) + "}"
        return repr(v)

    out = []
    for call in calls:
        for name, args in call.items():
            out.append(f"{name}(" + ", ".join(f"{k}={fmt(v)}" for k, v in args.items()) + ")")
    return out
